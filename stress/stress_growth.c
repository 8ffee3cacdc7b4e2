/* SPDX-License-Identifier: MIT */
/*
 * Ring growth under churn: waves of --threads N threads each write
 * --entries K CPython-shaped entries (enough for the rings engine to trade
 * each thread's ring for larger ones several times, with successors the
 * flusher makes ahead) and then end, so that the flusher keeps recycling
 * grown rings together with successors nobody took, while the next wave
 * grows its own.  --count waves, or until --seconds.
 *
 * This is the workload that found a use-after-free in the flusher's
 * recycling (removing an unused successor from the registry while walking
 * it); under ASan (make test-asan) a regression shows as a report.  Then
 * the usual verification: every write that returned a code_index is in the
 * dump once, in per-thread order, in whole groups, sorted, counters exact,
 * every ring given back.
 *
 * Usage: stress_growth [--threads N] [--entries K] [--count WAVES]
 *	[--seconds S] [--seed X] [--engine rings|mutex] [--dir D]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "stress_common.h"

static struct jitring *jr;
static struct st_spec spec;
static uint64_t max_entries;

static void *producer(void *arg)
{
	struct st_log *log = arg;

	while (log->n < max_entries)
		if (st_write(jr, &spec, log) <= 0)
			break;
	return NULL;
}

int main(int argc, char **argv)
{
	struct st_opts o = { .threads = 16, .entries = 3000, .count = 8 };
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log *logs, **lp;
	struct st_totals tot;
	pthread_t *tids;
	unsigned waves = 0, total = 0;
	char path[4200];
	uint64_t t0, deadline = 0;

	st_setup(argc, argv, &o, "stress_growth");
	spec = (struct st_spec){ o.seed, ST_F_UNW, "" };
	max_entries = o.entries ? o.entries : 3000;
	if (!o.count)
		o.count = 8;

	jitring_config_init(&cfg);
	cfg.engine = o.engine;
	cfg.dir = o.dir;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(o.dir, getpid(), path, sizeof(path));

	logs = calloc((size_t)o.threads * o.count, sizeof(*logs));
	lp = calloc((size_t)o.threads * o.count, sizeof(*lp));
	tids = calloc(o.threads, sizeof(*tids));
	T_REQUIRE(logs && lp && tids);
	t0 = st_now_ns();
	if (o.seconds > 0)
		deadline = t0 + (uint64_t)(o.seconds * 1e9);
	for (; waves < o.count; waves++) {
		unsigned created = 0;

		if (deadline && st_now_ns() >= deadline)
			break;
		for (; created < o.threads; created++) {
			struct st_log *l = &logs[total + created];

			st_log_init(l, total + created, max_entries);
			lp[total + created] = l;
			if (st_thread_create(&tids[created], producer, l))
				break;
		}
		T_CHECK_EQ(created, o.threads);
		for (unsigned i = 0; i < created; i++)
			pthread_join(tids[i], NULL);
		total += created;
	}

	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	st_totals(lp, total, &tot);
	printf("%u waves of %u threads wrote %" PRIu64 " entries in %.3f s; "
	       "rings grown %" PRIu64 ", ring-full waits %" PRIu64 "\n",
	       waves, o.threads, tot.ok, (double)(st_now_ns() - t0) / 1e9,
	       st.rings_grown, st.ring_full_waits);
	T_CHECK_EQ(tot.ok, tot.attempts);
	if (o.engine == JITRING_ENGINE_RINGS) {
		T_CHECK(st.rings_grown > 0);
		T_CHECK_EQ(st.threads_attached, 0);
		T_CHECK_EQ(st.threads_total, total);
	}

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = total,
		.stats = &st,
		.engine = o.engine,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	st_result("growth", o.engine, total, st.entries_written,
		  t_failed ? 0 : st.entries_written, st.lost_io, 0,
		  t_failed == 0);
	for (unsigned i = 0; i < total; i++)
		st_log_fini(lp[i]);
	free(logs);
	free(lp);
	free(tids);
	st_cleanup(&o, t_failed == 0);
	return t_report();
}
