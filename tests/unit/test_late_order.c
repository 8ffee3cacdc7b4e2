/* SPDX-License-Identifier: MIT */
/*
 * Deterministic reproducer: the rings engine's LATE path could write an
 * entry after entries stamped later (found by stress_crash: a rings dump
 * with "ts-order" 42 us back, in the middle of the file).
 *
 * docs/design.md section 3 argues that a re-stamped entry is "later than T
 * of every round that left the ring out".  But commit_late()
 * (src/engines/rings/ring.c) reads the clock, re-stamps the group and only then
 * stores pub (clearing BUSY|LATE).  A flusher round that starts after that
 * clock read and scans the ring before that store still sees BUSY|LATE,
 * leaves the ring out of W, and writes other rings' entries stamped after
 * the re-stamp.  The re-stamped entry is written in the next round: out
 * of order.
 *
 * The window is made deterministic: the "write_stamped" testpoint parks a
 * producer P between its timestamp and its commit until the flusher has
 * marked it LATE (an entry Q1 of the main thread, stamped after P's, is in
 * the file); then this program's clock_gettime() (which the library calls
 * through jitring_clock_ns()) parks P right after commit_late() read the
 * clock, while the main thread writes Q2 and waits until the flusher has
 * written it.  Released, P publishes its entry, re-stamped before Q2.
 *
 * Expected (docs/design.md, docs/format.md): the file is sorted --
 * jitring_check(JITRING_CHECK_SORTED) passes.  This program fails while the
 * bug is there.  Needs -Dtestpoints=true (exit 77 otherwise).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "reader/reader.h"
#include "common/testpoint.h"

#ifdef JITRING_TESTPOINTS

static struct jitring *jr;

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int where;       /* 1: P parked at write_stamped; 2: in clock_gettime */
	bool go_stamped; /* release P from write_stamped */
	bool go_clock;   /* release P from clock_gettime */
	uint64_t clock_read; /* the time commit_late() read */
} s = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false,
	false, 0 };

static _Thread_local bool tl_is_p, tl_park_clock;

/*
 * The library reads CLOCK_MONOTONIC through clock_gettime(); this
 * definition takes precedence over libc's for this executable.  It reads
 * the clock with the system call and, once armed on P, parks after the
 * read.
 */
int clock_gettime(clockid_t clk, struct timespec *ts)
{
	int ret = (int)syscall(SYS_clock_gettime, clk, ts);

	if (tl_park_clock && clk == CLOCK_MONOTONIC) {
		tl_park_clock = false;
		pthread_mutex_lock(&s.lock);
		s.where = 2;
		s.clock_read = (uint64_t)ts->tv_sec * 1000000000u +
			       (uint64_t)ts->tv_nsec;
		pthread_cond_broadcast(&s.cond);
		while (!s.go_clock)
			pthread_cond_wait(&s.cond, &s.lock);
		pthread_mutex_unlock(&s.lock);
	}
	return ret;
}

static void hook(const char *name, void *arg)
{
	(void)arg;
	if (!tl_is_p || strcmp(name, "write_stamped"))
		return;
	pthread_mutex_lock(&s.lock);
	s.where = 1;
	pthread_cond_broadcast(&s.cond);
	while (!s.go_stamped)
		pthread_cond_wait(&s.cond, &s.lock);
	pthread_mutex_unlock(&s.lock);
	/* The next clock read on P is commit_late()'s re-stamp. */
	tl_park_clock = true;
}

static bool wait_where(int want, int sec)
{
	return T_COND_WAIT(&s.lock, &s.cond, s.where == want, sec);
}

static void release(bool *flag)
{
	T_COND_SET(&s.lock, &s.cond, *flag = true);
}

static uint64_t written(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };

	jitring_stats(jr, &st);
	return st.entries_written;
}

static bool wait_written(uint64_t want)
{
	return T_POLL_UNTIL(written() >= want, 5000);
}

static int64_t write_one(const char *name, uint64_t addr)
{
	return t_write_at(jr, name, addr);
}

static void *producer_p(void *arg)
{
	tl_is_p = true;
	*(int64_t *)arg = write_one("P", 0x1000);
	return NULL;
}

int main(void)
{
	struct jitring_config cfg;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	uint64_t ts_p = 0, ts_q2 = 0;
	int64_t ret_p = 0;
	struct t_dump du;
	struct t_dir d;
	pthread_t p;

	setvbuf(stdout, NULL, _IOLBF, 0);
	t_dir_make(&d, "late-order");
	jitring_config_init(&cfg);
	cfg.engine = JITRING_ENGINE_RINGS;
	cfg.dir = d.path;
	cfg.holdback_ms = 20;
	cfg.max_delay_ms = 1;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	atomic_store(&jitring_testpoint_hook, hook);

	/* 1. P stamps its entry and parks before committing. */
	T_REQUIRE(pthread_create(&p, NULL, producer_p, &ret_p) == 0);
	T_REQUIRE(wait_where(1, 10));
	/* 2. Q1, stamped after P: written once P is marked LATE. */
	T_CHECK(write_one("Q1", 0x2000) > 0);
	T_CHECK(wait_written(1));
	/* 3. P fails its commit and re-reads the clock: parked right after. */
	release(&s.go_stamped);
	T_REQUIRE(wait_where(2, 10));
	/* 4. Q2, stamped after P's new stamp, written while P is still
	 *    BUSY|LATE. */
	T_CHECK(write_one("Q2", 0x3000) > 0);
	T_CHECK(wait_written(2));
	/* 5. P publishes its re-stamped entry. */
	release(&s.go_clock);
	pthread_join(p, NULL);
	T_CHECK(ret_p > 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	T_CHECK_EQ(st.entries_written, 3);
	T_CHECK_EQ(st.late_entries, 1);
	atomic_store(&jitring_testpoint_hook, NULL);
	T_CHECK_EQ(jitring_close(jr), 0);

	/* A failed jitring_check() is printed with its rule. */
	t_dump_read(&du, d.dump);
	printf("file order:");
	for (size_t i = 0; i < du.nloads; i++) {
		const struct t_load *l = &du.loads[i];

		printf(" %s@%" PRIu64, l->name, l->ts);
		if (!strcmp(l->name, "P"))
			ts_p = l->ts;
		if (!strcmp(l->name, "Q2"))
			ts_q2 = l->ts;
	}
	printf("\nP re-stamped at %" PRIu64 " (the clock read inside "
	       "commit_late), Q2 stamped at %" PRIu64 "\n", s.clock_read,
	       ts_q2);
	/* docs/design.md section 3, Claim 3: the file is sorted. */
	T_CHECK_EQ(du.check, 0);
	T_CHECK(ts_p >= ts_q2 || ts_p == 0);
	t_dump_free(&du);
	t_dir_remove(&d);
	return t_report();
}

#else

int main(void)
{
	t_skip("needs -Dtestpoints=true (the write_stamped testpoint)");
}

#endif
