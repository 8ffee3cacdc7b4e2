/* SPDX-License-Identifier: MIT */
/*
 * Rings engine: the flusher thread (flusher.c), which merges every ring
 * into the file in timestamp order and keeps what threads need ready, as
 * the engine's life (rings.c) and the registry (pool.c) call it.  Its
 * parts' calls to each other are in flusher_internal.h.
 */
#ifndef JITRING_SRC_FLUSHER_H
#define JITRING_SRC_FLUSHER_H

#include <stdint.h>

#include "rings_types.h"

/* The merge state (heap, batch); freed by jitring_flusher_fini(). */
int jitring_flusher_init(struct jr_rings *e);
void jitring_flusher_fini(struct jr_rings *e);
/*
 * Size the merge's per-ring arrays for @cap rings; 0 frees them (merge.c).
 * The registry (pool.c) keeps them as large as itself.  Return: 0 or
 * -ENOMEM (the arrays as they were).
 */
int jitring_merge_fit(struct jr_rings *e, uint32_t cap);
/* The thread: rounds until close's last one (pthread start routine). */
void *jitring_flusher_main(void *arg);
/*
 * With no flusher thread (paused, and it could not be started again), run
 * its rounds on the calling thread until every entry committed before the
 * call is in the file (after jitring_rings_stop() set stop: until its last
 * round, CLOSE included), then give back what idle rounds would.  The
 * caller holds run_lock and saw running false, so no other thread runs
 * rounds or reads the flusher-private state.  Return: 0.
 */
int jitring_flusher_drain(struct jr_rings *e);
/*
 * fork(), under fork_lock: take back the batch the write thread may hold
 * (prepare), so that the child inherits none; the child has no write
 * thread (child) (batch.c).
 */
void jitring_batch_fork_prepare(struct jr_rings *e);
void jitring_batch_fork_child(struct jr_rings *e);
/* Append a CLOSE record if JITRING_F_WRITE_CLOSE asks for one (batch.c). */
void jitring_batch_write_close(struct jr_rings *e);

#endif /* JITRING_SRC_FLUSHER_H */
