// SPDX-License-Identifier: MIT
/*
 * The code map's writes, its memory and the free list (codemap.h says
 * how the map works and why its lookups are safe without a lock).
 *
 * Invariants: every store into a table is atomic (a lock-free reader may
 * read any table, even one given back); a shard's table, its used and
 * live counts and its sequence count change only under its mutex; a
 * table given back is zeroed before it is a free block, and no chunk is
 * ever unmapped; the free list's mutex nests inside a shard's.
 */
#include "codemap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>

struct codemap_counters codemap_ctr;
struct shard shards[NSHARDS];

static inline void count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

#define BLOCK_MIN_SHIFT 8		/* 256 B: a 16-slot table */
#define CHUNK_FIRST_SHIFT 18		/* 256 KiB */
#define CHUNK_SHIFT 21			/* 2 MiB */
#define CHUNK_HUGE ((size_t)1 << CHUNK_SHIFT)

static pthread_mutex_t chunk_mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t chunk_cur, chunk_end;	/* under chunk_mu */
/* Free blocks of 2^k bytes, linked through their first word (link_set()). */
static void *free_blocks[CHUNK_SHIFT + 1];	/* under chunk_mu */

/*
 * A free block's link to the next, in its first word.  A block given back
 * was a table that a lock-free reader may still probe (its first slot's
 * key), so the link is written and read atomically too, as every word of
 * a table is.
 */
static inline void link_set(void *blk, void *next)
{
	atomic_store_explicit((_Atomic uintptr_t *)blk, (uintptr_t)next,
			      memory_order_relaxed);
}

static inline void *link_get(void *blk)
{
	return (void *)atomic_load_explicit((_Atomic uintptr_t *)blk,
					    memory_order_relaxed);
}

static void *chunk_map(size_t len, bool huge)
{
	size_t extra = huge ? CHUNK_HUGE : 0;
	char *p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t a, end;

	if (p == MAP_FAILED)
		return NULL;
	atomic_fetch_add_explicit(&codemap_ctr.map_bytes, len, memory_order_relaxed);
	if (!huge)
		return p;
	a = ((uintptr_t)p + CHUNK_HUGE - 1) & ~(uintptr_t)(CHUNK_HUGE - 1);
	end = (uintptr_t)p + len + extra;
	if (a > (uintptr_t)p)
		munmap(p, a - (uintptr_t)p);
	if (end > a + len)
		munmap((void *)(a + len), end - (a + len));
#ifdef MADV_HUGEPAGE
	madvise((void *)a, len, MADV_HUGEPAGE);	/* advice: may be ignored */
#endif
	return (void *)a;
}

/* Under chunk_mu: [@from, @to) into free blocks, each aligned to its size
 * (the chunk is aligned to its own). */
static void blocks_free(uintptr_t from, uintptr_t to)
{
	while (to - from >= ((uintptr_t)1 << BLOCK_MIN_SHIFT)) {
		unsigned int k = (unsigned int)__builtin_ctzll(from);

		if (k > CHUNK_SHIFT)
			k = CHUNK_SHIFT;
		while (((uintptr_t)1 << k) > to - from)
			k--;
		link_set((void *)from, free_blocks[k]);
		free_blocks[k] = (void *)from;
		from += (uintptr_t)1 << k;
	}
}

/* 2^@shift zeroed bytes, aligned to their size (at least 64), mapped until
 * exit; NULL without memory.  Any thread. */
static void *map_alloc(unsigned int shift)
{
	size_t size;
	uintptr_t a;
	void *p;

	if (shift < BLOCK_MIN_SHIFT)
		shift = BLOCK_MIN_SHIFT;
	size = (size_t)1 << shift;
	if (shift > CHUNK_SHIFT)	/* over 65536 keys in one shard */
		return chunk_map(size, true);
	pthread_mutex_lock(&chunk_mu);
	p = free_blocks[shift];
	if (p) {
		free_blocks[shift] = link_get(p);
		link_set(p, NULL);
		goto out;
	}
	a = (chunk_cur + size - 1) & ~(uintptr_t)(size - 1);
	if (!chunk_cur || a + size > chunk_end) {
		bool first = !chunk_cur;
		size_t len = first && shift <= CHUNK_FIRST_SHIFT ?
				     (size_t)1 << CHUNK_FIRST_SHIFT :
				     CHUNK_HUGE;

		p = chunk_map(len, !first || shift > CHUNK_FIRST_SHIFT);
		if (!p)
			goto out;
		blocks_free(chunk_cur, chunk_end);
		chunk_cur = (uintptr_t)p;
		chunk_end = chunk_cur + len;
		a = chunk_cur;
	}
	blocks_free(chunk_cur, a);
	p = (void *)a;
	chunk_cur = a + size;
out:
	pthread_mutex_unlock(&chunk_mu);
	return p;
}

/*
 * Give back a table map_alloc(@shift) returned, for a later map_alloc().
 * Lock-free readers may still read it (see "Tables given back"): it is
 * zeroed with atomic stores, as every store into a table is atomic, and
 * a block of its own mapping (a shard of over 131,072 keys) is kept
 * mapped, unused.
 */
static void map_free(void *p, unsigned int shift)
{
	_Atomic uint64_t *w = p;

	if (shift < BLOCK_MIN_SHIFT)
		shift = BLOCK_MIN_SHIFT;
	if (shift > CHUNK_SHIFT)
		return;
	/* map_alloc() hands out zeroes. */
	for (size_t i = 0; i < ((size_t)1 << shift) / sizeof(*w); i++)
		atomic_store_explicit(&w[i], 0, memory_order_relaxed);
	pthread_mutex_lock(&chunk_mu);
	link_set(p, free_blocks[shift]);
	free_blocks[shift] = p;
	pthread_mutex_unlock(&chunk_mu);
}

/* @key's value, 0 if it has none, exact: under the mutex.  Any thread. */
COLD uint64_t map_get_locked(uintptr_t key)
{
	uint64_t h = key_hash(key), v = 0;
	struct shard *sh = key_shard(h);
	struct slot *sl;

	pthread_mutex_lock(&sh->mu);
	sl = shard_slot(sh, key, h, false);
	if (sl)
		v = atomic_load_explicit(&sl->val, memory_order_relaxed);
	pthread_mutex_unlock(&sh->mu);
	return v;
}

/* Under sh->mu: the shard's sequence count (only mu holders write it). */
static inline uint32_t sh_seq(struct shard *sh)
{
	return atomic_load_explicit(&sh->seq, memory_order_relaxed);
}

/* Under sh->mu: a table with room for the live keys and then some. */
static int shard_grow(struct shard *sh)
{
	uintptr_t otb = atomic_load_explicit(&sh->tb, memory_order_relaxed);
	struct slot *o = tb_slots(otb), *n;
	unsigned int bits = TABLE_MIN_BITS;
	size_t i, j, omask, nmask;

	/* At most half full after the rehash: room for half as many again
	 * before the next (at three quarters). */
	while (((size_t)1 << bits) < (sh->live + 1) * 2)
		bits++;
	n = map_alloc(bits + 4);	/* 16-byte slots */
	if (!n)
		return -ENOMEM;
	nmask = ((size_t)1 << bits) - 1;
	omask = o ? ((size_t)1 << tb_bits(otb)) - 1 : 0;
	for (i = 0; o && i <= omask; i++) {
		uintptr_t k = atomic_load_explicit(&o[i].key,
						   memory_order_relaxed);

		if (k == KEY_EMPTY || k == KEY_DEAD)
			continue;
		for (j = key_index(k, key_hash(k), bits);
		     atomic_load_explicit(&n[j].key, memory_order_relaxed);
		     j = (j + 1) & nmask)
			;
		atomic_store_explicit(&n[j].val,
				      atomic_load_explicit(&o[i].val,
							   memory_order_relaxed),
				      memory_order_relaxed);
		/* Release: pairs with the acquire load of key in
		 * map_lookup(), for a reader of a block given back that now
		 * holds this table (it then sees the other shard's count
		 * changed). */
		atomic_store_explicit(&n[j].key, k, memory_order_release);
	}
	sh->used = sh->live;
	count(&codemap_ctr.map_tables);
	if (!o) {
		/* Pairs with the acquire load in map_lookup(): the slots
		 * before the table. */
		atomic_store_explicit(&sh->tb, (uintptr_t)n | bits,
				      memory_order_release);
		return 0;
	}
	/* Odd while the old table is given back: a reader that reads
	 * anything written from here on sees the count changed.  The
	 * release fence pairs with the acquire loads of key and val in
	 * map_lookup() that read the stores that follow. */
	atomic_store_explicit(&sh->seq, sh_seq(sh) + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&sh->tb, (uintptr_t)n | bits,
			      memory_order_release);
	map_free(o, tb_bits(otb) + 4);
	/* Pairs with the acquire load of the count in map_lookup(): a
	 * reader that sees it even again sees the new table. */
	atomic_store_explicit(&sh->seq, sh_seq(sh) + 1, memory_order_release);
	return 0;
}

/*
 * Under sh->mu: @key's slot in the current table; with @insert, made
 * (value 0) if there is none.  NULL if absent (or without memory).
 */
struct slot *shard_slot(struct shard *sh, uintptr_t key, uint64_t h,
			bool insert)
{
	struct slot *t, *sl, *dead;
	uintptr_t tb, k;
	size_t i, mask;

	for (;;) {
		tb = atomic_load_explicit(&sh->tb, memory_order_relaxed);
		t = tb_slots(tb);
		dead = NULL;
		sl = NULL;
		if (t) {
			mask = ((size_t)1 << tb_bits(tb)) - 1;
			for (i = key_index(key, h, tb_bits(tb));;
			     i = (i + 1) & mask) {
				sl = &t[i];
				k = atomic_load_explicit(&sl->key,
							 memory_order_relaxed);
				if (k == key)
					return sl;
				if (k == KEY_DEAD && !dead)
					dead = sl;
				if (k == KEY_EMPTY)
					break;
			}
		}
		if (!insert)
			return NULL;
		if (dead || (t && (sh->used + 1) * 4 <= (mask + 1) * 3))
			break;
		if (shard_grow(sh) < 0)
			return NULL;
	}
	if (dead)
		sl = dead;
	else
		sh->used++;
	sh->live++;
	atomic_store_explicit(&sl->val, 0, memory_order_relaxed);
	/* Pairs with the acquire load of key in map_lookup(). */
	atomic_store_explicit(&sl->key, key, memory_order_release);
	return sl;
}

/*
 * The free list: copies of destroyed code objects, for the next new one.
 * One for the process, not one per shard: a shard's list would keep the
 * copies of its dead code while code born in other shards (their
 * addresses hash elsewhere) made new ones.  Taken
 * only on a destroy of code that had a copy and on a first call that
 * finds copies there (free_avail: a first call with none takes no lock),
 * after a shard's mutex.
 */
static pthread_mutex_t free_mu = PTHREAD_MUTEX_INITIALIZER;
static void **free_v;			/* under free_mu */
static size_t free_n, free_cap;		/* under free_mu */
static _Atomic size_t free_avail;	/* free_n, for a look without the lock */

/* Keep @copy for a later code object.  Without memory for the list it is
 * dropped (never unmapped: one copy's slot). */
void free_push(void *copy)
{
	pthread_mutex_lock(&free_mu);
	if (free_n == free_cap) {
		size_t cap = free_cap ? free_cap * 2 : 256;
		void **n = realloc(free_v, cap * sizeof(void *));

		if (!n)
			goto out;
		free_v = n;
		free_cap = cap;
	}
	free_v[free_n++] = copy;
	atomic_store_explicit(&free_avail, free_n, memory_order_relaxed);
	count(&codemap_ctr.copies_freed);
out:
	pthread_mutex_unlock(&free_mu);
}

/* A copy of a destroyed code object, or NULL. */
void *free_pop(void)
{
	void *copy = NULL;

	/* Relaxed: a stale count only costs a lock, or a new copy. */
	if (!atomic_load_explicit(&free_avail, memory_order_relaxed))
		return NULL;
	pthread_mutex_lock(&free_mu);
	if (free_n) {
		copy = free_v[--free_n];
		atomic_store_explicit(&free_avail, free_n,
				      memory_order_relaxed);
	}
	pthread_mutex_unlock(&free_mu);
	return copy;
}

bool map_forget(uintptr_t key, uint64_t *v)
{
	uint64_t h = key_hash(key);
	struct shard *sh = key_shard(h);
	struct slot *sl;
	bool found = false;

	/* Most code never ran under a session: no lock for those. */
	if (map_lookup(key, v) == LK_ABSENT)
		return false;
	pthread_mutex_lock(&sh->mu);
	sl = shard_slot(sh, key, h, false);
	if (sl) {
		*v = atomic_load_explicit(&sl->val, memory_order_relaxed);
		/* Relaxed: the mutex and the free that follows order it
		 * before any lookup of a new object at this address. */
		atomic_store_explicit(&sl->key, KEY_DEAD,
				      memory_order_relaxed);
		sh->live--;
		count(&codemap_ctr.map_forgotten);
		found = true;
	}
	pthread_mutex_unlock(&sh->mu);
	return found;
}

void map_init(void)
{
	for (unsigned int i = 0; i < NSHARDS; i++)
		pthread_mutex_init(&shards[i].mu, NULL);
	pthread_mutex_init(&chunk_mu, NULL);
	pthread_mutex_init(&free_mu, NULL);
}

