/* SPDX-License-Identifier: MIT */
/*
 * The test harness of tests/, stress/ and the helpers bench/ shares with
 * them.  Checks print file:line and values and carry on; a binary prints
 * "N passed, N failed" last and exits 0 (pass), 1 (fail) or 77 (skip),
 * the automake codes meson understands.
 *
 * Below the checks, the helpers several tests had each written for
 * themselves: engines, unaligned little reads, scratch directories, whole
 * files, an .eh_frame for test entries, dumps read back with the
 * independent reader (src/reader.h) and waiting on a condition.
 * Header-only (static inline), so every binary keeps its own counters.
 */
#ifndef JITRING_TESTS_HARNESS_H
#define JITRING_TESTS_HARNESS_H

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jitring.h"

#define T_EXIT_PASS 0
#define T_EXIT_FAIL 1
#define T_EXIT_SKIP 77

/* Atomic: checks run on many threads (and in signal handlers). */
static _Atomic unsigned long t_passed, t_failed;

#define T_CHECK(c)                                                          \
	do {                                                                \
		if (c) {                                                    \
			t_passed++;                                         \
		} else {                                                    \
			t_failed++;                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n",        \
				__FILE__, __LINE__, #c);                    \
		}                                                           \
	} while (0)

#define T_CHECK_EQ(a, b)                                                    \
	do {                                                                \
		long long t_a_ = (long long)(a), t_b_ = (long long)(b);     \
		if (t_a_ == t_b_) {                                         \
			t_passed++;                                         \
		} else {                                                    \
			t_failed++;                                         \
			fprintf(stderr,                                     \
				"%s:%d: %s == %s failed: %lld != %lld\n",   \
				__FILE__, __LINE__, #a, #b, t_a_, t_b_);    \
		}                                                           \
	} while (0)

/* Fatal variant for preconditions the rest of a test depends on. */
#define T_REQUIRE(c)                                                        \
	do {                                                                \
		if (!(c)) {                                                 \
			fprintf(stderr, "%s:%d: requirement failed: %s\n",  \
				__FILE__, __LINE__, #c);                    \
			t_failed++;                                         \
			exit(t_report());                                   \
		}                                                           \
	} while (0)

static inline int t_report(void)
{
	printf("%lu passed, %lu failed\n", atomic_load(&t_passed),
	       atomic_load(&t_failed));
	fflush(stdout);
	return t_failed ? T_EXIT_FAIL : T_EXIT_PASS;
}

static inline void t_skip(const char *why)
{
	printf("SKIP: %s\n0 passed, 0 failed\n", why);
	fflush(stdout);
	exit(T_EXIT_SKIP);
}

/* A writer's counters (jitring_stats() with the size filled in). */
static inline struct jitring_stats t_stats(const struct jitring *jr)
{
	struct jitring_stats st;

	memset(&st, 0, sizeof(st));
	st.struct_size = sizeof(st);
	jitring_stats(jr, &st);
	return st;
}

static inline int t_rm_one(const char *path, const struct stat *sb,
			   int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path); /* carry on past what cannot be removed */
	return 0;
}

/* Remove @dir and everything below it (a test's scratch directory). */
static inline void t_rmtree(const char *dir)
{
	nftw(dir, t_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------------ */
/* Fields of dumps and .eh_frame data: host order, any alignment.      */

static inline uint32_t t_rd32(const void *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline int32_t t_rds32(const void *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint64_t t_rd64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void t_wr32(void *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

/* ------------------------------------------------------------------ */
/* Test entries.                                                        */

/*
 * .eh_frame for @code_size bytes of code into @buf (@size bytes): the
 * host preset, or only its entry rules for code too short for the rest
 * (the x86_64 trampoline has rules at offset 7).  Returns its size, or
 * what jitring_eh_frame_build() returned (a negative errno).
 */
static inline int t_eh_frame(uint64_t code_size, unsigned char *buf,
			     size_t size)
{
	const struct jitring_cfi *host =
		jitring_cfi_preset(JITRING_CFI_HOST_FP_TRAMPOLINE);
	struct jitring_cfi entry_only;
	int n;

	if (!host)
		return -EINVAL;
	n = jitring_eh_frame_build(host, code_size, buf, size);
	if (n == -EINVAL) {
		entry_only = *host;
		entry_only.nr_ops = entry_only.nr_init;
		n = jitring_eh_frame_build(&entry_only, code_size, buf, size);
	}
	return n;
}

#endif /* JITRING_TESTS_HARNESS_H */
