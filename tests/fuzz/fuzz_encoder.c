/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the encoder (src/format/record.h).
 *
 * The input is decoded into a struct jitring_entry (see decode() for the
 * byte layout): name (possibly NULL, empty, with embedded NULs, at the
 * 4095/4096 boundary), code address, size (small, or one of the limits:
 * 0, 1, 2 GiB - 1, 2 GiB, 4 GiB, near the unwind limit, ...) and bytes (or
 * NULL, so the bytes at code_addr are dumped), an .eh_frame (raw bytes, or
 * one built by jitring_eh_frame_build() from the host preset, optionally
 * with a few bytes changed, or a NULL/size mismatch) and a line table (NULL
 * file names, addresses out of order, 65536/65537 rows, file names at the
 * length limit).  Every buffer is allocated at its exact size, so ASan
 * catches a read past any of them.
 *
 * jitring_record_plan() must return 0, -EINVAL or -E2BIG; an independent
 * oracle knows which inputs are certainly valid (plan must succeed), have
 * exactly one known defect (plan must return its errno), or are uncertain
 * (a raw or altered eh_frame, a code size within 16 KiB of the unwind
 * limit).  When plan succeeds (and the group is at most 4 MiB), the group
 * is encoded after a hand-written 40-byte header: jitring_check(SORTED)
 * must accept the image, and the reader must decode back exactly the
 * caller's fields: the eh_frame bytes with only pc_begin rewritten (to
 * -(ALIGN_8(code_size) + its offset)), every line row (and the closing
 * row at code_addr + code_size when the last starts inside the code),
 * name, addresses, size, code bytes, code_index, pid, tid and timestamp.
 * The group is then re-stamped (jitring_record_restamp(), the rings
 * engine's LATE path) and checked again, and a CODE_MOVE of the same
 * code_index appended
 * (jitring_record_move_check() / jitring_record_encode_move()).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "jitring.h"
#include "reader/reader.h"
#include "format/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                           \
	do {                                                                \
		fprintf(stderr, "fuzz_encoder: " __VA_ARGS__);              \
		fputc('\n', stderr);                                        \
		abort();                                                    \
	} while (0)

#define ALIGN8(x) (((uint64_t)(x) + 7u) & ~7ull)
#define ENCODE_MAX (4u << 20)
/* Within this much of 2 GiB, an entry with an eh_frame may be refused. */
#define UNWIND_SLACK (16u << 10)

/* ------------------------------------------------------------------ */
/* Reading the input.                                                   */

struct in {
	const uint8_t *p;
	size_t left;
};

static uint64_t take(struct in *in, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++) {
		uint8_t b = 0;

		if (in->left) {
			b = *in->p++;
			in->left--;
		}
		v |= (uint64_t)b << (8 * i);
	}
	return v;
}

/* @len bytes into @dst, the input's if it has them, else a pattern. */
static void take_bytes(struct in *in, void *dst, size_t len, uint8_t fill)
{
	uint8_t *d = dst;
	size_t n = len < in->left ? len : in->left;

	if (n) {
		memcpy(d, in->p, n);
		in->p += n;
		in->left -= n;
	}
	for (size_t i = n; i < len; i++)
		d[i] = (uint8_t)(fill + i);
}

/* ------------------------------------------------------------------ */
/* The entry and what the oracle knows about it.                         */

struct fx {
	struct jitring_entry e;
	char *name;
	uint8_t *code;
	size_t code_len;     /* bytes allocated at code */
	uint8_t *eh;
	struct jitring_line *lines;
	char **files;
	uint32_t nfiles;
	int defect;          /* errno of the only certain defect */
	unsigned ndefects;
	bool uncertain;
};

static void defect(struct fx *f, int err)
{
	f->defect = err;
	f->ndefects++;
}

static const uint64_t code_limits[8] = {
	0, 1, JITRING_CODE_MAX, (uint64_t)JITRING_CODE_MAX + 1,
	0xffffffffull, 0x100000000ull, UINT64_MAX,
	JITRING_CODE_MAX - UNWIND_SLACK,
};

/* The long tail of a big line table: rows 8.. increasing, one file each
 * of the first 8.  Not traced for coverage: it is the harness's own loop
 * and would dominate the run time. */
#if defined(__clang__)
__attribute__((no_sanitize("coverage")))
#endif
static uint64_t fill_tail(struct jitring_line *lines, uint32_t nr,
			  uint64_t addr, char **files)
{
	for (uint32_t i = 8; i < nr; i++) {
		addr += 4;
		lines[i].addr = addr;
		lines[i].line = (int32_t)i;
		lines[i].discrim = 0;
		lines[i].file = files[i % 8];
	}
	return addr;
}

/* @len bytes from the input (NULs included), then letters if it ran out. */
static char *make_string(struct in *in, size_t len, char fill)
{
	char *s = malloc(len + 1);
	size_t n = len < in->left ? len : in->left;

	if (!s)
		abort();
	take_bytes(in, s, n, 0);
	for (size_t i = n; i < len; i++)
		s[i] = (char)(fill + (char)(i % 8));
	s[len] = '\0';
	return s;
}

/*
 * Layout: flag bytes f0 f1 f2 (see the tests below), then the name (u16
 * length, bytes), the code (u16 size, bytes), the code address (u64), the
 * eh_frame (u16 length, bytes; or, built, u16 code size and, if altered, a
 * u8 count of (u16 offset, u8 value) changes), the line table (u8 rows,
 * then per row u8 address step, u8 file length, u32 line, u32
 * discriminator, file bytes), and (read by the caller) a move (u64
 * address, u32 size).  Missing input reads as zeros.
 */
static void decode(struct in *in, struct fx *f)
{
	unsigned f0 = (unsigned)take(in, 1), f1 = (unsigned)take(in, 1);
	unsigned f2 = (unsigned)take(in, 1);
	size_t name_len;
	uint64_t code_size;
	bool boundary = f0 & 0x80;

	memset(f, 0, sizeof(*f));

	/* Name: from the input, or 4095/4096 pattern bytes (no input). */
	name_len = (size_t)take(in, 2) % 300;
	if (f1 & 0x20) {
		struct in none = { NULL, 0 };

		name_len = JITRING_NAME_MAX + (f2 & 1);
		f->name = make_string(&none, name_len, 'n');
	} else {
		f->name = make_string(in, name_len, 'n');
	}
	if (f0 & 0x01) {
		f->e.name = NULL;
		defect(f, EINVAL);
	} else {
		size_t n = strnlen(f->name, JITRING_NAME_MAX + 1);

		f->e.name = f->name;
		if (n == 0)
			defect(f, EINVAL);
		else if (n > JITRING_NAME_MAX)
			defect(f, E2BIG);
	}

	/* Code size and bytes. */
	code_size = take(in, 2) % 700;
	if (boundary)
		code_size = code_limits[f1 & 7];
	f->e.code_size = code_size;
	if (code_size == 0)
		defect(f, EINVAL);
	else if (code_size > JITRING_CODE_MAX)
		defect(f, E2BIG);
	f->code_len = code_size <= ENCODE_MAX ? (size_t)code_size : 0;
	f->code = malloc(f->code_len ? f->code_len : 1);
	if (!f->code)
		abort();
	take_bytes(in, f->code, f->code_len, 0x90);
	f->e.code_addr = (const void *)(uintptr_t)take(in, 8);
	if (f0 & 0x04) {
		/* Dump the bytes at code_addr: it must point at them. */
		f->e.code_bytes = NULL;
		f->e.code_addr = f->code_len ? f->code : NULL;
		if (!f->code_len && !(f0 & 0x02))
			f->e.code_addr = (const void *)(uintptr_t)0x1000;
	} else {
		f->e.code_bytes = f->code;
		if (!f->e.code_addr)
			f->e.code_addr =
				(const void *)(uintptr_t)0x7f0000001000;
	}
	if (f0 & 0x02) {
		f->e.code_addr = NULL;
		defect(f, EINVAL);
	}

	/* eh_frame. */
	if (f0 & 0x08) {
		uint32_t len;

		if (f0 & 0x10) {
			const struct jitring_cfi *cfi = jitring_cfi_preset(
				JITRING_CFI_HOST_FP_TRAMPOLINE);
			uint64_t cs = 1 + take(in, 2) % 4096;
			int n = cfi ? jitring_eh_frame_build(cfi, cs, NULL, 0) :
				      -EINVAL;

			/* The preset's rules sit a few bytes into the code:
			 * a smaller size is refused (documented -EINVAL). */
			if (n == -EINVAL && cfi && cs < 64) {
				cs = 64;
				n = jitring_eh_frame_build(cfi, cs, NULL, 0);
			}

			if (n <= 0)
				FAIL("jitring_eh_frame_build: %d", n);
			len = (uint32_t)n;
			f->eh = malloc(len);
			if (!f->eh || jitring_eh_frame_build(cfi, cs, f->eh,
							     len) != n)
				FAIL("jitring_eh_frame_build into the buffer");
			if (f1 & 0x10) {
				unsigned k = (unsigned)take(in, 1) % 4;

				for (unsigned i = 0; i < k; i++) {
					uint32_t off = (uint32_t)take(in, 2) %
						       len;

					f->eh[off] = (uint8_t)take(in, 1);
				}
				if (k)
					f->uncertain = true;
			}
		} else {
			len = (uint32_t)take(in, 2) % 4200;
			f->eh = malloc(len ? len : 1);
			if (!f->eh)
				abort();
			take_bytes(in, f->eh, len, 0);
			f->uncertain = true;
		}
		f->e.eh_frame = f->eh;
		f->e.eh_frame_size = len;
		if (f0 & 0x20) {
			/* A pointer without a size, or a size without one. */
			if (len & 1)
				f->e.eh_frame = NULL;
			else
				f->e.eh_frame_size = 0;
			defect(f, EINVAL);
		} else if (len == 0) {
			defect(f, EINVAL);
		}
		if (code_size > JITRING_CODE_MAX - UNWIND_SLACK &&
		    code_size <= JITRING_CODE_MAX)
			f->uncertain = true;
	}

	/* Line table. */
	{
		uint32_t nr = (uint32_t)take(in, 1) % 8;
		uint64_t addr = (uint64_t)(uintptr_t)f->e.code_addr;
		bool big = (f1 & 0x08) && (f2 & 0x08); /* costly: rare */

		/* 65537 rows (refused before they are read), or, rarer and
		 * costly, exactly 65536 (planned, encoded, decoded). */
		if (big)
			nr = JITRING_LINES_MAX + !(f2 & 0x10);
		f->e.nr_lines = nr;
		if (nr) {
			f->lines = malloc(sizeof(*f->lines) * nr);
			f->files = calloc(nr < 8 ? nr : 8, sizeof(*f->files));
			if (!f->lines || !f->files)
				abort();
			f->nfiles = nr < 8 ? nr : 8;
		}
		for (uint32_t i = 0; i < nr && i < 8; i++) {
			struct jitring_line *l = &f->lines[i];

			{
				unsigned step = (unsigned)take(in, 1);
				size_t fl = (size_t)take(in, 1) % 40;

				/* Up, or down (out of order after row 0). */
				if (step & 0x80)
					addr -= (step & 0x7f) + 1u;
				else
					addr += step;
				l->line = (int32_t)take(in, 4);
				l->discrim = (int32_t)take(in, 4);
				if ((f1 & 0x80) && i == 0) {
					struct in none = { NULL, 0 };

					fl = JITRING_NAME_MAX + ((f2 >> 2) & 1);
					f->files[i] =
						make_string(&none, fl, 'f');
				} else {
					f->files[i] = make_string(in, fl, 'f');
				}
				if (strnlen(f->files[i], JITRING_NAME_MAX + 1) >
				    JITRING_NAME_MAX)
					defect(f, E2BIG);
				l->file = f->files[i];
				if ((f1 & 0x40) && i == nr - 1) {
					l->file = NULL;
					defect(f, EINVAL);
				}
			}
			l->addr = addr;
			/* Rows must not go down (wrapping included). */
			if (i > 0 && addr < f->lines[i - 1].addr)
				defect(f, EINVAL);
		}
		if (nr > 8) {
			uint64_t end = fill_tail(f->lines, nr, addr, f->files);

			/* The tail goes up by 4 a row: unless it wrapped. */
			if (end < addr)
				defect(f, EINVAL);
		}
		if (nr > JITRING_LINES_MAX)
			defect(f, E2BIG);
		f->e.lines = f->lines;
		if (nr && (f0 & 0x40)) {
			f->e.lines = NULL;
			defect(f, EINVAL);
		}
	}
}

static void fx_free(struct fx *f)
{
	for (uint32_t i = 0; i < f->nfiles; i++)
		free(f->files[i]);
	free(f->files);
	free(f->lines);
	free(f->eh);
	free(f->code);
	free(f->name);
}

/* ------------------------------------------------------------------ */
/* Encode, validate, decode back.                                       */

static void check_image(const struct fx *f, const struct jitring_group *g,
			const uint8_t *img, size_t len, uint64_t ts,
			bool with_move, uint64_t mv_addr, uint64_t mv_size)
{
	const struct jitring_entry *e = &f->e;
	struct jitring_check_result res;
	struct jitring_reader rd;
	struct jitring_rd_record rec;
	int r = jitring_check(img, len, JITRING_CHECK_SORTED, &res);

	if (r != 0)
		FAIL("jitring_check: %d: %s at %llu: %s", r,
		     res.rule ? res.rule : "?", (unsigned long long)res.off,
		     res.detail);
	if (res.records != g->nr_records + with_move ||
	    res.count[JITRING_RD_CODE_LOAD] != 1 ||
	    res.count[JITRING_RD_CODE_UNWINDING_INFO] != (g->unw_size != 0) ||
	    res.count[JITRING_RD_CODE_DEBUG_INFO] != (g->dbg_size != 0))
		FAIL("record counts");
	if (jitring_reader_init(&rd, img, len, 0, NULL))
		FAIL("header");

	if (e->eh_frame) {
		uint32_t off, want_hdr = 20;
		int32_t pc;

		if (jitring_reader_next(&rd, &rec) != 1 ||
		    rec.id != JITRING_RD_CODE_UNWINDING_INFO || rec.ts != ts)
			FAIL("UNWINDING_INFO expected first");
		if (rec.eh_frame_size != e->eh_frame_size ||
		    rec.eh_frame_hdr_size != want_hdr ||
		    rec.mapped_size < rec.unwinding_size)
			FAIL("UNWINDING_INFO sizes");
		/* One CIE, then the FDE: length, CIE pointer, pc_begin. */
		off = 4 + t_rd32(f->eh) + 8;
		if (off != g->eh.pc_begin_off || off + 4 > e->eh_frame_size)
			FAIL("pc_begin offset %u, plan says %u", off,
			     g->eh.pc_begin_off);
		if (memcmp(rec.unwind, f->eh, off) ||
		    memcmp(rec.unwind + off + 4, f->eh + off + 4,
			   e->eh_frame_size - off - 4))
			FAIL("eh_frame bytes changed beyond pc_begin");
		memcpy(&pc, rec.unwind + off, 4);
		if ((int64_t)pc != -(int64_t)(ALIGN8(e->code_size) + off))
			FAIL("pc_begin %d for code_size %llu", pc,
			     (unsigned long long)e->code_size);
	}
	if (e->nr_lines) {
		struct jitring_rd_line ln;
		size_t cur = 0;
		uint32_t i = 0;
		uint64_t start = (uint64_t)(uintptr_t)e->code_addr;
		uint64_t end = start + e->code_size;
		/* A closing row when the last starts inside the code. */
		uint32_t rows = e->nr_lines +
				(e->lines[e->nr_lines - 1].addr < end &&
				 end > start);
		int lr;

		if (jitring_reader_next(&rd, &rec) != 1 ||
		    rec.id != JITRING_RD_CODE_DEBUG_INFO || rec.ts != ts ||
		    rec.code_addr != start || rec.nr_entry != rows)
			FAIL("DEBUG_INFO");
		while ((lr = jitring_reader_line(&rec, &cur, &ln)) == 1) {
			const struct jitring_line *l =
				&e->lines[i < e->nr_lines ? i :
							    e->nr_lines - 1];

			if (ln.addr != (i < e->nr_lines ? l->addr : end) ||
			    ln.line != l->line || ln.discrim != l->discrim ||
			    strcmp(ln.file, l->file))
				FAIL("line row %u differs", i);
			i++;
		}
		if (lr != 0 || i != rows)
			FAIL("line rows: %d after %u", lr, i);
	}
	if (jitring_reader_next(&rd, &rec) != 1 ||
	    rec.id != JITRING_RD_CODE_LOAD || rec.ts != ts)
		FAIL("CODE_LOAD expected");
	if (strcmp(rec.name, e->name) || rec.pid != 4242 || rec.tid != 4243 ||
	    rec.code_index != 77 ||
	    rec.code_addr != (uint64_t)(uintptr_t)e->code_addr ||
	    rec.vma != rec.code_addr || rec.code_size != e->code_size ||
	    memcmp(rec.code, jitring_record_code(e), (size_t)e->code_size))
		FAIL("CODE_LOAD fields differ");
	if (with_move) {
		if (jitring_reader_next(&rd, &rec) != 1 ||
		    rec.id != JITRING_RD_CODE_MOVE || rec.code_index != 77 ||
		    rec.new_code_addr != mv_addr || rec.code_size != mv_size ||
		    rec.old_code_addr !=
			    (uint64_t)(uintptr_t)e->code_addr)
			FAIL("CODE_MOVE fields differ");
	}
	if (jitring_reader_next(&rd, &rec) != 0)
		FAIL("more records than the group");
}

/* FUZZ_ENCODER_DEBUG=1: describe each decoded entry (for triage). */
static void describe(const struct fx *f, int r)
{
	const struct jitring_entry *e = &f->e;

	fprintf(stderr, "plan %d; defects %u (last %d)%s; name %s len %zu; "
		"code_addr %p size %llu bytes %s; eh %p size %u; lines %p "
		"nr %u\n", r, f->ndefects, f->defect,
		f->uncertain ? " uncertain" : "", e->name ? "set" : "NULL",
		e->name ? strnlen(e->name, 8192) : 0, e->code_addr,
		(unsigned long long)e->code_size,
		e->code_bytes ? "given" : "at code_addr", e->eh_frame,
		e->eh_frame_size, (const void *)e->lines, e->nr_lines);
	for (uint32_t i = 0; i < e->nr_lines && i < 8 && e->lines; i++)
		fprintf(stderr, "  row %u: addr %#llx file %s\n", i,
			(unsigned long long)e->lines[i].addr,
			e->lines[i].file ? "set" : "NULL");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int debug = -1;
	struct in in = { data, size };
	struct jitring_group g;
	struct jitdump_header h;
	struct fx f;
	uint64_t mv_addr, mv_size;
	uint8_t *img;
	size_t len;
	int r, mr;

	decode(&in, &f);
	mv_addr = take(&in, 8);
	mv_size = take(&in, 4);

	r = jitring_record_plan(&g, &f.e);
	if (debug < 0)
		debug = getenv("FUZZ_ENCODER_DEBUG") != NULL;
	if (debug)
		describe(&f, r);
	if (r != 0 && r != -EINVAL && r != -E2BIG)
		FAIL("plan returned %d, not 0, -EINVAL or -E2BIG", r);
	if (f.ndefects && r == 0)
		FAIL("plan accepted an entry with %u defect(s) (errno %d)",
		     f.ndefects, f.defect);
	if (!f.uncertain && f.ndefects == 0 && r != 0)
		FAIL("plan refused a valid entry: %d", r);
	if (!f.uncertain && f.ndefects == 1 && r != -f.defect)
		FAIL("plan returned %d for an entry whose only defect is %d",
		     r, -f.defect);
	if (r || g.total > ENCODE_MAX || f.e.code_size > f.code_len) {
		fx_free(&f);
		return 0;
	}
	if (g.nr_records != 1u + (f.e.eh_frame != NULL) + (f.e.nr_lines != 0))
		FAIL("nr_records %u", g.nr_records);

	/* A hand-written header, then the group, then maybe a move. */
	mr = jitring_record_move_check((const void *)(uintptr_t)mv_addr,
				       mv_size);
	if (mr != 0 && mr != -EINVAL)
		FAIL("move_check: %d", mr);
	if ((mr == 0) != (mv_addr && mv_size && mv_size <= JITRING_CODE_MAX))
		FAIL("move_check %d for addr %llx size %llu", mr,
		     (unsigned long long)mv_addr, (unsigned long long)mv_size);
	len = 40 + (size_t)g.total + (mr == 0 ? JR_MOVE_SIZE : 0);
	img = malloc(len);
	if (!img)
		abort();
	memset(&h, 0, sizeof(h));
	h.magic = 0x4A695444u;
	h.version = 1;
	h.total_size = 40;
	h.elf_mach = 62;
	h.pid = 4242;
	h.timestamp = 1;
	memcpy(img, &h, sizeof(h));
	jitring_record_encode(&g, img + 40, 1000, 4242, 4243, 77);
	if (mr == 0)
		jitring_record_encode_move(img + 40 + g.total, 1000, 4242, 4243,
					   77, f.e.code_addr,
					   (const void *)(uintptr_t)mv_addr,
					   mv_size);
	check_image(&f, &g, img, len, 1000, mr == 0, mv_addr, mv_size);

	/* The LATE path: every record of the group gets the new stamp. */
	jitring_record_restamp(img + 40, g.total, 2000);
	if (mr == 0)
		jitring_record_restamp(img + 40 + g.total, JR_MOVE_SIZE, 2000);
	check_image(&f, &g, img, len, 2000, mr == 0, mv_addr, mv_size);

	free(img);
	fx_free(&f);
	return 0;
}
