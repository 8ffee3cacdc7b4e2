/* SPDX-License-Identifier: MIT */
/*
 * Hot-path instruction counts, for valgrind --tool=callgrind.
 *
 *   valgrind --tool=callgrind --toggle-collect=bench_measured \
 *       bench/cg_driver ENGINE SHAPE [N] [WARMUP] [BURST]
 *
 * ENGINE is floor, rings or mutex; SHAPE cpython, load, unw_dbg_load or
 * code4k.  One thread, default writer config, dump in $JITRING_BENCH_DIR
 * (default /dev/shm, deleted at the end).  After WARMUP calls (default
 * 1000) and a jitring_flush(), bench_measured() makes N calls (default
 * 10000); callgrind counts only what the calling thread executes inside it
 * (the flusher thread is not counted, the kernel never is).
 *
 * BURST = 0 (default): "sustained", N calls back to back, so the count
 * includes everything a steady producer pays on its own thread: the
 * rings engine's flusher wake-ups and waits for ring space, the mutex
 * engine's fflush() of its 2 MiB buffer.
 * BURST = B > 0: "burst", calls in bursts of B with a jitring_flush()
 * between bursts outside the counted function: the pure write path.
 *
 * Prints one line: engine shape mode calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchlib.h"

/* The counted region; noinline so --toggle-collect can find it. */
__attribute__((noinline)) int64_t bench_measured(int engine, struct jitring *jr,
						 const struct jitring_entry *e,
						 unsigned long n);

__attribute__((noinline)) int64_t bench_measured(int engine, struct jitring *jr,
						 const struct jitring_entry *e,
						 unsigned long n)
{
	int64_t acc = 0;

	for (unsigned long i = 0; i < n; i++) {
		int64_t r = bench_write(engine, jr, e);

		if (r < 0)
			return r;
		acc += r;
	}
	return acc;
}

int main(int argc, char **argv)
{
	int engine, shape;
	unsigned long n = 10000, warm = 1000, burst = 0;
	struct jitring *jr = NULL;
	const struct jitring_entry *e;
	int64_t r;

	if (argc < 3) {
		fprintf(stderr, "usage: %s ENGINE SHAPE [N] [WARMUP] [BURST]\n",
			argv[0]);
		return 2;
	}
	engine = bench_engine_parse(argv[1]);
	shape = bench_shape_parse(argv[2]);
	if (engine < 0 || shape < 0) {
		fprintf(stderr, "unknown engine or shape\n");
		return 2;
	}
	if (argc > 3)
		n = strtoul(argv[3], NULL, 0);
	if (argc > 4)
		warm = strtoul(argv[4], NULL, 0);
	if (argc > 5)
		burst = strtoul(argv[5], NULL, 0);
	e = bench_shape_entry(shape);
	if (engine != BENCH_FLOOR) {
		int ret = bench_open(engine, &jr);

		if (ret) {
			fprintf(stderr, "jitring_open: %s\n", strerror(-ret));
			return 1;
		}
	}
	for (unsigned long i = 0; i < warm; i++)
		if (bench_write(engine, jr, e) < 0)
			return 1;
	if (jr)
		jitring_flush(jr);
	if (!burst) {
		r = bench_measured(engine, jr, e, n);
	} else {
		r = 0;
		for (unsigned long done = 0; done < n && r >= 0; done += burst) {
			unsigned long b = n - done < burst ? n - done : burst;

			r = bench_measured(engine, jr, e, b);
			if (jr)
				jitring_flush(jr);
		}
	}
	if (r < 0) {
		fprintf(stderr, "write: %lld\n", (long long)r);
		return 1;
	}
	if (jr && bench_close(jr))
		return 1;
	printf("%s %s %s %lu\n", argv[1], argv[2], burst ? "burst" : "sustained",
	       n);
	return 0;
}
