/* SPDX-License-Identifier: MIT */
/*
 * The rings engine: per-thread single-producer/single-consumer rings of
 * encoded jitdump groups, drained in timestamp order by one background
 * flusher thread per writer.  This header holds the engine's shared data
 * structures and its entry points.  The files:
 *   ring.c     the write path, on the JIT thread (producer);
 *   thread.c   a thread's rings: attach, detach, growth;
 *   flusher.c  the flusher thread: the merge, flushes, sleep (consumer);
 *   pool.c     ready rings, the registry, the budget, the code_index map;
 *   rings.c    start, stop, flush requests, fork.
 * docs/design.md argues the ordering protocol in full.
 */
#ifndef JITRING_SRC_RINGS_H
#define JITRING_SRC_RINGS_H

#include <ck_ring.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

#include "demand.h"
#include "engine_ops.h"
#include "internal.h"
#include "jitring/jitdump.h"

struct jitring_group;

/* jr_ring.pub: (tail << 32) | bits. */
#define JR_PUB_BUSY 1u /* the owner is between its timestamp and commit */
#define JR_PUB_LATE 2u /* the flusher stopped waiting for this ring */
#define JR_PUB_TRIM 4u /* the flusher is discarding the idle ring's pages */
#define JR_PUB_BITS 0xffffffffu
#define JR_PUB_TAIL(v) ((uint32_t)((v) >> 32))
#define JR_PUB(tail) ((uint64_t)(tail) << 32)

/* jr_ring.own: who owns the ring; CAS decides who frees at close. */
enum jr_own {
	JR_OWN_POOLED = 0,   /* flusher's, ready to hand out */
	JR_OWN_ACTIVE = 1,   /* a thread's */
	JR_OWN_DETACHED = 2, /* the thread let go; flusher drains, recycles */
	JR_OWN_ORPHAN = 3,   /* writer closed under a live thread: the thread
			      * frees the control block */
	JR_OWN_NEXT = 4,     /* made by the flusher as the larger successor
			      * of a ring whose owner asked to grow */
};

/* Pseudo-records that live only in rings, never in the file. */
#define JR_ID_PAD 0xfffffff0u   /* skip to the end of the buffer */
#define JR_ID_JUMBO 0xfffffff1u /* group in a heap buffer, see below */
/* Fewer than this many bytes before the end of the buffer are padding. */
#define JR_MIN_RECORD 16u

/* A group larger than half a ring: {prefix; u64 ptr; u64 len}. */
struct jr_jumbo {
	uint32_t id;
	uint32_t total_size;
	uint64_t timestamp;
	uint64_t ptr;
	uint64_t len;
};

/*
 * The map of handed-out code_index values, so jitring_move() can refuse an
 * index that was reserved but never returned.  Blocks are 64-aligned, so a
 * block is exactly one word, owned by the thread holding the block: setting
 * a bit is a plain store.  Chunks of 4M ids (512 KiB, zero pages until
 * touched) are allocated ahead by the flusher.
 */
#define JR_IDMAP_SHIFT 22u
#define JR_IDMAP_WORDS (1u << (JR_IDMAP_SHIFT - 6))
#define JR_IDMAP_CHUNKS 1024u
/* Ids whose idmap words the flusher keeps resident ahead of the next block:
 * a block for each of 4096 new threads (32 KiB of the map). */
#define JR_IDMAP_AHEAD (4096u * JR_ID_BLOCK)

struct jr_ring {
	/* Producer line: written by the owning thread on every write. */
	alignas(JITRING_CACHELINE) _Atomic uint64_t pub;
	_Atomic uint64_t stamp; /* timestamp of the newest write begun */
	uint32_t tail;          /* == JR_PUB_TAIL(pub), producer's copy */
	uint32_t head_cache;    /* the last head the producer read */
	uint64_t next_id;       /* next code_index of the reserved block */
	uint64_t id_end;
	_Atomic uint64_t *id_word; /* the block's word in the idmap */
	uint64_t id_bits;          /* our copy of *id_word */
	uint32_t pid;
	uint32_t tid;
	struct jitring *jr;
	struct jr_ring *tls_next;    /* the owning thread's rings */
	struct jr_ring *attach_next; /* on the attach stack / pending list */
	uint8_t *buf;
	uint32_t size;
	uint32_t mask;
	struct jr_slab *slab; /* a spare's slab (its control block), or NULL:
			       * malloc'd */

	/* Consumer line: written by the flusher after each batch. */
	alignas(JITRING_CACHELINE) _Atomic uint32_t head;
	_Atomic uint32_t space_waiter; /* owner sleeps on head for space */
	_Atomic uint32_t own;          /* enum jr_own */
	_Atomic uint32_t grow_req;     /* owner: "I keep filling, grow me" */
	_Atomic(struct jr_ring *) next_ring; /* flusher: the larger ring */

	/* Flusher-private. */
	alignas(JITRING_CACHELINE) uint32_t rd; /* next byte to emit */
	uint32_t seen_tail;    /* tail visible at this round's scan */
	uint32_t busy_tail;    /* tail when BUSY was first seen */
	uint32_t flush_target; /* head must pass this for the flush ticket */
	uint64_t lb;           /* no later commit has a smaller timestamp */
	uint64_t busy_since;   /* round time BUSY was first seen at busy_tail */
	uint64_t idle_since;   /* round time of the last commit seen */
	uint32_t reg_idx;      /* index in the registry */
	uint32_t pk_pos;       /* the next group: offset in buf, */
	uint32_t pk_len;       /* bytes it takes in the ring, */
	uint32_t pk_records;   /* its records, */
	uint64_t pk_ts;        /* its timestamp, */
	uint8_t *pk_jumbo;     /* its heap buffer if any, */
	uint64_t pk_jlen;      /* and that buffer's length */
	uint32_t head_local;   /* the head we last published */
	uint32_t lap_start;    /* where the last owner began: a multiple of
				* size (jitring_pool_put()) */
	bool trimmed;          /* pages discarded since the last commit */
	bool late_marked;      /* we set LATE on it and it has not committed */
	bool seen_busy;        /* BUSY at this round's scan */
	bool grow_asked;       /* owner-private: grow_req already set */
};

/*
 * A slab of spare rings' control blocks (pool.c): JR_SLAB_BYTES aligned to
 * its size, this header in the first JR_CTL_BYTES, then blocks 1 to
 * JR_SLAB_RINGS, 8 to a page (none straddles two).
 */
#define JR_SLAB_BYTES (128u << 10)
#define JR_CTL_BYTES 512u
#define JR_SLAB_RINGS (JR_SLAB_BYTES / JR_CTL_BYTES - 1)

struct jr_slab {
	/* Blocks not yet freed.  Stored (release) after the header's other
	 * fields, before any block is enqueued: pairs with the acquire load
	 * in jitring_spare_take() (TSan cannot see ck_ring's ordering). */
	_Atomic uint32_t refs;
	uint32_t size; /* each ring's buffer: its stock's size */
	uint8_t *bufs; /* block i's buffer is bufs + (i - 1) * size */
};

/* A stock of spare rings of one size (pool.c). */
struct jr_spares {
	ck_ring_t q; /* control blocks: the flusher enqueues, threads dequeue */
	ck_ring_buffer_t *buf;
	uint32_t target; /* keep this many (0: none) */
	uint32_t size;   /* each ring's buffer */
};

struct jr_merge; /* flusher.c */

struct jr_rings {
	struct jitring *jr;
	pthread_t thread;
	/*
	 * A flusher thread exists.  Changed under run_lock (start, pause,
	 * resume) or fork_lock (a fork child's restart) by a thread holding
	 * the engine; read without a lock by flush: release/acquire.
	 */
	_Atomic bool running;
	pthread_mutex_t run_lock;   /* pause vs resume vs each other */
	bool paused;                /* under run_lock: a pause stopped it */
	_Atomic uint32_t pause_req; /* jitring_pause(): exit when quiet */
	pid_t flusher_tid;          /* set by the flusher, read after join */
	uint32_t pid;

	/* Ring pool: the flusher enqueues, registering threads dequeue. */
	ck_ring_t pool;
	ck_ring_buffer_t *pool_buf;
	uint32_t pool_cap;
	_Atomic uint32_t pool_low;    /* refill when below (adaptive) */
	_Atomic uint32_t pool_taken;  /* rings threads took since the last
				       * round (the demand) */
	uint32_t pool_floor;          /* ready_rings: never keep fewer */
	struct jr_demand demand;      /* flusher: rings taken per window */
	_Atomic uint32_t pool_gen;    /* futex: bumped after each refill */
	_Atomic uint32_t pool_want;   /* the pool ran low: refill now */
	_Atomic uint32_t pool_missed; /* threads that found the pool empty */
	uint32_t grow_seen;           /* flusher: jr->grow_asks last served */
	/*
	 * Spare rings: rings of which no page is resident, control block
	 * included (a slab's, see pool.c), not registered and not in the
	 * budget.  The flusher enqueues their control blocks; a thread that
	 * needs a ring the flusher has not made reserves its size in the
	 * budget, dequeues one under make_lock, sets it up and pushes it to
	 * the attach stack, as if it had made it, without mmap or malloc.
	 * spare: ring_min, for a first write that finds the pool empty;
	 * grow: twice that, for a first ring that fills before the flusher
	 * made its larger successor (a storm's threads).
	 */
	struct jr_spares spare, grow;
	/* Rings threads made themselves, for the flusher to register. */
	_Atomic(struct jr_ring *) attach;
	_Atomic uint64_t ring_bytes; /* bytes of ring buffers allocated */
	_Atomic uint64_t grow_bytes; /* of which above ring_min per ring */
	_Atomic uint32_t pool_full;  /* the budget is used up */

	/* Flush tickets. */
	_Atomic uint64_t flush_req;
	_Atomic uint64_t flush_done;
	_Atomic uint32_t flush_seq; /* futex for flush waiters */

	_Atomic uint32_t stop; /* close asked the flusher to finish */
	_Atomic(_Atomic uint64_t *) idmap[JR_IDMAP_CHUNKS];
	uint64_t idmap_warm; /* flusher: idmap words resident below this id */
	pthread_mutex_t fork_lock; /* held by the flusher during a round */
	/*
	 * Read-held by a producer from making a ring (or taking a spare)
	 * until it is on the attach stack; write-held across fork() so that
	 * no ring is in between (reachable from nowhere, leaked in the
	 * child).
	 */
	pthread_rwlock_t make_lock;

	/* Flusher-private from here on. */
	struct jr_ring **reg; /* every ring made, but untaken spares */
	uint32_t nreg;
	uint32_t reg_cap;
	struct jr_ring *attach_pending; /* taken from attach, not registered */
	uint64_t file_off;
	uint64_t flush_ticket; /* ticket being worked on, or 0 */
	uint64_t req_seen;     /* flush_req the last round loaded */
	bool stop_seen;        /* the last round saw stop */
	bool pause_seen;       /* the last round saw pause_req */
	bool failed;           /* the file failed: drop everything */
	struct jr_merge *m;
};

/*
 * The engine's entry points, for the front door (writer.c, and the
 * dispatch in engine.h): the write path (ring.c), thread detach
 * (thread.c), and its life (rings.c).
 */
int jitring_rings_start(struct jitring *jr);
int64_t jitring_rings_write(struct jitring *jr, const struct jitring_group *g);
int jitring_rings_move(struct jitring *jr, uint64_t code_index,
		       const void *new_addr, const void *old_addr,
		       uint64_t code_size);
int jitring_rings_flush(struct jitring *jr);
int jitring_rings_stop(struct jitring *jr);
/*
 * exit(3) with the writer CLOSING and no user left: what close does
 * before it frees, waiting for the flusher until @until (CLOCK_REALTIME).
 * Return: 0, or -ETIMEDOUT with the flusher still running (maybe inside a
 * write).
 */
int jitring_rings_exit(struct jitring *jr, const struct timespec *until);
int jitring_rings_thread_detach(struct jitring *jr);
void jitring_rings_kick(struct jitring *jr);
void jitring_rings_fork_prepare(struct jitring *jr);
void jitring_rings_fork_parent(struct jitring *jr);
uint32_t jitring_rings_fork_child(struct jitring *jr);
/* A fork child's first call: start its engine.  Inside jitring_enter().
 * Return: the writer's state after the attempt. */
int jitring_rings_restart(struct jitring *jr);
/* jitring_pause(): flush, then let the flusher thread exit once quiet. */
int jitring_rings_pause(struct jitring *jr);
/*
 * After pthread_join() of thread @tid: wait, briefly and boundedly, until
 * the kernel no longer counts it in the process (rings.c).
 */
void jitring_wait_gone(pid_t tid);
/* Start the flusher again after a pause (a waker found JR_STOPPED). */
void jitring_rings_resume(struct jitring *jr);
/*
 * A lossless writer's ring is full and the sleep word says JR_STOPPED: no
 * flusher.  Start one, or else drain on this thread (after whoever holds
 * the engine now).  Return: 0 to look at the ring again; -EDEADLK
 * (counted) from a signal handler that interrupted this thread's own
 * pause or flush, which holds the engine.
 */
int jitring_rings_stalled(struct jitring *jr);

/*
 * The kit's hook (engine_ops.h), for every writer (the same ops each
 * time).  seq_cst: with the flusher's seq_cst load before it sleeps, the
 * Dekker pair that makes a set pushed after this seen, or its maker see
 * the flusher asleep.
 */
void jitring_rings_kit_register(const struct jr_kit_ops *ops);

/* The engine's operations (rings.c), for 4-engine. */
extern const struct jitring_engine_ops jitring_rings_ops;

/*
 * Where the next group at or after @rd starts (before @end), past the gap
 * at the end of the buffer and PAD records; @end if there is none.  *@pre
 * gets that group's prefix (its id is a record's or JR_ID_JUMBO).
 */
static inline uint32_t jitring_ring_next_group(const struct jr_ring *r,
					       uint32_t rd, uint32_t end,
					       struct jitdump_prefix *pre)
{
	while (rd != end) {
		uint32_t pos = rd & r->mask, to_end = r->size - pos;

		if (to_end < JR_MIN_RECORD) {
			rd += to_end;
			continue;
		}
		memcpy(pre, r->buf + pos, sizeof(*pre));
		if (pre->id != JR_ID_PAD)
			break;
		rd += pre->total_size;
	}
	return rd;
}

/* The bytes (@len) and records of the group at @p (ends at its LOAD or
 * MOVE; a jumbo's heap buffer or ring bytes). */
static inline void jitring_group_size(const uint8_t *p, uint32_t *len,
				      uint32_t *records)
{
	struct jitdump_prefix pre;
	uint32_t off = 0, n = 0;

	do {
		memcpy(&pre, p + off, sizeof(pre));
		off += pre.total_size;
		n++;
	} while (pre.id != JIT_CODE_LOAD && pre.id != JIT_CODE_MOVE);
	*len = off;
	*records = n;
}

/* The flusher's sleep word, jr->sleep. */
enum jr_sleep {
	JR_AWAKE = 0,
	JR_NAP = 1,     /* timed sleep: wake only on ring pressure or request */
	JR_DEEP = 2,    /* wake on any commit */
	JR_STOPPED = 3, /* paused: no flusher; a waker starts one */
};

void jitring_rings_wake_slow(struct jitring *jr, uint32_t s);

/**
 * jitring_rings_wake() - Wake the flusher if it sleeps.
 * @jr: writer.
 * @force: wake from a nap too (a request or a ring under pressure).
 *
 * Callers make their news visible with a seq_cst operation first; the
 * flusher stores its sleep mode seq_cst and then re-checks for news (a
 * store-load Dekker pair: one of the two sees the other).
 */
static inline void jitring_rings_wake(struct jitring *jr, bool force)
{
	uint32_t s = atomic_load_explicit(&jr->sleep, memory_order_seq_cst);

	if (likely(s == JR_AWAKE) || (s == JR_NAP && !force))
		return;
	jitring_rings_wake_slow(jr, s);
}

/*
 * jitring_rings_nudge() - Wake the flusher only from DEEP sleep: for news
 * that does not need a flusher, such as a ring let go (it is recycled at
 * the next round, whenever that is).  Unlike jitring_rings_wake() it never
 * starts a paused engine's flusher again: a thread exiting after
 * jitring_pause() must not undo the pause.
 */
static inline void jitring_rings_nudge(struct jitring *jr)
{
	/* seq_cst: pairs with the flusher's store of its sleep mode. */
	uint32_t s = atomic_load_explicit(&jr->sleep, memory_order_seq_cst);

	if (s == JR_DEEP)
		jitring_rings_wake_slow(jr, s);
}

#endif /* JITRING_SRC_RINGS_H */
