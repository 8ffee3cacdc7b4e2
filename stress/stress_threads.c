/* SPDX-License-Identifier: MIT */
/*
 * Many producers at once: --threads N threads (4096 in the registered run)
 * start together and each writes entries with unwinding information (the
 * host's frame-pointer preset), a line table on one in four and a >32 KiB
 * entry on one in ~1000 (the rings engine's out-of-ring path), as fast as
 * it can until it has written --entries K or --seconds S have passed.
 *
 * Then, after jitring_flush(): the dump holds exactly the writes that
 * returned a code_index, each once, with its thread's tid, in per-thread
 * order, in whole groups, sorted; the counters equal what the threads saw;
 * every ring was given back (threads_attached 0) and each thread took one
 * (threads_total).  After jitring_close() the same holds with the CLOSE
 * record last, and a write gets -ESHUTDOWN and is counted.
 *
 * Usage: stress_threads [--threads N] [--entries K] [--seconds S]
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

static struct jitring *jr;
static struct st_spec spec;
static struct st_gate go = ST_GATE_INIT;
static uint64_t deadline; /* written before the gate opens */
static uint64_t max_entries;

static void *producer(void *arg)
{
	struct st_log *log = arg;

	st_gate_wait(&go);
	for (;;) {
		if (max_entries && log->n >= max_entries)
			break;
		if (deadline && (log->n & 15) == 0 && st_now_ns() >= deadline)
			break;
		/* Lossless mode: anything but a code_index is a failure. */
		if (st_write(jr, &spec, log) <= 0)
			break;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct st_opts o = { .threads = 4096, .entries = 8 };
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log *logs, **lp, main_log;
	struct st_totals tot;
	pthread_t *tids;
	unsigned created = 0, used = 0;
	char path[4200];
	uint64_t t0, t1;
	int ret;

	st_setup(argc, argv, &o, "stress_threads");
	spec = (struct st_spec){ o.seed, ST_F_UNW | ST_F_DBG | ST_F_JUMBO,
				 "" };
	max_entries = o.entries;
	if (!max_entries && o.seconds <= 0)
		max_entries = 8;

	jitring_config_init(&cfg);
	cfg.engine = o.engine;
	cfg.dir = o.dir;
	cfg.flags = JITRING_F_WRITE_CLOSE;
	ret = jitring_open(&cfg, &jr);
	T_REQUIRE(ret == 0);
	st_dump_path(o.dir, getpid(), path, sizeof(path));

	logs = calloc(o.threads + 1, sizeof(*logs));
	lp = calloc(o.threads + 1, sizeof(*lp));
	tids = calloc(o.threads, sizeof(*tids));
	T_REQUIRE(logs && lp && tids);
	for (unsigned i = 0; i < o.threads; i++) {
		st_log_init(&logs[i], i, max_entries);
		lp[i] = &logs[i];
	}
	for (; created < o.threads; created++) {
		ret = st_thread_create(&tids[created], producer,
				       &logs[created]);
		if (ret) {
			fprintf(stderr, "pthread_create #%u: %s\n", created,
				strerror(ret));
			break;
		}
	}
	T_CHECK_EQ(created, o.threads);

	t0 = st_now_ns();
	if (o.seconds > 0)
		deadline = t0 + (uint64_t)(o.seconds * 1e9);
	st_progress_start(&o, "entries", lp, created);
	st_gate_open(&go);
	for (unsigned i = 0; i < created; i++)
		pthread_join(tids[i], NULL);
	t1 = st_now_ns();
	st_progress_stop();

	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	st_totals(lp, created, &tot);
	printf("%u threads wrote %" PRIu64 " entries in %.3f s (%.0f/s), "
	       "%" PRIu64 " ring-full waits\n",
	       created, tot.ok, (double)(t1 - t0) / 1e9,
	       (double)tot.ok * 1e9 / (double)(t1 - t0 + 1),
	       st.ring_full_waits);
	printf("results: %" PRIu64 " ok, %" PRIu64 " -EAGAIN, %" PRIu64
	       " -ESHUTDOWN, %" PRIu64 " -ENOMEM, %" PRIu64 " other; "
	       "refills waited %" PRIu64 " ahead %" PRIu64 "\n",
	       tot.ok, tot.eagain, tot.eshutdown, tot.enomem, tot.other,
	       st.refills_waited, st.refills_ahead);
	T_CHECK_EQ(tot.ok, tot.attempts);
	T_CHECK_EQ(tot.other + tot.eagain + tot.eshutdown + tot.enomem, 0);
	for (unsigned i = 0; i < created; i++)
		if (logs[i].n)
			used++;
	if (o.engine == JITRING_ENGINE_RINGS) {
		/* Every thread took one ring and gave it back at exit. */
		T_CHECK_EQ(st.threads_attached, 0);
		T_CHECK_EQ(st.threads_total, used);
	} else {
		T_CHECK_EQ(st.threads_total, 0);
	}

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = created,
		.stats = &st,
		.engine = o.engine,
	};
	T_CHECK_EQ(st_verify(&v), 0);

	/* Close; then the file ends with CLOSE and later writes are refused. */
	T_CHECK_EQ(jitring_close(jr), 0);
	st_log_init(&main_log, created, 0);
	lp[created] = &main_log;
	T_CHECK_EQ(st_write(jr, &spec, &main_log), -ESHUTDOWN);
	T_CHECK_EQ(jitring_close(jr), -EBADF);
	jitring_stats(jr, &st);
	v.nlogs = created + 1;
	T_CHECK_EQ(st_verify(&v), 0);
	st_result("threads", o.engine, created, st.entries_written,
		  t_failed ? 0 : st.entries_written, st.lost_io, 0,
		  t_failed == 0);
	{
		FILE *f = fopen(path, "rb");
		uint8_t tail[16];

		T_REQUIRE(f != NULL);
		T_CHECK(fseeko(f, -16, SEEK_END) == 0);
		T_CHECK(fread(tail, 1, 16, f) == 16);
		fclose(f);
		/* The last record is a bare CLOSE prefix: id 3, size 16. */
		T_CHECK(tail[0] == 3 && tail[4] == 16);
	}

	for (unsigned i = 0; i <= created; i++)
		st_log_fini(lp[i]);
	free(logs);
	free(lp);
	free(tids);
	/* The summary line comes last. */
	st_cleanup(&o, t_failed == 0);
	return t_report();
}
