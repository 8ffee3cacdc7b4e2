/* SPDX-License-Identifier: MIT */
/*
 * jitdump reader and validator.
 *
 * Written from the format description (docs/format.md, perf's
 * jitdump-specification.txt and what perf 6.1 actually does), not from the
 * encoder: fields are read by memcpy at explicit offsets, never through
 * include/jitring/jitdump.h, so that an encoder layout bug is caught rather
 * than reproduced.
 *
 * The reader checks what one record can tell on its own; jitring_check()
 * keeps the cross-record state (pending UNWINDING_INFO/DEBUG_INFO group,
 * the set of loaded code_index values, CLOSE seen, previous timestamp).
 * Sets are open-addressing hash tables so that millions of records and
 * hundreds of thousands of threads stay linear.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "reader.h"

/* Field offsets, from the format description. */
#define HDR_MAGIC 0
#define HDR_VERSION 4
#define HDR_TOTAL_SIZE 8
#define HDR_ELF_MACH 12
#define HDR_PAD1 16
#define HDR_PID 20
#define HDR_TIMESTAMP 24
#define HDR_FLAGS 32

#define REC_ID 0
#define REC_SIZE 4
#define REC_TS 8

#define LOAD_PID 16
#define LOAD_TID 20
#define LOAD_VMA 24
#define LOAD_CODE_ADDR 32
#define LOAD_CODE_SIZE 40
#define LOAD_CODE_INDEX 48
#define LOAD_NAME 56

#define MOVE_PID 16
#define MOVE_TID 20
#define MOVE_VMA 24
#define MOVE_OLD_ADDR 32
#define MOVE_NEW_ADDR 40
#define MOVE_CODE_SIZE 48
#define MOVE_CODE_INDEX 56
#define MOVE_SIZE 64

#define DEBUG_CODE_ADDR 16
#define DEBUG_NR_ENTRY 24
#define DEBUG_ENTRIES 32
#define DEBUG_ROW_FIXED 16 /* u64 addr, i32 lineno, i32 discrim */

#define UNWIND_SIZE 16
#define UNWIND_HDR_SIZE 24
#define UNWIND_MAPPED_SIZE 32
#define UNWIND_PAYLOAD 40

#define EH_HDR_SIZE 20
#define EH_HDR_VERSION 1
#define EH_HDR_PTR_ENC 0x1b /* DW_EH_PE_pcrel | DW_EH_PE_sdata4 */
#define EH_HDR_COUNT_ENC 0x03 /* DW_EH_PE_udata4 */
#define EH_HDR_TABLE_ENC 0x3b /* DW_EH_PE_datarel | DW_EH_PE_sdata4 */

enum rule {
	R_HEADER_SHORT,
	R_HEADER_MAGIC,
	R_HEADER_VERSION,
	R_HEADER_SIZE,
	R_HEADER_FLAGS,
	R_RECORD_SIZE,
	R_RECORD_ID,
	R_RECORD_BOUNDS,
	R_TRAILING_GARBAGE,
	R_LOAD_SIZE,
	R_LOAD_CODE,
	R_LOAD_NAME,
	R_MOVE_SIZE,
	R_DEBUG_SIZE,
	R_DEBUG_ENTRIES,
	R_UNWIND_SIZE,
	R_UNWIND_HDR,
	R_GROUP_ORPHAN,
	R_GROUP_DUPLICATE,
	R_GROUP_MISMATCH,
	R_INDEX_DUPLICATE,
	R_MOVE_UNKNOWN_INDEX,
	R_CLOSE_NOT_LAST,
	R_TS_ZERO,
	R_TS_ORDER,
	R_COUNT,
};

static const struct jitring_check_rule rules[R_COUNT] = {
	[R_HEADER_SHORT] = { "header-short",
		"file shorter than the 40-byte header (offset 0)" },
	[R_HEADER_MAGIC] = { "header-magic",
		"magic is not 0x4A695444 (offset 0)" },
	[R_HEADER_VERSION] = { "header-version",
		"version is not 1 (offset 4)" },
	[R_HEADER_SIZE] = { "header-size",
		"header total_size is not 40 (offset 8)" },
	[R_HEADER_FLAGS] = { "header-flags",
		"flags has bits other than ARCH_TIMESTAMP (offset 32)" },
	[R_RECORD_SIZE] = { "record-size",
		"record total_size < 16 while non-zero bytes follow, e.g. a "
		"zero hole (record offset)" },
	[R_RECORD_ID] = { "record-id",
		"unknown record id, >= 5 (record offset)" },
	[R_RECORD_BOUNDS] = { "record-bounds",
		"record runs past EOF; tolerated as a last record with "
		"--allow-truncated (record offset)" },
	[R_TRAILING_GARBAGE] = { "trailing-garbage",
		"non-zero bytes after the last record that cannot start a "
		"record (their offset)" },
	[R_LOAD_SIZE] = { "load-size",
		"CODE_LOAD smaller than 57 bytes (record offset)" },
	[R_LOAD_CODE] = { "load-code",
		"CODE_LOAD code_size is 0 or leaves no room for the name "
		"(record offset)" },
	[R_LOAD_NAME] = { "load-name",
		"CODE_LOAD name has no NUL before the code, the record's last"
		" code_size bytes (record offset)" },
	[R_MOVE_SIZE] = { "move-size",
		"CODE_MOVE total_size is not 64 (record offset)" },
	[R_DEBUG_SIZE] = { "debug-size",
		"DEBUG_INFO smaller than 32 bytes (record offset)" },
	[R_DEBUG_ENTRIES] = { "debug-entries",
		"DEBUG_INFO row overruns the record or its file name lacks a "
		"NUL (row offset)" },
	[R_UNWIND_SIZE] = { "unwind-size",
		"UNWINDING_INFO sizes inconsistent: record < 40, "
		"unwinding_size past the payload, eh_frame part not a non-"
		"zero multiple of 4, or mapped_size < unwinding_size (record "
		"offset)" },
	[R_UNWIND_HDR] = { "unwind-hdr",
		"UNWINDING_INFO eh_frame_hdr_size is not 20, or the hdr has "
		"wrong version/encodings, fde_count != 1, eh_frame_ptr not "
		"pointing at the eh_frame start, or fde outside it (record "
		"offset)" },
	[R_GROUP_ORPHAN] = { "group-orphan",
		"UNWINDING_INFO/DEBUG_INFO not followed by a CODE_LOAD before"
		" a MOVE, CLOSE or EOF (offset of the orphan)" },
	[R_GROUP_DUPLICATE] = { "group-duplicate",
		"second UNWINDING_INFO or DEBUG_INFO pending for one "
		"CODE_LOAD (offset of the second)" },
	[R_GROUP_MISMATCH] = { "group-mismatch",
		"DEBUG_INFO code_addr differs from the code_addr of the "
		"CODE_LOAD it attaches to (DEBUG_INFO offset)" },
	[R_INDEX_DUPLICATE] = { "index-duplicate",
		"CODE_LOAD code_index already used by an earlier CODE_LOAD "
		"(record offset)" },
	[R_MOVE_UNKNOWN_INDEX] = { "move-unknown-index",
		"CODE_MOVE of a code_index no earlier CODE_LOAD has (record "
		"offset)" },
	[R_CLOSE_NOT_LAST] = { "close-not-last",
		"record after CODE_CLOSE (offset of that record)" },
	[R_TS_ZERO] = { "ts-zero",
		"--sorted: record timestamp is 0 (record offset)" },
	[R_TS_ORDER] = { "ts-order",
		"--sorted: record timestamp below the previous one (record "
		"offset)" },
};

static const char *const type_names[JITRING_RD_NR_IDS] = {
	"CODE_LOAD", "CODE_MOVE", "CODE_DEBUG_INFO", "CODE_CLOSE",
	"CODE_UNWINDING_INFO",
};

static uint32_t rd32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static int32_t rds32(const unsigned char *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	/* Comparing the range with itself shifted by one uses libc's SIMD. */
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

const char *jitring_reader_type_name(uint32_t id)
{
	return id < JITRING_RD_NR_IDS ? type_names[id] : "UNKNOWN";
}

const struct jitring_check_rule *jitring_check_rules(size_t *count)
{
	if (count)
		*count = R_COUNT;
	return rules;
}

__attribute__((format(printf, 4, 5)))
static int fail(struct jitring_reader *r, enum rule rule, size_t off,
		const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
	va_end(ap);
	r->rule = rules[rule].name;
	r->err_off = off;
	r->state = -EBADMSG;
	return -EBADMSG;
}

int jitring_reader_init(struct jitring_reader *r, const void *buf, size_t len,
			unsigned int flags, struct jitring_rd_header *h)
{
	const unsigned char *p = buf;
	struct jitring_rd_header hd;
	uint64_t unknown;

	if (!r || (!buf && len) || (flags & ~JITRING_CHECK_ALLOW_TRUNCATED))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->buf = p;
	r->len = len;
	r->flags = flags;
	memset(&hd, 0, sizeof(hd));
	if (len >= JITRING_RD_HEADER_SIZE) {
		hd.magic = rd32(p + HDR_MAGIC);
		hd.version = rd32(p + HDR_VERSION);
		hd.total_size = rd32(p + HDR_TOTAL_SIZE);
		hd.elf_mach = rd32(p + HDR_ELF_MACH);
		hd.pad1 = rd32(p + HDR_PAD1);
		hd.pid = rd32(p + HDR_PID);
		hd.timestamp = rd64(p + HDR_TIMESTAMP);
		hd.flags = rd64(p + HDR_FLAGS);
	}
	if (h)
		*h = hd;
	if (len < JITRING_RD_HEADER_SIZE)
		return fail(r, R_HEADER_SHORT, 0,
			    "%zu bytes, the header needs %u", len,
			    JITRING_RD_HEADER_SIZE);
	if (hd.magic != JITRING_RD_MAGIC)
		return fail(r, R_HEADER_MAGIC, HDR_MAGIC,
			    "magic 0x%08x, want 0x%08x", hd.magic,
			    JITRING_RD_MAGIC);
	if (hd.version != JITRING_RD_VERSION)
		return fail(r, R_HEADER_VERSION, HDR_VERSION,
			    "version %u, want %u", hd.version,
			    JITRING_RD_VERSION);
	if (hd.total_size != JITRING_RD_HEADER_SIZE)
		return fail(r, R_HEADER_SIZE, HDR_TOTAL_SIZE,
			    "header total_size %u, want %u", hd.total_size,
			    JITRING_RD_HEADER_SIZE);
	unknown = hd.flags & ~JITRING_RD_FLAG_ARCH_TIMESTAMP;
	if (unknown)
		return fail(r, R_HEADER_FLAGS, HDR_FLAGS,
			    "unknown flag bits 0x%llx",
			    (unsigned long long)unknown);
	r->off = JITRING_RD_HEADER_SIZE;
	return 0;
}

/* A record that EOF cut short: the end of the file, if the caller allows. */
static int cut_short(struct jitring_reader *r, size_t rem, const char *what)
{
	if (!(r->flags & JITRING_CHECK_ALLOW_TRUNCATED))
		return fail(r, R_RECORD_BOUNDS, r->off,
			    "%s, only %zu bytes before EOF", what, rem);
	r->truncated = rem;
	r->state = 1;
	return 0;
}

static int decode_load(struct jitring_reader *r, struct jitring_rd_record *rec)
{
	const unsigned char *p = rec->raw;
	const unsigned char *nul;
	uint32_t size = rec->size;
	size_t code_start;

	if (size < LOAD_NAME + 1)
		return fail(r, R_LOAD_SIZE, rec->off,
			    "CODE_LOAD total_size %u, need at least %u", size,
			    LOAD_NAME + 1);
	rec->pid = rd32(p + LOAD_PID);
	rec->tid = rd32(p + LOAD_TID);
	rec->vma = rd64(p + LOAD_VMA);
	rec->code_addr = rd64(p + LOAD_CODE_ADDR);
	rec->code_size = rd64(p + LOAD_CODE_SIZE);
	rec->code_index = rd64(p + LOAD_CODE_INDEX);
	if (rec->code_size == 0 || rec->code_size > size - (LOAD_NAME + 1))
		return fail(r, R_LOAD_CODE, rec->off,
			    "code_size %llu in a %u-byte CODE_LOAD (room for %u)",
			    (unsigned long long)rec->code_size, size,
			    size - (LOAD_NAME + 1));
	code_start = size - rec->code_size;
	nul = memchr(p + LOAD_NAME, 0, code_start - LOAD_NAME);
	if (!nul)
		return fail(r, R_LOAD_NAME, rec->off,
			    "no NUL in the %zu name bytes before the code at record offset %zu",
			    code_start - LOAD_NAME, code_start);
	rec->name = (const char *)(p + LOAD_NAME);
	rec->name_len = (size_t)(nul - (p + LOAD_NAME));
	rec->code = p + code_start;
	return 0;
}

static int decode_move(struct jitring_reader *r, struct jitring_rd_record *rec)
{
	const unsigned char *p = rec->raw;

	if (rec->size != MOVE_SIZE)
		return fail(r, R_MOVE_SIZE, rec->off,
			    "CODE_MOVE total_size %u, want %u", rec->size,
			    MOVE_SIZE);
	rec->pid = rd32(p + MOVE_PID);
	rec->tid = rd32(p + MOVE_TID);
	rec->vma = rd64(p + MOVE_VMA);
	rec->old_code_addr = rd64(p + MOVE_OLD_ADDR);
	rec->new_code_addr = rd64(p + MOVE_NEW_ADDR);
	rec->code_size = rd64(p + MOVE_CODE_SIZE);
	rec->code_index = rd64(p + MOVE_CODE_INDEX);
	return 0;
}

static int decode_debug(struct jitring_reader *r, struct jitring_rd_record *rec)
{
	const unsigned char *p = rec->raw;
	uint32_t size = rec->size;
	uint32_t pos = DEBUG_ENTRIES;
	const unsigned char *nul;
	uint64_t i;

	if (size < DEBUG_ENTRIES)
		return fail(r, R_DEBUG_SIZE, rec->off,
			    "DEBUG_INFO total_size %u, need at least %u", size,
			    DEBUG_ENTRIES);
	rec->code_addr = rd64(p + DEBUG_CODE_ADDR);
	rec->nr_entry = rd64(p + DEBUG_NR_ENTRY);
	/* Each row takes >= 17 bytes, so this loop is bounded by @size. */
	for (i = 0; i < rec->nr_entry; i++) {
		if (size - pos < DEBUG_ROW_FIXED + 1)
			return fail(r, R_DEBUG_ENTRIES, rec->off + pos,
				    "row %llu of %llu overruns the record (%u bytes left)",
				    (unsigned long long)i,
				    (unsigned long long)rec->nr_entry,
				    size - pos);
		nul = memchr(p + pos + DEBUG_ROW_FIXED, 0,
			     size - pos - DEBUG_ROW_FIXED);
		if (!nul)
			return fail(r, R_DEBUG_ENTRIES, rec->off + pos,
				    "row %llu of %llu: file name has no NUL",
				    (unsigned long long)i,
				    (unsigned long long)rec->nr_entry);
		pos = (uint32_t)(nul + 1 - p);
	}
	rec->entries_end = pos;
	return 0;
}

static int decode_unwind(struct jitring_reader *r,
			 struct jitring_rd_record *rec)
{
	const unsigned char *p = rec->raw;
	const unsigned char *hdr;
	uint32_t size = rec->size;
	int64_t eh, want_ptr;
	int32_t fde;

	if (size < UNWIND_PAYLOAD)
		return fail(r, R_UNWIND_SIZE, rec->off,
			    "UNWINDING_INFO total_size %u, need at least %u",
			    size, UNWIND_PAYLOAD);
	rec->unwinding_size = rd64(p + UNWIND_SIZE);
	rec->eh_frame_hdr_size = rd64(p + UNWIND_HDR_SIZE);
	rec->mapped_size = rd64(p + UNWIND_MAPPED_SIZE);
	rec->unwind = p + UNWIND_PAYLOAD;
	if (rec->eh_frame_hdr_size != EH_HDR_SIZE)
		return fail(r, R_UNWIND_HDR, rec->off,
			    "eh_frame_hdr_size %llu, want %u",
			    (unsigned long long)rec->eh_frame_hdr_size,
			    EH_HDR_SIZE);
	if (rec->unwinding_size > size - UNWIND_PAYLOAD)
		return fail(r, R_UNWIND_SIZE, rec->off,
			    "unwinding_size %llu exceeds the %u-byte payload",
			    (unsigned long long)rec->unwinding_size,
			    size - UNWIND_PAYLOAD);
	if (rec->unwinding_size <= EH_HDR_SIZE ||
	    (rec->unwinding_size - EH_HDR_SIZE) % 4)
		return fail(r, R_UNWIND_SIZE, rec->off,
			    "eh_frame part %lld bytes (unwinding_size %llu), want a non-zero multiple of 4",
			    (long long)rec->unwinding_size - EH_HDR_SIZE,
			    (unsigned long long)rec->unwinding_size);
	if (rec->mapped_size < rec->unwinding_size)
		return fail(r, R_UNWIND_SIZE, rec->off,
			    "mapped_size %llu < unwinding_size %llu",
			    (unsigned long long)rec->mapped_size,
			    (unsigned long long)rec->unwinding_size);
	rec->eh_frame_size = rec->unwinding_size - EH_HDR_SIZE;
	eh = (int64_t)rec->eh_frame_size;
	hdr = rec->unwind + eh;
	if (hdr[0] != EH_HDR_VERSION || hdr[1] != EH_HDR_PTR_ENC ||
	    hdr[2] != EH_HDR_COUNT_ENC || hdr[3] != EH_HDR_TABLE_ENC)
		return fail(r, R_UNWIND_HDR, rec->off,
			    "hdr at record offset %lld starts %02x %02x %02x %02x, want 01 1b 03 3b",
			    (long long)(UNWIND_PAYLOAD + eh), hdr[0], hdr[1],
			    hdr[2], hdr[3]);
	if (rd32(hdr + 8) != 1)
		return fail(r, R_UNWIND_HDR, rec->off,
			    "hdr fde_count %u, want 1", rd32(hdr + 8));
	/* pc-relative to the field itself (hdr + 4); .eh_frame ends at hdr. */
	want_ptr = -(eh + 4);
	if (rds32(hdr + 4) != want_ptr)
		return fail(r, R_UNWIND_HDR, rec->off,
			    "hdr eh_frame_ptr %d, want %lld (.eh_frame right before the hdr)",
			    rds32(hdr + 4), (long long)want_ptr);
	/* data-relative to the hdr: the FDE lies inside .eh_frame, after
	 * the CIE that starts it. */
	fde = rds32(hdr + 16);
	if (fde <= -eh || fde >= 0)
		return fail(r, R_UNWIND_HDR, rec->off,
			    "hdr fde %d is outside the %lld-byte .eh_frame",
			    fde, (long long)eh);
	return 0;
}

int jitring_reader_next(struct jitring_reader *r,
			struct jitring_rd_record *rec)
{
	const unsigned char *p;
	size_t rem;
	uint32_t id, size;

	if (!r || !rec)
		return -EINVAL;
	if (r->state)
		return r->state < 0 ? r->state : 0;
	rem = r->len - r->off;
	p = r->buf + r->off;
	if (rem == 0) {
		r->state = 1;
		return 0;
	}
	if (rem < JITRING_RD_PREFIX_SIZE) {
		unsigned char pre[JITRING_RD_PREFIX_SIZE] = { 0 };

		if (all_zero(p, rem)) {
			r->zero_tail = rem;
			r->state = 1;
			return 0;
		}
		/* Could these bytes be the start of a record's prefix? */
		memcpy(pre, p, rem);
		id = rd32(pre + REC_ID);
		size = rd32(pre + REC_SIZE);
		if (id < JITRING_RD_NR_IDS &&
		    (rem < REC_SIZE + 4 || size >= JITRING_RD_PREFIX_SIZE))
			return cut_short(r, rem, "partial record prefix");
		return fail(r, R_TRAILING_GARBAGE, r->off,
			    "%zu non-zero bytes after the last record", rem);
	}
	id = rd32(p + REC_ID);
	size = rd32(p + REC_SIZE);
	if (size < JITRING_RD_PREFIX_SIZE) {
		if (all_zero(p, rem)) {
			r->zero_tail = rem;
			r->state = 1;
			return 0;
		}
		if (id == 0 && size == 0)
			return fail(r, R_RECORD_SIZE, r->off,
				    "zero bytes followed by non-zero data (a hole loses every later record)");
		return fail(r, R_RECORD_SIZE, r->off,
			    "total_size %u < %u", size, JITRING_RD_PREFIX_SIZE);
	}
	if (id >= JITRING_RD_NR_IDS)
		return fail(r, R_RECORD_ID, r->off, "unknown record id %u", id);
	if (size > rem) {
		char what[64];

		snprintf(what, sizeof(what), "%s of %u bytes",
			 type_names[id], size);
		return cut_short(r, rem, what);
	}

	memset(rec, 0, sizeof(*rec));
	rec->off = r->off;
	rec->id = id;
	rec->size = size;
	rec->ts = rd64(p + REC_TS);
	rec->raw = p;
	switch (id) {
	case JITRING_RD_CODE_LOAD:
		if (decode_load(r, rec))
			return r->state;
		break;
	case JITRING_RD_CODE_MOVE:
		if (decode_move(r, rec))
			return r->state;
		break;
	case JITRING_RD_CODE_DEBUG_INFO:
		if (decode_debug(r, rec))
			return r->state;
		break;
	case JITRING_RD_CODE_UNWINDING_INFO:
		if (decode_unwind(r, rec))
			return r->state;
		break;
	default:
		/* CLOSE: the prefix is all; extra bytes are ignored. */
		break;
	}
	r->off += size;
	return 1;
}

int jitring_reader_line(const struct jitring_rd_record *rec, size_t *cursor,
			struct jitring_rd_line *line)
{
	const unsigned char *p, *nul;
	size_t pos;

	if (!rec || !cursor || !line || !rec->raw ||
	    rec->id != JITRING_RD_CODE_DEBUG_INFO)
		return -EINVAL;
	pos = *cursor ? *cursor : DEBUG_ENTRIES;
	if (pos >= rec->entries_end)
		return 0;
	p = rec->raw;
	if (rec->entries_end > rec->size ||
	    rec->entries_end - pos < DEBUG_ROW_FIXED + 1)
		return -EBADMSG;
	nul = memchr(p + pos + DEBUG_ROW_FIXED, 0,
		     rec->entries_end - pos - DEBUG_ROW_FIXED);
	if (!nul)
		return -EBADMSG;
	line->off = rec->off + pos;
	line->addr = rd64(p + pos);
	line->line = rds32(p + pos + 8);
	line->discrim = rds32(p + pos + 12);
	line->file = (const char *)(p + pos + DEBUG_ROW_FIXED);
	*cursor = (size_t)(nul + 1 - p);
	return 1;
}

/*
 * Open-addressing set of u64 keys (linear probing, load <= 1/2).  Key 0
 * marks an empty slot, so it is kept aside.
 */
struct u64set {
	uint64_t *keys;
	size_t mask;
	size_t n;
	bool has_zero;
};

static size_t set_count(const struct u64set *s)
{
	return s->n + s->has_zero;
}

static void set_free(struct u64set *s)
{
	free(s->keys);
	s->keys = NULL;
}

/* Slot of @key, or of the empty slot where it would go. */
static size_t set_slot(const struct u64set *s, uint64_t key)
{
	size_t i = jr_mix64(key) & s->mask;

	while (s->keys[i] && s->keys[i] != key)
		i = (i + 1) & s->mask;
	return i;
}

static int set_grow(struct u64set *s)
{
	size_t cap = s->keys ? (s->mask + 1) * 2 : 1024;
	struct u64set t = { .mask = cap - 1 };
	size_t i;

	t.keys = calloc(cap, sizeof(*t.keys));
	if (!t.keys)
		return -ENOMEM;
	for (i = 0; s->keys && i <= s->mask; i++)
		if (s->keys[i])
			t.keys[set_slot(&t, s->keys[i])] = s->keys[i];
	t.n = s->n;
	t.has_zero = s->has_zero;
	set_free(s);
	*s = t;
	return 0;
}

static bool set_find(const struct u64set *s, uint64_t key)
{
	if (!key)
		return s->has_zero;
	return s->n && s->keys[set_slot(s, key)];
}

/* Return: 1 if added, 0 if already there, -ENOMEM. */
static int set_add(struct u64set *s, uint64_t key)
{
	size_t i;

	if (!key) {
		if (s->has_zero)
			return 0;
		s->has_zero = true;
		return 1;
	}
	if ((!s->keys || (s->n + 1) * 2 > s->mask + 1) && set_grow(s))
		return -ENOMEM;
	i = set_slot(s, key);
	if (s->keys[i])
		return 0;
	s->keys[i] = key;
	s->n++;
	return 1;
}

/*
 * The set of loaded code_index values.  Writers hand them out from a
 * counter, so they are dense: a bitmap holds those below a bound that grows
 * with the number of loads (at most ~64 bits per load), and the hash set
 * holds the rest.  A hash set alone thrashes the cache at millions of
 * loads; the bitmap stays in L2.
 */
struct idxset {
	uint64_t *bits;
	size_t nbits;
	size_t n;
	struct u64set big;
};

static bool idx_find(const struct idxset *s, uint64_t key)
{
	if (key < s->nbits && (s->bits[key / 64] >> (key % 64) & 1))
		return true;
	return set_find(&s->big, key);
}

/* Return: 1 if added, 0 if already there, -ENOMEM. */
static int idx_add(struct idxset *s, uint64_t key)
{
	size_t nbits, limit;
	uint64_t *bits;
	int ret;

	if (idx_find(s, key))
		return 0;
	limit = 64 * (s->n + 4096);
	if (key >= s->nbits && key < limit) {
		nbits = s->nbits ? s->nbits : 4096 * 64;
		while (nbits <= key)
			nbits *= 2;
		bits = realloc(s->bits, nbits / 8);
		if (!bits)
			return -ENOMEM;
		memset(bits + s->nbits / 64, 0, (nbits - s->nbits) / 8);
		s->bits = bits;
		s->nbits = nbits;
	}
	if (key < s->nbits) {
		s->bits[key / 64] |= 1ull << (key % 64);
	} else {
		ret = set_add(&s->big, key);
		if (ret < 0)
			return ret;
	}
	s->n++;
	return 1;
}

static void idx_free(struct idxset *s)
{
	free(s->bits);
	s->bits = NULL;
	set_free(&s->big);
}

struct pending {
	bool on;
	size_t off;
	uint64_t code_addr;
};

struct check_state {
	unsigned int flags;
	struct jitring_check_result *res;
	const unsigned char *buf;
	size_t len;
	struct idxset indices;
	struct u64set pids;
	struct u64set tids;
	struct pending unwind;
	struct pending debug;
	bool closed;
	size_t close_off;
	uint64_t prev_ts;
};

__attribute__((format(printf, 4, 5)))
static int violate(struct jitring_check_result *res, enum rule rule,
		   size_t off, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(res->detail, sizeof(res->detail), fmt, ap);
	va_end(ap);
	res->rule = rules[rule].name;
	res->off = off;
	return 1;
}

static int orphan(struct check_state *s, const char *before)
{
	const struct pending *o = &s->unwind;

	if (!s->unwind.on || (s->debug.on && s->debug.off < s->unwind.off))
		o = &s->debug;
	return violate(s->res, R_GROUP_ORPHAN, o->off,
		       "%s at offset %zu is not followed by a CODE_LOAD before %s",
		       o == &s->debug ? "DEBUG_INFO" : "UNWINDING_INFO",
		       o->off, before);
}

static int pend(struct check_state *s, struct pending *pd,
		const struct jitring_rd_record *rec)
{
	if (pd->on)
		return violate(s->res, R_GROUP_DUPLICATE, rec->off,
			       "second %s pending for one CODE_LOAD (first at offset %zu)",
			       type_names[rec->id], pd->off);
	pd->on = true;
	pd->off = rec->off;
	pd->code_addr = rec->code_addr;
	return 0;
}

/* Offset of the first CODE_LOAD of @index (the file is valid up to it). */
static size_t first_load(const struct check_state *s, uint64_t index)
{
	struct jitring_reader r;
	struct jitring_rd_record rec;

	if (jitring_reader_init(&r, s->buf, s->len, 0, NULL))
		return 0;
	while (jitring_reader_next(&r, &rec) == 1)
		if (rec.id == JITRING_RD_CODE_LOAD && rec.code_index == index)
			return rec.off;
	return 0;
}

static int check_load(struct check_state *s,
		      const struct jitring_rd_record *rec)
{
	int ret;

	ret = idx_add(&s->indices, rec->code_index);
	if (ret < 0)
		return ret;
	if (ret == 0)
		return violate(s->res, R_INDEX_DUPLICATE, rec->off,
			       "code_index %llu already loaded at offset %zu",
			       (unsigned long long)rec->code_index,
			       first_load(s, rec->code_index));
	return 0;
}

static int add_task(struct check_state *s, const struct jitring_rd_record *rec)
{
	if (set_add(&s->pids, rec->pid) < 0 ||
	    set_add(&s->tids, rec->tid) < 0)
		return -ENOMEM;
	return 0;
}

/* Return: 0, 1 after filling s->res with a violation, or -ENOMEM. */
static int check_one(struct check_state *s, const struct jitring_rd_record *rec)
{
	struct jitring_check_result *res = s->res;
	int ret;

	/* Rules about earlier records that this one decides come first. */
	if ((rec->id == JITRING_RD_CODE_MOVE ||
	     rec->id == JITRING_RD_CODE_CLOSE) &&
	    (s->unwind.on || s->debug.on))
		return orphan(s, type_names[rec->id]);
	if (rec->id == JITRING_RD_CODE_LOAD && s->debug.on &&
	    s->debug.code_addr != rec->code_addr)
		return violate(res, R_GROUP_MISMATCH, s->debug.off,
			       "DEBUG_INFO code_addr 0x%llx, its CODE_LOAD at offset %zu has 0x%llx",
			       (unsigned long long)s->debug.code_addr,
			       rec->off,
			       (unsigned long long)rec->code_addr);

	if (s->closed)
		return violate(res, R_CLOSE_NOT_LAST, rec->off,
			       "%s after the CODE_CLOSE at offset %zu",
			       type_names[rec->id], s->close_off);
	if (s->flags & JITRING_CHECK_SORTED) {
		if (rec->ts == 0)
			return violate(res, R_TS_ZERO, rec->off,
				       "%s timestamp is 0",
				       type_names[rec->id]);
		if (rec->ts < s->prev_ts)
			return violate(res, R_TS_ORDER, rec->off,
				       "timestamp %llu < previous %llu",
				       (unsigned long long)rec->ts,
				       (unsigned long long)s->prev_ts);
	}

	switch (rec->id) {
	case JITRING_RD_CODE_LOAD:
		ret = check_load(s, rec);
		if (ret)
			return ret;
		s->unwind.on = false;
		s->debug.on = false;
		ret = add_task(s, rec);
		break;
	case JITRING_RD_CODE_MOVE:
		if (!idx_find(&s->indices, rec->code_index))
			return violate(res, R_MOVE_UNKNOWN_INDEX, rec->off,
				       "code_index %llu was never loaded before",
				       (unsigned long long)rec->code_index);
		ret = add_task(s, rec);
		break;
	case JITRING_RD_CODE_DEBUG_INFO:
		ret = pend(s, &s->debug, rec);
		break;
	case JITRING_RD_CODE_UNWINDING_INFO:
		ret = pend(s, &s->unwind, rec);
		break;
	default:
		s->closed = true;
		s->close_off = rec->off;
		ret = 0;
		break;
	}
	if (ret)
		return ret;

	if (!res->records || rec->ts < res->ts_min)
		res->ts_min = rec->ts;
	if (rec->ts > res->ts_max)
		res->ts_max = rec->ts;
	if (rec->ts > s->prev_ts)
		s->prev_ts = rec->ts;
	res->count[rec->id]++;
	res->records++;
	return 0;
}

int jitring_check(const void *buf, size_t len, unsigned int flags,
		  struct jitring_check_result *res)
{
	struct check_state s;
	struct jitring_reader r;
	struct jitring_rd_record rec;
	int ret;

	if (!res)
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	res->file_size = len;
	if ((!buf && len) ||
	    (flags & ~(JITRING_CHECK_SORTED | JITRING_CHECK_ALLOW_TRUNCATED)))
		return -EINVAL;

	memset(&s, 0, sizeof(s));
	s.flags = flags;
	s.res = res;
	s.buf = buf;
	s.len = len;

	ret = jitring_reader_init(&r, buf, len,
				  flags & JITRING_CHECK_ALLOW_TRUNCATED,
				  &res->header);
	while (ret == 0) {
		ret = jitring_reader_next(&r, &rec);
		if (ret <= 0)
			break;
		ret = check_one(&s, &rec);
	}
	if (ret == -EBADMSG) {
		snprintf(res->detail, sizeof(res->detail), "%s", r.detail);
		res->rule = r.rule;
		res->off = r.err_off;
		ret = 1;
	} else if (ret == 0 && (s.unwind.on || s.debug.on) && !r.truncated) {
		/* A torn last record may have been the group's CODE_LOAD. */
		ret = orphan(&s, "EOF");
	}
	res->zero_tail = r.zero_tail;
	res->truncated = r.truncated;
	res->pids = set_count(&s.pids);
	res->tids = set_count(&s.tids);
	idx_free(&s.indices);
	set_free(&s.pids);
	set_free(&s.tids);
	return ret;
}
