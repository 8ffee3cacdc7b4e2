/* SPDX-License-Identifier: MIT */
/*
 * The trampoline arenas' ELF file, for unwinders that read the file a
 * mapping names (perf's dwarf unwinding, with no perf inject).
 *
 * Layout (file offset == virtual address, as in a linked .so, base 0):
 *
 *   0            ELF header, program headers (PT_LOAD of the headers,
 *                PT_LOAD of .text to .eh_frame_hdr, PT_GNU_EH_FRAME)
 *   text_off     .text: room for `arenas` arenas of arena_len bytes each
 *                (a page: the arenas map at page-aligned file offsets)
 *   eh_off       .eh_frame: the template's CIE once, then one FDE per
 *                slot of every arena, in address order: the template's
 *                FDE with its CIE pointer and pc_begin (pcrel|sdata4)
 *                computed for its slot
 *   hdr_off      .eh_frame_hdr (4-aligned): version 1, eh_frame_ptr
 *                pcrel|sdata4, fde_count udata4 (every slot of every
 *                arena), the search table datarel|sdata4 relative to the
 *                header: one (initial_loc, fde) row per slot, in address
 *                order
 *   str_off      .shstrtab, then the section headers (8-aligned)
 *
 * Why one file laid out like this, mapped in pieces.  perf 6.1 unwinds
 * with libunwind (built without .debug_frame), which finds a mapping's
 * unwind table at the object's load address plus .eh_frame_hdr's
 * address, the load address being the LOWEST of the file's mappings
 * (start, or start - pgoff in later perf and 6.1's stable updates) less
 * the first PT_LOAD's address, and reads the table through the recorded
 * mappings of that address: so every mapping of the file must keep the
 * object's own layout (start - pgoff the same for all), the tables must
 * be mapped too (executable, or perf does not record the mapping), and
 * with the first PT_LOAD at address 0 (the headers) mapped at the load
 * address both formulas agree.  The runtime reserves the object's whole
 * span once, maps the header page and the unwind pages over their place,
 * and maps each arena over its own place when it makes it; no file range
 * is mapped twice.
 *
 * The content of every byte depends only on its position (the slots are
 * identical, each FDE and row is a function of its slot), so pieces may
 * be written in any order, twice, or by a forked child into the parent's
 * file, and always agree.  Unwritten arenas read as zeros (a sparse
 * file); their rows are (0, 0), which sort after the written ones (those
 * are negative: .text lies below the header).
 */
#include <elf.h>
#include <errno.h>
#include <string.h>

#include "eh_frame.h"
#include "elf_image.h"

#if defined(__x86_64__)
#define IMAGE_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define IMAGE_MACHINE EM_AARCH64
#else
#define IMAGE_MACHINE EM_NONE
#endif

/* Section indices. */
enum {
	SH_NULL,
	SH_TEXT,
	SH_EH_FRAME,
	SH_EH_HDR,
	SH_STRTAB,
	SH_NUM
};

static const char shstrtab[] = "\0.text\0.eh_frame\0.eh_frame_hdr\0.shstrtab";
#define NAME_TEXT 1u
#define NAME_EH_FRAME 7u
#define NAME_EH_HDR 17u
#define NAME_STRTAB 31u

static inline uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

int jitring_elf_image_plan(struct jitring_elf_image *im)
{
	struct jitring_eh_frame_info info;
	uint64_t nslots, hdr_len;

	if (!im || !im->slot_size || !im->page || (im->page & (im->page - 1)) ||
	    im->code_size > im->slot_size || !im->arena_len ||
	    im->arena_len % im->page || im->arena_len < im->slot_size ||
	    !im->arenas || !im->eh_frame)
		return -EINVAL;
	if (jitring_eh_frame_check(im->eh_frame, im->eh_frame_size, &info) ||
	    info.fde_off != info.cie_size)
		return -EINVAL;
	im->cie_size = info.cie_size;
	im->fde_size = im->eh_frame_size - info.fde_off;
	im->fde_pc_off = info.pc_begin_off - info.fde_off;
	im->arena_slots = im->arena_len / im->slot_size;
	nslots = im->arena_slots * im->arenas;
	im->text_off =
		align_up(sizeof(Elf64_Ehdr) + 3 * sizeof(Elf64_Phdr), im->page);
	im->eh_off = im->text_off + im->arena_len * im->arenas;
	im->hdr_off =
		align_up(im->eh_off + im->cie_size + nslots * im->fde_size, 4);
	hdr_len = JR_ELF_HDR_FIXED + nslots * 8;
	im->unwind_off = im->eh_off;
	im->unwind_len = align_up(im->hdr_off + hdr_len, im->page) - im->eh_off;
	im->str_off = im->hdr_off + hdr_len;
	im->sh_off = align_up(im->str_off + sizeof(shstrtab), 8);
	im->size = im->sh_off + SH_NUM * sizeof(Elf64_Shdr);
	/* Every pc-relative and table value is a signed 32-bit offset. */
	if (im->size > INT32_MAX || nslots > UINT32_MAX)
		return -EINVAL;
	return 0;
}

void jitring_elf_image_head(const struct jitring_elf_image *im, uint8_t *buf)
{
	uint64_t hdr_end = im->str_off;
	Elf64_Ehdr eh = {
		.e_ident = { ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3, ELFCLASS64,
			     ELFDATA2LSB, EV_CURRENT, ELFOSABI_NONE },
		.e_type = ET_DYN,
		.e_machine = IMAGE_MACHINE,
		.e_version = EV_CURRENT,
		.e_phoff = sizeof(Elf64_Ehdr),
		.e_shoff = im->sh_off,
		.e_ehsize = sizeof(Elf64_Ehdr),
		.e_phentsize = sizeof(Elf64_Phdr),
		.e_phnum = 3,
		.e_shentsize = sizeof(Elf64_Shdr),
		.e_shnum = SH_NUM,
		.e_shstrndx = SH_STRTAB,
	};
	Elf64_Phdr ph[3] = {
		{
			/* The headers: the object's base is where this
			 * page is mapped. */
			.p_type = PT_LOAD,
			.p_flags = PF_R,
			.p_offset = 0,
			.p_vaddr = 0,
			.p_paddr = 0,
			.p_filesz = im->text_off,
			.p_memsz = im->text_off,
			.p_align = im->page,
		},
		{
			.p_type = PT_LOAD,
			.p_flags = PF_R | PF_X,
			.p_offset = im->text_off,
			.p_vaddr = im->text_off,
			.p_paddr = im->text_off,
			.p_filesz = hdr_end - im->text_off,
			.p_memsz = hdr_end - im->text_off,
			.p_align = im->page,
		},
		{
			.p_type = PT_GNU_EH_FRAME,
			.p_flags = PF_R,
			.p_offset = im->hdr_off,
			.p_vaddr = im->hdr_off,
			.p_paddr = im->hdr_off,
			.p_filesz = hdr_end - im->hdr_off,
			.p_memsz = hdr_end - im->hdr_off,
			.p_align = 4,
		},
	};

	memset(buf, 0, im->text_off);
	memcpy(buf, &eh, sizeof(eh));
	memcpy(buf + sizeof(eh), ph, sizeof(ph));
}

void jitring_elf_image_hdr(const struct jitring_elf_image *im, uint8_t *buf)
{
	buf[0] = 1;
	buf[1] = JR_DW_EH_PE_pcrel | JR_DW_EH_PE_sdata4;
	buf[2] = JR_DW_EH_PE_udata4;
	buf[3] = JR_DW_EH_PE_datarel | JR_DW_EH_PE_sdata4;
	put32(buf + 4, (uint32_t)(im->eh_off - (im->hdr_off + 4)));
	put32(buf + 8, (uint32_t)(im->arena_slots * im->arenas));
}

void jitring_elf_image_tail(const struct jitring_elf_image *im, uint8_t *buf)
{
	Elf64_Shdr sh[SH_NUM] = {
		[SH_TEXT] = {
			.sh_name = NAME_TEXT,
			.sh_type = SHT_PROGBITS,
			.sh_flags = SHF_ALLOC | SHF_EXECINSTR,
			.sh_addr = im->text_off,
			.sh_offset = im->text_off,
			.sh_size = im->eh_off - im->text_off,
			.sh_addralign = 16,
		},
		[SH_EH_FRAME] = {
			.sh_name = NAME_EH_FRAME,
			.sh_type = SHT_PROGBITS,
			.sh_flags = SHF_ALLOC,
			.sh_addr = im->eh_off,
			.sh_offset = im->eh_off,
			.sh_size = im->hdr_off - im->eh_off,
			.sh_addralign = 8,
		},
		[SH_EH_HDR] = {
			.sh_name = NAME_EH_HDR,
			.sh_type = SHT_PROGBITS,
			.sh_flags = SHF_ALLOC,
			.sh_addr = im->hdr_off,
			.sh_offset = im->hdr_off,
			.sh_size = im->str_off - im->hdr_off,
			.sh_addralign = 4,
		},
		[SH_STRTAB] = {
			.sh_name = NAME_STRTAB,
			.sh_type = SHT_STRTAB,
			.sh_offset = im->str_off,
			.sh_size = sizeof(shstrtab),
			.sh_addralign = 1,
		},
	};

	memset(buf, 0, im->size - im->str_off);
	memcpy(buf, shstrtab, sizeof(shstrtab));
	memcpy(buf + (im->sh_off - im->str_off), sh, sizeof(sh));
}

/* The address of slot @i of arena @k. */
static inline uint64_t slot_at(const struct jitring_elf_image *im, uint32_t k,
			       uint64_t i)
{
	return im->text_off + (uint64_t)k * im->arena_len + i * im->slot_size;
}

void jitring_elf_image_fdes(const struct jitring_elf_image *im, uint32_t k,
			    uint8_t *buf)
{
	uint64_t at = jitring_elf_image_fde_off(im, k);

	for (uint64_t i = 0; i < im->arena_slots; i++) {
		uint8_t *f = buf + i * im->fde_size;
		uint64_t fde = at + i * im->fde_size;

		memcpy(f, im->eh_frame + im->cie_size, im->fde_size);
		/* CIE pointer: from this field back to the CIE. */
		put32(f + 4, (uint32_t)(fde + 4 - im->eh_off));
		put32(f + im->fde_pc_off,
		      (uint32_t)(slot_at(im, k, i) - (fde + im->fde_pc_off)));
	}
}

void jitring_elf_image_rows(const struct jitring_elf_image *im, uint32_t k,
			    uint8_t *buf)
{
	uint64_t fde = jitring_elf_image_fde_off(im, k);

	for (uint64_t i = 0; i < im->arena_slots; i++) {
		put32(buf + i * 8, (uint32_t)(slot_at(im, k, i) - im->hdr_off));
		put32(buf + i * 8 + 4,
		      (uint32_t)(fde + i * im->fde_size - im->hdr_off));
	}
}
