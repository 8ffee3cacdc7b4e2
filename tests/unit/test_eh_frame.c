/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of src/format/eh_frame.c: the CFI presets,
 * jitring_eh_frame_build() and jitring_eh_frame_check().
 *
 * The encoder is checked against an independent DWARF consumer: each
 * .eh_frame is wrapped in a small ELF file (.text at A, .eh_frame at
 * A + ALIGN_8(code_size), the layout perf gives the injected DSO) and decoded
 * by binutils' readelf, whose output is parsed row by row.
 */
#include <elf.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "format/cfi_presets.h"
#include "format/eh_frame.h"

#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

static const struct jitring_cfi *x86(void)
{
	return jitring_cfi_preset(JITRING_CFI_X86_64_FP_TRAMPOLINE);
}

static const struct jitring_cfi *a64(void)
{
	return jitring_cfi_preset(JITRING_CFI_AARCH64_FP_TRAMPOLINE);
}

/* ------------------------------------------------------------------ */
/* Builder: presets and sizes.                                         */

/* The x86_64 preset for code_size 8, encoded by hand from the DWARF spec. */
static const uint8_t x86_golden[56] = {
	/* CIE: length 20, id 0, version 1, "zR", caf 1, daf -8, ra 16 */
	0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x01, 'z', 'R', 0x00, 0x01, 0x78, 0x10,
	0x01, 0x1b,		/* augmentation data: pcrel|sdata4 */
	0x0c, 0x07, 0x08,	/* def_cfa rsp, 8 */
	0x90, 0x01,		/* offset r16, 1 * -8 */
	0x00, 0x00,		/* nop padding */
	/* FDE: length 28, CIE pointer 28, pc_begin -(8 + 32), range 8 */
	0x1c, 0x00, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x00,
	0xd8, 0xff, 0xff, 0xff, 0x08, 0x00, 0x00, 0x00,
	0x00,			/* augmentation data length */
	0x41,			/* advance_loc 1 */
	0x0e, 0x10,		/* def_cfa_offset 16 */
	0x86, 0x02,		/* offset rbp, 2 * -8 */
	0x43,			/* advance_loc 3 */
	0x0d, 0x06,		/* def_cfa_register rbp */
	0x43,			/* advance_loc 3 */
	0x0c, 0x07, 0x08,	/* def_cfa rsp, 8 */
	0xc6,			/* restore rbp */
	0x00, 0x00,		/* nop padding */
};

static void check_built(const struct jitring_cfi *cfi, uint64_t code_size,
			int want_size)
{
	uint8_t buf[JITRING_EH_FRAME_MAX];
	struct jitring_eh_frame_info info;
	int n, m;

	n = jitring_eh_frame_build(cfi, code_size, NULL, 0);
	T_CHECK_EQ(n, want_size);
	if (n <= 0)
		return;
	memset(buf, 0xaa, sizeof(buf));
	m = jitring_eh_frame_build(cfi, code_size, buf, (size_t)n);
	T_CHECK_EQ(m, n);
	T_CHECK_EQ(n % 8, 0);
	T_CHECK_EQ(buf[n], 0xaa);
	T_CHECK_EQ(jitring_eh_frame_check(buf, (uint32_t)n, &info), 0);
	T_CHECK_EQ(info.cie_size, 24);
	T_CHECK_EQ(info.fde_off, 24);
	T_CHECK_EQ(info.pc_begin_off, 32);
	T_CHECK_EQ((int32_t)t_rd32(buf + info.pc_begin_off),
		   -(int64_t)(ALIGN8(code_size) + info.pc_begin_off));
	T_CHECK_EQ(t_rd32(buf + info.pc_begin_off + 4), code_size);
	T_CHECK_EQ(t_rd32(buf + info.fde_off + 4), info.fde_off + 4);
	T_CHECK_EQ(t_rd32(buf) + 4, info.cie_size);
	T_CHECK_EQ(info.fde_off + 4 + t_rd32(buf + info.fde_off), n);

	/* One byte short: -ENOSPC and nothing written. */
	memset(buf, 0x55, sizeof(buf));
	T_CHECK_EQ(jitring_eh_frame_build(cfi, code_size, buf, (size_t)n - 1),
		   -ENOSPC);
	T_CHECK_EQ(buf[0], 0x55);
	T_CHECK_EQ(buf[n / 2], 0x55);
	T_CHECK_EQ(jitring_eh_frame_build(cfi, code_size, buf, 0), -ENOSPC);
}

static void test_presets(void)
{
	static const uint64_t sizes[] = { 7, 8, 20, 30, 4096, 100000 };
	const struct jitring_cfi *host;
	uint8_t buf[64];
	size_t i;

	T_REQUIRE(x86() != NULL);
	T_REQUIRE(a64() != NULL);
	T_CHECK(jitring_cfi_preset((enum jitring_cfi_preset)0) == NULL);
	T_CHECK(jitring_cfi_preset((enum jitring_cfi_preset)4) == NULL);
	host = jitring_cfi_preset(JITRING_CFI_HOST_FP_TRAMPOLINE);
#if defined(__x86_64__)
	T_CHECK(host == x86());
#elif defined(__aarch64__)
	T_CHECK(host == a64());
#else
	T_CHECK(host == NULL);
#endif
	(void)host;

	T_CHECK_EQ(x86()->code_align, 1);
	T_CHECK_EQ(x86()->data_align, -8);
	T_CHECK_EQ(x86()->ra_reg, 16);
	T_CHECK_EQ(a64()->code_align, 4);
	T_CHECK_EQ(a64()->data_align, -8);
	T_CHECK_EQ(a64()->ra_reg, 30);
	T_CHECK_EQ(jitring_trampoline_x86_64_size, 8);
	T_CHECK_EQ(jitring_trampoline_aarch64_size, 20);
	T_CHECK_EQ(jitring_trampoline_x86_64[0], 0x55);
	T_CHECK_EQ(jitring_trampoline_x86_64[7], 0xc3);
	/* ret, little-endian 0xd65f03c0 */
	T_CHECK_EQ(t_rd32(jitring_trampoline_aarch64 + 16), 0xd65f03c0);

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		check_built(x86(), sizes[i], 56);
		/* The aarch64 rules reach pc 16. */
		check_built(a64(), sizes[i], sizes[i] < 16 ? -EINVAL : 64);
	}
	check_built(x86(), 0x7fffffe0, 56);

	T_REQUIRE(jitring_eh_frame_build(x86(), 8, buf, sizeof(buf)) == 56);
	T_CHECK(memcmp(buf, x86_golden, sizeof(x86_golden)) == 0);
}

/* ------------------------------------------------------------------ */
/* Builder: bad input.                                                 */

static int build1(uint32_t code_align, int32_t data_align, uint32_t nr_init,
		  const struct jitring_cfi_op *ops, uint32_t nr_ops,
		  uint64_t code_size)
{
	struct jitring_cfi cfi = {
		.code_align = code_align,
		.data_align = data_align,
		.ra_reg = 16,
		.nr_init = nr_init,
		.nr_ops = nr_ops,
		.ops = ops,
	};
	uint8_t buf[JITRING_EH_FRAME_MAX];
	int n = jitring_eh_frame_build(&cfi, code_size, NULL, 0);
	int m = jitring_eh_frame_build(&cfi, code_size, buf, sizeof(buf));

	/* Counting and writing must agree, errors included. */
	T_CHECK_EQ(n, m);
	if (m > 0)
		T_CHECK_EQ(jitring_eh_frame_check(buf, (uint32_t)m, NULL), 0);
	return m;
}

static void test_build_errors(void)
{
	static const struct jitring_cfi_op entry[] = {
		{ 0, JITRING_CFI_DEF_CFA, 7, 8 },
		{ 0, JITRING_CFI_OFFSET, 16, -8 },
	};
	static const struct jitring_cfi_op remember = {
		0, JITRING_CFI_REMEMBER_STATE, 0, 0
	};
	static const struct jitring_cfi_op save_rbx = {
		0, JITRING_CFI_OFFSET, 3, -8
	};
	struct jitring_cfi_op ops[4];
	struct jitring_cfi_op *many;
	uint8_t buf[64];
	uint32_t i;

	T_CHECK_EQ(jitring_eh_frame_build(NULL, 8, NULL, 0), -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(NULL, 8, buf, sizeof(buf)),
		   -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(x86(), 0, NULL, 0), -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(x86(), 0, buf, sizeof(buf)),
		   -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(x86(), JITRING_CODE_MAX + 1ull,
					  NULL, 0), -EINVAL);
	/* pc_begin = -(ALIGN_8(code_size) + 32) must fit an sdata4. */
	T_CHECK_EQ(jitring_eh_frame_build(x86(), 0x7fffffe1, NULL, 0),
		   -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(x86(), JITRING_CODE_MAX, NULL, 0),
		   -EINVAL);

	/* Sanity: the entry rules alone are fine. */
	T_CHECK_EQ(build1(1, -8, 2, entry, 2, 8), 48);
	T_CHECK_EQ(build1(0, -8, 2, entry, 2, 8), -EINVAL);
	T_CHECK_EQ(build1(1, 0, 2, entry, 2, 8), -EINVAL);
	T_CHECK_EQ(build1(1, -8, 3, entry, 2, 8), -EINVAL);
	T_CHECK_EQ(build1(1, -8, 0, NULL, 1, 8), -EINVAL);
	T_CHECK_EQ(build1(1, -8, 0, NULL, 0, 8), 48);

	/* Unknown kinds. */
	memcpy(ops, entry, sizeof(entry));
	ops[2] = (struct jitring_cfi_op){ 1, 0, 6, -16 };
	T_CHECK_EQ(build1(1, -8, 2, ops, 3, 8), -EINVAL);
	ops[2].kind = JITRING_CFI_RESTORE_STATE + 1;
	T_CHECK_EQ(build1(1, -8, 2, ops, 3, 8), -EINVAL);
	ops[2].kind = 0xffff;
	T_CHECK_EQ(build1(1, -8, 2, ops, 3, 8), -EINVAL);
	ops[0].kind = 0;
	T_CHECK_EQ(build1(1, -8, 2, ops, 2, 8), -EINVAL);

	/* pc out of order, beyond code_size, not aligned; init pc != 0. */
	memcpy(ops, entry, sizeof(entry));
	ops[2] = (struct jitring_cfi_op){ 4, JITRING_CFI_DEF_CFA_OFFSET, 0,
					  16 };
	ops[3] = (struct jitring_cfi_op){ 3, JITRING_CFI_OFFSET, 6, -16 };
	T_CHECK_EQ(build1(1, -8, 2, ops, 4, 8), -EINVAL);
	ops[3].pc = 4;
	T_CHECK_EQ(build1(1, -8, 2, ops, 4, 8), 48);
	ops[3].pc = 8;
	T_CHECK_EQ(build1(1, -8, 2, ops, 4, 8), 48);
	ops[3].pc = 9;
	T_CHECK_EQ(build1(1, -8, 2, ops, 4, 8), -EINVAL);
	ops[3].pc = 6;
	T_CHECK_EQ(build1(4, -8, 2, ops, 4, 8), -EINVAL);
	ops[3].pc = 8;
	T_CHECK_EQ(build1(4, -8, 2, ops, 4, 8), 48);
	ops[1].pc = 1;
	T_CHECK_EQ(build1(1, -8, 2, ops, 4, 8), -EINVAL);

	/* Offsets: factoring, negative CFA offsets. */
	memcpy(ops, entry, sizeof(entry));
	ops[2] = (struct jitring_cfi_op){ 1, JITRING_CFI_OFFSET, 6, -12 };
	T_CHECK_EQ(build1(1, -8, 2, ops, 3, 8), -EINVAL);
	ops[2].offset = INT32_MIN;
	T_CHECK_EQ(build1(1, -1, 2, ops, 3, 8), 48);
	ops[2] = (struct jitring_cfi_op){ 1, JITRING_CFI_DEF_CFA_OFFSET, 0,
					  -16 };
	T_CHECK_EQ(build1(1, -8, 2, ops, 3, 8), -EINVAL);
	ops[2] = (struct jitring_cfi_op){ 1, JITRING_CFI_DEF_CFA, 7, -8 };
	T_CHECK_EQ(build1(1, -8, 2, ops, 3, 8), -EINVAL);

	/* State stack: no restore without remember, none in the CIE. */
	memcpy(ops, entry, sizeof(entry));
	ops[2] = (struct jitring_cfi_op){ 1, JITRING_CFI_RESTORE_STATE, 0, 0 };
	T_CHECK_EQ(build1(1, -8, 2, ops, 3, 8), -EINVAL);
	ops[2].kind = JITRING_CFI_REMEMBER_STATE;
	ops[3] = (struct jitring_cfi_op){ 2, JITRING_CFI_RESTORE_STATE, 0, 0 };
	T_CHECK_EQ(build1(1, -8, 2, ops, 4, 8), 48);
	ops[1].kind = JITRING_CFI_RESTORE;
	T_CHECK_EQ(build1(1, -8, 2, ops, 2, 8), -EINVAL);
	ops[1].kind = JITRING_CFI_REMEMBER_STATE;
	T_CHECK_EQ(build1(1, -8, 2, ops, 2, 8), -EINVAL);

	/*
	 * Size limit: 24-byte CIE + FDE of 17 fixed bytes and k one-byte
	 * ops, padded to 8: k = 4055 gives exactly 4096, one more -E2BIG.
	 */
	many = calloc(5000, sizeof(*many));
	T_REQUIRE(many != NULL);
	memcpy(many, entry, sizeof(entry));
	for (i = 2; i < 5000; i++)
		many[i] = remember;
	T_CHECK_EQ(build1(1, -8, 2, many, 2 + 4055, 8), 4096);
	T_CHECK_EQ(build1(1, -8, 2, many, 2 + 4056, 8), -E2BIG);
	T_CHECK_EQ(build1(1, -8, 2, many, 5000, 8), -E2BIG);
	/* ... also when the CIE alone overflows. */
	for (i = 0; i < 5000; i++)
		many[i] = save_rbx;
	T_CHECK_EQ(build1(1, -8, 5000, many, 5000, 8), -E2BIG);
	T_CHECK_EQ(build1(1, -8, 2100, many, 2100, 8), -E2BIG);
	free(many);
}

/* ------------------------------------------------------------------ */
/* Checker: malformed input.                                           */

/* Check a copy of @src, @size bytes, in a heap block of exactly @size. */
static int check_copy(const uint8_t *src, uint32_t size,
		      struct jitring_eh_frame_info *info)
{
	uint8_t *p = malloc(size ? size : 1);
	int ret;

	if (!p)
		abort();
	memcpy(p, src, size);
	ret = jitring_eh_frame_check(p, size, info);
	free(p);
	return ret;
}

static void test_check_malformed(void)
{
	struct jitring_eh_frame_info info;
	uint8_t good[64], b[4200];
	int n = jitring_eh_frame_build(x86(), 8, good, sizeof(good));
	uint32_t sz, len;

	T_REQUIRE(n == 56);
	sz = (uint32_t)n;
	len = sz;
	T_CHECK_EQ(check_copy(good, sz, &info), 0);

#define BAD(expr, want)                                                     \
	do {                                                                \
		memcpy(b, good, sz);                                        \
		expr;                                                       \
		T_CHECK_EQ(check_copy(b, len, &info), want);                \
	} while (0)

	/* Sizes. */
	T_CHECK_EQ(jitring_eh_frame_check(good, 0, &info), -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_check(NULL, 56, &info), -EINVAL);
	for (len = 53; len < 56; len++)
		BAD((void)0, -EINVAL);
	memset(b, 0, sizeof(b));
	T_CHECK_EQ(jitring_eh_frame_check(b, 4097, &info), -E2BIG);
	T_CHECK_EQ(jitring_eh_frame_check(b, 4100, &info), -E2BIG);
	T_CHECK_EQ(jitring_eh_frame_check(b, UINT32_MAX, &info), -E2BIG);
	/* Truncated CIE or FDE. */
	for (len = 4; len < 56; len += 4)
		BAD((void)0, -EINVAL);
	len = sz;

	/* CIE. */
	BAD(t_wr32(b, 0), -EINVAL);			/* zero length */
	BAD(t_wr32(b, 0xffffffff), -EINVAL);		/* 64-bit DWARF */
	BAD(t_wr32(b, 0x15), -EINVAL);			/* unaligned */
	BAD(t_wr32(b, 0x18), -EINVAL);			/* lands mid-FDE */
	BAD(t_wr32(b, 0x10), -EINVAL);
	BAD(t_wr32(b, 52), -EINVAL);			/* swallows FDE */
	BAD(t_wr32(b, 56), -EINVAL);			/* overruns */
	BAD(t_wr32(b + 4, 1), -EINVAL);			/* CIE id */
	BAD(t_wr32(b + 4, 0xffffffff), -EINVAL);
	BAD(b[8] = 0, -EINVAL);				/* version */
	BAD(b[8] = 2, -EINVAL);
	BAD(b[8] = 4, -EINVAL);
	BAD(b[8] = 3, 0);	/* v3: RA as ULEB 16, the same byte */
	BAD(b[9] = 'Z', -EINVAL);			/* augmentation */
	BAD(b[10] = 'P', -EINVAL);
	BAD(b[10] = 0, -EINVAL);
	BAD(b[11] = 'S', -EINVAL);
	BAD(b[9] = 0, -EINVAL);
	BAD(b[15] = 2, -EINVAL);		/* augmentation data length */
	BAD(b[15] = 0, -EINVAL);
	BAD(b[16] = 0x03, -EINVAL);			/* R encoding */
	BAD(b[16] = 0x1c, -EINVAL);
	BAD(b[16] = 0x9b, -EINVAL);
	BAD(b[16] = 0x3b, -EINVAL);
	BAD(memset(b + 12, 0x80, 12), -EINVAL);	/* unterminated LEB */
	BAD(b[12] = 0x81, -EINVAL);	/* LEBs shift onto the aug data */

	/* FDE. */
	BAD(t_wr32(b + 24, 0), -EINVAL);		/* terminator, no FDE */
	BAD(t_wr32(b + 24, 0xffffffff), -EINVAL);	/* 64-bit DWARF */
	BAD(t_wr32(b + 24, 0x20), -EINVAL);		/* overruns */
	BAD(t_wr32(b + 24, 0x7ffffff0), -EINVAL);
	BAD(t_wr32(b + 24, 0x18), -EINVAL);	/* garbage after it */
	BAD(t_wr32(b + 24, 0x1d), -EINVAL);		/* unaligned */
	BAD(t_wr32(b + 24, 0x0c), -EINVAL);		/* too short */
	BAD(t_wr32(b + 28, 0x18), -EINVAL);		/* CIE pointer */
	BAD(t_wr32(b + 28, 0x20), -EINVAL);
	BAD(t_wr32(b + 28, 0), -EINVAL);	/* "0" makes it a second CIE */
	BAD(t_wr32(b + 28, 0xffffffe4), -EINVAL);
	BAD(b[40] = 0x10, -EINVAL);	/* augmentation data overruns */
	BAD(b[40] = 0x80, -EINVAL);
	BAD(b[40] = 15, 0);		/* exactly to the end */
	BAD(b[40] = 16, -EINVAL);
	BAD(memset(b + 40, 0x80, 16), -EINVAL);	/* unterminated LEB */

	/* Lengths that chain exactly but leave records unaligned. */
	memcpy(b, good, 23);
	memcpy(b + 23, good + 24, 32);
	b[55] = 0;
	t_wr32(b, 0x13);
	t_wr32(b + 23, 0x1d);
	t_wr32(b + 27, 27);
	T_CHECK_EQ(check_copy(b, 56, &info), -EINVAL);

	/* Missing FDE, trailing data. */
	len = 24;
	BAD((void)0, -EINVAL);
	len = 28;
	BAD(t_wr32(b + 24, 0), -EINVAL);
	len = 60;
	BAD(t_wr32(b + 56, 0), 0);			/* one terminator */
	BAD(t_wr32(b + 56, 1), -EINVAL);
	BAD(t_wr32(b + 56, 0xffffffff), -EINVAL);
	len = 64;
	BAD(memset(b + 56, 0, 8), -EINVAL);		/* two terminators */
	BAD((memset(b + 56, 0, 4), t_wr32(b + 60, 0x55)), -EINVAL);
	len = 112;
	BAD(memcpy(b + 56, good + 24, 32), -EINVAL);	/* second FDE */
	BAD(memcpy(b + 56, good, 56), -EINVAL);		/* second CIE+FDE */
#undef BAD

	/* The accepted terminator variant reports the same layout. */
	memcpy(b, good, sz);
	t_wr32(b + 56, 0);
	T_CHECK_EQ(jitring_eh_frame_check(b, 60, &info), 0);
	T_CHECK_EQ(info.cie_size, 24);
	T_CHECK_EQ(info.fde_off, 24);
	T_CHECK_EQ(info.pc_begin_off, 32);
}

/* An accepted frame's fields lie inside it, FDE after CIE. */
static bool info_sane(const struct jitring_eh_frame_info *i, uint32_t len)
{
	return i->cie_size >= 16 && i->cie_size % 4 == 0 &&
	       i->fde_off == i->cie_size &&
	       i->pc_begin_off == i->fde_off + 8 &&
	       i->pc_begin_off + 9 <= len;
}

/*
 * Every byte set to each of a few values, at every truncation length, each
 * input in a heap block of exactly its size, so ASan sees any stray read.
 * Whatever is accepted must describe fields inside the data.
 */
static void fuzz_one(const uint8_t *base, uint32_t size, unsigned long *acc)
{
	static const uint8_t vals[] = { 0x00, 0x01, 0x03, 0x1b, 0x7f,
					0x80, 0xfe, 0xff };
	struct jitring_eh_frame_info info;
	uint32_t len, pos;
	size_t v;
	bool sane = true;

	for (len = 0; len <= size; len++) {
		uint8_t *p = malloc(len ? len : 1);

		T_REQUIRE(p != NULL);
		memcpy(p, base, len);
		for (pos = 0; pos < len; pos++) {
			uint8_t orig = p[pos];

			for (v = 0; v <= sizeof(vals); v++) {
				int ret;

				p[pos] = v < sizeof(vals) ? vals[v] :
							    orig ^ 0x40;
				ret = jitring_eh_frame_check(p, len, &info);
				if (ret == 0) {
					(*acc)++;
					sane &= info_sane(&info, len);
				} else {
					sane &= ret == -EINVAL;
				}
			}
			p[pos] = orig;
		}
		free(p);
	}
	T_CHECK(sane);
}

static void test_check_fuzz(void)
{
	uint8_t x[64], a[64], t[64], big[JITRING_EH_FRAME_MAX];
	unsigned long accepted = 0;
	struct jitring_eh_frame_info info;
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	struct timespec t0, t1;
	int nx, na, i;
	bool sane = true;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	nx = jitring_eh_frame_build(x86(), 8, x, sizeof(x));
	na = jitring_eh_frame_build(a64(), 20, a, sizeof(a));
	T_REQUIRE(nx == 56 && na == 64);
	memcpy(t, x, 56);
	t_wr32(t + 56, 0);
	fuzz_one(x, 56, &accepted);
	fuzz_one(t, 60, &accepted);
	fuzz_one(a, 64, &accepted);
	/* Accepted mutants (e.g. changed instructions) must exist. */
	T_CHECK(accepted > 100);

	/* Random multi-byte damage to the aarch64 frame, fixed seed. */
	for (i = 0; i < 20000; i++) {
		uint32_t len = 64;
		int k, ret;

		memcpy(big, a, 64);
		for (k = 0; k < 4; k++) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			big[(rng >> 8) % 64] = (uint8_t)(rng >> 32);
		}
		if (rng & 1)
			len = (uint32_t)((rng >> 16) % 16) * 4;
		ret = check_copy(big, len, &info);
		sane &= ret == 0 ? info_sane(&info, len) : ret == -EINVAL;
	}
	T_CHECK(sane);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("fuzz: %lu accepted mutants, %.3f s\n", accepted,
	       (double)(t1.tv_sec - t0.tv_sec) +
		       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
}

/* ------------------------------------------------------------------ */
/* Independent consumer: readelf.                                      */

static char tmpdir[64];

/*
 * Write an ELF64 executable with no program headers: .text (@code_size
 * bytes, @code first) at @addr, .eh_frame at @addr + ALIGN_8(code_size) and
 * .shstrtab.  File offsets mirror the addresses so readelf sees the layout
 * perf builds.
 */
static int write_elf(const char *path, uint16_t machine, uint64_t addr,
		     const uint8_t *code, size_t code_len, uint64_t code_size,
		     const uint8_t *eh, size_t eh_size)
{
	static const char shstr[] = "\0.text\0.eh_frame\0.shstrtab";
	uint64_t text_off = 64, eh_off = text_off + ALIGN8(code_size);
	uint64_t str_off = eh_off + eh_size;
	uint64_t sh_off = ALIGN8(str_off + sizeof(shstr));
	Elf64_Ehdr eh_hdr;
	Elf64_Shdr sh[4];
	uint8_t *img;
	FILE *f;
	size_t total = sh_off + sizeof(sh);
	int ret = -1;

	memset(&eh_hdr, 0, sizeof(eh_hdr));
	memcpy(eh_hdr.e_ident, ELFMAG, SELFMAG);
	eh_hdr.e_ident[EI_CLASS] = ELFCLASS64;
	eh_hdr.e_ident[EI_DATA] = ELFDATA2LSB;
	eh_hdr.e_ident[EI_VERSION] = EV_CURRENT;
	eh_hdr.e_type = ET_EXEC;
	eh_hdr.e_machine = machine;
	eh_hdr.e_version = EV_CURRENT;
	eh_hdr.e_entry = addr;
	eh_hdr.e_shoff = sh_off;
	eh_hdr.e_ehsize = sizeof(Elf64_Ehdr);
	eh_hdr.e_shentsize = sizeof(Elf64_Shdr);
	eh_hdr.e_shnum = 4;
	eh_hdr.e_shstrndx = 3;

	memset(sh, 0, sizeof(sh));
	sh[1].sh_name = 1;
	sh[1].sh_type = SHT_PROGBITS;
	sh[1].sh_flags = SHF_ALLOC | SHF_EXECINSTR;
	sh[1].sh_addr = addr;
	sh[1].sh_offset = text_off;
	sh[1].sh_size = code_size;
	sh[1].sh_addralign = 8;
	sh[2].sh_name = 7;
	sh[2].sh_type = SHT_PROGBITS;
	sh[2].sh_flags = SHF_ALLOC;
	sh[2].sh_addr = addr + ALIGN8(code_size);
	sh[2].sh_offset = eh_off;
	sh[2].sh_size = eh_size;
	sh[2].sh_addralign = 8;
	sh[3].sh_name = 17;
	sh[3].sh_type = SHT_STRTAB;
	sh[3].sh_offset = str_off;
	sh[3].sh_size = sizeof(shstr);
	sh[3].sh_addralign = 1;

	img = calloc(1, total);
	if (!img)
		return -1;
	memcpy(img, &eh_hdr, sizeof(eh_hdr));
	memcpy(img + text_off, code, code_len);
	memcpy(img + eh_off, eh, eh_size);
	memcpy(img + str_off, shstr, sizeof(shstr));
	memcpy(img + sh_off, sh, sizeof(sh));
	f = fopen(path, "wb");
	if (f) {
		if (fwrite(img, 1, total, f) == total)
			ret = 0;
		if (fclose(f))
			ret = -1;
	}
	free(img);
	return ret;
}

/* Run readelf with @opt on @path; the output, NUL-terminated, or NULL. */
static char *readelf(const char *opt, const char *path)
{
	char cmd[256], *out = NULL;
	size_t len = 0, cap = 0, n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "readelf %s '%s' 2>&1", opt, path);
	p = popen(cmd, "r");
	if (!p)
		return NULL;
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 16384;
			out = realloc(out, cap);
			if (!out)
				abort();
		}
		n = fread(out + len, 1, cap - len - 1, p);
		if (!n)
			break;
		len += n;
	}
	out[len] = '\0';
	if (pclose(p) != 0) {
		fprintf(stderr, "readelf %s failed:\n%s\n", opt, out);
		free(out);
		return NULL;
	}
	return out;
}

#define MAX_ROWS 16
#define MAX_COLS 8

/* The FDE part of readelf --debug-dump=frames-interp. */
struct frame_table {
	int nr_cie, nr_fde;
	uint64_t pc_lo, pc_hi;
	int ncols;
	char col[MAX_COLS][16];
	int nrows;
	uint64_t loc[MAX_ROWS];
	char cell[MAX_ROWS][MAX_COLS][24];
};

/* Split @line at blanks into at most @max tokens of @width bytes. */
static int split(const char *line, char (*tok)[24], int max)
{
	int n = 0;

	while (*line) {
		size_t w;

		line += strspn(line, " \t");
		w = strcspn(line, " \t");
		if (!w)
			break;
		if (n == max || w >= 24)
			return -1;
		memcpy(tok[n], line, w);
		tok[n][w] = '\0';
		n++;
		line += w;
	}
	return n;
}

static bool parse_interp(char *out, struct frame_table *t)
{
	enum { NONE, CIE, FDE_HEAD, FDE_ROWS, DONE } st = NONE;
	char *line, *next;

	memset(t, 0, sizeof(*t));
	for (line = out; line; line = next) {
		char tok[MAX_COLS + 1][24];
		int n;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (strstr(line, " CIE")) {
			t->nr_cie++;
			st = CIE;
			continue;
		}
		if (strstr(line, " FDE cie=")) {
			const char *pc = strstr(line, "pc=");

			t->nr_fde++;
			if (!pc || sscanf(pc, "pc=%" SCNx64 "..%" SCNx64,
					  &t->pc_lo, &t->pc_hi) != 2)
				return false;
			st = FDE_HEAD;
			continue;
		}
		if (st == FDE_HEAD) {
			n = split(line, tok, MAX_COLS);
			if (n < 2 || strcmp(tok[0], "LOC"))
				return false;
			t->ncols = n;
			for (int i = 0; i < n; i++)
				strcpy(t->col[i], tok[i]);
			st = FDE_ROWS;
			continue;
		}
		if (st == FDE_ROWS) {
			n = split(line, tok, MAX_COLS);
			if (n == 0) {
				st = DONE;
				continue;
			}
			if (n != t->ncols || t->nrows == MAX_ROWS)
				return false;
			t->loc[t->nrows] = strtoull(tok[0], NULL, 16);
			for (int i = 1; i < n; i++)
				strcpy(t->cell[t->nrows][i], tok[i]);
			t->nrows++;
		}
	}
	return t->nr_fde == 1 && st == DONE;
}

/* Expected unwind row: CFA rule and the rules of two register columns. */
struct row {
	uint64_t off;
	const char *cfa, *r1, *ra;
};

static void check_rows(const struct frame_table *t, uint64_t addr,
		       const char *r1_name, const struct row *want, int n)
{
	T_CHECK_EQ(t->ncols, 4);
	T_CHECK(!strcmp(t->col[1], "CFA"));
	T_CHECK(!strcmp(t->col[2], r1_name));
	T_CHECK(!strcmp(t->col[3], "ra"));
	T_CHECK_EQ(t->nrows, n);
	for (int i = 0; i < n && i < t->nrows; i++) {
		bool ok = t->loc[i] == addr + want[i].off &&
			  !strcmp(t->cell[i][1], want[i].cfa) &&
			  !strcmp(t->cell[i][2], want[i].r1) &&
			  !strcmp(t->cell[i][3], want[i].ra);

		T_CHECK(ok);
		if (!ok)
			fprintf(stderr,
				"row %d: %#" PRIx64 " %s %s %s, want %#" PRIx64
				" %s %s %s\n", i, t->loc[i], t->cell[i][1],
				t->cell[i][2], t->cell[i][3],
				addr + want[i].off, want[i].cfa, want[i].r1,
				want[i].ra);
	}
}

/* A "Key: value" line of readelf --debug-dump=frames, trimmed. */
static bool raw_field(const char *out, const char *key, char *val,
		      size_t size)
{
	const char *p = strstr(out, key), *e;
	size_t n;

	if (!p)
		return false;
	p += strlen(key);
	p += strspn(p, " ");
	e = strchr(p, '\n');
	n = e ? (size_t)(e - p) : strlen(p);
	while (n && p[n - 1] == ' ')
		n--;
	if (n >= size)
		return false;
	memcpy(val, p, n);
	val[n] = '\0';
	return true;
}

static void check_raw_field(const char *out, const char *key,
			    const char *want)
{
	char val[64] = "";
	bool ok = raw_field(out, key, val, sizeof(val)) && !strcmp(val, want);

	T_CHECK(ok);
	if (!ok)
		fprintf(stderr, "readelf %s '%s', want '%s'\n", key, val, want);
}

static unsigned count(const char *hay, const char *needle)
{
	unsigned n = 0;

	while ((hay = strstr(hay, needle))) {
		n++;
		hay += strlen(needle);
	}
	return n;
}

/*
 * Build the eh_frame for @cfi/@code_size, wrap it with @code in an ELF at
 * @addr, and return readelf's frames-interp table; *@raw gets the plain
 * --debug-dump=frames output (caller frees).
 */
static bool decode(const struct jitring_cfi *cfi, uint16_t machine,
		   uint64_t addr, const uint8_t *code, size_t code_len,
		   uint64_t code_size, struct frame_table *t, char **raw)
{
	uint8_t eh[JITRING_EH_FRAME_MAX];
	char path[128], *out;
	int n = jitring_eh_frame_build(cfi, code_size, eh, sizeof(eh));
	bool ok;

	*raw = NULL;
	T_CHECK(n > 0);
	if (n <= 0)
		return false;
	snprintf(path, sizeof(path), "%s/eh.elf", tmpdir);
	T_REQUIRE(write_elf(path, machine, addr, code, code_len, code_size,
			    eh, (size_t)n) == 0);
	out = readelf("--debug-dump=frames-interp", path);
	T_CHECK(out != NULL);
	if (!out)
		return false;
	T_CHECK(!strstr(out, "arning"));
	ok = parse_interp(out, t);
	T_CHECK(ok);
	if (!ok)
		fprintf(stderr, "unparsed readelf output:\n%s\n", out);
	free(out);
	*raw = readelf("--debug-dump=frames", path);
	T_CHECK(*raw != NULL);
	if (*raw) {
		T_CHECK(!strstr(*raw, "arning"));
		T_CHECK_EQ(count(*raw, " CIE\n"), 1);
		T_CHECK_EQ(count(*raw, " FDE cie=00000000 pc="), 1);
		T_CHECK_EQ(count(*raw, "ZERO terminator"), 0);
		check_raw_field(*raw, "Augmentation:", "\"zR\"");
		check_raw_field(*raw, "Augmentation data:", "1b");
	}
	unlink(path);
	return ok && *raw;
}

static void test_readelf_x86_64(uint64_t addr, uint64_t code_size)
{
	static const struct row want[] = {
		{ 0, "rsp+8", "u", "c-8" },	/* entry */
		{ 1, "rsp+16", "c-16", "c-8" },	/* after push %rbp */
		{ 4, "rbp+16", "c-16", "c-8" },	/* after mov %rsp,%rbp */
		{ 7, "rsp+8", "u", "c-8" },	/* after pop %rbp */
	};
	struct frame_table t;
	char *raw;

	if (!decode(x86(), EM_X86_64, addr, jitring_trampoline_x86_64,
		    jitring_trampoline_x86_64_size, code_size, &t, &raw)) {
		free(raw);
		return;
	}
	T_CHECK_EQ(t.nr_cie, 1);
	T_CHECK_EQ(t.pc_lo, addr);
	T_CHECK_EQ(t.pc_hi, addr + code_size);
	check_rows(&t, addr, "rbp", want, 4);
	check_raw_field(raw, "Version:", "1");
	check_raw_field(raw, "Code alignment factor:", "1");
	check_raw_field(raw, "Data alignment factor:", "-8");
	check_raw_field(raw, "Return address column:", "16");
	T_CHECK(strstr(raw, "DW_CFA_def_cfa: r7 (rsp) ofs 8\n"));
	T_CHECK(strstr(raw, "DW_CFA_offset: r16 (rip) at cfa-8\n"));
	T_CHECK(strstr(raw, "DW_CFA_offset: r6 (rbp) at cfa-16\n"));
	T_CHECK(strstr(raw, "DW_CFA_def_cfa_register: r6 (rbp)\n"));
	T_CHECK(strstr(raw, "DW_CFA_restore: r6 (rbp)\n"));
	free(raw);
}

static void test_readelf_aarch64(uint64_t addr, uint64_t code_size)
{
	static const struct row want[] = {
		{ 0, "sp+0", "u", "u" },	/* entry: RA in x30 */
		{ 4, "sp+16", "c-16", "c-8" },	/* after stp */
		{ 8, "x29+16", "c-16", "c-8" },	/* after mov x29, sp */
		{ 16, "sp+0", "u", "u" },	/* after ldp */
	};
	struct frame_table t;
	char *raw;

	if (!decode(a64(), EM_AARCH64, addr, jitring_trampoline_aarch64,
		    jitring_trampoline_aarch64_size, code_size, &t, &raw)) {
		free(raw);
		return;
	}
	T_CHECK_EQ(t.nr_cie, 1);
	T_CHECK_EQ(t.pc_lo, addr);
	T_CHECK_EQ(t.pc_hi, addr + code_size);
	check_rows(&t, addr, "x29", want, 4);
	check_raw_field(raw, "Version:", "1");
	check_raw_field(raw, "Code alignment factor:", "4");
	check_raw_field(raw, "Data alignment factor:", "-8");
	check_raw_field(raw, "Return address column:", "30");
	T_CHECK(strstr(raw, "DW_CFA_def_cfa: r31 (sp) ofs 0\n"));
	T_CHECK(strstr(raw, "DW_CFA_offset: r29 (x29) at cfa-16\n"));
	T_CHECK(strstr(raw, "DW_CFA_offset: r30 (x30) at cfa-8\n"));
	T_CHECK(strstr(raw, "DW_CFA_restore: r30 (x30)\n"));
	free(raw);
}

/*
 * Every encoding the builder can choose: advance_loc1/2/4, offset_extended
 * (reg >= 64), offset_extended_sf (positive offset), restore_extended, the
 * state stack, a CIE of version 3 (RA column > 255).  e_machine is EM_NONE:
 * readelf silently drops a CIE whose RA column is beyond the register names
 * it knows for the machine.
 */
static void test_readelf_encodings(void)
{
	static const struct jitring_cfi_op ops[] = {
		{ 0, JITRING_CFI_DEF_CFA, 7, 8 },
		{ 0, JITRING_CFI_OFFSET, 300, -8 },
		{ 0x30, JITRING_CFI_OFFSET, 3, 8 },
		{ 0x30 + 200, JITRING_CFI_OFFSET, 70, -24 },
		{ 0x30 + 200, JITRING_CFI_REMEMBER_STATE, 0, 0 },
		{ 0x30 + 200 + 1000, JITRING_CFI_DEF_CFA_OFFSET, 0, 200 },
		{ 0x30 + 200 + 1000 + 70000, JITRING_CFI_RESTORE_STATE, 0, 0 },
		{ 0x30 + 200 + 1000 + 70000, JITRING_CFI_RESTORE, 70, 0 },
	};
	static const struct jitring_cfi cfi = {
		.code_align = 1,
		.data_align = -8,
		.ra_reg = 300,
		.nr_init = 2,
		.nr_ops = sizeof(ops) / sizeof(ops[0]),
		.ops = ops,
	};
	static const struct {
		uint32_t off;
		const char *cfa, *r3, *r70;
	} want[] = {
		{ 0, "r7+8", "u", "u" },
		{ 0x30, "r7+8", "c+8", "u" },
		{ 0x30 + 200, "r7+8", "c+8", "c-24" },
		{ 0x30 + 200 + 1000, "r7+200", "c+8", "c-24" },
		/* restore_state, then r70 back to its entry rule */
		{ 0x30 + 200 + 1000 + 70000, "r7+8", "c+8", "u" },
	};
	const uint64_t addr = 0x7f0012340000ull;
	struct frame_table t;
	char *raw;

	if (!decode(&cfi, EM_NONE, addr, jitring_trampoline_x86_64,
		    jitring_trampoline_x86_64_size, 100000, &t, &raw)) {
		free(raw);
		return;
	}
	T_CHECK_EQ(t.pc_lo, addr);
	T_CHECK_EQ(t.pc_hi, addr + 100000);
	T_CHECK_EQ(t.ncols, 5);
	T_CHECK(!strcmp(t.col[1], "CFA"));
	T_CHECK(!strcmp(t.col[2], "r3"));
	T_CHECK(!strcmp(t.col[3], "r70"));
	T_CHECK(!strcmp(t.col[4], "ra"));
	T_CHECK_EQ(t.nrows, 5);
	for (int i = 0; i < 5 && i < t.nrows; i++) {
		bool ok = t.loc[i] == addr + want[i].off &&
			  !strcmp(t.cell[i][1], want[i].cfa) &&
			  !strcmp(t.cell[i][2], want[i].r3) &&
			  !strcmp(t.cell[i][3], want[i].r70) &&
			  !strcmp(t.cell[i][4], "c-8");

		T_CHECK(ok);
		if (!ok)
			fprintf(stderr, "row %d: %#" PRIx64 " %s %s %s %s\n",
				i, t.loc[i], t.cell[i][1], t.cell[i][2],
				t.cell[i][3], t.cell[i][4]);
	}
	check_raw_field(raw, "Version:", "3");
	check_raw_field(raw, "Return address column:", "300");
	T_CHECK(strstr(raw, "DW_CFA_offset_extended: r300 at cfa-8\n"));
	T_CHECK(strstr(raw, "DW_CFA_advance_loc1: 200 to "));
	T_CHECK(strstr(raw, "DW_CFA_advance_loc2: 1000 to "));
	T_CHECK(strstr(raw, "DW_CFA_advance_loc4: 70000 to "));
	T_CHECK(strstr(raw, "DW_CFA_offset_extended_sf: r3 at cfa+8\n"));
	T_CHECK(strstr(raw, "DW_CFA_offset_extended: r70 at cfa-24\n"));
	T_CHECK(strstr(raw, "DW_CFA_remember_state\n"));
	T_CHECK(strstr(raw, "DW_CFA_def_cfa_offset: 200\n"));
	T_CHECK(strstr(raw, "DW_CFA_restore_state\n"));
	T_CHECK(strstr(raw, "DW_CFA_restore_extended: r70\n"));
	free(raw);
}

static void test_readelf(void)
{
	const char *base = getenv("TMPDIR");

	if (system("readelf --version >/dev/null 2>&1") != 0) {
		/* Keep earlier failures visible rather than skipping. */
		if (t_failed)
			return;
		t_skip("readelf (binutils) not installed");
	}
	snprintf(tmpdir, sizeof(tmpdir), "%s/jitring-eh-XXXXXX",
		 base && strlen(base) < 40 ? base : "/tmp");
	T_REQUIRE(mkdtemp(tmpdir) != NULL);

	test_readelf_x86_64(0x401000, 8);
	test_readelf_x86_64(0x401000, 7);
	test_readelf_x86_64(0x7f5500001230ull, 100000);
	test_readelf_aarch64(0x401000, 20);
	test_readelf_aarch64(0xffff80001000ull, 4096);
	test_readelf_encodings();
	rmdir(tmpdir);
}

int main(void)
{
	test_presets();
	test_build_errors();
	test_check_malformed();
	test_check_fuzz();
	test_readelf();
	return t_report();
}
