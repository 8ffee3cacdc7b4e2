/* SPDX-License-Identifier: MIT */
#ifndef JITRING_SRC_COMPILER_H
#define JITRING_SRC_COMPILER_H

#include <stddef.h>
#include <stdint.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Producer and consumer indices live on separate lines of this size. */
#define JITRING_CACHELINE 64

#define JR_ALIGN(x, a) (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define JR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define JR_NOINLINE __attribute__((noinline))

/*
 * LeakSanitizer scans the heap, stacks, TLS and globals, not memory the
 * library maps itself: a heap pointer kept only in such memory (a ring's
 * control block in a slab links the thread's other rings) would be
 * reported as leaked.  jr_lsan_root()/jr_lsan_unroot() tell it to scan a
 * mapping; no-ops without the sanitizer.
 */
#if defined(__SANITIZE_ADDRESS__)
#define JR_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define JR_LSAN 1
#endif
#endif
#ifdef JR_LSAN
#include <sanitizer/lsan_interface.h>
#define jr_lsan_root(p, n) __lsan_register_root_region((p), (n))
#define jr_lsan_unroot(p, n) __lsan_unregister_root_region((p), (n))
#else
#define jr_lsan_root(p, n) ((void)(p), (void)(n))
#define jr_lsan_unroot(p, n) ((void)(p), (void)(n))
#endif

/* A spin-wait hint for busy loops. */
static inline void jr_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/* MurmurHash3's 64-bit finaliser: a bijection that mixes every bit. */
static inline uint64_t jr_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

#endif /* JITRING_SRC_COMPILER_H */
