/* SPDX-License-Identifier: MIT */
/*
 * The writer handle shared by both engines, and the services every layer
 * above calls on it (internal.c).
 *
 * struct jitring is a tombstone: it is never freed, so a thread racing
 * jitring_close() (or calling after it) reads a valid state word and gets
 * -ESHUTDOWN instead of touching freed memory.  Everything large lives in
 * the engine state (jr->eng) and the file state, freed at close once no
 * call can reach them:
 *  - calls on the write hot path reach engine memory only through their
 *    thread's ring, protected by the ring's BUSY bit (see ring.c);
 *  - every other call brackets its use with jitring_enter()/jitring_exit(),
 *    and close waits for jr->users to drain after setting CLOSING.
 * The fields the hot path reads are on the first cache line and change only
 * at close and fork.
 */
#ifndef JITRING_SRC_INTERNAL_H
#define JITRING_SRC_INTERNAL_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/atomics.h"
#include "common/compiler.h"
#include "jitring.h"

#define JR_MAGIC 0x4a524e47u /* "JRNG" */

struct jitring_engine_ops;

/* jr->state.  Anything but JR_OPEN sends a call to its slow path. */
enum jr_state {
	JR_OPEN = 0,
	JR_FAILED = 1, /* the file failed; writes get jr->io_error */
	JR_FORKED = 2, /* child after fork: engine restarts on first use */
	JR_CLOSING = 3,
	JR_CLOSED = 4,
};

/* Counters, all relaxed: they are statistics, never synchronisation. */
struct jr_counters {
	_Atomic uint64_t entries_written;
	_Atomic uint64_t records_written;
	_Atomic uint64_t bytes_written;
	_Atomic uint64_t refused_invalid;
	_Atomic uint64_t refused_nomem;
	_Atomic uint64_t refused_dropped;
	_Atomic uint64_t refused_shutdown;
	_Atomic uint64_t refused_io;
	_Atomic uint64_t lost_io;
	_Atomic uint64_t flushes;
	_Atomic uint64_t ring_full_waits;
	_Atomic uint64_t refills_ahead;
	_Atomic uint64_t refills_waited;
	_Atomic uint64_t batches;
	_Atomic uint64_t late_entries;
	_Atomic uint64_t holdback_max_ns;
	_Atomic uint64_t threads_attached;
	_Atomic uint64_t threads_total;
	_Atomic uint64_t rings_grown;
	_Atomic uint64_t trampoline_copies;
	_Atomic uint64_t trampoline_arenas_ahead;
	_Atomic uint64_t trampoline_arenas_waited;
	_Atomic uint64_t rings_grown_waited;
	/* Not in jitring_stats (tests and benchmarks read it): system calls
	 * a thread other than the flusher made to wake it. */
	_Atomic uint64_t wakes;
};

/*
 * Which file a descriptor we hold is, and where it was made: the identity
 * "is this file ours" is decided on (never a path string, which has many
 * spellings), and the directory and name it was made under.
 */
struct jr_ident {
	dev_t dev;
	ino_t ino;
	dev_t dir_dev;
	ino_t dir_ino;
	uint32_t pid; /* the pid in its name */
};

/*
 * The dump file, owned by files.c; engines write through fd from start on.
 * The fd, and the lock on it, are kept after close until exit (or until a
 * later writer continues the dump): see "Whose file is it" in files.c.
 */
struct jr_file {
	int fd;
	uint32_t pid;
	uint64_t start; /* first byte the engine writes: the header's end,
			     * or the end of a dump a closed writer left */
	void *marker;   /* page 0 mapped PROT_READ|PROT_EXEC */
	size_t marker_len;
	char *path; /* <dir>/jit-<pid>.dump, for messages */
	char *dir;
	struct jr_ident id;
};

struct jitring {
	/* Line 0: read by every call; written at close and fork only. */
	alignas(JITRING_CACHELINE) uint32_t magic;
	_Atomic uint32_t state; /* enum jr_state */
	uint32_t engine;        /* JITRING_ENGINE_RINGS or _MUTEX */
	uint32_t flags;         /* JITRING_F_* */
	void *eng;              /* engine state */
	/* The engine's operations (engine_ops.h), picked at open: every
	 * call reaches the engine through them. */
	const struct jitring_engine_ops *ops;
	uint32_t ring_min; /* ring sizes: equal when configured, */
	uint32_t ring_max; /* else adaptive between the two */
	uint32_t max_delay_ms;
	uint32_t holdback_ms;
	uint32_t elf_mach;
	uint64_t mem_budget;
	uint32_t ready_rings;  /* config: rings to keep ready, at least */
	uint32_t ready_copies; /* config: trampoline copies, per set */
	jitring_log_fn log;
	void *log_arg;

	/* Line 1: the rings flusher's sleep word (see flusher.c). */
	alignas(JITRING_CACHELINE) _Atomic uint32_t sleep;
	/* Rings: grow requests raised so far (ask_grow(); rare).  In the
	 * handle, not the engine: a producer may raise one after close
	 * freed the engine. */
	_Atomic uint32_t grow_asks;

	/* Line 2: cold-path calls inside the engine; close waits for 0. */
	alignas(JITRING_CACHELINE) _Atomic uint32_t users;
	_Atomic int32_t io_error; /* first error of the file, or 0 */

	alignas(JITRING_CACHELINE) struct jr_counters c;

	/* Trampoline sets (trampolines.c): pushed lock-free, never removed
	 * while the writer is open; the flusher refills their arenas. */
	_Atomic(struct jitring_trampolines *) trampoline_sets;

	/* Cold. */
	struct jr_file file;
	int map_fd;   /* /tmp/perf-<pid>.map while lines go to
				   * it, else -1 (the map failed, or close) */
	int map_hold; /* the same fd, kept like file.fd */
	struct jr_ident map_id;
	uint64_t map_off; /* its size: always a line boundary */
	char *map_path;
	pthread_mutex_t lock; /* close/fork vs. each other */
	bool fork_locked;     /* lock taken by atfork_prepare() (not closed) */
	struct jitring *next; /* every handle ever made (tombstones) */
};

/**
 * jitring_enter() - Start a cold-path call that uses engine state.
 *
 * Pairs with the close path: jitring_close() sets CLOSING (seq_cst) and then
 * waits for users to reach 0, so either this sees the state change or close
 * sees our increment (both seq_cst: a store-load Dekker pair).
 * Return: the state seen (JR_OPEN, JR_FAILED or JR_FORKED keep the user
 * count; anything else has already dropped it again).
 */
static inline uint32_t jitring_enter(struct jitring *jr)
{
	uint32_t s;

	atomic_fetch_add_explicit(&jr->users, 1, memory_order_seq_cst);
	/* Pairs with the seq_cst CAS to JR_CLOSING in jitring_close(). */
	s = atomic_load_explicit(&jr->state, memory_order_seq_cst);
	if (s >= JR_CLOSING)
		/* Pairs with the acquire load of users in jitring_close(). */
		atomic_fetch_sub_explicit(&jr->users, 1, memory_order_release);
	return s;
}

static inline void jitring_exit(struct jitring *jr)
{
	/* Pairs with the acquire load of users in jitring_close(). */
	atomic_fetch_sub_explicit(&jr->users, 1, memory_order_release);
}

/* Closed for good: its engine no longer touches its files. */
static inline bool jitring_handle_closed(const struct jitring *h)
{
	/* Pairs with the release store of JR_CLOSED in jitring_close(). */
	return atomic_load_explicit(&h->state, memory_order_acquire) ==
	       JR_CLOSED;
}

/**
 * jitring_struct_in() - Copy a caller-sized struct in (config, template).
 * @dst: the library's struct, @dsize bytes; zeroed, then filled.
 * @src: the caller's, whose first field is its struct_size @ssize.
 * @v1: the frozen size of version 1.
 *
 * Reads min(@ssize, @dsize) bytes: fields the caller's version lacks stay
 * zero (their default).  Bytes beyond @dsize (a caller built against a
 * newer header) must be zero: a non-zero one asks for something this
 * library does not know.
 * Return: 0; -EINVAL if @ssize < @v1; -E2BIG for a non-zero unknown byte.
 */
int jitring_struct_in(void *dst, size_t dsize, const void *src, uint32_t ssize,
		      size_t v1);

/* Log through the caller's hook, if any. */
void jitring_log(const struct jitring *jr, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The -errno for a call that found state != JR_OPEN (counted). */
int jitring_refuse_state(struct jitring *jr, uint32_t s);
/* The answer for a bad argument @err (counted): -ESHUTDOWN once close has
 * started, else @err. */
int jitring_refuse_args(struct jitring *jr, int err);

/* Record the file's first error and move an open writer to JR_FAILED. */
void jitring_set_io_error(struct jitring *jr, int err);

/* The system's page size (ring sizes, trims, mappings). */
static inline size_t jitring_page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* Fault in every page of @len bytes at @p (writable, ours): one system call
 * where the kernel has MADV_POPULATE_WRITE, else a write to each page. */
static inline void jitring_prefault(uint8_t *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
	if (!madvise(p, len, MADV_POPULATE_WRITE))
		return;
#endif
	for (size_t off = 0; off < len; off += jitring_page_size())
		p[off] = 0;
}

/* code_index blocks, process-wide, so that no two writers of the process
 * (open at once or one after the other) ever hand out the same index:
 * each call returns the first of JR_ID_BLOCK fresh values, a multiple of
 * JR_ID_BLOCK, never 0.  Lock-free. */
#define JR_ID_BLOCK 64u
uint64_t jitring_ids_take(void);
/* The first value no block has been taken from yet (a hint). */
uint64_t jitring_ids_peek(void);

#endif /* JITRING_SRC_INTERNAL_H */
