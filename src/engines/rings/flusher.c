/* SPDX-License-Identifier: MIT */
/*
 * Rings engine, consumer side: one background thread per writer drains all
 * rings into the file in timestamp order, and keeps the pool of ready rings
 * (pool.c) and, through the hook the kit registers (struct jr_kit_ops),
 * the trampoline arenas (trampolines.c) filled ahead of demand.  This file
 * is the thread itself: its main loop, its sleep, its exit at a pause, and
 * the drain that runs its rounds on a caller's thread when there is none.
 * Its parts open with their share of the algorithm; calls go one way
 * only, flusher.c -> rounds.c -> merge.c -> batch.c.
 *
 * A round (jitring_round_run()), under fork_lock, so that a fork() finds
 * the flusher between rounds:
 *   1. T = CLOCK_MONOTONIC, then a seq_cst fence (F)            (rounds.c)
 *   2. scan every ring's pub: its visible tail, BUSY/LATE, its bound lb;
 *      the watermark W is the least bound, at most T             (merge.c)
 *   3. peek each ring's next group into a heap by timestamp; mark LATE a
 *      ring BUSY past holdback_ms that holds the oldest group back
 *                                                                (merge.c)
 *   4. merge: groups stamped <= W, in order, into batches, written by
 *      pwritev() here or on the write thread; heads published only once
 *      a batch is in the file                         (merge.c, batch.c)
 *   5. complete flush tickets;                                  (rounds.c)
 *   6. recycle the rings of threads that left;                  (rounds.c)
 *   7. make ready what threads will ask for (the pool, the spare rings,
 *      grow successors, trampoline arenas, the idmap ahead) and trim idle
 *      rings' pages;                                   (rounds.c, pool.c)
 *   8. sleep.                                         (planned in rounds.c,
 *                                                      slept here)
 *
 * Sleeping costs nothing: the flusher stores a sleep mode seq_cst, re-scans
 * for news, and waits on a futex.  NAP (timed, max_delay_ms or a hold-back
 * deadline) is used while data flows, so producers wake it only when a ring
 * is more than half full; DEEP (no timeout) when all is idle, so the first
 * commit wakes it.  While a flush or close waits, DEEP too, with a timer
 * only for what no commit announces (a hold-back deadline).
 *
 * Pause (jitring_pause()): the thread leaves after a round that left
 * nothing behind, and first gives back what its idle rounds would have
 * given back over the next seconds (jitring_round_give_back_idle():
 * every idle ring's pages, the pool down to its floor), since none will
 * run.  With no flusher because it could not be started again
 * (pthread_create failed), a flush, close or a writer with a full ring
 * runs the rounds on its own thread (jitring_flusher_drain()) under
 * run_lock and fork_lock: run_lock keeps a flusher from starting
 * meanwhile, so the flusher-private state has one user at a time, as
 * with the thread.
 *
 * Invariants: the flusher-private state (struct jr_merge, and struct
 * jr_rings from "Flusher-private" on) has that one user; a round runs
 * whole under fork_lock; the thread leaves only after a round that left
 * nothing behind and nobody waiting (a pause), or after close's last
 * round.
 *
 * The ring pool, the registry and the budget are in pool.c; the producer
 * side in ring.c and thread.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "core/reaper.h"
#include "flusher.h"
#include "flusher_internal.h"
#include "rings_internal.h"

int jitring_flusher_init(struct jr_rings *e)
{
	struct jr_merge *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->cur = &m->bat[0];
	m->post_off = e->file_off;
	/* On the opening thread: getenv() on one of ours could race the
	 * application's setenv(). */
	m->io_cfg = jitring_batch_io_policy();
	e->m = m;
	return 0;
}

void jitring_flusher_fini(struct jr_rings *e)
{
	if (!e->m)
		return;
	jitring_batch_io_stop(e);
	jitring_merge_fit(e, 0);
	free(e->m);
	e->m = NULL;
}

/*
 * Anything for the flusher since the round?  Called after storing the
 * sleep mode.  A stop or flush request the round already saw is not news:
 * what it waits for wakes us itself (a flusher that took it for news again
 * would busy-loop for as long as a stalled producer holds the flush).
 */
static bool news(struct jr_rings *e, uint32_t mode)
{
	uint64_t req =
		atomic_load_explicit(&e->flush_req, memory_order_seq_cst);

	if ((!e->stop_seen &&
	     atomic_load_explicit(&e->stop, memory_order_seq_cst)) ||
	    atomic_load_explicit(&e->pool_want, memory_order_seq_cst) ||
	    atomic_load_explicit(&e->attach, memory_order_seq_cst) ||
	    jitring_round_kit_wanted(e->jr) || req > e->req_seen ||
	    /* A pause the last round did not see (it decides on it). */
	    (!e->pause_seen &&
	     atomic_load_explicit(&e->pause_req, memory_order_seq_cst)) ||
	    (!e->flush_ticket &&
	     req > atomic_load_explicit(&e->flush_done, memory_order_relaxed)))
		return true;
	for (uint32_t i = 0; i < e->nreg; i++) {
		struct jr_ring *r = e->reg[i];
		uint64_t v =
			atomic_load_explicit(&r->pub, memory_order_seq_cst);
		uint32_t tail = JR_PUB_TAIL(v);

		/*
		 * A commit moved the tail, or a producer the round saw BUSY
		 * backed out (close, failure) without moving it: in DEEP
		 * mode both are news (a flush or close may be waiting for
		 * exactly that ring to settle).
		 */
		if (mode == JR_DEEP && (tail != r->seen_tail ||
					(r->seen_busy && !(v & JR_PUB_BUSY))))
			return true;
		if (tail - r->head_local > r->size / 4)
			return true;
		if (atomic_load_explicit(&r->space_waiter,
					 memory_order_relaxed))
			return true;
	}
	return false;
}

static void flusher_sleep(struct jr_rings *e, const struct jr_round_out *o)
{
	struct jitring *jr = e->jr;
	struct timespec rel;

	if (o->mode == JR_AWAKE)
		return;

	/* (S): pairs with the seq_cst load of sleep in jitring_rings_wake(). */
	atomic_store_explicit(&jr->sleep, o->mode, memory_order_seq_cst);
	if (!news(e, o->mode)) {
		rel = jitring_clock_rel(o->timeout);
		jr_futex_wait(&jr->sleep, o->mode, o->timeout ? &rel : NULL);
	}
	atomic_store_explicit(&jr->sleep, JR_AWAKE, memory_order_relaxed);
}

static void drain_wait(const struct jr_round_out *o)
{
	/* At most 1 ms: no commit wakes this thread (the sleep word stays
	 * JR_STOPPED), so a BUSY ring's commit is polled for. */
	uint64_t ns = o->timeout && o->timeout < 1000000u ? o->timeout :
							    1000000u;
	struct timespec rel = jitring_clock_rel(ns);

	if (o->mode != JR_AWAKE)
		nanosleep(&rel, NULL);
}

int jitring_flusher_drain(struct jr_rings *e)
{
	struct jr_round_out o;
	uint64_t t = 0;

	JITRING_TESTPOINT(flush_drain, e->jr);
	/*
	 * A ticket of our own (unless close's stop asks for everything):
	 * the round snapshots every ring's tail and completes it once the
	 * heads passed them.  Relaxed: the rounds that read it run here.
	 */
	/* No thread of ours behind a caller's. */
	e->m->io_policy = JR_IO_NEVER;
	if (!atomic_load_explicit(&e->stop, memory_order_relaxed))
		t = atomic_fetch_add_explicit(&e->flush_req, 1,
					      memory_order_relaxed) +
		    1;
	for (;;) {
		pthread_mutex_lock(&e->fork_lock);
		jitring_round_run(e, &o);
		pthread_mutex_unlock(&e->fork_lock);
		if (o.done)
			return 0;
		/* Relaxed: stored by our own round (complete_flush()). */
		if (t && atomic_load_explicit(&e->flush_done,
					      memory_order_relaxed) >= t)
			break;
		drain_wait(&o);
	}
	pthread_mutex_lock(&e->fork_lock);
	jitring_round_give_back_idle(e);
	pthread_mutex_unlock(&e->fork_lock);
	return 0;
}

void *jitring_flusher_main(void *arg)
{
	struct jr_rings *e = arg;
	struct jr_round_out o;

	/* Counted as jitring's, not the application's (reaper.c). */
	jitring_reaper_thread_begin();
	pthread_setname_np(pthread_self(), "jitring-flush");
	/* Read by jitring_rings_pause() after it joined us. */
	e->flusher_tid = (pid_t)syscall(SYS_gettid);
	pthread_mutex_lock(&e->fork_lock);
	e->m->io_policy = e->m->io_cfg;
	e->m->io_broken = false;
	pthread_mutex_unlock(&e->fork_lock);
	for (;;) {
		pthread_mutex_lock(&e->fork_lock);
		jitring_round_run(e, &o);
		pthread_mutex_unlock(&e->fork_lock);
		JITRING_TESTPOINT(flusher_round, e->jr);
		if (o.done)
			break;
		if (o.mode == JR_STOPPED) {
			uint32_t one = 1;

			/*
			 * Commit to leaving unless the pause gave up (a CAS
			 * 1 -> 0 in jitring_rings_pause(), with which this
			 * one pairs).
			 */
			if (!atomic_compare_exchange_strong_explicit(
				    &e->pause_req, &one, 2,
				    memory_order_seq_cst, memory_order_relaxed))
				continue;
			/*
			 * (S) for a pause: a producer that commits after this
			 * store sees JR_STOPPED at its (D) and starts a new
			 * flusher (after the pause's join); one that
			 * committed before it is seen by news() here, and we
			 * stay (and let the pause wait or give up).
			 */
			atomic_store_explicit(&e->jr->sleep, JR_STOPPED,
					      memory_order_seq_cst);
			if (!news(e, JR_DEEP)) {
				/* No rounds from here until a waker starts a
				 * flusher: give back what they would. */
				pthread_mutex_lock(&e->fork_lock);
				jitring_round_give_back_idle(e);
				pthread_mutex_unlock(&e->fork_lock);
				break;
			}
			atomic_store_explicit(&e->jr->sleep, JR_AWAKE,
					      memory_order_relaxed);
			atomic_store_explicit(&e->pause_req, 1,
					      memory_order_seq_cst);
			continue;
		}
		flusher_sleep(e, &o);
	}
	jitring_reaper_thread_end();
	return NULL;
}
