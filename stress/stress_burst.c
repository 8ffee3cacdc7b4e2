/* SPDX-License-Identifier: MIT */
/*
 * Bursts: --threads N threads sit idle at a barrier, then all start at
 * once and each writes --entries E entries as fast as it can, then all go
 * idle again; --count B bursts (or bursts until --seconds S have passed).
 *
 * Between bursts the main thread waits a gap drawn from the seed (0-20 ms;
 * on long runs every fifth gap is 1.2 s, longer than the rings engine's
 * one-second idle trim, so the next burst lands on rings whose pages were
 * dropped).  In one burst in four, drawn from the seed, every thread calls
 * jitring_thread_detach() after its entries, so the next burst is also a
 * burst of N registrations at once (the attach path and the pool refill).
 *
 * After each burst, with every thread idle: jitring_flush() returns 0 and
 * entries_written equals the writes that returned a code_index so far
 * (exact, the writer is quiescent).  At the end, after jitring_close():
 * the full verifier (stress_common.h): every write that returned a
 * code_index is in the file once, in per-thread order, with its tid and
 * shape; sorted; counters equal what the threads saw.  Lossless mode: every
 * write must succeed.
 *
 * Usage: stress_burst [--threads N] [--entries E] [--count B] [--seconds S]
 *	[--seed X] [--engine rings|mutex] [--dir D]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "stress_common.h"

static struct jitring *jr;
static struct st_opts opts;
static struct st_spec spec;
static pthread_barrier_t start_line, finish_line;
static _Atomic bool done;
static _Atomic bool detach_now; /* this burst ends with a detach */
static _Atomic uint64_t failures;

static void *worker(void *arg)
{
	struct st_log *log = arg;

	for (;;) {
		pthread_barrier_wait(&start_line);
		if (atomic_load(&done))
			break;
		for (uint64_t k = 0; k < opts.entries; k++)
			if (st_write(jr, &spec, log) <= 0)
				atomic_fetch_add(&failures, 1);
		if (atomic_load(&detach_now))
			jitring_thread_detach(jr);
		pthread_barrier_wait(&finish_line);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log *logs, **lp;
	struct st_totals tot;
	struct st_vout out = { 0 };
	pthread_t *th;
	uint64_t t0, deadline = 0, bursts = 0, detaches = 0, long_gaps = 0;
	uint64_t r, bad_flush = 0, bad_count = 0, max_burst_ns = 0;
	unsigned created = 0;
	char path[4200];

	opts = (struct st_opts){ .threads = 256, .entries = 4, .count = 20 };
	st_setup(argc, argv, &opts, "stress_burst");
	T_REQUIRE(opts.threads > 0 && opts.entries > 0);
	spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG | ST_F_JUMBO,
				 "" };

	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	cfg.flags = JITRING_F_WRITE_CLOSE;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(opts.dir, getpid(), path, sizeof(path));

	logs = calloc(opts.threads, sizeof(*logs));
	lp = calloc(opts.threads, sizeof(*lp));
	th = calloc(opts.threads, sizeof(*th));
	T_REQUIRE(logs && lp && th);
	for (unsigned i = 0; i < opts.threads; i++) {
		st_log_init(&logs[i], i,
			    opts.seconds > 0 ? 0 : opts.entries * opts.count);
		lp[i] = &logs[i];
	}
	T_REQUIRE(pthread_barrier_init(&start_line, NULL, opts.threads + 1) ==
		  0);
	T_REQUIRE(pthread_barrier_init(&finish_line, NULL, opts.threads + 1) ==
		  0);
	for (; created < opts.threads; created++)
		if (st_thread_create(&th[created], worker, &logs[created]))
			break;
	T_REQUIRE(created == opts.threads);

	t0 = st_now_ns();
	if (opts.seconds > 0)
		deadline = t0 + (uint64_t)(opts.seconds * 1e9);
	st_progress_start(&opts, "entries", lp, created);
	r = st_mix(opts.seed ^ 0xb1a57);
	for (;;) {
		uint64_t gap, b0, ok;

		if (deadline ? st_now_ns() >= deadline : bursts >= opts.count)
			break;
		r = st_mix(r);
		/* Idle: every thread waits at the start line. */
		gap = r % 20000000u;
		if (opts.seconds > ST_LONG_SECONDS && bursts % 5 == 4) {
			gap = 1200000000u;
			long_gaps++;
		}
		t_sleep_ns(gap);
		atomic_store(&detach_now, (r >> 40) % 4 == 0);
		detaches += atomic_load(&detach_now);
		/* All at once. */
		b0 = st_now_ns();
		pthread_barrier_wait(&start_line);
		pthread_barrier_wait(&finish_line);
		if (st_now_ns() - b0 > max_burst_ns)
			max_burst_ns = st_now_ns() - b0;
		bursts++;

		/* Quiescent: the flush covers everything, exactly. */
		if (jitring_flush(jr) != 0)
			bad_flush++;
		jitring_stats(jr, &st);
		st_totals(lp, created, &tot);
		ok = tot.ok;
		if (st.entries_written != ok) {
			if (bad_count++ < 5)
				fprintf(stderr, "after burst %" PRIu64
					": entries_written %" PRIu64
					", %" PRIu64 " writes returned a "
					"code_index\n", bursts,
					st.entries_written, ok);
		}
	}
	atomic_store(&done, true);
	pthread_barrier_wait(&start_line);
	for (unsigned i = 0; i < created; i++)
		pthread_join(th[i], NULL);
	st_progress_stop();

	T_CHECK_EQ(jitring_close(jr), 0);
	jitring_stats(jr, &st);
	st_totals(lp, created, &tot);
	printf("%" PRIu64 " bursts of %u threads x %" PRIu64 " entries (%"
	       PRIu64 " ended with every thread detaching, %" PRIu64
	       " after a 1.2 s idle gap): %" PRIu64 " entries; longest burst "
	       "%.1f ms; ring_full_waits %" PRIu64 ", refills_waited %"
	       PRIu64 ", threads_total %" PRIu64 "\n", bursts, created,
	       opts.entries, detaches, long_gaps, tot.ok,
	       (double)max_burst_ns / 1e6, st.ring_full_waits,
	       st.refills_waited, st.threads_total);
	T_CHECK_EQ(atomic_load(&failures), 0);
	T_CHECK_EQ(bad_flush, 0);
	T_CHECK_EQ(bad_count, 0);
	T_CHECK_EQ(tot.ok, tot.attempts);
	T_CHECK(bursts > 0);

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = created,
		.stats = &st,
		.engine = opts.engine,
		.out = &out,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	st_result("burst", opts.engine, created, st.entries_written,
		  out.verified, st.lost_io, bursts, t_failed == 0);

	pthread_barrier_destroy(&start_line);
	pthread_barrier_destroy(&finish_line);
	for (unsigned i = 0; i < created; i++)
		st_log_fini(&logs[i]);
	free(logs);
	free(lp);
	free(th);
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
