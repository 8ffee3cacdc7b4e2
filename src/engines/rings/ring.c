/* SPDX-License-Identifier: MIT */
/*
 * Rings engine, the write path: jitring_write() and jitring_move() on a JIT
 * thread, into that thread's own ring.  thread.c finds (and makes, and
 * grows) the ring; flusher.c drains it; rings.c starts and stops the engine.
 *
 * Algorithm.  Each (thread, writer) pair owns one struct jr_ring, a
 * single-producer single-consumer byte ring holding encoded jitdump groups
 * exactly as they will appear in the file.  The producer (the thread) owns
 * the tail, the consumer (the flusher) the head.  A write:
 *
 *   1. finds its ring through a thread-local list (first write: takes a
 *      ready ring from the pool, or, if the pool is empty, a spare ring or
 *      one it makes, and pushes that to the flusher's attach stack, see
 *      thread.c);
 *   2. makes sure the group fits between tail and head (waiting, or -EAGAIN
 *      in drop mode, if not) -- before announcing anything;
 *   3. sets BUSY in pub with a seq_cst RMW                           (A)
 *   4. re-reads the writer state (seq_cst); closing -> back out        (B)
 *   5. reads CLOCK_MONOTONIC: the group's timestamp, and publishes it in
 *      stamp (release) as the bound the flusher may use while we are BUSY;
 *   6. takes a code_index from its private block of JR_ID_BLOCK;
 *   7. encodes the group straight into the ring (a PAD record first if it
 *      would cross the end of the buffer);
 *   8. commits: CAS pub from (tail|BUSY) to (new_tail), seq_cst          (C)
 *      If that fails the flusher has marked the ring LATE: it stopped
 *      waiting for us and may already have written entries stamped after
 *      our timestamp.  We then clear LATE (back to plain BUSY, seq_cst),
 *      re-read the clock, re-stamp our records and commit again (see
 *      commit_late()).  The new stamp is after every entry the flusher
 *      wrote while it left us out, and before this call returns, so perf
 *      still sees the code before it can run;
 *   9. reads the flusher's sleep word (seq_cst) and wakes it if needed  (D)
 *
 * Steps 1-9 run with a thread-local "inside" flag set, so that a signal
 * handler interrupting them (even in step 2, before BUSY) gets -EDEADLK
 * rather than writing at the same tail as the call it interrupted.
 *
 * Invariants: pub has BUSY exactly while the owner is between (A) and (C);
 * LATE only ever appears together with BUSY and is cleared by the commit;
 * timestamps in one ring never decrease; code_index values are unique
 * because blocks are carved from one atomic counter.
 *
 * Ordering, in short (docs/design.md has the argument): the flusher reads
 * the clock T, issues a seq_cst fence and then reads every pub.  A ring
 * seen idle cannot commit anything stamped before T, because its BUSY RMW
 * (A) comes after the fence in the single total order and its clock read
 * comes after (A).  A ring seen BUSY holds the flusher back to that ring's
 * last known bound until it commits or is marked LATE.  (B) against close
 * is a Dekker pair: close stores CLOSING seq_cst and the flusher then sees
 * BUSY, or the writer sees CLOSING and backs out without touching the ring
 * buffer, which close frees.  (C)/(D) against the flusher going to sleep is
 * another: the flusher stores its sleep mode seq_cst and re-scans, or the
 * producer sees the mode and wakes it.
 *
 * Memory: who frees a ring is decided by one CAS on own (thread.c,
 * pool.c): the thread that lets go turns ACTIVE into DETACHED and the
 * flusher recycles the ring once drained; close turns ACTIVE into ORPHAN,
 * keeps the buffer and leaves the control block to the thread.  A write
 * that sees the writer is not open (B) never touches the buffer.  The
 * handle itself is never freed, so a thread that still lists a closed
 * writer's ring reads a valid state word first.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "format/record.h"
#include "pool.h"
#include "rings_internal.h"
#include "thread.h"

/* Set while this thread is inside produce(); see there. */
static __thread volatile sig_atomic_t tls_inside
	__attribute__((tls_model("initial-exec")));

struct jr_move_args {
	uint64_t code_index;
	const void *new_addr;
	const void *old_addr;
	uint64_t code_size;
};

/*
 * The ring passed half full: make sure its head is current, and ask the
 * flusher for a larger successor once per ring.
 */
static JR_NOINLINE void ask_grow(struct jitring *jr, struct jr_ring *r)
{
	/* Pairs with the seq_cst store of head in publish_heads(). */
	r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
	if (r->tail - r->head_cache <= r->size / 2 ||
	    jr->ring_min == jr->ring_max || r->size >= jr->ring_max)
		return;
	r->grow_asked = true;
	atomic_store_explicit(&r->grow_req, 1, memory_order_relaxed);
	/* Pairs with the acquire load in provide_growth(): it then sees our
	 * grow_req.  The wake below gets the flusher to look. */
	atomic_fetch_add_explicit(&jr->grow_asks, 1, memory_order_release);
	jitring_rings_wake(jr, true);
}

/*
 * The ring is full: wake the flusher once, spin briefly (it may be running
 * on another CPU), then sleep until it publishes our head.  The timeout is
 * only a safety net; the flusher also wakes space waiters on close and on
 * failure.  With no flusher (paused, and it could not start again) the
 * wait starts one or drains here (jitring_rings_stalled()).
 */
static JR_NOINLINE int wait_space(struct jitring *jr, struct jr_ring *r,
				  uint32_t need)
{
	/* Pairs with the seq_cst store of head in publish_heads(). */
	r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
	if (r->size - (r->tail - r->head_cache) >= need)
		return 0;
	if (jr->flags & JITRING_F_DROP) {
		jitring_count(&jr->c.refused_dropped, 1);
		return -EAGAIN;
	}
	jitring_count(&jr->c.ring_full_waits, 1);
	jitring_rings_wake(jr, true);
	for (unsigned spins = 0;; spins++) {
		uint32_t s =
			atomic_load_explicit(&jr->state, memory_order_acquire);
		uint32_t h;

		if (s != JR_OPEN)
			return jitring_refuse_state(jr, s);
		if (spins < 100) {
			jr_cpu_relax();
		} else if (atomic_load_explicit(&jr->sleep,
						memory_order_relaxed) ==
			   JR_STOPPED) {
			int ret = jitring_rings_stalled(jr);

			if (ret)
				return ret;
		} else {
			struct timespec rel = jitring_clock_rel(100 * 1000000u);

			/*
			 * Dekker with the flusher: it stores head and then
			 * reads space_waiter, both seq_cst.
			 */
			atomic_store_explicit(&r->space_waiter, 1,
					      memory_order_seq_cst);
			h = atomic_load_explicit(&r->head,
						 memory_order_seq_cst);
			if (r->size - (r->tail - h) < need)
				jr_futex_wait(&r->head, h, &rel);
			atomic_store_explicit(&r->space_waiter, 0,
					      memory_order_relaxed);
		}
		/* Pairs with the seq_cst store of head in the flusher. */
		h = atomic_load_explicit(&r->head, memory_order_acquire);
		if (r->size - (r->tail - h) >= need) {
			r->head_cache = h;
			return 0;
		}
	}
}

/*
 * A new block of code_index values.  Called between (B) and (C), so the
 * engine (and its idmap) cannot be freed under us.
 */
static JR_NOINLINE uint64_t id_refill(struct jitring *jr, struct jr_ring *r)
{
	uint64_t start = jitring_ids_take();
	_Atomic uint64_t *chunk = jitring_idmap_chunk(jr->eng, start);

	r->next_id = start + 1;
	r->id_end = start + JR_ID_BLOCK;
	r->id_bits = 0;
	/* Without a map (no memory) moves of this block get -ENOENT. */
	r->id_word = chunk ? &chunk[(start >> 6) & (JR_IDMAP_WORDS - 1)] : NULL;
	return start;
}

/* Is @id one this writer handed out?  Inside jitring_enter() only. */
static bool id_issued(struct jitring *jr, uint64_t id)
{
	struct jr_rings *e = jr->eng;
	_Atomic uint64_t *chunk;

	if (id == 0 || (id >> JR_IDMAP_SHIFT) >= JR_IDMAP_CHUNKS)
		return false;
	/* Pairs with the release CAS that installed the chunk. */
	chunk = atomic_load_explicit(&e->idmap[id >> JR_IDMAP_SHIFT],
				     memory_order_acquire);
	/*
	 * Relaxed: the caller got @id from a write that returned before this
	 * call (happens-before through its own synchronisation), and that
	 * write stored the bit before returning.
	 */
	return chunk &&
	       (atomic_load_explicit(&chunk[(id >> 6) & (JR_IDMAP_WORDS - 1)],
				     memory_order_relaxed) >>
		(id & 63)) &
		       1;
}

/*
 * A move's code_index must be one this writer handed out.  Checked before
 * the move waits for (or, in drop mode, gives up on) ring space, so that a
 * bad index gets -ENOENT whatever the ring's state.  Moves are rare: the
 * user count that keeps the idmap alive costs two RMWs, not the write's
 * hot path.  A writer that failed says so; in a fork child before its
 * first write nothing was handed out yet.
 */
static JR_NOINLINE int move_check(struct jitring *jr, uint64_t id)
{
	uint32_t s = jitring_enter(jr);
	bool issued;

	if (s >= JR_CLOSING)
		return jitring_refuse_state(jr, s);
	issued = s == JR_OPEN && id_issued(jr, id);
	jitring_exit(jr);
	if (s == JR_FAILED)
		return jitring_refuse_state(jr, s);
	if (!issued) {
		jitring_count(&jr->c.refused_invalid, 1);
		return -ENOENT;
	}
	return 0;
}

/*
 * fetch_or found TRIM set: the flusher is discarding this idle ring's
 * pages; wait for it to finish.  (BUSY is never found set: only the owner
 * sets it, and produce() refuses a nested call before it gets here.)
 */
static JR_NOINLINE void trim_wait(struct jr_ring *r)
{
	/* Pairs with the release fetch_and of TRIM in the flusher. */
	for (unsigned spins = 0;
	     atomic_load_explicit(&r->pub, memory_order_acquire) & JR_PUB_TRIM;
	     spins++) {
		if (spins < 100)
			jr_cpu_relax();
		else
			sched_yield();
	}
}

/* The writer is not open: undo BUSY and say why. */
static JR_NOINLINE int back_out(struct jitring *jr, struct jr_ring *r,
				uint32_t s)
{
	/*
	 * Clear BUSY (and a LATE the flusher may have set meanwhile).  Pairs
	 * with the acquire load of pub in scan_ring(), which waits for BUSY
	 * rings to settle before it finishes a close, and with the seq_cst
	 * load of pub in news(): a Dekker pair with the flusher's (S), so
	 * either the wake below finds it asleep or news() sees BUSY gone.
	 */
	atomic_fetch_and_explicit(&r->pub, ~(uint64_t)JR_PUB_BITS,
				  memory_order_seq_cst);
	jitring_rings_wake(jr, true);
	if (s == JR_CLOSED) {
		/* Close is done with the ring: let go of it now. */
		jitring_thread_release(jr);
	}
	return jitring_refuse_state(jr, s);
}

/*
 * The flusher marked us LATE while we were between timestamp and commit: it
 * stopped waiting for us and may have written entries stamped after our
 * timestamp.  First turn LATE back into plain BUSY (seq_cst), then read the
 * clock: a flusher round that still saw LATE issued its fence (F) before
 * that RMW in the single total order, so its T is at most our new stamp;
 * every later round sees an ordinary BUSY ring and bounds its watermark by
 * our stamp again.  (Reading the clock while still LATE was a bug: a round
 * starting after the read but scanning before the publish left us out and
 * wrote later-stamped entries first.)  If we are marked LATE again before
 * the commit, go round again.
 */
static JR_NOINLINE void commit_late(struct jitring *jr, struct jr_ring *r,
				    uint8_t *dst, uint32_t ring_bytes,
				    uint64_t new_pub)
{
	const uint64_t busy = JR_PUB(r->tail) | JR_PUB_BUSY;
	struct jr_jumbo j;
	uint64_t ts, v;

	jitring_count(&jr->c.late_entries, 1);
	memcpy(&j, dst, sizeof(j.id));
	do {
		v = busy | JR_PUB_LATE;
		/* Pairs with the CAS that set LATE in mark_late() and with
		 * the fence (F) of every later flusher round. */
		atomic_compare_exchange_strong_explicit(&r->pub, &v, busy,
							memory_order_seq_cst,
							memory_order_relaxed);
		ts = jitring_clock_ns();
		/* Pairs with the acquire load of stamp in scan_ring(). */
		atomic_store_explicit(&r->stamp, ts, memory_order_release);
		if (j.id == JR_ID_JUMBO) {
			memcpy(&j, dst, sizeof(j));
			jitring_record_restamp((void *)(uintptr_t)j.ptr, j.len,
					       ts);
			j.timestamp = ts;
			memcpy(dst, &j, sizeof(j));
		} else {
			jitring_record_restamp(dst, ring_bytes, ts);
		}
		v = busy;
		/* (C) again: pairs with the acquire load of pub in the scan. */
	} while (!atomic_compare_exchange_strong_explicit(
		&r->pub, &v, new_pub, memory_order_seq_cst,
		memory_order_relaxed));
}

/*
 * One write's place in its ring, carried between the steps of
 * produce_body() (all inlined: this is the hot path).
 */
struct jr_slot {
	struct jr_ring *r;
	uint8_t *jumbo;      /* the group's one-off heap buffer, or NULL */
	uint8_t *dst;        /* where the group (or its jumbo reference) goes */
	uint64_t total;      /* the group's bytes */
	uint32_t ring_bytes; /* bytes it takes in the ring */
	uint32_t pos;        /* tail's offset in the buffer */
	uint32_t to_end;     /* bytes from there to the end of the buffer */
	uint32_t tail;       /* the tail the group starts at (after padding) */
};

/*
 * Step 2 (the numbers are the algorithm's, above): room for the group
 * between tail and head, before announcing anything: in the ring as it is,
 * in a larger ring the thread grows into, or after waiting (lossless) --
 * or -EAGAIN in drop mode.
 */
static inline __attribute__((always_inline)) int
slot_reserve(struct jitring *jr, struct jr_slot *sl)
{
	struct jr_ring *r = sl->r;
	uint32_t need;

	for (;;) {
		sl->tail = r->tail;
		sl->pos = sl->tail & r->mask;
		sl->to_end = r->size - sl->pos;
		need = sl->ring_bytes <= sl->to_end ?
			       sl->ring_bytes :
			       sl->to_end + sl->ring_bytes;
		if (likely(r->size - (sl->tail - r->head_cache) >= need))
			return 0;
		/* Pairs with the seq_cst store of head in publish_heads(). */
		r->head_cache =
			atomic_load_explicit(&r->head, memory_order_acquire);
		if (r->size - (sl->tail - r->head_cache) >= need)
			return 0;
		r = jitring_thread_grow(jr, r);
		if (!r)
			return wait_space(jr, sl->r, need);
		sl->r = r;
		if (sl->jumbo && sl->total <= r->size / 2) {
			/* Fits the new ring as it is. */
			free(sl->jumbo);
			sl->jumbo = NULL;
			sl->ring_bytes = (uint32_t)sl->total;
		}
	}
}

/*
 * Steps 3-4: announce the write -- BUSY (A) -- then check the writer is still
 * open (B).  Closing: back out without touching the buffer.
 */
static inline __attribute__((always_inline)) int slot_begin(struct jitring *jr,
							    struct jr_slot *sl)
{
	struct jr_ring *r = sl->r;
	uint64_t old;
	uint32_t s;

	/* (A): pairs with the seq_cst fence in the flusher's scan. */
	old = atomic_fetch_or_explicit(&r->pub, JR_PUB_BUSY,
				       memory_order_seq_cst);
	if (unlikely(old & JR_PUB_TRIM))
		trim_wait(r);
	JITRING_TESTPOINT(write_busy, r);
	/* (B): pairs with the seq_cst CAS to JR_CLOSING in jitring_close(). */
	s = atomic_load_explicit(&jr->state, memory_order_seq_cst);
	if (unlikely(s != JR_OPEN))
		return back_out(jr, r, s);
	return 0;
}

/*
 * Steps 5-7: the timestamp, published in stamp, and the group encoded in
 * place (a PAD record first if it would cross the end of the buffer).
 * Return: the code_index (0 for a move).
 */
static inline __attribute__((always_inline)) uint64_t
slot_fill(struct jitring *jr, struct jr_slot *sl, const struct jitring_group *g,
	  const struct jr_move_args *mv)
{
	struct jr_ring *r = sl->r;
	uint64_t ts = jitring_clock_ns(), code_index = 0;

	/*
	 * A lower bound for this entry that the flusher may read while we are
	 * BUSY: exact for the entry in flight, and never above it.  Release:
	 * pairs with the acquire load of stamp in scan_ring(), which reads it
	 * before pub; a flusher that sees this stamp then also sees the
	 * commit of our previous entry.
	 */
	atomic_store_explicit(&r->stamp, ts, memory_order_release);
	sl->dst = r->buf + sl->pos;
	if (sl->ring_bytes > sl->to_end) {
		/* Pad to the end of the buffer; the group starts at 0. */
		if (sl->to_end >= JR_MIN_RECORD) {
			struct jitdump_prefix pad = {
				.id = JR_ID_PAD,
				.total_size = sl->to_end,
			};

			memcpy(sl->dst, &pad, sizeof(pad));
		}
		sl->dst = r->buf;
		sl->tail += sl->to_end;
	}
	if (g) {
		code_index = r->next_id++;
		if (unlikely(code_index >= r->id_end))
			code_index = id_refill(jr, r);
		if (likely(r->id_word != NULL)) {
			r->id_bits |= 1ull << (code_index & 63);
			atomic_store_explicit(r->id_word, r->id_bits,
					      memory_order_relaxed);
		}
		jitring_record_encode(g,
				      likely(!sl->jumbo) ? sl->dst : sl->jumbo,
				      ts, r->pid, r->tid, code_index);
	} else {
		jitring_record_encode_move(sl->jumbo ? sl->jumbo : sl->dst, ts,
					   r->pid, r->tid, mv->code_index,
					   mv->old_addr, mv->new_addr,
					   mv->code_size);
	}
	if (unlikely(sl->jumbo != NULL)) {
		struct jr_jumbo j = {
			.id = JR_ID_JUMBO,
			.total_size = sizeof(j),
			.timestamp = ts,
			.ptr = (uint64_t)(uintptr_t)sl->jumbo,
			.len = sl->total,
		};

		memcpy(sl->dst, &j, sizeof(j));
	}
	return code_index;
}

/*
 * Steps 8-9: commit (C) -- the new tail and BUSY cleared in one CAS, or the
 * late path if the flusher marked us LATE -- then wake the flusher if it
 * sleeps (D), and ask for a larger ring once this one passed half full.
 */
static inline __attribute__((always_inline)) void
slot_commit(struct jitring *jr, struct jr_slot *sl)
{
	struct jr_ring *r = sl->r;
	uint32_t tail = sl->tail + sl->ring_bytes;
	uint64_t new_pub = JR_PUB(tail);
	/* Only we move the tail; the flusher only ever adds LATE. */
	uint64_t old = JR_PUB(r->tail) | JR_PUB_BUSY;

	/* (C): pairs with the acquire load of pub in the flusher's scan. */
	if (unlikely(!atomic_compare_exchange_strong_explicit(
		    &r->pub, &old, new_pub, memory_order_seq_cst,
		    memory_order_relaxed)))
		commit_late(jr, r, sl->dst, sl->ring_bytes, new_pub);
	r->tail = tail;
	/* (D): pairs with the seq_cst store of the sleep mode (flusher). */
	jitring_rings_wake(jr, tail - r->head_cache > r->size / 4);
	if (unlikely(tail - r->head_cache > r->size / 2) && !r->grow_asked)
		ask_grow(jr, r);
}

/*
 * One group (@g) or one CODE_MOVE (@mv) into the calling thread's ring.
 * Inlined into both callers so the hot path has no indirect calls.
 */
static inline __attribute__((always_inline)) int64_t
produce_body(struct jitring *jr, const struct jitring_group *g,
	     const struct jr_move_args *mv)
{
	struct jr_slot sl = { .r = jitring_tls_rings };
	uint64_t code_index;
	int ret;

	if (unlikely(!sl.r || sl.r->jr != jr)) {
		sl.r = jitring_thread_attach(jr, &ret);
		if (!sl.r)
			return ret;
	}
	if (mv) {
		ret = move_check(jr, mv->code_index);
		if (ret)
			return ret;
	}
	sl.total = g ? g->total : JR_MOVE_SIZE;
	sl.ring_bytes = (uint32_t)sl.total;
	if (unlikely(sl.total > sl.r->size / 2)) {
		/* Too big to share a ring: a one-off buffer, by reference. */
		sl.jumbo = malloc(sl.total);
		if (!sl.jumbo) {
			jitring_count(&jr->c.refused_nomem, 1);
			return -ENOMEM;
		}
		sl.ring_bytes = sizeof(struct jr_jumbo);
	}
	ret = slot_reserve(jr, &sl);
	if (likely(!ret))
		ret = slot_begin(jr, &sl);
	if (unlikely(ret)) {
		free(sl.jumbo);
		return ret;
	}
	code_index = slot_fill(jr, &sl, g, mv);
	JITRING_TESTPOINT(write_stamped, sl.r);
	slot_commit(jr, &sl);
	return (int64_t)code_index;
}

/*
 * produce_body() with the nesting guard.  A signal handler that interrupts
 * produce_body() anywhere -- before BUSY is set too, e.g. while waiting for
 * ring space, when it would otherwise encode at the same tail and have the
 * outer call overwrite its entry -- finds tls_inside set and gets -EDEADLK.
 * Only this thread and its handlers touch tls_inside: volatile plus signal
 * fences order it against the ring accesses.
 */
static inline __attribute__((always_inline)) int64_t
produce(struct jitring *jr, const struct jitring_group *g,
	const struct jr_move_args *mv)
{
	int64_t ret;

	if (unlikely(tls_inside)) {
		jitring_count(&jr->c.refused_invalid, 1);
		return -EDEADLK;
	}
	tls_inside = 1;
	atomic_signal_fence(memory_order_seq_cst); /* pairs: the one below */
	ret = produce_body(jr, g, mv);
	atomic_signal_fence(memory_order_seq_cst); /* pairs: the one above */
	tls_inside = 0;
	return ret;
}

int64_t jitring_rings_write(struct jitring *jr, const struct jitring_group *g)
{
	return produce(jr, g, NULL);
}

int jitring_rings_move(struct jitring *jr, uint64_t code_index,
		       const void *new_addr, const void *old_addr,
		       uint64_t code_size)
{
	struct jr_move_args mv = {
		.code_index = code_index,
		.new_addr = new_addr,
		.old_addr = old_addr,
		.code_size = code_size,
	};
	int64_t ret;

	ret = produce(jr, NULL, &mv);
	return ret < 0 ? (int)ret : 0;
}
