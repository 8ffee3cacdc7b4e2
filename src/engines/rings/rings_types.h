/* SPDX-License-Identifier: MIT */
/*
 * The rings engine's data structures, shared by its files and by no one
 * else: a ring (struct jr_ring) and its published word, the pseudo-records
 * that live only in rings, the code_index map, the spare rings' slabs, the
 * engine state (struct jr_rings, jr->eng) and the flusher's sleep word;
 * and the two readers of a ring's bytes that the producer's recycling and
 * the flusher's merge share.  Which thread writes which field is said at
 * the field; docs/design.md argues the ordering protocol in full.
 * (LTTng-UST's frontend_types.h; the engine's face is rings.h, its files'
 * entry points to each other rings_internal.h.)
 */
#ifndef JITRING_SRC_RINGS_TYPES_H
#define JITRING_SRC_RINGS_TYPES_H

#include <ck_ring.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

#include "common/demand.h"
#include "core/internal.h"
#include "jitring/jitdump.h"

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

struct jr_merge; /* flusher_internal.h */

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

#endif /* JITRING_SRC_RINGS_TYPES_H */
