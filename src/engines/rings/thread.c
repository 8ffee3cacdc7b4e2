/* SPDX-License-Identifier: MIT */
/*
 * Rings engine: a thread and its rings.  Each (thread, writer) pair owns
 * one ring, found through a thread-local list (most recently used first),
 * so the write path (ring.c) reaches its ring with no lookup beyond it.
 *
 * A thread's first write (jitring_thread_attach()) takes a ready ring from
 * the pool the flusher keeps filled (pool.c), or, when a burst emptied it,
 * takes a spare ring or makes one, and pushes it onto the flusher's attach
 * stack; a thread whose ring keeps filling trades it for a larger one
 * (jitring_thread_grow()), normally the successor the flusher made ahead.
 * Both run inside jitring_enter(), so close cannot free the engine
 * meanwhile.
 *
 * Invariants:
 *  - a ring is on exactly one thread's list while it is ACTIVE; only that
 *    thread writes into it (single producer);
 *  - a thread lets go of a ring (detach, exit through the TLS destructor,
 *    or the growth switch) with one CAS, ACTIVE -> DETACHED, after which it
 *    never touches the ring again; if close's CAS to ORPHAN won instead,
 *    the thread frees the control block and nothing else (close has the
 *    buffer, see pool.c): when it next calls that writer, detaches or
 *    exits, or at its next attach to any writer (drop_orphans()), so a
 *    thread that outlives writer after writer holds none of theirs;
 *  - a ring the thread made itself (or took as a spare) is reachable from
 *    the attach stack before the thread's first timestamp on it: the push
 *    (release CAS) is followed by a seq_cst fence, paired with the
 *    flusher's fence (F), so a round either registers it or sees only
 *    later stamps from it;
 *  - no ring is ever reachable from nowhere across a fork: the making
 *    thread read-holds make_lock from the allocation (or the spare's
 *    dequeue) to the push, and fork() takes the write side.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "pool.h"
#include "rings.h"
#include "rings_internal.h"
#include "thread.h"

__thread struct jr_ring *jitring_tls_rings
	__attribute__((tls_model("initial-exec")));
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_destructor(void *arg)
{
	(void)arg;
	jitring_thread_release(NULL);
}

static void tls_key_init(void)
{
	pthread_key_create(&tls_key, tls_destructor);
}

static void ring_release(struct jr_ring *r)
{
	struct jitring *jr = r->jr;
	uint32_t own = JR_OWN_ACTIVE;

	/*
	 * Pairs with the acquire load of own in the flusher's scan (it then
	 * sees all we committed) and with the CAS to ORPHAN in
	 * jitring_pool_release(): exactly one of the two wins.
	 */
	if (atomic_compare_exchange_strong_explicit(
		    &r->own, &own, JR_OWN_DETACHED, memory_order_acq_rel,
		    memory_order_acquire)) {
		atomic_fetch_sub_explicit(&jr->c.threads_attached, 1,
					  memory_order_relaxed);
		jitring_rings_nudge(jr);
		return;
	}
	/*
	 * ORPHAN: close won and took the buffer (it unmaps it, and never
	 * touches the control block again); the control block is ours.
	 * r->buf may already be unmapped, and its address reused: never
	 * touch it.
	 */
	jitring_ring_ctl_free(r);
}

/*
 * Free the control blocks that closed writers left on the calling thread's
 * list (ORPHAN: close took the buffer).  Nothing else ever frees them, and
 * a spare's block pins its whole slab, so a thread that outlives writer
 * after writer would keep one per writer it wrote to.  Called where the
 * thread attaches to a writer it holds no ring of (a thread writing to a
 * new writer always does), not on the write path: the list holds at most
 * one such block per writer the thread wrote to since its last attach.
 */
static void drop_orphans(void)
{
	struct jr_ring **pp = &jitring_tls_rings, *r;

	while ((r = *pp)) {
		/*
		 * Pairs with the acq_rel CAS to ORPHAN in
		 * jitring_pool_release(): close is done with the block (it
		 * reads nothing of it after the CAS).
		 */
		if (atomic_load_explicit(&r->own, memory_order_acquire) !=
		    JR_OWN_ORPHAN) {
			pp = &r->tls_next;
			continue;
		}
		*pp = r->tls_next;
		jitring_ring_ctl_free(r);
	}
}

/* Detach the calling thread's rings of @jr (NULL: all).  Returns count. */
int jitring_thread_release(struct jitring *jr)
{
	struct jr_ring **pp = &jitring_tls_rings, *r;
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

int jitring_rings_thread_detach(struct jitring *jr)
{
	return jitring_thread_release(jr);
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
void jitring_thread_make_lock_init(struct jr_rings *e)
{
	pthread_rwlockattr_t a;

	pthread_rwlockattr_init(&a);
	pthread_rwlockattr_setkind_np(
		&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&e->make_lock, &a);
	pthread_rwlockattr_destroy(&a);
}

/*
 * A ring for a producer to push to the attach stack itself, make_lock
 * read-held on success: push it (ring_push_attach()) and then call
 * make_done().  A spare ring of @sp if there is one (*@spare says
 * whether it was), else one of @size made now.
 */
static struct jr_ring *make_ring(struct jr_rings *e, uint32_t size,
				 struct jr_spares *sp, bool *spare)
{
	struct jr_ring *r = NULL;

	pthread_rwlock_rdlock(&e->make_lock);
	if (sp)
		r = jitring_spare_take(e, sp);
	*spare = r != NULL;
	if (!r)
		r = jitring_ring_alloc(e, size, 0);
	if (!r) {
		pthread_rwlock_unlock(&e->make_lock);
		return NULL;
	}
	JITRING_TESTPOINT(ring_made, r);
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
 * runnable ones).  So the thread takes a spare ring (cold: its first write
 * faults one page in, but no system call) or, when those ran out too,
 * makes its own: the "refill a producer had to wait for" case, counted in
 * refills_waited.  *@made says the ring must be pushed to the attach
 * stack.
 */
static struct jr_ring *ring_get(struct jitring *jr, struct jr_rings *e,
				bool *made, int *err)
{
	struct jr_ring *r;
	uint32_t gen;
	bool spare;

	*made = false;
	for (int tries = 0;; tries++) {
		/* Pairs with the release increment in jitring_pool_maintain(). */
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
			/* The demand the flusher sizes the pool by. */
			atomic_fetch_add_explicit(&e->pool_taken, 1,
						  memory_order_relaxed);
			/*
			 * Wake the flusher only when the pool is about to run
			 * dry (under a quarter of its mark): past it threads
			 * take cold spares.  Above it a napping flusher refills
			 * within max_delay_ms, and a sleeping one is woken by
			 * our first commit anyway.  A wake costs its caller a
			 * FUTEX_WAKE of an idle CPU (3-19 us in a VM): when
			 * every take below the mark woke it, a 64-thread storm
			 * paid 2-47 of them.
			 */
			if (4 * (uint64_t)ck_ring_size(&e->pool) <
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
			atomic_fetch_add_explicit(&e->pool_missed, 1,
						  memory_order_relaxed);
			atomic_store_explicit(&e->pool_want, 1,
					      memory_order_seq_cst);
			jitring_rings_wake(jr, true);
			r = make_ring(e, jr->ring_min, &e->spare, &spare);
			if (r) {
				/* A spare was made ahead, as a pooled ring. */
				jitring_count(spare ? &jr->c.refills_ahead :
						      &jr->c.refills_waited,
					      1);
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
	struct jr_ring *head =
		atomic_load_explicit(&e->attach, memory_order_relaxed);

	do {
		r->attach_next = head;
	} while (!atomic_compare_exchange_weak_explicit(&e->attach, &head, r,
							memory_order_release,
							memory_order_relaxed));
	atomic_thread_fence(memory_order_seq_cst);
}

struct jr_ring *jitring_thread_attach(struct jitring *jr, int *err)
{
	struct jr_ring **pp, *r;
	struct jr_rings *e;
	bool made = false, wake = false, entered;
	uint32_t s;

	/* A ring of ours further down the list: move it to the front. */
	for (pp = &jitring_tls_rings; (r = *pp); pp = &r->tls_next) {
		if (r->jr == jr) {
			*pp = r->tls_next;
			r->tls_next = jitring_tls_rings;
			jitring_tls_rings = r;
			return r;
		}
	}
	drop_orphans();

	s = jitring_enter(jr);
	/* Whatever the restart below ends in, we hold a user count. */
	entered = s < JR_CLOSING;
	if (s == JR_FORKED)
		s = jitring_rings_restart(jr);
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
		r->tls_next = jitring_tls_rings;
		jitring_tls_rings = r;
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
	for (pp = &jitring_tls_rings; *pp != r; pp = &(*pp)->tls_next)
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
 * switch costs no system call.  If it is not there yet (a storm's thread
 * fills its first ring before the flusher runs), a first ring trades for
 * a spare successor (no system call either; a page fault); a larger ring,
 * or one when those are out, for one the thread makes itself
 * (rings_grown_waited).  Either goes to the attach stack.  Runs
 * inside jitring_enter() so close cannot free the rings meanwhile.
 * Return: the new ring, or NULL (no growth: wait instead).
 */
struct jr_ring *jitring_thread_grow(struct jitring *jr, struct jr_ring *r)
{
	struct jr_rings *e;
	struct jr_ring *n;
	bool spare;
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
	n = atomic_exchange_explicit(&r->next_ring, NULL, memory_order_acquire);
	if (n) {
		ring_switch(jr, r, n);
	} else if (r->size * 2 <= jitring_ring_target(e) &&
		   (n = make_ring(e, r->size * 2,
				  r->size * 2 == e->grow.size ? &e->grow : NULL,
				  &spare))) {
		/* Before the switch: the attach push fences. */
		ring_push_attach(e, n);
		make_done(e);
		ring_switch(jr, r, n);
		/* A spare successor was made ahead, as next_ring is. */
		if (!spare)
			jitring_count(&jr->c.rings_grown_waited, 1);
	}
	jitring_exit(jr);
	if (n)
		jitring_rings_wake(jr, true);
	return n;
}

void jitring_thread_fork_child(struct jitring *jr)
{
	struct jr_ring **pp, *r;

	/* The forking thread's rings of this writer are the parent's. */
	for (pp = &jitring_tls_rings; (r = *pp);) {
		if (r->jr == jr)
			*pp = r->tls_next;
		else
			pp = &r->tls_next;
	}
}
