/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the benchmarks (bench/README.md): the entry shapes, the
 * "floor" (the same encoder into a private per-thread buffer, no sharing,
 * no file), a cheap calibrated clock and per-thread log-linear latency
 * histograms.  C, so that the C drivers (callgrind, RSS) and the C++
 * google-benchmark binary use exactly the same code.
 */
#ifndef JITRING_BENCHLIB_H
#define JITRING_BENCHLIB_H

#include <stddef.h>
#include <stdint.h>

#include "jitring.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Engines as the benchmarks number them (floor is not a jitring engine). */
enum bench_engine {
	BENCH_FLOOR = 0,
	BENCH_RINGS = 1,
	BENCH_MUTEX = 2,
	BENCH_NR_ENGINES = 3,
};

/* The entry shapes measured. */
enum bench_shape {
	SHAPE_CPYTHON = 0, /* UNWINDING_INFO (30-byte trampoline) + CODE_LOAD */
	SHAPE_LOAD = 1,    /* CODE_LOAD only (30 bytes of code) */
	SHAPE_UDL = 2,     /* UNWINDING_INFO + DEBUG_INFO (20 lines) + LOAD */
	SHAPE_CODE4K = 3,  /* CODE_LOAD with 4 KiB of code */
	BENCH_NR_SHAPES = 4,
};

const char *bench_engine_name(int engine);
const char *bench_shape_name(int shape);
int bench_engine_parse(const char *s);  /* -1 if unknown */
int bench_shape_parse(const char *s);   /* -1 if unknown */

/*
 * The entry of @shape (static storage, built once; thread-safe after the
 * first call, which the callers make before starting threads).  Every call
 * of a benchmark writes this same entry.
 */
const struct jitring_entry *bench_shape_entry(int shape);
/* Bytes one entry of @shape adds to the file (the planned group size). */
uint64_t bench_shape_bytes(int shape);

/*
 * The floor: plan + clock + encode into a 64 KiB private buffer of the
 * calling thread (wrapping around), code_index from a per-thread counter.
 * Returns the code_index (> 0) or a negative errno from the planner.
 */
int64_t bench_floor_write(const struct jitring_entry *e);

/* One engine call, dispatched: floor, or jitring_write on @jr. */
static inline int64_t bench_write(int engine, struct jitring *jr,
				  const struct jitring_entry *e)
{
	return engine == BENCH_FLOOR ? bench_floor_write(e)
				     : jitring_write(jr, e);
}

/*
 * Open a writer of @engine (RINGS or MUTEX, default config otherwise) in
 * the benchmark directory (bench_dir()).  A dump left at our path by an
 * earlier writer of this process is removed first.  Returns 0 or -errno.
 */
int bench_open(int engine, struct jitring **out);
/* Close @jr and delete its dump.  Returns jitring_close()'s result. */
int bench_close(struct jitring *jr);
/* $JITRING_BENCH_DIR, else /dev/shm. */
const char *bench_dir(void);

/* CLOCK_MONOTONIC in ns. */
uint64_t bench_now_ns(void);
/* CPU time (ns, /proc/self/task/TID/schedstat) of the thread(s) named
 * jitring-flush: the rings engine's flusher. */
uint64_t bench_flusher_cpu_ns(void);
/* System calls threads other than the flusher made to wake it (an
 * internal counter, not in jitring_stats). */
uint64_t bench_wakes(struct jitring *jr);
/* A private futex on the 32-bit word at @word (an atomic unsigned): wait
 * while it holds @v; wake every waiter. */
void bench_futex_wait(void *word, unsigned v);
void bench_futex_wake(void *word);

/* Cheap timestamps: rdtsc on x86_64 (calibrated), else CLOCK_MONOTONIC. */
static inline uint64_t bench_ticks_begin(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi;

	__asm__ __volatile__("lfence\n\trdtsc" : "=a"(lo), "=d"(hi)::"memory");
	return ((uint64_t)hi << 32) | lo;
#else
	return bench_now_ns();
#endif
}

static inline uint64_t bench_ticks_end(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi, aux;

	__asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux)::"memory");
	return ((uint64_t)hi << 32) | lo;
#else
	return bench_now_ns();
#endif
}

/* Nanoseconds per tick (measured once against CLOCK_MONOTONIC). */
double bench_ns_per_tick(void);

/*
 * Log-linear histogram of tick counts: exact below 32, then 32 linear
 * sub-buckets per power of two (relative error < 3.2 %).
 */
#define HIST_SUB_BITS 5u
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS (HIST_SUB + (64u - HIST_SUB_BITS) * HIST_SUB)

struct bench_hist {
	uint64_t count;
	uint64_t max;
	uint64_t b[HIST_BUCKETS];
};

static inline unsigned bench_hist_bucket(uint64_t v)
{
	unsigned e;

	if (v < HIST_SUB)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v); /* >= HIST_SUB_BITS */
	return HIST_SUB + (e - HIST_SUB_BITS) * HIST_SUB +
	       (unsigned)((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

static inline void bench_hist_add(struct bench_hist *h, uint64_t v)
{
	h->b[bench_hist_bucket(v)]++;
	h->count++;
	if (v > h->max)
		h->max = v;
}

void bench_hist_reset(struct bench_hist *h);
void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src);
/* Value (ticks) at quantile @q in [0, 1]: the upper edge of its bucket,
 * clamped to the maximum; 0 for an empty histogram. */
double bench_hist_quantile(const struct bench_hist *h, double q);

#ifdef __cplusplus
}
#endif

#endif /* JITRING_BENCHLIB_H */
