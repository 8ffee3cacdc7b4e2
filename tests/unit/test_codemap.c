// SPDX-License-Identifier: MIT
/*
 * The Python module's code map (python/jitring/codemap.c), without Python:
 *  1. one thread: inserted keys read back through the lock-free lookup and
 *     the locked one, through the rehashes that grow a shard; a forgotten
 *     key reads 0, its slot is reused, and a shard that churns (insert,
 *     forget, again) rehashes at the same size, never losing a live key;
 *  2. readers that look up all the time while a writer inserts, changes,
 *     forgets and re-inserts keys (tables given back under the readers):
 *     a lookup's value is always the key's own, or 0, never another
 *     key's or a table's garbage; LK_RETRY is the only way it says "not
 *     sure" (then the locked read is exact);
 *  3. the free list: what is pushed comes back, the last first, and none
 *     when empty.
 * Run under ASan and TSan as well (the unit suite).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "../../python/jitring/codemap.h"

/* Keys as code objects' addresses, one per @i: 64-byte steps in 97
 * areas, each over many 64 KiB regions (the placement hashes the region
 * and adds the offset). */
static uintptr_t key_of(unsigned i)
{
	return (uintptr_t)0x7f0000000000ull + ((uintptr_t)(i % 97) << 28) +
	       (uintptr_t)(i / 97) * 64u + 64u;
}

/* A key's own value, with a generation: never 0, never another key's. */
static uint64_t val_of(uintptr_t key, unsigned gen)
{
	return ((uint64_t)key << 8) | (gen & 0xffu) | 1u;
}

static bool val_is_of(uintptr_t key, uint64_t v)
{
	return (v >> 8) == (uint64_t)key && (v & 1u);
}

/* Insert or change @key's value, as the module claims and publishes. */
static void put(uintptr_t key, uint64_t v)
{
	uint64_t h = key_hash(key);
	struct shard *sh = key_shard(h);
	struct slot *sl;

	pthread_mutex_lock(&sh->mu);
	sl = shard_slot(sh, key, h, true);
	T_REQUIRE(sl);
	/* Pairs with the acquire load of val in map_lookup(). */
	atomic_store_explicit(&sl->val, v, memory_order_release);
	pthread_mutex_unlock(&sh->mu);
}

static void single_thread(void)
{
	enum { N = 20000 };
	uint64_t tables0 = atomic_load(&codemap_ctr.map_tables), v;
	unsigned bad = 0, i, round;

	for (i = 0; i < N; i++)
		put(key_of(i), val_of(key_of(i), 0));
	for (i = 0; i < N; i++) {
		if (map_get(key_of(i)) != val_of(key_of(i), 0) ||
		    map_get_locked(key_of(i)) != val_of(key_of(i), 0))
			bad++;
	}
	T_CHECK_EQ(bad, 0);
	/* 20,000 keys over 256 shards: every shard grew past its first
	 * table. */
	T_CHECK(atomic_load(&codemap_ctr.map_tables) - tables0 > 256);
	T_CHECK(atomic_load(&codemap_ctr.map_bytes) > 0);

	/* Forget every other key: gone, the rest still there. */
	for (i = 0; i < N; i += 2) {
		T_REQUIRE(map_forget(key_of(i), &v));
		if (v != val_of(key_of(i), 0))
			bad++;
	}
	T_CHECK_EQ(bad, 0);
	T_CHECK(!map_forget(key_of(0), &v));	/* already gone */
	for (i = 0; i < N; i++) {
		uint64_t want = i % 2 ? val_of(key_of(i), 0) : 0;

		if (map_get(key_of(i)) != want)
			bad++;
	}
	T_CHECK_EQ(bad, 0);

	/* Churn: the forgotten keys come and go many times; the live ones
	 * never move out of reach, and the tables stay bounded. */
	tables0 = atomic_load(&codemap_ctr.map_tables);
	for (round = 1; round <= 40; round++) {
		for (i = 0; i < N; i += 2)
			put(key_of(i), val_of(key_of(i), round));
		for (i = 0; i < N; i += 2)
			T_REQUIRE(map_forget(key_of(i), &v));
	}
	for (i = 1; i < N; i += 2)
		if (map_get(key_of(i)) != val_of(key_of(i), 0))
			bad++;
	T_CHECK_EQ(bad, 0);
	/* Same-size rehashes give tables back and take them again: the
	 * churn made some, but not one per insert. */
	T_CHECK(atomic_load(&codemap_ctr.map_tables) - tables0 < 40u * N / 64);
	for (i = 1; i < N; i += 2)
		T_REQUIRE(map_forget(key_of(i), &v));
}

/* ---- readers against a writer --------------------------------------- */

enum { KEYS = 4096, READERS = 3, WRITER_ROUNDS = 60 };

static _Atomic bool writer_done;
static _Atomic unsigned long reads, wrong, retries;

static void *reader(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg * 7919u;
	unsigned long n = 0, w = 0, r = 0;

	/* At least one full pass after the writer is done. */
	for (;;) {
		bool done = atomic_load_explicit(&writer_done,
						 memory_order_acquire);

		for (unsigned k = 0; k < KEYS; k++, i++) {
			uintptr_t key = key_of(i % (KEYS * WRITER_ROUNDS));
			uint64_t v;
			enum lookup lk = map_lookup(key, &v);

			if (lk == LK_RETRY) {
				r++;
				v = map_get_locked(key);
			}
			if (v != 0 && !val_is_of(key, v))
				w++;
			n++;
		}
		if (done)
			break;
	}
	atomic_fetch_add(&reads, n);
	atomic_fetch_add(&wrong, w);
	atomic_fetch_add(&retries, r);
	return NULL;
}

static void readers_and_writer(void)
{
	pthread_t th[READERS];
	uint64_t tables0 = atomic_load(&codemap_ctr.map_tables), v;
	unsigned i, round;

	for (i = 0; i < READERS; i++)
		T_REQUIRE(pthread_create(&th[i], NULL, reader,
					 (void *)(uintptr_t)i) == 0);
	for (round = 0; round < WRITER_ROUNDS; round++) {
		/* New keys each round (as new code objects at new
		 * addresses), a value changed, then all forgotten: the DEAD
		 * slots pile up and every shard rehashes, giving its table
		 * back under the readers. */
		unsigned base = round * KEYS;

		for (i = base; i < base + KEYS; i++)
			put(key_of(i), val_of(key_of(i), round));
		for (i = base; i < base + KEYS; i += 3)
			put(key_of(i), val_of(key_of(i), round + 1));
		for (i = base; i < base + KEYS; i++)
			T_REQUIRE(map_forget(key_of(i), &v));
	}
	/* Pairs with the acquire load in reader(). */
	atomic_store_explicit(&writer_done, true, memory_order_release);
	for (i = 0; i < READERS; i++)
		pthread_join(th[i], NULL);
	printf("%lu lookups, %lu retried under the mutex, %lu tables made\n",
	       atomic_load(&reads), atomic_load(&retries),
	       (unsigned long)(atomic_load(&codemap_ctr.map_tables) - tables0));
	T_CHECK(atomic_load(&reads) >= (unsigned long)READERS * KEYS);
	T_CHECK_EQ(atomic_load(&wrong), 0);
	T_CHECK(atomic_load(&codemap_ctr.map_tables) > tables0);
}

static void free_list(void)
{
	static char a, b;
	uint64_t freed0 = atomic_load(&codemap_ctr.copies_freed);

	T_CHECK(free_pop() == NULL);
	free_push(&a);
	free_push(&b);
	T_CHECK_EQ(atomic_load(&codemap_ctr.copies_freed) - freed0, 2);
	T_CHECK(free_pop() == &b);
	T_CHECK(free_pop() == &a);
	T_CHECK(free_pop() == NULL);
}

int main(void)
{
	map_init();
	single_thread();
	readers_and_writer();
	free_list();
	return t_report();
}
