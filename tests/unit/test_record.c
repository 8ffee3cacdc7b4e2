/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of src/format/record.c, the jitdump encoder.
 *
 * Every encoded group is placed after a 40-byte header written by hand here
 * and checked with the independent reader (src/reader/reader.c: jitring_check()
 * and jitring_reader_next()), never with the encoder itself.  Expected
 * values come from the entry the test built and from the perf jitdump rules
 * (/work/shared/reference/perf-jitdump.md), computed here from first
 * principles:
 *
 *  1. shapes: LOAD, UNWINDING_INFO+LOAD, DEBUG_INFO+LOAD and all three, with
 *     code_bytes NULL or a patched copy, code sizes 1, 7, 8, 9, 4096, at an
 *     aligned and an odd destination; every field compared;
 *  2. FDE placement: pc_begin and the .eh_frame_hdr decoded and resolved at
 *     perf's run-time layout, also for caller data with a garbage pc_begin,
 *     a zero terminator or a longer CIE;
 *  3. several groups and a CODE_MOVE in one image (check --sorted);
 *  4. jitring_record_restamp() changes the timestamps and nothing else;
 *  5. CODE_MOVE round trip and jitring_record_move_check();
 *  6. jitring_record_plan() on every kind of bad input, and the limits;
 *  7. the closing line-table row: exact bytes when the last row starts
 *     inside the code, none when the table already reaches its end.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reader/reader.h"
#include "format/record.h"

#define HDR_SIZE 40u
#define T_PID 0x00012345u
#define T_TID 0x0006789au
#define T_TS 1000000007ull
#define ALIGN_UP(x, a) (((uint64_t)(x) + ((a) - 1)) / (a) * (a))

/* Sizes from the format description, spelled out (not the encoder's). */
#define LOAD_FIXED 56u
#define DEBUG_FIXED 32u
#define DEBUG_ROW 16u
#define UNWIND_FIXED 40u
#define EH_HDR 20u
#define MOVE_SIZE 64u

/* The jitdump file header, byte by byte from the format description. */
static void put_header(unsigned char *p)
{
	const uint32_t w[6] = { 0x4A695444u, 1, HDR_SIZE, 62, 0, T_PID };
	const uint64_t ts = 1, flags = 0;

	memcpy(p, w, sizeof(w));
	memcpy(p + 24, &ts, 8);
	memcpy(p + 32, &flags, 8);
}

/* ------------------------------------------------------------------ */
/* Test entries.                                                       */

struct built {
	struct jitring_entry e;
	unsigned char *code;    /* what code_addr points to */
	unsigned char *patched; /* the code_bytes copy, or NULL */
	unsigned char eh[JITRING_EH_FRAME_MAX];
	uint32_t eh_size;
	struct jitring_line lines[6];
	char name[96];
};

static const char *const line_files[6] = {
	"a.c", "", "dir/sub/b.py", "a.c", "c.js", "a.c",
};
static const int32_t line_nos[6] = { 1, 0, -3, INT32_MAX, 10, 11 };
static const int32_t line_discrims[6] = { 0, 1, 0, -1, 7, 0 };

static void build(struct built *b, uint64_t code_size, bool unw, bool dbg,
		  bool patched)
{
	memset(b, 0, sizeof(*b));
	b->code = malloc(code_size);
	T_REQUIRE(b->code);
	for (uint64_t i = 0; i < code_size; i++)
		b->code[i] = (unsigned char)(i * 37 + 11);
	if (patched) {
		b->patched = malloc(code_size);
		T_REQUIRE(b->patched);
		memcpy(b->patched, b->code, code_size);
		/* A salt at the start and the end, like CPython's. */
		b->patched[0] ^= 0x5a;
		b->patched[code_size - 1] ^= 0xc3;
	}
	snprintf(b->name, sizeof(b->name), "fn_%s%s%s_%llu",
		 unw ? "u" : "", dbg ? "d" : "", patched ? "p" : "",
		 (unsigned long long)code_size);
	b->e.name = b->name;
	b->e.code_addr = b->code;
	b->e.code_size = code_size;
	b->e.code_bytes = b->patched;
	if (unw) {
		int n = t_eh_frame(code_size, b->eh, sizeof(b->eh));

		T_REQUIRE(n > 0);
		b->eh_size = (uint32_t)n;
		b->e.eh_frame = b->eh;
		b->e.eh_frame_size = b->eh_size;
	}
	if (dbg) {
		for (unsigned i = 0; i < 6; i++) {
			/* Non-decreasing, with a repeated address. */
			uint64_t off = (code_size * (i / 2 * 2)) / 6;

			b->lines[i].addr = (uint64_t)(uintptr_t)b->code + off;
			b->lines[i].line = line_nos[i];
			b->lines[i].discrim = line_discrims[i];
			b->lines[i].file = line_files[i];
		}
		b->e.lines = b->lines;
		b->e.nr_lines = 6;
	}
}

static void unbuild(struct built *b)
{
	free(b->code);
	free(b->patched);
}

/* ------------------------------------------------------------------ */
/* Checking one group against the entry it came from.                  */

struct want {
	uint64_t ts;
	uint32_t pid;
	uint32_t tid;
	uint64_t index;
};

/* Where the FDE's pc_begin sits in DWARF .eh_frame data: after the CIE
 * (its 4-byte length plus that many bytes), the FDE length and CIE
 * pointer. */
static uint32_t fde_off_of(const unsigned char *eh)
{
	return 4 + t_rd32(eh);
}

static void check_unwind(const struct jitring_rd_record *rec,
			 const struct jitring_entry *e)
{
	const unsigned char *pay = rec->unwind, *hdr;
	uint32_t eh = e->eh_frame_size;
	uint32_t fde_off = fde_off_of(e->eh_frame);
	uint32_t pcb = fde_off + 8;
	uint64_t code = (uint64_t)(uintptr_t)e->code_addr;
	/* perf maps .eh_frame at code_addr + ALIGN_8(code_size), the hdr
	 * right after it. */
	uint64_t eh_rt = code + ALIGN_UP(e->code_size, 8);
	uint64_t hdr_rt = eh_rt + eh;
	int32_t v;

	T_CHECK_EQ(rec->unwinding_size, eh + EH_HDR);
	T_CHECK_EQ(rec->eh_frame_hdr_size, EH_HDR);
	T_CHECK_EQ(rec->mapped_size, ALIGN_UP(eh + EH_HDR, 16));
	T_CHECK_EQ(rec->eh_frame_size, eh);
	/* [.eh_frame][.eh_frame_hdr][pad], padded to 8 bytes. */
	T_CHECK_EQ(rec->size % 8, 0);
	T_CHECK(rec->size >= UNWIND_FIXED + eh + EH_HDR);
	T_CHECK(rec->size - (UNWIND_FIXED + eh + EH_HDR) < 8);
	for (uint32_t i = UNWIND_FIXED + eh + EH_HDR; i < rec->size; i++)
		T_CHECK_EQ(rec->raw[i], 0);

	/* The caller's bytes, except pc_begin. */
	T_CHECK(memcmp(pay, e->eh_frame, pcb) == 0);
	T_CHECK(memcmp(pay + pcb + 4, (const unsigned char *)e->eh_frame +
			       pcb + 4, eh - pcb - 4) == 0);

	/* pc_begin (pcrel|sdata4) resolves to the code start. */
	v = t_rds32(pay + pcb);
	T_CHECK_EQ(eh_rt + pcb + (uint64_t)(int64_t)v, code);

	/* .eh_frame_hdr. */
	hdr = pay + eh;
	T_CHECK_EQ(hdr[0], 1);
	T_CHECK_EQ(hdr[1], 0x1b); /* pcrel | sdata4 */
	T_CHECK_EQ(hdr[2], 0x03); /* udata4 */
	T_CHECK_EQ(hdr[3], 0x3b); /* datarel | sdata4 */
	/* eh_frame_ptr: pc-relative to the field at hdr + 4. */
	v = t_rds32(hdr + 4);
	T_CHECK_EQ(hdr_rt + 4 + (uint64_t)(int64_t)v, eh_rt);
	T_CHECK_EQ(t_rd32(hdr + 8), 1);
	/* initial_loc and fde: relative to the hdr start. */
	v = t_rds32(hdr + 12);
	T_CHECK_EQ(hdr_rt + (uint64_t)(int64_t)v, code);
	v = t_rds32(hdr + 16);
	T_CHECK_EQ(hdr_rt + (uint64_t)(int64_t)v, eh_rt + fde_off);
}

/*
 * Rows the file must hold for @e: the caller's, and a closing row at the
 * code's end (repeating the last) when the last row starts before it.
 */
static uint32_t want_rows(const struct jitring_entry *e)
{
	uint64_t end = (uint64_t)(uintptr_t)e->code_addr + e->code_size;

	return e->nr_lines + (e->lines[e->nr_lines - 1].addr < end);
}

static void check_debug(const struct jitring_rd_record *rec,
			const struct jitring_entry *e)
{
	struct jitring_rd_line ln;
	size_t cursor = 0;
	uint32_t n = 0, want_end = DEBUG_FIXED, rows = want_rows(e);
	int ret;

	T_CHECK_EQ(rec->code_addr, (uint64_t)(uintptr_t)e->code_addr);
	T_CHECK_EQ(rec->nr_entry, rows);
	while ((ret = jitring_reader_line(rec, &cursor, &ln)) == 1) {
		const struct jitring_line *l =
			&e->lines[n < e->nr_lines ? n : e->nr_lines - 1];

		T_REQUIRE(n < rows);
		T_CHECK_EQ(ln.addr,
			   n < e->nr_lines ?
				   l->addr :
				   (uint64_t)(uintptr_t)e->code_addr +
					   e->code_size);
		T_CHECK_EQ(ln.line, l->line);
		T_CHECK_EQ(ln.discrim, l->discrim);
		T_CHECK(strcmp(ln.file, l->file) == 0);
		want_end += DEBUG_ROW + (uint32_t)strlen(l->file) + 1;
		n++;
	}
	T_CHECK_EQ(ret, 0);
	T_CHECK_EQ(n, rows);
	T_CHECK_EQ(rec->entries_end, want_end);
	for (uint32_t i = rec->entries_end; i < rec->size; i++)
		T_CHECK_EQ(rec->raw[i], 0);
}

static void check_load(const struct jitring_rd_record *rec,
		       const struct jitring_entry *e, const struct want *w)
{
	const void *bytes = e->code_bytes ? e->code_bytes : e->code_addr;
	size_t nl = strlen(e->name);

	T_CHECK_EQ(rec->pid, w->pid);
	T_CHECK_EQ(rec->tid, w->tid);
	T_CHECK_EQ(rec->vma, (uint64_t)(uintptr_t)e->code_addr);
	T_CHECK_EQ(rec->code_addr, (uint64_t)(uintptr_t)e->code_addr);
	T_CHECK_EQ(rec->code_size, e->code_size);
	T_CHECK_EQ(rec->code_index, w->index);
	T_CHECK_EQ(rec->name_len, nl);
	T_CHECK(memcmp(rec->name, e->name, nl + 1) == 0);
	T_CHECK(rec->size >= LOAD_FIXED + nl + 1 + e->code_size);
	T_CHECK(memcmp(rec->code, bytes, e->code_size) == 0);
}

/*
 * Read one group from @r and compare it with @e.
 * Return: bytes the group took in the file.
 */
static uint64_t check_group(struct jitring_reader *r,
			    const struct jitring_entry *e,
			    const struct want *w)
{
	struct jitring_rd_record rec;
	uint64_t bytes = 0;

	if (e->eh_frame_size) {
		T_REQUIRE(jitring_reader_next(r, &rec) == 1);
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_UNWINDING_INFO);
		T_CHECK_EQ(rec.ts, w->ts);
		if (rec.id == JITRING_RD_CODE_UNWINDING_INFO)
			check_unwind(&rec, e);
		bytes += rec.size;
	}
	if (e->nr_lines) {
		T_REQUIRE(jitring_reader_next(r, &rec) == 1);
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_DEBUG_INFO);
		T_CHECK_EQ(rec.ts, w->ts);
		if (rec.id == JITRING_RD_CODE_DEBUG_INFO)
			check_debug(&rec, e);
		bytes += rec.size;
	}
	T_REQUIRE(jitring_reader_next(r, &rec) == 1);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_LOAD);
	T_CHECK_EQ(rec.ts, w->ts);
	if (rec.id == JITRING_RD_CODE_LOAD)
		check_load(&rec, e, w);
	bytes += rec.size;
	return bytes;
}

static void check_valid(const unsigned char *img, size_t len,
			struct jitring_check_result *res)
{
	int ret = jitring_check(img, len, JITRING_CHECK_SORTED, res);

	T_CHECK_EQ(ret, 0);
	if (ret)
		fprintf(stderr, "  jitring_check: %s at %llu: %s\n",
			res->rule ? res->rule : "?",
			(unsigned long long)res->off, res->detail);
	T_CHECK(res->rule == NULL);
	/* The closing row: every table reaches the end of its code. */
	T_CHECK_EQ(res->lines_uncovered, 0);
}

/*
 * Plan and encode @e after a hand-written header at @misalign bytes into a
 * buffer of exactly the planned size, then check it all.
 */
static void roundtrip(const struct jitring_entry *e, size_t misalign)
{
	struct jitring_group g;
	struct jitring_check_result res;
	struct jitring_reader r;
	struct jitring_rd_record rec;
	struct want w = { T_TS, T_PID, T_TID, 77 };
	unsigned char *base, *img;
	size_t len;
	uint64_t bytes;
	uint32_t want_records = 1 + (e->eh_frame_size != 0) +
				(e->nr_lines != 0);

	T_REQUIRE(jitring_record_plan(&g, e) == 0);
	T_CHECK_EQ(g.nr_records, want_records);
	len = HDR_SIZE + g.total;
	base = malloc(misalign + len);
	T_REQUIRE(base);
	img = base + misalign;
	memset(img, 0xa5, len);
	put_header(img);
	jitring_record_encode(&g, img + HDR_SIZE, w.ts, w.pid, w.tid, w.index);

	check_valid(img, len, &res);
	T_CHECK_EQ(res.records, want_records);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_LOAD], 1);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_UNWINDING_INFO],
		   e->eh_frame_size != 0);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_DEBUG_INFO], e->nr_lines != 0);
	T_CHECK_EQ(res.ts_min, w.ts);
	T_CHECK_EQ(res.ts_max, w.ts);
	T_CHECK_EQ(res.pids, 1);
	T_CHECK_EQ(res.tids, 1);
	T_CHECK_EQ(res.zero_tail, 0);

	T_REQUIRE(jitring_reader_init(&r, img, len, 0, NULL) == 0);
	bytes = check_group(&r, e, &w);
	T_CHECK_EQ(bytes, g.total);
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
	T_CHECK_EQ(r.zero_tail, 0);
	free(base);
}

static void test_shapes(void)
{
	static const uint64_t sizes[] = { 1, 7, 8, 9, 4096 };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (unsigned shape = 0; shape < 4; shape++) {
			for (unsigned p = 0; p < 2; p++) {
				struct built b;

				build(&b, sizes[s], shape & 1, shape & 2, p);
				roundtrip(&b.e, 0);
				/* Encoding needs no alignment. */
				roundtrip(&b.e, 1 + shape);
				unbuild(&b);
			}
		}
	}
}

/* The longest name and file name, and a code copy unlike the original. */
static void test_limits_roundtrip(void)
{
	struct built b;
	char *name = malloc(JITRING_NAME_MAX + 1);
	char *file = malloc(JITRING_NAME_MAX + 1);

	T_REQUIRE(name && file);
	memset(name, 'n', JITRING_NAME_MAX);
	name[JITRING_NAME_MAX] = '\0';
	memset(file, 'f', JITRING_NAME_MAX);
	file[JITRING_NAME_MAX] = '\0';
	build(&b, 100, true, true, true);
	memset(b.patched, 0xcc, 100);
	b.e.name = name;
	b.lines[2].file = file;
	roundtrip(&b.e, 0);
	unbuild(&b);
	free(name);
	free(file);
}

/* ------------------------------------------------------------------ */
/* FDE placement for caller data the builder did not make.             */

/* Encode @e alone; return the malloc'd image and its length. */
static unsigned char *encode_alone(const struct jitring_entry *e, size_t *len)
{
	struct jitring_group g;
	unsigned char *img;

	T_REQUIRE(jitring_record_plan(&g, e) == 0);
	*len = HDR_SIZE + g.total;
	img = malloc(*len);
	T_REQUIRE(img);
	put_header(img);
	jitring_record_encode(&g, img + HDR_SIZE, T_TS, T_PID, T_TID, 5);
	return img;
}

static void test_fde_rewrite(void)
{
	static const uint64_t sizes[] = { 8, 9, 4096, 100000 };
	static const uint32_t garbage[] = { 0xdeadbeefu, 0, 0x7fffffffu };

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct built b;
		unsigned char *clean, *img, saved[JITRING_EH_FRAME_MAX];
		size_t clean_len, len;
		uint32_t pcb;

		build(&b, sizes[s], true, false, false);
		clean = encode_alone(&b.e, &clean_len);
		roundtrip(&b.e, 0);
		pcb = fde_off_of(b.eh) + 8;
		for (size_t k = 0; k < sizeof(garbage) / sizeof(garbage[0]);
		     k++) {
			t_wr32(b.eh + pcb, garbage[k]);
			memcpy(saved, b.eh, b.eh_size);
			roundtrip(&b.e, 0);
			img = encode_alone(&b.e, &len);
			/* Same bytes as from the builder's own pc_begin. */
			T_CHECK_EQ(len, clean_len);
			T_CHECK(len == clean_len &&
				memcmp(img, clean, len) == 0);
			/* The caller's data is not written to. */
			T_CHECK(memcmp(saved, b.eh, b.eh_size) == 0);
			free(img);
		}
		free(clean);
		unbuild(&b);
	}
}

/* A zero terminator after the FDE, and a longer CIE (FDE not at 24). */
static void test_fde_layouts(void)
{
	static const struct jitring_cfi_op ops[] = {
		{ 0, JITRING_CFI_DEF_CFA, 7, 8 },
		{ 0, JITRING_CFI_OFFSET, 16, -8 },
		{ 0, JITRING_CFI_OFFSET, 3, -16 },
		{ 0, JITRING_CFI_OFFSET, 12, -24 },
		{ 0, JITRING_CFI_OFFSET, 13, -32 },
		{ 0, JITRING_CFI_OFFSET, 14, -40 },
		{ 0, JITRING_CFI_OFFSET, 15, -48 },
		{ 3, JITRING_CFI_DEF_CFA_OFFSET, 0, 64 },
	};
	static const struct jitring_cfi big = {
		.code_align = 1, .data_align = -8, .ra_reg = 16,
		.nr_init = 7, .nr_ops = 8, .ops = ops,
	};
	struct built b;
	int n;

	/* Terminated: unwinding_size counts the terminator. */
	build(&b, 33, true, true, false);
	t_wr32(b.eh + b.eh_size, 0);
	b.e.eh_frame_size = b.eh_size + 4;
	roundtrip(&b.e, 0);
	unbuild(&b);

	/* A CIE longer than the presets' puts the FDE elsewhere. */
	build(&b, 4095, true, false, true);
	n = jitring_eh_frame_build(&big, 4095, b.eh, sizeof(b.eh));
	T_REQUIRE(n > 0);
	b.e.eh_frame_size = (uint32_t)n;
	T_CHECK(fde_off_of(b.eh) > 24);
	roundtrip(&b.e, 0);
	unbuild(&b);

	/* The largest .eh_frame: an FDE padded with DW_CFA_nop to 4096. */
	build(&b, 64, true, true, false);
	{
		uint32_t fde = fde_off_of(b.eh);

		memset(b.eh + b.eh_size, 0, JITRING_EH_FRAME_MAX - b.eh_size);
		t_wr32(b.eh + fde, JITRING_EH_FRAME_MAX - fde - 4);
		b.e.eh_frame_size = JITRING_EH_FRAME_MAX;
	}
	roundtrip(&b.e, 0);
	unbuild(&b);
}

/* ------------------------------------------------------------------ */
/* Several groups and a move in one image.                              */

static void test_multi(void)
{
	struct built b[4];
	struct jitring_group g[4];
	struct jitring_check_result res;
	struct jitring_reader r;
	struct jitring_rd_record rec;
	unsigned char *img;
	size_t len = HDR_SIZE, off;
	int dummy;

	for (unsigned i = 0; i < 4; i++) {
		build(&b[i], 10 + i * 7, i & 1, i & 2, i == 3);
		T_REQUIRE(jitring_record_plan(&g[i], &b[i].e) == 0);
		len += g[i].total;
	}
	len += MOVE_SIZE;
	img = malloc(len);
	T_REQUIRE(img);
	put_header(img);
	off = HDR_SIZE;
	for (unsigned i = 0; i < 4; i++) {
		jitring_record_encode(&g[i], img + off, T_TS + i, T_PID,
				      T_TID + i, 100 + i);
		off += g[i].total;
	}
	jitring_record_encode_move(img + off, T_TS + 4, T_PID, T_TID, 101,
				   b[1].code, &dummy, 10 + 7);
	off += MOVE_SIZE;
	T_REQUIRE(off == len);

	check_valid(img, len, &res);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_LOAD], 4);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_UNWINDING_INFO], 2);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_DEBUG_INFO], 2);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_MOVE], 1);
	T_CHECK_EQ(res.tids, 4);
	T_CHECK_EQ(res.ts_min, T_TS);
	T_CHECK_EQ(res.ts_max, T_TS + 4);

	T_REQUIRE(jitring_reader_init(&r, img, len, 0, NULL) == 0);
	for (unsigned i = 0; i < 4; i++) {
		struct want w = { T_TS + i, T_PID, T_TID + i, 100 + i };

		T_CHECK_EQ(check_group(&r, &b[i].e, &w), g[i].total);
	}
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_MOVE);
	T_CHECK_EQ(rec.code_index, 101);
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
	free(img);
	for (unsigned i = 0; i < 4; i++)
		unbuild(&b[i]);
}

/* ------------------------------------------------------------------ */
/* Restamp.                                                            */

/* @after equals @before but for the timestamp of every record. */
static void check_restamped(const unsigned char *before,
			    const unsigned char *after, size_t len,
			    uint64_t ts)
{
	struct jitring_reader r;
	struct jitring_rd_record rec;
	size_t pos = HDR_SIZE;
	unsigned n = 0;

	T_CHECK(memcmp(before, after, HDR_SIZE) == 0);
	T_REQUIRE(jitring_reader_init(&r, before, len, 0, NULL) == 0);
	while (jitring_reader_next(&r, &rec) == 1) {
		T_CHECK_EQ(rec.off, pos);
		/* id and total_size unchanged, timestamp replaced. */
		T_CHECK(memcmp(before + pos, after + pos, 8) == 0);
		T_CHECK_EQ(t_rd64(after + pos + 8), ts);
		T_CHECK(memcmp(before + pos + 16, after + pos + 16,
			       rec.size - 16) == 0);
		pos += rec.size;
		n++;
	}
	T_CHECK_EQ(pos, len);
	T_CHECK(n > 0);
}

static void test_restamp(void)
{
	const uint64_t ts2 = 0x1122334455667788ull;

	for (unsigned shape = 0; shape < 4; shape++) {
		struct built b;
		struct jitring_group g;
		struct jitring_check_result res;
		struct jitring_reader r;
		unsigned char *a, *c;
		size_t len;

		build(&b, 9 + shape, shape & 1, shape & 2, false);
		T_REQUIRE(jitring_record_plan(&g, &b.e) == 0);
		len = HDR_SIZE + g.total;
		a = malloc(len);
		c = malloc(len + 16);
		T_REQUIRE(a && c);
		put_header(a);
		jitring_record_encode(&g, a + HDR_SIZE, T_TS, T_PID, T_TID, 9);
		memcpy(c, a, len);
		memset(c + len, 0x77, 16);
		jitring_record_restamp(c + HDR_SIZE, g.total, ts2);
		check_restamped(a, c, len, ts2);
		/* Nothing past the group is touched. */
		for (unsigned i = 0; i < 16; i++)
			T_CHECK_EQ(c[len + i], 0x77);
		check_valid(c, len, &res);
		T_CHECK_EQ(res.ts_min, ts2);
		T_CHECK_EQ(res.ts_max, ts2);
		{
			struct want w = { ts2, T_PID, T_TID, 9 };

			T_REQUIRE(jitring_reader_init(&r, c, len, 0, NULL) ==
				  0);
			T_CHECK_EQ(check_group(&r, &b.e, &w), g.total);
		}
		free(a);
		free(c);
		unbuild(&b);
	}

	/* A single CODE_MOVE. */
	{
		unsigned char a[HDR_SIZE + MOVE_SIZE], c[HDR_SIZE + MOVE_SIZE];
		int x;

		put_header(a);
		jitring_record_encode_move(a + HDR_SIZE, T_TS, T_PID, T_TID, 3,
					   &x, &x + 1, 4);
		memcpy(c, a, sizeof(a));
		jitring_record_restamp(c + HDR_SIZE, MOVE_SIZE, ts2);
		check_restamped(a, c, sizeof(a), ts2);
	}
}

/* ------------------------------------------------------------------ */
/* CODE_MOVE.                                                          */

static void test_move(void)
{
	static const uint64_t sizes[] = { 1, 9, JITRING_CODE_MAX };
	struct built b;
	struct jitring_group g;
	struct jitring_check_result res;
	struct jitring_reader r;
	struct jitring_rd_record rec;
	unsigned char *img;
	size_t len;
	char other[16];

	build(&b, 16, false, false, false);
	T_REQUIRE(jitring_record_plan(&g, &b.e) == 0);
	len = HDR_SIZE + g.total + 3 * MOVE_SIZE;
	img = malloc(len);
	T_REQUIRE(img);
	put_header(img);
	jitring_record_encode(&g, img + HDR_SIZE, T_TS, T_PID, T_TID, 42);
	for (unsigned i = 0; i < 3; i++)
		jitring_record_encode_move(img + HDR_SIZE + g.total +
						   i * MOVE_SIZE,
					   T_TS + 1 + i, T_PID + i, T_TID + i,
					   42, i == 1 ? NULL : b.code,
					   other + i, sizes[i]);

	check_valid(img, len, &res);
	T_CHECK_EQ(res.count[JITRING_RD_CODE_MOVE], 3);
	T_REQUIRE(jitring_reader_init(&r, img, len, 0, NULL) == 0);
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_LOAD);
	for (unsigned i = 0; i < 3; i++) {
		T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_MOVE);
		T_CHECK_EQ(rec.size, MOVE_SIZE);
		T_CHECK_EQ(rec.ts, T_TS + 1 + i);
		T_CHECK_EQ(rec.pid, T_PID + i);
		T_CHECK_EQ(rec.tid, T_TID + i);
		/* vma: the new address of the code (jitdump spec). */
		T_CHECK_EQ(rec.vma, (uint64_t)(uintptr_t)(other + i));
		T_CHECK_EQ(rec.old_code_addr,
			   i == 1 ? 0 : (uint64_t)(uintptr_t)b.code);
		T_CHECK_EQ(rec.new_code_addr, (uint64_t)(uintptr_t)(other + i));
		T_CHECK_EQ(rec.code_size, sizes[i]);
		T_CHECK_EQ(rec.code_index, 42);
	}
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
	free(img);
	unbuild(&b);

	/* Argument checks. */
	T_CHECK_EQ(jitring_record_move_check(other, 1), 0);
	T_CHECK_EQ(jitring_record_move_check(other, JITRING_CODE_MAX), 0);
	T_CHECK_EQ(jitring_record_move_check(NULL, 1), -EINVAL);
	T_CHECK_EQ(jitring_record_move_check(other, 0), -EINVAL);
	T_CHECK_EQ(jitring_record_move_check(other,
					     (uint64_t)JITRING_CODE_MAX + 1),
		   -EINVAL);
	T_CHECK_EQ(jitring_record_move_check(other, UINT64_MAX), -EINVAL);
}

/* ------------------------------------------------------------------ */
/* jitring_record_plan() refusals and limits.                          */

#define PLAN_EQ(e, want)                                                    \
	do {                                                                \
		struct jitring_group g_;                                    \
		T_CHECK_EQ(jitring_record_plan(&g_, (e)), (want));          \
	} while (0)

static void test_plan_names(void)
{
	struct built b;
	struct jitring_group g;
	char *s;

	build(&b, 16, false, false, false);
	PLAN_EQ(&b.e, 0);
	PLAN_EQ(NULL, -EINVAL);

	b.e.name = NULL;
	PLAN_EQ(&b.e, -EINVAL);
	b.e.name = "";
	PLAN_EQ(&b.e, -EINVAL);
	b.e.name = "x";
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	T_CHECK_EQ(g.name_len, 2);

	/* Exactly JITRING_NAME_MAX bytes: fine; one more: -E2BIG. */
	s = malloc(JITRING_NAME_MAX + 2);
	T_REQUIRE(s);
	memset(s, 'a', JITRING_NAME_MAX + 1);
	s[JITRING_NAME_MAX] = '\0';
	b.e.name = s;
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	T_CHECK_EQ(g.name_len, JITRING_NAME_MAX + 1);
	T_CHECK_EQ(g.load_size, LOAD_FIXED + JITRING_NAME_MAX + 1 + 16);
	s[JITRING_NAME_MAX] = 'a';
	s[JITRING_NAME_MAX + 1] = '\0';
	PLAN_EQ(&b.e, -E2BIG);
	free(s);

	/* No NUL within the bound: plan must not read past the buffer
	 * (ASan checks) and refuses. */
	for (size_t k = 0; k < 2; k++) {
		size_t n = k ? 3 * JITRING_NAME_MAX : JITRING_NAME_MAX + 1;

		s = malloc(n);
		T_REQUIRE(s);
		memset(s, 'b', n);
		b.e.name = s;
		PLAN_EQ(&b.e, -E2BIG);
		free(s);
	}
	unbuild(&b);
}

static void test_plan_code(void)
{
	struct built b;
	struct jitring_group g;
	char *s;

	build(&b, 16, false, false, false);
	b.e.code_addr = NULL;
	PLAN_EQ(&b.e, -EINVAL);
	b.e.code_bytes = b.code; /* a copy does not replace the address */
	PLAN_EQ(&b.e, -EINVAL);
	b.e.code_addr = b.code;
	b.e.code_bytes = NULL;

	b.e.code_size = 0;
	PLAN_EQ(&b.e, -EINVAL);
	/* Sizes are validated only; nothing is read by plan. */
	b.e.code_size = JITRING_CODE_MAX;
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	b.e.code_size = (uint64_t)JITRING_CODE_MAX + 1;
	PLAN_EQ(&b.e, -E2BIG);
	/* 56 + 2 + this is 2^32: the LOAD record would overflow u32. */
	b.e.name = "x";
	b.e.code_size = (1ull << 32) - LOAD_FIXED - 2;
	PLAN_EQ(&b.e, -E2BIG);
	/* Would wrap a 64-bit sum. */
	b.e.code_size = UINT64_MAX - 8;
	PLAN_EQ(&b.e, -E2BIG);
	b.e.code_size = UINT64_MAX;
	PLAN_EQ(&b.e, -E2BIG);

	/* The largest LOAD there can be still fits its u32 total_size. */
	s = malloc(JITRING_NAME_MAX + 1);
	T_REQUIRE(s);
	memset(s, 'c', JITRING_NAME_MAX);
	s[JITRING_NAME_MAX] = '\0';
	b.e.name = s;
	b.e.code_size = JITRING_CODE_MAX;
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	T_CHECK_EQ(g.load_size, (uint64_t)LOAD_FIXED + JITRING_NAME_MAX + 1 +
					JITRING_CODE_MAX);
	T_CHECK_EQ(g.total, g.load_size);
	free(s);
	unbuild(&b);
}

static void test_plan_eh(void)
{
	struct built b;
	struct jitring_group g;
	unsigned char *big, bad[JITRING_EH_FRAME_MAX];
	uint32_t fde;

	build(&b, 64, true, false, false);
	PLAN_EQ(&b.e, 0);

	/* Pointer and size must agree. */
	b.e.eh_frame = NULL;
	PLAN_EQ(&b.e, -EINVAL);
	b.e.eh_frame = b.eh;
	b.e.eh_frame_size = 0;
	PLAN_EQ(&b.e, -EINVAL);
	b.e.eh_frame_size = b.eh_size;

	/* Not a multiple of 4. */
	for (uint32_t d = 1; d < 4; d++) {
		b.e.eh_frame_size = b.eh_size - d;
		PLAN_EQ(&b.e, -EINVAL);
	}
	/* Over JITRING_EH_FRAME_MAX (a multiple of 4, valid prefix). */
	big = calloc(1, JITRING_EH_FRAME_MAX + 64);
	T_REQUIRE(big);
	memcpy(big, b.eh, b.eh_size);
	b.e.eh_frame = big;
	b.e.eh_frame_size = JITRING_EH_FRAME_MAX + 4;
	PLAN_EQ(&b.e, -E2BIG);
	b.e.eh_frame_size = JITRING_EH_FRAME_MAX + 64;
	PLAN_EQ(&b.e, -E2BIG);
	free(big);
	b.e.eh_frame = b.eh;
	b.e.eh_frame_size = b.eh_size;

	/* Malformed: one defect at a time. */
	fde = fde_off_of(b.eh);
#define MALFORMED(stmt)                                                     \
	do {                                                                \
		memcpy(bad, b.eh, b.eh_size);                               \
		b.e.eh_frame = bad;                                         \
		stmt;                                                       \
		PLAN_EQ(&b.e, -EINVAL);                                     \
		b.e.eh_frame = b.eh;                                        \
		b.e.eh_frame_size = b.eh_size;                              \
	} while (0)
	MALFORMED(t_wr32(bad + 4, 1));              /* CIE id not 0 */
	MALFORMED(bad[8] = 2);                    /* CIE version 2 */
	MALFORMED(bad[10] = 'P');                 /* augmentation "zP" */
	MALFORMED(bad[9] = 'Z');                  /* not "zR" at all */
	MALFORMED(t_wr32(bad, 0));                  /* CIE length 0 */
	MALFORMED(t_wr32(bad, 0xffffffffu));        /* 64-bit DWARF */
	MALFORMED(t_wr32(bad, t_rd32(bad) + 2));      /* length % 4 */
	MALFORMED(t_wr32(bad, b.eh_size));          /* CIE overruns the data */
	MALFORMED(t_wr32(bad + fde + 4, 0));        /* FDE says it is a CIE */
	MALFORMED(t_wr32(bad + fde + 4, fde));      /* CIE pointer off by 4 */
	MALFORMED(t_wr32(bad + fde, t_rd32(bad + fde) + 4)); /* FDE overruns */
	MALFORMED(b.e.eh_frame_size = fde);       /* CIE only, no FDE */
	MALFORMED(b.e.eh_frame_size = 8);         /* truncated CIE */
	/* Garbage after the FDE (only a 4-byte zero terminator may follow). */
	MALFORMED((t_wr32(bad + b.eh_size, 1), b.e.eh_frame_size += 4));
	MALFORMED((memset(bad + b.eh_size, 0, 8), b.e.eh_frame_size += 8));
	/* The FDE pointer encoding must be pcrel|sdata4: find it as the
	 * last augmentation byte before the CIE's instructions, i.e. right
	 * after the augmentation data length 1. */
	{
		uint32_t i;

		for (i = 12; i + 1 < fde && !(b.eh[i] == 1 &&
					      b.eh[i + 1] == 0x1b); i++)
			;
		T_REQUIRE(i + 1 < fde);
		MALFORMED(bad[i + 1] = 0x00);     /* absptr */
		MALFORMED(bad[i + 1] = 0x03);     /* udata4 */
		MALFORMED(bad[i] = 2);            /* augmentation length 2 */
	}
#undef MALFORMED

	/* Code too large to reach with the sdata4 pc_begin. */
	b.e.code_size = JITRING_CODE_MAX;
	PLAN_EQ(&b.e, -E2BIG);
	b.e.code_size = 1u << 30;
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	T_CHECK_EQ(g.nr_records, 2);
	unbuild(&b);
}

static void test_plan_lines(void)
{
	struct built b;
	struct jitring_group g;
	struct jitring_line *many;
	char *f;
	size_t n;

	build(&b, 64, false, true, false);
	PLAN_EQ(&b.e, 0);

	b.e.lines = NULL;
	PLAN_EQ(&b.e, -EINVAL);
	b.e.lines = b.lines;

	b.lines[3].file = NULL;
	PLAN_EQ(&b.e, -EINVAL);
	b.lines[3].file = line_files[3];

	/* Equal addresses are fine, a decrease is not. */
	b.lines[4].addr = b.lines[3].addr;
	PLAN_EQ(&b.e, 0);
	b.lines[4].addr = b.lines[3].addr - 1;
	PLAN_EQ(&b.e, -EINVAL);
	b.lines[4].addr = b.lines[5].addr;

	/* File names: JITRING_NAME_MAX fine, one more or no NUL: -E2BIG. */
	f = malloc(JITRING_NAME_MAX + 2);
	T_REQUIRE(f);
	memset(f, 'f', JITRING_NAME_MAX + 1);
	f[JITRING_NAME_MAX] = '\0';
	b.lines[5].file = f;
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	f[JITRING_NAME_MAX] = 'f';
	f[JITRING_NAME_MAX + 1] = '\0';
	PLAN_EQ(&b.e, -E2BIG);
	free(f);
	f = malloc(JITRING_NAME_MAX + 1);
	T_REQUIRE(f);
	memset(f, 'g', JITRING_NAME_MAX + 1);
	b.lines[5].file = f;
	PLAN_EQ(&b.e, -E2BIG);
	free(f);
	b.lines[5].file = line_files[5];

	/* JITRING_LINES_MAX rows fine, one more -E2BIG. */
	n = (size_t)JITRING_LINES_MAX + 1;
	many = malloc(n * sizeof(*many));
	T_REQUIRE(many);
	for (size_t i = 0; i < n; i++) {
		many[i].addr = (uint64_t)(uintptr_t)b.code + i / 1024;
		many[i].line = (int32_t)i;
		many[i].discrim = 0;
		many[i].file = "m";
	}
	b.e.lines = many;
	b.e.nr_lines = JITRING_LINES_MAX;
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	T_CHECK_EQ(g.nr_records, 2);
	/* The closing row is the library's: not counted against the limit. */
	T_CHECK_EQ(g.dbg_rows, JITRING_LINES_MAX + 1);
	T_CHECK_EQ(g.dbg_size, DEBUG_FIXED + ((uint64_t)JITRING_LINES_MAX + 1) *
					     (DEBUG_ROW + 2));
	roundtrip(&b.e, 0);
	b.e.nr_lines = JITRING_LINES_MAX + 1;
	PLAN_EQ(&b.e, -E2BIG);
	free(many);

	/* nr_lines 0 with a table: no DEBUG_INFO at all. */
	b.e.lines = b.lines;
	b.e.nr_lines = 0;
	T_CHECK_EQ(jitring_record_plan(&g, &b.e), 0);
	T_CHECK_EQ(g.nr_records, 1);
	roundtrip(&b.e, 0);
	{
		unsigned char *img;
		size_t len;
		struct jitring_check_result res;

		img = encode_alone(&b.e, &len);
		check_valid(img, len, &res);
		T_CHECK_EQ(res.count[JITRING_RD_CODE_DEBUG_INFO], 0);
		T_CHECK_EQ(res.records, 1);
		free(img);
	}
	unbuild(&b);
}

/* One DEBUG_INFO row: addr, line, discrim, file and its NUL. */
static size_t put_row(unsigned char *p, uint64_t addr, int32_t line,
		      int32_t discrim, const char *file)
{
	size_t n = strlen(file) + 1;

	memcpy(p, &addr, 8);
	memcpy(p + 8, &line, 4);
	memcpy(p + 12, &discrim, 4);
	memcpy(p + 16, file, n);
	return 16 + n;
}

/*
 * The issue-14 table: a 15-byte function, line 10 at +0 and line 42 at
 * +9 (the loop).  Encoded byte for byte as the DEBUG_INFO perf needs: a
 * third row at +15 repeating line 42, so its line program covers the loop.
 */
static void test_closing_row(void)
{
	static unsigned char code[15] = { 0x55, 0x48, 0x89, 0xe5 };
	const uint64_t addr = 0x7f1234560000ull;
	struct jitring_line rows[3] = {
		{ addr, 10, 0, "hot.js" },
		{ addr + 9, 42, 3, "/srv/app/hot.js" },
		{ addr + 15, 99, 0, "x" },
	};
	struct jitring_entry e = {
		.name = "hot",
		.code_addr = (const void *)(uintptr_t)addr,
		.code_size = sizeof(code),
		.code_bytes = code,
		.nr_lines = 2,
		.lines = rows,
	};
	unsigned char want[256], *img;
	struct jitring_group g;
	uint32_t v32;
	uint64_t v64;
	size_t len, n = 16;

	/* Prefix (size patched below), code_addr, nr_entry, three rows. */
	memset(want, 0, sizeof(want));
	v32 = JITRING_RD_CODE_DEBUG_INFO;
	memcpy(want, &v32, 4);
	v64 = T_TS;
	memcpy(want + 8, &v64, 8);
	memcpy(want + n, &addr, 8);
	v64 = 3;
	memcpy(want + n + 8, &v64, 8);
	n += 16;
	n += put_row(want + n, addr, 10, 0, "hot.js");
	n += put_row(want + n, addr + 9, 42, 3, "/srv/app/hot.js");
	n += put_row(want + n, addr + 15, 42, 3, "/srv/app/hot.js");
	v32 = (uint32_t)n;
	memcpy(want + 4, &v32, 4);

	T_REQUIRE(jitring_record_plan(&g, &e) == 0);
	T_CHECK_EQ(g.dbg_rows, 3);
	T_CHECK_EQ(g.dbg_size, n);
	img = encode_alone(&e, &len);
	T_CHECK_EQ(len, HDR_SIZE + n + LOAD_FIXED + 4 + sizeof(code));
	T_CHECK(memcmp(img + HDR_SIZE, want, n) == 0);
	free(img);
	roundtrip(&e, 0);

	/* A table that already ends at the code's end (the workaround
	 * runtimes use today), or past it, is written as given. */
	e.nr_lines = 3;
	T_REQUIRE(jitring_record_plan(&g, &e) == 0);
	T_CHECK_EQ(g.dbg_rows, 3);
	rows[2].addr = addr + 1000;
	T_REQUIRE(jitring_record_plan(&g, &e) == 0);
	T_CHECK_EQ(g.dbg_rows, 3);
	T_CHECK_EQ(g.dbg_size, n - (16 + 16) + (16 + 2));
	img = encode_alone(&e, &len);
	v64 = 3;
	T_CHECK(memcmp(img + HDR_SIZE + 24, &v64, 8) == 0);
	free(img);
	roundtrip(&e, 0);

	/* One row at the start: the closing row repeats it. */
	e.nr_lines = 1;
	T_REQUIRE(jitring_record_plan(&g, &e) == 0);
	T_CHECK_EQ(g.dbg_rows, 2);
	roundtrip(&e, 0);

	/* Code that would wrap the address space gets no closing row. */
	e.code_addr = (const void *)(uintptr_t)(UINT64_MAX - 7);
	rows[0].addr = UINT64_MAX - 7;
	T_REQUIRE(jitring_record_plan(&g, &e) == 0);
	T_CHECK_EQ(g.dbg_rows, 1);
}

int main(void)
{
	test_shapes();
	test_limits_roundtrip();
	test_fde_rewrite();
	test_fde_layouts();
	test_multi();
	test_restamp();
	test_move();
	test_plan_names();
	test_plan_code();
	test_plan_eh();
	test_plan_lines();
	test_closing_row();
	return t_report();
}
