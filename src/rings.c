/* SPDX-License-Identifier: MIT */
/*
 * Rings engine, producer side: jitring_write() on a JIT thread, thread
 * attach/detach, flush requests, close and fork.
 *
 * Algorithm.  Each (thread, writer) pair owns one struct jr_ring, a
 * single-producer single-consumer byte ring holding encoded jitdump groups
 * exactly as they will appear in the file.  The producer (the thread) owns
 * the tail, the consumer (the flusher) the head.  A write:
 *
 *   1. finds its ring through a thread-local list (first write: takes a
 *      ready ring from the pool, or makes one if the pool is empty and
 *      pushes it to the flusher's attach stack, see ring_get());
 *   2. makes sure the group fits between tail and head (waiting, or -EAGAIN
 *      in drop mode, if not) -- before announcing anything;
 *   3. sets BUSY in pub with a seq_cst RMW                           (A)
 *   4. re-reads the writer state (seq_cst); closing -> back out        (B)
 *   5. reads CLOCK_MONOTONIC: the group's timestamp, and publishes it in
 *      stamp (relaxed) as the bound the flusher may use while we are BUSY;
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
 * Memory: a ring's control block is freed by exactly one party, decided by
 * a CAS on own: the thread (detach/exit) turns ACTIVE into DETACHED and the
 * flusher recycles the ring once drained; close turns ACTIVE into ORPHAN
 * and the thread frees the block when it next notices.  The handle itself
 * is never freed, so a thread that still lists a closed writer's ring reads
 * a valid state word first.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "futex.h"
#include "record.h"
#include "rings.h"
#include "testpoint.h"

#define JR_POOL_CAP 1024u
#define JR_POOL_LOW_INIT 8u

/* The calling thread's rings, most recently used first. */
static __thread struct jr_ring *tls_rings
	__attribute__((tls_model("initial-exec")));
/* Set while this thread is inside produce(); see there. */
static __thread volatile sig_atomic_t tls_inside
	__attribute__((tls_model("initial-exec")));
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void detach_matching(struct jitring *jr);

static void tls_destructor(void *arg)
{
	(void)arg;
	detach_matching(NULL);
}

static void tls_key_init(void)
{
	pthread_key_create(&tls_key, tls_destructor);
}

/* ------------------------------------------------------------------ */
/* Waking the flusher.                                                  */

void jitring_rings_wake_slow(struct jitring *jr, uint32_t s)
{
	/* Only the waker that moves the word pays for the system call. */
	if (atomic_compare_exchange_strong_explicit(&jr->sleep, &s, JR_AWAKE,
						    memory_order_relaxed,
						    memory_order_relaxed))
		jr_futex_wake(&jr->sleep, 1);
}

void jitring_rings_kick(struct jitring *jr)
{
	jitring_rings_wake(jr, true);
}

/* ------------------------------------------------------------------ */
/* Attach and detach.                                                   */

static void ring_release(struct jr_ring *r)
{
	struct jitring *jr = r->jr;
	uint32_t own = JR_OWN_ACTIVE;

	/*
	 * Pairs with the acquire load of own in the flusher's scan (it then
	 * sees all we committed) and with the CAS to ORPHAN in
	 * jitring_flusher_release_rings(): exactly one of the two wins.
	 */
	if (atomic_compare_exchange_strong_explicit(&r->own, &own,
						    JR_OWN_DETACHED,
						    memory_order_acq_rel,
						    memory_order_acquire)) {
		atomic_fetch_sub_explicit(&jr->c.threads_attached, 1,
					  memory_order_relaxed);
		jitring_rings_wake(jr, false);
		return;
	}
	/*
	 * ORPHAN: close won and took the buffer (it unmaps it, and never
	 * touches the control block again); the control block is ours.
	 * r->buf may already be unmapped, and its address reused: never
	 * touch it.
	 */
	free(r);
}

/* Detach the calling thread's rings of @jr (NULL: all).  Returns count. */
static int detach_list(struct jitring *jr)
{
	struct jr_ring **pp = &tls_rings, *r;
	int n = 0;

	while ((r = *pp)) {
		if (jr && r->jr != jr) {
			pp = &r->tls_next;
			continue;
		}
		*pp = r->tls_next;
		ring_release(r);
		n++;
	}
	return n;
}

static void detach_matching(struct jitring *jr)
{
	detach_list(jr);
}

int jitring_rings_thread_detach(struct jitring *jr)
{
	return detach_list(jr);
}

/*
 * A producer makes a ring itself (pool empty, or growth without a ready
 * successor) and pushes it to the attach stack.  Between the two the ring
 * is reachable only from the producer's locals, so a fork() in that window
 * would leak it in the child; the read side of make_lock spans the window
 * and fork takes the write side.  Writer-preferring, so a storm of new
 * threads cannot hold a fork off; a producer never takes it twice (nested
 * calls from signal handlers are refused before they get here).
 */
static void make_lock_init(struct jr_rings *e)
{
	pthread_rwlockattr_t a;

	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(
		&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&e->make_lock, &a);
	pthread_rwlockattr_destroy(&a);
}

/* A ring made by a producer, make_lock read-held on success: push it to
 * the attach stack (ring_push_attach()) and then call make_done(). */
static struct jr_ring *make_ring(struct jr_rings *e, uint32_t size)
{
	struct jr_ring *r;

	pthread_rwlock_rdlock(&e->make_lock);
	r = jitring_ring_alloc(e, size, 0);
	if (!r)
		pthread_rwlock_unlock(&e->make_lock);
	return r;
}

static void make_done(struct jr_rings *e)
{
	pthread_rwlock_unlock(&e->make_lock);
}

/*
 * Take a ready ring.  The flusher keeps the pool above its low-water mark;
 * in a burst of new threads it may fall behind, and a thread that then
 * waited for it could wait long (the flusher is one thread among many
 * runnable ones).  So the thread makes its own ring instead: the "refill a
 * producer had to wait for" case, counted in refills_waited.  *@made says
 * the ring is new and must be pushed to the attach stack.
 */
static struct jr_ring *ring_get(struct jitring *jr, struct jr_rings *e,
				bool *made, int *err)
{
	struct jr_ring *r;
	uint32_t gen;

	*made = false;
	for (int tries = 0;; tries++) {
		/* Pairs with the release increment in pool_maintain(). */
		gen = atomic_load_explicit(&e->pool_gen, memory_order_acquire);
		if (!JITRING_FAULT(pool_empty, jr) &&
		    ck_ring_dequeue_spmc(&e->pool, e->pool_buf, &r)) {
			/*
			 * Pairs with the release store of own (POOLED) before
			 * the flusher enqueued r: TSan cannot see ck_ring's
			 * own ordering, this makes the hand-off visible.
			 */
			(void)atomic_load_explicit(&r->own,
						   memory_order_acquire);
			if (ck_ring_size(&e->pool) <
			    atomic_load_explicit(&e->pool_low,
						 memory_order_relaxed)) {
				/* Dekker with the flusher's sleep. */
				atomic_store_explicit(&e->pool_want, 1,
						      memory_order_seq_cst);
				jitring_rings_wake(jr, true);
			}
			return r;
		}
		if (tries == 0) {
			jitring_count(&jr->c.refills_waited, 1);
			atomic_fetch_add_explicit(&e->pool_missed, 1,
						  memory_order_relaxed);
			atomic_store_explicit(&e->pool_want, 1,
					      memory_order_seq_cst);
			jitring_rings_wake(jr, true);
			r = make_ring(e, jr->ring_min);
			if (r) {
				*made = true;
				return r;
			}
		}
		if (tries > 0) {
			/* Out of budget even after the flusher's round. */
			jitring_count(&jr->c.refused_nomem, 1);
			*err = -ENOMEM;
			return NULL;
		}
		/*
		 * Out of budget: rings of threads that left come back to the
		 * pool after the flusher's next round; wait for it once.
		 */
		struct timespec rel = jitring_clock_rel(50 * 1000000u);
		jr_futex_wait(&e->pool_gen, gen, &rel);
	}
}

/*
 * Hand a ring we made to the flusher: a lock-free push (release), then a
 * seq_cst fence before our first timestamp.  Pairs with the flusher's fence
 * (F) and its exchange of the stack: either it takes the ring this round,
 * or every timestamp we take is after that round's T (docs/design.md).
 */
static void ring_push_attach(struct jr_rings *e, struct jr_ring *r)
{
	struct jr_ring *head = atomic_load_explicit(&e->attach,
						    memory_order_relaxed);

	do {
		r->attach_next = head;
	} while (!atomic_compare_exchange_weak_explicit(
		&e->attach, &head, r, memory_order_release,
		memory_order_relaxed));
	atomic_thread_fence(memory_order_seq_cst);
}

static int restart_after_fork(struct jitring *jr);

static JR_NOINLINE struct jr_ring *ring_attach(struct jitring *jr, int *err)
{
	struct jr_ring **pp, *r;
	struct jr_rings *e;
	bool made = false, wake = false, entered;
	uint32_t s;

	/* A ring of ours further down the list: move it to the front. */
	for (pp = &tls_rings; (r = *pp); pp = &r->tls_next) {
		if (r->jr == jr) {
			*pp = r->tls_next;
			r->tls_next = tls_rings;
			tls_rings = r;
			return r;
		}
	}

	s = jitring_enter(jr);
	/* Whatever the restart below ends in, we hold a user count. */
	entered = s < JR_CLOSING;
	if (s == JR_FORKED)
		s = restart_after_fork(jr);
	if (s != JR_OPEN) {
		if (entered)
			jitring_exit(jr);
		*err = jitring_refuse_state(jr, s);
		return NULL;
	}
	e = jr->eng;
	r = ring_get(jr, e, &made, err);
	if (r) {
		r->jr = jr;
		r->pid = e->pid;
		r->tid = (uint32_t)syscall(SYS_gettid);
		r->next_id = r->id_end = 0;
		/* Pairs with the acquire load of own in the flusher's scan. */
		atomic_store_explicit(&r->own, JR_OWN_ACTIVE,
				      memory_order_release);
		if (made) {
			wake = true;
			ring_push_attach(e, r);
			make_done(e);
		}
		r->tls_next = tls_rings;
		tls_rings = r;
		pthread_once(&tls_once, tls_key_init);
		pthread_setspecific(tls_key, (void *)1);
		jitring_count(&jr->c.threads_attached, 1);
		jitring_count(&jr->c.threads_total, 1);
	}
	jitring_exit(jr);
	if (wake)
		jitring_rings_wake(jr, true);
	return r;
}

/* ------------------------------------------------------------------ */
/* The write path.                                                      */

/* Move the owner's state from @r to @n and let @r go (the flusher drains
 * and recycles it).  Our entries stay in order across the two rings
 * because their timestamps increase; the code_index block moves along. */
static void ring_switch(struct jitring *jr, struct jr_ring *r,
			struct jr_ring *n)
{
	struct jr_ring **pp;

	n->jr = jr;
	n->pid = r->pid;
	n->tid = r->tid;
	n->next_id = r->next_id;
	n->id_end = r->id_end;
	n->id_word = r->id_word;
	n->id_bits = r->id_bits;
	/* Pairs with the acquire load of own in the flusher. */
	atomic_store_explicit(&n->own, JR_OWN_ACTIVE, memory_order_release);
	for (pp = &tls_rings; *pp != r; pp = &(*pp)->tls_next)
		;
	n->tls_next = r->tls_next;
	*pp = n;
	jitring_count(&jr->c.threads_attached, 1);
	jitring_count(&jr->c.rings_grown, 1);
	ring_release(r);
}

/*
 * The ring is full: trade it for one twice as large if the thread's share
 * of the growth budget allows (jitring_ring_target()).  Normally the
 * flusher has the larger ring ready in next_ring, asked for when the ring
 * passed half full (ask_grow()), already registered and pre-faulted: the
 * switch costs no system call.  If it is not there yet the thread makes
 * one itself (refills_waited) and pushes it to the attach stack.  Runs
 * inside jitring_enter() so close cannot free the rings meanwhile.
 * Return: the new ring, or NULL (no growth: wait instead).
 */
static JR_NOINLINE struct jr_ring *grow_ring(struct jitring *jr,
					     struct jr_ring *r)
{
	struct jr_rings *e;
	struct jr_ring *n;
	uint32_t s;

	if (jr->ring_min == jr->ring_max || r->size >= jr->ring_max)
		return NULL;
	s = jitring_enter(jr);
	if (s != JR_OPEN) {
		if (s < JR_CLOSING)
			jitring_exit(jr);
		return NULL;
	}
	e = jr->eng;
	/* Pairs with the release store of next_ring in provide_growth(). */
	n = atomic_exchange_explicit(&r->next_ring, NULL,
				     memory_order_acquire);
	if (n) {
		ring_switch(jr, r, n);
	} else if (r->size * 2 <= jitring_ring_target(e) &&
		   (n = make_ring(e, r->size * 2))) {
		/* Before the switch: the attach push fences. */
		ring_push_attach(e, n);
		make_done(e);
		ring_switch(jr, r, n);
		jitring_count(&jr->c.refills_waited, 1);
	}
	jitring_exit(jr);
	if (n)
		jitring_rings_wake(jr, true);
	return n;
}

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
 * failure.
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
		uint32_t s = atomic_load_explicit(&jr->state,
						  memory_order_acquire);
		uint32_t h;

		if (s != JR_OPEN)
			return jitring_refuse_state(jr, s);
		if (spins < 100) {
			jr_cpu_relax();
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
	r->id_word = chunk ? &chunk[(start >> 6) & (JR_IDMAP_WORDS - 1)] :
			     NULL;
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
	       (atomic_load_explicit(&chunk[(id >> 6) &
					    (JR_IDMAP_WORDS - 1)],
				     memory_order_relaxed) >>
		(id & 63)) & 1;
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
	for (unsigned spins = 0; atomic_load_explicit(&r->pub,
						      memory_order_acquire) &
				 JR_PUB_TRIM;
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
	 * with the acquire load of pub in the flusher, which waits for BUSY
	 * rings to settle before it finishes a close.
	 */
	atomic_fetch_and_explicit(&r->pub, ~(uint64_t)JR_PUB_BITS,
				  memory_order_seq_cst);
	jitring_rings_wake(jr, true);
	if (s == JR_CLOSED) {
		/* Close is done with the ring: let go of it now. */
		detach_list(jr);
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
		/* Pairs with the acquire load of stamp in round_run(). */
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

struct jr_move_args {
	uint64_t code_index;
	const void *new_addr;
	const void *old_addr;
	uint64_t code_size;
};

/*
 * One group (@g) or one CODE_MOVE (@mv) into the calling thread's ring.
 * Inlined into both callers so the hot path has no indirect calls.
 */
static inline __attribute__((always_inline)) int64_t
produce_body(struct jitring *jr, const struct jitring_group *g,
	     const struct jr_move_args *mv)
{
	struct jr_ring *r = tls_rings;
	uint32_t ring_bytes, pos, to_end, need, tail, s;
	uint64_t total, old, ts, code_index = 0, new_pub;
	uint8_t *dst, *jumbo = NULL;
	int ret;

	if (unlikely(!r || r->jr != jr)) {
		r = ring_attach(jr, &ret);
		if (!r)
			return ret;
	}
	if (mv) {
		ret = move_check(jr, mv->code_index);
		if (ret)
			return ret;
	}
	total = g ? g->total : JR_MOVE_SIZE;
	ring_bytes = (uint32_t)total;
	if (unlikely(total > r->size / 2)) {
		/* Too big to share a ring: a one-off buffer, by reference. */
		jumbo = malloc(total);
		if (!jumbo) {
			jitring_count(&jr->c.refused_nomem, 1);
			return -ENOMEM;
		}
		ring_bytes = sizeof(struct jr_jumbo);
	}
again:
	tail = r->tail;
	pos = tail & r->mask;
	to_end = r->size - pos;
	need = ring_bytes <= to_end ? ring_bytes : to_end + ring_bytes;
	if (unlikely(r->size - (tail - r->head_cache) < need)) {
		struct jr_ring *n = NULL;

		/* Pairs with the seq_cst store of head in publish_heads(). */
		r->head_cache = atomic_load_explicit(&r->head,
						     memory_order_acquire);
		if (r->size - (tail - r->head_cache) < need &&
		    (n = grow_ring(jr, r))) {
			r = n;
			if (jumbo && total <= r->size / 2) {
				/* Fits the new ring as it is. */
				free(jumbo);
				jumbo = NULL;
				ring_bytes = (uint32_t)total;
			}
			goto again;
		}
		ret = wait_space(jr, r, need);
		if (ret)
			goto err;
	}

	/* (A): pairs with the seq_cst fence in the flusher's scan. */
	old = atomic_fetch_or_explicit(&r->pub, JR_PUB_BUSY,
				       memory_order_seq_cst);
	if (unlikely(old & JR_PUB_TRIM))
		trim_wait(r);
	/* (B): pairs with the seq_cst CAS to JR_CLOSING in jitring_close(). */
	s = atomic_load_explicit(&jr->state, memory_order_seq_cst);
	if (unlikely(s != JR_OPEN)) {
		ret = back_out(jr, r, s);
		goto err;
	}

	ts = jitring_clock_ns();
	/*
	 * A lower bound for this entry that the flusher may read while we are
	 * BUSY: exact for the entry in flight, and never above it.  Release:
	 * pairs with the acquire load of stamp in round_run(), which reads it
	 * before pub; a flusher that sees this stamp then also sees the
	 * commit of our previous entry.
	 */
	atomic_store_explicit(&r->stamp, ts, memory_order_release);
	dst = r->buf + pos;
	if (ring_bytes > to_end) {
		/* Pad to the end of the buffer; the group starts at 0. */
		if (to_end >= JR_MIN_RECORD) {
			struct jitdump_prefix pad = {
				.id = JR_ID_PAD,
				.total_size = to_end,
			};

			memcpy(dst, &pad, sizeof(pad));
		}
		dst = r->buf;
		tail += to_end;
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
		if (likely(!jumbo))
			jitring_record_encode(g, dst, ts, r->pid, r->tid,
					      code_index);
		else
			jitring_record_encode(g, jumbo, ts, r->pid, r->tid,
					      code_index);
	} else {
		jitring_record_encode_move(jumbo ? jumbo : dst, ts, r->pid,
					   r->tid, mv->code_index,
					   mv->old_addr, mv->new_addr,
					   mv->code_size);
	}
	if (unlikely(jumbo != NULL)) {
		struct jr_jumbo j = {
			.id = JR_ID_JUMBO,
			.total_size = sizeof(j),
			.timestamp = ts,
			.ptr = (uint64_t)(uintptr_t)jumbo,
			.len = total,
		};

		memcpy(dst, &j, sizeof(j));
	}
	JITRING_TESTPOINT(write_stamped, r);

	tail += ring_bytes;
	new_pub = JR_PUB(tail);
	/* Only we move the tail; the flusher only ever adds LATE. */
	old = JR_PUB(r->tail) | JR_PUB_BUSY;
	/* (C): pairs with the acquire load of pub in the flusher's scan. */
	if (unlikely(!atomic_compare_exchange_strong_explicit(
		    &r->pub, &old, new_pub, memory_order_seq_cst,
		    memory_order_relaxed)))
		commit_late(jr, r, dst, ring_bytes, new_pub);
	r->tail = tail;
	/* (D): pairs with the seq_cst store of the sleep mode (flusher). */
	jitring_rings_wake(jr, tail - r->head_cache > r->size / 4);
	if (unlikely(tail - r->head_cache > r->size / 2) && !r->grow_asked)
		ask_grow(jr, r);
	return (int64_t)code_index;

err:
	free(jumbo);
	return ret;
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

/* ------------------------------------------------------------------ */
/* Flush, start, stop.                                                  */

int jitring_rings_flush(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;
	uint64_t t;

	if (!e->running)
		return 0;
	/* Pairs with the acquire load of flush_req in the flusher's round. */
	t = atomic_fetch_add_explicit(&e->flush_req, 1, memory_order_seq_cst) +
	    1;
	jitring_rings_wake(jr, true);
	for (;;) {
		struct timespec rel = jitring_clock_rel(100 * 1000000u);
		uint32_t seq;

		/* Pairs with the release increment of flush_seq. */
		seq = atomic_load_explicit(&e->flush_seq, memory_order_acquire);
		/* Pairs with the release store of flush_done. */
		if (atomic_load_explicit(&e->flush_done,
					 memory_order_acquire) >= t)
			return 0;
		jr_futex_wait(&e->flush_seq, seq, &rel);
	}
}

static int start_thread(struct jr_rings *e)
{
	sigset_t all, old;
	int ret;

	/* The flusher must never run the runtime's signal handlers. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&e->thread, NULL, jitring_flusher_main, e);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		return -ret;
	e->running = true;
	return 0;
}

int jitring_rings_start(struct jitring *jr)
{
	struct jr_rings *e = calloc(1, sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	e->jr = jr;
	e->pid = jr->file.pid;
	e->pool_cap = JR_POOL_CAP;
	e->pool_buf = calloc(e->pool_cap, sizeof(*e->pool_buf));
	if (!e->pool_buf) {
		ret = -ENOMEM;
		goto err_free;
	}
	ck_ring_init(&e->pool, e->pool_cap);
	atomic_init(&e->pool_low, JR_POOL_LOW_INIT);
	pthread_mutex_init(&e->fork_lock, NULL);
	make_lock_init(e);
	/* A continued dump (see jitring_open()) goes on after its end. */
	e->file_off = jr->file.start;
	jr->eng = e;
	ret = jitring_flusher_init(e);
	if (ret)
		goto err_free;
	/* The first threads find rings ready, not an empty pool. */
	ret = jitring_flusher_prefill(e);
	if (ret)
		goto err_fini;
	ret = start_thread(e);
	if (ret)
		goto err_fini;
	return 0;

err_fini:
	jitring_flusher_release_rings(e, false);
	jitring_flusher_fini(e);
	jitring_idmap_free(e);
err_free:
	jr->eng = NULL;
	free(e->pool_buf);
	free(e);
	return ret;
}

/*
 * First call in a fork child: start a flusher for the child's file.  Runs
 * inside jitring_enter(), so close (which holds jr->lock while it waits for
 * users) cannot be waited on here: serialise on fork_lock instead.  The
 * state moves FORKED -> OPEN (or FAILED) by a CAS under that lock, so a
 * racing close wins or loses cleanly, and a thread that queued behind a
 * failed restart finds FAILED and does not try again (a second attempt
 * used to leak the first one's state and start a flusher for a failed
 * writer).
 * Return: the state after the attempt.
 */
static int restart_after_fork(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;
	uint32_t s;
	int ret = 0;

	JITRING_TESTPOINT(fork_restart_enter, jr);
	pthread_mutex_lock(&e->fork_lock);
	/* Pairs with the seq_cst CASes on state here and in close. */
	s = atomic_load_explicit(&jr->state, memory_order_seq_cst);
	if (s == JR_FORKED && !e->running) {
		e->pid = jr->file.pid;
		ret = jitring_flusher_init(e);
		if (!ret)
			ret = JITRING_FAULT(fork_restart, jr) ? -ENOMEM :
			      jitring_flusher_prefill(e);
		if (!ret)
			ret = start_thread(e);
	}
	JITRING_TESTPOINT(fork_restart, jr);
	if (s == JR_FORKED) {
		if (ret) {
			int32_t none = 0;

			atomic_compare_exchange_strong_explicit(
				&jr->io_error, &none, ret,
				memory_order_relaxed, memory_order_relaxed);
			jitring_log(jr, JITRING_LOG_ERR,
				    "restart after fork: %s", strerror(-ret));
		}
		/*
		 * Release for io_error (read after FAILED is seen, see
		 * jitring_refuse_state()); seq_cst pairs with the loads of
		 * state in jitring_enter() and (B).  A racing close's CAS to
		 * CLOSING wins over ours.
		 */
		atomic_compare_exchange_strong_explicit(
			&jr->state, &s, ret ? JR_FAILED : JR_OPEN,
			memory_order_seq_cst, memory_order_relaxed);
		s = atomic_load_explicit(&jr->state, memory_order_seq_cst);
	}
	pthread_mutex_unlock(&e->fork_lock);
	return s;
}

int jitring_rings_stop(struct jitring *jr, bool forked)
{
	struct jr_rings *e = jr->eng;
	if (e->running) {
		/* Pairs with the acquire load of stop in the flusher. */
		atomic_store_explicit(&e->stop, 1, memory_order_seq_cst);
		jitring_rings_kick(jr);
		pthread_join(e->thread, NULL);
		e->running = false;
	} else if (forked) {
		/* A child that never wrote: nothing buffered, maybe CLOSE. */
		jitring_flusher_write_close(e);
	}
	jitring_flusher_release_rings(e, false);
	jitring_flusher_fini(e);
	jitring_idmap_free(e);
	free(e->pool_buf);
	free(e);
	jr->eng = NULL;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Fork.                                                                */

/* Hold the flusher between rounds so the child inherits a consistent
 * registry and pool. */
void jitring_rings_fork_prepare(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;

	if (e) {
		pthread_mutex_lock(&e->fork_lock);
		pthread_rwlock_wrlock(&e->make_lock);
	}
}

void jitring_rings_fork_parent(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;

	if (e) {
		pthread_rwlock_unlock(&e->make_lock);
		pthread_mutex_unlock(&e->fork_lock);
	}
}

void jitring_rings_fork_child(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;
	struct jr_ring **pp, *r;

	/* The forking thread's rings of this writer are the parent's. */
	for (pp = &tls_rings; (r = *pp);) {
		if (r->jr == jr)
			*pp = r->tls_next;
		else
			pp = &r->tls_next;
	}
	if (!e)
		return;
	pthread_mutex_init(&e->fork_lock, NULL);
	make_lock_init(e);
	/* No flusher in the child; everything buffered is the parent's. */
	e->running = false;
	jitring_flusher_release_rings(e, true);
	jitring_flusher_fini(e);
	/* The child's file has none of the parent's loads to move. */
	jitring_idmap_free(e);
	ck_ring_init(&e->pool, e->pool_cap);
	atomic_store_explicit(&e->pool_want, 0, memory_order_relaxed);
	atomic_store_explicit(&e->pool_missed, 0, memory_order_relaxed);
	atomic_store_explicit(&e->attach, NULL, memory_order_relaxed);
	e->attach_pending = NULL;
	atomic_store_explicit(&e->pool_full, 0, memory_order_relaxed);
	atomic_store_explicit(&e->flush_req, 0, memory_order_relaxed);
	atomic_store_explicit(&e->flush_done, 0, memory_order_relaxed);
	atomic_store_explicit(&e->stop, 0, memory_order_relaxed);
	atomic_store_explicit(&jr->sleep, JR_AWAKE, memory_order_relaxed);
	e->file_off = sizeof(struct jitdump_header);
	e->flush_ticket = 0;
	e->req_seen = 0;
	e->stop_seen = false;
	e->failed = false;
}
