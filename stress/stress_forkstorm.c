/* SPDX-License-Identifier: MIT */
/*
 * Fork storm under load: --threads W writer threads keep writing (bursts
 * of 8 entries, 2 ms apart) while --alive M forking threads fork --count C
 * children between them, concurrently (M forks can be in flight at once,
 * and each forking thread forks its next child as soon as the previous one
 * exits).  Stops after C children or --seconds S.
 *
 * Each child k (named "child<k>_"): writes from the thread that forked it
 * (the only thread of the child at first), starts 3 threads that each
 * write one entry (taking a ring) and then --entries E more; one child in
 * four, drawn from the seed, forks a grandchild ("child<k>g_") while those
 * threads write, which does the same in its own dump and verifies it (a
 * child that did exits 2, one that did not 0).  The child then flushes,
 * closes and verifies its own jit-<childpid>.dump with the reader: header
 * pid is its own, every accepted write is there exactly once with its pid
 * and tid, nothing of the parent's (or of the grandchild's) is, sorted,
 * whole groups, counters equal its own file.  It exits 0 on success.
 *
 * The parent checks every child exited 0, then stops its writers, flushes
 * and verifies its own dump: intact, every accepted write present, and no
 * entry whose name contains "child".
 *
 * No thread calls malloc, starts or exits while another thread of its
 * process may fork: clang 14's ASan allocator is not fork-safe (a child
 * inherits its lock held; a thread that exits drains its allocator cache
 * under that lock), see stress_fork.c.  So: logs are sized up front, no
 * jumbo entries; rings have a fixed size (a full ring waits, it never
 * grows, and a ring the producer would make itself allocates); writers
 * take their ring before the first fork; forking threads wait for each
 * other before they exit; a child's writers have taken their rings before
 * it forks a grandchild, write a bounded number of entries during the
 * fork, and exit only after it.
 *
 * Usage: stress_forkstorm [--threads W] [--alive M] [--count C]
 *	[--entries E] [--seconds S] [--seed X] [--engine rings|mutex]
 *	[--dir D]
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

#define CHILD_THREADS 3u

static struct jitring *jr;
static struct st_opts opts;
static struct st_spec parent_spec;
static struct st_gate go = ST_GATE_INIT;
static _Atomic bool stop_writers;
static _Atomic uint64_t next_child;
static _Atomic uint64_t children_ok, children_bad, grandchildren;
static uint64_t deadline;

static _Atomic unsigned writers_ready;

/* Bursts of 8 writes and a 2 ms pause: load, without a huge dump. */
static void *parent_writer(void *arg)
{
	struct st_log *log = arg;
	struct timespec ts = { 0, 2000000 };

	/* Take the ring before anyone forks. */
	if (st_write(jr, &parent_spec, log) > 0)
		atomic_fetch_add(&writers_ready, 1);
	st_gate_wait(&go);
	while (!atomic_load(&stop_writers) && log->n < log->cap) {
		if (st_write(jr, &parent_spec, log) <= 0)
			break;
		if (log->n % 8 == 0)
			nanosleep(&ts, NULL);
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Children and grandchildren.                                          */

struct kid_ctx {
	const struct st_spec *spec;
	struct st_log *log;
	_Atomic unsigned *running; /* writers that wrote their first entry */
	_Atomic bool *go;          /* write the rest */
	_Atomic bool *forked;      /* the grandchild fork is done */
};

/*
 * One entry (which takes the ring), then --entries E more once the child
 * is about to fork (if it does), then wait until it has.
 */
static void *kid_writer(void *arg)
{
	struct kid_ctx *c = arg;
	struct timespec ts = { 0, 100000 };

	if (st_write(jr, c->spec, c->log) <= 0)
		return NULL;
	atomic_fetch_add(c->running, 1);
	while (!atomic_load(c->go))
		nanosleep(&ts, NULL);
	for (uint64_t k = 0; k < opts.entries; k++)
		if (st_write(jr, c->spec, c->log) <= 0)
			break;
	while (!atomic_load(c->forked))
		nanosleep(&ts, NULL);
	return NULL;
}

static int kid_main(const char *prefix, uint64_t seed, bool may_fork);

/* Fork a grandchild; returns its pid, or -1. */
static pid_t fork_grandchild(const char *prefix, uint64_t seed)
{
	char gprefix[48];
	pid_t pid;

	/* "child<k>_" -> "child<k>g_" */
	snprintf(gprefix, sizeof(gprefix), "%.*sg_",
		 (int)strlen(prefix) - 1, prefix);
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0)
		_exit(kid_main(gprefix, st_mix(seed ^ 0x9c), false));
	return pid;
}

static int kid_main(const char *prefix, uint64_t seed, bool may_fork)
{
	struct st_log logs[CHILD_THREADS + 1], *lp[CHILD_THREADS + 1];
	struct kid_ctx ctx[CHILD_THREADS + 1];
	pthread_t th[CHILD_THREADS + 1];
	struct st_spec spec = { seed, ST_F_UNW | ST_F_DBG, prefix };
	unsigned fails = 0, created = 0;
	bool will_fork = may_fork && st_mix(seed) % 4 == 0;
	_Atomic unsigned running = 0;
	_Atomic bool write_now = false, forked = !will_fork;
	pid_t gpid = -1;

	alarm(120);
	for (unsigned i = 0; i <= CHILD_THREADS; i++) {
		st_log_init(&logs[i], i, opts.entries + 16);
		lp[i] = &logs[i];
		ctx[i] = (struct kid_ctx){ &spec, &logs[i], &running,
					   &write_now, &forked };
	}
	/* The forking thread first: it restarts the writer in the child. */
	for (unsigned j = 0; j < 4; j++)
		if (st_write(jr, &spec, &logs[0]) <= 0)
			fails++;
	for (unsigned i = 1; i <= CHILD_THREADS; i++, created++)
		if (st_thread_create(&th[i], kid_writer, &ctx[i]))
			break;
	{
		struct timespec ts = { 0, 100000 };

		/* Every writer has its ring; let them write, and fork. */
		while (atomic_load(&running) < created)
			nanosleep(&ts, NULL);
		atomic_store(&write_now, true);
	}
	if (will_fork) {
#if T_ASAN
		/*
		 * The child's flusher started at its first write above; until
		 * it has run a round it may still be in ASan's own thread
		 * set-up, the allocator's lock held, which a grandchild forked
		 * now inherits held and hangs on (a grandchild with only its
		 * dump's header, killed by its alarm: 1 run in 43 at load 10).
		 * A flush returns after that round.
		 */
		if (jitring_flush(jr) < 0)
			fails++;
#endif
		gpid = fork_grandchild(prefix, seed);
		if (gpid < 0)
			fails++;
		atomic_store(&forked, true);
	}
	for (unsigned i = 1; i <= created; i++)
		pthread_join(th[i], NULL);
	for (unsigned j = 0; j < 4; j++)
		if (st_write(jr, &spec, &logs[0]) <= 0)
			fails++;
	if (created != CHILD_THREADS)
		fails++;
	if (gpid > 0) {
		int status = 0;

		if (waitpid(gpid, &status, 0) != gpid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			fprintf(stderr, "%s: grandchild %d: status %#x\n",
				prefix, (int)gpid, status);
			fails++;
		}
	}
	fails += st_child_finish(jr, prefix, opts.dir, &spec, lp,
				 CHILD_THREADS + 1, opts.engine);
	for (unsigned i = 0; i <= CHILD_THREADS; i++)
		st_log_fini(&logs[i]);
	fflush(stdout);
	fflush(stderr);
	return fails ? 1 : (gpid > 0 ? 2 : 0);
}

/* ------------------------------------------------------------------ */
/* Forking threads.                                                     */

static _Atomic unsigned forkers_busy;

/*
 * clang 14's ASan is not fork-safe once several threads of a process fork:
 * a child's new threads then hang now and then in ASan's allocator (in
 * free(), from ASan's own thread set-up), with or without jitring (a
 * 30-line program with four threads that fork and wait, whose children
 * start three threads, hangs in 23 runs of 40; with the fork() calls
 * serialised, 9 of 40; with one forking thread, 0 of 40).  Under ASan this
 * program therefore forks from one thread; children and grandchildren
 * still run while the parent's writers write.  Plain and TSan builds use
 * --alive forking threads.
 */

static void *forker(void *arg)
{
	struct timespec ts = { 0, 200000 };

	(void)arg;
	st_gate_wait(&go);
	for (;;) {
		uint64_t k = atomic_fetch_add(&next_child, 1);
		char prefix[32];
		int status = 0;
		pid_t pid;

		if (k >= opts.count || (deadline && st_now_ns() >= deadline))
			break;
		snprintf(prefix, sizeof(prefix), "child%" PRIu64 "_", k);
		pid = fork();
		if (pid < 0) {
			atomic_fetch_add(&children_bad, 1);
			break;
		}
		if (pid == 0)
			_exit(kid_main(prefix, st_mix(opts.seed ^ (k + 1)),
				       true));
		if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		    WEXITSTATUS(status) <= 2) {
			atomic_fetch_add(&children_ok, 1);
			if (WEXITSTATUS(status) == 2)
				atomic_fetch_add(&grandchildren, 1);
		} else {
			fprintf(stderr, "child %" PRIu64 " (pid %d): status "
				"%#x\n", k, (int)pid, status);
			atomic_fetch_add(&children_bad, 1);
		}
	}
	/* Exit only once nobody forks any more (see the top). */
	atomic_fetch_sub(&forkers_busy, 1);
	while (atomic_load(&forkers_busy))
		nanosleep(&ts, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct st_log *logs, **lp;
	struct st_totals tot;
	struct st_vout out = { 0 };
	pthread_t *wt, *ft;
	unsigned forked;
	char path[4200];
	uint64_t cap, t0;

	opts = (struct st_opts){ .threads = 8, .alive = 4, .count = 32,
				 .entries = 50 };
	st_setup(argc, argv, &opts, "stress_forkstorm");
	T_REQUIRE(opts.alive > 0);
#if T_ASAN
	if (opts.alive > 1) {
		printf("ASan build: one forking thread instead of %u "
		       "(clang 14's ASan is not fork-safe with several)\n",
		       opts.alive);
		opts.alive = 1;
	}
#endif
	if (opts.seconds > 0 && opts.count == 0)
		opts.count = UINT64_MAX;
	parent_spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG, "" };

	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	cfg.ring_size = 256u << 10; /* fixed: never grown (see the top) */
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	st_dump_path(opts.dir, getpid(), path, sizeof(path));

	/* Logs sized up front: no malloc in the parent during the storm. */
	cap = (uint64_t)(opts.seconds > 0 ? opts.seconds * 5000 : 100000) +
	      1000;
	logs = calloc(opts.threads, sizeof(*logs));
	lp = calloc(opts.threads, sizeof(*lp));
	wt = calloc(opts.threads + 1, sizeof(*wt));
	ft = calloc(opts.alive, sizeof(*ft));
	T_REQUIRE(logs && lp && wt && ft);
	for (unsigned i = 0; i < opts.threads; i++) {
		st_log_init(&logs[i], i, cap);
		T_REQUIRE(logs[i].ret != NULL);
		lp[i] = &logs[i];
	}
	for (unsigned i = 0; i < opts.threads; i++)
		T_REQUIRE(st_thread_create(&wt[i], parent_writer, &logs[i]) ==
			  0);
	atomic_store(&forkers_busy, opts.alive);
	for (unsigned i = 0; i < opts.alive; i++)
		T_REQUIRE(st_thread_create(&ft[i], forker, NULL) == 0);
	t0 = st_now_ns();
	if (opts.seconds > 0)
		deadline = t0 + (uint64_t)(opts.seconds * 1e9);
	while (atomic_load(&writers_ready) < opts.threads) {
		struct timespec ts = { 0, 1000000 };

		if (st_now_ns() - t0 > 60000000000ull)
			break;
		nanosleep(&ts, NULL);
	}
	T_REQUIRE(atomic_load(&writers_ready) == opts.threads);
	st_progress_start(&opts, "parent entries", lp, opts.threads);
	st_gate_open(&go);
	for (unsigned i = 0; i < opts.alive; i++)
		pthread_join(ft[i], NULL);
	atomic_store(&stop_writers, true);
	for (unsigned i = 0; i < opts.threads; i++)
		pthread_join(wt[i], NULL);
	st_progress_stop();

	forked = (unsigned)(atomic_load(&children_ok) +
			    atomic_load(&children_bad));
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	st_totals(lp, opts.threads, &tot);
	printf("%u forking threads forked %u children (%" PRIu64 " of them "
	       "also a grandchild) in %.2f s while %u writers wrote %" PRIu64
	       " entries\n", opts.alive, forked, atomic_load(&grandchildren),
	       (double)(st_now_ns() - t0) / 1e9, opts.threads, tot.ok);
	T_CHECK_EQ(atomic_load(&children_bad), 0);
	T_CHECK(forked > 0);
	T_CHECK_EQ(tot.ok, tot.attempts);

	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &parent_spec,
		.logs = lp,
		.nlogs = opts.threads,
		.forbid = "child",
		.stats = &st,
		.engine = opts.engine,
		.out = &out,
	};
	T_CHECK_EQ(st_verify(&v), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	st_result("fork-storm", opts.engine, opts.threads + opts.alive,
		  st.entries_written, out.verified, st.lost_io,
		  forked + atomic_load(&grandchildren), t_failed == 0);

	for (unsigned i = 0; i < opts.threads; i++)
		st_log_fini(&logs[i]);
	free(logs);
	free(lp);
	free(wt);
	free(ft);
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
