/* SPDX-License-Identifier: MIT */
/*
 * Lifecycle races of the rings engine, each window held open with
 * testpoints so the interleaving is certain, not likely.  Every case was
 * written against the code that had the bug and failed there.
 *
 *  1. close vs detach, and close vs thread exit: close wins the
 *     ACTIVE->ORPHAN CAS on a live thread's ring ("close_orphan"), and the
 *     thread then lets go of the ring while close is still working on it.
 *     The thread must free only the control block and close only the
 *     buffer: the buffer must still be mapped when the thread is done (a
 *     thread that unmapped it let the address be reused, and close then
 *     unmapped the reuser: a "victim" mapping placed there must survive),
 *     and unmapped once close returns.  (ASan also saw close write to the
 *     freed control block.)  Also with a spare ring (pool_empty), whose
 *     control block is a slab's: once close is done with the slab's other
 *     rings, the slab is unmapped, by whichever side freed the last
 *     block.
 *  2. close in a fork child vs that child's first write: the write
 *     restarts the engine ("fork_restart") while close moves the state to
 *     CLOSING; the write must give up its user count and get -ESHUTDOWN,
 *     and close must return.  It used to spin forever (a watchdog alarm
 *     turns that into a failure).
 *  3. two first writes in a fork child whose engine restart fails: the
 *     second must not restart a FAILED writer (it used to start a flusher
 *     for it and leak the first attempt's state).
 *  4. the flusher must sleep while a flush, or a close, waits for a thread
 *     parked between its timestamp and its commit: counted in flusher
 *     rounds, which used to run back to back (a busy loop).
 *  5. pooled rings are not trimmed at birth: no MADV_DONTNEED in the
 *     flusher's first rounds (it used to drop the pre-faulted pages at
 *     once), and trimming still happens after the idle time; then a
 *     ready ring (one a thread used and let go) keeps exactly the page
 *     its next write lands on (it used to keep none, so the first write
 *     after a long idle faulted), an idle thread's ring keeps none.
 *  6. a flush must not complete while a ring that holds entries written
 *     before it could not be registered (no memory, "attach_reg" fault).
 *  7. a jumbo entry the parent had not written when it forked is freed in
 *     the child (LeakSanitizer in the ASan build reports it otherwise).
 *  8. drop mode with a full ring (flusher held): moving an index never
 *     handed out is -ENOENT, not -EAGAIN counted as a drop; a good index
 *     is -EAGAIN.
 *  9. close vs a producer between BUSY (A) and its state check (B)
 *     ("write_busy"): the flusher's stopping round sees it BUSY, then the
 *     producer backs out (-ESHUTDOWN) while the flusher is still awake,
 *     so its wake is a no-op; the flusher must count BUSY gone as news
 *     and not sleep forever in close (found by review: close hung).
 * 10. a new thread's first write after idle takes no page fault, also
 *     when its code_index block is the first on a fresh page of the
 *     idmap (the flusher keeps the next blocks' words resident; the
 *     first block on each page used to fault, one in 512 new threads).
 * 11. a thread that finds the ready pool empty takes a spare ring (not
 *     counted in refills_waited: no mmap), and makes its own only once the
 *     spares are out too; and a fork while a thread holds a spare it took
 *     but has not pushed to the attach stack ("ring_made") waits for the
 *     push: fork() gets make_lock only after the thread left its parking
 *     ("fork_make_locked"), and the child's close frees the ring
 *     (LeakSanitizer in the ASan build).  An untaken spare has no page
 *     resident, neither its control block nor its buffer, and is not
 *     counted in the budget until a thread takes it; under strict
 *     overcommit ("overcommit_strict") the stocks are a quarter and an
 *     eighth as large.
 * 12. growth in a storm: a thread whose first ring fills while the flusher
 *     cannot make its successor (held) trades it for a spare successor
 *     (counted in rings_grown, not rings_grown_waited: no system call),
 *     and makes its own only once those are out too ("spare_empty");
 *     every entry reaches the file.
 * 13. the pool a storm raised is given back while the process idles.
 * 14. a successor made ahead and never taken is trimmed like an idle ring.
 * 15. a new thread's pool take wakes a napping flusher only once the pool
 *     is under a quarter of its mark; with the flusher held between its
 *     round and its sleep-mode store ("flusher_round"), such takes find
 *     it awake and leave only pool_want, which it must see and refill.
 * 16. a write thread that cannot be started ("io_start"): the flusher
 *     writes every batch itself, all entries land, and none runs; with
 *     no fault it runs while writes flow and is gone after close.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "engines/rings/pool.h"
#include "reader/reader.h"
#include "engines/rings/rings_internal.h"
#include "common/testpoint.h"
#include "engines/rings/thread.h"

#ifdef JITRING_TESTPOINTS

static char base[4096];

/* ------------------------------------------------------------------ */
/* Shared hook state: one lock, one condition, named flags.             */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct jitring *jr;    /* the writer the hooks care about */
	int which;             /* the case running */
	/* case 1 */
	void *orphan_buf;      /* buffer of the ring close orphaned */
	size_t orphan_size;
	void *orphan_slab;     /* its slab, if a spare */
	bool victim;           /* the address was free: a victim took it */
	bool thread_go;        /* the ring's thread may let go */
	bool thread_done;      /* it did */
	pthread_t thread;
	bool by_exit;          /* it exits instead of detaching */
	/* case 2, 3 */
	unsigned in_restart;   /* threads inside restart_after_fork() */
	bool closing;          /* close passed close_closing */
	bool restart_go;
	/* case 4, 5, 6 */
	uint64_t rounds;
	bool parked;
	bool release;
	uint64_t trims;
	bool flush_done;
	/* case 5: resident pages of trimmed rings, seen by the flusher */
	bool pool_seen, idle_seen, pool_kept;
	unsigned pool_resident, idle_resident;
	/* case 7 */
	bool hold_flusher;
	bool flusher_held;
	/* case 9 */
	bool hold_after_stop;  /* park the flusher after a round saw stop */
	bool closed;
	/* case 14 */
	struct jr_ring *succ;  /* a successor made ahead, not taken yet */
	bool succ_parked;      /* the flusher holds it trimmed, under TRIM */
	bool succ_release;
} tp = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

/* The testpoint where this thread's next write parks (until release). */
static __thread const char *tl_park_at;
/* Faults the library asks about from its own threads. */
static _Atomic int fail_attach, pool_empty, spare_empty, fail_restart,
	fail_io_start, io_asked, io_ran;
static _Atomic int overcommit_strict;

/*
 * The forking thread (main): it reached make_lock's write side in
 * fork_prepare (at_lock), got it (locked), and whether the writer was
 * still parked with its spare then (parked_at_locked: the bug).
 */
static struct {
	pid_t tid;
	bool at_lock, locked, parked_at_locked;
} fk;

/* Wait under tp.lock for @cond_expr; false after @sec seconds. */
#define TP_WAIT(cond_expr, sec) \
	T_COND_WAIT(&tp.lock, &tp.cond, cond_expr, sec)

#define TP_SET(stmt) T_COND_SET(&tp.lock, &tp.cond, stmt)

static bool page_mapped(void *p)
{
	unsigned char v;

	return mincore(p, 1, &v) == 0;
}

static bool page_resident(void *p)
{
	unsigned char v = 0;
	uintptr_t page = (uintptr_t)p & ~(uintptr_t)(jitring_page_size() - 1);

	T_CHECK(mincore((void *)page, 1, &v) == 0);
	return v & 1;
}

/* Two flusher rounds: the first one's step 7 made the spares. */
static void make_spares(struct jitring *jr)
{
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
}

/* Is @r one of @jr's rings?  On the flusher only (its registry). */
static bool ring_of(struct jitring *jr, struct jr_ring *r)
{
	struct jr_rings *e = jr ? jr->eng : NULL;

	for (uint32_t i = 0; e && i < e->nreg; i++)
		if (e->reg[i] == r)
			return true;
	return false;
}

/* Case 5: what a trim left resident (the ring is under TRIM: ours). */
static void trim_seen(struct jr_ring *r)
{
	size_t page = jitring_page_size();
	size_t kept = (r->head_local & r->mask) / page;
	uint32_t own = atomic_load(&r->own);
	unsigned char vec[1024];
	unsigned n = 0;

	if (r->size / page > sizeof(vec) || mincore(r->buf, r->size, vec))
		return;
	for (size_t i = 0; i < r->size / page; i++)
		n += vec[i] & 1;
	pthread_mutex_lock(&tp.lock);
	/*
	 * own is read after the trim: a fresh pooled ring a thread took
	 * meanwhile reads ACTIVE (its first write waits for TRIM).  So the
	 * idle thread's ring is one holding a commit (seen_tail) once the
	 * holder has written; the ready ring the one given back after use.
	 */
	if (own == JR_OWN_POOLED && r->head_local) {
		tp.pool_seen = true;
		tp.pool_resident = n;
		tp.pool_kept = vec[kept] & 1;
	} else if (own == JR_OWN_ACTIVE && r->seen_tail && tp.restart_go) {
		tp.idle_seen = true;
		tp.idle_resident = n;
	}
	pthread_cond_broadcast(&tp.cond);
	pthread_mutex_unlock(&tp.lock);
}

static void hook(const char *name, void *arg)
{
	struct jitring *jr;
	int which;

	if (!strcmp(name, "io_thread")) {
		atomic_fetch_add(&io_ran, 1);
		return;
	}

	pthread_mutex_lock(&tp.lock);
	jr = tp.jr;
	which = tp.which;
	pthread_mutex_unlock(&tp.lock);
	if (!strcmp(name, "flusher_round")) {
		if (arg != jr)
			return;
		pthread_mutex_lock(&tp.lock);
		tp.rounds++;
		pthread_cond_broadcast(&tp.cond);
		if (tp.hold_after_stop &&
		    ((struct jr_rings *)jr->eng)->stop_seen) {
			tp.hold_after_stop = false;
			tp.hold_flusher = true;
		}
		while (tp.hold_flusher) {
			tp.flusher_held = true;
			pthread_cond_broadcast(&tp.cond);
			pthread_cond_wait(&tp.cond, &tp.lock);
		}
		tp.flusher_held = false;
		pthread_mutex_unlock(&tp.lock);
	} else if (!strcmp(name, "ring_trimmed")) {
		struct jr_ring *r = arg;

		/* r->jr is the producer's field (a thread may be taking r):
		 * ask the flusher's own registry instead. */
		if (!ring_of(jr, r))
			return;
		TP_SET(tp.trims++);
		if (which == 5)
			trim_seen(r);
		if (which == 14 && r == T_LOCKED(&tp.lock, tp.succ))
			t_cond_park(&tp.lock, &tp.cond, &tp.succ_parked,
				    &tp.succ_release);
	} else if (!strcmp(name, "close_orphan") && which == 1) {
		struct jr_ring *r = arg;

		/* Close owns the buffer now; let the thread go meanwhile. */
		pthread_mutex_lock(&tp.lock);
		tp.orphan_buf = r->buf;
		tp.orphan_size = r->size;
		tp.orphan_slab = r->slab;
		tp.thread_go = true;
		pthread_cond_broadcast(&tp.cond);
		while (!tp.by_exit && !tp.thread_done)
			pthread_cond_wait(&tp.cond, &tp.lock);
		pthread_mutex_unlock(&tp.lock);
		/* Joined: its TLS destructor has run. */
		if (tp.by_exit)
			pthread_join(tp.thread, NULL);
		/*
		 * If the thread unmapped the buffer, its address is free for
		 * anyone: take it, as a JIT's next code arena might.
		 */
		void *v = mmap(tp.orphan_buf, 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS |
				       MAP_FIXED_NOREPLACE,
			       -1, 0);
		if (v == tp.orphan_buf)
			tp.victim = true;
		else if (v != MAP_FAILED)
			munmap(v, 4096);
	} else if (!strcmp(name, "close_closing") &&
		   (which == 2 || which == 4)) {
		TP_SET(tp.closing = true);
	} else if (!strcmp(name, "fork_restart_enter") && which == 3) {
		/* Both first writes get this far before either restarts. */
		pthread_mutex_lock(&tp.lock);
		tp.in_restart++;
		pthread_cond_broadcast(&tp.cond);
		while (tp.in_restart < 2)
			pthread_cond_wait(&tp.cond, &tp.lock);
		pthread_mutex_unlock(&tp.lock);
	} else if (!strcmp(name, "fork_restart") && which == 2) {
		/* The engine is up; hold the state CAS until close began. */
		pthread_mutex_lock(&tp.lock);
		tp.in_restart++;
		pthread_cond_broadcast(&tp.cond);
		while (!tp.closing)
			pthread_cond_wait(&tp.cond, &tp.lock);
		pthread_mutex_unlock(&tp.lock);
	} else if (!strcmp(name, "fork_make_lock") && which == 11) {
		TP_SET(fk.at_lock = true);
	} else if (!strcmp(name, "fork_make_locked") && which == 11) {
		TP_SET(fk.locked = true; fk.parked_at_locked = tp.parked);
	} else if (tl_park_at && !strcmp(name, tl_park_at)) {
		tl_park_at = NULL;
		t_cond_park(&tp.lock, &tp.cond, &tp.parked, &tp.release);
	}
}

static int fault(const char *name, void *arg)
{
	(void)arg;
	if (!strcmp(name, "attach_reg"))
		return atomic_load(&fail_attach);
	if (!strcmp(name, "pool_empty"))
		return atomic_load(&pool_empty);
	if (!strcmp(name, "spare_empty"))
		return atomic_load(&spare_empty);
	if (!strcmp(name, "overcommit_strict"))
		return atomic_load(&overcommit_strict);
	if (!strcmp(name, "io_start")) {
		atomic_fetch_add(&io_asked, 1);
		return atomic_load(&fail_io_start);
	}
	if (!strcmp(name, "fork_restart")) /* once */
		return atomic_exchange(&fail_restart, 0);
	return 0;
}

static void tp_fork_hold(void)
{
	pthread_mutex_lock(&tp.lock);
}

static void tp_fork_release(void)
{
	pthread_mutex_unlock(&tp.lock);
}

static void tp_reset(struct jitring *jr, int which)
{
	pthread_mutex_lock(&tp.lock);
	memset((char *)&tp + offsetof(__typeof__(tp), jr), 0,
	       sizeof(tp) - offsetof(__typeof__(tp), jr));
	tp.jr = jr;
	tp.which = which;
	pthread_mutex_unlock(&tp.lock);
}

/* ------------------------------------------------------------------ */
/* Helpers.                                                             */

static struct jitring *open_ready(const char *sub, uint32_t ring_size,
				  uint32_t holdback_ms, uint32_t ready_rings,
				  uint32_t max_delay_ms)
{
	struct jitring_config cfg;
	struct jitring *jr = NULL;
	char dir[4200];

	snprintf(dir, sizeof(dir), "%s/%s", base, sub);
	mkdir(dir, 0755);
	jitring_config_init(&cfg);
	cfg.engine = JITRING_ENGINE_RINGS;
	cfg.dir = dir;
	cfg.ring_size = ring_size;
	cfg.holdback_ms = holdback_ms;
	cfg.ready_rings = ready_rings;
	cfg.max_delay_ms = max_delay_ms;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	return jr;
}

static struct jitring *open_in(const char *sub, uint32_t ring_size,
			       uint32_t holdback_ms)
{
	return open_ready(sub, ring_size, holdback_ms, 0, 0);
}

/* Loads in this process's dump in @sub, or -1 if it does not check out. */
static long count_loads(const char *sub)
{
	char path[4300];

	snprintf(path, sizeof(path), "%s/%s/jit-%d.dump", base, sub,
		 (int)getpid());
	return t_dump_loads(path, "", NULL);
}

/* ------------------------------------------------------------------ */
/* 1. close vs detach / thread exit.                                    */

static void *holder_main(void *arg)
{
	struct jitring *jr = arg;
	int64_t id = t_write_at(jr, "held", 0x400000);

	T_CHECK(id > 0);
	TP_SET(tp.restart_go = true); /* attached */
	T_REQUIRE(TP_WAIT(tp.thread_go, 30));
	/* By exit: the TLS destructor lets go once we return. */
	if (!tp.by_exit) {
		T_CHECK_EQ(jitring_thread_detach(jr), 1);
		TP_SET(tp.thread_done = true);
	}
	return NULL;
}

static void case_close_vs_release(bool by_exit, bool spare)
{
	const char *sub = by_exit ? (spare ? "c1exits" : "c1exit") :
				    (spare ? "c1detachs" : "c1detach");
	struct jitring *jr = open_in(sub, 0, 0);
	void *buf;

	tp_reset(jr, 1);
	TP_SET(tp.by_exit = by_exit);
	if (spare) {
		make_spares(jr);
		atomic_store(&pool_empty, 1);
	}
	T_REQUIRE(pthread_create(&tp.thread, NULL, holder_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.restart_go, 30));
	atomic_store(&pool_empty, 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	if (!by_exit)
		pthread_join(tp.thread, NULL);
	buf = tp.orphan_buf;
	T_CHECK(buf != NULL);
	/* The thread left the buffer to close... */
	T_CHECK(!tp.victim);
	/* ...and a mapping that took a freed address was never unmapped. */
	if (tp.victim) {
		T_CHECK(page_mapped(buf));
		munmap(buf, 4096);
	}
	/* Close unmapped the buffer. */
	if (buf && !tp.victim)
		T_CHECK(!page_mapped(buf));
	/* A spare's slab went with its last block. */
	T_CHECK_EQ(tp.orphan_slab != NULL, spare);
	if (tp.orphan_slab)
		T_CHECK(!page_mapped(tp.orphan_slab));
	T_CHECK_EQ(count_loads(sub), 1);
	printf("close vs %s%s: buffer %s\n", by_exit ? "thread exit" : "detach",
	       spare ? " (a spare's ring)" : "",
	       tp.victim ? "unmapped by the thread (bug)" :
			   "left to close, unmapped once");
}

/* ------------------------------------------------------------------ */
/* 2, 3. Fork child: close vs first write; failed restarts.             */

static void *first_write_main(void *arg)
{
	struct jitring *jr = arg;
	int64_t *ret = malloc(sizeof(*ret));

	*ret = t_write_at(jr, "child", 0x410000);
	return ret;
}

/* Child of case 2; exit code: 0 ok, 1 failed check, killed on a hang. */
static int child_close_vs_first_write(struct jitring *jr)
{
	unsigned long f0 = t_failed;
	pthread_t th;
	int64_t *ret;
	int rc;

	tp_reset(jr, 2);
	alarm(20); /* a hang in close is the bug: fail, do not hang */
	if (pthread_create(&th, NULL, first_write_main, jr))
		return 1;
	if (!TP_WAIT(tp.in_restart == 1, 30))
		return 1;
	rc = jitring_close(jr);
	pthread_join(th, (void **)&ret);
	T_CHECK_EQ(rc, 0);
	T_CHECK_EQ(*ret, -ESHUTDOWN);
	free(ret);
	return t_failed != f0;
}

static int child_failed_restarts(struct jitring *jr)
{
	pthread_t th[2];
	int64_t *ret[2];
	unsigned long f0 = t_failed;
	uint64_t rounds;

	tp_reset(jr, 3);
	alarm(20);
	atomic_store(&fail_restart, 1);
	for (int i = 0; i < 2; i++)
		if (pthread_create(&th[i], NULL, first_write_main, jr))
			return 1;
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], (void **)&ret[i]);
	/* Both refused with the first restart's error; no second try. */
	T_CHECK_EQ(*ret[0], -ENOMEM);
	T_CHECK_EQ(*ret[1], -ENOMEM);
	free(ret[0]);
	free(ret[1]);
	T_CHECK_EQ(jitring_close(jr), -ENOMEM);
	pthread_mutex_lock(&tp.lock);
	rounds = tp.rounds;
	pthread_mutex_unlock(&tp.lock);
	/* No flusher ever ran for the failed writer (close joined any). */
	T_CHECK_EQ(rounds, 0);
	return t_failed != f0;
}

static void case_fork(int which)
{
	struct jitring *jr = open_in(which == 2 ? "c2" : "c3", 0, 0);
	int status = 0;
	pid_t pid;

	T_CHECK(t_write_at(jr, "parent", 0x420000) > 0);
	tp_reset(jr, 0);
	fflush(stdout);
	pid = fork();
	T_REQUIRE(pid >= 0);
	if (pid == 0)
		_exit(which == 2 ? child_close_vs_first_write(jr) :
				   child_failed_restarts(jr));
	T_REQUIRE(waitpid(pid, &status, 0) == pid);
	T_CHECK(WIFEXITED(status));
	if (WIFSIGNALED(status))
		fprintf(stderr, "child killed by signal %d (%s)\n",
			WTERMSIG(status),
			WTERMSIG(status) == SIGALRM ? "hung" : "crash");
	T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(count_loads(which == 2 ? "c2" : "c3"), 1);
	printf("fork child: %s: %s\n",
	       which == 2 ? "close vs first write" : "failed restarts",
	       WIFEXITED(status) ? "returned" : "hung or crashed");
}

/* ------------------------------------------------------------------ */
/* 4. The flusher sleeps while a flush or close waits on a stall.       */

/* A write "P" at @addr that parks at testpoint @at until tp.release. */
static intptr_t park_write(struct jitring *jr, const char *at, uint64_t addr)
{
	tl_park_at = at;
	return (intptr_t)t_write_at(jr, "P", addr);
}

static void *parked_main(void *arg)
{
	return (void *)park_write(arg, "write_stamped", 0x500000);
}

static void *flush_main(void *arg)
{
	intptr_t r = jitring_flush(arg);

	TP_SET(tp.flush_done = true);
	return (void *)r;
}

static void *close_main(void *arg)
{
	intptr_t r = jitring_close(arg);

	TP_SET(tp.closed = true);
	return (void *)r;
}

static uint64_t rounds_now(void)
{
	return T_LOCKED(&tp.lock, tp.rounds);
}

static void case_flusher_sleeps(void)
{
	/* holdback 300 ms: a flush behind P completes once P is LATE. */
	struct jitring *jr = open_in("c4", 0, 300);
	pthread_t p, f, c;
	uint64_t r0, r1, r2;
	void *pr;
	struct timespec until;

	tp_reset(jr, 4);
	T_REQUIRE(pthread_create(&p, NULL, parked_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.parked, 30));
	/* An entry stamped after P's: held back until P is marked LATE. */
	T_CHECK(t_write_at(jr, "Q", 0x510000) > 0);
	r0 = rounds_now();
	T_REQUIRE(pthread_create(&f, NULL, flush_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.flush_done, 30));
	pthread_join(f, NULL);
	r1 = rounds_now() - r0;
	/*
	 * A round every time something happens (flush request, the
	 * hold-back deadline), not one per millisecond (300) or a busy loop
	 * (tens of thousands).
	 */
	T_CHECK(r1 <= 20);

	/* Close behind P: P stays parked for 200 ms of close. */
	TP_SET(tp.release = false);
	r0 = rounds_now();
	T_REQUIRE(pthread_create(&c, NULL, close_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.closing, 30));
	/* The stimulus is elapsed time here, not a handshake. */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 200 * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&tp.lock);
	while (pthread_cond_timedwait(&tp.cond, &tp.lock, &until) == 0)
		;
	tp.release = true;
	pthread_cond_broadcast(&tp.cond);
	pthread_mutex_unlock(&tp.lock);
	pthread_join(p, &pr);
	pthread_join(c, NULL);
	r2 = rounds_now() - r0;
	T_CHECK(r2 <= 20);
	/* P committed before close finished, or backed out: never lost. */
	T_CHECK((intptr_t)pr > 0 || (intptr_t)pr == -ESHUTDOWN);
	T_CHECK(count_loads("c4") >= 1);
	printf("flusher rounds while a flush waited 300 ms: %" PRIu64
	       "; while a close waited 200 ms: %" PRIu64 "\n",
	       r1, r2);
}

/* ------------------------------------------------------------------ */
/* 5. No trim at birth.                                                 */

/* Write past the ring's first page, then let the ring go. */
static void *used_ring_main(void *arg)
{
	struct jitring *jr = arg;
	static uint8_t code[1500];
	struct jitring_entry e = {
		.name = "used",
		.code_addr = (const void *)0x600000,
		.code_size = sizeof(code),
		.code_bytes = code,
	};

	for (int i = 0; i < 4; i++)
		T_CHECK(jitring_write(jr, &e) > 0);
	T_CHECK_EQ(jitring_thread_detach(jr), 1);
	return NULL;
}

static void case_no_trim_at_birth(void)
{
	struct jitring *jr;
	uint64_t trims;
	bool later;

	tp_reset(NULL, 5);
	jr = open_in("c5", 0, 0);
	TP_SET(tp.jr = jr);
	/* Several full rounds after open. */
	for (int i = 0; i < 3; i++)
		T_CHECK_EQ(jitring_flush(jr), 0);
	pthread_mutex_lock(&tp.lock);
	trims = tp.trims;
	pthread_mutex_unlock(&tp.lock);
	T_CHECK_EQ(trims, 0);
	/* Idle for the trim time (1 s): the pool's pages do go. */
	later = TP_WAIT(tp.trims > 0, 10);
	T_CHECK(later);
	/* A ring used past its first page and let go (back to the pool),
	 * and a thread that stays attached, idle. */
	T_REQUIRE(pthread_create(&tp.thread, NULL, used_ring_main, jr) == 0);
	pthread_join(tp.thread, NULL);
	T_REQUIRE(pthread_create(&tp.thread, NULL, holder_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.restart_go, 30));
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_REQUIRE(TP_WAIT(tp.pool_seen && tp.idle_seen, 10));
	pthread_mutex_lock(&tp.lock);
	T_CHECK(tp.pool_kept);
	T_CHECK_EQ(tp.pool_resident, 1);
	T_CHECK_EQ(tp.idle_resident, 0);
	printf("trims in the first rounds: %" PRIu64 "; after idling: %s; "
	       "a ready ring kept %u page(s)%s, an idle thread's %u\n",
	       trims, later ? "yes" : "no", tp.pool_resident,
	       tp.pool_kept ? " (its next write's)" : "", tp.idle_resident);
	tp.thread_go = true;
	pthread_cond_broadcast(&tp.cond);
	pthread_mutex_unlock(&tp.lock);
	pthread_join(tp.thread, NULL);
	T_CHECK_EQ(jitring_close(jr), 0);
}

/* ------------------------------------------------------------------ */
/* 6. A flush waits for a ring it could not register.                   */

static void *writer_main(void *arg)
{
	return (void *)(intptr_t)t_write_at(arg, "W", 0x600000);
}

static void case_flush_unregistered(void)
{
	struct jitring *jr = open_in("c6", 0, 0);
	pthread_t w, f;
	void *wr;
	bool early;

	tp_reset(jr, 6);
	/* The thread makes its own ring; registering it fails. */
	atomic_store(&pool_empty, 1);
	atomic_store(&fail_attach, 1);
	T_REQUIRE(pthread_create(&w, NULL, writer_main, jr) == 0);
	pthread_join(w, &wr);
	T_CHECK((intptr_t)wr > 0);
	T_REQUIRE(pthread_create(&f, NULL, flush_main, jr) == 0);
	/* Three rounds that could not register the ring. */
	uint64_t r0 = rounds_now();
	T_REQUIRE(TP_WAIT(tp.rounds >= r0 + 3 || tp.flush_done, 30));
	pthread_mutex_lock(&tp.lock);
	early = tp.flush_done;
	pthread_mutex_unlock(&tp.lock);
	T_CHECK(!early);
	atomic_store(&fail_attach, 0);
	atomic_store(&pool_empty, 0);
	pthread_join(f, NULL);
	T_CHECK_EQ(count_loads("c6"), 1);
	T_CHECK_EQ(jitring_close(jr), 0);
	printf("flush with an unregistered ring: %s\n",
	       early ? "completed early (bug)" : "waited for it");
}

/* ------------------------------------------------------------------ */
/* 7. The parent's unwritten jumbo entries in a fork child.             */

static void case_fork_jumbo(void)
{
	/* 4 KiB rings: a 3 KiB entry goes by reference (jumbo). */
	struct jitring *jr = open_in("c7", 4096, 0);
	static uint8_t big[3072];
	struct jitring_entry e = {
		.name = "big",
		.code_addr = (const void *)0x700000,
		.code_size = sizeof(big),
		.code_bytes = big,
	};
	int status = 0;
	pid_t pid;

	tp_reset(jr, 7);
	TP_SET(tp.hold_flusher = true);
	T_REQUIRE(TP_WAIT(tp.flusher_held, 30));
	T_CHECK(jitring_write(jr, &e) > 0);
	fflush(stdout);
	pid = fork();
	T_REQUIRE(pid >= 0);
	if (pid == 0) {
		/* exit(), not _exit(): LeakSanitizer runs at exit. */
		exit(jitring_close(jr) == 0 ? 0 : 1);
	}
	T_REQUIRE(waitpid(pid, &status, 0) == pid);
	T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	TP_SET(tp.hold_flusher = false);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(count_loads("c7"), 1);
	printf("fork with an unwritten jumbo entry: child exit %d\n",
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* ------------------------------------------------------------------ */
/* 8. A bad move in drop mode with a full ring.                         */

static void case_drop_move(void)
{
	struct jitring_config cfg;
	struct jitring *jr = NULL;
	struct jitring_stats st;
	char dir[4200];
	int64_t id, last = 0;
	int n = 0;

	snprintf(dir, sizeof(dir), "%s/c8", base);
	mkdir(dir, 0755);
	jitring_config_init(&cfg);
	cfg.dir = dir;
	cfg.ring_size = 4096;
	cfg.flags = JITRING_F_DROP;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	tp_reset(jr, 8);
	TP_SET(tp.hold_flusher = true);
	T_REQUIRE(TP_WAIT(tp.flusher_held, 30));
	while ((id = t_write_at(jr, "fill", 0x800000 + (uint64_t)n * 64)) > 0 &&
	       n < 10000) {
		last = id;
		n++;
	}
	T_CHECK_EQ(id, -EAGAIN);
	st = t_stats(jr);
	T_CHECK_EQ(jitring_move(jr, 1u << 30, (void *)0x900000, NULL, 16),
		   -ENOENT);
	T_CHECK_EQ(jitring_move(jr, (uint64_t)last, (void *)0x900000, NULL,
				16),
		   -EAGAIN);
	/* One more drop (the good move), one more invalid (the bad one). */
	T_CHECK_EQ(t_stats(jr).refused_dropped, st.refused_dropped + 1);
	T_CHECK_EQ(t_stats(jr).refused_invalid, st.refused_invalid + 1);
	TP_SET(tp.hold_flusher = false);
	T_CHECK_EQ(jitring_close(jr), 0);
	printf("drop mode, full ring after %d writes: bad move -ENOENT\n", n);
}

/* ------------------------------------------------------------------ */
/* 9. Close vs a producer that backs out after the flusher saw it BUSY. */

/* Attached and settled first (no pool refill pending), then parked. */
static void *settled_parked_main(void *arg)
{
	if (t_write_at(arg, "P0", 0xa10000) <= 0 || jitring_flush(arg))
		return (void *)(intptr_t)-1;
	return (void *)park_write(arg, "write_busy", 0xa20000);
}

static void case_backout(void)
{
	struct jitring *jr = open_in("c9", 0, 0);
	pthread_t p, c;
	void *pr, *cr;
	bool closed;

	tp_reset(jr, 9);
	T_CHECK(t_write_at(jr, "warm", 0xa00000) > 0);
	TP_SET(tp.hold_after_stop = true);
	/* P parks between (A) and (B). */
	T_REQUIRE(pthread_create(&p, NULL, settled_parked_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.parked, 30));
	/* Close; its flusher's stopping round sees P BUSY, then parks. */
	T_REQUIRE(pthread_create(&c, NULL, close_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.flusher_held, 30));
	/* P reads CLOSING at (B) and backs out; the flusher is awake. */
	TP_SET(tp.release = true);
	pthread_join(p, &pr);
	T_CHECK_EQ((intptr_t)pr, -ESHUTDOWN);
	/* The flusher goes to sleep now: close must still finish. */
	TP_SET(tp.hold_flusher = false);
	closed = TP_WAIT(tp.closed, 10);
	T_CHECK(closed);
	if (!closed) {
		/* Unstick it so the program ends: any wake will do. */
		atomic_store(&jitring_testpoint_hook, NULL);
		jitring_rings_kick(jr);
	}
	pthread_join(c, &cr);
	T_CHECK_EQ((intptr_t)cr, 0);
	T_CHECK_EQ(count_loads("c9"), 2);
	printf("close vs a producer backing out after the flusher saw it "
	       "BUSY: %s\n", closed ? "returned" : "hung (bug)");
}

/* ------------------------------------------------------------------ */
/* 10. A first write takes no page fault.                               */

static void *first_fault_main(void *arg)
{
	struct jitring *jr = arg;
	volatile char stack[16 << 10];
	struct rusage r0, r1;
	int64_t id;

	/* Our own stack's pages are not the library's to have ready. */
	memset((char *)stack, 1, sizeof(stack));
	getrusage(RUSAGE_THREAD, &r0);
	id = t_write_at(jr, "first", 0x500000);
	getrusage(RUSAGE_THREAD, &r1);
	T_CHECK(id > 0);
	return (void *)(intptr_t)(r1.ru_minflt - r0.ru_minflt);
}

/* The idmap word of @id (its chunk must exist). */
static _Atomic uint64_t *idmap_word(struct jitring *jr, uint64_t id)
{
	struct jr_rings *e = jr->eng;
	_Atomic uint64_t *chunk = atomic_load(&e->idmap[id >> JR_IDMAP_SHIFT]);

	T_REQUIRE(chunk != NULL);
	return &chunk[(id >> 6) & (JR_IDMAP_WORDS - 1)];
}

static void case_first_write_faults(void)
{
	struct jitring *jr = open_in("c10", 0, 0);
	uintptr_t page = jitring_page_size(), lo, hi;
	pthread_t t;
	void *faults;

	tp_reset(jr, 10);
	/* The write path's code and the clock, warm (not what is tested). */
	T_CHECK(t_write_at(jr, "warm", 0x400000) > 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	/*
	 * Skip the ids the flusher already keeps resident, up to a block
	 * whose idmap word starts a page.  From there to the chunk's end the
	 * pages hold no issued id: drop them, as if never touched, whatever
	 * the allocator had in them.  Then one round, and a new thread.
	 */
	for (uint64_t i = 0; i < 2 * JR_IDMAP_AHEAD / JR_ID_BLOCK; i++)
		(void)jitring_ids_take();
	while ((uintptr_t)idmap_word(jr, jitring_ids_peek()) % page)
		(void)jitring_ids_take();
	lo = (uintptr_t)idmap_word(jr, jitring_ids_peek());
	hi = ((uintptr_t)idmap_word(jr, jitring_ids_peek() |
					    ((1ull << JR_IDMAP_SHIFT) - 1)) +
	      8) & ~(page - 1);
	T_REQUIRE(lo < hi);
	T_CHECK_EQ(madvise((void *)lo, hi - lo, MADV_DONTNEED), 0);
	/*
	 * Two flushes: a round completes a flush (step 6) before its upkeep
	 * (step 7: the pool, the idmap ahead), so only the second one proves
	 * that a whole round ran after the madvise.  With one, a loaded
	 * machine let the new thread write first (1 fault, 1 run in 16 with
	 * two CPU hogs and the write thread; 0 in 32 with two flushes).
	 */
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_REQUIRE(pthread_create(&t, NULL, first_fault_main, jr) == 0);
	pthread_join(t, &faults);
#if !T_SANITIZED
	/* A sanitizer's runtime faults in its own memory for a new thread. */
	T_CHECK_EQ((intptr_t)faults, 0);
#endif
	T_CHECK_EQ(jitring_close(jr), 0);
	printf("page faults in a new thread's first write: %d\n",
	       (int)(intptr_t)faults);
}

/* ------------------------------------------------------------------ */
/* 11. Spare rings: taken when the pool is empty; a fork in between.    */

static void *spare_parked_main(void *arg)
{
	return (void *)park_write(arg, "ring_made", 0x510000);
}

/* Is thread @tid of this process asleep (state S)? */
static bool thread_sleeping(pid_t tid)
{
	char path[64], buf[256], *p;
	FILE *f;
	bool s = false;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')))
		s = p[1] == ' ' && p[2] == 'S';
	fclose(f);
	return s;
}

/* Release the parked writer once main waits for make_lock in fork() (or
 * got it: the bug, seen by the hook). */
static void *releaser_main(void *arg)
{
	(void)arg;
	T_CHECK(TP_WAIT(fk.at_lock, 30));
	T_POLL_UNTIL(T_LOCKED(&tp.lock, fk.locked) || thread_sleeping(fk.tid),
		     10000);
	TP_SET(tp.release = true);
	return NULL;
}

static void case_spares(void)
{
	struct jitring *jr = open_in("c11", 0, 0);
	struct jr_rings *e = jr->eng;
	pthread_t w, f;
	void *wr;
	uint64_t w0;
	uint32_t kept, spares = e->spare.target, grows = e->grow.target;
	int status = 0;
	pid_t pid;

	tp_reset(jr, 11);
	/* The defaults (a quarter and an eighth under strict overcommit). */
	if (jitring_host_overcommit_strict())
		T_CHECK(spares == 1024 && grows == 127);
	else
		T_CHECK(spares == 4096 && grows == 1020);
	make_spares(jr);
	kept = ck_ring_size(&e->spare.q);
	/* Whole slabs: the target, and less than one slab more. */
	T_CHECK(kept >= e->spare.target &&
		kept < e->spare.target + JR_SLAB_RINGS);
	T_REQUIRE(kept > 0);
	/* Not in the budget until taken: the pool's rings are. */
	T_CHECK(atomic_load(&e->ring_bytes) < (uint64_t)kept * jr->ring_min);
	{
		/* The newest spare: no page of it is resident. */
		struct jr_ring *last =
			e->spare.buf[(e->spare.q.p_tail - 1) & e->spare.q.mask]
				.value;
		struct jr_slab *slab = (struct jr_slab *)((uintptr_t)last &
							  ~(uintptr_t)(JR_SLAB_BYTES - 1));
		size_t i = ((uintptr_t)last - (uintptr_t)slab) / JR_CTL_BYTES;

		T_CHECK(i >= 8); /* past the header's page */
		T_CHECK(!page_resident(last));
		T_CHECK(!page_resident(slab->bufs + (i - 1) * slab->size));
		T_CHECK(page_mapped(slab->bufs + (i - 1) * slab->size));
	}

	atomic_store(&pool_empty, 1);
	w0 = t_stats(jr).refills_waited;
	T_REQUIRE(pthread_create(&w, NULL, writer_main, jr) == 0);
	pthread_join(w, &wr);
	T_CHECK((intptr_t)wr > 0);
	T_CHECK_EQ(t_stats(jr).refills_waited, w0);

	atomic_store(&spare_empty, 1);
	T_REQUIRE(pthread_create(&w, NULL, writer_main, jr) == 0);
	pthread_join(w, &wr);
	T_CHECK((intptr_t)wr > 0);
	T_CHECK_EQ(t_stats(jr).refills_waited, w0 + 1);
	atomic_store(&spare_empty, 0);

	/*
	 * A thread holds a spare between take and push; main forks (so the
	 * child has main's thread-local rings), and a helper lets the
	 * thread go once main is asleep in fork().
	 */
	memset(&fk, 0, sizeof(fk));
	fk.tid = gettid();
	T_REQUIRE(pthread_create(&w, NULL, spare_parked_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.parked, 30));
	T_REQUIRE(pthread_create(&f, NULL, releaser_main, NULL) == 0);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		/* Another thread may have held tp.lock at the fork: no hooks
		 * here.  exit(), not _exit(): LeakSanitizer runs at exit. */
		atomic_store(&jitring_testpoint_hook, NULL);
		atomic_store(&jitring_fault_hook, NULL);
		alarm(20); /* a hang in close is a failure, not a hang */
		exit(jitring_close(jr) == 0 ? 0 : 1);
	}
	T_REQUIRE(pid > 0);
	T_REQUIRE(waitpid(pid, &status, 0) == pid);
	pthread_join(f, NULL);
	pthread_join(w, &wr);
	T_CHECK((intptr_t)wr > 0);
	T_CHECK(fk.locked && !fk.parked_at_locked);
	T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	atomic_store(&pool_empty, 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(count_loads("c11"), 3);

	/* Strict overcommit (vm.overcommit_memory=2) charges untouched
	 * mappings: a quarter of the spares, an eighth of the successors. */
	{
		atomic_store(&overcommit_strict, 1);
		jr = open_in("c11s", 0, 0);
		atomic_store(&overcommit_strict, 0);
		e = jr->eng;
		T_CHECK_EQ(e->spare.target, 1024);
		T_CHECK_EQ(e->grow.target, 127);
		T_CHECK(e->spare.target > 0 && e->grow.target > 0);
		T_CHECK_EQ(jitring_close(jr), 0);
	}
	printf("spare rings: %u kept; a pool miss took one (refills_waited "
	       "+0), with none left it made one (+1); a fork %s the "
	       "thread holding one; child exit %d\n",
	       kept, fk.parked_at_locked ? "did not wait for" : "waited for",
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* ------------------------------------------------------------------ */
/* 12. A first ring that fills before the flusher made its successor.  */

/* Write until the thread's ring was traded (rings_grown moved): the
 * number of entries written, or -1. */
static void *grower_main(void *arg)
{
	struct jitring *jr = arg;
	uint64_t g0 = t_stats(jr).rings_grown;
	intptr_t n = 0;

	while (t_stats(jr).rings_grown == g0 && n < 100000) {
		if (t_write_at(jr, "G", 0xb00000 + (uint64_t)n * 64) <= 0)
			return (void *)(intptr_t)-1;
		n++;
	}
	return (void *)(t_stats(jr).rings_grown > g0 ? n : -1);
}

static void case_grow_spares(void)
{
	struct jitring *jr = open_in("c12", 0, 0);
	struct jr_rings *e = jr->eng;
	struct jitring_stats st;
	intptr_t n1, n2;
	pthread_t w;
	void *wr;

	tp_reset(jr, 12);
	make_spares(jr);
	T_CHECK(ck_ring_size(&e->grow.q) >= e->grow.target &&
		e->grow.target > 0);
	T_CHECK_EQ(e->grow.size, 2 * jr->ring_min);
	TP_SET(tp.hold_flusher = true);
	T_REQUIRE(TP_WAIT(tp.flusher_held, 30));
	st = t_stats(jr);
	T_REQUIRE(pthread_create(&w, NULL, grower_main, jr) == 0);
	pthread_join(w, &wr);
	n1 = (intptr_t)wr;
	T_CHECK(n1 > 0);
	T_CHECK_EQ(t_stats(jr).rings_grown_waited, st.rings_grown_waited);
	atomic_store(&spare_empty, 1);
	T_REQUIRE(pthread_create(&w, NULL, grower_main, jr) == 0);
	pthread_join(w, &wr);
	n2 = (intptr_t)wr;
	atomic_store(&spare_empty, 0);
	T_CHECK(n2 > 0);
	T_CHECK_EQ(t_stats(jr).rings_grown_waited, st.rings_grown_waited + 1);
	TP_SET(tp.hold_flusher = false);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(count_loads("c12"), (long)(n1 + n2));
	printf("growth with no successor ready: a spare one after %ld "
	       "entries (rings_grown_waited +0); with none left the thread "
	       "made its own (+1)\n",
	       (long)n1);
}

/* ------------------------------------------------------------------ */
/* 13. A storm's pool is given back while the engine idles.             */

#define C13_THREADS 200

static pthread_barrier_t c13_go;

/* One entry, then the thread leaves: its ring goes back to the pool. */
static void *once_main(void *arg)
{
	struct jitring *jr = arg;
	int r = pthread_barrier_wait(&c13_go);

	if (r && r != PTHREAD_BARRIER_SERIAL_THREAD)
		return (void *)(intptr_t)-1;
	return (void *)(intptr_t)t_write_at(jr, "S", 0xc130000);
}

/* Rings in the pool and the mark, as the flusher left them. */
static uint32_t pool_size(struct jr_rings *e, uint32_t *low)
{
	*low = atomic_load_explicit(&e->pool_low, memory_order_relaxed);
	return ck_ring_size(&e->pool);
}

/*
 * 200 threads write once at the same moment and leave.  The storm raises
 * the pool's mark (twice the rings taken per 100 ms) and their drained
 * rings come back to the pool, each keeping the page its next write lands
 * on.  Once nothing is written, the mark falls back to the floor
 * (ready_rings: 8 here, so that a storm spread over several of the
 * flusher's windows by a loaded machine still raises it) and the pool to
 * at most twice it, while the flusher has nothing else to do.  (Before, the fall only happened in rounds that
 * something else caused; the flusher, asleep without a timer once the
 * trims were done, kept a 512-thread storm's 423 pooled rings and their
 * pages for good.)
 */
static void case_pool_given_back(void)
{
	struct jitring *jr = open_ready("c13", 0, 0, 8, 0);
	struct jr_rings *e = jr->eng;
	pthread_t th[C13_THREADS];
	uint32_t low = 0, peak = 0, peak_low = 0, n;
	long ok = 0;

	T_CHECK_EQ(e->pool_floor, 8);
	tp_reset(jr, 13);
	T_REQUIRE(pthread_barrier_init(&c13_go, NULL, C13_THREADS) == 0);
	for (int i = 0; i < C13_THREADS; i++)
		T_REQUIRE(pthread_create(&th[i], NULL, once_main, jr) == 0);
	for (int i = 0; i < C13_THREADS; i++) {
		void *r;

		pthread_join(th[i], &r);
		ok += (intptr_t)r > 0;
	}
	pthread_barrier_destroy(&c13_go);
	T_CHECK_EQ(ok, C13_THREADS);
	/* The storm raised the mark above the floor. */
	T_CHECK(T_POLL_UNTIL((n = pool_size(e, &low), n > peak ? peak = n : 0,
			      low > peak_low ? peak_low = low : 0,
			      peak_low > e->pool_floor),
			     10000));
	/* Wait for a condition (bounded), not for time: 10 s at most. */
	T_CHECK(T_POLL_UNTIL((n = pool_size(e, &low),
			      low == e->pool_floor && n <= 2 * e->pool_floor),
			     10000));
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(count_loads("c13"), C13_THREADS);
	printf("pool after a storm of %d threads: mark %u, %u rings at most "
	       "seen; idle, back to mark %u and %u rings\n",
	       C13_THREADS, peak_low, peak, low, n);
}

/* ------------------------------------------------------------------ */
/* 14. A successor made ahead, untaken while its owner idles.           */

/* This thread's ring of @jr. */
static struct jr_ring *my_ring(struct jitring *jr)
{
	struct jr_ring *r = jitring_tls_rings;

	while (r && r->jr != jr)
		r = r->tls_next;
	return r;
}

/*
 * Write past half of the first ring (it asks to grow; the flusher is held,
 * so it cannot drain the ring first), let a round make the successor, idle
 * until told, then fill the ring: the full ring trades for that
 * successor.  Return: entries written, or -1.
 */
static void *succ_main(void *arg)
{
	struct jitring *jr = arg;
	struct jr_ring *r, *g;
	intptr_t n = 0;

	do {
		if (t_write_at(jr, "N", 0xe00000 + (uint64_t)n * 64) <= 0)
			return (void *)(intptr_t)-1;
		n++;
		r = my_ring(jr);
	} while (r && !r->grow_asked && n < 100000);
	TP_SET(tp.hold_flusher = false);
	if (!r || !r->grow_asked || jitring_flush(jr))
		return (void *)(intptr_t)-1;
	if (!T_POLL_UNTIL((g = atomic_load(&r->next_ring)) != NULL, 10000))
		return (void *)(intptr_t)-1;
	TP_SET(tp.succ = g);
	T_COND_WAIT(&tp.lock, &tp.cond, tp.thread_go, 60);
	while (my_ring(jr) != g && n < 200000) {
		if (t_write_at(jr, "N", 0xe00000 + (uint64_t)n * 64) <= 0)
			return (void *)(intptr_t)-1;
		n++;
	}
	return (void *)(my_ring(jr) == g ? n : -1);
}

/*
 * The flusher makes a thread's successor ahead, pre-faulted whole (its
 * owner is busy and will fill it).  An owner that stops short of filling
 * its ring, idle, must not keep those pages: the successor is trimmed
 * like an idle ring.  (It was not: in one kit storm of 64 threads in
 * five, 7-14 idle threads kept 128 KiB each, 19-34 KiB a thread in all.)
 * The window: the flusher holds the successor trimmed, under TRIM, while
 * its owner fills its ring, takes it and writes: that write waits (BUSY
 * set, TRIM still set) and lands once TRIM clears.  Every entry reaches
 * the file; the trade is with the successor made ahead
 * (rings_grown_waited +0).
 */
static void case_succ_trimmed(void)
{
	struct jitring *jr = open_in("c14", 0, 0);
	struct jitring_stats st;
	size_t page = jitring_page_size();
	struct jr_ring *g;
	unsigned resident = 0;
	bool busy_in_trim;
	pthread_t w;
	void *wr;

	tp_reset(jr, 14);
	st = t_stats(jr);
	/* Held until the thread asked to grow: a flusher that kept up with
	 * it (under TSan) kept its ring under half full, and no successor
	 * was ever made. */
	TP_SET(tp.hold_flusher = true);
	jitring_rings_kick(jr);
	T_REQUIRE(TP_WAIT(tp.flusher_held, 30));
	T_REQUIRE(pthread_create(&w, NULL, succ_main, jr) == 0);
	T_REQUIRE(TP_WAIT(tp.succ != NULL, 30));
	g = T_LOCKED(&tp.lock, tp.succ);
	/* Trimmed once idle for the trim time, the flusher held inside. */
	T_CHECK(TP_WAIT(tp.succ_parked, 30));
	T_CHECK_EQ(atomic_load(&g->own), JR_OWN_NEXT);
	for (size_t off = 0; off < g->size; off += page)
		resident += page_resident(g->buf + off);
	T_CHECK_EQ(resident, 0);
	/* The owner fills its ring, takes the successor and writes. */
	TP_SET(tp.thread_go = true);
	busy_in_trim = T_POLL_UNTIL(
		(atomic_load(&g->pub) & (JR_PUB_BUSY | JR_PUB_TRIM)) ==
			(JR_PUB_BUSY | JR_PUB_TRIM),
		10000);
	T_CHECK(busy_in_trim);
	TP_SET(tp.succ_release = true);
	pthread_join(w, &wr);
	T_CHECK((intptr_t)wr > 0);
	T_CHECK_EQ(t_stats(jr).rings_grown_waited, st.rings_grown_waited);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(count_loads("c14"), (long)(intptr_t)wr);
	printf("an untaken successor: trimmed while its owner idled (%u "
	       "pages resident), its first write waited for the trim%s\n",
	       resident, busy_in_trim ? "" : " (not seen)");
}

/* ------------------------------------------------------------------ */
/* 15. Pool takes and a napping flusher.                                */

/* A new thread writes once (its first write takes a pooled ring) and
 * leaves.  Return: 1 if its write succeeded. */
static int one_new_thread(struct jitring *jr)
{
	pthread_t th;
	void *r;

	T_REQUIRE(pthread_create(&th, NULL, writer_main, jr) == 0);
	pthread_join(th, &r);
	return (intptr_t)r > 0;
}

/*
 * The flusher naps (max_delay_ms 60 s: a round wrote an entry) with 64
 * ready rings.  New threads take 8 of them: no wake, no round -- a wake
 * costs the taker a FUTEX_WAKE of an idle CPU, and before, every take
 * below the mark paid one (2-47 wakes in a 64-thread storm).  Further
 * takes bring the pool under a quarter of its mark (16): that take wakes
 * the flusher, which refills at once, not after its 60 s nap.
 */
static void case_take_no_wake(void)
{
	struct jitring *jr = open_ready("c15", 0, 0, 64, 60000);
	struct jr_rings *e = jr->eng;
	uint64_t r0, w0, w8, w3;
	uint32_t low = 0;
	int ok = 0, more = 0, held = 0;

	tp_reset(jr, 15);
	T_REQUIRE(t_write_at(jr, "M", 0xc14f000) > 0);
	T_REQUIRE(T_POLL_UNTIL(t_stats(jr).entries_written == 1 &&
				       atomic_load(&jr->sleep) == JR_NAP &&
				       pool_size(e, &low) == 64,
			       10000));
	r0 = rounds_now();
	w0 = atomic_load(&jr->c.wakes);
	for (int i = 0; i < 8; i++)
		ok += one_new_thread(jr);
	T_CHECK_EQ(ok, 8);
	T_CHECK_EQ(rounds_now(), r0);
	w8 = atomic_load(&jr->c.wakes) - w0;
	T_CHECK_EQ(w8, 0);
	T_CHECK_EQ(atomic_load(&jr->sleep), JR_NAP);
	T_CHECK_EQ(pool_size(e, &low), 56);
	/* 41 more takes leave 15: the 41st wakes the flusher. */
	while (more < 41)
		more += one_new_thread(jr);
	T_CHECK(T_POLL_UNTIL(rounds_now() > r0 && pool_size(e, &low) >= 64,
			     10000));
	w0 = atomic_load(&jr->c.wakes) - w0 - w8;
	T_CHECK(w0 > 0);

	/*
	 * The same take's Dekker pair with the flusher's sleep, the window
	 * held open: the flusher is held after a round that wrote an entry
	 * (it will nap 60 s), before it stores its sleep mode.  Takes then
	 * find it awake (no wake, no system call) and leave only pool_want;
	 * released, the flusher must see it and refill instead of napping.
	 */
	T_REQUIRE(t_write_at(jr, "M", 0xc14f000) > 0);
	TP_SET(tp.hold_flusher = true);
	jitring_rings_kick(jr);
	T_REQUIRE(TP_WAIT(tp.flusher_held, 30));
	w3 = atomic_load(&jr->c.wakes);
	while (4 * pool_size(e, &low) >= low && held < 1000)
		held += one_new_thread(jr);
	T_CHECK(held > 0 && held < 1000);
	T_CHECK_EQ(atomic_load(&jr->c.wakes), w3);
	TP_SET(tp.hold_flusher = false);
	T_CHECK(T_POLL_UNTIL(pool_size(e, &low) >= low, 10000));
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(count_loads("c15"), 1 + 8 + 41 + 1 + held);
	printf("64 ready rings, flusher napping: 8 takes woke it %" PRIu64
	       " times; under a quarter left, %" PRIu64
	       " wake(s) and a refill; %d takes past the flusher's sleep "
	       "store refilled too\n",
	       w8, w0, held);
}

/* ------------------------------------------------------------------ */
/* 16. A write thread that cannot be started.                           */

static void *wt_writer(void *arg)
{
	struct jitring *jr = arg;
	uintptr_t ok = 0;

	for (int i = 0; i < 3000; i++)
		ok += t_write_at(jr, "W", 0xc160000 + (uint64_t)i * 16) > 0;
	return (void *)ok;
}

/*
 * JITRING_WRITE_THREAD=1 (read at open) asks for the write thread from
 * the first batch ("io_start" counts the asks).  Started, it runs
 * ("io_thread"); when pthread_create() fails (the fault), the flusher
 * writes every batch itself and asks no more: every entry is in the file
 * and no write thread ever ran.
 */
static void case_write_thread_fails(void)
{
	const char *was = getenv("JITRING_WRITE_THREAD");
	char *saved = was ? strdup(was) : NULL;
	const char *subs[2] = { "c16a", "c16b" };
	int asked[2], ran[2];

	for (int fail = 0; fail < 2; fail++) {
		struct jitring *jr;
		pthread_t th[4];
		uintptr_t ok = 0, n;

		setenv("JITRING_WRITE_THREAD", "1", 1);
		atomic_store(&fail_io_start, fail);
		atomic_store(&io_asked, 0);
		atomic_store(&io_ran, 0);
		jr = open_ready(subs[fail], 0, 0, 0, 0);
		if (saved)
			setenv("JITRING_WRITE_THREAD", saved, 1);
		else
			unsetenv("JITRING_WRITE_THREAD");
		for (int i = 0; i < 4; i++)
			T_REQUIRE(pthread_create(&th[i], NULL, wt_writer, jr) ==
				  0);
		for (int i = 0; i < 4; i++) {
			pthread_join(th[i], (void **)&n);
			ok += n;
		}
		T_CHECK_EQ(ok, 12000);
		T_CHECK_EQ(jitring_close(jr), 0);
		T_CHECK_EQ(count_loads(subs[fail]), 12000);
		T_CHECK_EQ(t_threads_named("jitring-write"), 0);
		asked[fail] = atomic_load(&io_asked);
		ran[fail] = atomic_load(&io_ran);
		T_CHECK(asked[fail] >= 1);
		if (fail)
			T_CHECK_EQ(asked[fail], 1); /* never again */
		T_CHECK_EQ(ran[fail], fail ? 0 : asked[fail]);
	}
	atomic_store(&fail_io_start, 0);
	free(saved);
	printf("write thread: %d start(s), all ran; refused once, none ran, "
	       "the flusher wrote all 12000 entries itself\n",
	       asked[0]);
}

int main(void)
{
	char tmpl[] = "/tmp/jitring-lifecycle-XXXXXX";

	if (!mkdtemp(tmpl))
		return T_EXIT_FAIL;
	snprintf(base, sizeof(base), "%s", tmpl);
	/*
	 * A hook runs in a fork child too (jitring's atfork child handler
	 * opens the child's dump: "claim_open"), so tp.lock must not be held
	 * across the fork by another thread (the flusher between rounds, a
	 * releaser).  Registered before jitring's handlers (the first open),
	 * so the prepare runs after jitring's (which may need a hook of its
	 * own, "fork_make_lock") and the child's release before jitring's.
	 */
	T_REQUIRE(pthread_atfork(tp_fork_hold, tp_fork_release,
				 tp_fork_release) == 0);
	atomic_store(&jitring_testpoint_hook, hook);
	atomic_store(&jitring_fault_hook, fault);

	fflush(stdout);
	case_close_vs_release(false, false);
	case_close_vs_release(true, false);
	case_close_vs_release(false, true);
	case_close_vs_release(true, true);
	case_fork(2);
	case_fork(3);
	case_flusher_sleeps();
	case_no_trim_at_birth();
	case_flush_unregistered();
	case_fork_jumbo();
	case_drop_move();
	case_backout();
	case_first_write_faults();
	case_spares();
	case_grow_spares();
	case_pool_given_back();
	case_succ_trimmed();
	case_take_no_wake();
	case_write_thread_fails();

	t_rmtree(base);
	return t_report();
}

#else

int main(void)
{
	t_skip("needs -Dtestpoints=true (lifecycle testpoints and faults)");
}

#endif
