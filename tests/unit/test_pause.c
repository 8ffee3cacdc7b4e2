/* SPDX-License-Identifier: MIT */
/*
 * jitring_pause(): the rings engine's flusher thread leaves, the kernel's
 * count of the process's threads (/proc/self/stat, what CPython reads
 * before it warns about fork()) drops by one before the call returns, and
 * the engine comes back by itself.
 *
 *  1. pause after writes: every entry in the file, one thread fewer; a
 *     flush while paused returns at once; the next write (an existing
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
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "reader.h"

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
static struct jitring *open_in(struct t_dir *d, uint32_t engine,
			       uint32_t flags)
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
	struct t_dir d;
	struct jitring *jr;
	long before, paused, after;

	jr = open_in(&d, JITRING_ENGINE_RINGS, 0);
	for (int i = 0; i < 100; i++)
		T_CHECK(t_write_at(jr, "a", 0x100000 + (uint64_t)i * 64) > 0);
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
	struct jitring *jr = open_in(&d, JITRING_ENGINE_RINGS,
				     JITRING_F_WRITE_CLOSE);
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

int main(void)
{
	case_basic();
	case_attach();
	case_fork();
	case_race();
	case_close_paused();
	case_mutex();
	case_letgo_paused();
	return t_report();
}
