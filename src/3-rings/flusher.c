/* SPDX-License-Identifier: MIT */
/*
 * Rings engine, consumer side: one background thread per writer drains all
 * rings into the file in timestamp order, and keeps the pool of ready rings
 * (pool.c) and, through the hook the kit registers (struct jr_kit_ops),
 * the trampoline arenas (trampolines.c) filled ahead of demand.
 *
 * A round:
 *   1. T = CLOCK_MONOTONIC, then a seq_cst fence                      (F)
 *   2. scan every ring's pub (acquire): its visible tail, and BUSY/LATE.
 *      A ring seen idle cannot later commit anything stamped before T:
 *      its next BUSY RMW follows (F) in the total order, and its clock
 *      read follows that RMW.  So its bound lb becomes T.  A ring seen
 *      BUSY (not LATE) keeps its last bound: the timestamp it is about to
 *      commit is at least its last idle T and at least every timestamp it
 *      committed before.  The watermark W is the least bound, and at most T.
 *   3. peek each ring's oldest uncommitted-to-file group and heap them by
 *      timestamp.  If the oldest pending group is newer than a BUSY ring's
 *      bound, that ring is holding entries back; once it has been BUSY for
 *      holdback_ms, mark it LATE with a CAS (it must then re-stamp its
 *      entry at commit, after this mark, see ring.c) and stop counting it
 *      in W.  This bounds both the delay and the memory a stalled thread
 *      can cause.
 *   4. merge: pop groups with timestamp <= W in order, gathering iovecs that
 *      point straight into ring memory (or a jumbo buffer), and pwritev
 *      them at our own file offset in batches: here, or on the write
 *      thread (below).  Only after a batch is in the file are the rings'
 *      heads published past its groups (seq_cst, paired with a producer
 *      waiting for space).
 *   5. complete flush tickets;
 *   6. recycle the rings of threads that left;
 *   7. make ready what threads will ask for (the pool, the spare rings,
 *      grow successors, trampoline arenas, the idmap ahead) and trim idle
 *      rings' pages;
 *   8. sleep.
 *
 * The write thread ("jitring-write", started once batches fill up on a
 * machine of 4 CPUs or more, or always with JITRING_WRITE_THREAD=1) takes
 * the pwritev() and the kernel's copy off the merge: the flusher fixes a
 * batch's groups, order and file offset and posts it; the thread writes
 * posted batches one at a time, in the order posted, while the flusher
 * merges the next.  At most JR_BATCHES - 1 are posted at once; the
 * flusher takes them back in order (io_reap()) and only then counts them
 * and publishes heads, from each group's ring position recorded in the
 * batch (the merge has read further by then).  Before a flush ticket is
 * checked, at close and before the flusher sleeps, every posted batch is
 * taken back (batch_settle()), so what waits on the file never waits on a
 * batch the thread still holds.  After a failed write the thread writes
 * nothing more, so the file still ends where the failure left it.  The
 * flusher creates and joins the thread inside its rounds, under
 * fork_lock: a fork() waits for that (a sanitizer's fork handling is not
 * safe against a thread being made or ending during it).
 *
 * Invariants: groups leave each ring in ring order; every group written
 * has a timestamp >= every group written before it; batches reach the file
 * one at a time in order (the write thread writes posted ones in order,
 * and the flusher writes one itself only after taking back every batch it
 * posted);
 * head only moves past bytes that are in the file (or dropped after a
 * failure); the file ends on a group boundary after every batch, and
 * after a failed write it is truncated back to one and no longer written.
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
 * given back over the next seconds (give_back_idle(): every idle ring's
 * pages, the pool down to its floor), since none will run.  With no
 * flusher because it could not be started again (pthread_create failed),
 * a flush, close or a writer with a full ring runs the rounds on its own
 * thread (jitring_flusher_drain()) under run_lock and fork_lock: run_lock
 * keeps a flusher from starting meanwhile, so the flusher-private state
 * has one user at a time, as with the thread.
 *
 * The ring pool, the registry and the budget are in pool.c; the producer
 * side in ring.c and thread.c.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "files.h"
#include "flusher.h"
#include "futex.h"
#include "perfmap.h"
#include "pool.h"
#include "reaper.h"
#include "record.h"
#include "rings_internal.h"
#include "testpoint.h"

#define JR_IOV_MAX 1024u
#define JR_BATCH_GROUPS 4096u
#define JR_BATCH_BYTES (8u << 20)
/* Ring bytes prefetched past a peeked group, and at most in all. */
#define JR_PREFETCH_NEXT 256u
#define JR_PREFETCH_MAX 4096u
#define JR_SCAN_AHEAD 8u
/* CPUs this process may run on for a write thread to pay. */
#define JR_IO_MIN_CPUS 4
#define JR_TRIM_NS (1000u * 1000000ull) /* idle this long: drop pages */
/* Retry registering a ring after running out of memory. */
#define JR_RETRY_NS (1000000u)
/* A round that wrote this many groups is followed at once by another. */
#define JR_BUSY_ROUND_GROUPS 32u

/* The trampoline kit's work, once it registered (rings.h). */
static _Atomic(const struct jr_kit_ops *) kit_ops;

void jitring_rings_kit_register(const struct jr_kit_ops *ops)
{
	/* Pairs with the seq_cst load in kit_wanted(). */
	atomic_store_explicit(&kit_ops, ops, memory_order_seq_cst);
}

static uint64_t kit_maintain(struct jitring *jr, uint64_t now)
{
	/* Pairs with the store in jitring_rings_kit_register(). */
	const struct jr_kit_ops *k =
		atomic_load_explicit(&kit_ops, memory_order_acquire);

	return k ? k->maintain(jr, now) : UINT64_MAX;
}

static bool kit_wanted(struct jitring *jr)
{
	/* seq_cst: after our store of the sleep mode (news()). */
	const struct jr_kit_ops *k =
		atomic_load_explicit(&kit_ops, memory_order_seq_cst);

	return k && k->wanted(jr);
}

struct jr_grp {
	uint8_t *jumbo;
	uint8_t *base;        /* the group's bytes, valid until heads move */
	struct jr_ring *ring; /* the ring it came from */
	uint64_t file_end;    /* batch bytes up to the end of this group */
	uint32_t rd_end;      /* the ring's head once the group is written */
	uint32_t records;
};

/* Whole groups in file order, for one pwritev() at @off. */
struct jr_batch {
	uint32_t niov;
	uint32_t ngrp;
	uint64_t bytes;
	uint64_t off;         /* set when submitted */
	struct jr_ring *last; /* the ring the last iovec points into */
	int ret;              /* the write's result, */
	uint64_t done;        /* and the bytes it wrote */
	struct iovec iov[JR_IOV_MAX];
	struct jr_grp grp[JR_BATCH_GROUPS];
};

/*
 * Batches the write thread may hold at once.  More than one: the thread
 * goes straight from one batch to the next while the flusher finishes and
 * fills others, without waiting to be woken each time.
 */
#define JR_BATCHES 4u

enum jr_io_policy {
	JR_IO_NEVER,
	JR_IO_WHEN_FULL, /* once a batch fills up: the merge is behind */
	JR_IO_ALWAYS,
};

/* A ring in the merge's heap, keyed by its next group's timestamp. */
struct jr_hent {
	uint64_t ts;
	uint32_t idx; /* reg_idx: ties go to the lower */
	struct jr_ring *r;
};

struct jr_merge {
	struct jr_hent *heap;
	struct jr_ring **busy;
	uint32_t nheap;
	uint32_t nbusy;
	uint32_t cap;
	uint64_t round_groups;
	/*
	 * bat[n % JR_BATCHES] is batch n.  Batches posted..: being filled
	 * (one, cur); reaped..posted: the write thread's; ..reaped: done.
	 * The thread writes them in order; written counts those it did.
	 */
	struct jr_batch *cur;
	uint32_t reaped; /* flusher-private */
	_Atomic uint32_t posted;
	_Atomic uint32_t written; /* futex: the flusher waits on it */
	_Atomic uint32_t io_quit;
	_Atomic uint32_t io_idle; /* futex: the write thread sleeps on it */
	_Atomic uint32_t fl_wait; /* the flusher sleeps on written */
	uint64_t post_off;        /* file offset after the posted batches */
	bool io_running;          /* the write thread exists */
	uint32_t io_policy;       /* enum jr_io_policy; NEVER off the
				    * flusher thread */
	uint32_t io_cfg;          /* the policy for the flusher thread */
	bool io_broken;           /* it could not be started: write here */
	bool io_failed; /* write thread: a write failed; skip the rest */
	pthread_t io_thread;
	pid_t io_tid; /* the write thread's, read after its join */
	struct jr_batch bat[JR_BATCHES];
	char mapbuf[64 << 10]; /* perf map lines of a batch */
};

static uint32_t io_policy(void);

int jitring_flusher_init(struct jr_rings *e)
{
	struct jr_merge *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->cur = &m->bat[0];
	m->post_off = e->file_off;
	/* On the opening thread: getenv() on one of ours could race the
	 * application's setenv(). */
	m->io_cfg = io_policy();
	e->m = m;
	return 0;
}

static void io_stop(struct jr_rings *e);

void jitring_flusher_fini(struct jr_rings *e)
{
	if (!e->m)
		return;
	io_stop(e);
	free(e->m->heap);
	free(e->m->busy);
	free(e->m);
	e->m = NULL;
}

int jitring_flusher_fit(struct jr_rings *e, uint32_t cap)
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
/* Writing.                                                             */

/*
 * Publish @r's head at @rd (what is in the file) if that moves it on;
 * wake a space waiter.
 */
static void head_publish(struct jr_ring *r, uint32_t rd)
{
	if ((int32_t)(rd - r->head_local) <= 0)
		return;
	r->head_local = rd;
	/*
	 * Pairs with the acquire loads of head in slot_reserve() and
	 * wait_space(); seq_cst against the space_waiter Dekker.
	 */
	atomic_store_explicit(&r->head, rd, memory_order_seq_cst);
	if (atomic_load_explicit(&r->space_waiter, memory_order_seq_cst))
		jr_futex_wake(&r->head, 1);
}

/*
 * Every ring's head up to where the merge has read it (past padding too).
 * Only with no batch posted or being filled: then all of it is in the
 * file.
 */
static void publish_heads(struct jr_rings *e)
{
	for (uint32_t i = 0; i < e->nreg; i++)
		head_publish(e->reg[i], e->reg[i]->rd);
}

/* The perf map lines of the first @ok groups of @b, in order. */
static void perfmap_batch(struct jr_rings *e, const struct jr_batch *b,
			  uint32_t ok)
{
	struct jr_merge *m = e->m;
	char *buf = m->mapbuf;
	size_t n = 0;

	for (uint32_t i = 0; i < ok; i++) {
		uint64_t start = i ? b->grp[i - 1].file_end : 0;

		if (n + JR_PERFMAP_LINE_MAX > sizeof(m->mapbuf)) {
			jitring_perfmap_write(e->jr, buf, n);
			n = 0;
		}
		n += jitring_perfmap_line_load(buf + n, b->grp[i].base,
					       b->grp[i].file_end - start);
	}
	jitring_perfmap_write(e->jr, buf, n);
}

/* Write @b at its offset (either thread). */
static void batch_write(struct jr_rings *e, struct jr_batch *b)
{
	b->done = 0;
	b->ret = jitring_file_pwritev_all(e->jr->file.fd, b->iov, (int)b->niov,
					  b->off, &b->done);
}

/*
 * @b was written (or not, after a failure): keep whole groups only, count
 * them, and move each ring's head past its groups in it.
 */
static void batch_done(struct jr_rings *e, struct jr_batch *b, bool posted)
{
	struct jitring *jr = e->jr;
	uint64_t good = b->bytes;
	uint32_t ok = b->ngrp, records = 0;

	if (e->failed) {
		ok = 0;
		good = 0;
	} else if (b->ret) {
		/* Keep whole groups only; cut a torn tail off. */
		ok = 0;
		while (ok < b->ngrp && b->grp[ok].file_end <= b->done)
			ok++;
		good = ok ? b->grp[ok - 1].file_end : 0;
		if (b->done != good &&
		    ftruncate(jr->file.fd, (off_t)(b->off + good)))
			jitring_log(jr, JITRING_LOG_ERR,
				    "ftruncate after failed write: %s",
				    strerror(errno));
		e->failed = true;
		jitring_set_io_error(jr, b->ret);
	}
	e->file_off += good;
	if (ok && jr->map_fd >= 0)
		perfmap_batch(e, b, ok);
	for (uint32_t i = 0; i < b->ngrp; i++) {
		if (i < ok)
			records += b->grp[i].records;
		free(b->grp[i].jumbo);
	}
	if (ok) {
		jitring_count(&jr->c.entries_written, ok);
		jitring_count(&jr->c.records_written, records);
		jitring_count(&jr->c.bytes_written, good);
		jitring_count(&jr->c.batches, 1);
	}
	if (b->ngrp > ok)
		jitring_count(&jr->c.lost_io, b->ngrp - ok);
	if (!posted) {
		/* Written here, nothing else posted: all of it is in. */
		publish_heads(e);
	} else {
		/* Backwards: a ring's last group in the batch sets its head,
		 * and its earlier ones then move nothing. */
		for (uint32_t i = b->ngrp; i-- > 0;)
			head_publish(b->grp[i].ring, b->grp[i].rd_end);
	}
	b->niov = b->ngrp = 0;
	b->bytes = 0;
	b->last = NULL;
}

/*
 * Fetch a batch's bytes into this core's cache before the kernel copies
 * them: its iovecs point into many rings, a few lines each, which the
 * copy would miss on one by one.
 */
static void batch_prefetch(const struct jr_batch *b)
{
	for (uint32_t i = 0; i < b->niov; i++) {
		const uint8_t *p = b->iov[i].iov_base;
		size_t n = b->iov[i].iov_len < JR_PREFETCH_MAX ?
				   b->iov[i].iov_len :
				   JR_PREFETCH_MAX;

		for (size_t o = 0; o < n; o += 64)
			__builtin_prefetch(p + o, 0, 2);
	}
}

/*
 * How long to spin before a futex wait: a batch takes tens of
 * microseconds to write, about what waking a sleeping thread costs.
 */
#define JR_IO_SPIN_NS 20000u

/* Spin a while for *@w to leave @v; false if it did not. */
static bool io_spin(_Atomic uint32_t *w, uint32_t v)
{
	uint64_t until = 0;

	for (uint32_t i = 1;; i++) {
		if (atomic_load_explicit(w, memory_order_relaxed) != v)
			return true;
		jr_cpu_relax();
		if (i % 64)
			continue;
		if (!until)
			until = jitring_clock_ns() + JR_IO_SPIN_NS;
		else if (jitring_clock_ns() > until)
			return false;
	}
}

/*
 * The write thread: pwritev() the batches the flusher posts, in the order
 * posted.  It touches nothing but the posted batches, the ring bytes their
 * iovecs point at (which no head passes until the flusher reaped the
 * batch) and the descriptor.  After a failed write it writes nothing more
 * (each later batch is marked not written), so the file still ends where
 * the first failure left it.
 */
static void *io_main(void *arg)
{
	struct jr_rings *e = arg;
	struct jr_merge *m = e->m;
	uint32_t n = atomic_load_explicit(&m->written, memory_order_relaxed);

	/* Counted as jitring's, not the application's (reaper.c). */
	jitring_reaper_thread_begin();
	pthread_setname_np(pthread_self(), "jitring-write");
	/* Read after our join (io_stop()). */
	m->io_tid = (pid_t)syscall(SYS_gettid);
	JITRING_TESTPOINT(io_thread, e->jr);
	for (;;) {
		struct jr_batch *b;
		/* Pairs with the release store in io_post(). */
		uint32_t p =
			atomic_load_explicit(&m->posted, memory_order_acquire);

		if (p == n) {
			/* Pairs with the seq_cst store in io_stop(). */
			if (atomic_load_explicit(&m->io_quit,
						 memory_order_seq_cst))
				break;
			if (io_spin(&m->posted, n))
				continue;
			/*
			 * Dekker with io_post() and io_stop(): they store
			 * posted or io_quit, then load io_idle (and clear it
			 * before waking us); we store io_idle, then load
			 * both.  All seq_cst.  The futex is io_idle itself,
			 * so a wake between our check and our wait is not
			 * lost: the wait sees it cleared.
			 */
			atomic_store_explicit(&m->io_idle, 1,
					      memory_order_seq_cst);
			if (atomic_load_explicit(&m->posted,
						 memory_order_seq_cst) == n &&
			    !atomic_load_explicit(&m->io_quit,
						  memory_order_seq_cst))
				jr_futex_wait(&m->io_idle, 1, NULL);
			atomic_store_explicit(&m->io_idle, 0,
					      memory_order_relaxed);
			continue;
		}
		b = &m->bat[n % JR_BATCHES];
		if (m->io_failed) {
			b->ret = -ECANCELED;
			b->done = 0;
		} else {
			batch_prefetch(b);
			batch_write(e, b);
			m->io_failed = b->ret != 0;
		}
		n++;
		/* Pairs with the acquire load in io_reap(); seq_cst: the
		 * Dekker with fl_wait there. */
		atomic_store_explicit(&m->written, n, memory_order_seq_cst);
		if (atomic_load_explicit(&m->fl_wait, memory_order_seq_cst))
			jr_futex_wake(&m->written, 1);
	}
	jitring_reaper_thread_end();
	return NULL;
}

/*
 * Finish the batches the write thread wrote, in order; with @all, wait
 * for every posted one, else until one more may be posted.
 */
static void io_reap(struct jr_rings *e, bool all)
{
	struct jr_merge *m = e->m;
	uint32_t posted =
		atomic_load_explicit(&m->posted, memory_order_relaxed);

	while (m->reaped != posted) {
		/* Pairs with the seq_cst store in io_main(). */
		uint32_t w =
			atomic_load_explicit(&m->written, memory_order_acquire);

		if (w == m->reaped) {
			/* Room to post one more and still fill another. */
			if (!all && posted - m->reaped < JR_BATCHES - 1)
				return;
			if (io_spin(&m->written, w))
				continue;
			atomic_store_explicit(&m->fl_wait, 1,
					      memory_order_seq_cst);
			jr_futex_wait(&m->written, w, NULL);
			atomic_store_explicit(&m->fl_wait, 0,
					      memory_order_relaxed);
			continue;
		}
		while (m->reaped != w)
			batch_done(e, &m->bat[m->reaped++ % JR_BATCHES], true);
	}
}

/* After a seq_cst store of posted or io_quit: wake the write thread if
 * it sleeps (the Dekker in io_main()). */
static void io_wake(struct jr_merge *m)
{
	if (atomic_load_explicit(&m->io_idle, memory_order_seq_cst)) {
		atomic_store_explicit(&m->io_idle, 0, memory_order_relaxed);
		jr_futex_wake(&m->io_idle, 1);
	}
}

static void io_post(struct jr_rings *e, struct jr_batch *b)
{
	struct jr_merge *m = e->m;
	uint32_t p = atomic_load_explicit(&m->posted, memory_order_relaxed);

	b->off = m->post_off;
	m->post_off += b->bytes;
	/* Pairs with the acquire load in io_main(): b's contents.  seq_cst:
	 * the Dekker with io_idle there. */
	atomic_store_explicit(&m->posted, p + 1, memory_order_seq_cst);
	io_wake(m);
	m->cur = &m->bat[(p + 1) % JR_BATCHES];
}

/*
 * Whether batches go to a write thread: $JITRING_WRITE_THREAD "1" always
 * (from the first batch), "0" never; otherwise once batches fill up, and
 * only with at least JR_IO_MIN_CPUS CPUs to run on: on fewer the
 * hand-offs cost more than the overlap gains (docs/design.md).
 */
static uint32_t io_policy(void)
{
	const char *v = getenv("JITRING_WRITE_THREAD");
	cpu_set_t set;

	if (v && !strcmp(v, "1"))
		return JR_IO_ALWAYS;
	if ((v && !strcmp(v, "0")) || sched_getaffinity(0, sizeof(set), &set))
		return JR_IO_NEVER;
	return CPU_COUNT(&set) >= JR_IO_MIN_CPUS ? JR_IO_WHEN_FULL :
						   JR_IO_NEVER;
}

/* Start the write thread (flusher thread only); on failure write here. */
static void io_start(struct jr_rings *e)
{
	struct jr_merge *m = e->m;

	if (m->io_running || m->io_broken || m->io_policy == JR_IO_NEVER)
		return;
	atomic_store_explicit(&m->io_quit, 0, memory_order_relaxed);
	m->io_failed = false;
	if (JITRING_FAULT(io_start, e->jr) ||
	    pthread_create(&m->io_thread, NULL, io_main, e)) {
		m->io_broken = true;
		return;
	}
	m->io_running = true;
}

/*
 * Finish every posted batch and let the write thread go: joined, and out
 * of the process's thread count (a pause returns with it down, see
 * jitring_pause(); so does anyone counting threads before a fork).
 */
static void io_stop(struct jr_rings *e)
{
	struct jr_merge *m = e->m;

	io_reap(e, true);
	if (!m->io_running)
		return;
	/* Pairs with the seq_cst load in io_main(). */
	atomic_store_explicit(&m->io_quit, 1, memory_order_seq_cst);
	io_wake(m);
	pthread_join(m->io_thread, NULL);
	m->io_running = false;
	jitring_reaper_thread_gone(m->io_tid);
}

/*
 * Hand the batch being filled to the file: post it to the write thread
 * (after finishing what it wrote, and waiting for a free slot), or write
 * it here when there is none.  Either way batches reach the file one at a
 * time in order, so it ends on a group boundary after each.  @full: the
 * batch filled up, the merge is behind.
 */
static void batch_submit(struct jr_rings *e, bool full)
{
	struct jr_merge *m = e->m;
	struct jr_batch *b = m->cur;

	io_reap(e, false);
	if (!b->ngrp) {
		/* Nothing to write; with nothing posted, heads may still
		 * move (padding). */
		if (m->reaped ==
		    atomic_load_explicit(&m->posted, memory_order_relaxed))
			publish_heads(e);
		return;
	}
	m->round_groups += b->ngrp;
	if (full || m->io_policy == JR_IO_ALWAYS)
		io_start(e);
	if (m->io_running && !e->failed) {
		io_post(e, b);
		return;
	}
	io_reap(e, true);
	b->off = e->file_off;
	if (!e->failed)
		batch_write(e, b);
	batch_done(e, b, false);
	m->post_off = e->file_off;
}

/* Everything merged so far in the file, every head published. */
static void batch_settle(struct jr_rings *e)
{
	batch_submit(e, false);
	io_reap(e, true);
	publish_heads(e);
}

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
		batch_submit(e, true);
}

void jitring_flusher_fork_prepare(struct jr_rings *e)
{
	if (e->m)
		io_reap(e, true);
}

void jitring_flusher_fork_child(struct jr_rings *e)
{
	if (!e->m)
		return;
	e->m->io_running = false;
}

void jitring_flusher_write_close(struct jr_rings *e)
{
	struct jitring *jr = e->jr;
	struct jitdump_prefix p = {
		.id = JIT_CODE_CLOSE,
		.total_size = sizeof(p),
		.timestamp = jitring_clock_ns(),
	};
	struct iovec iov = { &p, sizeof(p) };
	uint64_t done;
	int ret;

	if (!(jr->flags & JITRING_F_WRITE_CLOSE) || e->failed ||
	    atomic_load_explicit(&jr->io_error, memory_order_relaxed))
		return;
	ret = jitring_file_pwritev_all(jr->file.fd, &iov, 1, e->file_off,
				       &done);
	if (ret) {
		if (done && ftruncate(jr->file.fd, (off_t)e->file_off))
			jitring_log(jr, JITRING_LOG_ERR, "ftruncate: %s",
				    strerror(errno));
		jitring_set_io_error(jr, ret);
		return;
	}
	e->file_off += sizeof(p);
	jitring_count(&jr->c.records_written, 1);
	jitring_count(&jr->c.bytes_written, sizeof(p));
}

/* ------------------------------------------------------------------ */
/* A round.                                                             */

struct round_out {
	uint32_t mode;    /* enum jr_sleep */
	uint64_t timeout; /* ns, 0 for none */
	bool done;        /* stop: everything is written */
};

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

/* What one round saw and decided, passed between its steps. */
struct round {
	uint64_t T;        /* its clock reading, before fence (F) */
	uint64_t W;        /* watermark: groups stamped <= W are written */
	uint64_t deadline; /* earliest hold-back deadline, or UINT64_MAX */
	bool stopping;     /* close asked us to finish */
	bool snap;         /* a new flush ticket: record each ring's target */
	bool attached;     /* every ring threads made is registered */
	bool any_busy;     /* some ring is between timestamp and commit */
	bool settled;      /* the merge took every posted batch back */
};

/*
 * Step 1: T, stop, fence (F), the flush request, the attach stack.
 */
static void round_begin(struct jr_rings *e, struct round *rd)
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

/*
 * Step 2, for one ring: its published tail and BUSY/LATE bits, its lower
 * bound lb (section 3 of docs/design.md), and its next group into the
 * heap.  A BUSY ring (not LATE) bounds the watermark.
 */
static inline void scan_ring(struct jr_rings *e, struct round *rd,
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

/*
 * Steps 3-4: settle the watermark (everything at close or after a failure;
 * else mark stalled rings LATE), write every group stamped at or below
 * it in timestamp order, and publish the heads.
 */
static void round_merge(struct jr_rings *e, struct round *rd)
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
		batch_settle(e);
	else
		batch_submit(e, false);
}

/* Step 5: complete the flush ticket once every head passed its target
 * (not while a ring with entries is unregistered). */
static void round_flush_ticket(struct jr_rings *e, const struct round *rd)
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
static void round_recycle(struct jr_rings *e, const struct round *rd)
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
static void round_plan_sleep(struct jr_rings *e, const struct round *rd,
			     uint64_t trim_at, struct round_out *out)
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

static void round_run(struct jr_rings *e, struct round_out *out)
{
	struct jr_merge *m = e->m;
	struct round rd;
	uint64_t trim_at, stock_at = UINT64_MAX, pool_at;

	round_begin(e, &rd);
	m->nbusy = 0;
	m->nheap = 0;
	m->round_groups = 0;
	for (uint32_t i = 0; i < e->nreg; i++) {
		/* Each pub is a line its producer keeps writing: have a few
		 * on their way at once. */
		if (i + JR_SCAN_AHEAD < e->nreg)
			__builtin_prefetch(&e->reg[i + JR_SCAN_AHEAD]->pub, 0,
					   3);
		scan_ring(e, &rd, e->reg[i]);
	}
	round_merge(e, &rd);
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
		io_stop(e);
		jitring_flusher_write_close(e);
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
			batch_settle(e);
		/* Idle: the write thread goes until writes are heavy again. */
		if (out->mode == JR_DEEP && !rd.stopping && !e->flush_ticket)
			io_stop(e);
	}
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
	    kit_wanted(e->jr) || req > e->req_seen ||
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

static void flusher_sleep(struct jr_rings *e, const struct round_out *o)
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

/*
 * No flusher will run rounds for a while (a pause): give back now what idle
 * rounds would give back over the next two seconds.  The pool's demand
 * decays to nothing, so its stock falls to the floor; every idle ring's
 * pages go (a ready ring keeps the page of its next write).  Under
 * fork_lock, like a round; threads may write meanwhile: trim_idle()'s CAS
 * on pub leaves a ring that committed since the last scan alone.
 */
static void give_back_idle(struct jr_rings *e)
{
	uint64_t T = jitring_clock_ns();

	io_stop(e);
	memset(&e->demand, 0, sizeof(e->demand));
	jitring_pool_maintain(e, T);
	trim_idle(e, T, 0);
}

static void drain_wait(const struct round_out *o)
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
	struct round_out o;
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
		round_run(e, &o);
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
	give_back_idle(e);
	pthread_mutex_unlock(&e->fork_lock);
	return 0;
}

void *jitring_flusher_main(void *arg)
{
	struct jr_rings *e = arg;
	struct round_out o;

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
		round_run(e, &o);
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
				give_back_idle(e);
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
