/* SPDX-License-Identifier: MIT */
/*
 * .eh_frame encoding and checking.
 *
 * perf 6.1 copies an UNWINDING_INFO payload into the injected ELF as
 * [.eh_frame][.eh_frame_hdr] and maps .eh_frame at run-time address
 * code_addr + ALIGN_8(code_size) (genelf.c).  Every pc-relative value in the
 * data must be computed for that placement, so the builder below emits
 * pc_begin as -(ALIGN_8(code_size) + offset of the pc_begin field), and the
 * writer rewrites that same field in caller-supplied data, whose layout
 * jitring_eh_frame_check() establishes.
 *
 * The builder emits exactly one CIE (version 1, or 3 when the return-address
 * column does not fit a byte, augmentation "zR", FDE pointers
 * DW_EH_PE_pcrel|DW_EH_PE_sdata4) and one FDE, each padded with DW_CFA_nop to
 * a multiple of 8 bytes.  There is no zero terminator: perf reads the FDE
 * through .eh_frame_hdr, and libgcc/libunwind stop at the section end.  The
 * builder runs twice over the same code, first counting (and validating),
 * then writing, so nothing is written to a buffer on failure.
 *
 * The checker runs on the hot path of every jitring_write() with unwinding
 * information.  It is a straight-line parse of two records in which every
 * read is preceded by a bounds check against the end of the record it
 * belongs to, which in turn was checked against the end of the data; it
 * neither allocates nor loops over anything but the bytes of a LEB128.
 *
 * References: DWARF 4 section 6.4 (call frame information), the Linux
 * Standard Base Core specification section 10.6 (.eh_frame and "zR"), perf
 * tools/perf/util/genelf.c and jitdump.c.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cfi_presets.h"
#include "eh_frame.h"
#include "jitring.h"

/* Call frame instructions (DWARF 4, 7.23). */
#define DW_CFA_advance_loc 0x40
#define DW_CFA_offset 0x80
#define DW_CFA_restore 0xc0
#define DW_CFA_nop 0x00
#define DW_CFA_advance_loc1 0x02
#define DW_CFA_advance_loc2 0x03
#define DW_CFA_advance_loc4 0x04
#define DW_CFA_offset_extended 0x05
#define DW_CFA_restore_extended 0x06
#define DW_CFA_remember_state 0x0a
#define DW_CFA_restore_state 0x0b
#define DW_CFA_def_cfa 0x0c
#define DW_CFA_def_cfa_register 0x0d
#define DW_CFA_def_cfa_offset 0x0e
#define DW_CFA_offset_extended_sf 0x11

/* The FDE pointer encoding jitring emits and requires. */
#define EH_FDE_ENC (JR_DW_EH_PE_pcrel | JR_DW_EH_PE_sdata4)

/* 64-bit DWARF length escape. */
#define DW_LEN_64 0xffffffffu

/* The sdata4 pc_begin reaches back at most 2 GiB. */
#define PC_BEGIN_REACH 0x80000000ull

/* ------------------------------------------------------------------ */
/* Presets.                                                            */

const unsigned char jitring_trampoline_x86_64[] = { JR_TRAMPOLINE_X86_64_CODE };
const unsigned jitring_trampoline_x86_64_size =
	sizeof(jitring_trampoline_x86_64);

const unsigned char jitring_trampoline_aarch64[] = {
	JR_TRAMPOLINE_AARCH64_CODE
};
const unsigned jitring_trampoline_aarch64_size =
	sizeof(jitring_trampoline_aarch64);

/* DWARF register numbers (x86_64 psABI, AArch64 DWARF ABI). */
#define X86_64_RBP 6
#define X86_64_RSP 7
#define X86_64_RA 16
#define AARCH64_X29 29
#define AARCH64_X30 30
#define AARCH64_SP 31

static const struct jitring_cfi_op x86_64_fp_ops[] = {
	/* Entry: the call pushed the return address. */
	{ 0, JITRING_CFI_DEF_CFA, X86_64_RSP, 8 },
	{ 0, JITRING_CFI_OFFSET, X86_64_RA, -8 },
	/* After push %rbp. */
	{ 1, JITRING_CFI_DEF_CFA_OFFSET, 0, 16 },
	{ 1, JITRING_CFI_OFFSET, X86_64_RBP, -16 },
	/* After mov %rsp,%rbp. */
	{ 4, JITRING_CFI_DEF_CFA_REGISTER, X86_64_RBP, 0 },
	/* After pop %rbp, at the ret. */
	{ 7, JITRING_CFI_DEF_CFA, X86_64_RSP, 8 },
	{ 7, JITRING_CFI_RESTORE, X86_64_RBP, 0 },
};

static const struct jitring_cfi x86_64_fp = {
	.code_align = 1,
	.data_align = -8,
	.ra_reg = X86_64_RA,
	.nr_init = 2,
	.nr_ops = sizeof(x86_64_fp_ops) / sizeof(x86_64_fp_ops[0]),
	.ops = x86_64_fp_ops,
};

static const struct jitring_cfi_op aarch64_fp_ops[] = {
	/* Entry: nothing pushed, return address in x30. */
	{ 0, JITRING_CFI_DEF_CFA, AARCH64_SP, 0 },
	/* After stp x29, x30, [sp, #-16]!. */
	{ 4, JITRING_CFI_DEF_CFA_OFFSET, 0, 16 },
	{ 4, JITRING_CFI_OFFSET, AARCH64_X29, -16 },
	{ 4, JITRING_CFI_OFFSET, AARCH64_X30, -8 },
	/* After mov x29, sp. */
	{ 8, JITRING_CFI_DEF_CFA_REGISTER, AARCH64_X29, 0 },
	/* After ldp x29, x30, [sp], #16, at the ret. */
	{ 16, JITRING_CFI_DEF_CFA, AARCH64_SP, 0 },
	{ 16, JITRING_CFI_RESTORE, AARCH64_X29, 0 },
	{ 16, JITRING_CFI_RESTORE, AARCH64_X30, 0 },
};

static const struct jitring_cfi aarch64_fp = {
	.code_align = 4,
	.data_align = -8,
	.ra_reg = AARCH64_X30,
	.nr_init = 1,
	.nr_ops = sizeof(aarch64_fp_ops) / sizeof(aarch64_fp_ops[0]),
	.ops = aarch64_fp_ops,
};

const struct jitring_cfi *jitring_cfi_preset(enum jitring_cfi_preset preset)
{
	switch (preset) {
	case JITRING_CFI_X86_64_FP_TRAMPOLINE:
		return &x86_64_fp;
	case JITRING_CFI_AARCH64_FP_TRAMPOLINE:
		return &aarch64_fp;
	case JITRING_CFI_HOST_FP_TRAMPOLINE:
#if defined(__x86_64__)
		return &x86_64_fp;
#elif defined(__aarch64__)
		return &aarch64_fp;
#else
		return NULL;
#endif
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Builder.                                                            */

/*
 * Output cursor.  With @buf NULL it only counts; otherwise the caller has
 * already made sure (by a counting pass) that everything fits.
 */
struct emit {
	uint8_t *buf;
	uint32_t pos;
};

static void put8(struct emit *e, uint8_t v)
{
	if (e->buf)
		e->buf[e->pos] = v;
	e->pos++;
}

static void put16(struct emit *e, uint16_t v)
{
	if (e->buf)
		memcpy(e->buf + e->pos, &v, sizeof(v));
	e->pos += sizeof(v);
}

static void put32(struct emit *e, uint32_t v)
{
	if (e->buf)
		memcpy(e->buf + e->pos, &v, sizeof(v));
	e->pos += sizeof(v);
}

static void patch32(struct emit *e, uint32_t at, uint32_t v)
{
	if (e->buf)
		memcpy(e->buf + at, &v, sizeof(v));
}

static void put_uleb(struct emit *e, uint64_t v)
{
	do {
		uint8_t b = v & 0x7f;

		v >>= 7;
		put8(e, v ? b | 0x80 : b);
	} while (v);
}

static void put_sleb(struct emit *e, int64_t v)
{
	bool more;

	do {
		uint8_t b = (uint8_t)v & 0x7f;

		/* Arithmetic shift: gcc and clang define it for negatives. */
		v >>= 7;
		more = !((v == 0 && !(b & 0x40)) || (v == -1 && (b & 0x40)));
		put8(e, more ? b | 0x80 : b);
	} while (more);
}

/* Pad the record that started at @start to a multiple of 8 bytes. */
static void pad8(struct emit *e, uint32_t start)
{
	while ((e->pos - start) % 8)
		put8(e, DW_CFA_nop);
}

static void put_advance(struct emit *e, uint32_t delta)
{
	if (!delta)
		return;
	if (delta < 0x40) {
		put8(e, (uint8_t)(DW_CFA_advance_loc | delta));
	} else if (delta <= UINT8_MAX) {
		put8(e, DW_CFA_advance_loc1);
		put8(e, (uint8_t)delta);
	} else if (delta <= UINT16_MAX) {
		put8(e, DW_CFA_advance_loc2);
		put16(e, (uint16_t)delta);
	} else {
		put8(e, DW_CFA_advance_loc4);
		put32(e, delta);
	}
}

/*
 * Emit one rule change.  @in_cie: the op is an entry rule, where restoring
 * or a state stack make no sense.  @depth counts remembered states.
 */
static int put_op(struct emit *e, const struct jitring_cfi *cfi,
		  const struct jitring_cfi_op *op, bool in_cie, uint32_t *depth)
{
	int64_t f;

	switch (op->kind) {
	case JITRING_CFI_DEF_CFA:
		if (op->offset < 0)
			return -EINVAL;
		put8(e, DW_CFA_def_cfa);
		put_uleb(e, op->reg);
		put_uleb(e, (uint64_t)op->offset);
		return 0;
	case JITRING_CFI_DEF_CFA_OFFSET:
		if (op->offset < 0)
			return -EINVAL;
		put8(e, DW_CFA_def_cfa_offset);
		put_uleb(e, (uint64_t)op->offset);
		return 0;
	case JITRING_CFI_DEF_CFA_REGISTER:
		put8(e, DW_CFA_def_cfa_register);
		put_uleb(e, op->reg);
		return 0;
	case JITRING_CFI_OFFSET:
		/* 64-bit: INT32_MIN / -1 must not trap. */
		if ((int64_t)op->offset % cfi->data_align)
			return -EINVAL;
		f = (int64_t)op->offset / cfi->data_align;
		if (f < 0) {
			put8(e, DW_CFA_offset_extended_sf);
			put_uleb(e, op->reg);
			put_sleb(e, f);
		} else if (op->reg < 64) {
			put8(e, (uint8_t)(DW_CFA_offset | op->reg));
			put_uleb(e, (uint64_t)f);
		} else {
			put8(e, DW_CFA_offset_extended);
			put_uleb(e, op->reg);
			put_uleb(e, (uint64_t)f);
		}
		return 0;
	case JITRING_CFI_RESTORE:
		if (in_cie)
			return -EINVAL;
		if (op->reg < 64) {
			put8(e, (uint8_t)(DW_CFA_restore | op->reg));
		} else {
			put8(e, DW_CFA_restore_extended);
			put_uleb(e, op->reg);
		}
		return 0;
	case JITRING_CFI_REMEMBER_STATE:
		if (in_cie)
			return -EINVAL;
		(*depth)++;
		put8(e, DW_CFA_remember_state);
		return 0;
	case JITRING_CFI_RESTORE_STATE:
		if (in_cie || !*depth)
			return -EINVAL;
		(*depth)--;
		put8(e, DW_CFA_restore_state);
		return 0;
	}
	return -EINVAL;
}

/*
 * One pass of the builder: counts when @out is NULL, writes otherwise.
 * Every op adds at most 16 bytes, and the size is checked after each one, so
 * the count cannot overflow whatever nr_ops is.
 */
static int encode(const struct jitring_cfi *cfi, uint64_t code_size,
		  uint8_t *out)
{
	struct emit e = { .buf = out, .pos = 0 };
	uint32_t fde_off, pc_begin_off, loc = 0, depth = 0, i;
	uint64_t reach;
	int ret;

	if (!cfi || !code_size || code_size > JITRING_CODE_MAX)
		return -EINVAL;
	if (!cfi->code_align || !cfi->data_align)
		return -EINVAL;
	if (cfi->nr_init > cfi->nr_ops || (cfi->nr_ops && !cfi->ops))
		return -EINVAL;

	/* CIE. */
	put32(&e, 0); /* length, patched below */
	put32(&e, 0); /* CIE id */
	put8(&e, cfi->ra_reg <= UINT8_MAX ? 1 : 3);
	put8(&e, 'z');
	put8(&e, 'R');
	put8(&e, '\0');
	put_uleb(&e, cfi->code_align);
	put_sleb(&e, cfi->data_align);
	if (cfi->ra_reg <= UINT8_MAX)
		put8(&e, (uint8_t)cfi->ra_reg);
	else
		put_uleb(&e, cfi->ra_reg);
	put_uleb(&e, 1); /* augmentation data length */
	put8(&e, EH_FDE_ENC);
	for (i = 0; i < cfi->nr_init; i++) {
		if (cfi->ops[i].pc)
			return -EINVAL;
		ret = put_op(&e, cfi, &cfi->ops[i], true, &depth);
		if (ret)
			return ret;
		if (e.pos > JITRING_EH_FRAME_MAX)
			return -E2BIG;
	}
	pad8(&e, 0);
	patch32(&e, 0, e.pos - 4);

	/* FDE. */
	fde_off = e.pos;
	put32(&e, 0);           /* length, patched below */
	put32(&e, fde_off + 4); /* back to the CIE from this field */
	pc_begin_off = e.pos;
	/*
	 * The data sits at code_addr + ALIGN_8(code_size); the field is
	 * pc_begin_off bytes into it.  The result must fit sdata4.
	 */
	reach = ((code_size + 7) & ~(uint64_t)7) + pc_begin_off;
	if (reach > PC_BEGIN_REACH)
		return -EINVAL;
	put32(&e, (uint32_t)(0 - reach));
	put32(&e, (uint32_t)code_size); /* pc_range */
	put_uleb(&e, 0);                /* augmentation data length */
	for (; i < cfi->nr_ops; i++) {
		const struct jitring_cfi_op *op = &cfi->ops[i];

		if (op->pc < loc || op->pc > code_size ||
		    op->pc % cfi->code_align)
			return -EINVAL;
		put_advance(&e, (op->pc - loc) / cfi->code_align);
		loc = op->pc;
		ret = put_op(&e, cfi, op, false, &depth);
		if (ret)
			return ret;
		if (e.pos > JITRING_EH_FRAME_MAX)
			return -E2BIG;
	}
	pad8(&e, fde_off);
	if (e.pos > JITRING_EH_FRAME_MAX)
		return -E2BIG;
	patch32(&e, fde_off, e.pos - fde_off - 4);
	return (int)e.pos;
}

int jitring_eh_frame_build(const struct jitring_cfi *cfi, uint64_t code_size,
			   void *buf, size_t buf_size)
{
	int size = encode(cfi, code_size, NULL);

	if (size < 0 || !buf)
		return size;
	if (buf_size < (size_t)size)
		return -ENOSPC;
	return encode(cfi, code_size, buf);
}

/* ------------------------------------------------------------------ */
/* Checker.                                                            */

static inline uint32_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/*
 * Decode a ULEB128 (or skip an SLEB128: same length rule) that must end
 * before @end.  Payload bits past bit 62 saturate the value to UINT64_MAX,
 * which is enough for the comparisons made here.
 * Return: false if unterminated.
 */
static bool get_leb(const uint8_t *p, uint32_t *pos, uint32_t end,
		    uint64_t *val)
{
	uint64_t v = 0;
	unsigned int shift = 0;
	uint32_t i = *pos;
	uint8_t b;

	do {
		if (i >= end)
			return false;
		b = p[i++];
		if (shift < 57)
			v |= (uint64_t)(b & 0x7f) << shift;
		else if (b & 0x7f)
			v = UINT64_MAX;
		shift += 7;
	} while (b & 0x80);
	*pos = i;
	*val = v;
	return true;
}

/*
 * Read a record's 32-bit length at @off and return the record's end, or 0
 * if the length is the 64-bit escape, zero (a terminator where a record is
 * required), not a multiple of 4, or overruns @size.
 */
static uint32_t record_end(const uint8_t *p, uint32_t off, uint32_t size)
{
	uint32_t len;

	if (size - off < 4)
		return 0;
	len = rd32(p + off);
	if (!len || len == DW_LEN_64 || len % 4 || len > size - off - 4)
		return 0;
	return off + 4 + len;
}

int jitring_eh_frame_check(const void *eh, uint32_t size,
			   struct jitring_eh_frame_info *info)
{
	const uint8_t *p = eh;
	uint32_t cie_end, fde_off, fde_end, pos;
	uint64_t v;
	uint8_t version;

	if (size > JITRING_EH_FRAME_MAX)
		return -E2BIG;
	if (!p || !size || size % 4)
		return -EINVAL;

	/* CIE: length, id 0, version, "zR", code/data align, RA, 1, 0x1b. */
	cie_end = record_end(p, 0, size);
	if (!cie_end || cie_end < 4 + 4 + 1 + 3)
		return -EINVAL;
	if (rd32(p + 4) != 0)
		return -EINVAL;
	version = p[8];
	if (version != 1 && version != 3)
		return -EINVAL;
	if (p[9] != 'z' || p[10] != 'R' || p[11] != '\0')
		return -EINVAL;
	pos = 12;
	if (!get_leb(p, &pos, cie_end, &v)) /* code alignment */
		return -EINVAL;
	if (!get_leb(p, &pos, cie_end, &v)) /* data alignment */
		return -EINVAL;
	if (version == 1) { /* return-address column */
		if (pos >= cie_end)
			return -EINVAL;
		pos++;
	} else if (!get_leb(p, &pos, cie_end, &v)) {
		return -EINVAL;
	}
	if (!get_leb(p, &pos, cie_end, &v) || v != 1)
		return -EINVAL;
	if (pos >= cie_end || p[pos] != EH_FDE_ENC)
		return -EINVAL;
	/* The rest of the CIE is initial instructions. */

	/* FDE: length, CIE pointer, pc_begin, pc_range, augmentation. */
	fde_off = cie_end;
	fde_end = record_end(p, fde_off, size);
	if (!fde_end || fde_end - fde_off < 4 + 4 + 4 + 4 + 1)
		return -EINVAL;
	if (rd32(p + fde_off + 4) != fde_off + 4)
		return -EINVAL;
	pos = fde_off + 16;
	if (!get_leb(p, &pos, fde_end, &v) || v > fde_end - pos)
		return -EINVAL;

	/* Nothing after the FDE but an optional zero terminator. */
	if (fde_end != size && (size - fde_end != 4 || rd32(p + fde_end) != 0))
		return -EINVAL;

	if (info) {
		info->cie_size = cie_end;
		info->fde_off = fde_off;
		info->pc_begin_off = fde_off + 8;
	}
	return 0;
}
