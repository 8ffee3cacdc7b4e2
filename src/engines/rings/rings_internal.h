/* SPDX-License-Identifier: MIT */
/*
 * The rings engine's files, to each other: the entry points its
 * operations table is made of, how a producer or the kit wakes the
 * flusher, and the calls that start, resume or stand in for a flusher
 * (rings.c).  Nothing outside engines/rings includes it but the tests.  The
 * files:
 *   rings.c    the engine's life: start, stop, exit, flush requests,
 *              pause and resume, fork, waking; its operations table;
 *   ring.c     the write path, on the JIT thread (producer);
 *   thread.c   a thread's rings: attach, detach, growth;
 *   pool.c     ready rings, the registry, the budget, the code_index map;
 *   flusher.c  the flusher thread (consumer): its main loop and sleep,
 *              with its parts rounds.c (a round, trims, growth), merge.c
 *              (the scan, the heap, the merge) and batch.c (batches, the
 *              write thread).
 * (LTTng-UST's frontend_internal.h.)
 */
#ifndef JITRING_SRC_RINGS_INTERNAL_H
#define JITRING_SRC_RINGS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/engine_ops.h"
#include "core/internal.h"
#include "rings_types.h"

struct jitring_group;

/*
 * The engine's operations (engine_ops.h), which rings.c gathers into
 * jitring_rings_ops: the write path (ring.c), and its life (rings.c).
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
void jitring_rings_kick(struct jitring *jr);
void jitring_rings_fork_prepare(struct jitring *jr);
void jitring_rings_fork_parent(struct jitring *jr);
uint32_t jitring_rings_fork_child(struct jitring *jr);
/* A fork child's first call: start its engine.  Inside jitring_enter().
 * Return: the writer's state after the attempt. */
int jitring_rings_restart(struct jitring *jr);
/* jitring_pause(): flush, then let the flusher thread exit once quiet. */
int jitring_rings_pause(struct jitring *jr);
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

/* What jitring_rings_wake() does once the flusher sleeps (rings.c). */
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

#endif /* JITRING_SRC_RINGS_INTERNAL_H */
