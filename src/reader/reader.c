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
 *
 * The file under check may be hostile, so the sets must stay linear for
 * keys chosen against them: with a fixed hash (an invertible mixer), keys
 * can be picked to share one probe sequence, and n of them cost n^2 / 2
 * probes.  The hash is SipHash-1-3 under a 128-bit key drawn from
 * getrandom(2) for every check and never output, so the file's author
 * cannot know which keys collide: for any file, the expected cost of a
 * lookup is O(1) (load factor <= 1/2), and the worst case, O(n) per lookup,
 * would take knowing the key.  SipHash-1-3 is what Python, Rust's HashMap
 * and the kernel's hsiphash use for tables fed by untrusted input.
 *
 * Window mode and the stream (struct jitring_rd_stream) read a file
 * descriptor a chunk at a time instead of needing it in memory or mapped:
 * a mapped file that shrinks raises SIGBUS, and /dev/zero or a pipe never
 * ends.  The window holds at most one record plus one chunk; zero runs are
 * consumed as they come.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/compiler.h"
#include "common/testpoint.h"
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
#define EH_HDR_PTR_ENC 0x1b   /* DW_EH_PE_pcrel | DW_EH_PE_sdata4 */
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

/* One rule a line: */
/* clang-format off */
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
/* clang-format on */

static const char *const type_names[JITRING_RD_NR_IDS] = {
	"CODE_LOAD",  "CODE_MOVE",           "CODE_DEBUG_INFO",
	"CODE_CLOSE", "CODE_UNWINDING_INFO",
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

__attribute__((format(printf, 4, 5))) static int
fail(struct jitring_reader *r, enum rule rule, size_t off, const char *fmt, ...)
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

	if (!r || (!buf && len) ||
	    (flags &
	     ~(JITRING_CHECK_ALLOW_TRUNCATED | JITRING_READER_WINDOW)) ||
	    ((flags & JITRING_READER_WINDOW) && len < JITRING_RD_HEADER_SIZE))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->buf = p;
	r->len = len;
	r->flags = flags;
	r->more = flags & JITRING_READER_WINDOW;
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

/* File offset of the next record. */
static size_t here(const struct jitring_reader *r)
{
	return (size_t)(r->base + r->off);
}

/* A record that EOF cut short: the end of the file, if the caller allows. */
static int cut_short(struct jitring_reader *r, size_t rem, const char *what)
{
	if (!(r->flags & JITRING_CHECK_ALLOW_TRUNCATED))
		return fail(r, R_RECORD_BOUNDS, here(r),
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
		return fail(
			r, R_LOAD_CODE, rec->off,
			"code_size %llu in a %u-byte CODE_LOAD (room for %u)",
			(unsigned long long)rec->code_size, size,
			size - (LOAD_NAME + 1));
	code_start = size - rec->code_size;
	nul = memchr(p + LOAD_NAME, 0, code_start - LOAD_NAME);
	if (!nul)
		return fail(
			r, R_LOAD_NAME, rec->off,
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
			return fail(
				r, R_DEBUG_ENTRIES, rec->off + pos,
				"row %llu of %llu overruns the record (%u bytes left)",
				(unsigned long long)i,
				(unsigned long long)rec->nr_entry, size - pos);
		nul = memchr(p + pos + DEBUG_ROW_FIXED, 0,
			     size - pos - DEBUG_ROW_FIXED);
		if (!nul)
			return fail(r, R_DEBUG_ENTRIES, rec->off + pos,
				    "row %llu of %llu: file name has no NUL",
				    (unsigned long long)i,
				    (unsigned long long)rec->nr_entry);
		rec->last_row_addr = rd64(p + pos);
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
		return fail(
			r, R_UNWIND_SIZE, rec->off,
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
		return fail(
			r, R_UNWIND_HDR, rec->off,
			"hdr at record offset %lld starts %02x %02x %02x %02x, want 01 1b 03 3b",
			(long long)(UNWIND_PAYLOAD + eh), hdr[0], hdr[1],
			hdr[2], hdr[3]);
	if (rd32(hdr + 8) != 1)
		return fail(r, R_UNWIND_HDR, rec->off,
			    "hdr fde_count %u, want 1", rd32(hdr + 8));
	/* pc-relative to the field itself (hdr + 4); .eh_frame ends at hdr. */
	want_ptr = -(eh + 4);
	if (rds32(hdr + 4) != want_ptr)
		return fail(
			r, R_UNWIND_HDR, rec->off,
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

/* Window mode: ask for @need bytes from r->off. */
static int more(struct jitring_reader *r, size_t need)
{
	r->need = need;
	return JITRING_READER_MORE;
}

#define HOLE_DETAIL                                                            \
	"zero bytes followed by non-zero data (a hole loses every later record)"

/*
 * Window mode: a zero run from r->zero_from goes on through the window.
 * The whole-file reader decides the same run in one step: a zero tail if
 * it reaches EOF, a hole (reported at its start) if anything follows.
 */
static int zero_run(struct jitring_reader *r)
{
	const unsigned char *p = r->buf + r->off;

	if (!all_zero(p, r->len - r->off)) {
		r->zero_run = false;
		return fail(r, R_RECORD_SIZE, (size_t)r->zero_from,
			    HOLE_DETAIL);
	}
	r->off = r->len;
	if (r->more)
		return more(r, 1);
	r->zero_run = false;
	r->zero_tail = (size_t)(r->base + r->len - r->zero_from);
	r->state = 1;
	return 0;
}

int jitring_reader_next(struct jitring_reader *r, struct jitring_rd_record *rec)
{
	const unsigned char *p;
	size_t rem;
	uint32_t id, size;

	if (!r || !rec)
		return -EINVAL;
	if (r->state)
		return r->state < 0 ? r->state : 0;
	if (r->zero_run)
		return zero_run(r);
	rem = r->len - r->off;
	p = r->buf + r->off;
	if (rem < JITRING_RD_PREFIX_SIZE && r->more)
		return more(r, JITRING_RD_PREFIX_SIZE);
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
		return fail(r, R_TRAILING_GARBAGE, here(r),
			    "%zu non-zero bytes after the last record", rem);
	}
	id = rd32(p + REC_ID);
	size = rd32(p + REC_SIZE);
	if (size < JITRING_RD_PREFIX_SIZE) {
		if (all_zero(p, rem)) {
			if (r->more) {
				r->zero_run = true;
				r->zero_from = r->base + r->off;
				return zero_run(r);
			}
			r->zero_tail = rem;
			r->state = 1;
			return 0;
		}
		if (id == 0 && size == 0)
			return fail(r, R_RECORD_SIZE, here(r), HOLE_DETAIL);
		return fail(r, R_RECORD_SIZE, here(r), "total_size %u < %u",
			    size, JITRING_RD_PREFIX_SIZE);
	}
	if (id >= JITRING_RD_NR_IDS)
		return fail(r, R_RECORD_ID, here(r), "unknown record id %u",
			    id);
	if (size > rem) {
		char what[64];

		if (r->more)
			return more(r, size);
		snprintf(what, sizeof(what), "%s of %u bytes", type_names[id],
			 size);
		return cut_short(r, rem, what);
	}

	memset(rec, 0, sizeof(*rec));
	rec->off = here(r);
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

int jitring_reader_feed(struct jitring_reader *r, const void *buf, size_t len,
			bool eof)
{
	size_t keep;

	if (!r || (!buf && len) || !r->more || r->state)
		return -EINVAL;
	keep = r->len - r->off;
	if (len < keep)
		return -EINVAL;
	r->base += r->off;
	r->buf = buf;
	r->len = len;
	r->off = 0;
	r->more = !eof;
	return 0;
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

/* ------------------------------------------------------------------ */
/* Keyed hash sets.                                                     */

#ifdef JITRING_TESTPOINTS
uint64_t jitring_reader_set_lookups;
uint64_t jitring_reader_set_probes;
#define SET_COUNT(s, field, n) ((s)->field += (n))
#else
#define SET_COUNT(s, field, n) ((void)0)
#endif

struct sipkey {
	uint64_t k0;
	uint64_t k1;
};

static inline uint64_t rotl64(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

#define SIPROUND(v0, v1, v2, v3)                                               \
	do {                                                                   \
		v0 += v1;                                                      \
		v1 = rotl64(v1, 13);                                           \
		v1 ^= v0;                                                      \
		v0 = rotl64(v0, 32);                                           \
		v2 += v3;                                                      \
		v3 = rotl64(v3, 16);                                           \
		v3 ^= v2;                                                      \
		v0 += v3;                                                      \
		v3 = rotl64(v3, 21);                                           \
		v3 ^= v0;                                                      \
		v2 += v1;                                                      \
		v1 = rotl64(v1, 17);                                           \
		v1 ^= v2;                                                      \
		v2 = rotl64(v2, 32);                                           \
	} while (0)

/* SipHash-1-3 of the 8-byte little-endian message @m. */
static uint64_t siphash13_u64(const struct sipkey *k, uint64_t m)
{
	uint64_t v0 = k->k0 ^ 0x736f6d6570736575ull;
	uint64_t v1 = k->k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = k->k0 ^ 0x6c7967656e657261ull;
	uint64_t v3 = k->k1 ^ 0x7465646279746573ull;
	const uint64_t b = 8ull << 56; /* message length, no tail bytes */

	v3 ^= m;
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m;
	v3 ^= b;
	SIPROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

/*
 * A fresh key per check.  Without getrandom(2) (ENOSYS, or too early in
 * boot), the clock and the addresses ASLR chose: weaker, still unknown to
 * whoever wrote the file.
 */
static void sipkey_init(struct sipkey *k)
{
	struct timespec ts;

	if (getrandom(k, sizeof(*k), GRND_NONBLOCK) == (ssize_t)sizeof(*k))
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	k->k0 ^= jr_mix64((uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 32 ^
			  (uint64_t)(uintptr_t)k);
	k->k1 ^= jr_mix64(k->k0 ^ (uint64_t)(uintptr_t)&sipkey_init ^
			  (uint64_t)getpid());
}

/*
 * Open-addressing set of u64 keys (linear probing, load <= 1/2) hashed
 * with SipHash under @key (see the top of the file).  Key 0 marks an empty
 * slot, so it is kept aside.
 */
struct u64set {
	uint64_t *keys;
	size_t mask;
	size_t n;
	bool has_zero;
	struct sipkey key;
#ifdef JITRING_TESTPOINTS
	uint64_t lookups;
	uint64_t probes;
#endif
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
static size_t set_slot(struct u64set *s, uint64_t key)
{
	size_t i = siphash13_u64(&s->key, key) & s->mask;

	SET_COUNT(s, lookups, 1);
	while (s->keys[i] && s->keys[i] != key) {
		SET_COUNT(s, probes, 1);
		i = (i + 1) & s->mask;
	}
	return i;
}

static int set_grow(struct u64set *s)
{
	size_t cap = s->keys ? (s->mask + 1) * 2 : 1024;
	struct u64set t = *s;
	size_t i;

	t.mask = cap - 1;
	t.keys = calloc(cap, sizeof(*t.keys));
	if (!t.keys)
		return -ENOMEM;
	for (i = 0; s->keys && i <= s->mask; i++)
		if (s->keys[i])
			t.keys[set_slot(&t, s->keys[i])] = s->keys[i];
	set_free(s);
	*s = t;
	return 0;
}

static bool set_find(struct u64set *s, uint64_t key)
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

static bool idx_find(struct idxset *s, uint64_t key)
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

	if (key < s->nbits && (s->bits[key / 64] >> (key % 64) & 1))
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
		/* It may have gone to the hash set before the bitmap grew
		 * to cover it. */
		if (s->big.n + s->big.has_zero && set_find(&s->big, key))
			return 0;
		s->bits[key / 64] |= 1ull << (key % 64);
	} else {
		/* One hash: set_add() finds it if it is there. */
		ret = set_add(&s->big, key);
		if (ret <= 0)
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
	uint64_t nr_entry;      /* DEBUG_INFO */
	uint64_t last_row_addr; /* DEBUG_INFO */
};

struct check_state {
	unsigned int flags;
	struct jitring_check_result *res;
	const unsigned char *buf;
	size_t len;
	struct jitring_rd_stream *st;
	uint32_t last_pid;
	bool have_task;
	uint64_t tid_seen[256]; /* tid + 1 of a tid in @tids, by tid % 256 */
	struct idxset indices;
	struct u64set pids;
	struct u64set tids;
	struct pending unwind;
	struct pending debug;
	bool closed;
	size_t close_off;
	uint64_t prev_ts;
};

__attribute__((format(printf, 4, 5))) static int
violate(struct jitring_check_result *res, enum rule rule, size_t off,
	const char *fmt, ...)
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
	return violate(
		s->res, R_GROUP_ORPHAN, o->off,
		"%s at offset %zu is not followed by a CODE_LOAD before %s",
		o == &s->debug ? "DEBUG_INFO" : "UNWINDING_INFO", o->off,
		before);
}

static int pend(struct check_state *s, struct pending *pd,
		const struct jitring_rd_record *rec)
{
	if (pd->on)
		return violate(
			s->res, R_GROUP_DUPLICATE, rec->off,
			"second %s pending for one CODE_LOAD (first at offset %zu)",
			type_names[rec->id], pd->off);
	pd->on = true;
	pd->off = rec->off;
	pd->code_addr = rec->code_addr;
	pd->nr_entry = rec->nr_entry;
	pd->last_row_addr = rec->last_row_addr;
	return 0;
}

/*
 * A warning only: the pending DEBUG_INFO's last row starts inside the
 * code of @load, which perf's line program then leaves without a line.
 */
static void check_coverage(struct check_state *s,
			   const struct jitring_rd_record *load)
{
	const struct pending *d = &s->debug;
	uint64_t end = load->code_addr + load->code_size;

	if (end < load->code_addr)
		end = UINT64_MAX;
	if (!d->nr_entry || d->last_row_addr >= end)
		return;
	if (!s->res->lines_uncovered++)
		s->res->lines_uncovered_off = d->off;
}

/*
 * Offset of the first CODE_LOAD of @index (the file is valid up to it), by
 * reading the file again; SIZE_MAX when it cannot be (a pipe, an error).
 */
static size_t first_load(const struct check_state *s, uint64_t index)
{
	struct jitring_rd_stream st;
	struct jitring_reader r;
	struct jitring_rd_record rec;
	size_t off = SIZE_MAX;

	if (s->buf) {
		if (jitring_reader_init(&r, s->buf, s->len, 0, NULL))
			return SIZE_MAX;
		while (jitring_reader_next(&r, &rec) == 1)
			if (rec.id == JITRING_RD_CODE_LOAD &&
			    rec.code_index == index)
				return rec.off;
		return SIZE_MAX;
	}
	if (!s->st || !s->st->regular || jitring_stream_open(&st, s->st->fd, 0))
		return SIZE_MAX;
	while (jitring_stream_next(&st, &rec) == 1) {
		if (rec.id == JITRING_RD_CODE_LOAD && rec.code_index == index) {
			off = rec.off;
			break;
		}
	}
	jitring_stream_close(&st);
	return off;
}

static int check_load(struct check_state *s,
		      const struct jitring_rd_record *rec)
{
	size_t first;
	int ret;

	ret = idx_add(&s->indices, rec->code_index);
	if (ret < 0)
		return ret;
	if (ret)
		return 0;
	first = first_load(s, rec->code_index);
	if (first == SIZE_MAX)
		return violate(
			s->res, R_INDEX_DUPLICATE, rec->off,
			"code_index %llu already loaded earlier (the input cannot be read again to say where)",
			(unsigned long long)rec->code_index);
	return violate(s->res, R_INDEX_DUPLICATE, rec->off,
		       "code_index %llu already loaded at offset %zu",
		       (unsigned long long)rec->code_index, first);
}

static int add_task(struct check_state *s, const struct jitring_rd_record *rec)
{
	/* Nearly every record has the pid before it: skip its hash, */
	if (!s->have_task || rec->pid != s->last_pid) {
		if (set_add(&s->pids, rec->pid) < 0)
			return -ENOMEM;
		s->have_task = true;
		s->last_pid = rec->pid;
	}
	/* And one of the few tids seen lately: skip the other (it is known
	 * to the set, so the set's answer cannot change). */
	if (s->tid_seen[rec->tid % 256] == (uint64_t)rec->tid + 1)
		return 0;
	if (set_add(&s->tids, rec->tid) < 0)
		return -ENOMEM;
	s->tid_seen[rec->tid % 256] = (uint64_t)rec->tid + 1;
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
		return violate(
			res, R_GROUP_MISMATCH, s->debug.off,
			"DEBUG_INFO code_addr 0x%llx, its CODE_LOAD at offset %zu has 0x%llx",
			(unsigned long long)s->debug.code_addr, rec->off,
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
		if (s->debug.on)
			check_coverage(s, rec);
		s->unwind.on = false;
		s->debug.on = false;
		ret = add_task(s, rec);
		break;
	case JITRING_RD_CODE_MOVE:
		if (!idx_find(&s->indices, rec->code_index))
			return violate(
				res, R_MOVE_UNKNOWN_INDEX, rec->off,
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

static void check_begin(struct check_state *s, unsigned int flags,
			struct jitring_check_result *res)
{
	struct sipkey key;

	memset(s, 0, sizeof(*s));
	s->flags = flags;
	s->res = res;
	sipkey_init(&key);
	s->indices.big.key = key;
	s->pids.key = key;
	s->tids.key = key;
}

/* The end of a walk that returned @ret, whose reader is @r. */
static int check_end(struct check_state *s, const struct jitring_reader *r,
		     int ret)
{
	struct jitring_check_result *res = s->res;

	if (ret == -EBADMSG) {
		snprintf(res->detail, sizeof(res->detail), "%s", r->detail);
		res->rule = r->rule;
		res->off = r->err_off;
		ret = 1;
	} else if (ret == 0 && (s->unwind.on || s->debug.on) && !r->truncated) {
		/* A torn last record may have been the group's CODE_LOAD. */
		ret = orphan(s, "EOF");
	}
	res->zero_tail = r->zero_tail;
	res->truncated = r->truncated;
	res->pids = set_count(&s->pids);
	res->tids = set_count(&s->tids);
#ifdef JITRING_TESTPOINTS
	__atomic_fetch_add(&jitring_reader_set_lookups,
			   s->indices.big.lookups + s->pids.lookups +
				   s->tids.lookups,
			   __ATOMIC_RELAXED);
	__atomic_fetch_add(&jitring_reader_set_probes,
			   s->indices.big.probes + s->pids.probes +
				   s->tids.probes,
			   __ATOMIC_RELAXED);
#endif
	idx_free(&s->indices);
	set_free(&s->pids);
	set_free(&s->tids);
	return ret;
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

	check_begin(&s, flags, res);
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
	return check_end(&s, &r, ret);
}

int jitring_check_stream(struct jitring_rd_stream *st, unsigned int flags,
			 struct jitring_check_result *res)
{
	struct check_state s;
	struct jitring_rd_record rec;
	int ret;

	if (!res)
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	if (!st || st->started ||
	    (flags & ~(JITRING_CHECK_SORTED | JITRING_CHECK_ALLOW_TRUNCATED)) ||
	    (flags & JITRING_CHECK_ALLOW_TRUNCATED) !=
		    (st->flags & JITRING_CHECK_ALLOW_TRUNCATED))
		return -EINVAL;

	check_begin(&s, flags, res);
	s.st = st;
	do {
		ret = jitring_stream_next(st, &rec);
		if (ret <= 0)
			break;
		ret = check_one(&s, &rec);
	} while (ret == 0);
	res->header = st->header;
	res->file_size = st->regular ? st->size : st->pos;
	return check_end(&s, &st->r, ret);
}

/* ------------------------------------------------------------------ */
/* Streams.                                                             */

int jitring_stream_open(struct jitring_rd_stream *st, int fd,
			unsigned int flags)
{
	struct stat sb;

	if (!st || fd < 0 || (flags & ~JITRING_CHECK_ALLOW_TRUNCATED))
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->fd = fd;
	st->flags = flags;
	st->chunk = JITRING_STREAM_CHUNK;
	if (fstat(fd, &sb) < 0)
		return -errno;
	if (S_ISDIR(sb.st_mode))
		return -EISDIR;
	if (S_ISREG(sb.st_mode)) {
		st->regular = true;
		st->size = (uint64_t)sb.st_size;
	} else if (!S_ISFIFO(sb.st_mode) && !S_ISSOCK(sb.st_mode)) {
		return -ENODEV;
	}
	return 0;
}

void jitring_stream_close(struct jitring_rd_stream *st)
{
	if (!st)
		return;
	free(st->buf);
	st->buf = NULL;
	st->cap = 0;
}

/*
 * Make the window hold the @keep unconsumed bytes at @from, then read on
 * until it holds @want bytes, its capacity is full or EOF.
 *
 * Capacity: one chunk, or @want when a record is bigger, but never more
 * than a regular file can still supply, and for a pipe never more than
 * twice what has arrived: a record that claims 4 GiB costs memory only as
 * its bytes come.  Return: bytes in the window, or -errno.
 */
static ssize_t fill(struct jitring_rd_stream *st, const unsigned char *from,
		    size_t keep, size_t want)
{
	size_t cap = st->chunk > want ? st->chunk : want;
	size_t len = keep;
	unsigned char *buf;
	ssize_t n;

	if (st->regular && cap > keep + (st->size - st->pos))
		cap = keep + (size_t)(st->size - st->pos);
	if (!st->regular && cap > st->chunk && cap > 2 * keep)
		cap = 2 * keep > st->chunk ? 2 * keep : st->chunk;
	if (cap < keep + 1)
		cap = keep + 1;
	if (cap > st->cap) {
		/* from may point into the old window. */
		buf = malloc(cap);
		if (!buf)
			return -ENOMEM;
		if (keep)
			memcpy(buf, from, keep);
		free(st->buf);
		st->buf = buf;
		st->cap = cap;
	} else if (from != st->buf) {
		memmove(st->buf, from, keep);
	}
	JITRING_TESTPOINT(reader_fill, st);
	while (len < cap && !st->eof) {
		if (st->regular) {
			size_t ask = cap - len;

			if (ask > st->size - st->pos)
				ask = (size_t)(st->size - st->pos);
			if (ask == 0) {
				st->eof = true;
				break;
			}
			n = pread(st->fd, st->buf + len, ask, (off_t)st->pos);
		} else {
			n = read(st->fd, st->buf + len, cap - len);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0) {
			/* A regular file that ends early shrank meanwhile. */
			if (st->regular)
				return -ENODATA;
			st->eof = true;
			break;
		}
		st->pos += (uint64_t)n;
		len += (size_t)n;
		if (st->regular && st->pos == st->size)
			st->eof = true;
		/* A pipe: decode what has come once enough is there. */
		if (!st->regular && len >= want)
			break;
	}
	return (ssize_t)len;
}

/* Read the header and start the reader. */
static int stream_start(struct jitring_rd_stream *st)
{
	ssize_t len;

	st->started = true;
	len = fill(st, NULL, 0, JITRING_RD_HEADER_SIZE);
	if (len < 0)
		return (int)len;
	/* A window of 40 bytes or more, or the whole file. */
	while (!st->eof && len < JITRING_RD_HEADER_SIZE) {
		len = fill(st, st->buf, (size_t)len, JITRING_RD_HEADER_SIZE);
		if (len < 0)
			return (int)len;
	}
	return jitring_reader_init(
		&st->r, st->buf, (size_t)len,
		st->flags | (st->eof ? 0 : JITRING_READER_WINDOW), &st->header);
}

int jitring_stream_next(struct jitring_rd_stream *st,
			struct jitring_rd_record *rec)
{
	struct jitring_reader *r;
	size_t keep;
	ssize_t len;
	int ret;

	if (!st || !rec)
		return -EINVAL;
	r = &st->r;
	if (!st->started) {
		ret = stream_start(st);
		if (ret) {
			if (ret != -EBADMSG)
				r->state = ret;
			return ret;
		}
	}
	for (;;) {
		ret = jitring_reader_next(r, rec);
		if (ret != JITRING_READER_MORE)
			return ret;
		keep = r->len - r->off;
		len = fill(st, r->buf + r->off, keep, r->need);
		if (len < 0) {
			/* Sticky, like a violation. */
			r->state = (int)len;
			return (int)len;
		}
		ret = jitring_reader_feed(r, st->buf, (size_t)len, st->eof);
		if (ret)
			return ret;
	}
}
