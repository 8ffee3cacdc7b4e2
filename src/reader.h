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
 * @buf: the image.
 * @len: its length.
 * @off: offset of the next record.
 * @flags: JITRING_CHECK_ALLOW_TRUNCATED or 0.
 * @state: 0 while records remain, 1 at the end, a negative errno after a
 *	violation (sticky).
 * @zero_tail: at the end: zero bytes between the last record and EOF.
 * @truncated: at the end: bytes of a tolerated truncated last record, or 0.
 * @rule: after a violation: its rule name.
 * @err_off: after a violation: the file offset it concerns.
 * @detail: after a violation: a human-readable explanation.
 *
 * Filled by jitring_reader_init(); the fields are read-only to callers.
 */
struct jitring_reader {
	const unsigned char *buf;
	size_t len;
	size_t off;
	unsigned int flags;
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
 *	by EOF (it ends the file; @r->truncated says how many bytes it had).
 * @h: receives the decoded header (filled whenever @len >= 40, even when a
 *	header rule fails); may be NULL.
 *
 * Checks the header rules header-short, header-magic, header-version,
 * header-size and header-flags in that order.
 *
 * Context: any thread; @r must not be shared without locking.
 * Return: 0; -EINVAL if @r is NULL, @buf is NULL with @len > 0 or @flags
 * has unknown bits; -EBADMSG if the header breaks a rule (@r->rule,
 * @r->err_off and @r->detail say which).
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
 * Context: any thread; @r must not be shared without locking.
 * Return: 1 and @rec filled; 0 at the end of the file (and on every later
 * call); -EINVAL if an argument is NULL or @r was not initialised;
 * -EBADMSG on a violation (see @r->rule; returned again on later calls).
 */
int jitring_reader_next(struct jitring_reader *r,
			struct jitring_rd_record *rec);

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
 * records (hash sets for code_index, pid and tid).
 *
 * Context: any thread; allocates memory.
 * Return: 0 if the file is valid; 1 on a violation (@res->rule,
 * @res->off, @res->detail); -EINVAL if @res is NULL, @buf is NULL with
 * @len > 0 or @flags has unknown bits; -ENOMEM.
 */
int jitring_check(const void *buf, size_t len, unsigned int flags,
		  struct jitring_check_result *res);

#endif /* JITRING_SRC_READER_H */
