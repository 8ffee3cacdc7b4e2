/* SPDX-License-Identifier: MIT */
/*
 * Machine code of the trampolines that the jitring_cfi_preset() descriptions
 * describe, byte for byte, so tests and runtimes can copy exactly the code
 * whose call frame information jitring_eh_frame_build() encodes.
 */
#ifndef JITRING_SRC_CFI_PRESETS_H
#define JITRING_SRC_CFI_PRESETS_H

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
