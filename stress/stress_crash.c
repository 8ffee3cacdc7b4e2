/* SPDX-License-Identifier: MIT */
/*
 * SIGKILL at random points under load.  The parent runs --count K rounds
 * (or rounds until --seconds S have passed).  Each round it forks a writer
 * child and SIGKILLs it after a delay drawn from the seed: one round in
 * twenty within 0.3 ms of the fork and two more within 2 ms, so some kills
 * land during jitring_open() and the first registrations; the rest 2 to
 * 60 ms (300 ms on long runs) after the child's jitring_open() returned,
 * so that a slow open (3 ms here, 30 ms under TSan) does not turn them
 * into early kills too, and every fourth round (k % 4 == 1) as long
 * after its first completed jitring_flush() that covered a write, so that
 * every run checks writes a flush covered (an event, however slow the
 * child: a flush can complete before any producer has written).
 * Producers pace themselves (a pause of up to 0.2 ms every eighth write
 * or so), so most kills find them writing.
 *
 * The child opens a writer (ring size and max_delay_ms drawn from the
 * seed), starts --threads N producers that write up to --entries K entries
 * each in lossless mode, and --alive F threads (default 1) that call
 * jitring_flush() in a loop.  Everything the parent needs survives the
 * kill because it lives in a MAP_SHARED mapping made before the fork:
 *  - each producer's log (what every jitring_write() returned, see
 *    st_write(), which stores ret[seq] before n);
 *  - must[i]: how many of thread i's writes a completed flush covered: a
 *    flushing thread reads each producer's count of returned writes
 *    (acquire), calls jitring_flush(), and only if it returned 0 raises
 *    must[i] to that count;
 *  - whether jitring_open() had returned.
 *
 * The parent then checks the child's jit-<childpid>.dump with the
 * verifier (stress_common.h) in its crash mode:
 *  - jitring_check(JITRING_CHECK_SORTED | JITRING_CHECK_ALLOW_TRUNCATED):
 *    valid up to its last whole record, at most a truncated tail (or a
 *    last group cut at a record boundary);
 *  - the header carries the child's pid; every CODE_LOAD is one the child
 *    wrote, once, with the code_index its write returned (or the one write
 *    per thread the kill caught before it was logged), the thread's tid,
 *    its address, size, bytes, unwinding and line info, in per-thread
 *    order;
 *  - every write covered by a completed jitring_flush() is there.
 * A child killed before jitring_open() returned may leave no dump, an empty
 * one or a bare header; nothing else.  A child that exits by itself (it
 * found a write refused) fails the run.
 *
 * --mode exit: the child ends by exit(3) instead, while its producers
 * write (as fast as they can, no flushing threads): its main thread waits
 * until every producer has had a number of writes return (drawn from the
 * seed, at most half of --entries, so all are still writing), stores each
 * producer's count of returned writes (acquire) in must[i] and calls
 * exit(0), which is what returning from main does, without closing the
 * writer: the library's atexit handler is all that stands between the
 * rings and the file.  The parent waits for the child and checks:
 *  - it ended with status 0 (ASan's leak check runs in it), and its
 *    producers saw only code_index values and -ESHUTDOWN;
 *  - jitring_check(JITRING_CHECK_SORTED), without ALLOW_TRUNCATED: the
 *    dump is whole;
 *  - every CODE_LOAD is one the child wrote, once, in per-thread order
 *    (a producer may have been stopped between its write's return and
 *    its log), and every write that returned before exit() is there.
 * Nothing in it waits by sleeping: the main thread waits on counters.
 *
 * Usage: stress_crash [--threads N] [--entries K] [--count K] [--alive F]
 *	[--seconds S] [--seed X] [--engine rings|mutex] [--mode exit]
 *	[--dir D]
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "reader/reader.h"
#include "stress_common.h"

#define MAX_THREADS 256u

struct shared {
	_Atomic int opened;
	_Atomic int bad;         /* a write or flush the child did not expect */
	_Atomic int exiting;     /* --mode exit: exit() is about to begin */
	_Atomic uint64_t flushes_ok;
	_Atomic uint64_t flushes_covering; /* those that covered a write */
	_Atomic int64_t flush_err;
	uint64_t must[MAX_THREADS];
	struct st_log logs[MAX_THREADS];
	int64_t ret[]; /* threads * entries */
};

static struct st_opts opts;
static struct shared *sh;
static size_t sh_size;
static struct jitring *jr;
static struct st_spec spec;
static bool exit_mode;

/* ------------------------------------------------------------------ */
/* The child.                                                           */

static void *producer(void *arg)
{
	struct st_log *log = arg;
	uint64_t r = st_mix(spec.seed ^ log->thread);

	while (log->n < log->cap) {
		int64_t ret = st_write(jr, &spec, log);

		/* The atexit handler closed the writer. */
		if (ret == -ESHUTDOWN && atomic_load(&sh->exiting))
			break;
		if (ret <= 0) {
			atomic_store(&sh->bad, 1);
			break;
		}
		/* Now and then a pause, so the rings are not always full. */
		r = st_mix(r);
		if (!exit_mode && r % 8 == 0)
			t_sleep_ns((r >> 8) % 200000u);
	}
	for (;;)
		pause();
	return NULL;
}

static void *flusher(void *arg)
{
	uint64_t snap[MAX_THREADS];
	uint64_t r = st_mix(spec.seed ^ 0xf1u ^ (uintptr_t)arg);

	for (;;) {
		int ret;

		for (unsigned i = 0; i < opts.threads; i++)
			snap[i] = atomic_load_explicit(&sh->logs[i].done,
						       memory_order_acquire);
		ret = jitring_flush(jr);
		if (ret == 0) {
			static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
			bool covering = false;

			pthread_mutex_lock(&lock);
			for (unsigned i = 0; i < opts.threads; i++) {
				if (snap[i] > sh->must[i])
					sh->must[i] = snap[i];
				covering |= snap[i] > 0;
			}
			pthread_mutex_unlock(&lock);
			/* After must[]: the parent kills once it sees this. */
			if (covering)
				atomic_fetch_add(&sh->flushes_covering, 1);
			atomic_fetch_add(&sh->flushes_ok, 1);
		} else {
			atomic_store(&sh->flush_err, ret);
			atomic_store(&sh->bad, 1);
		}
		r = st_mix(r);
		t_sleep_ns(r % 2000000u);
	}
	return NULL;
}

/* --mode exit: once every producer has had @target writes return. */
static void exit_when(uint64_t target)
{
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

static int child_main(uint64_t seed)
{
	struct jitring_config cfg;
	pthread_t t;
	uint64_t r = st_mix(seed ^ 0xc0f1);
	static const uint32_t rings[] = { 0, 4096, 65536, 1u << 20 };

	/* Never outlive the parent's patience. */
	alarm(120);
	jitring_config_init(&cfg);
	cfg.engine = opts.engine;
	cfg.dir = opts.dir;
	cfg.ring_size = rings[r % 4];
	cfg.max_delay_ms = 1 + (uint32_t)((r >> 8) % 40);
	if (jitring_open(&cfg, &jr))
		return 3;
	atomic_store(&sh->opened, 1);
	for (unsigned i = 0; i < opts.threads; i++)
		if (st_thread_create(&t, producer, &sh->logs[i]))
			return 4;
	if (exit_mode)
		exit_when(1 + (r >> 16) % (opts.entries / 2));
	for (unsigned i = 0; i < opts.alive; i++)
		if (st_thread_create(&t, flusher, (void *)(uintptr_t)i))
			return 4;
	for (;;)
		pause();
	return 0;
}

/* ------------------------------------------------------------------ */
/* The parent.                                                          */

struct totals {
	uint64_t rounds, early, present, verified, must, lost, truncated;
	uint64_t cut_groups, flushes, bytes, failed;
};

/* A child killed before jitring_open() returned: no dump, or a bare one. */
static unsigned check_early(const char *path)
{
	struct jitring_check_result res;
	unsigned char hdr[64];
	struct stat sb;
	int fd;
	ssize_t n;

	if (stat(path, &sb))
		return errno == ENOENT ? 0 : 1;
	if (sb.st_size == 0)
		return 0;
	if (sb.st_size != 40) {
		fprintf(stderr, "%s: %lld bytes before open returned\n", path,
			(long long)sb.st_size);
		return 1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	n = pread(fd, hdr, sizeof(hdr), 0);
	close(fd);
	if (n != 40 || jitring_check(hdr, 40, JITRING_CHECK_SORTED, &res)) {
		fprintf(stderr, "%s: bad header\n", path);
		return 1;
	}
	return 0;
}

static unsigned round_run(unsigned k, struct totals *tot)
{
	uint64_t seed = st_mix(opts.seed ^ ((uint64_t)k << 20)), r;
	uint64_t max_ns = opts.seconds > ST_LONG_SECONDS ? 300000000u :
							   60000000u;
	uint64_t delay;
	struct st_log *lp[MAX_THREADS];
	struct st_vout out = { 0 };
	char path[4300];
	unsigned fails = 0;
	int status = 0;
	pid_t pid, reaped = 0;
	bool late;

	memset(sh, 0, sh_size);
	for (unsigned i = 0; i < opts.threads; i++) {
		st_log_init(&sh->logs[i], i, 0);
		sh->logs[i].ret = sh->ret + (size_t)i * opts.entries;
		sh->logs[i].cap = opts.entries;
		lp[i] = &sh->logs[i];
	}
	spec = (struct st_spec){ seed, ST_F_UNW | ST_F_DBG, "" };
	r = st_mix(seed ^ 0xde1a);
	late = r % 20 >= 3 || k % 4 == 1;
	delay = r % 20 == 0 ? (r >> 8) % 300000u :
		!late	    ? (r >> 8) % 2000000u :
			      2000000u + (r >> 8) % (max_ns - 2000000u);

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0)
		_exit(child_main(seed));
	/*
	 * Until the child's open returned, or a flush of it that covered a
	 * write completed (or it failed one, or ended), polled each 0.1 ms;
	 * pairs with the stores after jitring_open() and jitring_flush() in
	 * the child.
	 */
	while (!exit_mode && late &&
	       !(k % 4 == 1 ? atomic_load(&sh->flushes_covering) > 0 ||
				      atomic_load(&sh->bad) :
			      atomic_load(&sh->opened)) &&
	       (reaped = waitpid(pid, &status, WNOHANG)) == 0)
		t_sleep_ns(100000);
	if (!exit_mode && !reaped) {
		t_sleep_ns(delay);
		kill(pid, SIGKILL);
	}
	if (!reaped && waitpid(pid, &status, 0) != pid) {
		perror("waitpid");
		return 1;
	}
	st_dump_path(opts.dir, pid, path, sizeof(path));
	if (exit_mode ? !WIFEXITED(status) || WEXITSTATUS(status) != 0 :
			!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
		fprintf(stderr, "round %u: the child ended by itself (status "
			"%#x)\n", k, status);
		fails++;
	}
	if (atomic_load(&sh->bad)) {
		fprintf(stderr, "round %u: the child saw a write or flush "
			"fail (flush %" PRId64 ")\n", k,
			atomic_load(&sh->flush_err));
		fails++;
	}
	tot->rounds++;
	if (!atomic_load(&sh->opened)) {
		tot->early++;
		fails += check_early(path);
	} else {
		struct st_verify v = {
			.path = path,
			.pid = (uint32_t)pid,
			.spec = &spec,
			.logs = lp,
			.nlogs = opts.threads,
			.engine = opts.engine,
			.quiet = true,
			/* An exit leaves a whole file. */
			.check_flags = exit_mode ?
					       JITRING_CHECK_SORTED :
					       JITRING_CHECK_SORTED |
						       JITRING_CHECK_ALLOW_TRUNCATED,
			.must = sh->must,
			.inflight_ok = true,
			.out = &out,
		};

		fails += (unsigned)st_verify(&v);
		/* After an exit, also the writes that returned meanwhile. */
		if (exit_mode && out.missing) {
			fprintf(stderr, "round %u: %" PRIu64 " writes that "
				"returned are missing\n", k, out.missing);
			fails++;
		}
		tot->present += out.present;
		tot->verified += out.verified;
		tot->must += out.must_checked;
		tot->lost += out.missing;
		tot->truncated += out.truncated > 0;
		tot->cut_groups += out.cut_group;
		tot->flushes += atomic_load(&sh->flushes_ok);
		tot->bytes += out.file_size;
	}
	if (fails) {
		char how[64] = "exited";

		if (!exit_mode)
			snprintf(how, sizeof(how), "killed %.3f ms after %s",
				 (double)delay / 1e6,
				 !late      ? "the fork" :
				 k % 4 == 1 ? "its first covering flush" :
					      "its open returned");
		fprintf(stderr, "round %u (seed %" PRIu64 ", child %d, %s): "
			"%u failures; dump kept: %s\n", k, seed, (int)pid,
			how, fails, path);
		tot->failed++;
	} else
		unlink(path);
	return fails;
}

int main(int argc, char **argv)
{
	struct totals tot = { 0 };
	uint64_t t0, next_progress, deadline = 0;
	unsigned fails = 0;

	opts = (struct st_opts){ .threads = 8, .entries = 4000, .count = 20,
				 .alive = 1 };
	st_setup(argc, argv, &opts, "stress_crash");
	exit_mode = !strcmp(opts.mode, "exit");
	T_REQUIRE(exit_mode || !opts.mode[0]);
	T_REQUIRE(!exit_mode || opts.entries > 1);
	T_REQUIRE(opts.threads > 0 && opts.threads <= MAX_THREADS);
	T_REQUIRE(opts.entries > 0);
	sh_size = sizeof(*sh) +
		  sizeof(int64_t) * (size_t)opts.threads * opts.entries;
	sh = mmap(NULL, sh_size, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	T_REQUIRE(sh != MAP_FAILED);

	t0 = st_now_ns();
	next_progress = t0 + 1000000000u;
	if (opts.seconds > 0)
		deadline = t0 + (uint64_t)(opts.seconds * 1e9);
	for (unsigned k = 0;; k++) {
		if (deadline ? st_now_ns() >= deadline : k >= opts.count)
			break;
		fails += round_run(k, &tot);
		if (opts.seconds > ST_LONG_SECONDS &&
		    st_now_ns() >= next_progress) {
			printf("[%4.0fs] kills: %" PRIu64
			       ", entries verified: %" PRIu64 "\n",
			       (double)(st_now_ns() - t0) / 1e9, tot.rounds,
			       tot.verified);
			fflush(stdout);
			next_progress += 1000000000u;
		}
	}
	if (exit_mode)
		printf("%" PRIu64 " exits with %u threads writing, %" PRIu64
		       " failed: %" PRIu64 " entries found and verified, "
		       "%" PRIu64 " writes returned before exit() (all "
		       "present), %" PRIu64 " dumps with a truncated last "
		       "record, %.1f MiB checked\n",
		       tot.rounds, opts.threads, tot.failed, tot.verified,
		       tot.must, tot.truncated,
		       (double)tot.bytes / 1048576.0);
	else
		printf("%" PRIu64 " kills (%" PRIu64 " before jitring_open() "
	       "returned): %" PRIu64 " entries found and verified, %" PRIu64
	       " writes covered by a completed flush (all present), %" PRIu64
	       " returned but unflushed at the kill (lost, allowed), %" PRIu64
	       " dumps with a truncated last record, %" PRIu64 " ending "
	       "inside a group; %" PRIu64 " flushes completed, %.1f MiB "
	       "checked\n", tot.rounds, tot.early, tot.verified, tot.must,
	       tot.lost, tot.truncated, tot.cut_groups, tot.flushes,
	       (double)tot.bytes / 1048576.0);
	T_CHECK_EQ(fails, 0);
	/* The runs must have tested something. */
	T_CHECK(tot.rounds > tot.early);
	T_CHECK(tot.must > 0);
	st_result(exit_mode ? "exit" : "crash", opts.engine, opts.threads, tot.present,
		  tot.verified, tot.lost, tot.rounds, t_failed == 0);
	munmap(sh, sh_size);
	st_cleanup(&opts, t_failed == 0);
	return t_report();
}
