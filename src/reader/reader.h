/* SPDX-License-Identifier: MIT */
/*
 * A jitdump reader and validator written from the format description alone.
 *
 * It deliberately shares no code and no struct with the encoder
 * (src/record.c, include/jitring/jitdump.h): every field is read at an
 * explicit byte offset, so a layout bug in the encoder shows up as a
 * violation here instead of being mirrored.  The format is host byte order;
 * jitring only runs on little-endian machines.
 *
 * Two layers:
 *  - jitring_reader_*() walk a buffer record by record.  They enforce every
 *    rule that concerns one record alone (framing, header, the layout of
 *    each record type) and decode the fields.
 *  - jitring_check() adds the rules that span records (groups, unique
 *    code_index, CLOSE last, time order) and computes a summary.
 *
 * Every violation has a stable short rule name; jitring_check_rules() lists
 * them with a one-line description.
 *
 * Both layers work on a buffer holding the whole file, or on a stream
 * (struct jitring_rd_stream) that reads a file descriptor through a
 * bounded window, for files that may be huge, endless (a pipe) or change
 * while they are read (a live dump).
 */
#ifndef JITRING_SRC_READER_H
#define JITRING_SRC_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sizes and ids, spelled out here on purpose (see above). */
#define JITRING_RD_HEADER_SIZE 40u
#define JITRING_RD_PREFIX_SIZE 16u
#define JITRING_RD_MAGIC 0x4A695444u
#define JITRING_RD_VERSION 1u
#define JITRING_RD_FLAG_ARCH_TIMESTAMP 1ull

#define JITRING_RD_CODE_LOAD 0u
#define JITRING_RD_CODE_MOVE 1u
#define JITRING_RD_CODE_DEBUG_INFO 2u
#define JITRING_RD_CODE_CLOSE 3u
#define JITRING_RD_CODE_UNWINDING_INFO 4u
#define JITRING_RD_NR_IDS 5u

/* Flags of jitring_check(); the reader takes JITRING_CHECK_ALLOW_TRUNCATED. */
/** Timestamps must be non-zero and non-decreasing in file order. */
#define JITRING_CHECK_SORTED (1u << 0)
/** A last record cut short by EOF ends the file instead of failing. */
#define JITRING_CHECK_ALLOW_TRUNCATED (1u << 1)
/**
 * jitring_reader_init() only: @buf is a window on the start of a longer
 * file; jitring_reader_next() returns JITRING_READER_MORE where it needs
 * bytes past the window, and jitring_reader_feed() gives the next window.
 */
#define JITRING_READER_WINDOW (1u << 2)

/** jitring_reader_next() in window mode: feed more bytes, then call again. */
#define JITRING_READER_MORE 2

/**
 * struct jitring_rd_header - The decoded 40-byte file header.
 * @magic: 0x4A695444.
 * @version: 1.
 * @total_size: 40.
 * @elf_mach: ELF e_machine of the code.
 * @pad1: reserved.
 * @pid: pid of the writing process.
 * @timestamp: creation time.
 * @flags: bit 0: timestamps are arch (TSC) ticks.
 */
struct jitring_rd_header {
	uint32_t magic;
	uint32_t version;
	uint32_t total_size;
	uint32_t elf_mach;
	uint32_t pad1;
	uint32_t pid;
	uint64_t timestamp;
	uint64_t flags;
};

/**
 * struct jitring_rd_record - One decoded record.
 * @off: file offset of the record.
 * @id: record type (JITRING_RD_CODE_*).
 * @size: total_size, prefix included.
 * @ts: timestamp.
 * @raw: the @size bytes of the record, inside the caller's buffer.
 * @pid: LOAD, MOVE.
 * @tid: LOAD, MOVE.
 * @vma: LOAD, MOVE.
 * @code_addr: LOAD, DEBUG_INFO.
 * @code_size: LOAD, MOVE.
 * @code_index: LOAD, MOVE.
 * @name: LOAD: the NUL-terminated function name, inside the buffer.
 * @name_len: LOAD: strlen(@name).
 * @code: LOAD: the last @code_size bytes of the record.
 * @old_code_addr: MOVE.
 * @new_code_addr: MOVE.
 * @nr_entry: DEBUG_INFO: rows in the line table.
 * @entries_end: DEBUG_INFO: offset in the record just past the last row;
 *	bytes from there to @size are padding.
 * @last_row_addr: DEBUG_INFO: address of the last row (0 without rows).
 * @unwinding_size: UNWINDING_INFO: bytes of .eh_frame plus .eh_frame_hdr.
 * @eh_frame_hdr_size: UNWINDING_INFO: 20.
 * @mapped_size: UNWINDING_INFO.
 * @unwind: UNWINDING_INFO: the payload, starting with .eh_frame.
 * @eh_frame_size: UNWINDING_INFO: @unwinding_size - @eh_frame_hdr_size.
 *
 * Fields a record type does not have are zero or NULL.
 */
struct jitring_rd_record {
	size_t off;
	uint32_t id;
	uint32_t size;
	uint64_t ts;
	const unsigned char *raw;
	uint32_t pid;
	uint32_t tid;
	uint64_t vma;
	uint64_t code_addr;
	uint64_t code_size;
	uint64_t code_index;
	const char *name;
	size_t name_len;
	const unsigned char *code;
	uint64_t old_code_addr;
	uint64_t new_code_addr;
	uint64_t nr_entry;
	uint32_t entries_end;
	uint64_t last_row_addr;
	uint64_t unwinding_size;
	uint64_t eh_frame_hdr_size;
	uint64_t mapped_size;
	const unsigned char *unwind;
	uint64_t eh_frame_size;
};

/**
 * struct jitring_rd_line - One DEBUG_INFO row.
 * @off: file offset of the row.
 * @addr: code address.
 * @line: source line.
 * @discrim: discriminator.
 * @file: NUL-terminated file name, inside the buffer.
 */
struct jitring_rd_line {
	size_t off;
	uint64_t addr;
	int32_t line;
	int32_t discrim;
	const char *file;
};

/**
 * struct jitring_reader - Cursor over a jitdump image in memory.
 * @buf: the image, or in window mode the current window.
 * @len: its length.
 * @off: offset in @buf of the next record.
 * @base: file offset of @buf[0] (0 unless in window mode).
 * @flags: JITRING_CHECK_ALLOW_TRUNCATED and JITRING_READER_WINDOW, or 0.
 * @more: window mode and the window does not reach EOF yet.
 * @need: after JITRING_READER_MORE: bytes from @off the next window
 *	should hold (it may hold fewer only when they reach EOF).
 * @zero_run: in window mode, a run of zero bytes from @zero_from on is
 *	being consumed: it is a zero tail if it reaches EOF, a hole if
 *	anything non-zero follows.
 * @zero_from: file offset where that run starts.
 * @state: 0 while records remain, 1 at the end, a negative errno after a
 *	violation (sticky).
 * @zero_tail: at the end: zero bytes between the last record and EOF.
 * @truncated: at the end: bytes of a tolerated truncated last record, or 0.
 * @rule: after a violation: its rule name.
 * @err_off: after a violation: the file offset it concerns.
 * @detail: after a violation: a human-readable explanation.
 *
 * Filled by jitring_reader_init(); the fields are read-only to callers.
 * Every offset the reader reports (records, rows, violations) is a file
 * offset, also in window mode.
 */
struct jitring_reader {
	const unsigned char *buf;
	size_t len;
	size_t off;
	uint64_t base;
	unsigned int flags;
	bool more;
	size_t need;
	bool zero_run;
	uint64_t zero_from;
	int state;
	size_t zero_tail;
	size_t truncated;
	const char *rule;
	size_t err_off;
	char detail[128];
};

/**
 * jitring_reader_init() - Start reading a jitdump image.
 * @r: the reader to set up.
 * @buf: the whole file; must stay valid while @r and its records are used.
 * @len: bytes at @buf.
 * @flags: JITRING_CHECK_ALLOW_TRUNCATED to accept a last record cut short
 *	by EOF (it ends the file; @r->truncated says how many bytes it had);
 *	JITRING_READER_WINDOW when @buf is only the start of the file.
 * @h: receives the decoded header (filled whenever @len >= 40, even when a
 *	header rule fails); may be NULL.
 *
 * Checks the header rules header-short, header-magic, header-version,
 * header-size and header-flags in that order.
 *
 * Context: any thread; @r must not be shared without locking.
 * Return: 0; -EINVAL if @r is NULL, @buf is NULL with @len > 0, @flags
 * has unknown bits, or JITRING_READER_WINDOW comes with fewer than 40
 * bytes; -EBADMSG if the header breaks a rule (@r->rule, @r->err_off and
 * @r->detail say which).
 */
int jitring_reader_init(struct jitring_reader *r, const void *buf, size_t len,
			unsigned int flags, struct jitring_rd_header *h);

/**
 * jitring_reader_next() - Decode the next record.
 * @r: a reader set up by jitring_reader_init().
 * @rec: receives the record.
 *
 * The file ends at EOF, at a run of zero bytes that reaches EOF (counted in
 * @r->zero_tail), or, with JITRING_CHECK_ALLOW_TRUNCATED, at a last record
 * cut short by EOF.  A record is "cut short" when its prefix is complete and
 * total_size runs past EOF, or when fewer than 16 bytes remain, they are
 * not all zero, and what there is of the prefix could start a record (id
 * below 5, and total_size >= 16 if its bytes are there).  Anything else
 * that is not a record is a violation.
 *
 * Checks the single-record rules: record-size, record-id, record-bounds,
 * trailing-garbage, load-size, load-code, load-name, move-size,
 * debug-size, debug-entries, unwind-size and unwind-hdr.
 *
 * In window mode the outcome is the same as for the whole file in one
 * buffer, whatever the window boundaries; a run of zero bytes is consumed
 * as it comes, so it needs no memory however long it is.
 *
 * Context: any thread; @r must not be shared without locking.
 * Return: 1 and @rec filled (its pointers are valid until the next
 * jitring_reader_feed()); 0 at the end of the file (and on every later
 * call); JITRING_READER_MORE in window mode when the window holds too
 * little (@r->need says how much); -EINVAL if an argument is NULL or @r
 * was not initialised; -EBADMSG on a violation (see @r->rule; returned
 * again on later calls).
 */
int jitring_reader_next(struct jitring_reader *r,
			struct jitring_rd_record *rec);

/**
 * jitring_reader_feed() - Window mode: move the window on.
 * @r: a reader whose jitring_reader_next() returned JITRING_READER_MORE.
 * @buf: the new window.  It must start with the bytes of the old window
 *	the reader has not consumed (from @r->off to @r->len), followed by
 *	the bytes after them in the file.
 * @len: bytes at @buf, at least @r->len - @r->off.
 * @eof: the window reaches EOF; nothing more will be fed.
 *
 * Records returned before this call point into the old window, which the
 * caller may now reuse.
 *
 * Context: any thread; @r must not be shared without locking.
 * Return: 0; -EINVAL if an argument is NULL, @r is not in window mode, is
 * past its end or a violation, or @len is too short.
 */
int jitring_reader_feed(struct jitring_reader *r, const void *buf, size_t len,
			bool eof);

/**
 * jitring_reader_line() - Iterate the rows of a DEBUG_INFO record.
 * @rec: a DEBUG_INFO record from jitring_reader_next().
 * @cursor: 0 before the first call; updated by each call.
 * @line: receives the row.
 *
 * Context: any thread.
 * Return: 1 and @line filled; 0 after the last row; -EINVAL if an argument
 * is NULL or @rec is not a DEBUG_INFO record; -EBADMSG if the row overruns
 * the record (only possible for a record not made by the reader).
 */
int jitring_reader_line(const struct jitring_rd_record *rec, size_t *cursor,
			struct jitring_rd_line *line);

/**
 * struct jitring_rd_stream - A jitdump file read through a bounded window.
 * @r: the reader, in window mode once the header is read.
 * @fd: the file (borrowed: jitring_stream_close() does not close it).
 * @regular: @fd is a regular file: read with pread(2) up to @size.
 * @size: a regular file's size when the stream was opened.
 * @pos: bytes of the file read so far (its offset for a regular file).
 * @flags: JITRING_CHECK_ALLOW_TRUNCATED or 0.
 * @started: the header has been read.
 * @eof: EOF has been reached.
 * @chunk: bytes asked for per read; JITRING_STREAM_CHUNK, which a test
 *	may lower before the first jitring_stream_next().
 * @buf: the window.
 * @cap: bytes allocated at @buf.
 * @header: the decoded header, once @started.
 *
 * Memory is one chunk, or the largest record plus one chunk: a record is
 * decoded whole, so the window grows to hold it.  For a regular file it
 * never grows past what the file holds; for a pipe at most to twice the
 * bytes that actually arrived.  A regular file is read only up to the size
 * it had at jitring_stream_open(): a dump that grows meanwhile is checked
 * as it was then (its last record may be torn: JITRING_CHECK_ALLOW_TRUNCATED),
 * and one that shrinks is an error (-ENODATA), not a crash.
 */
struct jitring_rd_stream {
	struct jitring_reader r;
	int fd;
	bool regular;
	uint64_t size;
	uint64_t pos;
	unsigned int flags;
	bool started;
	bool eof;
	size_t chunk;
	unsigned char *buf;
	size_t cap;
	struct jitring_rd_header header;
};

/** Default bytes per read of a stream. */
#define JITRING_STREAM_CHUNK ((size_t)1 << 20)

/**
 * jitring_stream_open() - Prepare to read a jitdump file descriptor.
 * @st: the stream to set up.
 * @fd: a regular file (read from offset 0 with pread(2)), or a pipe or
 *	socket (read with read(2) to its end).
 * @flags: JITRING_CHECK_ALLOW_TRUNCATED or 0.
 *
 * Reads nothing yet.  Devices are refused: /dev/zero and the like never
 * end, and a jitdump file is never one.
 *
 * Context: any thread; allocates memory.
 * Return: 0; -EINVAL for a NULL @st, a negative @fd or unknown @flags;
 * -EISDIR for a directory; -ENODEV for a device or any other file type;
 * -ENOMEM; or -errno from fstat(2).
 */
int jitring_stream_open(struct jitring_rd_stream *st, int fd,
			unsigned int flags);

/**
 * jitring_stream_next() - Decode the next record of a stream.
 * @st: a stream from jitring_stream_open().
 * @rec: receives the record; its pointers are valid until the next call.
 *
 * The first call reads and checks the header (@st->header).  Rules and
 * offsets are those of jitring_reader_next() on the whole file.
 *
 * Context: any thread; @st must not be shared without locking.
 * Return: 1 and @rec filled; 0 at the end of the file; -EBADMSG on a
 * violation (@st->r.rule, @st->r.err_off, @st->r.detail); -ENODATA if a
 * regular file ended before the size it had at jitring_stream_open() (it
 * was truncated while being read; @st->pos bytes were there); -ENOMEM;
 * -EINVAL for NULL arguments; or -errno from read(2)/pread(2).  Errors
 * are sticky.
 */
int jitring_stream_next(struct jitring_rd_stream *st,
			struct jitring_rd_record *rec);

/**
 * jitring_stream_close() - Free a stream's window.
 * @st: a stream, or NULL.  Its fd stays open.
 *
 * Context: any thread.
 */
void jitring_stream_close(struct jitring_rd_stream *st);

/**
 * jitring_reader_type_name() - Name of a record id, as perf spells it.
 * @id: a record id.
 *
 * Context: any thread; async-signal-safe.
 * Return: "CODE_LOAD", "CODE_MOVE", "CODE_DEBUG_INFO", "CODE_CLOSE",
 * "CODE_UNWINDING_INFO", or "UNKNOWN".
 */
const char *jitring_reader_type_name(uint32_t id);

/**
 * struct jitring_check_rule - One rule of jitring_check().
 * @name: stable short name, e.g. "load-name".
 * @desc: one-line description, including which offset is reported.
 */
struct jitring_check_rule {
	const char *name;
	const char *desc;
};

/**
 * jitring_check_rules() - List every rule jitring_check() enforces.
 * @count: receives the number of rules.
 *
 * The list is in checking order: header rules, then single-record rules,
 * then cross-record rules.
 *
 * Context: any thread; async-signal-safe.
 * Return: a static array of *@count rules.
 */
const struct jitring_check_rule *jitring_check_rules(size_t *count);

/**
 * struct jitring_check_result - Outcome of jitring_check().
 * @rule: name of the first violation, or NULL when the file is valid.
 * @off: file offset of the violation (see the rule's description).
 * @detail: human-readable explanation of the violation, or "".
 * @header: the decoded header (zero if the file is shorter than 40 bytes).
 * @count: records per id (JITRING_RD_CODE_*); up to the violation if any.
 * @records: all records.
 * @pids: distinct pid values of LOAD and MOVE records.
 * @tids: distinct tid values of LOAD and MOVE records.
 * @ts_min: smallest record timestamp (0 if there are no records).
 * @ts_max: largest record timestamp.
 * @file_size: bytes in the file.
 * @zero_tail: zero bytes between the last record and EOF.
 * @truncated: bytes of a tolerated truncated last record (0 if none).
 * @lines_uncovered: a warning, not a violation: DEBUG_INFO records whose
 *	last row starts before the end of their CODE_LOAD's code.  perf 6.1
 *	ends the line program at the last row, so the code from there on
 *	gets no source line ("??:0"); jitring itself appends a closing row
 *	at code_addr + code_size, other writers may not.
 * @lines_uncovered_off: offset of the first such DEBUG_INFO.
 */
struct jitring_check_result {
	const char *rule;
	uint64_t off;
	char detail[160];
	struct jitring_rd_header header;
	uint64_t count[JITRING_RD_NR_IDS];
	uint64_t records;
	uint64_t pids;
	uint64_t tids;
	uint64_t ts_min;
	uint64_t ts_max;
	uint64_t file_size;
	uint64_t zero_tail;
	uint64_t truncated;
	uint64_t lines_uncovered;
	uint64_t lines_uncovered_off;
};

/**
 * jitring_check() - Validate a whole jitdump image.
 * @buf: the file.
 * @len: bytes at @buf.
 * @flags: JITRING_CHECK_SORTED, JITRING_CHECK_ALLOW_TRUNCATED.
 * @res: receives the first violation, or the summary of a valid file.
 *
 * Header rules come first, then records in file order.  A rule about an
 * earlier record that only becomes decidable later (group-orphan,
 * group-mismatch) is reported when it is decided, before the rules of the
 * record that decides it.  Memory and time are linear in the number of
 * records, also for a file made to defeat the hash sets (code_index, pid
 * and tid): they are keyed with a random key drawn for each check.
 *
 * Context: any thread; allocates memory.
 * Return: 0 if the file is valid; 1 on a violation (@res->rule,
 * @res->off, @res->detail); -EINVAL if @res is NULL, @buf is NULL with
 * @len > 0 or @flags has unknown bits; -ENOMEM.
 */
int jitring_check(const void *buf, size_t len, unsigned int flags,
		  struct jitring_check_result *res);

/**
 * jitring_check_stream() - Validate a jitdump file read as a stream.
 * @st: a stream from jitring_stream_open(), not read from yet.
 * @flags: JITRING_CHECK_SORTED, and JITRING_CHECK_ALLOW_TRUNCATED exactly
 *	when @st was opened with it.
 * @res: receives the first violation, or the summary of a valid file.
 *
 * The same rules, offsets and summary as jitring_check() on the whole
 * file, in the memory of struct jitring_rd_stream plus the sets.  The
 * detail of an index-duplicate names the first CODE_LOAD's offset by
 * reading a regular file again from the start; for a pipe it cannot.
 * @res->file_size is a regular file's size, or the bytes read from a pipe
 * (which is not read on past a violation).
 *
 * Context: any thread; allocates memory.
 * Return: as jitring_check(), plus the I/O errors of jitring_stream_next()
 * (-ENODATA: the file shrank while being read) with @res filled up to
 * there.
 */
int jitring_check_stream(struct jitring_rd_stream *st, unsigned int flags,
			 struct jitring_check_result *res);

#ifdef JITRING_TESTPOINTS
/*
 * Test builds: slots visited by the hash sets of jitring_check(), and
 * lookups made, summed over every check of the process.  A probe is a
 * slot stepped over because another key sits in it.
 */
extern uint64_t jitring_reader_set_lookups;
extern uint64_t jitring_reader_set_probes;
#endif

#endif /* JITRING_SRC_READER_H */
