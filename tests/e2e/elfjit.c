/* SPDX-License-Identifier: MIT */
/*
 * elfjit: a chain of C calls through trampoline copies that keep no frame
 * pointer, for perf_tramp_elf.sh.
 *
 *   elfjit DIR SECONDS ELF     (ELF 1: JITRING_F_TRAMPOLINE_ELF, 0: not)
 *
 * The template is "sub $8,%rsp; call *%rcx; add $8,%rsp; ret" with its
 * CFI (the CFA moves to rsp+16 and back), and this file is built without
 * frame pointers, so perf's DWARF unwinding gets from elf_leaf() back to
 * main() only through the copies' FDEs: libunwind's fallback to the
 * %rbp chain finds no frames to follow.  main -> elf_root -> elf_level
 * -> copy -> elf_level -> copy ... (DEPTH copies, each a different one,
 * from the set's arenas) -> elf_leaf, which spins until main's thread
 * has run SECONDS on a CPU in all (perf's cpu-clock samples count CPU
 * time, so the profile holds as many samples on a loaded machine as on
 * an idle one).  x86_64 only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "jitring.h"

#define DEPTH 12
#define COPIES 2000 /* past two arenas: copies from several mappings */

typedef uint64_t (*tramp_fn)(uint64_t d, uint64_t k, uint64_t c, void *fn);

static tramp_fn copies[COPIES];
static double seconds;
static volatile uint64_t sink;

/* Not static: perf names them from .symtab as they are (no clones). */
uint64_t elf_leaf(uint64_t d, uint64_t k, uint64_t c, void *fn);
uint64_t elf_level(uint64_t d, uint64_t k, uint64_t c, void *fn);
uint64_t elf_root(uint64_t k);

static const unsigned char code[] = {
	0x48, 0x83, 0xec, 0x08, /* sub $8,%rsp */
	0xff, 0xd1,             /* call *%rcx */
	0x48, 0x83, 0xc4, 0x08, /* add $8,%rsp */
	0xc3,                   /* ret */
};

static const struct jitring_cfi_op ops[] = {
	{ 0, JITRING_CFI_DEF_CFA, 7, 8 },  /* rsp + 8 */
	{ 0, JITRING_CFI_OFFSET, 16, -8 }, /* return address */
	{ 4, JITRING_CFI_DEF_CFA_OFFSET, 0, 16 },
	{ 10, JITRING_CFI_DEF_CFA_OFFSET, 0, 8 },
};

static const struct jitring_cfi cfi = {
	.code_align = 1,
	.data_align = -8,
	.ra_reg = 16,
	.nr_init = 2,
	.nr_ops = sizeof(ops) / sizeof(ops[0]),
	.ops = ops,
};

/* This thread's CPU time, in seconds. */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) uint64_t elf_leaf(uint64_t d, uint64_t k, uint64_t c,
					    void *fn)
{
	double end = now() + seconds / 64;

	while (now() < end)
		for (int i = 0; i < 10000; i++)
			sink += (uint64_t)i ^ k;
	return sink + d + c + (uintptr_t)fn;
}

__attribute__((noinline)) uint64_t elf_level(uint64_t d, uint64_t k, uint64_t c,
					     void *fn)
{
	uint64_t r;

	if (!d)
		return elf_leaf(d, k, c, fn) + 1;
	/* A different copy at each depth, spread over the arenas. */
	r = copies[(k * 131 + d * 167) % COPIES](d - 1, k, c,
						 (void *)elf_level);
	return r + 1;
}

__attribute__((noinline)) uint64_t elf_root(uint64_t k)
{
	return elf_level(DEPTH, k, 0, NULL) + 1;
}

int main(int argc, char **argv)
{
	struct jitring_trampoline_template t = { 0 };
	struct jitring_trampolines *set;
	struct jitring_config c;
	struct jitring *jr;
	uint64_t r = 0;
	int ret;

	if (argc != 4) {
		fprintf(stderr, "usage: elfjit DIR SECONDS ELF\n");
		return 2;
	}
	seconds = atof(argv[2]);
	jitring_config_init(&c);
	c.dir = argv[1];
	if (atoi(argv[3]))
		c.flags |= JITRING_F_TRAMPOLINE_ELF;
	ret = jitring_open(&c, &jr);
	if (ret) {
		fprintf(stderr, "jitring_open: %d\n", ret);
		return 1;
	}
	t.struct_size = sizeof(t);
	t.code = code;
	t.code_size = sizeof(code);
	t.cfi = &cfi;
	t.salt_offset = JITRING_TRAMPOLINE_NO_SALT;
	ret = jitring_trampolines_new(jr, &t, &set);
	if (ret) {
		fprintf(stderr, "jitring_trampolines_new: %d\n", ret);
		return 1;
	}
	for (int i = 0; i < COPIES; i++) {
		char name[32];
		void *addr;

		snprintf(name, sizeof(name), "elf_copy_%d", i);
		if (jitring_trampolines_get(set, name, &addr) <= 0) {
			fprintf(stderr, "jitring_trampolines_get failed\n");
			return 1;
		}
		copies[i] = (tramp_fn)(uintptr_t)addr;
	}
	jitring_flush(jr);
	for (uint64_t k = 0; k < 64; k++)
		r += elf_root(k);
	printf("%llu\n", (unsigned long long)r);
	jitring_close(jr);
	jitring_trampolines_free(set);
	return 0;
}
