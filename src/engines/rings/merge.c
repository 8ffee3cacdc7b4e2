/* SPDX-License-Identifier: MIT */
/*
 * Rings engine, consumer side: the merge, steps 2-4 of a flusher round
 * (flusher.c lists them all; rounds.c runs them in order).
 *
 *   2. scan every ring's pub (acquire): its visible tail, and BUSY/LATE.
 *      A ring seen idle cannot later commit anything stamped before T
 *      (the round's clock reading, taken before its seq_cst fence (F),
 *      rounds.c): its next BUSY RMW follows (F) in the total order, and
 *      its clock read follows that RMW.  So its bound lb becomes T.  A
 *      ring seen BUSY (not LATE) keeps its last bound: the timestamp it
 *      is about to commit is at least its last idle T and at least every
 *      timestamp it committed before.  The watermark W is the least
 *      bound, and at most T.
 *   3. peek each ring's oldest uncommitted-to-file group and heap them by
 *      timestamp.  If the oldest pending group is newer than a BUSY ring's
 *      bound, that ring is holding entries back; once it has been BUSY for
 *      holdback_ms, mark it LATE with a CAS (it must then re-stamp its
 *      entry at commit, after this mark, see ring.c) and stop counting it
 *      in W.  This bounds both the delay and the memory a stalled thread
 *      can cause.
 *   4. merge: pop groups with timestamp <= W in order, gathering iovecs
 *      that point straight into ring memory (or a jumbo buffer) into the
 *      batch being filled (emit()).  A full batch, and at the round's end
 *      the last one, goes to batch.c, which writes it (here or on the
 *      write thread) and only then publishes the rings' heads past its
 *      groups.
 *
 * The heap holds each ring's key (timestamp, then registry index for
 * ties) inline, and the merge prefetches the ring bytes the next peek and
 * the write will read: with hundreds of rings every dereference would
 * otherwise miss.  The heap and the list of BUSY rings are as large as
 * the registry: pool.c sizes them (jitring_merge_fit()) before it
 * registers a ring, so a scan always has room.
 *
 * Invariants: groups leave each ring in ring order (a ring's next group
 * is peeked only once the one before it is in a batch); every group
 * written has a timestamp >= every group written before it (only groups
 * at or below W leave, in heap order, and no later commit is stamped
 * below W).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flusher.h"
#include "flusher_internal.h"
#include "rings_internal.h"

/* Ring bytes prefetched past a peeked group. */
#define JR_PREFETCH_NEXT 256u
/* Rings whose pub line is fetched ahead of the scan. */
#define JR_SCAN_AHEAD 8u

int jitring_merge_fit(struct jr_rings *e, uint32_t cap)
{
	struct jr_merge *m = e->m;
	struct jr_hent *h;
	struct jr_ring **b;

	if (!m)
		return cap ? -ENOMEM : 0;
	if (!cap) {
		free(m->heap);
		free(m->busy);
		m->heap = NULL;
		m->busy = NULL;
		m->cap = 0;
		return 0;
	}
	if (cap <= m->cap)
		return 0;
	h = realloc(m->heap, sizeof(*h) * cap);
	if (!h)
		return -ENOMEM;
	m->heap = h;
	b = realloc(m->busy, sizeof(*b) * cap);
	if (!b)
		return -ENOMEM;
	m->busy = b;
	m->cap = cap;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Reading groups out of a ring.                                        */

/*
 * Ask for the ring bytes [@from, @to) (within what was committed) in this
 * core's cache: the start of the next group, which the next peek at this
 * ring reads, and with no write thread the rest of the group just peeked,
 * which the write copies.  The producer wrote them on another core;
 * fetched one at a time, as the peeks and the copy would, each is a
 * dependent miss, while the merge interleaves other rings' groups long
 * enough for a prefetch to land.
 */
static inline void ring_prefetch(const struct jr_ring *r, uint32_t from,
				 uint32_t to)
{
	if ((int32_t)(to - r->seen_tail) > 0)
		to = r->seen_tail;
	if (to - from > JR_PREFETCH_MAX)
		to = from + JR_PREFETCH_MAX;
	for (uint32_t at = (from | 63u) + 1; (int32_t)(to - at) > 0; at += 64)
		__builtin_prefetch(r->buf + (at & r->mask), 0, 2);
}

/* Find the next group between r->rd and r->seen_tail; skip padding. */
static bool ring_peek(struct jr_rings *e, struct jr_ring *r)
{
	struct jitdump_prefix pre;
	uint32_t rd = jitring_ring_next_group(r, r->rd, r->seen_tail, &pre);
	uint32_t pos = rd & r->mask;

	r->rd = rd;
	if (rd == r->seen_tail)
		return false;
	r->pk_pos = pos;
	r->pk_ts = pre.timestamp;
	if (pre.id == JR_ID_JUMBO) {
		struct jr_jumbo j;
		uint32_t len;

		memcpy(&j, r->buf + pos, sizeof(j));
		r->pk_len = sizeof(j);
		r->pk_jumbo = (uint8_t *)(uintptr_t)j.ptr;
		r->pk_jlen = j.len;
		jitring_group_size(r->pk_jumbo, &len, &r->pk_records);
	} else {
		r->pk_jumbo = NULL;
		jitring_group_size(r->buf + pos, &r->pk_len, &r->pk_records);
	}
	/* The write copies the group: from here, or on the write thread,
	 * which fetches its batch itself. */
	ring_prefetch(r, e->m->io_running ? rd + r->pk_len : rd,
		      rd + r->pk_len + JR_PREFETCH_NEXT);
	return true;
}

/* ------------------------------------------------------------------ */
/* The heap.                                                            */

/*
 * The merge's heap holds each ring's key inline: with hundreds of rings
 * a comparison that dereferenced the ring would miss L1 at every level.
 */
static inline bool hent_less(const struct jr_hent *a, const struct jr_hent *b)
{
	return a->ts < b->ts || (a->ts == b->ts && a->idx < b->idx);
}

static inline struct jr_hent hent_of(struct jr_ring *r)
{
	return (struct jr_hent){ .ts = r->pk_ts, .idx = r->reg_idx, .r = r };
}

static void heap_push(struct jr_merge *m, struct jr_ring *r)
{
	struct jr_hent k = hent_of(r);
	uint32_t i = m->nheap++;

	while (i) {
		uint32_t p = (i - 1) / 2;

		if (!hent_less(&k, &m->heap[p]))
			break;
		m->heap[i] = m->heap[p];
		i = p;
	}
	m->heap[i] = k;
}

/* Put @k at the root and sift it down. */
static void heap_sift_root(struct jr_merge *m, struct jr_hent k)
{
	uint32_t i = 0, n = m->nheap;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && hent_less(&m->heap[c + 1], &m->heap[c]))
			c++;
		if (!hent_less(&m->heap[c], &k))
			break;
		m->heap[i] = m->heap[c];
		i = c;
	}
	m->heap[i] = k;
}

static void heap_pop(struct jr_merge *m)
{
	if (--m->nheap)
		heap_sift_root(m, m->heap[m->nheap]);
}

/* ------------------------------------------------------------------ */
/* Steps 2-4.                                                           */

static void emit(struct jr_rings *e, struct jr_ring *r)
{
	struct jr_batch *b = e->m->cur;
	uint8_t *base = r->pk_jumbo ? r->pk_jumbo : r->buf + r->pk_pos;
	size_t len = r->pk_jumbo ? r->pk_jlen : r->pk_len;
	struct iovec *last = b->niov ? &b->iov[b->niov - 1] : NULL;
	struct jr_grp *g = &b->grp[b->ngrp++];

	if (last && !r->pk_jumbo && b->last == r &&
	    (uint8_t *)last->iov_base + last->iov_len == base) {
		last->iov_len += len;
	} else {
		b->iov[b->niov].iov_base = base;
		b->iov[b->niov].iov_len = len;
		b->niov++;
	}
	b->last = r->pk_jumbo ? NULL : r;
	b->bytes += len;
	r->rd += r->pk_len;
	g->jumbo = r->pk_jumbo;
	g->base = base;
	g->ring = r;
	g->file_end = b->bytes;
	g->rd_end = r->rd;
	g->records = r->pk_records;
	if (b->niov == JR_IOV_MAX || b->ngrp == JR_BATCH_GROUPS ||
	    b->bytes >= JR_BATCH_BYTES)
		jitring_batch_submit(e, true);
}

/*
 * Mark LATE the BUSY rings that held the oldest pending group too long.
 * Return: the watermark the rings still counted allow (at most T).
 */
static uint64_t mark_late(struct jr_rings *e, uint64_t T, uint64_t *deadline)
{
	struct jitring *jr = e->jr;
	struct jr_merge *m = e->m;
	uint64_t hold_ns = (uint64_t)jr->holdback_ms * 1000000u;
	uint64_t oldest = m->heap[0].ts, nw = T;

	for (uint32_t i = 0; i < m->nbusy; i++) {
		struct jr_ring *b = m->busy[i];
		uint64_t held = T - b->busy_since;
		uint64_t v = JR_PUB(b->busy_tail) | JR_PUB_BUSY;

		if (b->lb >= oldest) {
			nw = nw < b->lb ? nw : b->lb;
			continue;
		}
		if (held > atomic_load_explicit(&jr->c.holdback_max_ns,
						memory_order_relaxed))
			atomic_store_explicit(&jr->c.holdback_max_ns, held,
					      memory_order_relaxed);
		/*
		 * Pairs with the failing commit CAS (C) in slot_commit(): the
		 * producer then re-stamps after this point.  If our CAS
		 * fails, the ring committed meanwhile with its own stamp and
		 * still bounds W.
		 */
		if (held >= hold_ns &&
		    atomic_compare_exchange_strong_explicit(
			    &b->pub, &v, v | JR_PUB_LATE, memory_order_seq_cst,
			    memory_order_relaxed)) {
			b->late_marked = true;
			continue;
		}
		if (held < hold_ns && b->busy_since + hold_ns < *deadline)
			*deadline = b->busy_since + hold_ns;
		nw = nw < b->lb ? nw : b->lb;
	}
	return nw;
}

/*
 * Step 2, for one ring: its published tail and BUSY/LATE bits, its lower
 * bound lb (section 3 of docs/design.md), and its next group into the
 * heap.  A BUSY ring (not LATE) bounds the watermark.
 */
static inline void scan_ring(struct jr_rings *e, struct jr_round *rd,
			     struct jr_ring *r)
{
	struct jr_merge *m = e->m;
	/*
	 * stamp before pub.  Pairs with the release store of stamp in
	 * slot_fill()/commit_late(): if this reads the stamp of a write that
	 * began after the one in flight below committed, that commit
	 * happens-before the load of pub, which then shows it.  So st is
	 * never above the entry pub shows in flight.  (Read after pub, st
	 * could already belong to the next write, and lift lb past an entry
	 * this scan did not see.)
	 */
	uint64_t st = atomic_load_explicit(&r->stamp, memory_order_acquire);
	/* Pairs with the seq_cst commit (C) in slot_commit(). */
	uint64_t v = atomic_load_explicit(&r->pub, memory_order_acquire);
	uint32_t tail = JR_PUB_TAIL(v);

	if (tail != r->seen_tail) {
		r->idle_since = rd->T;
		r->trimmed = false;
	}
	r->seen_tail = tail;
	r->seen_busy = (v & JR_PUB_BUSY) != 0;
	if (rd->snap)
		r->flush_target = tail;
	if (!(v & JR_PUB_BUSY)) {
		r->busy_since = 0;
		r->late_marked = false;
		r->lb = rd->T;
	} else {
		rd->any_busy = true;
		if (!(v & JR_PUB_LATE)) {
			/* Back from LATE to re-stamp: a fresh start, not an
			 * old stall to mark again at once. */
			if (r->late_marked) {
				r->late_marked = false;
				r->busy_since = 0;
			}
			if (!r->busy_since || r->busy_tail != tail) {
				r->busy_since = rd->T;
				r->busy_tail = tail;
			}
			/* Its entry in flight is stamped >= both. */
			if (st > r->lb)
				r->lb = st;
			m->busy[m->nbusy++] = r;
			if (r->lb < rd->W)
				rd->W = r->lb;
		}
	}
	if (r->rd != tail && ring_peek(e, r))
		heap_push(m, r);
}

void jitring_merge_scan(struct jr_rings *e, struct jr_round *rd)
{
	struct jr_merge *m = e->m;

	m->nbusy = 0;
	m->nheap = 0;
	m->round_groups = 0;
	for (uint32_t i = 0; i < e->nreg; i++) {
		/* Each pub is a line its producer keeps writing: have a few
		 * on their way at once. */
		if (i + JR_SCAN_AHEAD < e->nreg)
			__builtin_prefetch(&e->reg[i + JR_SCAN_AHEAD]->pub, 0,
					   3);
		scan_ring(e, rd, e->reg[i]);
	}
}

/*
 * Steps 3-4: settle the watermark (everything at close or after a failure;
 * else mark stalled rings LATE), write every group stamped at or below
 * it in timestamp order, and publish the heads.
 */
void jitring_merge_run(struct jr_rings *e, struct jr_round *rd)
{
	struct jr_merge *m = e->m;

	if (e->failed || (rd->stopping && !rd->any_busy && rd->attached))
		rd->W = UINT64_MAX;
	else if (rd->attached && m->nheap && m->heap[0].ts > rd->W)
		rd->W = mark_late(e, rd->T, &rd->deadline);

	while (m->nheap && m->heap[0].ts <= rd->W) {
		struct jr_ring *r = m->heap[0].r;

		if (r->pk_ts > r->lb)
			r->lb = r->pk_ts;
		emit(e, r);
		/* Its next group replaces it at the root (one sift, not a
		 * pop and a push). */
		if (ring_peek(e, r))
			heap_sift_root(m, hent_of(r));
		else
			heap_pop(m);
	}
	/*
	 * A flush or close waits on the heads: settle.  Else the last batch
	 * may stay posted into the next round, which takes it back before
	 * posting another (or before sleeping).
	 */
	rd->settled = rd->stopping || e->flush_ticket;
	if (rd->settled)
		jitring_batch_settle(e);
	else
		jitring_batch_submit(e, false);
}
