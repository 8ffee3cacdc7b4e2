/* SPDX-License-Identifier: MIT */
/*
 * Rings engine: a thread and its rings (thread.c).
 */
#ifndef JITRING_SRC_THREAD_H
#define JITRING_SRC_THREAD_H

#include "rings_types.h"

/* The calling thread's rings, most recently used first (hot path). */
extern __thread struct jr_ring *jitring_tls_rings
	__attribute__((tls_model("initial-exec")));

/*
 * The calling thread's first write to @jr: a ring from the pool, or one it
 * makes.  Restarts the engine in a fork child.  Return: the ring (now at
 * the front of the list), or NULL with *@err set (-ESHUTDOWN, -ENOMEM or
 * the file's error).
 */
struct jr_ring *jitring_thread_attach(struct jitring *jr, int *err);
/*
 * @r is full: trade it for one twice as large if the growth budget allows.
 * Return: the new ring (at @r's place in the list), or NULL (wait).
 */
struct jr_ring *jitring_thread_grow(struct jitring *jr, struct jr_ring *r);
/* Let go of the calling thread's rings of @jr (NULL: all); the count. */
int jitring_thread_release(struct jitring *jr);
/* A fork child: drop the forking thread's rings of @jr (the parent's). */
void jitring_thread_fork_child(struct jitring *jr);
/* Set up the engine's make_lock (start, and in a fork child). */
void jitring_thread_make_lock_init(struct jr_rings *e);

#endif /* JITRING_SRC_THREAD_H */
