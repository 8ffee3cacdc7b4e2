/* SPDX-License-Identifier: MIT */
/*
 * Thread churn: --count N threads (20,000 in the registered run) are
 * created and ended continuously, at most --alive A (64) at once.  Each
 * writes 1 to --entries K (4) entries, then, by a seeded choice:
 *   0: just exits (the thread-exit destructor detaches it);
 *   1: calls jitring_thread_detach(jr) and exits;
 *   2: calls jitring_thread_detach(NULL) and exits;
 *   3: calls jitring_thread_detach(jr), writes once more (which takes a
 *      new ring) and exits without detaching.
 * The rings are 4 KiB (ring_size 4096), so a ring leaked per thread, or
 * one kept per thread ever seen, shows up in the resident set.
 *
 * Checks: the dump holds exactly the writes that returned a code_index
 * (see stress_common.h); detach returns the number of rings the thread
 * held; after all threads ended and a flush, threads_attached is 0 and
 * threads_total equals the rings the threads took; and the resident set
 * after 100% of the churn is within a constant of the one after 10% (not
 * checked under sanitizers, whose own allocators grow with thread count).
 *
 * --seconds S, if given, stops creating threads after S seconds.
 *
 * Usage: stress_churn [--count N] [--alive A] [--entries K] [--seconds S]
 *	[--seed X] [--engine rings|mutex] [--dir D]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "stress_common.h"

/* Growth of the resident set allowed between 10% and 100% of the churn. */
#define RSS_MARGIN (16ull << 20)

static struct jitring *jr;
static struct st_spec spec;
static struct st_opts opts;

struct worker {
	struct st_log log;
	int detach_ret;   /* what jitring_thread_detach() returned, or -1 */
	int detach_want;
};

static struct worker *workers;

/* Finished threads, for the main thread to join. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint32_t *idx;
	uint64_t head, tail;
} done = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0 };

static void *churner(void *arg)
{
	uint32_t i = (uint32_t)(uintptr_t)arg;
	struct worker *w = &workers[i];
	uint64_t h = st_mix(spec.seed ^ 0xc4u ^ ((uint64_t)i << 20));
	unsigned n = 1 + (unsigned)(h % opts.entries);
	unsigned how = (unsigned)((h >> 16) % 4);

	w->detach_ret = -1;
	for (unsigned k = 0; k < n; k++)
		if (st_write(jr, &spec, &w->log) <= 0)
			break;
	w->log.attaches = w->log.ok ? 1 : 0;
	if (how == 1 || how == 3)
		w->detach_ret = jitring_thread_detach(jr);
	else if (how == 2)
		w->detach_ret = jitring_thread_detach(NULL);
	if (how)
		w->detach_want = opts.engine == JITRING_ENGINE_RINGS &&
				 w->log.ok ? 1 : 0;
	if (how == 3 && st_write(jr, &spec, &w->log) > 0)
		w->log.attaches++;

	pthread_mutex_lock(&done.lock);
	done.idx[done.tail++] = i;
	pthread_cond_signal(&done.cond);
	pthread_mutex_unlock(&done.lock);
	return NULL;
}

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log **lp;
	struct st_totals tot;
	pthread_t *threads;
	uint64_t created = 0, joined = 0, attaches = 0, deadline = 0;
	uint64_t rss10 = 0, rss_end, tenth, t0;
	unsigned alive = 0, max_alive = 0, bad_detach = 0;
	char path[4200];
	int ret;

	opts = (struct st_opts){ .count = 20000, .alive = 64, .entries = 4 };
	st_setup(argc, argv, &opts, "stress_churn");
	T_REQUIRE(opts.count > 0 && opts.count < UINT32_MAX && opts.alive > 0 &&
		  opts.entries > 0 && opts.entries + 1 <= ST_LOG_INLINE);
	spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG | ST_F_JUMBO,
				 "" };

	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	cfg.ring_size = 4096;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(opts.dir, getpid(), path, sizeof(path));

	/*
	 * Everything the test itself needs per thread is allocated and
	 * touched now, so the resident set only moves with the library.
	 */
	workers = calloc(opts.count, sizeof(*workers));
	lp = calloc(opts.count, sizeof(*lp));
	threads = calloc(opts.count, sizeof(*threads));
	done.idx = calloc(opts.count, sizeof(*done.idx));
	T_REQUIRE(workers && lp && threads && done.idx);
	memset(threads, 0, opts.count * sizeof(*threads));
	memset(done.idx, 0, opts.count * sizeof(*done.idx));
	for (uint64_t i = 0; i < opts.count; i++) {
		st_log_init(&workers[i].log, (unsigned)i, opts.entries + 1);
		lp[i] = &workers[i].log;
	}

	tenth = opts.count / 10 ? opts.count / 10 : 1;
	t0 = st_now_ns();
	if (opts.seconds > 0)
		deadline = t0 + (uint64_t)(opts.seconds * 1e9);
	st_progress_start(&opts, "entries", lp, (unsigned)opts.count);
	while (joined < created || created < opts.count) {
		uint32_t i;

		while (alive < opts.alive && created < opts.count &&
		       !(deadline && st_now_ns() >= deadline)) {
			ret = st_thread_create(&threads[created], churner,
					       (void *)(uintptr_t)created);
			if (ret) {
				fprintf(stderr, "pthread_create: %s\n",
					strerror(ret));
				break;
			}
			created++;
			alive++;
		}
		if (alive > max_alive)
			max_alive = alive;
		if (joined == created)
			break;
		pthread_mutex_lock(&done.lock);
		while (done.head == done.tail)
			pthread_cond_wait(&done.cond, &done.lock);
		i = done.idx[done.head++];
		pthread_mutex_unlock(&done.lock);
		/* Returns after the thread's TLS destructors ran. */
		pthread_join(threads[i], NULL);
		alive--;
		if (++joined == tenth)
			rss10 = t_rss_bytes();
	}
	st_progress_stop();
	if (created < opts.count && deadline && st_now_ns() >= deadline)
		printf("time limit: stopped after %" PRIu64 " threads\n",
		       created);
	else
		T_CHECK_EQ(created, opts.count);

	T_CHECK_EQ(jitring_flush(jr), 0);
	rss_end = t_rss_bytes();
	jitring_stats(jr, &st);
	st_totals(lp, (unsigned)created, &tot);
	for (uint64_t i = 0; i < created; i++) {
		attaches += workers[i].log.attaches;
		if (workers[i].detach_ret >= 0 &&
		    workers[i].detach_ret != workers[i].detach_want &&
		    bad_detach++ < 10)
			fprintf(stderr,
				"thread %" PRIu64 ": detach returned %d, want "
				"%d\n", i, workers[i].detach_ret,
				workers[i].detach_want);
	}
	printf("%" PRIu64 " threads (at most %u alive) wrote %" PRIu64
	       " entries in %.2f s; rss after 10%%: %.1f MiB, after 100%%: "
	       "%.1f MiB; threads_total %" PRIu64 "\n",
	       created, max_alive, tot.ok, (double)(st_now_ns() - t0) / 1e9,
	       (double)rss10 / 1048576.0, (double)rss_end / 1048576.0,
	       st.threads_total);
	T_CHECK_EQ(bad_detach, 0);
	T_CHECK_EQ(tot.ok, tot.attempts);
	T_CHECK(max_alive <= opts.alive);
	/* Every ring went back once its thread ended. */
	T_CHECK_EQ(st.threads_attached, 0);
	T_CHECK_EQ(st.threads_total,
		   opts.engine == JITRING_ENGINE_RINGS ? attaches : 0);
	if (T_SANITIZED) {
		printf("resident-set check skipped under a sanitizer\n");
	} else if (rss10 && created >= 10 * opts.alive) {
		T_CHECK(rss10 > 0 && rss_end > 0);
		if (rss_end > rss10 + RSS_MARGIN)
			fprintf(stderr, "resident set grew by %.1f MiB over "
				"%" PRIu64 " threads\n",
				(double)(rss_end - rss10) / 1048576.0,
				created - tenth);
		T_CHECK(rss_end <= rss10 + RSS_MARGIN);
	}

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = (unsigned)created,
		.stats = &st,
		.engine = opts.engine,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	st_result("churn", opts.engine, created, st.entries_written,
		  t_failed ? 0 : st.entries_written, st.lost_io, 0,
		  t_failed == 0);

	for (uint64_t i = 0; i < opts.count; i++)
		st_log_fini(&workers[i].log);
	free(workers);
	free(lp);
	free(threads);
	free(done.idx);
	/* The summary line comes last. */
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
