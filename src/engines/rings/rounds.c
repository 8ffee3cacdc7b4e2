/* SPDX-License-Identifier: MIT */
/*
 * Rings engine, consumer side: a flusher round, and what the flusher
 * keeps ready for producers and gives back when they go idle.  A round
 * (jitring_round_run(), on the flusher thread or a drain, under
 * fork_lock):
 *   1. T = CLOCK_MONOTONIC, then a seq_cst fence (F), which orders every
 *      ring scan of the round after the stop request and after each
 *      producer's BUSY RMW that precedes it (ring.c's (A)); the flush
 *      request, and the rings threads made themselves registered (those
 *      pushed after (F) are stamped after T);
 *   2-4. the scan, the watermark and the merge into batches (merge.c,
 *      batch.c);
 *   5. complete the flush ticket once every head passed the tail the
 *      round that took it saw, and no ring is left unregistered;
 *   6. recycle the drained rings of threads that left: back to the pool
 *      rewound, or freed if grown;
 *   7. make ready what threads will ask for: the pool (pool.c), grow
 *      successors for rings whose owners asked, the spare rings, the
 *      kit's arenas (the hook it registered, struct jr_kit_ops), the
 *      idmap ahead; and trim the pages of rings idle for JR_TRIM_NS;
 *   8. plan the sleep (flusher.c sleeps): DEEP when someone waits or all
 *      is idle, a NAP while data is pending, none while it streams; at
 *      close, once nothing is BUSY and every ring is registered, the
 *      last round stops the write thread and writes CLOSE.
 *
 * Trims: a ring idle for JR_TRIM_NS loses its pages (a pooled one keeps
 * the page its next write lands on) under the TRIM bit, set by a CAS on
 * pub from the idle value the scan saw: a producer that committed since
 * makes the CAS fail, and one that begins a write waits for TRIM to clear
 * (trim_wait(), ring.c).  Growth: a successor twice as large is made and
 * registered before its owner can see it (a release store of next_ring),
 * within the growth budget.
 *
 * Invariants: a flush ticket completes only when every registered ring's
 * head passed its target and every ring threads made is registered; a
 * ring is recycled only once DETACHED and drained to its tail; pages are
 * dropped only from a ring holding TRIM, whose owner cannot write.
 */
#include <limits.h>
#include <string.h>
#include <sys/mman.h>

#include "common/clock.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "flusher.h"
#include "flusher_internal.h"
#include "pool.h"
#include "rings_internal.h"

#define JR_TRIM_NS (1000u * 1000000ull) /* idle this long: drop pages */
/* Retry registering a ring after running out of memory. */
#define JR_RETRY_NS (1000000u)
/* A round that wrote this many groups is followed at once by another. */
#define JR_BUSY_ROUND_GROUPS 32u

/* The trampoline kit's work, once it registered (engine_ops.h). */
static _Atomic(const struct jr_kit_ops *) kit_ops;

void jitring_rings_kit_register(const struct jr_kit_ops *ops)
{
	/* Pairs with the seq_cst load in jitring_round_kit_wanted(). */
	atomic_store_explicit(&kit_ops, ops, memory_order_seq_cst);
}

static uint64_t kit_maintain(struct jitring *jr, uint64_t now)
{
	/* Pairs with the store in jitring_rings_kit_register(). */
	const struct jr_kit_ops *k =
		atomic_load_explicit(&kit_ops, memory_order_acquire);

	return k ? k->maintain(jr, now) : UINT64_MAX;
}

bool jitring_round_kit_wanted(struct jitring *jr)
{
	/* seq_cst: after our store of the sleep mode (news()). */
	const struct jr_kit_ops *k =
		atomic_load_explicit(&kit_ops, memory_order_seq_cst);

	return k && k->wanted(jr);
}

/*
 * Give rings whose owners asked to grow a successor twice as large, within
 * their share of the growth budget: registered before the owner can see it
 * (like a pooled ring), pre-faulted, published with a release store.
 */
static void provide_growth(struct jr_rings *e, uint64_t T)
{
	/* Pairs with the release increment in ask_grow() (ring.c). */
	uint32_t asks =
		atomic_load_explicit(&e->jr->grow_asks, memory_order_acquire);
	uint32_t target = 0;

	/*
	 * Only when some owner asked since the last pass: each ask is
	 * considered once.  One the budget cannot serve now is left to its
	 * owner, which makes its own ring when it fills if the budget then
	 * allows (jitring_thread_grow()).
	 */
	if (asks == e->grow_seen)
		return;
	e->grow_seen = asks;
	for (uint32_t i = 0, n = e->nreg; i < n; i++) {
		struct jr_ring *r = e->reg[i], *g;

		if (!atomic_load_explicit(&r->grow_req, memory_order_relaxed) ||
		    atomic_load_explicit(&r->next_ring, memory_order_relaxed) ||
		    atomic_load_explicit(&r->own, memory_order_relaxed) !=
			    JR_OWN_ACTIVE)
			continue;
		if (!target)
			target = jitring_ring_target(e);
		if (r->size * 2 > target)
			continue;
		g = jitring_pool_new_ring(e, T, r->size * 2);
		if (!g)
			return;
		/* Pre-fault: its owner is busy and will fill it. */
		jitring_prefault(g->buf, g->size);
		atomic_store_explicit(&g->own, JR_OWN_NEXT,
				      memory_order_relaxed);
		/* Pairs with the acquire exchange in jitring_thread_grow(). */
		atomic_store_explicit(&r->next_ring, g, memory_order_release);
	}
}

/* A successor ring its owner never took back: free it. */
static void drop_next(struct jr_rings *e, struct jr_ring *r)
{
	struct jr_ring *g = atomic_exchange_explicit(&r->next_ring, NULL,
						     memory_order_acquire);

	if (g && atomic_load_explicit(&g->own, memory_order_acquire) ==
			 JR_OWN_NEXT) {
		jitring_pool_drop(e, g);
	}
}

/* Close or failure: producers waiting for space must look at the state. */
static void wake_space_waiters(struct jr_rings *e)
{
	for (uint32_t i = 0; i < e->nreg; i++)
		if (atomic_load_explicit(&e->reg[i]->space_waiter,
					 memory_order_seq_cst))
			jr_futex_wake(&e->reg[i]->head, INT_MAX);
}

static void complete_flush(struct jr_rings *e, uint64_t ticket)
{
	/* Pairs with the acquire loads in jitring_rings_flush(). */
	atomic_store_explicit(&e->flush_done, ticket, memory_order_release);
	atomic_fetch_add_explicit(&e->flush_seq, 1, memory_order_release);
	jr_futex_wake(&e->flush_seq, INT_MAX);
	e->flush_ticket = 0;
}

/*
 * Drop an idle ring's pages.  A pooled ring keeps the page its next write
 * lands on: it is ready stock, and a thread that takes it after a long
 * idle would otherwise fault on its first write (3-17 us in a storm here,
 * against 2 us warm).  So a ready ring costs one resident page; the pool
 * holds at most twice its target.  An idle thread's ring keeps nothing,
 * nor does a successor made for it that it has not taken (NEXT).
 */
static void ring_trim(struct jr_ring *r, uint32_t own)
{
	size_t page = jitring_page_size();
	size_t keep = (r->head_local & r->mask) & ~(page - 1);

	if (own != JR_OWN_POOLED || r->size <= page) {
		if (own != JR_OWN_POOLED)
			madvise(r->buf, r->size, MADV_DONTNEED);
		return;
	}
	if (keep)
		madvise(r->buf, keep, MADV_DONTNEED);
	if (keep + page < r->size)
		madvise(r->buf + keep + page, r->size - keep - page,
			MADV_DONTNEED);
}

/*
 * Drop the pages of rings idle for @idle_ns (JR_TRIM_NS; 0 at a pause:
 * every idle ring); see trim_wait() (ring.c).
 */
static uint64_t trim_idle(struct jr_rings *e, uint64_t T, uint64_t idle_ns)
{
	uint64_t next = UINT64_MAX;

	for (uint32_t i = 0; i < e->nreg; i++) {
		struct jr_ring *r = e->reg[i];
		uint64_t v = JR_PUB(r->seen_tail);

		uint32_t own =
			atomic_load_explicit(&r->own, memory_order_relaxed);

		/*
		 * Idle threads' rings, pooled ones and successors made
		 * ahead (pre-faulted whole: one whose owner stopped short
		 * of filling its ring kept 128 KiB resident for good).  A
		 * thread may take a pooled ring or its successor at any
		 * time, which TRIM covers the same way.
		 */
		if (r->trimmed || r->head_local != r->seen_tail ||
		    (own != JR_OWN_ACTIVE && own != JR_OWN_POOLED &&
		     own != JR_OWN_NEXT))
			continue;
		if (T - r->idle_since < idle_ns) {
			if (r->idle_since + idle_ns < next)
				next = r->idle_since + idle_ns;
			continue;
		}
		/* Pairs with the fetch_or of BUSY (A) in slot_begin(), which
		 * then waits for TRIM to clear before using the buffer. */
		if (!atomic_compare_exchange_strong_explicit(
			    &r->pub, &v, v | JR_PUB_TRIM, memory_order_acquire,
			    memory_order_relaxed))
			continue;
		ring_trim(r, own);
		r->trimmed = true;
		JITRING_TESTPOINT(ring_trimmed, r);
		/* Pairs with the acquire load in trim_wait() (ring.c). */
		atomic_fetch_and_explicit(&r->pub, ~(uint64_t)JR_PUB_TRIM,
					  memory_order_release);
	}
	return next;
}

/*
 * Step 1: T, stop, fence (F), the flush request, the attach stack.
 */
static void round_begin(struct jr_rings *e, struct jr_round *rd)
{
	uint64_t req;

	rd->T = jitring_clock_ns();
	/*
	 * stop before (F), both seq_cst: a producer whose (B) read OPEN did
	 * so before close's CAS to CLOSING in the single total order S, and
	 * its (A) before that; close stores stop after its CAS; so if this
	 * load sees stop, (A) precedes (F) in S and the pub loads below,
	 * sequenced after (F), see BUSY (C11 fence rule, no hardware
	 * argument needed).  Pairs with the seq_cst store of stop in
	 * jitring_rings_stop().
	 */
	rd->stopping = atomic_load_explicit(&e->stop, memory_order_seq_cst);
	/* (F): pairs with the seq_cst fetch_or of BUSY (A) in slot_begin(). */
	atomic_thread_fence(memory_order_seq_cst);
	/* Pairs with the seq_cst fetch_add in jitring_rings_flush(). */
	req = atomic_load_explicit(&e->flush_req, memory_order_acquire);
	rd->snap = !e->flush_ticket &&
		   req > atomic_load_explicit(&e->flush_done,
					      memory_order_relaxed);
	if (rd->snap)
		e->flush_ticket = req;
	/* What this round has seen: news() looks only for newer things. */
	e->req_seen = req;
	e->stop_seen = rd->stopping;
	/*
	 * After (F): a ring pushed before it is registered now; one pushed
	 * after it is stamped after T (its owner fences after the push).
	 */
	rd->attached = jitring_pool_attach(e, rd->T);
	rd->W = rd->attached ? rd->T : 0;
	rd->deadline = UINT64_MAX;
	rd->any_busy = false;
}

/* Step 5: complete the flush ticket once every head passed its target
 * (not while a ring with entries is unregistered). */
static void round_flush_ticket(struct jr_rings *e, const struct jr_round *rd)
{
	if (!e->flush_ticket || !rd->attached)
		return;
	for (uint32_t i = 0; i < e->nreg; i++) {
		struct jr_ring *r = e->reg[i];

		if ((int32_t)(r->head_local - r->flush_target) < 0)
			return;
	}
	complete_flush(e, e->flush_ticket);
}

/*
 * Step 6: recycle the drained rings of threads that left.  Collected
 * first (into the busy array, done with for this round): recycling one
 * can remove another from the registry (its unused successor), which an
 * index walk over the registry must not see.
 */
static void round_recycle(struct jr_rings *e, const struct jr_round *rd)
{
	struct jr_merge *m = e->m;

	m->nbusy = 0;
	for (uint32_t i = 0; i < e->nreg; i++) {
		struct jr_ring *r = e->reg[i];

		/* Pairs with the acq_rel CAS to DETACHED in ring_release()
		 * (thread.c). */
		if (atomic_load_explicit(&r->own, memory_order_acquire) ==
			    JR_OWN_DETACHED &&
		    JR_PUB_TAIL(atomic_load_explicit(
			    &r->pub, memory_order_acquire)) == r->head_local)
			m->busy[m->nbusy++] = r;
	}
	for (uint32_t i = 0; i < m->nbusy; i++) {
		struct jr_ring *r = m->busy[i];

		/* Its owner left before taking the successor it asked for
		 * (never itself a candidate: a successor is not DETACHED). */
		drop_next(e, r);
		/* Back to the pool rewound, its first page warm for the next
		 * thread (jitring_pool_put()).  Grown rings go: every thread
		 * starts at ring_min. */
		if (r->size > e->jr->ring_min) {
			jitring_pool_drop(e, r);
			continue;
		}
		jitring_pool_put(e, r, rd->T);
	}
}

/*
 * Step 8: how to sleep.  Someone waiting (flush, close) gets DEEP with a
 * timer only for what no commit announces; streaming data none at all;
 * pending data a NAP of max_delay_ms (or to a hold-back deadline); an
 * idle engine DEEP until the next trim is due.
 */
static void round_plan_sleep(struct jr_rings *e, const struct jr_round *rd,
			     uint64_t trim_at, struct jr_round_out *out)
{
	const struct jr_merge *m = e->m;
	uint64_t T = rd->T;

	out->done = false;
	if (rd->stopping || e->flush_ticket) {
		/*
		 * What is left waits for an event that wakes us: a BUSY
		 * ring's commit or back-out (its (D) finds DEEP), or the
		 * hold-back deadline.  Only two things need a timer: a ring
		 * we could not register (retry), and a group stamped after
		 * this round's T (the next round takes it).
		 */
		out->mode = JR_DEEP;
		if (!rd->attached)
			out->timeout = JR_RETRY_NS;
		else if (m->nheap && m->heap[0].ts > T)
			out->timeout = 1;
		else
			out->timeout = rd->deadline == UINT64_MAX ? 0 :
				       rd->deadline > T ? rd->deadline - T :
							  1;
	} else if (m->round_groups >= JR_BUSY_ROUND_GROUPS) {
		/* Data is streaming in: go straight on, this is work. */
		out->mode = JR_AWAKE;
		out->timeout = 0;
	} else if (m->nheap || m->round_groups) {
		uint64_t to = (uint64_t)e->jr->max_delay_ms * 1000000u;

		if (rd->deadline != UINT64_MAX && rd->deadline - T < to)
			to = rd->deadline > T ? rd->deadline - T : 1;
		out->mode = JR_NAP;
		out->timeout = to;
	} else {
		out->mode = JR_DEEP;
		out->timeout = trim_at == UINT64_MAX ?
				       0 :
				       (trim_at > T ? trim_at - T : 1);
	}
}

void jitring_round_run(struct jr_rings *e, struct jr_round_out *out)
{
	struct jr_merge *m = e->m;
	struct jr_round rd;
	uint64_t trim_at, stock_at = UINT64_MAX, pool_at;

	round_begin(e, &rd);
	jitring_merge_scan(e, &rd);
	jitring_merge_run(e, &rd);
	round_flush_ticket(e, &rd);
	round_recycle(e, &rd);

	/* Step 7: make ready what threads will ask for. */
	pool_at = jitring_pool_maintain(e, rd.T);
	if (!rd.stopping) {
		provide_growth(e, rd.T);
		/* After growth: spares are address space only, not in the
		 * budget until taken. */
		jitring_spare_maintain(e);
		stock_at = kit_maintain(e->jr, rd.T);
	}
	jitring_idmap_ahead(e);
	trim_at = rd.stopping ? UINT64_MAX : trim_idle(e, rd.T, JR_TRIM_NS);
	/* Wake for a trim, or for the pool or the arena stock to follow
	 * demand down. */
	if (stock_at < trim_at)
		trim_at = stock_at;
	if (!rd.stopping && pool_at < trim_at)
		trim_at = pool_at;

	if (rd.stopping || e->failed)
		wake_space_waiters(e);
	if (rd.stopping && !rd.any_busy && rd.attached) {
		jitring_batch_io_stop(e);
		jitring_batch_write_close(e);
		complete_flush(e, atomic_load_explicit(&e->flush_req,
						       memory_order_acquire));
		out->done = true;
		return;
	}
	round_plan_sleep(e, &rd, trim_at, out);
	/*
	 * Paused (jitring_pause()): leave after a round that left nothing
	 * behind and nobody waiting.  Pairs with the seq_cst store of
	 * pause_req in jitring_rings_pause().
	 */
	e->pause_seen =
		atomic_load_explicit(&e->pause_req, memory_order_seq_cst) != 0;
	if (e->pause_seen && !rd.stopping && !e->flush_ticket && !rd.any_busy &&
	    rd.attached && !m->nheap)
		out->mode = JR_STOPPED;
	if (out->mode != JR_AWAKE) {
		/* No round follows at once: nothing stays posted. */
		if (!rd.settled)
			jitring_batch_settle(e);
		/* Idle: the write thread goes until writes are heavy again. */
		if (out->mode == JR_DEEP && !rd.stopping && !e->flush_ticket)
			jitring_batch_io_stop(e);
	}
}

/*
 * No flusher will run rounds for a while (a pause): give back now what idle
 * rounds would give back over the next two seconds.  The pool's demand
 * decays to nothing, so its stock falls to the floor; every idle ring's
 * pages go (a ready ring keeps the page of its next write).  Under
 * fork_lock, like a round; threads may write meanwhile: trim_idle()'s CAS
 * on pub leaves a ring that committed since the last scan alone.
 */
void jitring_round_give_back_idle(struct jr_rings *e)
{
	uint64_t T = jitring_clock_ns();

	jitring_batch_io_stop(e);
	memset(&e->demand, 0, sizeof(e->demand));
	jitring_pool_maintain(e, T);
	trim_idle(e, T, 0);
}
