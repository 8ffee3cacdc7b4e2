/* SPDX-License-Identifier: MIT */
/*
 * Rings engine: the ring pool, the registry, the memory budget and the
 * code_index map (pool.c).  "Flusher" means: called by the flusher thread,
 * or by whoever holds the engine exclusively (start, close, a fork child).
 */
#ifndef JITRING_SRC_POOL_H
#define JITRING_SRC_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "rings_types.h"

/* Unmap a ring's buffer and free its control block. */
void jitring_ring_free(struct jr_ring *r);
/* Free a ring's control block alone (malloc'd, or a slab's block). */
void jitring_ring_ctl_free(struct jr_ring *r);
/* A new ring within the budget, not yet registered (any thread). */
struct jr_ring *jitring_ring_alloc(struct jr_rings *e, uint32_t size,
				   uint64_t lb);
/* How large a thread's ring may grow now (any thread). */
uint32_t jitring_ring_target(struct jr_rings *e);

/* A new registered ring, idle since @now (flusher). */
struct jr_ring *jitring_pool_new_ring(struct jr_rings *e, uint64_t now,
				      uint32_t size);
/* Take a ring out of the registry, give its bytes back, free it (flusher). */
void jitring_pool_drop(struct jr_rings *e, struct jr_ring *r);
/* Hand a drained ring to the pool, or free it if the pool is full. */
void jitring_pool_put(struct jr_rings *e, struct jr_ring *r, uint64_t now);
/* Refill the pool to its (adaptive) mark, trim it above twice it.
 * Return: when the mark next falls (the next demand window), or
 * UINT64_MAX at the floor. */
uint64_t jitring_pool_maintain(struct jr_rings *e, uint64_t now);
/* Refill both stocks of spare rings to their targets (flusher). */
void jitring_spare_maintain(struct jr_rings *e);
/* A spare ring of @sp, or NULL (any thread, under make_lock read side). */
struct jr_ring *jitring_spare_take(struct jr_rings *e, struct jr_spares *sp);
/* The stocks of spare rings: made (start), freed (close, failed start),
 * emptied (a fork child: jitring_pool_release() freed the rings). */
int jitring_spares_init(struct jr_rings *e);
/* vm.overcommit_memory is 2 (strict) on this host: every mapping is
 * charged to the commit limit when made, touched or not, so untaken
 * spares would take 400 MiB of it; the stocks are made smaller. */
bool jitring_host_overcommit_strict(void);
void jitring_spares_fini(struct jr_rings *e);
void jitring_spares_reset(struct jr_rings *e);
/*
 * Register the rings threads made themselves (the attach stack).  False
 * if one could not be registered (no memory): it may hold entries older
 * than anything else, so the round writes nothing and completes no flush.
 */
bool jitring_pool_attach(struct jr_rings *e, uint64_t now);
/* Fill the pool before the flusher runs (start, fork restart). */
int jitring_pool_prefill(struct jr_rings *e);
/* Free every ring: close (after the flusher stopped), a failed start, or
 * a fork child (@child: drop what the parent had not written). */
void jitring_pool_release(struct jr_rings *e, bool child);

/* The idmap chunk for @id, allocated if missing (NULL if out of memory). */
_Atomic uint64_t *jitring_idmap_chunk(struct jr_rings *e, uint64_t id);
/* Have the chunk for the next blocks ready before a producer needs it. */
void jitring_idmap_ahead(struct jr_rings *e);
void jitring_idmap_free(struct jr_rings *e);

#endif /* JITRING_SRC_POOL_H */
