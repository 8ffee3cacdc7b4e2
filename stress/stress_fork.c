/* SPDX-License-Identifier: MIT */
/*
 * Fork under load: --threads W writer threads keep writing while the main
 * thread, which writes too, forks --count K children one after another
 * (each fork happens while every writer is mid-stream, see QUOTA).
 *
 * Each child k writes entries named "child<k>_t<i>_s<j>": first from the
 * forking thread (which in the rings engine restarts the writer), then
 * from --alive M new threads (--entries E each), then again from the
 * forking thread; it flushes and closes, then verifies its own
 * jit-<childpid>.dump with the reader: header pid is the child's, every
 * accepted write is there exactly once with the child's pid and tid,
 * nothing else is (none of the parent's entries), sorted, whole groups,
 * and its counters match its own file.  It exits 0 on success.
 *
 * The parent checks every child exited 0, then stops its writers, flushes
 * and verifies its own dump: intact, every accepted write present, and no
 * entry whose name contains "child".
 *
 * Usage: stress_fork [--threads W] [--count K] [--alive M] [--entries E]
 *	[--seed X] [--engine rings|mutex] [--dir D]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "stress_common.h"

/*
 * Parent writers write at most QUOTA entries per fork "epoch": the main
 * thread starts an epoch, waits until every writer has written ACTIVE
 * entries in it (so each is mid-stream), and forks while they go on.  This
 * keeps them writing across every fork while bounding the dump's size.
 */
#define QUOTA 2000u
#define ACTIVE 16u

static struct jitring *jr;
static struct st_opts opts;
static struct st_spec parent_spec;
static struct st_gate go = ST_GATE_INIT;

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	_Atomic unsigned epoch;
	unsigned active; /* writers with ACTIVE entries in this epoch */
	_Atomic bool stop;
} ep = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false };

static void *parent_writer(void *arg)
{
	struct st_log *log = arg;
	unsigned my_epoch = 0;
	uint64_t in_epoch = 0;

	st_gate_wait(&go);
	while (!atomic_load(&ep.stop)) {
		unsigned e = atomic_load(&ep.epoch);

		if (e != my_epoch) {
			my_epoch = e;
			in_epoch = 0;
		}
		if (in_epoch >= QUOTA) {
			pthread_mutex_lock(&ep.lock);
			while (atomic_load(&ep.epoch) == my_epoch &&
			       !atomic_load(&ep.stop))
				pthread_cond_wait(&ep.cond, &ep.lock);
			pthread_mutex_unlock(&ep.lock);
			continue;
		}
		if (st_write(jr, &parent_spec, log) <= 0)
			break;
		if (++in_epoch == ACTIVE) {
			pthread_mutex_lock(&ep.lock);
			if (atomic_load(&ep.epoch) == my_epoch)
				ep.active++;
			pthread_cond_broadcast(&ep.cond);
			pthread_mutex_unlock(&ep.lock);
		}
	}
	return NULL;
}

/* Start a new epoch; false if the writers did not all get going. */
static bool epoch_next(unsigned writers)
{
	struct timespec ts;
	bool ok = true;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 60;
	pthread_mutex_lock(&ep.lock);
	ep.active = 0;
	atomic_fetch_add(&ep.epoch, 1);
	pthread_cond_broadcast(&ep.cond);
	while (ep.active < writers && ok)
		ok = pthread_cond_timedwait(&ep.cond, &ep.lock, &ts) == 0;
	ok = ep.active >= writers;
	pthread_mutex_unlock(&ep.lock);
	return ok;
}

static void writers_stop(void)
{
	pthread_mutex_lock(&ep.lock);
	atomic_store(&ep.stop, true);
	pthread_cond_broadcast(&ep.cond);
	pthread_mutex_unlock(&ep.lock);
}

/* ------------------------------------------------------------------ */
/* The child.                                                           */

struct child_ctx {
	const struct st_spec *spec;
	struct st_log *log;
};

static void *child_writer(void *arg)
{
	struct child_ctx *c = arg;

	for (uint64_t k = 0; k < opts.entries; k++)
		if (st_write(jr, c->spec, c->log) <= 0)
			break;
	return NULL;
}

static int child_main(unsigned k)
{
	char prefix[32];
	struct st_spec spec;
	struct st_log *logs, **lp;
	struct child_ctx *ctx;
	pthread_t *th;
	unsigned n = opts.alive + 1, fails = 0;
	unsigned created = 0;

	snprintf(prefix, sizeof(prefix), "child%u_", k);
	spec = (struct st_spec){ opts.seed ^ (k + 1), ST_F_UNW | ST_F_DBG,
				 prefix };
	logs = calloc(n, sizeof(*logs));
	lp = calloc(n, sizeof(*lp));
	ctx = calloc(n, sizeof(*ctx));
	th = calloc(n, sizeof(*th));
	if (!logs || !lp || !ctx || !th)
		return 1;
	for (unsigned i = 0; i < n; i++) {
		st_log_init(&logs[i], i, 0);
		lp[i] = &logs[i];
		ctx[i] = (struct child_ctx){ &spec, &logs[i] };
	}
	/* The forking thread first: its parent ring is not its own here. */
	for (unsigned j = 0; j < 8; j++)
		st_write(jr, &spec, &logs[0]);
	for (unsigned i = 1; i < n; i++, created++)
		if (st_thread_create(&th[i], child_writer, &ctx[i]))
			break;
	for (unsigned i = 1; i <= created; i++)
		pthread_join(th[i], NULL);
	for (unsigned j = 0; j < 8; j++)
		st_write(jr, &spec, &logs[0]);

	if (created != opts.alive) {
		fprintf(stderr, "child %u: created %u threads\n", k, created);
		fails++;
	}
	{
		char who[32];

		snprintf(who, sizeof(who), "child %u", k);
		fails += st_child_finish(jr, who, opts.dir, &spec, lp, n,
					 opts.engine);
	}
	for (unsigned i = 0; i < n; i++)
		st_log_fini(&logs[i]);
	free(logs);
	free(lp);
	free(ctx);
	free(th);
	fflush(stdout);
	fflush(stderr);
	return fails ? 1 : 0;
}

/* ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log *logs, **lp;
	struct st_totals tot;
	pthread_t *threads;
	unsigned created = 0, nlogs, children_ok = 0;
	char path[4200];

	opts = (struct st_opts){ .threads = 8, .count = 8, .alive = 4,
				 .entries = 200 };
	st_setup(argc, argv, &opts, "stress_fork");
	parent_spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG, "" };

	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(opts.dir, getpid(), path, sizeof(path));

	/* Thread numbers 0..W-1 are the writers, W the main thread. */
	nlogs = opts.threads + 1;
	logs = calloc(nlogs, sizeof(*logs));
	lp = calloc(nlogs, sizeof(*lp));
	threads = calloc(opts.threads ? opts.threads : 1, sizeof(*threads));
	T_REQUIRE(logs && lp && threads);
	/*
	 * Logs big enough for the whole run: no thread of the parent may be
	 * inside malloc when another forks (clang 14's ASan allocator is not
	 * fork-safe; a child would inherit its lock held).
	 */
	for (unsigned i = 0; i < nlogs; i++) {
		st_log_init(&logs[i], i,
			    (uint64_t)QUOTA * (opts.count + 1) + 1);
		T_REQUIRE(logs[i].ret != NULL);
		lp[i] = &logs[i];
	}
	for (; created < opts.threads; created++)
		if (st_thread_create(&threads[created], parent_writer,
				     &logs[created]))
			break;
	T_REQUIRE(created == opts.threads);
	st_gate_open(&go);

	for (unsigned k = 0; k < opts.count; k++) {
		pid_t pid;
		int status = 0;

		/* Fork while every writer is in the middle of its stream. */
		T_CHECK(epoch_next(created));

		for (unsigned j = 0; j < 4; j++)
			T_CHECK(st_write(jr, &parent_spec, &logs[created]) > 0);
		fflush(stdout);
		fflush(stderr);
		pid = fork();
		T_REQUIRE(pid >= 0);
		if (pid == 0)
			exit(child_main(k));
		T_CHECK_EQ(waitpid(pid, &status, 0), pid);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			children_ok++;
		else
			fprintf(stderr, "child %u (pid %d): status %#x\n", k,
				(int)pid, status);
	}
	T_CHECK_EQ(children_ok, opts.count);

	writers_stop();
	for (unsigned i = 0; i < created; i++)
		pthread_join(threads[i], NULL);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	st_totals(lp, nlogs, &tot);
	printf("parent: %u writers wrote %" PRIu64 " entries around %u "
	       "forks\n", created, tot.ok, children_ok);
	T_CHECK_EQ(tot.ok, tot.attempts);

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &parent_spec,
		.logs = lp,
		.nlogs = nlogs,
		.forbid = "child",
		.stats = &st,
		.engine = opts.engine,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	/* Faults: the forks (each child verified its own dump). */
	st_result("fork-under-load", opts.engine, created + 1,
		  st.entries_written, t_failed ? 0 : st.entries_written,
		  st.lost_io, children_ok, t_failed == 0);

	for (unsigned i = 0; i < nlogs; i++)
		st_log_fini(&logs[i]);
	free(logs);
	free(lp);
	free(threads);
	/* The summary line comes last. */
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
