/* SPDX-License-Identifier: MIT */
/*
 * Machine code of the trampolines that the jitring_cfi_preset() descriptions
 * describe, byte for byte, so tests and runtimes can copy exactly the code
 * whose call frame information jitring_eh_frame_build() encodes.
 */
#ifndef JITRING_SRC_CFI_PRESETS_H
#define JITRING_SRC_CFI_PRESETS_H

/*
 * The bytes, written here only: the arrays below and the runtime kit's
 * built-in template (src/kit/trampolines.c, which adds its salt room)
 * are made of them.
 */
/* clang-format off */
#define JR_TRAMPOLINE_X86_64_CODE					\
	0x55,			/* push %rbp */				\
	0x48, 0x89, 0xe5,	/* mov %rsp,%rbp */			\
	0xff, 0xd1,		/* call *%rcx */			\
	0x5d,			/* pop %rbp */				\
	0xc3			/* ret */
#define JR_TRAMPOLINE_AARCH64_CODE					\
	0xfd, 0x7b, 0xbf, 0xa9,	/* stp x29, x30, [sp, #-16]! */		\
	0xfd, 0x03, 0x00, 0x91,	/* mov x29, sp */			\
	0x60, 0x00, 0x3f, 0xd6,	/* blr x3 */				\
	0xfd, 0x7b, 0xc1, 0xa8,	/* ldp x29, x30, [sp], #16 */		\
	0xc0, 0x03, 0x5f, 0xd6	/* ret */
/* clang-format on */

/*
 * JITRING_CFI_X86_64_FP_TRAMPOLINE, 8 bytes:
 * 55 push %rbp; 48 89 e5 mov %rsp,%rbp; ff d1 call *%rcx; 5d pop %rbp; c3 ret
 */
extern const unsigned char jitring_trampoline_x86_64[];
extern const unsigned jitring_trampoline_x86_64_size;

/*
 * JITRING_CFI_AARCH64_FP_TRAMPOLINE, 20 bytes (five little-endian words):
 * stp x29, x30, [sp, #-16]!; mov x29, sp; blr x3; ldp x29, x30, [sp], #16;
 * ret
 */
extern const unsigned char jitring_trampoline_aarch64[];
extern const unsigned jitring_trampoline_aarch64_size;

#endif /* JITRING_SRC_CFI_PRESETS_H */
