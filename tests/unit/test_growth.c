// SPDX-License-Identifier: MIT
/*
 * Ring growth (rings engine, adaptive ring_size): a thread whose ring fills
 * trades it for one twice as large, either a successor the flusher made
 * ahead of time (no system call on the thread; for a 64 KiB ring, maybe a
 * spare one) or, if none is ready, one the thread makes itself.  Entries
 * stay in per-thread order across rings.
 *
 * The flusher is stalled deterministically through the test I/O hook: its
 * pwritev() waits at a gate the test opens and shuts, and two flushes in a
 * row guarantee a whole round ran.  No sleeps.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "iogate.h"
#include "jitring.h"
#include "reader/reader.h"
#include "common/testpoint.h"

#ifdef JITRING_TESTPOINTS

/* The flusher is parked once its write waits at the gate. */
static void wait_parked(void)
{
	t_iogate_wait(&t_iogate.parked, 1, 0);
}

/*
 * Make sure at least one whole flusher round (successors, recycling) ran
 * after this call.  Counting rounds is not enough: an idle flusher sleeps
 * and runs none.  A flush runs rounds until its ticket completes, and the
 * round that completes it finishes before the next flush's first round.
 */
static void full_round(struct jitring *w)
{
	T_CHECK_EQ(jitring_flush(w), 0);
	T_CHECK_EQ(jitring_flush(w), 0);
}

static struct jitring *jr;
static unsigned char eh[128];
static int ehlen;
static const unsigned char code[30] = { 0x55, 0x48, 0x89, 0xe5 };

/* Entry @seq of thread @t: ~250 bytes, the CPython shape. */
static int64_t put(int t, unsigned seq)
{
	char name[64];
	struct jitring_entry e = {
		.name = name,
		.code_addr = code,
		.code_size = sizeof(code),
		.eh_frame = eh,
		.eh_frame_size = (uint32_t)ehlen,
	};

	snprintf(name, sizeof(name), "py::grow_t%02d_s%06u:/app/module.py", t,
		 seq);
	return jitring_write(jr, &e);
}

/*
 * Watchdog: a run normally takes well under a second (ASan included).  If
 * one hangs, say in which phase and with which counters before meson's
 * timeout kills it silently (a hang was seen once under ASan on a loaded
 * machine and never reproduced; this is what the next one will tell).
 */
static volatile sig_atomic_t phase;

static void watchdog(int sig)
{
	struct jitring_stats st;

	(void)sig;
	st = t_stats(jr);
	fprintf(stderr, "test_growth: stuck in phase %d (gate %s, %u parked): "
		"entries_written %llu, rings_grown %llu, refills_waited "
		"%llu, ring_full_waits %llu, threads_attached %llu, "
		"flushes %llu\n", (int)phase, t_iogate.open ? "open" : "shut",
		t_iogate.parked, (unsigned long long)st.entries_written,
		(unsigned long long)st.rings_grown,
		(unsigned long long)st.refills_waited,
		(unsigned long long)st.ring_full_waits,
		(unsigned long long)st.threads_attached,
		(unsigned long long)st.flushes);
	abort();
}

/* Every thread's entries present once, in sequence order. */
static void verify(const char *path, int threads, const unsigned *count)
{
	unsigned next[32] = { 0 };
	struct t_dump du;

	t_dump_read(&du, path);
	T_CHECK_EQ(du.check, 0);
	for (size_t i = 0; i < du.nloads; i++) {
		int t;
		unsigned s;

		T_REQUIRE(sscanf(du.loads[i].name, "py::grow_t%d_s%u", &t,
				 &s) == 2);
		T_REQUIRE(t >= 0 && t < threads);
		T_CHECK_EQ(s, next[t]);
		next[t] = s + 1;
	}
	for (int t = 0; t < threads; t++)
		T_CHECK_EQ(next[t], count[t]);
	t_dump_free(&du);
}

struct worker {
	int t;
	unsigned n;
	unsigned done;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (w->done = 0; w->done < w->n; w->done++)
		if (put(w->t, w->done) <= 0)
			break;
	return NULL;
}

static pthread_barrier_t barrier;

struct detacher {
	int t;
	unsigned n;
	unsigned done;
	int detached;
};

/* Pass half full, wait, then detach without filling the ring. */
static void *detacher_main(void *arg)
{
	struct detacher *d = arg;

	for (d->done = 0; d->done < d->n; d->done++)
		if (put(d->t, d->done) <= 0)
			break;
	pthread_barrier_wait(&barrier);
	pthread_barrier_wait(&barrier);
	d->detached = jitring_thread_detach(jr);
	return NULL;
}

int main(void)
{
	char dir[] = "/tmp/jitring-growth-XXXXXX", path[512];
	struct jitring_config cfg;
	struct jitring_stats st0, st;
	unsigned count[32] = { 0 };
	unsigned seq = 0;

	T_REQUIRE(mkdtemp(dir));
	ehlen = t_eh_frame(sizeof(code), eh, sizeof(eh));
	T_REQUIRE(ehlen > 0);
	t_iogate_set(true);
	jitring_io_hook = t_iogate_pwritev;
	signal(SIGALRM, watchdog);
	alarm(30);

	jitring_config_init(&cfg);
	cfg.dir = dir;
	cfg.max_delay_ms = 1;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	snprintf(path, sizeof(path), "%s/jit-%d.dump", dir, (int)getpid());

	phase = 1;
	/*
	 * 1. Flusher stalled: a 64 KiB ring fills after ~260 entries, no
	 * successor can be made, so the thread makes larger rings itself and
	 * never waits.
	 */
	t_iogate_set(false);
	T_CHECK(put(0, seq++) > 0);
	wait_parked();
	st0 = t_stats(jr);
	for (int i = 0; i < 2000; i++)
		T_CHECK(put(0, seq++) > 0);
	st = t_stats(jr);
	T_CHECK(st.rings_grown - st0.rings_grown >= 3);
	/* Every one of them made by the thread, none by the stalled flusher,
	 * but for the first (a 64 KiB ring's), which may be a spare successor
	 * if the flusher made them before the stall. */
	T_CHECK(st.rings_grown - st0.rings_grown -
			(st.rings_grown_waited - st0.rings_grown_waited) <=
		1);
	T_CHECK_EQ(st.refills_waited, st0.refills_waited);
	T_CHECK_EQ(st.ring_full_waits, 0);

	/* Everything lands, in order, across the rings. */
	t_iogate_set(true);
	T_CHECK_EQ(jitring_flush(jr), 0);
	count[0] = seq;
	verify(path, 1, count);

	phase = 2;
	/*
	 * 2. A successor made ahead: the ring passes half full while the
	 * flusher is stalled (it asks to grow), one round runs (the flusher
	 * makes the successor), the flusher stalls again, and the ring fills:
	 * the thread switches without making a ring itself.
	 */
	T_CHECK_EQ(jitring_thread_detach(jr), 1);
	t_iogate_set(false);
	T_CHECK(put(0, seq++) > 0);	/* a fresh 64 KiB ring */
	wait_parked();
	for (int i = 0; i < 150; i++)	/* > 32 KiB: past half full */
		T_CHECK(put(0, seq++) > 0);
	st0 = t_stats(jr);
	t_iogate_set(true);
	full_round(jr);
	t_iogate_set(false);
	T_CHECK(put(0, seq++) > 0);
	wait_parked();
	for (int i = 0; i < 400; i++)	/* > 64 KiB: fills the ring */
		T_CHECK(put(0, seq++) > 0);
	st = t_stats(jr);
	T_CHECK(st.rings_grown - st0.rings_grown >= 1);
	T_CHECK_EQ(st.refills_waited, st0.refills_waited);
	T_CHECK_EQ(st.ring_full_waits, 0);
	t_iogate_set(true);
	T_CHECK_EQ(jitring_flush(jr), 0);
	count[0] = seq;
	verify(path, 1, count);

	phase = 3;
	/* 3. Several threads growing at once, stalled then flowing. */
	{
		struct worker w[8];
		pthread_t tid[8];

		t_iogate_set(false);
		for (int t = 0; t < 8; t++) {
			w[t] = (struct worker){ .t = t + 1, .n = 3000 };
			pthread_create(&tid[t], NULL, worker_main, &w[t]);
		}
		for (int t = 0; t < 8; t++) {
			pthread_join(tid[t], NULL);
			T_CHECK_EQ(w[t].done, w[t].n);
			count[t + 1] = w[t].done;
		}
		t_iogate_set(true);
		T_CHECK_EQ(jitring_flush(jr), 0);
		verify(path, 9, count);
	}

	phase = 4;
	/*
	 * 4. Successors nobody takes: 16 threads pass half full while the
	 * flusher is stalled (each asks to grow), one round gives each a
	 * successor, then every thread detaches without filling its ring.
	 * The flusher must free 16 unused successors while recycling their
	 * predecessors in the same round (this once broke its registry walk;
	 * ASan catches a regression).
	 */
	{
		struct detacher d[16];
		pthread_t tid[16];

		pthread_barrier_init(&barrier, NULL, 17);
		t_iogate_set(false);
		T_CHECK(put(0, seq++) > 0);
		count[0] = seq;
		wait_parked();
		for (int t = 0; t < 16; t++) {
			d[t] = (struct detacher){ .t = 9 + t, .n = 150 };
			pthread_create(&tid[t], NULL, detacher_main, &d[t]);
		}
		pthread_barrier_wait(&barrier);	/* all past half full */
		st0 = t_stats(jr);
		t_iogate_set(true);
		full_round(jr);			/* successors made */
		pthread_barrier_wait(&barrier);	/* now detach */
		for (int t = 0; t < 16; t++) {
			pthread_join(tid[t], NULL);
			T_CHECK_EQ(d[t].done, d[t].n);
			T_CHECK_EQ(d[t].detached, 1);
			count[9 + t] = d[t].done;
		}
		full_round(jr);			/* rings recycled */
		st = t_stats(jr);
		T_CHECK_EQ(st.rings_grown, st0.rings_grown);
		T_CHECK_EQ(st.threads_attached, 1);	/* main's ring */
		verify(path, 25, count);
		pthread_barrier_destroy(&barrier);
	}

	phase = 5;
	T_CHECK_EQ(jitring_close(jr), 0);
	alarm(0);
	st = t_stats(jr);
	T_CHECK_EQ(st.threads_attached, 0);
	T_CHECK_EQ(st.lost_io, 0);
	unlink(path);
	rmdir(dir);
	return t_report();
}

#else

int main(void)
{
	t_skip("needs -Dtestpoints=true");
}

#endif
