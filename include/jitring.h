/* SPDX-License-Identifier: MIT */
/*
 * jitring: tell Linux perf about JIT code from many threads without a
 * process-wide lock.
 *
 * A writer (struct jitring) owns one perf jitdump file, <dir>/jit-<pid>.dump
 * (a writer opened after an earlier one of the process was closed continues
 * that dump: see jitring_open()).  Each jitring_write() describes one
 * function: an optional UNWINDING_INFO
 * record (DWARF .eh_frame), an optional DEBUG_INFO record (a line table) and
 * a CODE_LOAD record with a code_index unique in the process.  The records of
 * one call are always contiguous in the file, because perf attaches
 * UNWINDING_INFO and DEBUG_INFO to the next CODE_LOAD in file order.
 *
 * Two engines sit behind the same API:
 *  - JITRING_ENGINE_RINGS (the default): each thread encodes into its own
 *    lock-free ring; one background thread per writer merges all rings in
 *    timestamp order into the file (under heavy load on 4 CPUs or more, a
 *    second one does the file writes it has put in order; the environment
 *    variable JITRING_WRITE_THREAD=0 or 1 overrides that).  No lock, no
 *    system call and no allocation on the calling thread in steady state.
 *  - JITRING_ENGINE_MUTEX: the design every runtime uses today (one lock
 *    around the whole group, fwrite into a 2 MiB FILE buffer).  Kept as the
 *    yardstick for benchmarks.
 *
 * Conventions: functions that return int return 0 (or a count >= 0) on
 * success and a negative errno value on failure; errno is never the error
 * channel.  Nothing is printed; diagnostics go to the optional log hook.
 *
 * Concurrency table ("-" = may overlap freely, "X" = caller must serialise,
 * "E" = not allowed at all, see the note).  Rows and columns: open,
 * write/move, flush, stats, thread_detach, close, trampolines_new,
 * trampolines_get/_get_parts/_reuse/_reuse_parts, trampolines_rebind,
 * trampolines_free (the last four on the same set of trampolines).
 *
 *                 open write flush stats detach close t_new t_get t_rebind t_free
 *   open           -    -     -     -     -      -     -     -     -       -
 *   write/move     -    -     -     -     -     (1)    -     -     -       -
 *   flush          -    -     -     -     -     (1)    -     -     -       -
 *   stats          -    -     -     -     -      -     -     -     -       -
 *   thread_detach  -    -     -     -     -      -     -     -     -       -
 *   close          -   (1)   (1)    -     -     (2)   (1)   (1)   (5)     (3)
 *   t_new          -    -     -     -     -     (1)    -     -     -       -
 *   t_get          -    -     -     -     -     (1)    -     -    (5)     E(4)
 *   t_rebind       -    -     -     -     -     (5)    -    (5)    X       X
 *   t_free         -    -     -     -     -     (3)    -    E(4)   X       X
 *
 * (1) A call that overlaps jitring_close() either completes normally (and
 *     what it wrote is in the file) or returns -ESHUTDOWN and writes nothing.
 * (2) A second close of the same writer returns -EBADF.  The handle stays
 *     valid after close: every later call on it returns -ESHUTDOWN (stats
 *     still report the final counters), so a racing thread never touches
 *     freed memory.  A closed handle's 640 bytes, and its dump's
 *     descriptor and lock, are kept until exit (see jitring_open()).
 * (3) jitring_trampolines_free() returns -EBUSY until jitring_close() has
 *     returned.
 * (4) free() unmaps the copies: no get() may run, or follow, on that set,
 *     and no thread may still run code in a copy.
 * (5) rebind() returns -EBUSY until the set's writer is closed, and
 *     -ESHUTDOWN if the new writer's close has started; a get() racing it
 *     describes its copy through either writer (see (1) for the old one).
 * jitring_pause() overlaps everything as jitring_flush() does.
 *
 * Fork: the child gets its own jit-<childpid>.dump and a working writer for
 * every writer that was open in the parent; entries the parent had not yet
 * written stay the parent's.  The child keeps no descriptor of the parent's
 * files (so it never keeps them locked, see jitring_open()).  Not
 * async-signal-safe: see jitring_write().
 *
 * A main thread that leaves through pthread_exit() (in a fork child: the
 * thread that forked) does not keep the process alive through jitring's
 * threads, which never exit by themselves: once every other thread of the
 * application has ended too, a "jitring-reaper" thread calls exit(0), as
 * glibc's last thread would have, so atexit handlers run (jitring's
 * finishes every open writer as at any exit, see jitring_close()), stdio
 * is flushed and the status is 0.  That thread exists only after main's
 * pthread_exit(), and only once a writer was opened; it checks
 * /proc/self/task every 10 ms, backing off to every 250 ms.  jitring's
 * threads block every signal; the reaper, once no application thread is
 * left, unblocks those whose default action ends the process, so SIGTERM
 * or Ctrl-C ends it even while the dump is being finished.  While an
 * application thread lives, signals go to the application's threads as
 * they would without jitring.  jitring learns of main's pthread_exit()
 * when the library was loaded on the main thread (at start-up, or
 * dlopen() there), or main called jitring_open(), or main had already
 * left at a jitring_open(); a library dlopen()ed by another thread of a
 * process whose main never calls jitring_open() and leaves later is not
 * covered.
 */
#ifndef JITRING_H
#define JITRING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(JITRING_STATIC)
#define JITRING_API __attribute__((visibility("default")))
#else
#define JITRING_API
#endif

#define JITRING_VERSION_MAJOR 0
#define JITRING_VERSION_MINOR 2

/** Longest function or file name, in bytes, without the NUL. */
#define JITRING_NAME_MAX 4095u
/** Largest code_size perf accepts (perf rejects 2 GiB and more). */
#define JITRING_CODE_MAX 0x7fffffffu
/** Largest .eh_frame accepted in one entry. */
#define JITRING_EH_FRAME_MAX 4096u
/** Most line-table rows in one entry (the caller's: see @lines of struct
 * jitring_entry for the closing row the library may add). */
#define JITRING_LINES_MAX 65536u

struct jitring;

/**
 * enum jitring_engine - Which implementation backs a writer.
 * @JITRING_ENGINE_DEFAULT: the recommended engine (currently RINGS).
 * @JITRING_ENGINE_RINGS: per-thread lock-free rings and a background flusher.
 * @JITRING_ENGINE_MUTEX: one process-wide mutex, fwrite into a 2 MiB FILE
 *	buffer on the calling thread (CPython's perf_jit_trampoline.c design).
 */
enum jitring_engine {
	JITRING_ENGINE_DEFAULT = 0,
	JITRING_ENGINE_RINGS = 1,
	JITRING_ENGINE_MUTEX = 2,
};

/* Flags for jitring_config.flags. */
/** Write a JIT_CODE_CLOSE record at close (ends perf's parsing; samply
 *  drops all mappings on it).  Off by default. */
#define JITRING_F_WRITE_CLOSE (1u << 0)
/** Rings engine: when the calling thread's ring is full, return -EAGAIN at
 *  once and count the entry instead of waiting for the flusher. */
#define JITRING_F_DROP (1u << 1)
/** Also write /tmp/perf-<pid>.map lines ("<hex addr> <hex size> <name>")
 *  for every CODE_LOAD, in the same order, from the same thread that writes
 *  the dump (the flusher, or the caller under the mutex engine's lock).
 *  The map is claimed like the dump (see jitring_open()): one open writer
 *  of the process has it; a later one continues it. */
#define JITRING_F_PERF_MAP (1u << 2)
/** At jitring_close(), let go of the dump's descriptor and lock instead
 *  of keeping them until exit (the perf map's are kept: a later writer
 *  takes them over, whatever its directory): for a dump that no later
 *  writer continues, such as one per profiling window, each in a folder of
 *  its own, where a long-lived process would otherwise keep a descriptor
 *  per window.  The file stays; once let go it is stale to a later
 *  jitring_open() in its directory (by this process or one with our pid in
 *  another pid namespace), which replaces it instead of continuing it. */
#define JITRING_F_RELEASE (1u << 3)
/** Back the arenas of trampoline sets (jitring_trampolines_new()) with an
 *  ELF file in the dump's directory, jitring-tramp-<pid>-<random>.so:
 *  the slots' places as .text (a hole in the file where the slots can
 *  be written into the process's private memory over it), one FDE per
 *  slot in .eh_frame, a sorted .eh_frame_hdr, so that perf's DWARF
 *  unwinding (perf record
 *  --call-graph dwarf) reads the copies' unwind rules from the file the
 *  mappings name, with no perf inject.  The file is made new (O_EXCL,
 *  never through a symbolic link, mode 0700), only in a directory that
 *  no one but the user (or root) can write, and stays after the set is
 *  freed (perf reads it when the recording is finished): about 27 KiB on
 *  disk per 682 copies of the built-in template (a sparse file; 92 KiB
 *  where the slots are written to it).  Where
 *  it cannot be made (a template without CFI, another's directory, a
 *  noexec mount), the set logs a warning and uses the memfd image. */
#define JITRING_F_TRAMPOLINE_ELF (1u << 4)
#define JITRING_F_ALL                                                          \
	(JITRING_F_WRITE_CLOSE | JITRING_F_DROP | JITRING_F_PERF_MAP |         \
	 JITRING_F_RELEASE | JITRING_F_TRAMPOLINE_ELF)

/* Levels passed to the log hook. */
#define JITRING_LOG_ERR 3
#define JITRING_LOG_WARNING 4
#define JITRING_LOG_INFO 6
#define JITRING_LOG_DEBUG 7

/**
 * typedef jitring_log_fn - Diagnostics hook.
 * @arg: jitring_config.log_arg.
 * @level: one of JITRING_LOG_*.
 * @msg: NUL-terminated message without a trailing newline.
 *
 * Called from any thread, including the background flusher (and the
 * reaper, see the top of this file); must not call back into jitring.
 */
typedef void (*jitring_log_fn)(void *arg, int level, const char *msg);

/**
 * struct jitring_config - Options for jitring_open().
 * @struct_size: sizeof(struct jitring_config) as the caller compiled it.
 *	At least JITRING_CONFIG_SIZE_V1.  The library reads min(struct_size,
 *	its own size) bytes; fields a later version appends default to zero
 *	for callers built against this one; bytes the library does not know
 *	(a caller built against a newer header) must be zero, or open fails
 *	with -E2BIG.  Use jitring_config_init() or JITRING_CONFIG_INIT.
 * @engine: enum jitring_engine.
 * @flags: JITRING_F_* bits.
 * @dir: directory for jit-<pid>.dump; NULL means $JITRING_DIR, else /tmp.
 * @ring_size: rings engine, bytes per thread ring (power of two, 4 KiB to
 *	64 MiB; rounded up to the page size); 0 means adaptive: rings start at 64 KiB and a thread whose
 *	ring keeps filling gets one twice as large, up to 4 MiB and up to its
 *	share of a quarter of @mem_budget (so few busy threads get large
 *	rings, thousands keep 64 KiB).
 * @max_delay_ms: rings engine, longest time an entry waits in a ring before
 *	the flusher writes it, unless a stalled thread holds it back; 0 means
 *	20 ms.
 * @holdback_ms: rings engine, how long the flusher holds later entries back
 *	for a thread that took its timestamp but has not committed; after that
 *	the thread's entry is re-stamped when it commits (see docs/design.md);
 *	0 means 10 ms.
 * @mem_budget: rings engine, most bytes of ring buffers (address space;
 *	resident memory is what threads touch) in use at once, the pool's
 *	and threads' (spare rings count once a thread takes one); a thread that
 *	would need a ring beyond it gets -ENOMEM; 0 means 512 MiB (8192 rings
 *	of 64 KiB).
 * @log: optional diagnostics hook, NULL for none.
 * @log_arg: passed to @log.
 * @elf_mach: e_machine written to the header; 0 means the host's.
 * @reserved: must be zero.
 * @ready_rings: (version 2) rings engine, how many threads' rings to keep
 *	ready at least, for a runtime that knows how many threads may make
 *	their first write at once (a storm of new threads then finds a ring
 *	each instead of making one).  Each costs address space within
 *	@mem_budget, a 320-byte control block and one resident page (the
 *	one its first write lands on, touched ahead and kept through idle
 *	trims).  0 means 64.  The engine keeps more while threads keep
 *	taking them (the stock follows the measured demand; those extra
 *	rings have no resident page until their thread writes) and gives
 *	the extra back once demand stops.  Beyond these it keeps 4096
 *	spare rings (their address space at most half of @mem_budget, and
 *	not counted in it until a thread takes one; no resident page, not
 *	even the control block's) for storms nobody announced: a thread
 *	that takes one faults in a page or two on its first write, but
 *	makes no system call.  With adaptive rings it also keeps 1020 spare
 *	128 KiB successors (at most a quarter of @mem_budget; as many as
 *	the growth budget lets first rings grow), for first rings that
 *	fill before the background thread could make theirs.  Under
 *	vm.overcommit_memory=2, which charges untouched mappings, a quarter
 *	of the spares and an eighth of the successors.
 * @ready_copies: (version 2) trampoline copies to keep ready at least, per
 *	set of trampolines (see jitring_trampolines_new()); 0 means ten
 *	arenas' worth: 1,740,800 copies of the built-in x86_64 template,
 *	enough for 4096 new threads taking 400 copies each at once.
 *	Arenas map one sealed image of the set's copies (1 MiB of memory
 *	for the built-in template, once per set), normally 16 times back
 *	to back, and cost no memory of their own (address space: 16 MiB
 *	each for the built-in template, more for templates over 2 KiB; 192
 *	MiB for the default stock with the current arena and the successor
 *	linked to it).
 *	Where the slots do not tile the image, an arena maps it once and 0
 *	means two arenas; where an executable memfd is refused, two arenas,
 *	each written when made (about 96 bytes a copy for the built-in
 *	template).  A value below the default lowers the stock (a runtime
 *	with many sets, or few threads), to no fewer than two ready arenas.
 *	The engine keeps more while threads take them (twice the arenas
 *	taken per 100 ms) and unmaps the extra ones within about a second
 *	once takes stop.
 */
struct jitring_config {
	uint32_t struct_size;
	uint32_t engine;
	uint32_t flags;
	uint32_t ring_size;
	const char *dir;
	uint32_t max_delay_ms;
	uint32_t holdback_ms;
	uint64_t mem_budget;
	jitring_log_fn log;
	void *log_arg;
	uint32_t elf_mach;
	uint32_t reserved;
	/* Version 2. */
	uint32_t ready_rings;
	uint32_t ready_copies;
};

/*
 * Sizes of each version of the caller-sized structs: frozen.  A
 * struct_size below version 1 is refused; fields are only ever appended,
 * and a caller built against an older version gets the defaults of what
 * it lacks.
 */
#define JITRING_CONFIG_SIZE_V1 64u
#define JITRING_CONFIG_SIZE_V2 72u
#define JITRING_STATS_SIZE_V1 192u
#define JITRING_STATS_SIZE_V2 200u
#define JITRING_TRAMPOLINE_TEMPLATE_SIZE_V1 32u

/** Static initializer for C; C++ callers use jitring_config_init(). */
#define JITRING_CONFIG_INIT                                                    \
	{                                                                      \
		sizeof(struct jitring_config), 0, 0, 0, NULL, 0, 0, 0, NULL,   \
			NULL, 0, 0, 0, 0                                       \
	}

/**
 * struct jitring_line - One row of a DEBUG_INFO line table.
 * @addr: code address the row starts at; rows in non-decreasing order.
 *	A row covers the code from @addr to the next row's @addr, and the
 *	last row covers the code to the end of the function (code_addr +
 *	code_size): the library closes the table there (see struct
 *	jitring_entry), so there is no need to end it with a row of its own.
 * @line: source line number.
 * @discrim: DWARF discriminator, usually 0.
 * @file: NUL-terminated source file name, at most JITRING_NAME_MAX bytes.
 *	An absolute path is best: perf report, perf script and addr2line
 *	print it as given, and perf annotate shows the source next to the
 *	code wherever it runs.  A relative name also works for srcline
 *	reports, but perf annotate finds the source only when it runs in
 *	the directory the name is relative to (perf's line program has no
 *	directory table).  A name with no file behind it ("<eval>") gives
 *	line numbers without source text.
 */
struct jitring_line {
	uint64_t addr;
	int32_t line;
	int32_t discrim;
	const char *file;
};

/**
 * struct jitring_str - A piece of a name.
 * @ptr: @len bytes (no NUL needed, and none allowed among them).
 * @len: bytes at @ptr; 0 is allowed.
 */
struct jitring_str {
	const char *ptr;
	size_t len;
};

/** Most pieces in jitring_entry.name_parts. */
#define JITRING_NAME_PARTS_MAX 16u

/**
 * struct jitring_entry - One function to describe to perf.
 * @name: NUL-terminated symbol name, 1 to JITRING_NAME_MAX bytes; NULL
 *	when the name is given in @name_parts.
 * @code_addr: run-time address of the code (non-NULL).
 * @code_size: bytes of code, 1 to JITRING_CODE_MAX.
 * @code_bytes: bytes written to the dump as the code; NULL means the
 *	@code_size bytes at @code_addr (they must be readable).  A runtime
 *	passes a patched copy here, e.g. to salt build-ids.
 * @eh_frame: optional .eh_frame bytes (one CIE, then one FDE whose
 *	pc_begin uses the pcrel|sdata4 encoding), or NULL.  The library
 *	rewrites pc_begin for the address perf maps the data at
 *	(code_addr + ALIGN_8(code_size)), appends the 20-byte .eh_frame_hdr
 *	and sets mapped_size; see jitring_eh_frame_build().
 * @eh_frame_size: bytes at @eh_frame, a multiple of 4 (so must be each
 *	record's length), at most JITRING_EH_FRAME_MAX; 0 when @eh_frame is
 *	NULL.
 * @nr_lines: rows at @lines, at most JITRING_LINES_MAX; 0 for no DEBUG_INFO.
 * @lines: the line table, or NULL when @nr_lines is 0.  When its last row
 *	starts inside the code (addr < code_addr + code_size), the DEBUG_INFO
 *	record gets one more row at code_addr + code_size repeating the last
 *	row's line, discriminator and file: perf ends the line program it
 *	generates at the last row's address, so without it the code after
 *	the last row (often the hot loop) has no source line in perf ("??:0").
 *	A table that already ends at or past the end of the code is written
 *	as given.  The extra row is not counted against JITRING_LINES_MAX
 *	and never makes a call fail; it costs 17 bytes plus the file name.
 * @flags: 0.  Reserved so the entry can grow: a later version announces
 *	each field it appends after @name_parts with a bit here, and reads
 *	that field only when the bit is set, so an entry built against this
 *	header stays valid.  Unknown bits: -EINVAL.
 * @nr_name_parts: pieces at @name_parts, 0 to JITRING_NAME_PARTS_MAX; 0
 *	means the name is @name.
 * @name_parts: the name as pieces, concatenated (with @name NULL): 1 to
 *	JITRING_NAME_MAX bytes in all, no NUL among them.  They are copied
 *	straight into the record, so a runtime that names code
 *	"py::<qualname>:<file>" passes four pieces and formats nothing.
 */
struct jitring_entry {
	const char *name;
	const void *code_addr;
	uint64_t code_size;
	const void *code_bytes;
	const void *eh_frame;
	uint32_t eh_frame_size;
	uint32_t nr_lines;
	const struct jitring_line *lines;
	uint32_t flags;
	uint32_t nr_name_parts;
	const struct jitring_str *name_parts;
};

/**
 * struct jitring_stats - Counters of one writer.
 * @struct_size: sizeof(struct jitring_stats) as the caller compiled it, at
 *	least JITRING_STATS_SIZE_V1; the library fills min(struct_size, its
 *	own size) bytes (struct_size itself is left as the caller set it).
 * @engine: the engine in use (enum jitring_engine, never DEFAULT).
 * @entries_written: groups (one per successful jitring_write() or
 *	jitring_move()) that are in the file.
 * @records_written: jitdump records in the file, header excluded.
 * @bytes_written: bytes in the file, header included (for a writer that
 *	continued a dump, what the earlier writers left is included).
 * @refused_invalid: calls refused with -EINVAL, -E2BIG, -ENOENT or
 *	-EDEADLK.
 * @refused_nomem: calls refused with -ENOMEM.
 * @refused_dropped: calls refused with -EAGAIN (JITRING_F_DROP).
 * @refused_shutdown: calls refused with -ESHUTDOWN (writer closing/closed).
 * @refused_io: calls refused because the file had failed (@io_error).
 * @lost_io: entries that returned a code_index but could not be written
 *	because the file failed; they are not in the file.
 * @flushes: jitring_flush() calls that completed.
 * @ring_full_waits: times a thread waited for ring space (lossless mode).
 * @refills_ahead: rings made ready by the background thread before any
 *	thread asked for one: pooled rings when made, spare rings (address
 *	space until then) when a thread takes one.
 * @refills_waited: threads whose first write found no ready ring, pooled
 *	or spare, so that the thread made its own (~0 in steady state; see
 *	@ready_rings of struct jitring_config for storms of new threads).
 * @batches: write(2)/writev(2) calls that put entries in the file.
 * @late_entries: entries re-stamped because their thread stalled between
 *	taking its timestamp and committing for longer than holdback_ms.
 * @holdback_max_ns: longest time the flusher held entries back waiting for
 *	a stalled thread.
 * @threads_attached: threads that currently own a ring.
 * @threads_total: threads that ever owned a ring of this writer.
 * @io_error: first error of the file (a negative errno), or 0.
 * @reserved0: zero.
 * @rings_grown: rings traded for larger ones because their thread kept
 *	filling them (adaptive ring_size only): successors the background
 *	thread made, or spare ones it kept for a storm's first rings.
 * @trampoline_copies: trampoline copies handed out.
 * @trampoline_arenas_ahead: trampoline arenas made ready before they were
 *	needed (by the flusher, or by jitring_trampolines_new()).
 * @trampoline_arenas_waited: arenas a jitring_trampolines_get() caller had to
 *	make itself (~0 in steady state with the rings engine).
 * @rings_grown_waited: (version 2) of @rings_grown, the trades for which
 *	no larger ring was ready, neither a successor nor a spare one, so
 *	that the thread made its own.
 */
struct jitring_stats {
	uint32_t struct_size;
	uint32_t engine;
	uint64_t entries_written;
	uint64_t records_written;
	uint64_t bytes_written;
	uint64_t refused_invalid;
	uint64_t refused_nomem;
	uint64_t refused_dropped;
	uint64_t refused_shutdown;
	uint64_t refused_io;
	uint64_t lost_io;
	uint64_t flushes;
	uint64_t ring_full_waits;
	uint64_t refills_ahead;
	uint64_t refills_waited;
	uint64_t batches;
	uint64_t late_entries;
	uint64_t holdback_max_ns;
	uint64_t threads_attached;
	uint64_t threads_total;
	int32_t io_error;
	uint32_t reserved0;
	uint64_t rings_grown;
	uint64_t trampoline_copies;
	uint64_t trampoline_arenas_ahead;
	uint64_t trampoline_arenas_waited;
	/* Version 2. */
	uint64_t rings_grown_waited;
};

/**
 * jitring_version() - Version of the library at run time.
 *
 * Context: any thread; async-signal-safe.
 * Return: (JITRING_VERSION_MAJOR << 16) | JITRING_VERSION_MINOR of the
 * library actually loaded.
 */
JITRING_API unsigned int jitring_version(void);

/**
 * jitring_config_init() - Fill a config with defaults.
 * @cfg: config to fill; struct_size is set to sizeof(*cfg).
 *
 * Context: any thread; async-signal-safe.
 */
JITRING_API void jitring_config_init(struct jitring_config *cfg);

/**
 * jitring_open() - Create a writer and its dump file.
 * @cfg: options, or NULL for defaults.
 * @out: receives the writer; untouched on failure.
 *
 * Creates <dir>/jit-<pid>.dump with O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK|
 * O_CLOEXEC, locks it (an OFD lock, see below), writes the 40-byte header
 * and maps the first page PROT_READ|PROT_EXEC, which is how perf finds the
 * dump.  Call it before any JIT code becomes executable.  The rings engine
 * also starts its background thread.
 *
 * Whose file it is.  A file already at that name is judged by what it is
 * (device and inode, and its lock), never by how the directory is spelled
 * (D, D/, ./D and a symlink to D are one directory):
 *  - held by an open writer of this process: -EEXIST (one open writer per
 *    directory, also if its dump was removed meanwhile);
 *  - the dump of a closed writer of this process: continued.  The new
 *    writer appends after the last complete record (a CLOSE record at its
 *    end is cut off, since perf stops reading there), with a fresh marker
 *    mapping; code_index values stay unique in the process.  perf inject
 *    then processes the whole dump at each marker mapping it sees: every
 *    function is injected once per writer that mapped the dump during the
 *    recording, with the same result;
 *  - stale, and replaced by a new file: a regular file the caller owns,
 *    with one link, whose lock nobody holds (left by an earlier process
 *    with our pid, or by one in another pid namespace that has exited);
 *  - anything else is never opened, followed, written or removed: -EEXIST
 *    (a symlink, FIFO, device, directory, another user's file, a hard
 *    link, or a file whose lock is held: the live dump of a process with
 *    our pid in another pid namespace sharing the directory).
 * Each writer's dump stays open and locked until the process exits, also
 * after jitring_close() (perf inject needs a closed writer's dump too),
 * unless a later writer continues it or the writer has JITRING_F_RELEASE;
 * a fork child closes its copies.  So
 * the process holds one descriptor per dump file it made and that still
 * has its name.  On a file system without locks the file is still made,
 * but a stale dump there is never replaced.
 *
 * @dir is followed if it (or a component of it) is a symlink: the caller
 * chose it, and perf records the file's real path from the mapping, so
 * perf inject writes its ELFs next to the real file.  Only the last
 * component, the dump's own name, is never followed.
 *
 * Never blocks on another process: no FIFO is opened and no lock is
 * waited for; the library's global lock is not held across any system
 * call, so fork() and exit() in other threads proceed meanwhile.
 *
 * Context: any thread; not async-signal-safe.  May be called concurrently
 * with every other function.
 * Return: 0; -EINVAL for a NULL @out, a @cfg with struct_size smaller than
 * JITRING_CONFIG_SIZE_V1, unknown engine or flags, a bad ring_size or
 * non-zero reserved; -E2BIG for a @cfg larger than this library's with a
 * non-zero byte it does not know; -ENAMETOOLONG if the path does not fit PATH_MAX; -ENOMEM; -EEXIST if the
 * dump (or, with JITRING_F_PERF_MAP, /tmp/perf-<pid>.map) is there and
 * neither continued nor replaced (see above); -EIO if a closed writer's
 * dump was cut below its header; or the negative errno of open(2),
 * write(2), mmap(2) or pthread_create(3).
 */
JITRING_API int jitring_open(const struct jitring_config *cfg,
			     struct jitring **out);

/**
 * jitring_write() - Describe one piece of JIT code to perf.
 * @jr: the writer.
 * @e: the function; see struct jitring_entry for each field's limits.
 *
 * Appends [UNWINDING_INFO][DEBUG_INFO]CODE_LOAD for @e as one contiguous
 * group, stamped with CLOCK_MONOTONIC read inside this call, so code that
 * runs after the call returns is attributed by perf.  The code bytes, name,
 * eh_frame and line table are copied before the call returns; the caller may
 * reuse them at once.
 *
 * Rings engine: takes no lock, makes no system call and allocates nothing in
 * steady state (the first call on a thread takes a ready ring; an entry
 * larger than half a ring is copied into a one-off heap buffer).  In the
 * default lossless mode, a full ring makes the call wait for the flusher;
 * with JITRING_F_DROP it returns -EAGAIN instead.  The entry reaches the
 * file within max_delay_ms, or at the next jitring_flush().  After
 * jitring_pause(), if the flusher cannot be started again (pthread_create
 * fails: a pids cgroup limit, RLIMIT_NPROC), the call still succeeds; its
 * entry is written by the next jitring_flush() or jitring_close(), and a
 * lossless call that finds its ring full writes the rings itself, on its
 * own thread, rather than wait.
 *
 * Context: any thread, concurrently with every call on the same writer.
 * Not async-signal-safe: a call from a signal handler that interrupted
 * jitring_write() or jitring_move() on the same thread returns -EDEADLK and
 * writes nothing; one that interrupted jitring_close() on the same thread
 * lands before the close or returns -ESHUTDOWN; calls from handlers that
 * interrupted other code work but may wait on a full ring.
 * Return: the code_index (> 0, unique in the process) given to the
 * CODE_LOAD; -EINVAL for a NULL argument, empty name, both or neither of
 * name and name_parts, a NUL in a name piece, more than
 * JITRING_NAME_PARTS_MAX pieces, unknown @e->flags, code_size 0, an
 * eh_frame that is malformed or not a multiple of 4, a line table with a
 * NULL file or addresses out of order; -E2BIG for a name, file name,
 * eh_frame, line count or code_size over its limit (with an eh_frame,
 * code_size must also leave the 32-bit unwind offsets room: about 2 GiB
 * less 8 KiB); -ENOMEM if no ring could be had within mem_budget (or
 * malloc failed for a large entry); -EAGAIN (JITRING_F_DROP only); -EDEADLK
 * (nested call, see above; also, with no flusher as above, a full ring in
 * a handler that interrupted jitring_flush() or jitring_pause() on the same
 * thread); -ESHUTDOWN once jitring_close() has started,
 * whatever @e holds (-ESHUTDOWN wins over every error of the entry: the
 * writer is gone, so the entry no longer matters; an entry racing the
 * close gets either); or the negative errno with which the file failed.
 * Every refusal is counted in struct jitring_stats and writes nothing.
 */
JITRING_API int64_t jitring_write(struct jitring *jr,
				  const struct jitring_entry *e);

/**
 * jitring_move() - Tell perf that code described earlier has moved.
 * @jr: the writer.
 * @code_index: a value returned by jitring_write() on this writer.
 * @new_addr: the code's new address (non-NULL).
 * @old_addr: its previous address (perf ignores it; recorded for tools).
 * @code_size: bytes of code at @new_addr, 1 to JITRING_CODE_MAX.
 *
 * Appends a CODE_MOVE record, ordered and committed like jitring_write().
 *
 * Context: as jitring_write().
 * Return: 0; -EINVAL for a NULL @new_addr or bad @code_size; -ENOENT for a
 * code_index this writer never handed out (also one an earlier writer of
 * the same dump handed out); otherwise as jitring_write(), so -ESHUTDOWN
 * once close has started, over -EINVAL and -ENOENT.
 */
JITRING_API int jitring_move(struct jitring *jr, uint64_t code_index,
			     const void *new_addr, const void *old_addr,
			     uint64_t code_size);

/**
 * jitring_flush() - Wait until earlier entries are in the file.
 * @jr: the writer.
 *
 * Returns once every entry whose jitring_write() or jitring_move() returned
 * before this call began is in the file (written with write(2); no fsync).
 * Rings engine: wakes the flusher and sleeps; if another thread is stalled
 * inside jitring_write(), this waits at most about holdback_ms for it.
 * While paused (jitring_pause()) it starts no thread: what writes left in
 * the rings after the flusher could not be started again, it writes itself
 * on the calling thread, as the flusher would, before it returns.
 *
 * Context: any thread, concurrently with every call; blocks; not
 * async-signal-safe.
 * Return: 0; -EINVAL for a NULL @jr; -ESHUTDOWN once jitring_close() has
 * started; -EDEADLK (mutex engine) from a signal handler that interrupted
 * a call on the same thread, which holds the engine's lock; or the
 * negative errno with which the file failed (-ENOSPC, -EIO, -EFBIG, ...),
 * in which case struct jitring_stats counts what was lost.
 */
JITRING_API int jitring_flush(struct jitring *jr);

/**
 * jitring_pause() - Flush, and let the background thread exit until needed.
 * @jr: the writer.
 *
 * Rings engine: waits as jitring_flush() does, then lets the flusher thread
 * exit once a round of it leaves nothing behind, and returns only when the
 * kernel no longer counts that thread in the process (/proc/self/stat), so
 * a runtime that forks right after sees one thread fewer (CPython warns on
 * fork() in a process with more than one).  The writer stays open, and the
 * engine resumes by itself: the next call that needs the flusher (a write
 * or move, a thread's first write, a new trampoline set or arena, close)
 * starts it again before it returns; a thread that exits or detaches
 * meanwhile does not, nor does a flush (it writes what is left itself).
 * If pthread_create fails then, the calls still succeed, and a flush or
 * close, or a writer with a full ring, writes the rings on its own thread
 * (see jitring_write()).  Before it exits, the flusher gives back what its
 * idle rounds would over the next seconds: idle rings' pages and ready
 * rings beyond ready_rings.  With other threads writing all the time the
 * flusher may find no quiet round: after 50 ms this gives up, leaves the
 * flusher running and returns -EAGAIN.  The mutex engine has no thread: 0
 * at once.
 *
 * Context: any thread, concurrently with every call; blocks; not
 * async-signal-safe.
 * Return: 0; -EINVAL for a NULL @jr; -EAGAIN if no quiet round came in
 * 50 ms (nothing paused); -ESHUTDOWN once jitring_close() has started; or
 * the negative errno with which the file failed.
 */
JITRING_API int jitring_pause(struct jitring *jr);

/**
 * jitring_close() - Flush, stop and release a writer.
 * @jr: the writer.
 *
 * Refuses new calls (-ESHUTDOWN), waits for calls already inside
 * jitring_write()/jitring_move() to commit, writes every committed entry,
 * optionally a CLOSE record (JITRING_F_WRITE_CLOSE) and unmaps the marker
 * page.  The dump is never unlinked: perf inject needs it.  Its descriptor
 * and lock are kept until exit, so no process with our pid (in another pid
 * namespace) takes it for stale; a later jitring_open() on the same
 * directory continues it (see jitring_open()).  With JITRING_F_RELEASE
 * they are closed here instead.
 * Rings of threads still alive are released when those threads exit or call
 * jitring_thread_detach().  A process that exits through exit(3) (or a
 * return from main) without closing has its open writers closed by an
 * atexit handler, while other threads may still write: writes from then
 * on get -ESHUTDOWN, and the dump ends whole, with every entry whose
 * write returned before exit began (and CLOSE, if asked).  Nothing is
 * freed, and a later jitring_close() gets -EBADF.  The handler waits at
 * most 5 s in all (for calls inside the library, a close or fork under
 * way, the last write); past that it logs a warning and lets the process
 * end, and a dump still being written may then end in a torn entry.
 * _exit(2) or a crash loses what was not yet written, at most about
 * max_delay_ms.  A main thread that left through pthread_exit() gets the
 * same once the application's other threads have ended: the process then
 * exits with status 0 (see the top of this file).
 *
 * Context: any thread but the writer's own log hook; blocks; not
 * async-signal-safe.
 * Return: 0; -EINVAL for a NULL @jr; -EBADF if the writer was already
 * closed (or is being closed by another thread); or the negative errno with
 * which the file failed.
 */
JITRING_API int jitring_close(struct jitring *jr);

/**
 * jitring_stats() - Read a writer's counters.
 * @jr: the writer (open or closed).
 * @st: filled up to min(st->struct_size, sizeof(*st)) bytes (a newer
 *	caller's further bytes are left as they were); left untouched if @jr
 *	or @st is NULL or st->struct_size is below JITRING_STATS_SIZE_V1.
 *
 * Each counter is read atomically; counters are exact once the writer is
 * quiescent (after jitring_flush() with no concurrent writes, or close).
 *
 * Context: any thread, concurrently with every call; async-signal-safe.
 */
JITRING_API void jitring_stats(const struct jitring *jr,
			       struct jitring_stats *st);

/**
 * jitring_thread_detach() - Give up the calling thread's ring(s).
 * @jr: the writer, or NULL for every writer the thread uses.
 *
 * What the thread wrote is still written; its ring is recycled after the
 * flusher drains it.  A later write from the thread takes a new ring.
 * Threads that exit are detached automatically.
 *
 * Context: any thread, concurrently with every call; not async-signal-safe.
 * Return: the number of rings released (0 or more).
 */
JITRING_API int jitring_thread_detach(struct jitring *jr);

/* ------------------------------------------------------------------ */
/* .eh_frame helpers: DWARF call frame information without DWARF.      */

/**
 * enum jitring_cfi_kind - One call-frame rule change.
 * @JITRING_CFI_DEF_CFA: CFA = @reg + @offset.
 * @JITRING_CFI_DEF_CFA_OFFSET: CFA = (current CFA register) + @offset.
 * @JITRING_CFI_DEF_CFA_REGISTER: CFA = @reg + (current offset).
 * @JITRING_CFI_OFFSET: register @reg saved at CFA + @offset (@offset is a
 *	multiple of the data alignment, usually negative, e.g. -16).
 * @JITRING_CFI_RESTORE: register @reg has its entry rule again.
 * @JITRING_CFI_REMEMBER_STATE: push the current rules.
 * @JITRING_CFI_RESTORE_STATE: pop them.
 */
enum jitring_cfi_kind {
	JITRING_CFI_DEF_CFA = 1,
	JITRING_CFI_DEF_CFA_OFFSET,
	JITRING_CFI_DEF_CFA_REGISTER,
	JITRING_CFI_OFFSET,
	JITRING_CFI_RESTORE,
	JITRING_CFI_REMEMBER_STATE,
	JITRING_CFI_RESTORE_STATE,
};

/**
 * struct jitring_cfi_op - A rule change that takes effect at a code offset.
 * @pc: byte offset from the start of the code, at most the code size;
 *	non-decreasing along the list, and a multiple of the code alignment.
 * @kind: enum jitring_cfi_kind.
 * @reg: DWARF register number.
 * @offset: byte offset (see enum jitring_cfi_kind).
 */
struct jitring_cfi_op {
	uint32_t pc;
	uint16_t kind;
	uint16_t reg;
	int32_t offset;
};

/**
 * struct jitring_cfi - Call frame description of a piece of code.
 * @code_align: DWARF code alignment factor (1 on x86_64, 4 on aarch64).
 * @data_align: DWARF data alignment factor (-8 on both).
 * @ra_reg: return-address column (16 on x86_64, 30 on aarch64); above 255
 *	the CIE is emitted as version 3.
 * @nr_init: how many of @ops (all with @pc 0) are the rules at entry and go
 *	into the CIE.
 * @nr_ops: entries at @ops.
 * @ops: the rules, entry rules first.
 */
struct jitring_cfi {
	uint32_t code_align;
	int32_t data_align;
	uint32_t ra_reg;
	uint32_t nr_init;
	uint32_t nr_ops;
	const struct jitring_cfi_op *ops;
};

/**
 * enum jitring_cfi_preset - Ready-made descriptions.
 * @JITRING_CFI_X86_64_FP_TRAMPOLINE: x86_64 "push %rbp; mov %rsp,%rbp;
 *	call *%rcx; pop %rbp; ret" (the frame-pointer trampoline shape).
 * @JITRING_CFI_AARCH64_FP_TRAMPOLINE: aarch64 "stp x29, x30, [sp, #-16]!;
 *	mov x29, sp; blr x3; ldp x29, x30, [sp], #16; ret" (CPython's).
 * @JITRING_CFI_HOST_FP_TRAMPOLINE: whichever of the two matches the host.
 */
enum jitring_cfi_preset {
	JITRING_CFI_X86_64_FP_TRAMPOLINE = 1,
	JITRING_CFI_AARCH64_FP_TRAMPOLINE = 2,
	JITRING_CFI_HOST_FP_TRAMPOLINE = 3,
};

/**
 * jitring_cfi_preset() - Look up a ready-made call frame description.
 * @preset: enum jitring_cfi_preset.
 *
 * Context: any thread; async-signal-safe.
 * Return: a static description, or NULL for an unknown @preset (or HOST on
 * an architecture without a preset).
 */
JITRING_API const struct jitring_cfi *
jitring_cfi_preset(enum jitring_cfi_preset preset);

/**
 * jitring_eh_frame_build() - Encode a CIE and one FDE for a piece of code.
 * @cfi: the call frame description.
 * @code_size: bytes of code the FDE covers, at least 1 and small enough
 *	that pc_begin fits in 32 bits (about 2 GiB less the frame size).
 * @buf: output buffer, or NULL to only compute the size.
 * @buf_size: bytes at @buf.
 *
 * The result is ready for jitring_entry.eh_frame: a multiple of 4 (8 in
 * practice), CIE augmentation "zR" with pcrel|sdata4 FDE pointers, and
 * pc_begin already computed for perf's placement of the data at
 * code_addr + ALIGN_8(code_size).  It depends only on @cfi and @code_size,
 * so one buffer serves every copy of a trampoline.
 *
 * Context: any thread; async-signal-safe.
 * Return: bytes needed (> 0), written to @buf if it was large enough (on
 * any error @buf is left untouched); -EINVAL for a NULL @cfi, a bad
 * @code_size, a zero code or data alignment, NULL @ops with @nr_ops > 0,
 * @nr_init > @nr_ops, an entry rule with a non-zero @pc or of kind
 * RESTORE/REMEMBER_STATE/RESTORE_STATE, an unknown kind, a @pc out of
 * order, beyond @code_size or not aligned, an offset that is not a multiple
 * of the data alignment, a negative CFA offset, or a RESTORE_STATE without
 * its REMEMBER_STATE; -E2BIG if it would exceed JITRING_EH_FRAME_MAX;
 * -ENOSPC if @buf is non-NULL and too small.
 */
JITRING_API int jitring_eh_frame_build(const struct jitring_cfi *cfi,
				       uint64_t code_size, void *buf,
				       size_t buf_size);

/* ------------------------------------------------------------------ */
/* Runtime kit: trampoline copies from arenas made ready ahead.         */

struct jitring_trampolines;

/** No build-id salt in jitring_trampoline_template.salt_offset. */
#define JITRING_TRAMPOLINE_NO_SALT 0xffffffffu
/** Largest trampoline template. */
#define JITRING_TRAMPOLINE_MAX 4096u

/**
 * struct jitring_trampoline_template - Machine code to hand out copies of.
 * @struct_size: sizeof(struct jitring_trampoline_template) as compiled, at
 *	least JITRING_TRAMPOLINE_TEMPLATE_SIZE_V1; read like
 *	jitring_config.struct_size.
 * @code_size: bytes at @code, 1 to JITRING_TRAMPOLINE_MAX.
 * @code: the template's machine code, position-independent.
 * @cfi: its call frame description (see jitring_eh_frame_build()), or NULL
 *	to write no UNWINDING_INFO for the copies.
 * @salt_offset: where in the *dumped* bytes of each copy an 8-byte
 *	per-copy value is written, so that perf builds that hash code bytes
 *	into build-ids never merge two copies (the executable copy is never
 *	changed); JITRING_TRAMPOLINE_NO_SALT for none, else at most code_size - 8,
 *	or 0 with a code_size below 8 (then the salt is XORed over the bytes).
 * @reserved: must be zero.
 */
struct jitring_trampoline_template {
	uint32_t struct_size;
	uint32_t code_size;
	const void *code;
	const struct jitring_cfi *cfi;
	uint32_t salt_offset;
	uint32_t reserved;
};

/**
 * jitring_trampoline_builtin() - The host's built-in trampoline template.
 * @t: filled with a template in the shape of CPython's perf trampoline: it
 *	calls the function pointer passed as its fourth argument (x86_64
 *	%rcx, aarch64 x3) with the first three arguments unchanged and
 *	returns its result, keeping a standard frame-pointer frame, with
 *	matching CFI and a salt at its end.  t->struct_size is set.
 *
 * Context: any thread; async-signal-safe.
 * Return: 0; -EINVAL for a NULL @t; -EOPNOTSUPP on an architecture without
 * a built-in template.
 */
JITRING_API int
jitring_trampoline_builtin(struct jitring_trampoline_template *t);

/**
 * jitring_trampolines_new() - Register a template with a writer.
 * @jr: the writer.
 * @t: the template (copied; may be freed after the call).
 * @out: receives the set; untouched on failure.
 *
 * Copies are carved from executable arenas made ahead of demand: by the
 * rings engine's background thread, or, with the mutex engine, by the
 * jitring_trampolines_get() call that finds none ready (lock-free).  Each
 * arena maps one sealed image of the set's slots read-execute, normally 16
 * times back to back (written once here, into a memfd; where an
 * executable memfd is refused, each
 * arena is written read-write and switched to read-execute once), never
 * remapped, between PROT_NONE guard pages so the kernel never merges two.
 * Copies are spaced so perf's extended mapping of one (code + ALIGN_8 + the
 * unwind data's mapped_size) never covers the next.  With
 * JITRING_F_TRAMPOLINE_ELF on @jr the arenas are instead pieces of one ELF
 * file made here in @jr's directory (its slots as .text, an FDE per slot,
 * a sorted .eh_frame_hdr), each written and mapped read-execute at its own
 * offset when it is made, so that perf unwinds through the copies from
 * the file (see the flag); where that file cannot be made, a warning is
 * logged and the memfd image is used.
 *
 * Context: any thread; not async-signal-safe.
 * Return: 0; -EINVAL for NULL arguments, a struct_size below version 1, a
 * bad code_size or salt_offset, non-zero reserved or a @cfi
 * jitring_eh_frame_build() refuses; -E2BIG for a larger template with a
 * non-zero byte this library does not know; -ESHUTDOWN once the writer is
 * closing; -ENOMEM; or -errno from mmap(2)/mprotect(2) (a refused
 * memfd is no error: the arenas are written instead).
 */
JITRING_API int
jitring_trampolines_new(struct jitring *jr,
			const struct jitring_trampoline_template *t,
			struct jitring_trampolines **out);

/**
 * jitring_trampolines_get() - Hand out one executable copy, described.
 * @t: the set.
 * @name: the copy's symbol name, as for jitring_entry.name.
 * @addr: receives the copy's address; untouched on failure.
 *
 * Takes a fresh copy (lock-free: an atomic increment in the current arena)
 * and writes its group (UNWINDING_INFO + CODE_LOAD named @name, a new
 * code_index) through the writer before returning, so the copy may be
 * called at once.  In steady state no mmap or mprotect happens on the
 * calling thread.
 *
 * A copy whose jitring_write() fails is not handed out and its slot is not
 * reused.
 *
 * Context: any thread, concurrently; not async-signal-safe.
 * Return: the copy's code_index (> 0); -EINVAL for NULL arguments or a bad
 * name (empty, or longer than JITRING_NAME_MAX), but -ESHUTDOWN instead
 * once jitring_close() has started (as for jitring_write()); -ENOMEM if no
 * arena could be had; or what jitring_write() returns.
 */
JITRING_API int64_t jitring_trampolines_get(struct jitring_trampolines *t,
					    const char *name, void **addr);

/**
 * jitring_trampolines_get_parts() - jitring_trampolines_get(), the name in
 *	pieces.
 * @t: the set.
 * @parts: the name's pieces, as for jitring_entry.name_parts.
 * @nr_parts: pieces at @parts, 1 to JITRING_NAME_PARTS_MAX.
 * @addr: receives the copy's address; untouched on failure.
 *
 * As jitring_trampolines_get(); the pieces are copied straight into the
 * record, so a runtime need not format "<prefix><name>:<file>" first.
 *
 * Context: any thread, concurrently; not async-signal-safe.
 * Return: as jitring_trampolines_get(); -EINVAL also for @nr_parts 0 or
 * above JITRING_NAME_PARTS_MAX, a NULL piece with a non-zero length, or a
 * NUL byte in a piece (checked before a slot is taken: none is wasted).
 */
JITRING_API int64_t jitring_trampolines_get_parts(
	struct jitring_trampolines *t, const struct jitring_str *parts,
	unsigned int nr_parts, void **addr);

/**
 * jitring_trampolines_reuse() - Describe a copy handed out earlier again.
 * @t: the set.
 * @addr: a copy that jitring_trampolines_get() (or _get_parts()) of this
 *	set handed out.
 * @name: the name to describe it by now, as for jitring_trampolines_get().
 *
 * Writes a new group for the copy at @addr (UNWINDING_INFO + CODE_LOAD
 * named @name, a new code_index, the dumped bytes salted anew so no perf
 * build-id repeats) through the set's writer, and hands out no new copy.
 * For a runtime that recycles copies: a copy whose function is gone may
 * serve another (every copy has the same executable bytes, so a thread
 * still returning through it is unaffected; perf names samples in it by
 * the newest description), and after jitring_trampolines_rebind() each
 * copy still in use is described in the new writer's dump this way.
 * Copies are never unmapped, so recycling them is how a long-running
 * process keeps its trampoline memory flat.
 *
 * Context: any thread, concurrently with every call on the set but
 * jitring_trampolines_free(); not async-signal-safe.
 * Return: the new code_index (> 0); -EINVAL for NULL arguments, a bad name,
 * or an @addr that is not the start of a copy this set handed out (but
 * -ESHUTDOWN once the writer is closing); otherwise what jitring_write()
 * returns.
 */
JITRING_API int64_t jitring_trampolines_reuse(struct jitring_trampolines *t,
					      void *addr, const char *name);

/**
 * jitring_trampolines_reuse_parts() - jitring_trampolines_reuse(), the name
 *	in pieces.
 * @t: the set.
 * @addr: as for jitring_trampolines_reuse().
 * @parts: the name's pieces, as for jitring_trampolines_get_parts().
 * @nr_parts: pieces at @parts, 1 to JITRING_NAME_PARTS_MAX.
 *
 * Context: as jitring_trampolines_reuse().
 * Return: as jitring_trampolines_reuse(), and -EINVAL for the pieces as
 * jitring_trampolines_get_parts().
 */
JITRING_API int64_t jitring_trampolines_reuse_parts(
	struct jitring_trampolines *t, void *addr,
	const struct jitring_str *parts, unsigned int nr_parts);

/**
 * jitring_trampolines_rebind() - Hand a set to another writer.
 * @t: the set; its writer must be closed.
 * @jr: the writer to describe its copies through from now on.
 *
 * A set outlives its writer (its copies may still run), so a runtime that
 * closes a writer and opens another (a profiler switched off and on) keeps
 * one set instead of making a new one per writer: its arenas, the copies
 * handed out and the stock ready ahead carry over (counted in @jr's
 * trampoline_arenas_ahead), and @jr's background thread keeps the stock
 * from then on, at the floor @jr's ready_copies asks for (or the
 * default).  Copies handed out before are not
 * described in @jr's dump until jitring_trampolines_reuse() says so.
 * A get() racing this call describes its copy through either writer (the
 * old one refuses it with -ESHUTDOWN).
 *
 * Context: any thread; not concurrently with another rebind or
 * jitring_trampolines_free() of the same set; not async-signal-safe.
 * Return: 0 (also if @jr is already the set's writer); -EINVAL for NULL
 * arguments; -EBUSY while the set's writer is still open (nothing
 * changes); -ESHUTDOWN once @jr is closing (the set then belongs to @jr,
 * closed, and may be rebound again).
 */
JITRING_API int jitring_trampolines_rebind(struct jitring_trampolines *t,
					   struct jitring *jr);

/**
 * jitring_trampolines_free() - Unmap a set's arenas.
 * @t: the set, or NULL.
 *
 * The caller states that no thread runs, or will run, code in any copy of
 * the set.  Allowed only once the writer is closed (unmapping code perf
 * knows about under a running writer is what CPython's gh-143228 was).
 * Without this call arenas stay mapped until exit, also in fork children.
 *
 * Context: any thread; not concurrently with jitring_trampolines_get() on
 * the same set.
 * Return: 0 (also for NULL); -EBUSY if the writer is still open.
 */
JITRING_API int jitring_trampolines_free(struct jitring_trampolines *t);

#ifdef __cplusplus
}
#endif

#endif /* JITRING_H */
