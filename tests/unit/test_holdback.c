/* SPDX-License-Identifier: MIT */
/*
 * The flusher's hold-back for a producer stalled between its timestamp and
 * its commit, made deterministic with testpoints: the "write_stamped" hook
 * parks one chosen thread (P) inside jitring_write() after it took its
 * timestamp; the "flusher_round" hook counts the flusher's rounds, so the
 * test waits for rounds, never for time.
 *
 *  (a) holdback_ms 60000: entries written after P stamped (so stamped
 *      later) must stay out of the file for as long as P is parked: after
 *      two full flusher rounds the file (read from disk) holds exactly the
 *      entries older than P's and entries_written says so.  Released, P's
 *      entry lands before all of them; the file is sorted; nothing late.
 *  (b) holdback_ms 20: jitring_flush() returns while P is still parked,
 *      with every later entry in the file (P was marked LATE).  Released,
 *      P's entry is re-stamped after all others, the file is still sorted,
 *      late_entries is 1 and holdback_max_ns at least 20 ms.
 *  (c) a 4 KiB ring_size and holdback_ms 20: other threads write far more
 *      than their rings hold while P is parked, and all of them complete
 *      (lossless) -- a parked producer does not stall everyone, and the
 *      rings did fill (ring_full_waits > 0).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "reader/reader.h"
#include "common/testpoint.h"

#ifdef JITRING_TESTPOINTS

#define OTHERS 4

static struct jitring *jr;
static char base[4096];

/* ------------------------------------------------------------------ */
/* Hooks.                                                               */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool parked;      /* P is inside the hook */
	bool release;     /* P may go on */
	uint64_t rounds;  /* flusher rounds completed */
	unsigned done;    /* other writers finished (c) */
	bool flushed;     /* the helper's flush returned (b) */
} tp = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

static __thread bool tl_park;
static _Atomic(struct jitring *) hook_jr;

static void hook(const char *name, void *arg)
{
	if (!strcmp(name, "flusher_round")) {
		if (arg != atomic_load(&hook_jr))
			return;
		pthread_mutex_lock(&tp.lock);
		tp.rounds++;
		pthread_cond_broadcast(&tp.cond);
		pthread_mutex_unlock(&tp.lock);
	} else if (!strcmp(name, "write_stamped") && tl_park) {
		tl_park = false;
		t_cond_park(&tp.lock, &tp.cond, &tp.parked, &tp.release);
	}
}

/* Wait for a condition on tp (under tp.lock); false after @sec seconds. */
#define TP_WAIT(cond_expr, sec) \
	T_COND_WAIT(&tp.lock, &tp.cond, cond_expr, sec)

static void tp_reset(void)
{
	pthread_mutex_lock(&tp.lock);
	tp.parked = tp.release = tp.flushed = false;
	tp.done = 0;
	pthread_mutex_unlock(&tp.lock);
}

static void tp_release(void)
{
	T_COND_SET(&tp.lock, &tp.cond, tp.release = true);
}

/* ------------------------------------------------------------------ */
/* Writers.                                                             */

static int64_t write_one(const char *name, uint64_t addr)
{
	return t_write_at(jr, name, addr);
}

struct pwriter {
	pthread_t th;
	int64_t ret;
};

static void *parked_main(void *arg)
{
	struct pwriter *p = arg;

	tl_park = true;
	p->ret = write_one("P", 0x500000);
	return NULL;
}

struct owriter {
	pthread_t th;
	unsigned id;
	unsigned n;
	int64_t *ret; /* [n] */
};

static void *other_main(void *arg)
{
	struct owriter *o = arg;
	char name[32];

	for (unsigned i = 0; i < o->n; i++) {
		snprintf(name, sizeof(name), "o%u_%u", o->id, i);
		o->ret[i] = write_one(name, 0x600000 + o->id * 0x100000 +
						    i * 64);
	}
	T_COND_SET(&tp.lock, &tp.cond, tp.done++);
	return NULL;
}

static void others_start(struct owriter *o, unsigned per)
{
	for (unsigned t = 0; t < OTHERS; t++) {
		o[t].id = t;
		o[t].n = per;
		o[t].ret = calloc(per, sizeof(*o[t].ret));
		T_REQUIRE(o[t].ret != NULL);
		T_REQUIRE(pthread_create(&o[t].th, NULL, other_main, &o[t]) ==
			  0);
	}
}

static void others_join(struct owriter *o)
{
	for (unsigned t = 0; t < OTHERS; t++)
		pthread_join(o[t].th, NULL);
}

static void others_free(struct owriter *o)
{
	for (unsigned t = 0; t < OTHERS; t++)
		free(o[t].ret);
}

/* ------------------------------------------------------------------ */
/* The file, read from disk.                                            */

/* Position of the load named @name, if it has index @idx; else -1. */
static long dump_find(const struct t_dump *d, const char *name, int64_t idx)
{
	const struct t_load *l = t_dump_find(d, name);

	return l && (int64_t)l->index == idx ? l - d->loads : -1;
}

static unsigned others_found(const struct t_dump *d, const struct owriter *o)
{
	unsigned found = 0;
	char name[32];

	for (unsigned t = 0; t < OTHERS; t++)
		for (unsigned i = 0; i < o[t].n; i++) {
			snprintf(name, sizeof(name), "o%u_%u", t, i);
			found += dump_find(d, name, o[t].ret[i]) >= 0;
		}
	return found;
}

static bool others_ok(const struct owriter *o)
{
	for (unsigned t = 0; t < OTHERS; t++)
		for (unsigned i = 0; i < o[t].n; i++)
			if (o[t].ret[i] <= 0)
				return false;
	return true;
}

static void open_in(const char *sub, uint32_t holdback_ms,
		    uint32_t ring_size, char *path, size_t len)
{
	struct jitring_config cfg;
	char dir[4200];

	snprintf(dir, sizeof(dir), "%s/%s", base, sub);
	T_REQUIRE(mkdir(dir, 0700) == 0);
	jitring_config_init(&cfg);
	cfg.dir = dir;
	cfg.holdback_ms = holdback_ms;
	cfg.ring_size = ring_size;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	atomic_store(&hook_jr, jr);
	snprintf(path, len, "%s/jit-%d.dump", dir, (int)getpid());
	tp_reset();
}

static uint64_t rounds_now(void)
{
	return T_LOCKED(&tp.lock, tp.rounds);
}

/* ------------------------------------------------------------------ */

static void test_held_back(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct owriter o[OTHERS];
	struct pwriter p = { 0 };
	int64_t pre[5];
	char path[4300], name[32];
	struct t_dump d;
	uint64_t r0;
	long pos_p;

	open_in("a", 60000, 0, path, sizeof(path));
	/* Entries older than P's: in the file before P even starts. */
	for (unsigned i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "pre%u", i);
		pre[i] = write_one(name, 0x400000 + i * 64);
		T_CHECK(pre[i] > 0);
	}
	T_CHECK_EQ(jitring_flush(jr), 0);

	T_REQUIRE(pthread_create(&p.th, NULL, parked_main, &p) == 0);
	T_REQUIRE(TP_WAIT(tp.parked, 30));
	/* Stamped after P's timestamp, committed while P is parked. */
	others_start(o, 8);
	others_join(o);
	T_CHECK(others_ok(o));

	/* Two full rounds after the writes returned: they would be out. */
	r0 = rounds_now();
	T_CHECK(TP_WAIT(tp.rounds >= r0 + 2, 30));
	jitring_stats(jr, &st);
	t_dump_read(&d, path);
	T_CHECK_EQ(d.check, 0);
	T_CHECK_EQ(d.nloads, 5);
	for (unsigned i = 0; i < 5; i++) {
		snprintf(name, sizeof(name), "pre%u", i);
		T_CHECK(dump_find(&d, name, pre[i]) == (long)i);
	}
	T_CHECK_EQ(others_found(&d, o), 0);
	T_CHECK_EQ(st.entries_written, 5);
	T_CHECK_EQ(st.late_entries, 0);
	t_dump_free(&d);

	tp_release();
	pthread_join(p.th, NULL);
	T_CHECK(p.ret > 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	t_dump_read(&d, path);
	T_CHECK_EQ(d.check, 0);
	T_CHECK_EQ(d.nloads, 5 + 1 + OTHERS * 8);
	T_CHECK_EQ(others_found(&d, o), OTHERS * 8);
	/* P's own stamp is older than every held entry: it comes first. */
	pos_p = dump_find(&d, "P", p.ret);
	T_CHECK_EQ(pos_p, 5);
	T_CHECK_EQ(st.entries_written, 5 + 1 + OTHERS * 8);
	T_CHECK_EQ(st.late_entries, 0);
	t_dump_free(&d);
	others_free(o);
	T_CHECK_EQ(jitring_close(jr), 0);
}

static void *flush_main(void *arg)
{
	int *ret = arg;

	*ret = jitring_flush(jr);
	T_COND_SET(&tp.lock, &tp.cond, tp.flushed = true);
	return NULL;
}

static void test_marked_late(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct owriter o[OTHERS];
	struct pwriter p = { 0 };
	char path[4300];
	pthread_t fl;
	int flush_ret = -1;
	bool flushed;
	struct t_dump d;
	long pos_p;
	uint64_t max_other = 0;

	open_in("b", 20, 0, path, sizeof(path));
	T_REQUIRE(pthread_create(&p.th, NULL, parked_main, &p) == 0);
	T_REQUIRE(TP_WAIT(tp.parked, 30));
	others_start(o, 8);
	others_join(o);
	T_CHECK(others_ok(o));

	/* The flush must not wait for P beyond the hold-back. */
	T_REQUIRE(pthread_create(&fl, NULL, flush_main, &flush_ret) == 0);
	flushed = TP_WAIT(tp.flushed, 30);
	T_CHECK(flushed);
	if (!flushed)
		tp_release(); /* unblock the flush so the test can end */
	pthread_join(fl, NULL);
	T_CHECK_EQ(flush_ret, 0);
	T_CHECK(TP_WAIT(tp.parked, 0)); /* P still inside its write */
	jitring_stats(jr, &st);
	t_dump_read(&d, path);
	T_CHECK_EQ(d.check, 0);
	T_CHECK_EQ(others_found(&d, o), OTHERS * 8);
	T_CHECK_EQ(d.nloads, OTHERS * 8);
	T_CHECK_EQ(st.entries_written, OTHERS * 8);
	for (size_t i = 0; i < d.nloads; i++)
		if (d.loads[i].ts > max_other)
			max_other = d.loads[i].ts;
	t_dump_free(&d);

	tp_release();
	pthread_join(p.th, NULL);
	T_CHECK(p.ret > 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	t_dump_read(&d, path);
	T_CHECK_EQ(d.check, 0);
	T_CHECK_EQ(d.nloads, OTHERS * 8 + 1);
	pos_p = dump_find(&d, "P", p.ret);
	/* Re-stamped at its commit: after everything else, file sorted. */
	T_CHECK_EQ(pos_p, (long)d.nloads - 1);
	if (pos_p >= 0)
		T_CHECK(d.loads[pos_p].ts > max_other);
	T_CHECK_EQ(st.late_entries, 1);
	T_CHECK(st.holdback_max_ns >= 20ull * 1000000u);
	T_CHECK_EQ(st.entries_written, OTHERS * 8 + 1);
	t_dump_free(&d);
	others_free(o);
	T_CHECK_EQ(jitring_close(jr), 0);
}

static void test_not_stalled(void)
{
	struct jitring_stats st = { .struct_size = sizeof(st) };
	struct owriter o[OTHERS];
	struct pwriter p = { 0 };
	const unsigned per = 500; /* ~25 times what a 4 KiB ring holds */
	char path[4300];
	bool all_done;
	struct t_dump d;

	open_in("c", 20, 4096, path, sizeof(path));
	T_REQUIRE(pthread_create(&p.th, NULL, parked_main, &p) == 0);
	T_REQUIRE(TP_WAIT(tp.parked, 30));
	others_start(o, per);
	all_done = TP_WAIT(tp.done == OTHERS, 30);
	T_CHECK(all_done);
	if (!all_done)
		tp_release();
	others_join(o);
	T_CHECK(others_ok(o));
	T_CHECK(TP_WAIT(tp.parked, 0));
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	T_CHECK(st.ring_full_waits > 0);
	T_CHECK_EQ(st.entries_written, OTHERS * per);
	T_CHECK_EQ(st.refused_dropped + st.refused_nomem, 0);

	tp_release();
	pthread_join(p.th, NULL);
	T_CHECK(p.ret > 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	jitring_stats(jr, &st);
	t_dump_read(&d, path);
	T_CHECK_EQ(d.check, 0);
	T_CHECK_EQ(d.nloads, OTHERS * per + 1);
	T_CHECK_EQ(others_found(&d, o), OTHERS * per);
	T_CHECK(dump_find(&d, "P", p.ret) >= 0);
	T_CHECK_EQ(st.late_entries, 1);
	t_dump_free(&d);
	others_free(o);
	T_CHECK_EQ(jitring_close(jr), 0);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(base, sizeof(base), "%s/jitring-holdback-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	T_REQUIRE(mkdtemp(base) != NULL);
	atomic_store(&jitring_testpoint_hook, hook);
	test_held_back();
	test_marked_late();
	test_not_stalled();
	atomic_store(&jitring_testpoint_hook, NULL);
	if (t_failed == 0)
		t_rmtree(base);
	else
		printf("dumps kept in %s\n", base);
	return t_report();
}

#else /* !JITRING_TESTPOINTS */

int main(void)
{
	t_skip("needs -Dtestpoints=true (write_stamped, flusher_round)");
	return T_EXIT_SKIP;
}

#endif
