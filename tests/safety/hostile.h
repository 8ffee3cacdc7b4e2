/* SPDX-License-Identifier: MIT */
/*
 * Hostile jitdump files, for tests/safety and bench/bench_check.cc (C and
 * C++).  Built byte by byte, never with the library's encoder.
 *
 * hostile_index(i) is the i-th of a family of code_index values that all
 * collide in the checker's old hash sets: those hashed a key with
 * jr_mix64() (MurmurHash3's finaliser, a bijection) and took the low bits,
 * so the keys whose hash is i << 40 share every table size's first slot
 * up to 2^40 slots, and n of them cost n^2 / 2 probes.  The values are
 * huge, so none falls into the checker's bitmap of small indices.
 */
#ifndef JITRING_TESTS_SAFETY_HOSTILE_H
#define JITRING_TESTS_SAFETY_HOSTILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOSTILE_PID 4242u
#define HOSTILE_MIX_C1 0xff51afd7ed558ccdull
#define HOSTILE_MIX_C2 0xc4ceb9fe1a85ec53ull

/* The old hash, as src/common/compiler.h had it. */
static inline uint64_t hostile_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= HOSTILE_MIX_C1;
	x ^= x >> 33;
	x *= HOSTILE_MIX_C2;
	x ^= x >> 33;
	return x;
}

/* The inverse of an odd number modulo 2^64 (Newton's iteration). */
static inline uint64_t hostile_inv64(uint64_t c)
{
	uint64_t x = c;
	int i;

	for (i = 0; i < 6; i++)
		x *= 2 - c * x;
	return x;
}

static inline uint64_t hostile_unmix64(uint64_t x)
{
	/* x ^= x >> 33 is its own inverse: 2 * 33 > 64. */
	x ^= x >> 33;
	x *= hostile_inv64(HOSTILE_MIX_C2);
	x ^= x >> 33;
	x *= hostile_inv64(HOSTILE_MIX_C1);
	x ^= x >> 33;
	return x;
}

/* The i-th colliding code_index, i >= 0 (never 0 itself). */
static inline uint64_t hostile_index(uint64_t i)
{
	return hostile_unmix64((i + 1) << 40);
}

/* A scattered, non-colliding code_index for the same i. */
static inline uint64_t hostile_random_index(uint64_t i)
{
	return hostile_mix64(i + 1) | (1ull << 63);
}

/* A growable byte buffer. */
struct hostile_buf {
	unsigned char *p;
	size_t len;
	size_t cap;
};

static inline void hostile_put(struct hostile_buf *b, const void *src,
			       size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;

		while (cap < b->len + n)
			cap *= 2;
		b->p = (unsigned char *)realloc(b->p, cap);
		if (!b->p)
			abort();
		b->cap = cap;
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
}

static inline void hostile_u32(struct hostile_buf *b, uint32_t v)
{
	hostile_put(b, &v, 4);
}

static inline void hostile_u64(struct hostile_buf *b, uint64_t v)
{
	hostile_put(b, &v, 8);
}

static inline void hostile_header(struct hostile_buf *b)
{
	hostile_u32(b, 0x4A695444u);
	hostile_u32(b, 1);
	hostile_u32(b, 40);
	hostile_u32(b, 62); /* EM_X86_64 */
	hostile_u32(b, 0);
	hostile_u32(b, HOSTILE_PID);
	hostile_u64(b, 1);
	hostile_u64(b, 0);
}

/* A CODE_LOAD named @name with 6 bytes of code.  Return: its offset. */
static inline size_t hostile_load_named(struct hostile_buf *b, uint64_t ts,
					uint32_t tid, uint64_t index,
					const char *name)
{
	static const unsigned char code[6] = { 0x90, 0x90, 0x90,
					       0x90, 0x90, 0xc3 };
	size_t off = b->len, n = strlen(name) + 1;
	uint64_t addr = 0x7f0000000000ull + 64 * ts;

	hostile_u32(b, 0);
	hostile_u32(b, (uint32_t)(56 + n + sizeof(code)));
	hostile_u64(b, ts);
	hostile_u32(b, HOSTILE_PID);
	hostile_u32(b, tid);
	hostile_u64(b, addr);
	hostile_u64(b, addr);
	hostile_u64(b, sizeof(code));
	hostile_u64(b, index);
	hostile_put(b, name, n);
	hostile_put(b, code, sizeof(code));
	return off;
}

/* A 64-byte CODE_LOAD named "f".  Return: its offset. */
static inline size_t hostile_load(struct hostile_buf *b, uint64_t ts,
				  uint32_t tid, uint64_t index)
{
	return hostile_load_named(b, ts, tid, index, "f");
}

/* A CODE_MOVE of @index. Return: its offset. */
static inline size_t hostile_move(struct hostile_buf *b, uint64_t ts,
				  uint32_t tid, uint64_t index)
{
	size_t off = b->len;

	hostile_u32(b, 1);
	hostile_u32(b, 64);
	hostile_u64(b, ts);
	hostile_u32(b, HOSTILE_PID);
	hostile_u32(b, tid);
	hostile_u64(b, 0x7f1000000000ull);
	hostile_u64(b, 0x7f0000000000ull);
	hostile_u64(b, 0x7f1000000000ull);
	hostile_u64(b, 6);
	hostile_u64(b, index);
	return off;
}

/*
 * A dump of @n CODE_LOADs, index hostile_index(i) when @crafted, else
 * hostile_random_index(i); 64 threads.
 */
static inline void hostile_dump(struct hostile_buf *b, size_t n, int crafted)
{
	size_t i;

	hostile_header(b);
	for (i = 0; i < n; i++)
		hostile_load(b, 1000 + i, 1 + (uint32_t)(i % 64),
			     crafted ? hostile_index(i) :
				       hostile_random_index(i));
}

#endif /* JITRING_TESTS_SAFETY_HOSTILE_H */
