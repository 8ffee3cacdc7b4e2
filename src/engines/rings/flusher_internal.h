/* SPDX-License-Identifier: MIT */
/*
 * The flusher's parts, to each other: the merge state (struct jr_merge)
 * with its heap and batches, what one round saw (struct jr_round), and
 * the calls between the files.  The flusher thread's own file (flusher.c)
 * runs rounds (rounds.c), which merge (merge.c) into batches that are
 * written (batch.c): calls go that way only.  All of it is
 * flusher-private: used by the flusher thread, or with none by the one
 * caller that runs its rounds in its place (jitring_flusher_drain()).
 */
#ifndef JITRING_SRC_FLUSHER_INTERNAL_H
#define JITRING_SRC_FLUSHER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "rings_types.h"

/* A batch: at most this many iovecs, groups and bytes. */
#define JR_IOV_MAX 1024u
#define JR_BATCH_GROUPS 4096u
#define JR_BATCH_BYTES (8u << 20)
/* Ring bytes prefetched at most at once (a peeked group, a batch's
 * iovec). */
#define JR_PREFETCH_MAX 4096u

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

/*
 * The merge's state (jr_rings.m): its heap and list of BUSY rings (as
 * large as the registry, jitring_merge_fit()), and the batches with the
 * write thread's hand-off.  Flusher-private, but for the atomics the
 * write thread shares and the batches posted to it.
 */
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

/* What one round saw and decided, passed between its steps. */
struct jr_round {
	uint64_t T;        /* its clock reading, before fence (F) */
	uint64_t W;        /* watermark: groups stamped <= W are written */
	uint64_t deadline; /* earliest hold-back deadline, or UINT64_MAX */
	bool stopping;     /* close asked us to finish */
	bool snap;         /* a new flush ticket: record each ring's target */
	bool attached;     /* every ring threads made is registered */
	bool any_busy;     /* some ring is between timestamp and commit */
	bool settled;      /* the merge took every posted batch back */
};

/* What a round decided for the sleep that follows it. */
struct jr_round_out {
	uint32_t mode;    /* enum jr_sleep */
	uint64_t timeout; /* ns, 0 for none */
	bool done;        /* stop: everything is written */
};

/* merge.c: step 2 and 3's peek, every ring's published tail and bits,
 * its bound, its next group into the heap, and the watermark the scan
 * allows. */
void jitring_merge_scan(struct jr_rings *e, struct jr_round *rd);
/* merge.c: steps 3-4, the watermark settled (stalled rings marked LATE),
 * every group stamped at or below it into batches, the batches handed
 * on (all of them into the file when a flush or close waits). */
void jitring_merge_run(struct jr_rings *e, struct jr_round *rd);

/* batch.c: hand the batch being filled on, to the write thread or to the
 * file here (@full: it filled up, the merge is behind). */
void jitring_batch_submit(struct jr_rings *e, bool full);
/* batch.c: everything merged so far in the file, every head published. */
void jitring_batch_settle(struct jr_rings *e);
/* batch.c: every posted batch finished, the write thread joined and out
 * of the process's thread count (if it ran). */
void jitring_batch_io_stop(struct jr_rings *e);
/* batch.c: whether batches go to a write thread ($JITRING_WRITE_THREAD,
 * the CPUs); enum jr_io_policy.  On the opening thread. */
uint32_t jitring_batch_io_policy(void);

/* rounds.c: one round, and how to sleep after it (@out). */
void jitring_round_run(struct jr_rings *e, struct jr_round_out *out);
/* rounds.c: no rounds for a while (a pause): give back now what idle
 * rounds would.  Under fork_lock. */
void jitring_round_give_back_idle(struct jr_rings *e);
/* rounds.c: does the kit want a round (a set below its mark)?  seq_cst,
 * after the flusher stored its sleep mode. */
bool jitring_round_kit_wanted(struct jitring *jr);

#endif /* JITRING_SRC_FLUSHER_INTERNAL_H */
