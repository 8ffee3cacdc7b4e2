/* SPDX-License-Identifier: MIT */
/*
 * Encoding of jitdump records (docs/format.md has the byte layout).
 *
 * UNWINDING_INFO payload is [.eh_frame][.eh_frame_hdr][pad to 8], the order
 * perf's genelf.c reads, not the one its spec text gives.  perf maps the
 * payload at code_addr + ALIGN_8(code_size), so the FDE's pc_begin and the
 * header's pointers are computed for that run-time layout here, whatever the
 * caller put in pc_begin.  mapped_size = ALIGN_16(unwinding_size) covers the
 * data, which DWARF unwinding through the code needs.
 */
#include <elf.h>
#include <errno.h>
#include <string.h>

#include "common/compiler.h"
#include "record.h"

/* An unwinding entry's code must leave room for the i32 offsets. */
#define JR_UNW_CODE_MAX (0x7fffffffu - 2 * JITRING_EH_FRAME_MAX - 64)

/*
 * perf inject turns the rows into a DWARF line program whose sequence ends
 * at the last row's address (perf 6.1 genelf_debug.c), so the last row
 * covers no code: a natural table (line 10 at +0, line 42 at +9) gives
 * "??:0" for every sample from +9 on.  When the last row starts inside the
 * code, a closing row at code_addr + code_size repeating it makes the
 * program cover the whole function.  A table that already ends at or past
 * the code's end is written as given.  The closing row is not the
 * caller's: JITRING_LINES_MAX counts the caller's rows only.
 */
static int plan_lines(struct jitring_group *g, const struct jitring_entry *e)
{
	uint64_t size = JR_DBG_FIXED;
	uint64_t prev = 0, start, end;
	size_t n = 0;

	if (!e->lines)
		return -EINVAL;
	if (e->nr_lines > JITRING_LINES_MAX)
		return -E2BIG;
	for (uint32_t i = 0; i < e->nr_lines; i++) {
		const struct jitring_line *l = &e->lines[i];

		if (!l->file || l->addr < prev)
			return -EINVAL;
		prev = l->addr;
		n = strnlen(l->file, JITRING_NAME_MAX + 1);
		if (n > JITRING_NAME_MAX)
			return -E2BIG;
		size += sizeof(struct jitdump_debug_entry) + n + 1;
	}
	g->dbg_rows = e->nr_lines;
	start = (uint64_t)(uintptr_t)e->code_addr;
	end = start + e->code_size;
	/* (No closing row for code that would wrap the address space.) */
	if (prev < end && end > start) {
		size += sizeof(struct jitdump_debug_entry) + n + 1;
		g->dbg_rows++;
	}
	if (size > UINT32_MAX)
		return -E2BIG;
	g->dbg_size = (uint32_t)size;
	return 0;
}

/* The length of a name given in pieces (with e->name NULL). */
static JR_NOINLINE int plan_name_parts(const struct jitring_entry *e,
				       size_t *len)
{
	size_t n = 0;

	if (!e->name_parts || e->nr_name_parts > JITRING_NAME_PARTS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < e->nr_name_parts; i++) {
		const struct jitring_str *p = &e->name_parts[i];

		if (!p->len)
			continue;
		if (!p->ptr)
			return -EINVAL;
		if (p->len > JITRING_NAME_MAX - n)
			return -E2BIG;
		if (memchr(p->ptr, 0, p->len))
			return -EINVAL;
		n += p->len;
	}
	*len = n;
	return 0;
}

/* The name's bytes (without its NUL), checked.  0, -EINVAL or -E2BIG. */
static inline __attribute__((always_inline)) int
plan_name(const struct jitring_entry *e, size_t *len)
{
	size_t n;
	int ret;

	/* One test for the common case: a plain name, no flags. */
	if (likely(!(e->flags | e->nr_name_parts))) {
		if (unlikely(!e->name))
			return -EINVAL;
		n = strnlen(e->name, JITRING_NAME_MAX + 1);
	} else {
		if (unlikely(e->flags || e->name))
			return -EINVAL;
		ret = plan_name_parts(e, &n);
		if (unlikely(ret))
			return ret;
	}
	if (unlikely(n == 0))
		return -EINVAL;
	if (unlikely(n > JITRING_NAME_MAX))
		return -E2BIG;
	*len = n;
	return 0;
}

int jitring_record_rename(struct jitring_group *g,
			  const struct jitring_entry *e)
{
	size_t n;
	int ret = plan_name(e, &n);

	if (unlikely(ret))
		return ret;
	g->e = e;
	g->total -= g->load_size;
	g->load_size += (uint32_t)n + 1 - g->name_len;
	g->name_len = (uint32_t)n + 1;
	g->total += g->load_size;
	return 0;
}

int jitring_record_plan(struct jitring_group *g, const struct jitring_entry *e)
{
	size_t n;
	uint64_t load;
	int ret;

	if (unlikely(!e || !e->code_addr))
		return -EINVAL;
	ret = plan_name(e, &n);
	if (unlikely(ret))
		return ret;
	if (unlikely(e->code_size == 0))
		return -EINVAL;
	if (unlikely(e->code_size > JITRING_CODE_MAX))
		return -E2BIG;

	g->e = e;
	g->name_len = (uint32_t)n + 1;
	g->nr_records = 1;
	g->unw_size = 0;
	g->eh_pad = 0;
	g->dbg_size = 0;
	g->dbg_rows = 0;

	if (e->eh_frame || e->eh_frame_size) {
		uint32_t unw;

		if (unlikely(!e->eh_frame || !e->eh_frame_size))
			return -EINVAL;
		if (unlikely(e->code_size > JR_UNW_CODE_MAX))
			return -E2BIG;
		ret = jitring_eh_frame_check(e->eh_frame, e->eh_frame_size,
					     &g->eh);
		if (unlikely(ret))
			return ret;
		unw = JR_UNW_FIXED + e->eh_frame_size + JR_EH_HDR_SIZE;
		g->eh_pad = JR_ALIGN(unw, 8u) - unw;
		g->unw_size = unw + g->eh_pad;
		g->nr_records++;
	}
	if (e->nr_lines) {
		ret = plan_lines(g, e);
		if (unlikely(ret))
			return ret;
		g->nr_records++;
	}

	load = (uint64_t)JR_LOAD_FIXED + g->name_len + e->code_size;
	if (unlikely(load > UINT32_MAX))
		return -E2BIG;
	g->load_size = (uint32_t)load;
	g->total = load + g->unw_size + g->dbg_size;
	return 0;
}

static inline void put_prefix(struct jitdump_prefix *p, uint32_t id,
			      uint32_t size, uint64_t ts)
{
	p->id = id;
	p->total_size = size;
	p->timestamp = ts;
}

void jitring_record_unw_fixed(const struct jitring_group *g, uint64_t ts,
			      struct jitdump_code_unwinding_info *u)
{
	uint64_t unwinding = (uint64_t)g->e->eh_frame_size + JR_EH_HDR_SIZE;

	put_prefix(&u->p, JIT_CODE_UNWINDING_INFO, g->unw_size, ts);
	u->unwinding_size = unwinding;
	u->eh_frame_hdr_size = JR_EH_HDR_SIZE;
	u->mapped_size = JR_ALIGN(unwinding, 16u);
}

int32_t jitring_record_pc_begin(const struct jitring_group *g)
{
	return -(int32_t)(JR_ALIGN(g->e->code_size, 8u) + g->eh.pc_begin_off);
}

void jitring_record_eh_hdr(const struct jitring_group *g,
			   struct jitdump_eh_frame_hdr *h)
{
	int32_t eh = (int32_t)g->e->eh_frame_size;

	h->version = 1;
	h->eh_frame_ptr_enc = JR_DW_EH_PE_pcrel | JR_DW_EH_PE_sdata4;
	h->fde_count_enc = JR_DW_EH_PE_udata4;
	h->table_enc = JR_DW_EH_PE_datarel | JR_DW_EH_PE_sdata4;
	/* pcrel: from the eh_frame_ptr field itself, 4 bytes into the hdr. */
	h->eh_frame_ptr = -(eh + 4);
	h->fde_count = 1;
	/* datarel: from the start of the hdr. */
	h->initial_loc =
		-(int32_t)(JR_ALIGN(g->e->code_size, 8u) + (uint64_t)eh);
	h->fde = -(eh - (int32_t)g->eh.fde_off);
}

void jitring_record_dbg_fixed(const struct jitring_group *g, uint64_t ts,
			      struct jitdump_code_debug_info *d)
{
	put_prefix(&d->p, JIT_CODE_DEBUG_INFO, g->dbg_size, ts);
	d->code_addr = (uint64_t)(uintptr_t)g->e->code_addr;
	d->nr_entry = g->dbg_rows;
}

void jitring_record_load_fixed(const struct jitring_group *g, uint64_t ts,
			       uint32_t pid, uint32_t tid, uint64_t code_index,
			       struct jitdump_code_load *l)
{
	uint64_t addr = (uint64_t)(uintptr_t)g->e->code_addr;

	put_prefix(&l->p, JIT_CODE_LOAD, g->load_size, ts);
	l->pid = pid;
	l->tid = tid;
	l->vma = addr;
	l->code_addr = addr;
	l->code_size = g->e->code_size;
	l->code_index = code_index;
}

static uint8_t *encode_unw(const struct jitring_group *g, uint8_t *p,
			   uint64_t ts)
{
	const struct jitring_entry *e = g->e;
	struct jitdump_code_unwinding_info u;
	struct jitdump_eh_frame_hdr h;
	int32_t pc_begin = jitring_record_pc_begin(g);

	jitring_record_unw_fixed(g, ts, &u);
	memcpy(p, &u, sizeof(u));
	p += sizeof(u);
	memcpy(p, e->eh_frame, e->eh_frame_size);
	memcpy(p + g->eh.pc_begin_off, &pc_begin, sizeof(pc_begin));
	p += e->eh_frame_size;
	jitring_record_eh_hdr(g, &h);
	memcpy(p, &h, sizeof(h));
	p += sizeof(h);
	memset(p, 0, g->eh_pad);
	return p + g->eh_pad;
}

static uint8_t *encode_dbg(const struct jitring_group *g, uint8_t *p,
			   uint64_t ts)
{
	struct jitdump_code_debug_info d;

	jitring_record_dbg_fixed(g, ts, &d);
	memcpy(p, &d, sizeof(d));
	p += sizeof(d);
	for (uint32_t i = 0; i < g->dbg_rows; i++) {
		struct jitdump_debug_entry de;
		const char *file = jitring_record_dbg_row(g, i, &de);
		size_t n = strlen(file) + 1;

		memcpy(p, &de, sizeof(de));
		p += sizeof(de);
		memcpy(p, file, n);
		p += n;
	}
	return p;
}

void jitring_record_encode(const struct jitring_group *g, void *dst,
			   uint64_t ts, uint32_t pid, uint32_t tid,
			   uint64_t code_index)
{
	const struct jitring_entry *e = g->e;
	struct jitdump_code_load l;
	uint8_t *p = dst;

	if (g->unw_size)
		p = encode_unw(g, p, ts);
	if (g->dbg_size)
		p = encode_dbg(g, p, ts);
	jitring_record_load_fixed(g, ts, pid, tid, code_index, &l);
	memcpy(p, &l, sizeof(l));
	p += sizeof(l);
	p = jitring_record_put_name(g, p);
	memcpy(p, jitring_record_code(e), e->code_size);
}

uint8_t *jitring_record_put_name_parts(const struct jitring_group *g,
				       uint8_t *p)
{
	const struct jitring_entry *e = g->e;

	for (uint32_t i = 0; i < e->nr_name_parts; i++) {
		if (e->name_parts[i].len)
			memcpy(p, e->name_parts[i].ptr, e->name_parts[i].len);
		p += e->name_parts[i].len;
	}
	*p++ = 0;
	return p;
}

void jitring_record_restamp(void *dst, uint64_t total, uint64_t ts)
{
	uint8_t *p = dst;
	uint64_t off = 0;

	while (off + sizeof(struct jitdump_prefix) <= total) {
		struct jitdump_prefix pre;

		memcpy(&pre, p + off, sizeof(pre));
		pre.timestamp = ts;
		memcpy(p + off, &pre, sizeof(pre));
		off += pre.total_size;
	}
}

int jitring_record_move_check(const void *new_addr, uint64_t code_size)
{
	if (!new_addr || code_size == 0 || code_size > JITRING_CODE_MAX)
		return -EINVAL;
	return 0;
}

void jitring_record_encode_move(void *dst, uint64_t ts, uint32_t pid,
				uint32_t tid, uint64_t code_index,
				const void *old_addr, const void *new_addr,
				uint64_t code_size)
{
	struct jitdump_code_move m;

	put_prefix(&m.p, JIT_CODE_MOVE, JR_MOVE_SIZE, ts);
	m.pid = pid;
	m.tid = tid;
	m.vma = (uint64_t)(uintptr_t)new_addr;
	m.old_code_addr = (uint64_t)(uintptr_t)old_addr;
	m.new_code_addr = (uint64_t)(uintptr_t)new_addr;
	m.code_size = code_size;
	m.code_index = code_index;
	memcpy(dst, &m, sizeof(m));
}

void jitring_record_header(struct jitdump_header *h, uint32_t elf_mach,
			   uint32_t pid, uint64_t ts)
{
	memset(h, 0, sizeof(*h));
	h->magic = JITDUMP_MAGIC;
	h->version = JITDUMP_VERSION;
	h->total_size = sizeof(*h);
	h->elf_mach = elf_mach;
	h->pid = pid;
	h->timestamp = ts;
	h->flags = 0;
}

uint32_t jitring_record_host_mach(void)
{
#if defined(__x86_64__)
	return EM_X86_64;
#elif defined(__aarch64__)
	return EM_AARCH64;
#elif defined(__i386__)
	return EM_386;
#elif defined(__arm__)
	return EM_ARM;
#elif defined(__riscv)
	return EM_RISCV;
#elif defined(__powerpc64__)
	return EM_PPC64;
#elif defined(__s390x__)
	return EM_S390;
#else
	return EM_NONE;
#endif
}
