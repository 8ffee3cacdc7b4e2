/* SPDX-License-Identifier: MIT */
/*
 * .eh_frame handling: the public CFI builder (jitring_eh_frame_build) and the
 * internal check the encoder runs on every caller-supplied .eh_frame.
 */
#ifndef JITRING_SRC_EH_FRAME_H
#define JITRING_SRC_EH_FRAME_H

#include <stdint.h>

/* DWARF pointer encodings used by jitring. */
#define JR_DW_EH_PE_udata4 0x03
#define JR_DW_EH_PE_sdata4 0x0b
#define JR_DW_EH_PE_pcrel 0x10
#define JR_DW_EH_PE_datarel 0x30

/**
 * struct jitring_eh_frame_info - Where things are in a checked .eh_frame.
 * @cie_size: bytes of the CIE, its length field included.
 * @fde_off: offset of the FDE's length field.
 * @pc_begin_off: offset of the FDE's 4-byte pc_begin field.
 */
struct jitring_eh_frame_info {
	uint32_t cie_size;
	uint32_t fde_off;
	uint32_t pc_begin_off;
};

/**
 * jitring_eh_frame_check() - Validate a caller's .eh_frame.
 * @eh: the bytes.
 * @size: their length.
 * @info: filled on success.
 *
 * Accepts exactly one CIE at offset 0 (version 1 or 3, augmentation "zR"
 * with FDE encoding DW_EH_PE_pcrel|DW_EH_PE_sdata4, 32-bit lengths) followed
 * by one FDE that points back to it, optionally followed by a 4-byte zero
 * terminator; every length must land exactly on the next record.
 *
 * Context: any thread; async-signal-safe; called on the write hot path.
 * Return: 0; -EINVAL if malformed or @size is not a multiple of 4;
 * -E2BIG if @size exceeds JITRING_EH_FRAME_MAX.
 */
int jitring_eh_frame_check(const void *eh, uint32_t size,
			   struct jitring_eh_frame_info *info);

#endif /* JITRING_SRC_EH_FRAME_H */
