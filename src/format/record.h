/* SPDX-License-Identifier: MIT */
/*
 * Encoding of jitdump records.  A group is what one jitring_write() adds:
 * [UNWINDING_INFO][DEBUG_INFO]CODE_LOAD, planned once (validation and sizes)
 * and then encoded straight into its destination (a ring slot, or for the
 * mutex engine piece by piece into a FILE).
 */
#ifndef JITRING_SRC_RECORD_H
#define JITRING_SRC_RECORD_H

#include <stdint.h>
#include <string.h>

#include "eh_frame.h"
#include "jitring.h"
#include "jitring/jitdump.h"

#define JR_UNW_FIXED ((uint32_t)sizeof(struct jitdump_code_unwinding_info))
#define JR_EH_HDR_SIZE ((uint32_t)sizeof(struct jitdump_eh_frame_hdr))
#define JR_DBG_FIXED ((uint32_t)sizeof(struct jitdump_code_debug_info))
#define JR_LOAD_FIXED ((uint32_t)sizeof(struct jitdump_code_load))
#define JR_MOVE_SIZE ((uint32_t)sizeof(struct jitdump_code_move))

/**
 * struct jitring_group - A validated entry and the layout of its records.
 * @e: the caller's entry (borrowed for the duration of the call).
 * @name_len: bytes of the name including its NUL.
 * @unw_size: UNWINDING_INFO record bytes, 0 without unwinding info.
 * @eh_pad: zero bytes after the .eh_frame_hdr (pads the record to 8).
 * @dbg_size: DEBUG_INFO record bytes, 0 without a line table.
 * @dbg_rows: rows in the DEBUG_INFO record: the caller's, plus a closing
 *	row when the last one starts inside the code (see plan_lines()).
 * @load_size: CODE_LOAD record bytes.
 * @total: bytes of the whole group.
 * @nr_records: records in the group (1 to 3).
 * @eh: where the FDE sits in the caller's .eh_frame.
 */
struct jitring_group {
	const struct jitring_entry *e;
	uint32_t name_len;
	uint32_t unw_size;
	uint32_t eh_pad;
	uint32_t dbg_size;
	uint32_t dbg_rows;
	uint32_t load_size;
	uint32_t nr_records;
	uint64_t total;
	struct jitring_eh_frame_info eh;
};

/**
 * jitring_record_plan() - Validate @e and compute the group layout.
 * @g: filled on success.
 * @e: the caller's entry.
 *
 * Context: any thread; hot path; reads only @e and what it points to.
 * Return: 0, -EINVAL or -E2BIG as documented for jitring_write().
 */
int jitring_record_plan(struct jitring_group *g, const struct jitring_entry *e);

/**
 * jitring_record_rename() - Reuse a planned group for another name.
 * @g: a group jitring_record_plan() made for an entry that differs from
 *	@e at most in its name (and code address): everything else, the
 *	eh_frame check among it, stands.
 * @e: the new entry; its name is checked as jitring_record_plan() does.
 *
 * The trampoline kit plans its copies' group once per set.
 * Return: 0, -EINVAL or -E2BIG.
 */
int jitring_record_rename(struct jitring_group *g,
			  const struct jitring_entry *e);

/**
 * jitring_record_encode() - Encode a planned group into @dst.
 * @g: a group planned by jitring_record_plan().
 * @dst: g->total writable bytes (no alignment needed).
 * @ts: timestamp for every record of the group.
 * @pid: process id for CODE_LOAD.
 * @tid: thread id for CODE_LOAD.
 * @code_index: the CODE_LOAD's code_index.
 */
void jitring_record_encode(const struct jitring_group *g, void *dst,
			   uint64_t ts, uint32_t pid, uint32_t tid,
			   uint64_t code_index);

/**
 * jitring_record_restamp() - Rewrite the timestamp of every record.
 * @dst: an encoded group (or a single CODE_MOVE record).
 * @total: its bytes.
 * @ts: the new timestamp.
 */
void jitring_record_restamp(void *dst, uint64_t total, uint64_t ts);

/**
 * jitring_record_move_check() - Validate jitring_move() arguments.
 * Return: 0 or -EINVAL.
 */
int jitring_record_move_check(const void *new_addr, uint64_t code_size);

/** jitring_record_encode_move() - Encode a 64-byte CODE_MOVE into @dst. */
void jitring_record_encode_move(void *dst, uint64_t ts, uint32_t pid,
				uint32_t tid, uint64_t code_index,
				const void *old_addr, const void *new_addr,
				uint64_t code_size);

/*
 * The fixed parts of each record, shared by jitring_record_encode() and the
 * mutex engine, which writes the pieces one fwrite at a time.
 */
void jitring_record_unw_fixed(const struct jitring_group *g, uint64_t ts,
			      struct jitdump_code_unwinding_info *u);
void jitring_record_eh_hdr(const struct jitring_group *g,
			   struct jitdump_eh_frame_hdr *h);
/* The pc_begin value of the FDE once placed where perf maps it. */
int32_t jitring_record_pc_begin(const struct jitring_group *g);
void jitring_record_dbg_fixed(const struct jitring_group *g, uint64_t ts,
			      struct jitdump_code_debug_info *d);

/*
 * Row @i (0 to g->dbg_rows - 1) of the DEBUG_INFO record as written: the
 * caller's row @i, or the closing row, which repeats the last row's line,
 * discriminator and file at code_addr + code_size.  Return: its file.
 */
static inline const char *jitring_record_dbg_row(const struct jitring_group *g,
						 uint32_t i,
						 struct jitdump_debug_entry *de)
{
	const struct jitring_entry *e = g->e;
	const struct jitring_line *l =
		&e->lines[i < e->nr_lines ? i : e->nr_lines - 1];

	de->addr = i < e->nr_lines ?
			   l->addr :
			   (uint64_t)(uintptr_t)e->code_addr + e->code_size;
	de->lineno = l->line;
	de->discrim = l->discrim;
	return l->file;
}
void jitring_record_load_fixed(const struct jitring_group *g, uint64_t ts,
			       uint32_t pid, uint32_t tid, uint64_t code_index,
			       struct jitdump_code_load *l);
/* Write the name and its NUL at @p; returns the byte after it. */
uint8_t *jitring_record_put_name_parts(const struct jitring_group *g,
				       uint8_t *p);
static inline uint8_t *jitring_record_put_name(const struct jitring_group *g,
					       uint8_t *p)
{
	if (__builtin_expect(g->e->nr_name_parts != 0, 0))
		return jitring_record_put_name_parts(g, p);
	memcpy(p, g->e->name, g->name_len);
	return p + g->name_len;
}

/* The bytes dumped as the code. */
static inline const void *jitring_record_code(const struct jitring_entry *e)
{
	return e->code_bytes ? e->code_bytes : e->code_addr;
}

/** jitring_record_header() - Fill the 40-byte file header. */
void jitring_record_header(struct jitdump_header *h, uint32_t elf_mach,
			   uint32_t pid, uint64_t ts);

/** jitring_record_host_mach() - ELF e_machine of the host. */
uint32_t jitring_record_host_mach(void);

#endif /* JITRING_SRC_RECORD_H */
