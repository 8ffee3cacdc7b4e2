/* SPDX-License-Identifier: MIT */
/*
 * exit(3) while threads write.  The parent runs --count K rounds.  Each
 * round it forks a child that opens a writer (ring size and max_delay_ms
 * drawn from the seed) and starts --threads N producers writing in
 * lossless mode as fast as they can, up to --entries K each.  The child's
 * main thread waits until every producer has had a number of writes
 * return (drawn from the seed, at most half of --entries, so all of them
 * are still writing), reads each producer's count of returned writes
 * (acquire) and calls exit(0) (which is what returning from main does),
 * without closing the writer.  The library's atexit handler is all that
 * stands between the producers' rings and the file.
 *
 * The parent then checks the child's jit-<childpid>.dump with the verifier
 * (stress_common.h):
 *  - jitring_check(JITRING_CHECK_SORTED), without
 *    JITRING_CHECK_ALLOW_TRUNCATED: the file is whole, ending on a record
 *    boundary after a whole group;
 *  - every CODE_LOAD is one the child wrote, once, with the code_index its
 *    write returned, in per-thread order (the logs live in a MAP_SHARED
 *    mapping made before the fork; a producer may have been stopped by
 *    the process's end between its write's return and its log);
 *  - every write that had returned before exit() began is there.
 * The child must end with status 0 (ASan's leak check runs in it), and
 * producers may see only code_index values and -ESHUTDOWN (the writer
 * closed by the exit).  Nothing here waits by sleeping: the main thread
 * waits on the producers' counters.
 *
 * Usage: stress_exit [--threads N] [--entries K] [--count K]
 *	[--seconds S] [--seed X] [--engine rings|mutex] [--dir D]
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "reader.h"
#include "stress_common.h"

#define MAX_THREADS 64u

struct shared {
	_Atomic int opened;
	_Atomic int bad; /* a write returned what it must not */
	_Atomic int64_t bad_ret;
	_Atomic int exiting;
	uint64_t must[MAX_THREADS];
	struct st_log logs[MAX_THREADS];
	int64_t ret[]; /* threads * entries */
};

static struct st_opts opts;
static struct shared *sh;
static size_t sh_size;
static struct jitring *jr;
static struct st_spec spec;

/* ------------------------------------------------------------------ */
/* The child.                                                           */

static void *producer(void *arg)
{
	struct st_log *log = arg;

	while (log->n < log->cap) {
		/* Publishes done (release) for the main thread's count. */
		int64_t ret = st_write(jr, &spec, log);

		if (ret == -ESHUTDOWN && atomic_load(&sh->exiting))
			break;
		if (ret <= 0) {
			atomic_store(&sh->bad_ret, ret);
			atomic_store(&sh->bad, 1);
			break;
		}
	}
	for (;;)
		pause();
	return NULL;
}

static void child_main(uint64_t seed)
{
	struct jitring_config cfg;
	pthread_t t;
	uint64_t r = st_mix(seed ^ 0xe817);
	uint64_t target = 1 + (r >> 16) % (opts.entries / 2);
	static const uint32_t rings[] = { 0, 4096, 65536, 1u << 20 };

	/* Never outlive the parent's patience. */
	alarm(120);
	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	cfg.ring_size = rings[r % 4];
	cfg.max_delay_ms = 1 + (uint32_t)((r >> 8) % 40);
	if (jitring_open(&cfg, &jr))
		_exit(3);
	atomic_store(&sh->opened, 1);
	for (unsigned i = 0; i < opts.threads; i++)
		if (st_thread_create(&t, producer, &sh->logs[i]))
			_exit(4);
	/* Until every producer has had @target writes return. */
	for (unsigned i = 0; i < opts.threads; i++)
		while (atomic_load_explicit(&sh->logs[i].done,
					    memory_order_acquire) < target &&
		       !atomic_load(&sh->bad))
			sched_yield();
	for (unsigned i = 0; i < opts.threads; i++)
		sh->must[i] = atomic_load_explicit(&sh->logs[i].done,
						   memory_order_acquire);
	atomic_store(&sh->exiting, 1);
	exit(0);
}

/* ------------------------------------------------------------------ */
/* The parent.                                                          */

struct totals {
	uint64_t rounds, present, verified, must, after;
};

static unsigned round_run(unsigned k, struct totals *tot)
{
	uint64_t seed = st_mix(opts.seed ^ ((uint64_t)k << 20));
	struct st_log *lp[MAX_THREADS];
	struct st_vout out = { 0 };
	char path[4300];
	unsigned fails = 0;
	int status = 0;
	pid_t pid;

	memset(sh, 0, sh_size);
	for (unsigned i = 0; i < opts.threads; i++) {
		st_log_init(&sh->logs[i], i, 0);
		sh->logs[i].ret = sh->ret + (size_t)i * opts.entries;
		sh->logs[i].cap = opts.entries;
		lp[i] = &sh->logs[i];
	}
	spec = (struct st_spec){ seed, ST_F_UNW | ST_F_DBG, "" };

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0)
		child_main(seed);
	if (waitpid(pid, &status, 0) != pid) {
		perror("waitpid");
		return 1;
	}
	st_dump_path(opts.dir, pid, path, sizeof(path));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "round %u: the child ended with status %#x\n",
			k, status);
		fails++;
	}
	if (atomic_load(&sh->bad)) {
		fprintf(stderr, "round %u: a write returned %" PRId64 "\n", k,
			atomic_load(&sh->bad_ret));
		fails++;
	}
	tot->rounds++;
	if (atomic_load(&sh->opened)) {
		struct st_verify v = {
			.path = path,
			.pid = (uint32_t)pid,
			.spec = &spec,
			.logs = lp,
			.nlogs = opts.threads,
			.engine = opts.engine,
			.quiet = true,
			.check_flags = JITRING_CHECK_SORTED,
			.must = sh->must,
			.inflight_ok = true,
			.out = &out,
		};

		fails += (unsigned)st_verify(&v);
		tot->present += out.present;
		tot->verified += out.verified;
		tot->must += out.must_checked;
		tot->after += out.present > out.must_checked ?
				      out.present - out.must_checked :
				      0;
	}
	if (fails)
		fprintf(stderr, "round %u (seed %" PRIu64 ", child %d): %u "
			"failures; dump kept: %s\n", k, seed, (int)pid, fails,
			path);
	else
		unlink(path);
	return fails;
}

int main(int argc, char **argv)
{
	struct totals tot = { 0 };
	uint64_t t0, deadline = 0;
	unsigned fails = 0, failed_rounds = 0;

	opts = (struct st_opts){ .threads = 8, .entries = 4000, .count = 100 };
	st_setup(argc, argv, &opts, "stress_exit");
	T_REQUIRE(opts.threads > 0 && opts.threads <= MAX_THREADS);
	T_REQUIRE(opts.entries > 1);
	sh_size = sizeof(*sh) +
		  sizeof(int64_t) * (size_t)opts.threads * opts.entries;
	sh = mmap(NULL, sh_size, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	T_REQUIRE(sh != MAP_FAILED);

	t0 = st_now_ns();
	if (opts.seconds > 0)
		deadline = t0 + (uint64_t)(opts.seconds * 1e9);
	for (unsigned k = 0;; k++) {
		unsigned f;

		if (deadline ? st_now_ns() >= deadline : k >= opts.count)
			break;
		f = round_run(k, &tot);
		fails += f;
		failed_rounds += f != 0;
	}
	printf("%" PRIu64 " exits with %u writing threads, %u failed: %" PRIu64
	       " entries found and verified, %" PRIu64 " writes returned "
	       "before exit() (all present), %" PRIu64 " more written "
	       "after it began\n",
	       tot.rounds, opts.threads, failed_rounds, tot.verified, tot.must,
	       tot.after);
	T_CHECK_EQ(fails, 0);
	T_CHECK(tot.must > 0);
	st_result("exit", opts.engine, opts.threads, tot.present, tot.verified,
		  0, tot.rounds, t_failed == 0);
	munmap(sh, sh_size);
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
