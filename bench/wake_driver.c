/* SPDX-License-Identifier: MIT */
/*
 * What waking an idle flusher costs the thread that wakes it: one
 * FUTEX_WAKE of a thread that has slept IDLE_MS, in the waker's wall time
 * (the system call's own duration; no switch happens on the waker).
 *
 *   bench/wake_driver IDLE_MS [TRIES]
 *
 * Prints one JSON line: the tries' p50 and max in ns.  storm_driver's
 * 64-thread p99 is the one thread of the storm that wakes the flusher
 * (bench/README.md, Thread storms).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "benchlib.h"
#include "harness.h"

#define STOP 0xffffffffu

static atomic_uint word;

static void *sleeper(void *arg)
{
	unsigned v;

	while ((v = atomic_load(&word)) != STOP)
		bench_futex_wait(&word, v);
	return arg;
}

int main(int argc, char **argv)
{
	unsigned idle_ms, tries;
	uint64_t *ns;
	pthread_t t;

	if (argc < 2) {
		fprintf(stderr, "usage: %s IDLE_MS [TRIES]\n", argv[0]);
		return 2;
	}
	idle_ms = (unsigned)strtoul(argv[1], NULL, 10);
	tries = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 20;
	if (!tries || !(ns = calloc(tries, sizeof(*ns))) ||
	    pthread_create(&t, NULL, sleeper, NULL))
		return 1;
	for (unsigned i = 0; i < tries; i++) {
		uint64_t t0;

		t_sleep_ns(idle_ms * 1000000ull);
		t0 = bench_now_ns();
		atomic_fetch_add(&word, 1);
		bench_futex_wake(&word);
		ns[i] = bench_now_ns() - t0;
	}
	atomic_store(&word, STOP);
	bench_futex_wake(&word);
	pthread_join(t, NULL);
	qsort(ns, tries, sizeof(*ns), t_cmp_u64);
	printf("{\"kind\": \"futex_wake\", \"idle_ms\": %u, \"tries\": %u, "
	       "\"p50_ns\": %llu, \"max_ns\": %llu}\n",
	       idle_ms, tries, (unsigned long long)ns[tries / 2],
	       (unsigned long long)ns[tries - 1]);
	return 0;
}
