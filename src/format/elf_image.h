/* SPDX-License-Identifier: MIT */
/*
 * The trampoline arenas' ELF file (see elf_image.c): the slots of a set as
 * .text, with the unwind tables perf reads from the file itself.
 */
#ifndef JITRING_SRC_ELF_IMAGE_H
#define JITRING_SRC_ELF_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/**
 * struct jitring_elf_image - The file's layout.
 * @slot_size: bytes per slot; a copy starts at each multiple in an arena.
 * @code_size: bytes of code at the start of each slot (its FDE's range).
 * @eh_frame: the template's [CIE][FDE] from jitring_eh_frame_build().
 * @eh_frame_size: its bytes.
 * @page: the page size.
 * @arena_len: bytes of one arena's slots, a whole number of pages.
 * @arenas: how many arenas the file has room for.
 *
 * Filled by jitring_elf_image_plan():
 * @arena_slots: slots in an arena (@arena_len / @slot_size).
 * @text_off: file offset (and address) of arena 0; arena k is at
 *	@text_off + k * @arena_len.
 * @eh_off: file offset of .eh_frame (the CIE, then the FDEs of arena 0,
 *	1, ...).
 * @hdr_off: file offset of .eh_frame_hdr.
 * @unwind_off: the page where the unwind tables start, and
 * @unwind_len: their length in whole pages: the range to map so that an
 *	unwinder finds them at their addresses.
 * @size: bytes of the whole file.
 */
struct jitring_elf_image {
	uint32_t slot_size;
	uint32_t code_size;
	const uint8_t *eh_frame;
	uint32_t eh_frame_size;
	uint32_t page;
	uint64_t arena_len;
	uint32_t arenas;

	uint64_t arena_slots;
	uint64_t text_off;
	uint64_t eh_off;
	uint64_t hdr_off;
	uint64_t unwind_off;
	uint64_t unwind_len;
	uint64_t size;
	/* private */
	uint32_t cie_size, fde_size, fde_pc_off;
	uint64_t str_off, sh_off;
};

/**
 * jitring_elf_image_plan() - Lay the file out.
 * @im: the inputs; the layout fields are filled.
 *
 * Context: any thread.
 * Return: 0; -EINVAL for a layout it cannot describe (a zero or
 * non-power-of-two page, a slot smaller than the code, an arena not a
 * whole number of pages or smaller than a slot, no arenas, an .eh_frame
 * not as jitring_eh_frame_build() makes it, or a file past 2 GiB).
 */
int jitring_elf_image_plan(struct jitring_elf_image *im);

/*
 * The pieces of the file, each for a buffer the caller writes at the
 * offset named.  Everything not written reads as zeros (a sparse file):
 * the search table's rows of arenas not yet written are (0, 0), which
 * sort after every written row (those are negative: .text lies below the
 * header), so the table stays sorted with any prefix of arenas written.
 */

/* [0, @text_off): the ELF header and program headers (map this page at
 * the object's base too: see elf_image.c). */
void jitring_elf_image_head(const struct jitring_elf_image *im, uint8_t *buf);

/* [@eh_off, @eh_off + @cie_size): the CIE. */
static inline const uint8_t *
jitring_elf_image_cie(const struct jitring_elf_image *im)
{
	return im->eh_frame;
}

/* [@hdr_off, @hdr_off + 12): .eh_frame_hdr's fixed part. */
#define JR_ELF_HDR_FIXED 12u
void jitring_elf_image_hdr(const struct jitring_elf_image *im, uint8_t *buf);

/* [@str_off, @size): .shstrtab and the section headers. */
void jitring_elf_image_tail(const struct jitring_elf_image *im, uint8_t *buf);

/* Arena @k's FDEs: @arena_slots * @fde_size bytes at
 * jitring_elf_image_fde_off(@im, @k). */
static inline uint64_t
jitring_elf_image_fde_off(const struct jitring_elf_image *im, uint32_t k)
{
	return im->eh_off + im->cie_size +
	       (uint64_t)k * im->arena_slots * im->fde_size;
}
void jitring_elf_image_fdes(const struct jitring_elf_image *im, uint32_t k,
			    uint8_t *buf);

/* Arena @k's search table rows: @arena_slots * 8 bytes at
 * jitring_elf_image_rows_off(@im, @k). */
static inline uint64_t
jitring_elf_image_rows_off(const struct jitring_elf_image *im, uint32_t k)
{
	return im->hdr_off + JR_ELF_HDR_FIXED +
	       (uint64_t)k * im->arena_slots * 8;
}
void jitring_elf_image_rows(const struct jitring_elf_image *im, uint32_t k,
			    uint8_t *buf);

#endif /* JITRING_SRC_ELF_IMAGE_H */
