/* SPDX-License-Identifier: MIT */
/*
 * Back-pressure with a stalled flusher.  jitring_io_hook (testpoints
 * builds only) replaces the flusher's pwritev(2) with one that first waits
 * at a gate the test opens, so rings fill deterministically: the flusher
 * holds its first batch and publishes no ring head until the gate opens.
 * Rings are 4 KiB (ring_size 4096).
 *
 * --mode drop-lossless (default) runs two writers, one after the other:
 *  drop:     JITRING_F_DROP.  --threads N producers write until each has
 *            been refused --count D times.  While the gate is shut nothing
 *            reaches the file, each producer got at most a ring's worth of
 *            entries accepted, and every refusal is -EAGAIN; refused_dropped
 *            equals the refusals seen.  After the gate opens and a flush,
 *            every accepted write is in the file, nothing refused is.
 *  lossless: the default mode.  N producers write --entries K each, far
 *            more than a ring holds.  The test waits (on the counters, not
 *            on time) until each has hit a full ring (ring_full_waits >= N)
 *            and checks that none could finish and nothing is in the file;
 *            then opens the gate: all writes return a code_index and all
 *            are in the file; nothing was dropped.
 *
 * --mode attach-stall: threads that register (first write) while the
 * flusher is stalled.  One producer's entry parks the flusher in pwritev;
 * then --threads N new threads (more than the 8 rings the pool starts
 * with) write once each.  Within mem_budget and in lossless mode a
 * registering thread must wait for a ring, not fail: after the gate opens,
 * every write must have returned a code_index and refused_nomem must be 0.
 * The gate is opened when all threads have returned or after 8 s, longer
 * than any give-up a pool wait may have.
 *
 * --mode budget-burst: two bursts of new threads with the default config
 * (adaptive ring size, 512 MiB budget).  Burst 1: 200 threads register
 * while the flusher is stalled (so they make their own rings) and end.
 * Then the flusher runs (it refills its pool after the burst).  Burst 2:
 * --threads N threads each write once and hold their rings until all
 * have written.  N rings of the 64 KiB adaptive minimum fit the budget
 * many times over, so no write may fail with -ENOMEM.
 *
 * Usage: stress_drop [--mode drop-lossless|attach-stall|budget-burst]
 *	[--threads N] [--count D] [--entries K] [--seed X] [--dir D]
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "iogate.h"
#include "stress_common.h"
#include "common/testpoint.h"

#define RING_SIZE 4096u
/* No group is smaller: CODE_LOAD alone is 56 + name + 16 code bytes. */
#define MIN_GROUP 64u

static struct jitring *jr;
static struct st_spec spec;
static struct st_opts opts;

#ifdef JITRING_TESTPOINTS

static int open_writer(const char *name, uint32_t flags, uint32_t ring_size,
		       char *path, size_t len)
{
	struct jitring_config cfg;
	char dir[4200];
	int ret = st_subdir(opts.dir, name, dir, sizeof(dir));

	if (ret)
		return ret;
	jitring_config_init(&cfg);
	cfg.engine = JITRING_ENGINE_RINGS;
	cfg.dir = dir;
	cfg.flags = flags;
	cfg.ring_size = ring_size;
	st_dump_path(dir, getpid(), path, len);
	return jitring_open(&cfg, &jr);
}

struct prod {
	struct st_log log;
	pthread_t th;
};

static int start(struct prod *p, unsigned n, void *(*fn)(void *))
{
	for (unsigned i = 0; i < n; i++) {
		st_log_init(&p[i].log, i, 0);
		if (st_thread_create(&p[i].th, fn, &p[i]))
			return -1;
	}
	return 0;
}

/*
 * The end of a phase: verify the dump against the producers' logs, print
 * the scenario's RESULT line (@faults is what it injected), close the
 * writer and free the producers.
 */
static void finish(const char *scenario, const char *path, struct prod *p,
		   unsigned n, const struct jitring_stats *st,
		   uint64_t faults)
{
	struct st_log **lp = calloc(n, sizeof(*lp));
	unsigned long fails;

	if (!lp)
		abort();
	for (unsigned i = 0; i < n; i++)
		lp[i] = &p[i].log;
	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = n,
		.stats = st,
		.engine = JITRING_ENGINE_RINGS,
	};
	fails = st_verify(&v);
	free(lp);
	T_CHECK_EQ(fails, 0);
	st_result(scenario, JITRING_ENGINE_RINGS, n, st->entries_written,
		  fails ? 0 : st->entries_written, st->lost_io, faults,
		  fails == 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	for (unsigned i = 0; i < n; i++)
		st_log_fini(&p[i].log);
	free(p);
}

/* ------------------------------------------------------------------ */

static void *drop_producer(void *arg)
{
	struct prod *p = arg;
	/* Bounded: a ring that never fills would end the test, not hang it. */
	uint64_t max = 1000000;

	while (p->log.eagain < opts.count && p->log.n < max)
		if (st_write(jr, &spec, &p->log) <= 0 &&
		    p->log.ret[p->log.n - 1] != -EAGAIN)
			break;
	return NULL;
}

static void phase_drop(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct prod *p = calloc(opts.threads, sizeof(*p));
	struct st_totals tot = { 0 };
	char path[4300];

	T_REQUIRE(p != NULL);
	t_iogate_set(false);
	T_REQUIRE(open_writer("drop", JITRING_F_DROP, RING_SIZE, path,
			      sizeof(path)) == 0);
	T_REQUIRE(start(p, opts.threads, drop_producer) == 0);
	for (unsigned i = 0; i < opts.threads; i++)
		pthread_join(p[i].th, NULL);

	/* Gate still shut: quiescent producers, exact counters. */
	jitring_stats(jr, &st);
	for (unsigned i = 0; i < opts.threads; i++) {
		struct st_log *l = &p[i].log;

		tot.ok += l->ok;
		tot.eagain += l->eagain;
		T_CHECK_EQ(l->eagain, opts.count);
		T_CHECK_EQ(l->ok + l->eagain, l->n);
		/* The ring filled and stayed full: at most a ring's worth. */
		T_CHECK(l->ok > 0 && l->ok <= RING_SIZE / MIN_GROUP);
	}
	printf("drop: %u threads, %" PRIu64 " accepted, %" PRIu64
	       " dropped while the flusher was stalled\n", opts.threads,
	       tot.ok, tot.eagain);
	T_CHECK_EQ(st.refused_dropped, tot.eagain);
	T_CHECK_EQ(st.entries_written, 0);
	T_CHECK_EQ(st.ring_full_waits, 0);

	t_iogate_set(true);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	finish("drop-stalled-flusher", path, p, opts.threads, &st, tot.eagain);
}

/* ------------------------------------------------------------------ */

static void *lossless_producer(void *arg)
{
	struct prod *p = arg;

	for (uint64_t k = 0; k < opts.entries; k++)
		if (st_write(jr, &spec, &p->log) <= 0)
			break;
	return NULL;
}

static void phase_lossless(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct prod *p = calloc(opts.threads, sizeof(*p));
	uint64_t t_end, ok = 0;
	char path[4300];

	T_REQUIRE(p != NULL);
	t_iogate_set(false);
	T_REQUIRE(open_writer("lossless", 0, RING_SIZE, path, sizeof(path)) ==
		  0);
	T_REQUIRE(start(p, opts.threads, lossless_producer) == 0);

	/* Wait until every producer has found its ring full. */
	t_end = st_now_ns() + 60ull * 1000000000u;
	do {
		jitring_stats(jr, &st);
		if (st.ring_full_waits >= opts.threads)
			break;
		sched_yield();
	} while (st_now_ns() < t_end);
	T_CHECK(st.ring_full_waits >= opts.threads);
	/* Held, not dropped and not finished: the gate is still shut. */
	T_CHECK_EQ(st.entries_written, 0);
	T_CHECK_EQ(st.refused_dropped, 0);
	for (unsigned i = 0; i < opts.threads; i++) {
		uint64_t done = atomic_load(&p[i].log.done);

		T_CHECK(done < opts.entries && done <= RING_SIZE / MIN_GROUP);
	}

	t_iogate_set(true);
	for (unsigned i = 0; i < opts.threads; i++) {
		pthread_join(p[i].th, NULL);
		ok += p[i].log.ok;
		T_CHECK_EQ(p[i].log.ok, opts.entries);
	}
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	printf("lossless: %u threads, %" PRIu64 " entries, %" PRIu64
	       " ring-full waits\n", opts.threads, ok, st.ring_full_waits);
	T_CHECK(st.ring_full_waits >= opts.threads);
	finish("lossless-stalled-flusher", path, p, opts.threads, &st,
	       st.ring_full_waits);
}

/* ------------------------------------------------------------------ */

static void *attach_producer(void *arg)
{
	struct prod *p = arg;

	st_write(jr, &spec, &p->log);
	t_iogate_bump(1);
	return NULL;
}

static void phase_attach_stall(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	unsigned n = opts.threads + 1;
	struct prod *p = calloc(n, sizeof(*p));
	struct st_totals tot = { 0 };
	unsigned returned;
	char path[4300];

	T_REQUIRE(p != NULL);
	t_iogate_set(false);
	T_REQUIRE(open_writer("attach", 0, 0, path, sizeof(path)) == 0);
	/* Thread 0's entry parks the flusher in its first pwritev. */
	T_REQUIRE(start(p, 1, attach_producer) == 0);
	T_REQUIRE(t_iogate_wait(&t_iogate.parked, 1, 60) >= 1);
	pthread_join(p[0].th, NULL);

	for (unsigned i = 1; i < n; i++) {
		st_log_init(&p[i].log, i, 0);
		T_REQUIRE(st_thread_create(&p[i].th, attach_producer, &p[i]) ==
			  0);
	}
	returned = t_iogate_wait(&t_iogate.count, n, 8);
	jitring_stats(jr, &st);
	printf("attach-stall: %u of %u threads returned while the flusher "
	       "was stalled; refills_waited %" PRIu64 ", refused_nomem %"
	       PRIu64 "\n", returned, n, st.refills_waited,
	       st.refused_nomem);
	t_iogate_set(true);
	for (unsigned i = 1; i < n; i++)
		pthread_join(p[i].th, NULL);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	for (unsigned i = 0; i < n; i++) {
		tot.ok += p[i].log.ok;
		tot.enomem += p[i].log.enomem;
	}
	/* A few dozen 64 KiB rings are far inside the 512 MiB budget. */
	T_CHECK_EQ(tot.enomem, 0);
	T_CHECK_EQ(tot.ok, n);
	T_CHECK_EQ(st.refused_nomem, 0);
	finish("attach-stalled-flusher", path, p, n, &st, n);
}

/* ------------------------------------------------------------------ */

static struct st_gate hold = ST_GATE_INIT;

static void *burst_producer(void *arg)
{
	struct prod *p = arg;

	st_write(jr, &spec, &p->log);
	t_iogate_bump(1);
	/* Keep the ring until every thread of the burst has one. */
	st_gate_wait(&hold);
	return NULL;
}

static void phase_budget_burst(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	const unsigned b1 = 200, b2 = opts.threads;
	unsigned n = 1 + b1 + b2;
	struct prod *p = calloc(n, sizeof(*p));
	struct st_totals tot = { 0 };
	char path[4300];

	T_REQUIRE(p != NULL);
	t_iogate_set(false);
	/* Default config: adaptive ring size, 512 MiB budget. */
	T_REQUIRE(open_writer("burst", 0, 0, path, sizeof(path)) == 0);
	T_REQUIRE(start(p, 1, attach_producer) == 0);
	T_REQUIRE(t_iogate_wait(&t_iogate.parked, 1, 60) >= 1);
	pthread_join(p[0].th, NULL);

	/* Burst 1 while the flusher is stalled: most threads make rings. */
	for (unsigned i = 1; i <= b1; i++) {
		st_log_init(&p[i].log, i, 0);
		T_REQUIRE(st_thread_create(&p[i].th, attach_producer, &p[i]) ==
			  0);
	}
	for (unsigned i = 1; i <= b1; i++)
		pthread_join(p[i].th, NULL);
	t_iogate_set(true);
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	printf("budget-burst: after burst 1 (%u threads, all ended): "
	       "refills_waited %" PRIu64 " refills_ahead %" PRIu64
	       " threads_attached %" PRIu64 "\n", b1, st.refills_waited,
	       st.refills_ahead, st.threads_attached);

	/* Burst 2: b2 threads that hold their rings at once. */
	t_iogate_bump(0);
	for (unsigned i = 1 + b1; i < n; i++) {
		st_log_init(&p[i].log, i, 0);
		T_REQUIRE(st_thread_create(&p[i].th, burst_producer, &p[i]) ==
			  0);
	}
	T_CHECK(t_iogate_wait(&t_iogate.count, b2, 60) >= b2);
	st_gate_open(&hold);
	for (unsigned i = 1 + b1; i < n; i++)
		pthread_join(p[i].th, NULL);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	for (unsigned i = 0; i < n; i++) {
		tot.ok += p[i].log.ok;
		tot.enomem += p[i].log.enomem;
	}
	printf("budget-burst: burst 2 (%u threads at once): %" PRIu64
	       " -ENOMEM; refills_ahead %" PRIu64 "\n", b2, tot.enomem,
	       st.refills_ahead);
	/* b2 rings of 64 KiB (the adaptive minimum) fit 512 MiB many times. */
	T_CHECK_EQ(tot.enomem, 0);
	T_CHECK_EQ(tot.ok, n);
	T_CHECK_EQ(st.refused_nomem, 0);
	finish("budget-burst", path, p, n, &st, n);
}

int main(int argc, char **argv)
{
	/*
	 * Six producers: fewer than the 8 rings the pool starts with, so
	 * drop-lossless never depends on a refill while the flusher is stalled
	 * (attach-stall is about exactly that).
	 */
	opts = (struct st_opts){ .threads = 6, .count = 64, .entries = 500 };
	st_setup(argc, argv, &opts, "stress_drop");
	spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG, "" };
	T_REQUIRE(opts.threads > 0);
	/* Set before any flusher thread exists (see testpoint.h). */
	jitring_io_hook = t_iogate_pwritev;

	if (!strcmp(opts.mode, "attach-stall")) {
		phase_attach_stall();
	} else if (!strcmp(opts.mode, "budget-burst")) {
		phase_budget_burst();
	} else if (!opts.mode[0] || !strcmp(opts.mode, "drop-lossless")) {
		phase_drop();
		phase_lossless();
	} else {
		fprintf(stderr, "unknown --mode %s\n", opts.mode);
		return T_EXIT_FAIL;
	}
	jitring_io_hook = NULL;
	/* The summary line comes last. */
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}

#else /* !JITRING_TESTPOINTS */

int main(int argc, char **argv)
{
	opts = (struct st_opts){ .threads = 8 };
	st_setup(argc, argv, &opts, "stress_drop");
	st_cleanup(&opts, true);
	(void)jr;
	(void)spec;
	t_skip("needs -Dtestpoints=true (jitring_io_hook)");
	return T_EXIT_SKIP;
}

#endif
