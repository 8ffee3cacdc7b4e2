/* SPDX-License-Identifier: MIT */
/*
 * Close under load: --threads N threads write in a loop while the main
 * thread calls jitring_close().
 *
 * The main thread closes once every producer has had at least --entries K
 * writes accepted, so the close really overlaps writes.  With testpoints
 * compiled in, close is additionally held at its "close_closing" testpoint
 * (state CLOSING, flusher still running) until every producer has been
 * refused at least once, so refusals that race the drain are exercised
 * deterministically, not just by luck.  Without testpoints the same test
 * runs without that hold.
 *
 * Producers keep writing until they have been refused, wait until close
 * has returned (so close must leave their rings to them), then make
 * --count C more calls (writes, a jitring_move() of their own last entry
 * and a jitring_flush()), all of which must return -ESHUTDOWN; then, by a
 * seeded choice, they call jitring_thread_detach() or just exit, so the
 * rings close left to live threads are freed by those threads (ASan checks
 * that nothing leaks and nothing is freed twice).
 *
 * Checks: close returns 0 and a second close -EBADF; every write that
 * returned a code_index is in the file and nothing refused is; every
 * refusal is -ESHUTDOWN; refused_shutdown counts exactly the refused
 * calls (writes, moves and flushes); once every thread is gone,
 * threads_attached is 0; the dump is sorted.
 *
 * Usage: stress_close [--threads N] [--entries K] [--count C] [--seed X]
 *	[--engine rings|mutex] [--dir D]
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
#include "common/testpoint.h"

static struct jitring *jr;
static struct st_spec spec;
static struct st_opts opts;
static struct st_gate go = ST_GATE_INIT;

struct producer {
	struct st_log log;
	uint64_t moves_refused;
	uint64_t flushes_refused;
	uint64_t bad;        /* results other than the expected ones */
	int detach_ret;
	bool detach;
};

static struct producer *prods;

/* Progress of the producers, for the main thread and the close hook. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned warmed;  /* producers with opts.entries accepted writes */
	unsigned refused; /* producers refused at least once */
	unsigned closed;  /* jitring_close() has returned */
} sync_ = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };

static void bump(unsigned *counter)
{
	pthread_mutex_lock(&sync_.lock);
	(*counter)++;
	pthread_cond_broadcast(&sync_.cond);
	pthread_mutex_unlock(&sync_.lock);
}

/* Wait until *counter reaches want; false after 60 s (a hang). */
static bool wait_for(const unsigned *counter, unsigned want)
{
	struct timespec ts;
	bool ok = true;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 60;
	pthread_mutex_lock(&sync_.lock);
	while (*counter < want && ok)
		ok = pthread_cond_timedwait(&sync_.cond, &sync_.lock, &ts) !=
		     ETIMEDOUT || *counter >= want;
	pthread_mutex_unlock(&sync_.lock);
	return ok;
}

#ifdef JITRING_TESTPOINTS
static void close_hook(const char *name, void *arg)
{
	/* Name first: other hooks run on the flusher, which must not read
	 * the global jr (written by the main thread after open started it). */
	if (strcmp(name, "close_closing") || arg != jr)
		return;
	/* State is CLOSING: hold close until everyone was turned away. */
	if (!wait_for(&sync_.refused, opts.threads))
		fprintf(stderr, "close_closing: producers were not refused\n");
}
#endif

static void *producer(void *arg)
{
	struct producer *p = arg;
	struct st_log *log = &p->log;
	uint64_t last_ok = 0;
	int64_t r;

	st_gate_wait(&go);
	for (;;) {
		r = st_write(jr, &spec, log);
		if (r > 0) {
			last_ok = (uint64_t)r;
			if (log->ok == opts.entries)
				bump(&sync_.warmed);
			continue;
		}
		if (r != -ESHUTDOWN)
			p->bad++;
		break;
	}
	if (log->ok < opts.entries)
		bump(&sync_.warmed); /* never warmed: do not hold main up */
	bump(&sync_.refused);
	/*
	 * Outlive the close, so that close has to leave our ring to us (the
	 * orphan path) instead of finding it detached.
	 */
	if (!wait_for(&sync_.closed, 1))
		p->bad++;

	/* After a refusal, everything is refused. */
	for (uint64_t k = 0; k < opts.count; k++) {
		int ret;

		switch (k % 3) {
		case 0:
			if (st_write(jr, &spec, log) != -ESHUTDOWN)
				p->bad++;
			break;
		case 1:
			ret = jitring_move(jr, last_ok ? last_ok : 1,
					   (const void *)(uintptr_t)0x1000,
					   (const void *)(uintptr_t)0x2000, 16);
			if (ret == -ESHUTDOWN)
				p->moves_refused++;
			else
				p->bad++;
			break;
		default:
			if (jitring_flush(jr) == -ESHUTDOWN)
				p->flushes_refused++;
			else
				p->bad++;
			break;
		}
	}
	if (p->detach)
		p->detach_ret = jitring_thread_detach(jr);
	return NULL;
}

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log **lp;
	struct st_totals tot;
	pthread_t *threads;
	uint64_t moves = 0, flushes = 0, bad = 0;
	unsigned created = 0;
	char path[4200];

	opts = (struct st_opts){ .threads = 64, .entries = 16, .count = 30 };
	st_setup(argc, argv, &opts, "stress_close");
	spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG, "" };
	T_REQUIRE(opts.threads > 0);

	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	cfg.flags = JITRING_F_WRITE_CLOSE;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(opts.dir, getpid(), path, sizeof(path));
#ifdef JITRING_TESTPOINTS
	atomic_store(&jitring_testpoint_hook, close_hook);
#else
	printf("testpoints not compiled in: close is not held at CLOSING\n");
#endif

	prods = calloc(opts.threads, sizeof(*prods));
	lp = calloc(opts.threads, sizeof(*lp));
	threads = calloc(opts.threads, sizeof(*threads));
	T_REQUIRE(prods && lp && threads);
	for (unsigned i = 0; i < opts.threads; i++) {
		st_log_init(&prods[i].log, i, 0);
		prods[i].detach = st_mix(opts.seed ^ i) & 1;
		prods[i].detach_ret = -1;
		lp[i] = &prods[i].log;
	}
	for (; created < opts.threads; created++)
		if (st_thread_create(&threads[created], producer,
				     &prods[created]))
			break;
	T_REQUIRE(created == opts.threads);
	st_gate_open(&go);

	/* Close while every producer is writing. */
	T_CHECK(wait_for(&sync_.warmed, opts.threads));
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(jitring_close(jr), -EBADF);
	bump(&sync_.closed);
	for (unsigned i = 0; i < created; i++)
		pthread_join(threads[i], NULL);
#ifdef JITRING_TESTPOINTS
	atomic_store(&jitring_testpoint_hook, NULL);
#endif

	jitring_stats(jr, &st);
	st_totals(lp, created, &tot);
	for (unsigned i = 0; i < created; i++) {
		moves += prods[i].moves_refused;
		flushes += prods[i].flushes_refused;
		bad += prods[i].bad;
		T_CHECK(prods[i].flushes_refused == opts.count / 3);
		/* The ring is the thread's until it detaches or exits. */
		if (prods[i].detach)
			T_CHECK(prods[i].detach_ret ==
				(opts.engine == JITRING_ENGINE_RINGS &&
				 prods[i].log.ok ? 1 : 0) ||
				prods[i].detach_ret == 0);
	}
	printf("%u threads: %" PRIu64 " writes accepted, %" PRIu64
	       " refused with -ESHUTDOWN, %" PRIu64 " moves refused; "
	       "threads_attached %" PRIu64 " threads_total %" PRIu64 "\n",
	       created, tot.ok, tot.eshutdown, moves, st.threads_attached,
	       st.threads_total);
	T_CHECK_EQ(bad, 0);
	T_CHECK_EQ(tot.other + tot.eagain + tot.enomem, 0);
	T_CHECK(tot.ok >= (uint64_t)opts.entries * created);
	T_CHECK_EQ(st.threads_attached, 0);

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = created,
		.stats = &st,
		/* "calls refused with -ESHUTDOWN": moves and flushes too. */
		.extra_shutdown = moves + flushes,
		.engine = opts.engine,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	/* Faults: the close racing the writers. */
	st_result("close-under-load", opts.engine, created, st.entries_written,
		  t_failed ? 0 : st.entries_written, st.lost_io, 1,
		  t_failed == 0);

	for (unsigned i = 0; i < created; i++)
		st_log_fini(&prods[i].log);
	free(prods);
	free(lp);
	free(threads);
	/* The summary line comes last. */
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
