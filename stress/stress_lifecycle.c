/* SPDX-License-Identifier: MIT */
/*
 * Lifecycle races: rounds in which jitring_close() races every call the
 * concurrency table lets overlap it -- thread detach, thread exit, flush,
 * fork, and threads' first writes -- with the windows widened at random.
 *
 * Each round opens a writer in its own directory and starts --threads N
 * threads.  Each thread takes a seeded role:
 *   exit      writes, then exits (its TLS destructor lets go of the ring);
 *   detach    writes, detaches, writes again (a new ring), detaches;
 *   flush     writes and flushes in a loop;
 *   pause     pauses the engine (jitring_pause()) then writes,
 *             so the flusher stops and restarts under close and fork;
 *   first     waits until close is imminent, then makes its first write
 *             (ring attach races close);
 *   fork      writes, then forks: in the child two threads make their
 *             first writes (the engine restarts) while the child's main
 *             thread closes; the child checks its own dump and exits.
 * The main thread closes the writer once every thread but the "first"
 * ones has written --entries K, and releases the "first" threads just
 * before.  Every thread keeps calling until refused, then lets go its
 * role's way.
 *
 * With testpoints compiled in, a hook at close_closing, close_orphan,
 * fork_restart_enter, fork_restart, write_stamped and flusher_round yields
 * or spins for a random few microseconds, so each window is hit in many
 * interleavings (make test-asan / test-tsan run this under the
 * sanitizers, which turn a use-after-free or a race in these paths into a
 * failure).  A watchdog turns a hang into a failure.
 *
 * Checks per round: close returns 0; every result is a code_index or
 * -ESHUTDOWN (flush: 0 or -ESHUTDOWN); every write that returned a
 * code_index is in the dump exactly once, sorted, with its group intact
 * (st_verify); threads_attached is 0 once every thread is gone; each fork
 * child's dump checks out the same way and its close returns 0.
 *
 * Sanitizers are not fork-safe once several threads of a process run: a
 * child that allocates (or starts a thread) can hang on a lock of the
 * sanitizer's allocator that another parent thread held at the fork (seen
 * here with TSan in DenseSlabAlloc and with ASan in SizeClassAllocator64,
 * about one child in thirty; stress_forkstorm.c records the same for
 * ASan).  So in sanitized builds the child exits at once: the parent's
 * side of fork (atfork handlers against close, detach and flush) still
 * races, and test_lifecycle.c holds the child's close-vs-first-write
 * window open deterministically under both sanitizers.
 *
 * Usage: stress_lifecycle [--threads N] [--entries K] [--count ROUNDS]
 *	[--seconds S] [--seed X] [--engine rings|mutex] [--dir D]
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "stress_common.h"
#include "common/testpoint.h"

enum role { R_EXIT, R_DETACH, R_FLUSH, R_FIRST, R_FORK, R_PAUSE, R_NROLES };
static const char *const role_name[] = { "exit",  "detach", "flush",
					 "first", "fork",   "pause" };

static struct st_opts opts;
static struct st_spec spec;
static _Atomic(struct jitring *) cur;
static unsigned round_no;

struct worker {
	struct st_log log;
	enum role role;
	unsigned bad;     /* unexpected results */
	unsigned shutdown_refused; /* flush or pause: -ESHUTDOWN */
	unsigned child_fail;
	bool forked;
	pthread_t th;
};

/* Progress of a round: one lock, one condition. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned warmed;   /* workers past their first K writes */
	bool first_go;     /* "first" workers may write */
	bool closed;       /* close returned */
} rs = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false,
	 false };

static void rs_set(unsigned *counter, bool *flag)
{
	pthread_mutex_lock(&rs.lock);
	if (counter)
		(*counter)++;
	if (flag)
		*flag = true;
	pthread_cond_broadcast(&rs.cond);
	pthread_mutex_unlock(&rs.lock);
}

/* Wait for *flag (or *counter >= want); false after 60 s. */
static bool rs_wait(const unsigned *counter, unsigned want, const bool *flag)
{
	struct timespec ts;
	bool ok = true;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 60;
	pthread_mutex_lock(&rs.lock);
	while (ok && !(flag ? *flag : *counter >= want))
		ok = pthread_cond_timedwait(&rs.cond, &rs.lock, &ts) == 0;
	ok = flag ? *flag : *counter >= want;
	pthread_mutex_unlock(&rs.lock);
	return ok;
}

#ifdef JITRING_TESTPOINTS
static __thread uint64_t tl_rng;

/* Yield, spin a few microseconds, or go straight on. */
static void widen(const char *name, void *arg)
{
	uint64_t x;

	(void)name;
	(void)arg;
	if (!tl_rng)
		tl_rng = opts.seed ^ (uint64_t)(uintptr_t)&tl_rng;
	x = tl_rng = st_mix(tl_rng);
	switch (x & 3) {
	case 0:
		sched_yield();
		break;
	case 1: {
		uint64_t until = st_now_ns() + (x >> 8) % 20000;

		while (st_now_ns() < until)
			;
		break;
	}
	default:
		break;
	}
}
#endif

/* Write until refused; returns the number of accepted writes. */
static uint64_t write_until_refused(struct jitring *jr, struct worker *w,
				    uint64_t limit)
{
	uint64_t ok = 0;

	while (!limit || ok < limit) {
		int64_t r = st_write(jr, &spec, &w->log);

		if (r > 0) {
			ok++;
			continue;
		}
		if (r != -ESHUTDOWN)
			w->bad++;
		break;
	}
	return ok;
}

/* ------------------------------------------------------------------ */
/* A fork child: close races two first writes.                         */

struct child_writer {
	struct jitring *jr;
	struct st_log log;
	const struct st_spec *spec;
	unsigned bad;
	pthread_t th;
};

static void *child_writer_main(void *arg)
{
	struct child_writer *c = arg;

	for (int i = 0; i < 64; i++) {
		int64_t r = st_write(c->jr, c->spec, &c->log);

		if (r == -ESHUTDOWN)
			break;
		if (r <= 0)
			c->bad++;
	}
	return NULL;
}

static int child_main(struct jitring *jr, const char *dir, unsigned idx)
{
	struct child_writer cw[2];
	struct st_log *lp[2];
	char prefix[32];
	struct st_spec cspec;
	char path[4200];
	int ret, fails = 0;

	alarm(60); /* a hang is a failure, not a stuck suite */
	snprintf(prefix, sizeof(prefix), "c%u_%u_", round_no, idx);
	cspec = (struct st_spec){ opts.seed ^ idx, spec.flags, prefix };
	for (int i = 0; i < 2; i++) {
		cw[i].jr = jr;
		cw[i].spec = &cspec;
		cw[i].bad = 0;
		st_log_init(&cw[i].log, (unsigned)i, 0);
		lp[i] = &cw[i].log;
		if (st_thread_create(&cw[i].th, child_writer_main, &cw[i]))
			return 1;
	}
	/* Close while (or before) the first writes restart the engine. */
	ret = jitring_close(jr);
	/* A close the parent had begun before the fork leaves -EBADF. */
	if (ret && ret != -EBADF) {
		fprintf(stderr, "child: close %d\n", ret);
		fails++;
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(cw[i].th, NULL);
		fails += cw[i].bad;
	}
	st_dump_path(dir, getpid(), path, sizeof(path));
	if (ret == 0 && access(path, F_OK) == 0) {
		struct st_verify v = {
			.path = path,
			.pid = (uint32_t)getpid(),
			.spec = &cspec,
			.logs = lp,
			.nlogs = 2,
			.engine = opts.engine,
			.quiet = true,
		};
		fails += (int)st_verify(&v);
		unlink(path);
	}
	for (int i = 0; i < 2; i++)
		st_log_fini(&cw[i].log);
	return fails ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* Workers.                                                             */

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct jitring *jr = atomic_load(&cur);
	const uint64_t k = opts.entries;
	pid_t pid;
	int status;

	if (w->role == R_FIRST) {
		rs_set(&rs.warmed, NULL);
		if (!rs_wait(NULL, 0, &rs.first_go))
			w->bad++;
		write_until_refused(jr, w, 0);
		return NULL;
	}
	if (write_until_refused(jr, w, k) < k) {
		rs_set(&rs.warmed, NULL); /* refused early: close began */
		return NULL;
	}
	rs_set(&rs.warmed, NULL);
	switch (w->role) {
	case R_EXIT:
		write_until_refused(jr, w, 0);
		return NULL; /* the TLS destructor lets go */
	case R_DETACH:
		jitring_thread_detach(jr);
		write_until_refused(jr, w, 0);
		jitring_thread_detach(jr);
		return NULL;
	case R_PAUSE: {
		/* A pause (it may wait 50 ms for a quiet round while the
		 * others write; -EAGAIN if none came), then write (the
		 * next write starts the flusher again) until refused. */
		int ret = jitring_pause(jr);

		if (ret == -ESHUTDOWN)
			w->shutdown_refused++;
		else if (ret && ret != -EAGAIN)
			w->bad++;
		write_until_refused(jr, w, 0);
		return NULL;
	}
	case R_FLUSH:
		for (;;) {
			int ret = jitring_flush(jr);

			if (ret == -ESHUTDOWN) {
				w->shutdown_refused++;
				break;
			}
			if (ret)
				w->bad++;
			if (st_write(jr, &spec, &w->log) == -ESHUTDOWN)
				break;
		}
		return NULL;
	case R_FORK: {
		char dir[4200];

		snprintf(dir, sizeof(dir), "%s/r%u", opts.dir, round_no);
		fflush(stdout);
		pid = fork();
		if (pid == 0)
			_exit(T_SANITIZED ? 0 :
					     child_main(jr, dir, w->log.thread));
		if (pid < 0) {
			w->bad++;
			return NULL;
		}
		w->forked = true;
		write_until_refused(jr, w, 0);
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			fprintf(stderr, "round %u: fork child %s %d\n",
				round_no,
				WIFSIGNALED(status) ? "killed by" : "exit",
				WIFSIGNALED(status) ? WTERMSIG(status) :
						      WEXITSTATUS(status));
			w->child_fail++;
		}
		return NULL;
	}
	default:
		return NULL;
	}
}

/* One round; returns its failures. */
static unsigned run_round(uint64_t *written, unsigned *roles, unsigned *forks)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct jitring_config cfg;
	struct worker *w = calloc(opts.threads, sizeof(*w));
	struct st_log **lp = calloc(opts.threads, sizeof(*lp));
	struct jitring *jr = NULL;
	unsigned fails = 0, shutdown_refused = 0;
	char dir[4200], path[4300];
	int ret;

	T_REQUIRE(w && lp);
	snprintf(dir, sizeof(dir), "%s/r%u", opts.dir, round_no);
	T_REQUIRE(mkdir(dir, 0755) == 0);
	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = dir;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	atomic_store(&cur, jr);
	pthread_mutex_lock(&rs.lock);
	rs.warmed = 0;
	rs.first_go = rs.closed = false;
	pthread_mutex_unlock(&rs.lock);

	for (unsigned i = 0; i < opts.threads; i++) {
		uint64_t x = st_mix(opts.seed ^ ((uint64_t)round_no << 20) ^ i);

		w[i].role = (enum role)(x % R_NROLES);
		/* At most two forks a round: each costs a process. */
		if (w[i].role == R_FORK && forks[0]++ % 4 >= 2)
			w[i].role = R_EXIT;
		roles[w[i].role]++;
		st_log_init(&w[i].log, i, 0);
		lp[i] = &w[i].log;
		T_REQUIRE(st_thread_create(&w[i].th, worker_main, &w[i]) == 0);
	}
	/* Everyone has written K (or been refused); then close. */
	if (!rs_wait(&rs.warmed, opts.threads, NULL)) {
		fprintf(stderr, "round %u: workers did not warm up\n",
			round_no);
		fails++;
	}
	rs_set(NULL, &rs.first_go);
	ret = jitring_close(jr);
	if (ret) {
		fprintf(stderr, "round %u: close %d\n", round_no, ret);
		fails++;
	}
	rs_set(NULL, &rs.closed);
	for (unsigned i = 0; i < opts.threads; i++) {
		pthread_join(w[i].th, NULL);
		fails += w[i].bad + w[i].child_fail;
		shutdown_refused += w[i].shutdown_refused;
		forks[1] += w[i].forked;
	}
	jitring_stats(jr, &st);
	if (st.threads_attached) {
		fprintf(stderr, "round %u: threads_attached %" PRIu64 "\n",
			round_no, st.threads_attached);
		fails++;
	}
	st_dump_path(dir, getpid(), path, sizeof(path));
	struct st_verify v = {
		.path = path,
		.pid = (uint32_t)getpid(),
		.spec = &spec,
		.logs = lp,
		.nlogs = opts.threads,
		.stats = &st,
		/* Flushes refused with -ESHUTDOWN count there too. */
		.extra_shutdown = shutdown_refused,
		.engine = opts.engine,
		.quiet = true,
	};
	fails += (unsigned)st_verify(&v);
	*written += st.entries_written;
	if (!fails) {
		unlink(path);
		rmdir(dir);
	}
	for (unsigned i = 0; i < opts.threads; i++)
		st_log_fini(&w[i].log);
	free(w);
	free(lp);
	return fails;
}

int main(int argc, char **argv)
{
	unsigned roles[R_NROLES] = { 0 }, forks[2] = { 0, 0 };
	uint64_t written = 0, t0;
	unsigned fails = 0;

	opts = (struct st_opts){ .threads = 16, .entries = 8, .count = 40 };
	st_setup(argc, argv, &opts, "stress_lifecycle");
	spec = (struct st_spec){ opts.seed, ST_F_UNW | ST_F_DBG | ST_F_JUMBO,
				 "" };
	T_REQUIRE(opts.threads > 0);
#ifdef JITRING_TESTPOINTS
	atomic_store(&jitring_testpoint_hook, widen);
#else
	printf("testpoints not compiled in: windows are not widened\n");
#endif
	t0 = st_now_ns();
	for (round_no = 0;; round_no++) {
		if (opts.count && round_no >= opts.count)
			break;
		if (opts.seconds > 0 &&
		    (double)(st_now_ns() - t0) / 1e9 >= opts.seconds)
			break;
		fails += run_round(&written, roles, forks);
		if (opts.seconds > ST_LONG_SECONDS && round_no % 50 == 0)
			printf("[%3.0fs] round %u: %" PRIu64 " entries\n",
			       (double)(st_now_ns() - t0) / 1e9, round_no,
			       written);
	}
#ifdef JITRING_TESTPOINTS
	atomic_store(&jitring_testpoint_hook, NULL);
#endif
	printf("%u rounds of %u threads: %" PRIu64 " entries verified; roles",
	       round_no, opts.threads, written);
	for (int r = 0; r < R_NROLES; r++)
		printf(" %s %u", role_name[r], roles[r]);
	printf("; %u fork children\n", forks[1]);
	T_CHECK_EQ(fails, 0);
	st_result("lifecycle", opts.engine, (uint64_t)round_no * opts.threads,
		  written, fails ? 0 : written, 0, round_no + forks[1],
		  fails == 0);
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
