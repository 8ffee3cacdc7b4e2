// SPDX-License-Identifier: MIT
/*
 * The Python module's code map: code object address -> tagged copy
 * address, read lock-free on every Python call, with its own memory and
 * the free list of copies of destroyed code.  No Python here: the module
 * (_jitring.c) gives the values their meaning ("Value layout" there) and
 * runs the code watcher that calls map_forget(); tests/unit/test_codemap.c
 * drives it alone, under the sanitizers too.
 *
 * Code object address -> tagged copy address (see "Value layout").
 *
 * 256 shards (by hash), each one open-addressing table of (key, value)
 * slots with linear probing, at most three quarters full.  Lookups (every
 * Python call) take no lock and no atomic read-modify-write: they probe
 * until the key or an EMPTY slot, between two reads of the shard's
 * sequence count (see "Tables given back" below).  Every write takes the
 * shard's mutex:
 * inserting a key (a code object's first call in the process), claiming its
 * value for a session, publishing the copy, and deleting the key; so a
 * first call takes it twice and no later call takes it.  An insert stores
 * the value before the key (release), and reuses DEAD slots.  A shard that
 * fills up is rehashed into a new table, published with a release store;
 * the old one is given back for later tables.  A shard whose code
 * objects churn (made and destroyed, sessions or not) fills with DEAD
 * slots and is rehashed at the same size, so tables are given back all
 * the time in a long-running program.
 *
 * Tables given back.  A reader may still be probing the old table when
 * the rehash gives it back and it becomes another table, or a free list.
 * Its memory stays mapped (map_alloc()'s chunks are never unmapped), so
 * the reader reads garbage at worst, never a fault, and the shard's
 * sequence count tells it: the rehash makes the count odd before it
 * publishes the new table and even again after it gave the old one back.
 * A lookup reads the count (acquire) before the table and again after
 * the value (itself an acquire load, so the second read of the count
 * cannot come before it); an odd or changed count means the value may be
 * garbage, and the caller takes the slow path (under the mutex, exact).
 * The probe is bounded by the table's size, so it ends even in a block
 * that holds something else now.  A value changed after a rehash is
 * changed in the new table only; the count sends a reader of the old one
 * to the slow path.
 *
 * Address reuse: a code watcher deletes the entry of every code object
 * destroyed during a session, under the shard's mutex, before the object's
 * memory is freed; a new code object at that address is created after that
 * and looked up after that, so its lookups see the table the delete
 * happened in (or a later one) and find no stale entry.  An entry of code
 * destroyed while no session runs stays, with an old tag, which no later
 * session trusts; the next object at its address reuses it.  A thread looks
 * up only code it is executing, which its frame keeps alive, so the slot of
 * a key it finds is never reused under it.
 *
 * Memory.
 * A first call makes at most one map slot, so what the map costs a new
 * code object is mostly the fresh memory it touches (in a VM a first touch
 * of a 4 KiB page costs 2 us or more).  Tables, whose sizes are powers of
 * two, come from blocks of the module's own mmap(2) chunks, never
 * unmapped (a table given back is a free block for the next; a lock-free
 * reader may still read it, see "Tables given back"): no malloc (whose per-thread heaps grow by an mprotect(2) a step,
 * taking mmap_lock against page faults and the library's arena making), no
 * memset (the pages come zeroed), no space given up (what a chunk cannot
 * serve any more is cut into power-of-two blocks for later tables), and few
 * faults: the first chunk is small, for programs with few functions; every
 * later one is 2 MiB, aligned and advised MADV_HUGEPAGE, so that where
 * transparent huge pages are enabled for madvise (Debian's default) a chunk
 * costs one fault, not 512.
 */
#ifndef JITRING_PY_CODEMAP_H
#define JITRING_PY_CODEMAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#ifndef likely
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif
#ifndef COLD
#define COLD __attribute__((noinline, cold))
#endif
#else
#ifndef likely
#define likely(x) (x)
#define unlikely(x) (x)
#endif
#ifndef COLD
#define COLD
#endif
#endif

#pragma GCC visibility push(hidden)

/* What the map has cost, and done (stats() reports them with "py_"). */
struct codemap_counters {
	_Atomic uint64_t map_tables;	/* tables allocated */
	_Atomic uint64_t map_bytes;	/* memory mapped for them */
	_Atomic uint64_t map_forgotten;	/* entries of destroyed code */
	_Atomic uint64_t copies_freed;	/* copies of destroyed code kept */
};
extern struct codemap_counters codemap_ctr;

#define KEY_EMPTY ((uintptr_t)0)
#define KEY_DEAD ((uintptr_t)1)
#define SHARD_BITS 8
#define NSHARDS (1u << SHARD_BITS)
#define TABLE_MIN_BITS 4

struct slot {
	_Atomic uintptr_t key;
	_Atomic uint64_t val;
};
_Static_assert(sizeof(struct slot) == 16, "map_alloc(bits + 4)");

/*
 * A shard's table pointer carries the table's size bits in its low 6 bits
 * (tables are 64-byte aligned), so a lookup reads one word for both.
 */
#define TB_BITS_MASK ((uintptr_t)63)

struct shard {
	_Atomic uintptr_t tb;		/* slots | bits; 0 until first used */
	_Atomic uint32_t seq;		/* odd while a rehash gives a table
					 * back; written under mu */
	pthread_mutex_t mu;
	size_t used;			/* non-EMPTY slots of tb, under mu */
	size_t live;			/* keys in tb, under mu */
} __attribute__((aligned(64)));

extern struct shard shards[NSHARDS];

/*
 * Placement keeps locality: the hash of a key's 64 KiB region picks the
 * shard and a base slot, and the key's offset in the region (in 64-byte
 * steps; a code object is larger) is added to it.  Code objects made
 * together (a module's functions) sit together in memory, so their slots
 * do too.
 */
static inline uint64_t key_hash(uintptr_t key)
{
	return (uint64_t)(key >> 16) * UINT64_C(0x9E3779B97F4A7C15);
}

static inline struct shard *key_shard(uint64_t h)
{
	return &shards[h >> (64 - SHARD_BITS)];
}

/* Region base (the hash bits below the shard bits) plus the offset. */
static inline size_t key_index(uintptr_t key, uint64_t h, unsigned int bits)
{
	return (size_t)(((h << SHARD_BITS) >> (64 - bits)) + (key >> 6)) &
	       (((size_t)1 << bits) - 1);
}

static inline struct slot *tb_slots(uintptr_t tb)
{
	return (struct slot *)(tb & ~TB_BITS_MASK);
}

static inline unsigned int tb_bits(uintptr_t tb)
{
	return (unsigned int)(tb & TB_BITS_MASK);
}

/* A lookup's answer (map_lookup()). */
enum lookup { LK_ABSENT, LK_FOUND, LK_RETRY };

/*
 * @key's value in the current table into *@v: LK_FOUND, LK_ABSENT (then
 * *@v is 0), or LK_RETRY if a rehash may have given the table back under
 * us (the value is then not to be trusted: ask under the mutex).
 * Lock-free; any thread.
 */
static inline enum lookup map_lookup(uintptr_t key, uint64_t *v)
{
	uint64_t h = key_hash(key);
	struct shard *sh = key_shard(h);
	/* Pairs with the release store of the even count in shard_grow():
	 * the table we load below is the one published before it. */
	uint32_t seq = atomic_load_explicit(&sh->seq, memory_order_acquire);
	/* Pairs with the release store of tb in shard_grow(). */
	uintptr_t tb = atomic_load_explicit(&sh->tb, memory_order_acquire);
	struct slot *t = tb_slots(tb);
	unsigned int bits = tb_bits(tb);
	size_t i, n, mask = ((size_t)1 << bits) - 1;

	*v = 0;
	if (unlikely(seq & 1))
		return LK_RETRY;
	if (unlikely(!t))
		return LK_ABSENT;
	for (i = key_index(key, h, bits), n = 0; n <= mask;
	     i = (i + 1) & mask, n++) {
		/* Pairs with the release store of key in shard_slot(): the
		 * slot's value before its key. */
		uintptr_t k = atomic_load_explicit(&t[i].key,
						   memory_order_acquire);

		if (k == KEY_EMPTY)
			break;
		if (k != key)
			continue;
		/* Pairs with the release stores of val in code_copy() and
		 * copy_publish(): the copy before its address.  Acquire
		 * also keeps the count's second read after it. */
		*v = atomic_load_explicit(&t[i].val, memory_order_acquire);
		if (likely(atomic_load_explicit(&sh->seq,
						memory_order_relaxed) == seq))
			return LK_FOUND;
		*v = 0;
		return LK_RETRY;
	}
	/* A miss counts only if the table was not given back meanwhile; the
	 * key's acquire loads keep this read after them. */
	return atomic_load_explicit(&sh->seq, memory_order_relaxed) == seq &&
			       n <= mask ?
		       LK_ABSENT :
		       LK_RETRY;
}

/* Under sh->mu: @key's slot in the current table; with @insert, made
 * (value 0) if there is none.  NULL if absent (or without memory). */
struct slot *shard_slot(struct shard *sh, uintptr_t key, uint64_t h,
			bool insert);

/* @key's value, 0 if it has none, exact: under the mutex.  Any thread. */
COLD uint64_t map_get_locked(uintptr_t key);

/* @key's value, 0 if it has none.  Any thread; lock-free but for a lookup
 * that met a rehash. */
static inline uint64_t map_get(uintptr_t key)
{
	uint64_t v;

	if (likely(map_lookup(key, &v) != LK_RETRY))
		return v;
	return map_get_locked(key);
}

/*
 * Delete @key, whose code object is being destroyed (no one else holds
 * it, so no one inserts it meanwhile): true and its last value in *@v if
 * it was there.  Takes the shard's mutex only for a key the lock-free
 * lookup finds.  Any thread.
 */
bool map_forget(uintptr_t key, uint64_t *v);

/* Keep @copy (a copy of destroyed code) for a later code object; without
 * memory for the list it is dropped (never unmapped: one copy's slot).
 * Any thread; takes the list's mutex, which nests inside a shard's. */
void free_push(void *copy);
/* A kept copy, or NULL; lock-free when none is kept.  Any thread. */
void *free_pop(void);

/* The mutexes made anew: once at load, and in a fork child (whose
 * copies of them may be held by threads it does not have). */
void map_init(void);

#pragma GCC visibility pop

#endif /* JITRING_PY_CODEMAP_H */
