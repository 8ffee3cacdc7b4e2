/* SPDX-License-Identifier: MIT */
/*
 * Resident memory with many threads, one engine per process (so that
 * ru_maxrss is that engine's alone).
 *
 *   bench/rss_driver peak ENGINE THREADS [ENTRIES_PER_THREAD]
 *	THREADS threads each write ENTRIES_PER_THREAD (default 64) CPython
 *	entries and call jitring_flush(), all at once; then the writer is
 *	closed.  Reports the process's peak RSS (ru_maxrss).
 *
 *	(Threads first register in waves of 256, one entry each, so that the
 *	registration storm below does not decide the figure.)
 *
 *   bench/rss_driver storm ENGINE THREADS [ENTRIES_PER_THREAD]
 *	As peak, but every thread's first write happens at once: measures
 *	how the engine copes with THREADS threads registering together
 *	(time, -ENOMEM refusals).
 *
 *   bench/rss_driver idle ENGINE THREADS [IDLE_SECONDS]
 *	Opens the writer, starts THREADS threads that pre-touch 64 KiB of
 *	stack and park: rss_unregistered.  Then each thread writes one CPython
 *	entry (registering with the engine), main flushes, the threads park
 *	again: rss_registered.  After IDLE_SECONDS (default 2.5; the rings
 *	engine trims rings idle for >= 1 s) with every thread idle:
 *	rss_idle.  Reports (rss_registered - rss_unregistered) / THREADS and
 *	(rss_idle - rss_unregistered) / THREADS in bytes, and the process's
 *	CPU time and voluntary context switches over the idle period (every
 *	thread parked on a futex: what is left is the flusher's).
 *
 * Thread stacks are 256 KiB, as in bench_write.  Prints one JSON object.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "harness.h"

static int engine;
static struct jitring *jr;
static const struct jitring_entry *entry;
static unsigned long per_thread = 64;
static atomic_uint phase;      /* what the threads should do next */
static atomic_uint arrived;    /* threads done with the current phase */
static atomic_ulong errors;
static atomic_long last_error;

static void wait_phase(unsigned want)
{
	unsigned p;

	while ((p = atomic_load(&phase)) < want)
		bench_futex_wait(&phase, p);
}

static void arrive(void)
{
	atomic_fetch_add(&arrived, 1);
	bench_futex_wake(&arrived);
}

static void wait_arrived(unsigned n)
{
	unsigned a;

	while ((a = atomic_load(&arrived)) < n)
		bench_futex_wait(&arrived, a);
}

static void set_phase(unsigned p)
{
	atomic_store(&arrived, 0);
	atomic_store(&phase, p);
	bench_futex_wake(&phase);
}

static void write_n(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
	{
		int64_t r = bench_write(engine, jr, entry);

		if (r < 0) {
			atomic_fetch_add(&errors, 1);
			atomic_store(&last_error, (long)r);
		}
	}
}

#define WAVE 256u
static unsigned nwaves;
static int storm;

static void *peak_thread(void *arg)
{
	unsigned idx = (unsigned)(uintptr_t)arg;

	if (storm) {
		/* Every thread's first write at once. */
		wait_phase(1);
		write_n(per_thread);
	} else {
		/* Register in waves of WAVE threads, then write all at once. */
		wait_phase(1 + idx / WAVE);
		write_n(1);
		arrive();
		wait_phase(1 + nwaves);
		write_n(per_thread - 1);
	}
	if (jr && jitring_flush(jr))
		atomic_fetch_add(&errors, 1);
	arrive();
	wait_phase(2 + nwaves);
	return NULL;
}

static __attribute__((noinline)) void touch_stack(void)
{
	volatile char buf[64 << 10];

	for (size_t i = 0; i < sizeof(buf); i += 4096)
		buf[i] = 1;
}

static void *idle_thread(void *arg)
{
	(void)arg;
	touch_stack();
	arrive();
	wait_phase(1);
	write_n(1);
	arrive();
	wait_phase(2);
	return NULL;
}

static double tv_ms(const struct timeval *tv)
{
	return (double)tv->tv_sec * 1e3 + (double)tv->tv_usec / 1e3;
}

static double sec_since(struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) +
	       (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

int main(int argc, char **argv)
{
	pthread_attr_t attr;
	pthread_t *tids;
	unsigned long n;
	int peak;
	double idle_s = 2.5;
	struct rusage ru;
	struct timespec t0;

	if (argc < 4 || (strcmp(argv[1], "peak") && strcmp(argv[1], "idle") &&
			 strcmp(argv[1], "storm"))) {
		fprintf(stderr, "usage: %s peak|storm|idle ENGINE THREADS [ARG]\n",
			argv[0]);
		return 2;
	}
	storm = strcmp(argv[1], "storm") == 0;
	peak = storm || strcmp(argv[1], "peak") == 0;
	engine = bench_engine_parse(argv[2]);
	n = strtoul(argv[3], NULL, 0);
	if (engine < 0 || n == 0)
		return 2;
	if (argc > 4) {
		if (peak)
			per_thread = strtoul(argv[4], NULL, 0);
		else
			idle_s = atof(argv[4]);
	}
	entry = bench_shape_entry(SHAPE_CPYTHON);
	if (engine != BENCH_FLOOR) {
		int ret = bench_open(engine, &jr);

		if (ret) {
			fprintf(stderr, "jitring_open: %s\n", strerror(-ret));
			return 1;
		}
	}
	tids = calloc(n, sizeof(*tids));
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256u << 10);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned long i = 0; i < n; i++) {
		int ret = pthread_create(&tids[i], &attr,
					 peak ? peak_thread : idle_thread,
					 (void *)(uintptr_t)i);
		if (ret) {
			fprintf(stderr, "pthread_create: %s\n", strerror(ret));
			return 1;
		}
	}
	if (peak) {
		uint64_t rss_threads;
		double reg_secs = 0, secs;
		struct jitring_stats st = { .struct_size = sizeof(st) };

		if (per_thread < 1)
			per_thread = 1;
		nwaves = storm ? 0 : (unsigned)((n + WAVE - 1) / WAVE);
		rss_threads = t_rss_bytes();
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (unsigned w = 0; w < nwaves; w++) {
			unsigned long lo = (unsigned long)w * WAVE;
			unsigned long hi = lo + WAVE < n ? lo + WAVE : n;

			atomic_store(&arrived, 0);
			atomic_store(&phase, 1 + w);
			bench_futex_wake(&phase);
			wait_arrived((unsigned)(hi - lo));
		}
		if (nwaves) {
			reg_secs = sec_since(&t0);
			clock_gettime(CLOCK_MONOTONIC, &t0);
		}
		set_phase(1 + nwaves);
		wait_arrived((unsigned)n);
		secs = sec_since(&t0);
		if (jr)
			jitring_stats(jr, &st);
		set_phase(2 + nwaves);
		for (unsigned long i = 0; i < n; i++)
			pthread_join(tids[i], NULL);
		if (jr && bench_close(jr))
			atomic_fetch_add(&errors, 1);
		getrusage(RUSAGE_SELF, &ru);
		printf("{\"kind\": \"%s\", \"engine\": \"%s\", \"threads\": %lu, "
		       "\"entries_per_thread\": %lu, \"rss_threads_started_bytes\": %llu, "
		       "\"maxrss_bytes\": %llu, \"register_waves_seconds\": %.3f, "
		       "\"write_seconds\": %.3f, \"errors\": %lu, \"last_error\": %ld, "
		       "\"refused_nomem\": %llu, \"refills_waited\": %llu, "
		       "\"ring_full_waits\": %llu, \"threads_total\": %llu}\n",
		       argv[1], argv[2], n, per_thread, (unsigned long long)rss_threads,
		       (unsigned long long)ru.ru_maxrss * 1024ull, reg_secs, secs,
		       (unsigned long)atomic_load(&errors),
		       (long)atomic_load(&last_error),
		       (unsigned long long)st.refused_nomem,
		       (unsigned long long)st.refills_waited,
		       (unsigned long long)st.ring_full_waits,
		       (unsigned long long)st.threads_total);
	} else {
		uint64_t r0, r1, r2;
		struct rusage ru0;
		double idle_cpu_ms;
		long idle_switches;
		struct jitring_stats st = { .struct_size = sizeof(st) };

		wait_arrived((unsigned)n);
		r0 = t_rss_bytes();
		set_phase(1);
		wait_arrived((unsigned)n);
		if (jr && jitring_flush(jr))
			atomic_fetch_add(&errors, 1);
		r1 = t_rss_bytes();
		if (jr)
			jitring_stats(jr, &st);
		getrusage(RUSAGE_SELF, &ru0);
		t_sleep_ns((uint64_t)(idle_s * 1e9));
		getrusage(RUSAGE_SELF, &ru);
		idle_cpu_ms = tv_ms(&ru.ru_utime) - tv_ms(&ru0.ru_utime) +
			      tv_ms(&ru.ru_stime) - tv_ms(&ru0.ru_stime);
		idle_switches = ru.ru_nvcsw - ru0.ru_nvcsw;
		r2 = t_rss_bytes();
		set_phase(2);
		for (unsigned long i = 0; i < n; i++)
			pthread_join(tids[i], NULL);
		if (jr && bench_close(jr))
			atomic_fetch_add(&errors, 1);
		getrusage(RUSAGE_SELF, &ru);
		printf("{\"kind\": \"idle\", \"engine\": \"%s\", \"threads\": %lu, "
		       "\"idle_seconds\": %.2f, \"rss_unregistered_bytes\": %llu, "
		       "\"rss_registered_bytes\": %llu, \"rss_idle_bytes\": %llu, "
		       "\"per_thread_registered_bytes\": %.1f, "
		       "\"per_thread_idle_bytes\": %.1f, \"maxrss_bytes\": %llu, "
		       "\"idle_cpu_ms\": %.2f, \"idle_voluntary_switches\": %ld, "
		       "\"errors\": %lu, \"last_error\": %ld, \"refused_nomem\": %llu}\n",
		       argv[2], n, idle_s, (unsigned long long)r0,
		       (unsigned long long)r1, (unsigned long long)r2,
		       ((double)r1 - (double)r0) / (double)n,
		       ((double)r2 - (double)r0) / (double)n,
		       (unsigned long long)ru.ru_maxrss * 1024ull,
		       idle_cpu_ms, idle_switches,
		       (unsigned long)atomic_load(&errors),
		       (long)atomic_load(&last_error),
		       (unsigned long long)st.refused_nomem);
	}
	return 0; /* errors are in the JSON */
}
