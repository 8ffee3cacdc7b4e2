/* SPDX-License-Identifier: MIT */
/*
 * jitring_pause(): the rings engine's flusher thread leaves, the kernel's
 * count of the process's threads (/proc/self/stat, what CPython reads
 * before it warns about fork()) drops by one before the call returns, and
 * the engine comes back by itself.
 *
 *  1. pause after writes: every entry in the file, one thread fewer; a
 *     flush while paused starts no thread; the next write (an existing
 *     ring) starts the flusher again and reaches the file;
 *  2. a thread's first write after a pause (the attach path) resumes too;
 *  3. a fork right after a pause from a single-threaded process: the
 *     child counts one thread, and its first write works;
 *  4. pause racing writers and other pauses: 4 writers and 2 pausers;
 *     nothing lost, the file sorted, every pause returned 0 or -EAGAIN
 *     (no quiet round in 50 ms);
 *  5. close while paused: 0, and the CLOSE record (JITRING_F_WRITE_CLOSE)
 *     is written though no flusher ran;
 *  6. the mutex engine: 0 and nothing changes; a NULL writer: -EINVAL.
 *  7. threads that let go of their rings while paused (one detaches, one
 *     exits) do not bring the flusher back: a thread's exit used to start
 *     it again, undoing the pause before a fork.
 *  8. memory: 512 threads write about 30 KiB each and stay, idle; the
 *     writer pauses; its resident set falls by at least half of what the
 *     threads wrote, as an idle running writer's does within a second
 *     (the flusher used to leave without its idle trim and give-back, and
 *     the storm's pages stayed until close).  `test_pause rss` prints the
 *     figures, with the idle running writer's for comparison;
 *  9. the flusher cannot be started again after a pause (pthread_create
 *     fails, a test fault): a write still returns an index, and a flush
 *     returns only once that entry is in the file, with no thread started
 *     (it returned 0 at once and the entry came only at close); close,
 *     which cannot start one either, writes what came after;
 * 10. a lossless writer fills its 4 KiB ring with no flusher (as in 9):
 *     every write returns an index and every entry reaches the file (the
 *     writer used to wait for ring space forever);
 * 11. as 10, but the writes come from a signal handler (the testpoint
 *     hook stands in for one) that interrupted a flush draining on the
 *     same thread: once its ring is full it gets -EDEADLK (counted in
 *     refused_invalid) rather than waiting for the engine its own thread
 *     holds; what it wrote before is in the file.
 * Cases 9-11 need -Dtestpoints=true and are skipped without.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "reader/reader.h"
#include "common/testpoint.h"

/* Field 20 of /proc/self/stat: the kernel's count of our threads. */
static long nthreads(void)
{
	char buf[1024], *p;
	long n = -1;
	FILE *f = fopen("/proc/self/stat", "r");

	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')'))) {
		/* After "pid (comm)": state is field 3, num_threads 20. */
		for (int field = 3; p && field < 20; field++)
			p = strchr(p + 2, ' ');
		if (p)
			n = strtol(p + 1, NULL, 10);
	}
	fclose(f);
	return n;
}

/* A writer in a fresh scratch directory @d. */
static struct jitring *open_in(struct t_dir *d, uint32_t engine, uint32_t flags)
{
	struct jitring *jr = NULL;

	t_dir_make(d, "pause");
	T_REQUIRE(t_open(engine, d->path, flags, &jr) == 0);
	return jr;
}

/* CODE_LOADs in @d's dump of @pid if it checks out sorted, else -1;
 * *@has_close says whether it holds a CLOSE record. */
static long loads_in(const struct t_dir *d, pid_t pid, bool *has_close)
{
	char path[sizeof(d->path) + 32];
	uint64_t closes = 0;
	long n;

	snprintf(path, sizeof(path), "%s/jit-%d.dump", d->path, (int)pid);
	n = t_dump_loads(path, "", &closes);
	if (has_close)
		*has_close = closes == 1;
	return n;
}

/*
 * Counts are relative to the count with the writer open: a sanitizer may
 * run a thread of its own (TSan does).
 */
static void case_basic(void)
{
	const char *v = getenv("JITRING_WRITE_THREAD");
	bool wt = v && !strcmp(v, "1");
	struct t_dir d;
	struct jitring *jr;
	long before, paused, after;

	jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	for (int i = 0; i < 100; i++)
		T_CHECK(t_write_at(jr, "a", 0x100000 + (uint64_t)i * 64) > 0);
	if (wt) {
		/*
		 * JITRING_WRITE_THREAD=1: the flusher starts and stops its
		 * write thread as batches come, so the process's count moves
		 * under us; count the engine's threads by name instead.
		 */
		T_CHECK_EQ(jitring_pause(jr), 0);
		T_CHECK_EQ(t_threads_named("jitring-"), 0);
		T_CHECK_EQ(loads_in(&d, getpid(), NULL), 100);
		T_CHECK_EQ(jitring_flush(jr), 0);
		T_CHECK_EQ(t_threads_named("jitring-"), 0);
		T_CHECK_EQ(jitring_pause(jr), 0);
		T_CHECK(t_write_at(jr, "b", 0x200000) > 0);
		/* Named by itself once running (a write thread it starts is
		 * named like it until it names itself). */
		T_CHECK(T_POLL_UNTIL(t_threads_named("jitring-flush") >= 1, 1000));
		before = paused = after = -1;
	} else {
		before = nthreads() - 1;
		T_CHECK_EQ(jitring_pause(jr), 0);
		/* The flusher's task leaves /proc a moment after its join. */
		T_CHECK(T_POLL_UNTIL(nthreads() == before, 1000));
		paused = nthreads();
		T_CHECK_EQ(loads_in(&d, getpid(), NULL), 100);
		T_CHECK_EQ(jitring_flush(jr), 0);
		T_CHECK_EQ(nthreads(), before);
		/* A second pause is a no-op. */
		T_CHECK_EQ(jitring_pause(jr), 0);
		/* The next write resumes the engine before it returns. */
		T_CHECK(t_write_at(jr, "b", 0x200000) > 0);
		after = nthreads();
		T_CHECK_EQ(after, before + 1);
	}
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 101);
	T_CHECK_EQ(jitring_close(jr), 0);
	printf("pause: threads %ld -> %ld paused -> %ld after a write\n",
	       before + 1, paused, after);
	t_dir_remove(&d);
}

static void *first_write_main(void *arg)
{
	return (void *)(intptr_t)t_write_at(arg, "first", 0x300000);
}

static void case_attach(void)
{
	struct t_dir d;
	struct jitring *jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	pthread_t th;
	void *r;

	T_CHECK_EQ(jitring_pause(jr), 0);
	T_REQUIRE(pthread_create(&th, NULL, first_write_main, jr) == 0);
	pthread_join(th, &r);
	T_CHECK((intptr_t)r > 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 1);
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);
}

static void case_fork(void)
{
	struct t_dir d;
	struct jitring *jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	int status = 0;
	long n;
	pid_t pid;

	T_CHECK(t_write_at(jr, "parent", 0x400000) > 0);
	T_CHECK_EQ(jitring_pause(jr), 0);
	/* Only this thread is ours now (1 without a sanitizer's). */
	n = nthreads();
	T_CHECK(n >= 1);
	fflush(stdout);
	pid = fork();
	T_REQUIRE(pid >= 0);
	if (pid == 0) {
		/* The child of a single-threaded process: one thread. */
		int bad = nthreads() > n;

		bad |= t_write_at(jr, "child", 0x410000) <= 0;
		bad |= jitring_close(jr) != 0;
		bad |= loads_in(&d, getpid(), NULL) != 1;
		_exit(bad);
	}
	T_REQUIRE(waitpid(pid, &status, 0) == pid);
	T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 1);
	t_dir_remove(&d);
}

struct racer {
	struct jitring *jr;
	int id;
	long ok;
	int bad;
};

static void *writer_main(void *arg)
{
	struct racer *w = arg;
	char name[32];

	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "w%d_%d", w->id, i);
		if (t_write_at(w->jr, name,
			       0x1000000 * (uint64_t)(w->id + 1) + i * 64) > 0)
			w->ok++;
		else
			w->bad++;
	}
	return NULL;
}

static void *pauser_main(void *arg)
{
	struct racer *p = arg;

	for (int i = 0; i < 50; i++) {
		int ret = jitring_pause(p->jr);

		/* -EAGAIN: the writers left no quiet round in 50 ms. */
		if (ret && ret != -EAGAIN)
			p->bad++;
		else
			p->ok += !ret;
		sched_yield();
	}
	return NULL;
}

static void case_race(void)
{
	struct t_dir d;
	struct jitring *jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	struct racer r[6];
	pthread_t th[6];
	long total = 0, paused = 0;
	int bad = 0;

	for (int i = 0; i < 6; i++) {
		r[i] = (struct racer){ .jr = jr, .id = i };
		T_REQUIRE(pthread_create(&th[i], NULL,
					 i < 4 ? writer_main : pauser_main,
					 &r[i]) == 0);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(th[i], NULL);
		bad += r[i].bad;
		if (i < 4)
			total += r[i].ok;
		else
			paused += r[i].ok;
	}
	T_CHECK_EQ(bad, 0);
	T_CHECK_EQ(total, 4 * 3000);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), total);
	printf("4 writers and 2 pausers (100 pauses, %ld returned 0): %ld "
	       "entries, all in\n",
	       paused, total);
	t_dir_remove(&d);
}

static void case_close_paused(void)
{
	struct t_dir d;
	struct jitring *jr =
		open_in(&d, JITRING_ENGINE_RINGS, JITRING_F_WRITE_CLOSE);
	bool closed = false;

	T_CHECK(t_write_at(jr, "x", 0x500000) > 0);
	T_CHECK_EQ(jitring_pause(jr), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), &closed), 1);
	T_CHECK(closed);
	T_CHECK_EQ(jitring_pause(jr), -ESHUTDOWN);
	t_dir_remove(&d);
}

static void case_mutex(void)
{
	struct t_dir d;
	struct jitring *jr = open_in(&d, JITRING_ENGINE_MUTEX, 0);
	long n = nthreads();

	T_CHECK(t_write_at(jr, "m", 0x600000) > 0);
	T_CHECK_EQ(jitring_pause(jr), 0);
	T_CHECK_EQ(nthreads(), n);
	T_CHECK(t_write_at(jr, "m2", 0x610000) > 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 2);
	T_CHECK_EQ(jitring_pause(NULL), -EINVAL);
	t_dir_remove(&d);
}

static pthread_barrier_t c7_bar;

/* Write, wait for the pause, then let go: by detaching, or by exiting. */
static void *letgo_main(void *arg)
{
	struct jitring *jr = arg;
	static _Atomic int detach = 1;

	T_CHECK(t_write_at(jr, "letgo", 0x700000) > 0);
	pthread_barrier_wait(&c7_bar); /* written */
	pthread_barrier_wait(&c7_bar); /* paused */
	if (atomic_exchange(&detach, 0))
		T_CHECK_EQ(jitring_thread_detach(jr), 1);
	return NULL;
}

static void case_letgo_paused(void)
{
	struct t_dir d;
	struct jitring *jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	pthread_t th[2];
	long paused;

	T_REQUIRE(pthread_barrier_init(&c7_bar, NULL, 3) == 0);
	for (int i = 0; i < 2; i++)
		T_REQUIRE(pthread_create(&th[i], NULL, letgo_main, jr) == 0);
	pthread_barrier_wait(&c7_bar);
	T_CHECK_EQ(jitring_pause(jr), 0);
	paused = nthreads();
	pthread_barrier_wait(&c7_bar);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	/* Both threads gone (their tasks leave /proc a moment after the
	 * joins), and no flusher came back. */
	T_CHECK(T_POLL_UNTIL(nthreads() == paused - 2, 1000));
	T_CHECK(t_write_at(jr, "after", 0x710000) > 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 3);
	T_CHECK_EQ(jitring_close(jr), 0);
	pthread_barrier_destroy(&c7_bar);
	printf("detach and exit while paused: threads %ld -> %ld\n", paused,
	       nthreads());
	t_dir_remove(&d);
}

/* ------------------------------------------------------------------ */
/* 8. A paused writer gives back a storm's memory.                      */

#define C8_THREADS 512
#define C8_ENTRY 1024u
#define C8_BYTES (30u << 10)

static pthread_barrier_t c8_bar;
static _Atomic long c8_bad;

static void *storm_main(void *arg)
{
	static const uint8_t code[C8_ENTRY] = { 0xc3 };
	struct jitring_entry e = {
		.name = "storm",
		.code_addr = (const void *)(uintptr_t)0x800000,
		.code_size = sizeof(code),
		.code_bytes = code,
	};

	pthread_barrier_wait(&c8_bar);
	for (uint32_t done = 0; done < C8_BYTES; done += C8_ENTRY)
		if (jitring_write(arg, &e) <= 0)
			atomic_fetch_add(&c8_bad, 1);
	/* Written; stay, idle, until the measurement is done. */
	pthread_barrier_wait(&c8_bar);
	pthread_barrier_wait(&c8_bar);
	return NULL;
}

static pthread_t *c8_th;

/* Threads each write about 30 KiB at once, then idle.  Return: the
 * resident set (bytes) once their entries are written. */
static uint64_t storm(struct jitring *jr)
{
	c8_th = calloc(C8_THREADS, sizeof(*c8_th));
	T_REQUIRE(c8_th);
	T_REQUIRE(pthread_barrier_init(&c8_bar, NULL, C8_THREADS + 1) == 0);
	for (int i = 0; i < C8_THREADS; i++)
		T_REQUIRE(pthread_create(&c8_th[i], NULL, storm_main, jr) == 0);
	pthread_barrier_wait(&c8_bar); /* go */
	pthread_barrier_wait(&c8_bar); /* written */
	T_CHECK_EQ(atomic_load(&c8_bad), 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	return t_rss_bytes();
}

/* The storm's threads exit. */
static void storm_end(void)
{
	pthread_barrier_wait(&c8_bar);
	for (int i = 0; i < C8_THREADS; i++)
		pthread_join(c8_th[i], NULL);
	pthread_barrier_destroy(&c8_bar);
	free(c8_th);
}

/*
 * @pause: pause after the storm; else leave the writer idle and running
 * (the comparison `test_pause rss` prints).  The bound: the resident set
 * falls back by at least half of what the storm added, within 3 s.  A
 * loaded machine delays the give-back, it does not shrink what it frees.
 */
static void case_storm_rss(bool pause, bool verbose)
{
	struct t_dir d;
	struct jitring *jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	uint64_t base, peak, bound, now = 0, t0, at1s = 0;
	/* Under a sanitizer: figures only (see below). */
	unsigned wait_ms = T_SANITIZED ? 0 : 3000;
	bool fell;

	base = t_rss_bytes();
	peak = storm(jr);
	/* Half of what the storm wrote into its rings must go. */
	bound = peak - (uint64_t)C8_THREADS * C8_BYTES / 2;
	t0 = t_now_ns();
	if (pause)
		T_CHECK_EQ(jitring_pause(jr), 0);
	fell = T_POLL_UNTIL((now = t_rss_bytes()) <= bound, wait_ms);
	if (verbose && !pause) {
		/* The idle running writer: where it stands after 1 s. */
		while (t_now_ns() - t0 < 1000000000ull)
			t_sleep_ms(10);
		at1s = t_rss_bytes();
	}
	if (verbose && pause)
		printf("paused: VmRSS %.1f MiB open, %.1f MiB after the storm, "
		       "%.1f MiB %.0f ms after the pause%s\n",
		       t_mib(base), t_mib(peak), t_mib(now),
		       (double)(t_now_ns() - t0) / 1e6,
		       fell ? "" : " (not under the bound)");
	else if (verbose)
		printf("idle: VmRSS %.1f MiB open, %.1f MiB after the storm, "
		       "%.1f MiB 1 s later (running, not paused)\n",
		       t_mib(base), t_mib(peak), t_mib(at1s));
	/*
	 * Not under a sanitizer: its allocator keeps per-thread memory of
	 * its own (a storm adds 35 MiB under ASan, of which an idle running
	 * writer gives back the same 6 MiB as a paused one).
	 */
	if (!T_SANITIZED)
		T_CHECK(fell);
	storm_end();
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL),
		   (long)C8_THREADS * ((C8_BYTES + C8_ENTRY - 1) / C8_ENTRY));
	t_dir_remove(&d);
}

static void case_storm(void)
{
	case_storm_rss(true, true);
}

#ifdef JITRING_TESTPOINTS
/* ------------------------------------------------------------------ */
/* 9-11. The flusher cannot be started again.                           */

static int fail_start(const char *name, void *arg)
{
	(void)arg;
	return !strcmp(name, "flusher_start");
}

static void case_flush_nostart(void)
{
	struct t_dir d;
	struct jitring *jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	long paused;

	T_CHECK(t_write_at(jr, "before", 0x900000) > 0);
	T_CHECK_EQ(jitring_pause(jr), 0);
	paused = nthreads();
	atomic_store(&jitring_fault_hook, fail_start);
	T_CHECK(t_write_at(jr, "after", 0x910000) > 0);
	T_CHECK_EQ(nthreads(), paused);
	T_CHECK_EQ(jitring_flush(jr), 0);
	/* In the file when the flush returned, and no thread came. */
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 2);
	T_CHECK_EQ(nthreads(), paused);
	/* Close cannot start one either: it writes the rest itself. */
	T_CHECK(t_write_at(jr, "last", 0x920000) > 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	atomic_store(&jitring_fault_hook, NULL);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 3);
	t_dir_remove(&d);
}

#define C10_ENTRIES 200

struct c10 {
	struct jitring *jr;
	long ok;
	long err; /* the first error */
	_Atomic bool done;
};

/* 600 bytes of code: a 4 KiB ring holds five or six. */
static void *full_main(void *arg)
{
	static const uint8_t code[600] = { 0xc3 };
	struct c10 *w = arg;
	struct jitring_entry e = {
		.name = "full",
		.code_addr = (const void *)(uintptr_t)0xa00000,
		.code_size = sizeof(code),
		.code_bytes = code,
	};

	for (int i = 0; i < C10_ENTRIES; i++) {
		int64_t ret = jitring_write(w->jr, &e);

		if (ret > 0) {
			w->ok++;
		} else {
			if (!w->err)
				w->err = ret;
			break;
		}
	}
	atomic_store(&w->done, true);
	return NULL;
}

static struct jitring *open_small(struct t_dir *d)
{
	struct jitring_config c;
	struct jitring *jr = NULL;

	t_dir_make(d, "pause");
	jitring_config_init(&c);
	c.engine = JITRING_ENGINE_RINGS;
	c.dir = d->path;
	c.ring_size = 4096;
	T_REQUIRE(jitring_open(&c, &jr) == 0);
	return jr;
}

/* Wait (bounded) for @w; a writer stuck for good ends the test here. */
static void c10_join(pthread_t th, struct c10 *w, unsigned ms)
{
	if (!T_POLL_UNTIL(atomic_load(&w->done), ms)) {
		fprintf(stderr,
			"writer still waiting for ring space after "
			"%u ms with no flusher\n",
			ms);
		t_failed++;
		fflush(stdout);
		_exit(t_report());
	}
	pthread_join(th, NULL);
}

static void case_full_nostart(void)
{
	struct t_dir d;
	struct jitring *jr = open_small(&d);
	struct c10 w = { .jr = jr };
	long paused;
	pthread_t th;

	T_CHECK_EQ(jitring_pause(jr), 0);
	paused = nthreads();
	atomic_store(&jitring_fault_hook, fail_start);
	T_REQUIRE(pthread_create(&th, NULL, full_main, &w) == 0);
	c10_join(th, &w, 10000);
	T_CHECK_EQ(w.ok, C10_ENTRIES);
	T_CHECK_EQ(w.err, 0);
	T_CHECK_EQ(nthreads(), paused);
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), C10_ENTRIES);
	T_CHECK(t_stats(jr).ring_full_waits > 0);
	atomic_store(&jitring_fault_hook, NULL);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), C10_ENTRIES);
	t_dir_remove(&d);
}

/*
 * Case 11: the flushing thread, inside its drain (it holds the engine),
 * writes as a signal handler that interrupted it would, until its 4 KiB
 * ring is full.
 */
static struct {
	pthread_t who;
	struct c10 w;
	_Atomic bool flushed;
	intptr_t ret;
} c11;

static void handler_writes(const char *name, void *arg)
{
	(void)arg;
	if (strcmp(name, "flush_drain") ||
	    !pthread_equal(pthread_self(), c11.who) || c11.w.done)
		return;
	full_main(&c11.w);
}

static void *flush_main(void *arg)
{
	c11.who = pthread_self();
	c11.ret = jitring_flush(arg);
	atomic_store(&c11.flushed, true);
	return NULL;
}

static void case_full_held(void)
{
	struct t_dir d;
	struct jitring *jr = open_small(&d);
	pthread_t fl;

	c11.w = (struct c10){ .jr = jr };
	T_CHECK_EQ(jitring_pause(jr), 0);
	atomic_store(&jitring_fault_hook, fail_start);
	/* Something for the flush to drain. */
	T_CHECK(t_write_at(jr, "held", 0xb00000) > 0);
	atomic_store(&jitring_testpoint_hook, handler_writes);
	T_REQUIRE(pthread_create(&fl, NULL, flush_main, jr) == 0);
	if (!T_POLL_UNTIL(atomic_load(&c11.flushed), 10000)) {
		fprintf(stderr,
			"flush still waiting after 10 s: its own "
			"handler's write waits for the engine it holds\n");
		t_failed++;
		fflush(stdout);
		_exit(t_report());
	}
	pthread_join(fl, NULL);
	T_CHECK_EQ(c11.ret, 0);
	atomic_store(&jitring_testpoint_hook, NULL);
	/* It filled its ring, then got -EDEADLK: that entry not written. */
	T_CHECK(c11.w.ok >= 1 && c11.w.ok < C10_ENTRIES);
	T_CHECK_EQ(c11.w.err, -EDEADLK);
	T_CHECK_EQ(t_stats(jr).refused_invalid, 1);
	/* Everything it accepted is in (the flush began before them). */
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 1 + c11.w.ok);
	T_CHECK(t_write_at(jr, "again", 0xb10000) > 0);
	atomic_store(&jitring_fault_hook, NULL);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(loads_in(&d, getpid(), NULL), 2 + c11.w.ok);
	printf("a handler's writes in a flush's drain, no flusher: %ld "
	       "written, then %ld\n",
	       c11.w.ok, c11.w.err);
	t_dir_remove(&d);
}
#else
static void nostart_skip(void)
{
	printf("cases 9-11 skipped: need -Dtestpoints=true\n");
}
#define case_flush_nostart nostart_skip
#define case_full_nostart nostart_skip
#define case_full_held nostart_skip
#endif /* JITRING_TESTPOINTS */

int main(int argc, char **argv)
{
	static void (*const cases[])(void) = {
		case_basic,        case_attach,       case_fork,
		case_race,         case_close_paused, case_mutex,
		case_letgo_paused, case_storm,        case_flush_nostart,
		case_full_nostart, case_full_held,
	};
	/* `test_pause N` runs case N alone. */
	int only = argc > 1 ? atoi(argv[1]) : 0;

	if (argc > 1 && !strcmp(argv[1], "rss")) {
		/* The figures of docs/reliability.md, one process each. */
		pid_t pid = fork();
		int status = 0;

		T_REQUIRE(pid >= 0);
		if (pid == 0) {
			case_storm_rss(false, true);
			fflush(stdout);
			_exit(t_failed ? 1 : 0);
		}
		T_REQUIRE(waitpid(pid, &status, 0) == pid);
		T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		case_storm_rss(true, true);
		return t_report();
	}
	for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++)
		if (!only || only == i + 1)
			cases[i]();
	return t_report();
}
