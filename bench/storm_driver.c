/* SPDX-License-Identifier: MIT */
/*
 * Thread storms: THREADS threads released at once, each making
 * its first calls, after the writer sat idle.
 *
 *   bench/storm_driver write|kit|null|fault THREADS [READY]
 *
 * write: each thread makes 20 jitring_write() calls (the CPython entry
 *	shape: UNWINDING_INFO + CODE_LOAD);
 * kit:   each thread takes 400 trampoline copies (jitring_trampolines_get
 *	with the built-in template).
 * null:  controls, no library call: the first call is empty (what the
 *	measurement itself costs a thread just woken);
 * fault: each thread's first call writes to a page nobody touched yet,
 *	64 KiB from the next thread's as rings are (one anonymous page
 *	fault: what a cold ring's first write pays).
 * READY: jitring_config.ready_rings and .ready_copies (0: the defaults),
 *	what a runtime that knows its thread count may say.
 *
 * The threads are created first and park (stacks pre-touched); the main
 * thread makes one call (the writer has been in use: the library's code
 * and the clock are warm; STORM_COLD=1 skips it), the writer then sits
 * idle for STORM_IDLE_MS (200 ms; over 1 s the flusher has trimmed idle
 * rings), then one futex wake releases them all.  Each thread measures its
 * first call and its later calls in thread CPU time
 * (CLOCK_THREAD_CPUTIME_ID: waiting for a CPU among thousands of threads
 * does not count), then parks again, registered.  A first call's cost is
 * the smaller of its thread CPU time and its wall time: both bound it from
 * above (thread CPU time also counts interrupts served meanwhile, wall
 * time a preemption); first_cpu_p99_ns is the thread CPU time alone.
 * STORM_DEBUG=1 prints each first call over 5 us with its minor faults
 * and context switches.  Reported, one JSON line:
 *   own_ring_share    threads that found no ready ring and made their own
 *                     (refills_waited / THREADS);
 *   arena_caller_share  trampoline arenas a caller had to make itself
 *                     (trampoline_arenas_waited / all arenas made);
 *   first_p50_ns, first_p99_ns, first_cpu_p99_ns, later_ns (mean of the
 *                     later calls);
 *   rss_peak_kib (ru_maxrss), idle_kib_per_thread (VmRSS after 2.5 s idle
 *   less VmRSS with the threads parked before the storm, per thread);
 *   flusher_cpu_ms over the storm, flusher_idle_cpu_share over the idle;
 *   grown_waited: rings_grown_waited, full rings traded with no larger
 *   one ready (the thread took a spare, or made one); full_waits:
 *   ring_full_waits, times a thread waited for the flusher to make room;
 *   wakes: system calls the storm's threads made to wake the flusher
 *   (each a FUTEX_WAKE of an idle CPU: 3-19 us on this VM);
 *   vm_kept_mib: address space after the 2.5 s idle less that before the
 *   storm (what the ready stocks kept of a storm, and the threads' rings).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "harness.h"

#define WRITES 20
#define COPIES 400

static struct jitring *jr;
static struct jitring_trampolines *set;
static const struct jitring_entry *entry;
enum {
	M_WRITE,
	M_KIT,
	M_NULL,
	M_FAULT
};
static const char *const modes[] = { "write", "kit", "null", "fault" };
static int mode;
static volatile char *fresh; /* M_FAULT: 64 KiB per thread, untouched */
static atomic_uint go;       /* 0: park; 1: storm; 2: leave */
static atomic_uint arrived;  /* threads done with the storm */
static size_t nthreads;
static atomic_ulong errors;
static uint64_t *first_ns, *first_cpu_ns, *later_ns;
/* STORM_DEBUG: the first call's minor faults and context switches. */
static struct storm_dbg {
	uint64_t ns;
	long minflt, nvcsw, nivcsw;
} *dbg;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int one_call(size_t i)
{
	void *addr;

	switch (mode) {
	case M_KIT:
		return jitring_trampolines_get(set, "py::f:/app/x.py", &addr) >
		       0;
	case M_NULL:
		return 1;
	case M_FAULT:
		/* A store only: a read first would map the zero page, and the
		 * store would then need a TLB shootdown (an IPI). */
		fresh[i << 16] = 1;
		return 1;
	}
	return jitring_write(jr, entry) > 0;
}

static void *storm_thread(void *arg)
{
	size_t i = (size_t)arg;
	unsigned n = mode == M_KIT ? COPIES : WRITES;
	volatile char stack[64 << 10];
	uint64_t t0, t1, t2, w0, w1;
	struct rusage r0, r1;

	memset((char *)stack, 1, sizeof(stack));
	while (atomic_load(&go) == 0)
		bench_futex_wait(&go, 0);
	if (dbg)
		getrusage(RUSAGE_THREAD, &r0);
	w0 = bench_now_ns();
	t0 = thread_cpu_ns();
	if (!one_call(i))
		atomic_fetch_add(&errors, 1);
	t1 = thread_cpu_ns();
	w1 = bench_now_ns();
	if (dbg) {
		getrusage(RUSAGE_THREAD, &r1);
		dbg[i] = (struct storm_dbg){ t1 - t0,
					     r1.ru_minflt - r0.ru_minflt,
					     r1.ru_nvcsw - r0.ru_nvcsw,
					     r1.ru_nivcsw - r0.ru_nivcsw };
	}
	for (unsigned k = 1; k < n; k++)
		if (!one_call(i))
			atomic_fetch_add(&errors, 1);
	t2 = thread_cpu_ns();
	first_ns[i] = t1 - t0 < w1 - w0 ? t1 - t0 : w1 - w0;
	first_cpu_ns[i] = t1 - t0;
	later_ns[i] = (t2 - t1) / (n - 1);
	/* The last one wakes main (not each of thousands in turn). */
	if (atomic_fetch_add(&arrived, 1) + 1 == nthreads)
		bench_futex_wake(&arrived);
	while (atomic_load(&go) != 2)
		bench_futex_wait(&go, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_trampoline_template tmpl;
	struct jitring_stats st;
	struct rusage ru;
	pthread_attr_t attr;
	pthread_t *th;
	size_t n;
	uint32_t ready = 0;
	unsigned idle_ms = getenv("STORM_IDLE_MS") ?
				   (unsigned)atoi(getenv("STORM_IDLE_MS")) :
				   200;
	uint64_t c0, c1, c2, c3, t_idle0, t_idle1, wakes;
	long rss_parked, rss_idle;
	uint64_t vm_parked, vm_idle;
	double later = 0;
	char dir[] = "/tmp/jitring-storm-XXXXXX";

	for (mode = 0; argc > 1 && mode < 4 && strcmp(argv[1], modes[mode]);)
		mode++;
	if (argc < 3 || mode == 4) {
		fprintf(stderr,
			"usage: %s write|kit|null|fault THREADS [READY]\n",
			argv[0]);
		return 2;
	}
	n = nthreads = strtoul(argv[2], NULL, 10);
	if (argc > 3)
		ready = (uint32_t)strtoul(argv[3], NULL, 10);
	if (!mkdtemp(dir))
		return 1;
	jitring_config_init(&cfg);
	cfg.dir = dir;
	cfg.ready_rings = ready;
	cfg.ready_copies = ready ? ready * COPIES : 0;
	if (jitring_open(&cfg, &jr))
		return 1;
	entry = bench_shape_entry(bench_shape_parse("cpython"));
	if (mode == M_KIT && (jitring_trampoline_builtin(&tmpl) ||
			      jitring_trampolines_new(jr, &tmpl, &set)))
		return 77;
	if (mode == M_FAULT) {
		/* Small pages, as the rings' (pool.c): one fault per thread. */
		fresh = mmap(NULL, (n + 1) << 16, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (fresh == MAP_FAILED)
			return 1;
		(void)madvise((void *)fresh, (n + 1) << 16, MADV_NOHUGEPAGE);
	}
	if (getenv("STORM_DEBUG"))
		dbg = calloc(n, sizeof(*dbg));
	first_ns = calloc(n, sizeof(*first_ns));
	first_cpu_ns = calloc(n, sizeof(*first_cpu_ns));
	later_ns = calloc(n, sizeof(*later_ns));
	th = calloc(n, sizeof(*th));
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 << 10);
	for (size_t i = 0; i < n; i++)
		if (pthread_create(&th[i], &attr, storm_thread, (void *)i))
			return 1;
	if (!getenv("STORM_COLD") && !one_call(n))
		return 1;
	/* Parked and idle: the baseline, then the writer sits idle. */
	t_sleep_ns(idle_ms * 1000000ull);
	rss_parked = (long)(t_rss_bytes() / 1024);
	vm_parked = t_statm_bytes(false);
	if (getenv("STORM_DEBUG"))
		fprintf(stderr, "before the storm: arenas ahead %llu\n",
			(unsigned long long)t_stats(jr).trampoline_arenas_ahead);
	c0 = bench_flusher_cpu_ns();
	wakes = bench_wakes(jr);
	atomic_store(&go, 1);
	bench_futex_wake(&go);
	for (unsigned a; (a = atomic_load(&arrived)) < n;)
		bench_futex_wait(&arrived, a);
	c1 = bench_flusher_cpu_ns();
	wakes = bench_wakes(jr) - wakes;
	jitring_flush(jr);
	getrusage(RUSAGE_SELF, &ru);
	/* Idle, every thread registered and parked. */
	t_idle0 = bench_now_ns();
	c2 = bench_flusher_cpu_ns();
	t_sleep_ns(2500 * 1000000ull);
	c3 = bench_flusher_cpu_ns();
	t_idle1 = bench_now_ns();
	rss_idle = (long)(t_rss_bytes() / 1024);
	vm_idle = t_statm_bytes(false);
	st = t_stats(jr);
	for (size_t i = 0; dbg && i < n; i++)
		if (dbg[i].ns > 5000)
			fprintf(stderr,
				"slow first call: %llu ns, %ld faults, "
				"%ld/%ld switches\n",
				(unsigned long long)dbg[i].ns, dbg[i].minflt,
				dbg[i].nvcsw, dbg[i].nivcsw);
	qsort(first_ns, n, sizeof(*first_ns), t_cmp_u64);
	qsort(first_cpu_ns, n, sizeof(*first_cpu_ns), t_cmp_u64);
	for (size_t i = 0; i < n; i++)
		later += (double)later_ns[i] / (double)n;
	printf("{\"kind\": \"storm\", \"mode\": \"%s\", \"threads\": %zu, "
	       "\"ready\": %u, \"errors\": %lu, "
	       "\"own_ring_share\": %.4f, \"refills_waited\": %llu, "
	       "\"arena_caller_share\": %.4f, \"arenas_waited\": %llu, "
	       "\"arenas_ahead\": %llu, \"grown_waited\": %llu, "
	       "\"full_waits\": %llu, \"wakes\": %llu, "
	       "\"idle_ms\": %u, \"warm\": %d, "
	       "\"first_p50_ns\": %llu, \"first_p99_ns\": %llu, "
	       "\"first_cpu_p99_ns\": %llu, "
	       "\"later_ns\": %.0f, \"rss_peak_kib\": %ld, "
	       "\"idle_kib_per_thread\": %.2f, \"flusher_cpu_ms\": %.2f, "
	       "\"flusher_idle_cpu_share\": %.5f, \"vm_kept_mib\": %.1f}\n",
	       argv[1], n, ready, atomic_load(&errors),
	       (double)st.refills_waited / (double)n,
	       (unsigned long long)st.refills_waited,
	       st.trampoline_arenas_ahead + st.trampoline_arenas_waited ?
		       (double)st.trampoline_arenas_waited /
			       (double)(st.trampoline_arenas_ahead +
					st.trampoline_arenas_waited) :
		       0.0,
	       (unsigned long long)st.trampoline_arenas_waited,
	       (unsigned long long)st.trampoline_arenas_ahead,
	       (unsigned long long)st.rings_grown_waited,
	       (unsigned long long)st.ring_full_waits,
	       (unsigned long long)wakes, idle_ms, !getenv("STORM_COLD"),
	       (unsigned long long)first_ns[n / 2],
	       (unsigned long long)first_ns[(n * 99) / 100],
	       (unsigned long long)first_cpu_ns[(n * 99) / 100], later,
	       ru.ru_maxrss, (double)(rss_idle - rss_parked) / (double)n,
	       (double)(c1 - c0) / 1e6,
	       (double)(c3 - c2) / (double)(t_idle1 - t_idle0),
	       ((double)vm_idle - (double)vm_parked) / (1024.0 * 1024.0));
	atomic_store(&go, 2);
	bench_futex_wake(&go);
	for (size_t i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	jitring_close(jr);
	t_rmtree(dir);
	return 0;
}
