/* SPDX-License-Identifier: MIT */
/*
 * Rings engine: the ring pool, the spare rings, the registry of every
 * ring, the memory budget and the code_index map.  Everything here but
 * jitring_ring_alloc(), jitring_ring_target(), jitring_spare_take() and
 * jitring_idmap_chunk() runs on the flusher (or on a thread that holds the
 * engine exclusively: start, close, the fork child), so the registry and
 * the pool's bookkeeping need no lock.
 *
 * Ownership of a ring (struct jr_ring.own, see rings_types.h):
 *   POOLED   in the pool, the flusher's; a registering thread dequeues it
 *            (ck_ring SPMC: the flusher enqueues, threads dequeue) and
 *            stores ACTIVE (release) before its first write.  A spare
 *            ring is not yet a ring: an untouched control block in a
 *            slab, dequeued the same way from its own ck_ring, set up by
 *            the thread and pushed to the attach stack like a ring the
 *            thread made;
 *   ACTIVE   a thread's; it lets go with a CAS to DETACHED (thread.c), and
 *            the flusher recycles the ring once drained: back to POOLED,
 *            its positions moved on to the next lap and its pages but the
 *            first dropped (ring_rewind()), so a pooled ring costs one
 *            resident page however often it is reused;
 *   ORPHAN   close won the CAS instead: close owns the buffer (unmaps it
 *            here, reading buf and size before the CAS and nothing after
 *            it), the thread owns the control block (frees it later);
 *   NEXT     a larger successor the flusher made for a ring whose owner
 *            asked to grow, registered before the owner can see it.
 * Every ring the engine made, but a spare no thread has taken, is in the
 * registry from the round it becomes reachable to the flusher (threads' own
 * rings and spares arrive on the attach stack, taken in one exchange after
 * fence (F), see rounds.c) until it is freed.
 *
 * Budget: ring_bytes counts every buffer but the untaken spares',
 * grow_bytes what is above ring_min per ring; both are reserved with an
 * RMW before a buffer is made (a spare's when a thread takes it) and given
 * back when it is freed, so mem_budget is never exceeded, even by threads
 * making rings at once.
 *
 * Slabs: a spare's control block lives in a JR_SLAB_BYTES mapping aligned
 * to its size, whose first JR_CTL_BYTES are the header (the slab's buffers,
 * one mapping, and a count of blocks not yet freed) and the rest control
 * blocks.  The flusher writes the header only, so an untaken spare has no
 * resident page at all: the taker finds the header by alignment, sets its
 * block up (a page fault for one taker in 8) and owns the ring from there
 * like any other.  A slab ring's buffer is unmapped on its own, like a
 * batch's; freeing its control block drops the count, and the last one
 * unmaps the slab (whichever thread that is: an ORPHAN's after close).
 *
 * The idmap: one bit per handed-out code_index, so jitring_move() can tell
 * an index this writer never issued.  Chunks of 4M ids are installed with
 * a CAS (release) and read with acquire; each 64-id block is one word,
 * written only by the thread that holds the block.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/clock.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "flusher.h"
#include "pool.h"
#include "rings_internal.h"

/* Rings made per mapping when the pool is refilled. */
#define JR_POOL_BATCH 64u
/* Spare rings of ring_min (no resident page, unregistered): a storm of
 * this many new threads nobody announced finds a ring each; spare
 * successors of a first ring (four slabs, 1020: a first ring may grow
 * only while fewer than mem_budget / (8 * ring_min) threads hold rings,
 * 1024 by default (jitring_ring_target()), so a storm's threads that fill
 * their first ring before the flusher runs find a successor each); each
 * stock's ck_ring size (it holds the target and the slab that crosses
 * it). */
#define JR_SPARE_TARGET 4096u
#define JR_SPARE_CAP 8192u
#define JR_GROW_TARGET (4 * JR_SLAB_RINGS)
#define JR_GROW_CAP 2048u
/* Under strict overcommit, a quarter of the spares, an eighth of the
 * successors (jitring_host_overcommit_strict()). */
#define JR_SPARE_STRICT_DIV 4u

_Static_assert(sizeof(struct jr_ring) <= JR_CTL_BYTES, "control block");
_Static_assert(sizeof(struct jr_slab) <= JR_CTL_BYTES, "slab header");

static struct jr_slab *slab_of(struct jr_ring *r)
{
	return (struct jr_slab *)((uintptr_t)r &
				  ~(uintptr_t)(JR_SLAB_BYTES - 1));
}

static uint8_t *slab_buf(struct jr_slab *s, struct jr_ring *r)
{
	size_t i = ((uintptr_t)r - (uintptr_t)s) / JR_CTL_BYTES;

	return s->bufs + (i - 1) * s->size;
}

static void slab_put(struct jr_slab *s)
{
	/* acq_rel: the last put sees every other block's last use. */
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) {
		jr_lsan_unroot(s, JR_SLAB_BYTES);
		munmap(s, JR_SLAB_BYTES);
	}
}

void jitring_ring_ctl_free(struct jr_ring *r)
{
	if (r->slab)
		slab_put(r->slab);
	else
		free(r);
}

void jitring_ring_free(struct jr_ring *r)
{
	if (r->buf)
		munmap(r->buf, r->size);
	jitring_ring_ctl_free(r);
}

static int reg_reserve(struct jr_rings *e, uint32_t n)
{
	if (n > e->reg_cap) {
		uint32_t cap = e->reg_cap ? e->reg_cap * 2 : 64;
		struct jr_ring **reg;

		while (cap < n)
			cap *= 2;
		reg = realloc(e->reg, sizeof(*reg) * cap);
		if (!reg)
			return -ENOMEM;
		e->reg = reg;
		e->reg_cap = cap;
	}
	/* The merge keeps per-ring arrays as large as the registry. */
	return jitring_merge_fit(e, e->reg_cap);
}

/*
 * @len bytes for ring buffers, or NULL.  Kept off huge pages: where THP is
 * "always", touching a ring's first page would make 2 MiB resident, and
 * trims discard single pages.
 */
static uint8_t *map_rings(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, len, MADV_NOHUGEPAGE);
	return p;
}

/* Give back what ring_reserve() took for a ring of @size. */
static void ring_unaccount(struct jr_rings *e, uint32_t size)
{
	atomic_fetch_sub_explicit(&e->ring_bytes, size, memory_order_relaxed);
	atomic_fetch_sub_explicit(&e->grow_bytes, size - e->jr->ring_min,
				  memory_order_relaxed);
}

void jitring_pool_drop(struct jr_rings *e, struct jr_ring *r)
{
	struct jr_ring *last = e->reg[--e->nreg];

	e->reg[r->reg_idx] = last;
	last->reg_idx = r->reg_idx;
	ring_unaccount(e, r->size);
	jitring_ring_free(r);
}

static int reg_add(struct jr_rings *e, struct jr_ring *r)
{
	if (reg_reserve(e, e->nreg + 1))
		return -ENOMEM;
	r->reg_idx = e->nreg;
	e->reg[e->nreg++] = r;
	return 0;
}

/*
 * How large a thread's ring may grow now: the configured size, or adaptive.
 * Every ring starts at ring_min; a thread whose ring fills trades it for
 * one twice as large (jitring_thread_grow()), up to ring_max and up to its
 * fair share of the growth budget -- a quarter of mem_budget (128 MiB by
 * default) divided by the threads holding rings.  So a few busy threads
 * end up with large rings (a saturating producer then rarely waits for the
 * flusher), thousands keep ring_min, and growth goes to the threads that
 * need it, not to whichever came first.  ring_reserve() enforces the
 * growth budget exactly.
 */
uint32_t jitring_ring_target(struct jr_rings *e)
{
	struct jitring *jr = e->jr;
	uint64_t users = atomic_load_explicit(&jr->c.threads_attached,
					      memory_order_relaxed) +
			 1;
	uint64_t share = jr->mem_budget / 4 / users;
	uint32_t size = jr->ring_min;

	while (size < jr->ring_max && (uint64_t)size * 2 <= share)
		size *= 2;
	return size;
}

/* Reserve @size bytes within the budget and the growth budget. */
static bool ring_reserve(struct jr_rings *e, uint32_t size)
{
	struct jitring *jr = e->jr;
	uint64_t grow = size - jr->ring_min;

	if (atomic_fetch_add_explicit(&e->ring_bytes, size,
				      memory_order_relaxed) +
		    size >
	    jr->mem_budget)
		goto undo_bytes;
	if (grow && atomic_fetch_add_explicit(&e->grow_bytes, grow,
					      memory_order_relaxed) +
				    grow >
			    jr->mem_budget / 4) {
		atomic_fetch_sub_explicit(&e->grow_bytes, grow,
					  memory_order_relaxed);
		goto undo_bytes;
	}
	return true;

undo_bytes:
	atomic_fetch_sub_explicit(&e->ring_bytes, size, memory_order_relaxed);
	return false;
}

/* Set @r up as the control block of the @size bytes at @buf. */
static void ring_setup(struct jr_rings *e, struct jr_ring *r, uint8_t *buf,
		       uint32_t size, uint64_t lb)
{
	memset(r, 0, sizeof(*r));
	r->buf = buf;
	r->size = size;
	r->mask = size - 1;
	r->jr = e->jr;
	r->lb = lb;
	/* Idle from now: trimmed JR_TRIM_NS after this, not at once. */
	r->idle_since = lb;
	atomic_init(&r->pub, 0);
	atomic_init(&r->head, 0);
	atomic_init(&r->space_waiter, 0);
	atomic_init(&r->own, JR_OWN_POOLED);
}

/* A control block for the @size bytes at @buf (reserved in the budget). */
static struct jr_ring *ring_init(struct jr_rings *e, uint8_t *buf,
				 uint32_t size, uint64_t lb)
{
	struct jr_ring *r = aligned_alloc(JITRING_CACHELINE, sizeof(*r));

	if (r)
		ring_setup(e, r, buf, size, lb);
	return r;
}

struct jr_ring *jitring_ring_alloc(struct jr_rings *e, uint32_t size,
				   uint64_t lb)
{
	struct jr_ring *r;
	uint8_t *buf;

	if (!ring_reserve(e, size))
		return NULL;
	buf = map_rings(size);
	if (!buf)
		goto err_unreserve;
	/* Fault in the first page now, not on a JIT thread's first write. */
	buf[0] = 0;
	r = ring_init(e, buf, size, lb);
	if (r)
		return r;
	munmap(buf, size);
err_unreserve:
	ring_unaccount(e, size);
	return NULL;
}

struct jr_ring *jitring_pool_new_ring(struct jr_rings *e, uint64_t now,
				      uint32_t size)
{
	struct jr_ring *r = jitring_ring_alloc(e, size, now);

	if (r && reg_add(e, r)) {
		ring_unaccount(e, r->size);
		jitring_ring_free(r);
		r = NULL;
	}
	return r;
}

/*
 * Up to @k new ring_min rings in @out, their buffers carved from one
 * mapping (one system call and one VMA for the batch; each is still
 * unmapped and trimmed on its own, which is why ring_min is at least a
 * page: config_load()), and registered.  The first @prefault of them get
 * their first page touched now; the others cost no resident memory until
 * a thread writes (a page fault on its first write).  Return: how many.
 */
static uint32_t ring_new_batch(struct jr_rings *e, uint64_t now, uint32_t k,
			       uint32_t prefault, struct jr_ring **out)
{
	uint32_t size = e->jr->ring_min, n = 0, made = 0;
	uint8_t *map;

	while (n < k && ring_reserve(e, size))
		n++;
	if (!n)
		return 0;
	map = map_rings((size_t)n * size);
	if (!map) {
		while (n--)
			ring_unaccount(e, size);
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *buf = map + (size_t)i * size;
		struct jr_ring *r = made == i ? ring_init(e, buf, size, now) :
						NULL;

		if (r && reg_add(e, r)) {
			free(r);
			r = NULL;
		}
		if (!r) {
			munmap(buf, size);
			ring_unaccount(e, size);
			continue;
		}
		if (i < prefault)
			buf[0] = 0;
		out[made++] = r;
	}
	return made;
}

/*
 * The ring's next owner starts at its first byte, and only that page
 * stays resident: positions skip to the next lap, as if the last owner
 * had padded to the end of the buffer, and the pages it wrote past the
 * first are dropped.  Without this each owner wrote on from the last
 * one's tail, so a ring reused faster than the idle trim (a pool under
 * thread churn) ended up with all its pages resident: 64 KiB per ready
 * ring, where docs/api.md promises one page.
 *
 * Positions only ever move forward: the flusher's differences (a flush
 * ticket's target, the tail a scan saw) stay valid across the skip, which
 * is less than a lap.  The ring is drained and no thread holds it, so
 * pub, head, rd and the tails all equal head_local; they move together.
 * The new values reach the next owner with own (release, below).
 */
static void ring_rewind(struct jr_ring *r)
{
	uint32_t used = r->head_local - r->lap_start;
	uint32_t next = (r->head_local + r->mask) & ~r->mask;
	size_t page = jitring_page_size();

	/* (used is modulo 2^32: pages of an owner that wrote 4 GiB may be
	 * left to the idle trim.) */
	if (used > page && r->size > page) {
		size_t end = used < r->size ? (used + page - 1) & ~(page - 1) :
					      r->size;

		madvise(r->buf + page, end - page, MADV_DONTNEED);
	}
	r->lap_start = next;
	r->head_local = r->rd = r->seen_tail = next;
	atomic_store_explicit(&r->head, next, memory_order_relaxed);
	atomic_store_explicit(&r->pub, JR_PUB(next), memory_order_relaxed);
}

/* Hand a drained ring we own to the pool (or free it if the pool is full). */
void jitring_pool_put(struct jr_rings *e, struct jr_ring *r, uint64_t now)
{
	ring_rewind(r);
	/* Producer fields are ours while the ring is not ACTIVE. */
	r->tail = r->head_local;
	r->head_cache = r->head_local;
	r->busy_since = 0;
	r->lb = now;
	r->idle_since = now;
	r->tls_next = NULL;
	r->grow_asked = false;
	atomic_store_explicit(&r->grow_req, 0, memory_order_relaxed);
	/* Pairs with the acquire load of own in ring_get() (thread.c). */
	atomic_store_explicit(&r->own, JR_OWN_POOLED, memory_order_release);
	if (!ck_ring_enqueue_spmc(&e->pool, e->pool_buf, r)) {
		jitring_pool_drop(e, r);
	}
}

/*
 * Fill the pool's *@n rings up to @target, in batches, registered, the
 * first up to pool_floor warm.  Counted in refills_ahead.  Return: false
 * if the budget stopped it short.
 */
static bool pool_fill(struct jr_rings *e, uint64_t now, uint32_t *n,
		      uint32_t target)
{
	struct jr_ring *batch[JR_POOL_BATCH];
	uint32_t added = 0;
	bool full = false;

	while (*n < target) {
		uint32_t k = target - *n < JR_POOL_BATCH ? target - *n :
							   JR_POOL_BATCH;
		/* The floor's rings are warm; a storm's extra ones are not
		 * (their pages would be resident while they wait). */
		uint32_t warm = *n < e->pool_floor ? e->pool_floor - *n : 0;
		uint32_t got = ring_new_batch(e, now, k, warm, batch);

		for (uint32_t i = 0; i < got; i++)
			jitring_pool_put(e, batch[i], now);
		*n += got;
		added += got;
		if (got < k) {
			full = true;
			break;
		}
	}
	if (added)
		jitring_count(&e->jr->c.refills_ahead, added);
	return !full;
}

/*
 * How many rings to keep ready: the floor (ready_rings), or twice the
 * recent peak of rings taken per window when more are being taken
 * (demand.h): while the mark is above the floor, jitring_pool_maintain()
 * asks the flusher for a round each window, idle or not.  Threads that
 * found the pool empty (@missed) raise it at once.
 */
static uint32_t pool_target(struct jr_rings *e, uint64_t now, uint32_t missed)
{
	uint32_t taken = atomic_exchange_explicit(&e->pool_taken, 0,
						  memory_order_relaxed);
	uint64_t want =
		2 * (uint64_t)jr_demand_peak(&e->demand, taken + missed, now);

	if (want < e->pool_floor)
		want = e->pool_floor;
	if (want > e->pool_cap / 2)
		want = e->pool_cap / 2;
	return (uint32_t)want;
}

uint64_t jitring_pool_maintain(struct jr_rings *e, uint64_t now)
{
	uint32_t want = atomic_exchange_explicit(&e->pool_want, 0,
						 memory_order_relaxed);
	uint32_t missed = atomic_exchange_explicit(&e->pool_missed, 0,
						   memory_order_relaxed);
	uint32_t low = pool_target(e, now, missed);
	uint32_t n0 = ck_ring_size(&e->pool), n = n0;
	struct jr_ring *r;
	bool full;

	atomic_store_explicit(&e->pool_low, low, memory_order_relaxed);
	full = !pool_fill(e, now, &n, low);
	atomic_store_explicit(&e->pool_full, full && n == 0,
			      memory_order_relaxed);
	if (n > n0 || want || missed) {
		/* Pairs with the acquire load of pool_gen in ring_get()
		 * (thread.c). */
		atomic_fetch_add_explicit(&e->pool_gen, 1,
					  memory_order_release);
		jr_futex_wake(&e->pool_gen, INT_MAX);
	}
	/* Give back what demand no longer asks for. */
	while (n > 2 * low && ck_ring_dequeue_spmc(&e->pool, e->pool_buf, &r)) {
		/* Pairs with the release store in jitring_pool_put(). */
		(void)atomic_load_explicit(&r->own, memory_order_acquire);
		jitring_pool_drop(e, r);
		n--;
	}
	/*
	 * Above the floor the mark falls each window, and what it gives
	 * back goes only in a round: without one an idle flusher, asleep
	 * with no timer, kept a storm's pool (a resident page per ring) for
	 * good.
	 */
	return low > e->pool_floor ? jr_demand_next(&e->demand) : UINT64_MAX;
}

/*
 * A slab of up to @k spares (see "Slabs" above): the header mapped and
 * aligned, the buffers one mapping, nothing else touched.  The buffers
 * are not in the budget until a thread takes one.  Return: how many
 * blocks, 0 if a mapping failed.
 */
static uint32_t slab_new(uint32_t size, uint32_t k, struct jr_slab **out)
{
	uint32_t n = k < JR_SLAB_RINGS ? k : JR_SLAB_RINGS;
	uint8_t *map, *bufs;
	struct jr_slab *s;
	uintptr_t at;

	map = mmap(NULL, 2 * JR_SLAB_BYTES, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (map == MAP_FAILED)
		return 0;
	at = ((uintptr_t)map + JR_SLAB_BYTES - 1) &
	     ~(uintptr_t)(JR_SLAB_BYTES - 1);
	if (at > (uintptr_t)map)
		munmap(map, at - (uintptr_t)map);
	munmap((uint8_t *)at + JR_SLAB_BYTES,
	       (uintptr_t)map + JR_SLAB_BYTES - at);
	s = (struct jr_slab *)at;
	bufs = map_rings((size_t)n * size);
	if (!bufs) {
		munmap(s, JR_SLAB_BYTES);
		return 0;
	}
	s->size = size;
	s->bufs = bufs;
	/* Control blocks here link a thread's rings (see compiler.h). */
	jr_lsan_root(s, JR_SLAB_BYTES);
	/* Pairs with the acquire load in jitring_spare_take(). */
	atomic_store_explicit(&s->refs, n, memory_order_release);
	*out = s;
	return n;
}

/*
 * Unmap every untaken spare's buffer of @sp and drop its block.  A slab's
 * blocks come out in order and their buffers are adjacent, so a run of
 * them goes in one munmap(): one call per buffer made every close of a
 * writer cost thousands of system calls (each splitting the mapping).
 */
static void spares_drain(struct jr_spares *sp)
{
	uint8_t *run = NULL, *end = NULL;
	struct jr_ring *r;

	while (ck_ring_dequeue_spmc(&sp->q, sp->buf, &r)) {
		struct jr_slab *s = slab_of(r);
		uint8_t *buf = slab_buf(s, r);

		if (buf != end) {
			if (run)
				munmap(run, (size_t)(end - run));
			run = buf;
		}
		end = buf + s->size;
		slab_put(s);
	}
	if (run)
		munmap(run, (size_t)(end - run));
}

static int spares_init(struct jr_spares *sp, uint32_t cap, uint32_t target,
		       uint32_t size)
{
	sp->buf = calloc(cap, sizeof(*sp->buf));
	if (!sp->buf)
		return -ENOMEM;
	ck_ring_init(&sp->q, cap);
	sp->target = target;
	sp->size = size;
	return 0;
}

bool jitring_host_overcommit_strict(void)
{
	FILE *f = fopen("/proc/sys/vm/overcommit_memory", "re");
	int mode = 0;

	if (f) {
		if (fscanf(f, "%d", &mode) != 1)
			mode = 0;
		fclose(f);
	}
	return mode == 2;
}

int jitring_spares_init(struct jr_rings *e)
{
	struct jitring *jr = e->jr;
	uint64_t budget = jr->mem_budget;
	uint32_t spare = JR_SPARE_TARGET, grow = 0;
	bool strict = jitring_host_overcommit_strict() ||
		      JITRING_FAULT(overcommit_strict, jr);

	/* Address space: within half the budget, and the growth budget
	 * (a quarter) for successors, which only adaptive rings have. */
	if ((uint64_t)spare * jr->ring_min > budget / 2)
		spare = (uint32_t)(budget / 2 / jr->ring_min);
	if ((uint64_t)jr->ring_min * 2 <= jr->ring_max) {
		grow = JR_GROW_TARGET;
		if ((uint64_t)grow * 2 * jr->ring_min > budget / 4)
			grow = (uint32_t)(budget / 4 / (2 * jr->ring_min));
	}
	/* Strict overcommit: the 64 MiB of spares of old, and 16 MiB of
	 * successors. */
	if (strict) {
		spare /= JR_SPARE_STRICT_DIV;
		grow /= JR_SPARE_STRICT_DIV * 2;
	}
	if (spares_init(&e->spare, JR_SPARE_CAP, spare, jr->ring_min) ||
	    spares_init(&e->grow, JR_GROW_CAP, grow, 2 * jr->ring_min)) {
		jitring_spares_fini(e);
		return -ENOMEM;
	}
	return 0;
}

void jitring_spares_fini(struct jr_rings *e)
{
	free(e->spare.buf);
	free(e->grow.buf);
	e->spare.buf = e->grow.buf = NULL;
}

void jitring_spares_reset(struct jr_rings *e)
{
	ck_ring_init(&e->spare.q, ck_ring_capacity(&e->spare.q));
	ck_ring_init(&e->grow.q, ck_ring_capacity(&e->grow.q));
}

/* Fill @sp up to its target, whole slabs at a time (a few refills, not a
 * tiny slab per ring taken): the stock ends below target + JR_SLAB_RINGS,
 * within the ck_ring. */
static void spares_fill(struct jr_spares *sp)
{
	uint32_t n = ck_ring_size(&sp->q);
	uint32_t room = ck_ring_capacity(&sp->q) - 1;

	while (n < sp->target) {
		struct jr_slab *s;
		uint32_t k = sp->target < room - n ? sp->target : room - n;
		uint32_t got = slab_new(sp->size, k, &s);

		for (uint32_t i = 1; i <= got; i++)
			ck_ring_enqueue_spmc(&sp->q, sp->buf,
					     (uint8_t *)s +
						     (size_t)i * JR_CTL_BYTES);
		if (!got)
			break;
		n += got;
	}
}

/*
 * Keep both stocks of spare rings (see struct jr_rings) at their targets.
 * No page of a spare is resident and the budget does not count them, so
 * a stock can be deep enough for a storm of thousands of new threads at
 * the cost of address space alone.  A taker's ring has lb 0 like a ring a
 * thread makes: the thread pushes it to the attach stack, and the
 * ordering argument for those holds unchanged.
 */
void jitring_spare_maintain(struct jr_rings *e)
{
	spares_fill(&e->spare);
	spares_fill(&e->grow);
}

struct jr_ring *jitring_spare_take(struct jr_rings *e, struct jr_spares *sp)
{
	uint32_t size = sp->size;
	struct jr_slab *s;
	struct jr_ring *r;

	if (JITRING_FAULT(spare_empty, e->jr) || !sp->target ||
	    !ring_reserve(e, size))
		return NULL;
	if (!ck_ring_dequeue_spmc(&sp->q, sp->buf, &r)) {
		ring_unaccount(e, size);
		return NULL;
	}
	s = slab_of(r);
	/* Pairs with the release store in slab_new(): TSan cannot see
	 * ck_ring's own ordering. */
	(void)atomic_load_explicit(&s->refs, memory_order_acquire);
	ring_setup(e, r, slab_buf(s, r), size, 0);
	r->slab = s;
	return r;
}

/*
 * Register the rings threads made themselves; their idle time (for
 * trim_idle()) starts at @now.  Return false if one could not be
 * registered (no memory): it may hold entries older than anything we
 * could write, so the caller writes nothing this round and completes no
 * flush ticket.
 */
bool jitring_pool_attach(struct jr_rings *e, uint64_t now)
{
	/* Pairs with the release CAS in ring_push_attach() (thread.c). */
	struct jr_ring *list = atomic_exchange_explicit(&e->attach, NULL,
							memory_order_acquire);

	while (list) {
		struct jr_ring *r = list;

		list = r->attach_next;
		r->attach_next = e->attach_pending;
		e->attach_pending = r;
	}
	while (e->attach_pending) {
		struct jr_ring *r = e->attach_pending;

		if (JITRING_FAULT(attach_reg, r) || reg_add(e, r))
			return false;
		r->idle_since = now;
		e->attach_pending = r->attach_next;
		r->attach_next = NULL;
	}
	return true;
}

/*
 * Free the heap buffers of jumbo groups committed to @r but not written
 * (head_local up to the published tail).  Only a fork child has any: close
 * writes everything first.  No producer can commit meanwhile.
 */
static void ring_free_jumbos(struct jr_ring *r)
{
	uint32_t end = JR_PUB_TAIL(
		atomic_load_explicit(&r->pub, memory_order_relaxed));
	uint32_t rd = r->head_local, len, n;
	struct jitdump_prefix pre;

	while ((rd = jitring_ring_next_group(r, rd, end, &pre)) != end) {
		uint8_t *p = r->buf + (rd & r->mask);

		if (pre.id == JR_ID_JUMBO) {
			struct jr_jumbo j;

			memcpy(&j, p, sizeof(j));
			free((void *)(uintptr_t)j.ptr);
			rd += sizeof(j);
		} else {
			jitring_group_size(p, &len, &n);
			rd += len;
		}
	}
}

/*
 * Free every ring.  Called by close once the flusher has stopped (every
 * committed entry is in the file, no thread can commit more), by a failed
 * start, and in a fork child (@child: nothing of the parent's is written,
 * and no thread of the parent's exists).
 *
 * A ring a live thread still lists (ACTIVE) is split between two owners
 * by one CAS: close turns it ORPHAN and takes the buffer, the thread keeps
 * the control block (it frees it when it next notices, see
 * ring_release() in thread.c).  Close reads buf and size before the CAS and never
 * touches the control block after it; the thread never touches the buffer
 * once it sees the writer is not open.  If the thread's CAS to DETACHED
 * won instead, the whole ring is ours.
 */
void jitring_pool_release(struct jr_rings *e, bool child)
{
	jitring_pool_attach(e, 0);
	for (uint32_t i = 0; i < e->nreg; i++) {
		struct jr_ring *r = e->reg[i];
		uint8_t *buf = r->buf;
		uint32_t size = r->size, own = JR_OWN_ACTIVE;

		/* A fork child frees what the parent had not written. */
		ring_free_jumbos(r);
		/* Pairs with the acq_rel CAS to DETACHED in ring_release()
		 * (thread.c). */
		if (!child &&
		    atomic_compare_exchange_strong_explicit(
			    &r->own, &own, JR_OWN_ORPHAN, memory_order_acq_rel,
			    memory_order_acquire)) {
			JITRING_TESTPOINT(close_orphan, r);
			/* r is the thread's from here on: locals only. */
			munmap(buf, size);
			atomic_fetch_sub_explicit(&e->jr->c.threads_attached, 1,
						  memory_order_relaxed);
			continue;
		}
		jitring_ring_free(r);
	}
	/* Spares: no thread holds one (close waited for every user; a fork
	 * child has none between take and push, see make_lock). */
	spares_drain(&e->spare);
	spares_drain(&e->grow);
	/* Rings we could not register (only after running out of memory). */
	while (e->attach_pending) {
		struct jr_ring *r = e->attach_pending;

		e->attach_pending = r->attach_next;
		ring_free_jumbos(r);
		jitring_ring_free(r);
	}
	free(e->reg);
	e->reg = NULL;
	e->nreg = e->reg_cap = 0;
	atomic_store_explicit(&e->ring_bytes, 0, memory_order_relaxed);
	atomic_store_explicit(&e->grow_bytes, 0, memory_order_relaxed);
	jitring_merge_fit(e, 0);
}

_Atomic uint64_t *jitring_idmap_chunk(struct jr_rings *e, uint64_t id)
{
	_Atomic(_Atomic uint64_t *) *slot;
	_Atomic uint64_t *chunk, *fresh = NULL;

	if ((id >> JR_IDMAP_SHIFT) >= JR_IDMAP_CHUNKS)
		return NULL;
	slot = &e->idmap[id >> JR_IDMAP_SHIFT];
	/* Pairs with the release CAS below. */
	chunk = atomic_load_explicit(slot, memory_order_acquire);
	if (likely(chunk))
		return chunk;
	fresh = calloc(JR_IDMAP_WORDS, sizeof(*fresh));
	if (!fresh)
		return NULL;
	/* Pairs with the acquire loads of the slot (here, id_issued()). */
	if (atomic_compare_exchange_strong_explicit(slot, &chunk, fresh,
						    memory_order_acq_rel,
						    memory_order_acquire))
		return fresh;
	free(fresh);
	return chunk;
}

void jitring_idmap_free(struct jr_rings *e)
{
	for (uint32_t i = 0; i < JR_IDMAP_CHUNKS; i++) {
		free(atomic_load_explicit(&e->idmap[i], memory_order_relaxed));
		atomic_store_explicit(&e->idmap[i], NULL, memory_order_relaxed);
	}
	e->idmap_warm = 0;
}

/*
 * Have the words of the next JR_IDMAP_AHEAD ids resident before a producer
 * needs them: a chunk is calloc()ed zero pages, so the first block on each
 * fresh page used to cost its thread a page fault inside jitring_write()
 * (one per 32768 ids: several in a storm of new threads, each taking a
 * block).  Touched with an RMW of 0: atomic against the owner's store of
 * its bits, and it changes no value.  On the flusher (or start, which
 * holds the engine alone).
 */
static bool idmap_touch(struct jr_rings *e, uint64_t id)
{
	_Atomic uint64_t *chunk = jitring_idmap_chunk(e, id);

	if (chunk)
		atomic_fetch_or_explicit(
			&chunk[(id >> 6) & (JR_IDMAP_WORDS - 1)], 0,
			memory_order_relaxed);
	return chunk != NULL;
}

void jitring_idmap_ahead(struct jr_rings *e)
{
	uint64_t next = jitring_ids_peek() & ~(uint64_t)63;
	uint64_t end = next + JR_IDMAP_AHEAD;

	if (e->idmap_warm > next)
		next = e->idmap_warm;
	if (next >= end)
		return;
	/* Words a page (512 words) apart, and the last: every page between
	 * has one of them. */
	for (uint64_t id = next; id < end; id += 512 * 64)
		if (!idmap_touch(e, id))
			return;
	if (idmap_touch(e, end - 64))
		e->idmap_warm = end;
}

int jitring_pool_prefill(struct jr_rings *e)
{
	jitring_pool_maintain(e, jitring_clock_ns());
	jitring_idmap_ahead(e);
	return ck_ring_size(&e->pool) ? 0 : -ENOMEM;
}
