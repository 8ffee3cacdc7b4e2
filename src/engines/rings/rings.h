/* SPDX-License-Identifier: MIT */
/*
 * The rings engine, as engines/ sees it: per-thread single-producer/
 * single-consumer rings of encoded jitdump groups, drained in timestamp
 * order by one background flusher thread per writer.  Its operations
 * (engine_ops.h) are all a writer reaches it through; its data structures
 * are in rings_types.h, its files' calls to each other in
 * rings_internal.h.  (LTTng-UST's frontend.h.)
 */
#ifndef JITRING_SRC_RINGS_H
#define JITRING_SRC_RINGS_H

#include "core/engine_ops.h"

struct jitring;

/* The engine's operations (rings.c). */
extern const struct jitring_engine_ops jitring_rings_ops;

/*
 * jitring_thread_detach(): let go of the calling thread's rings of @jr,
 * or of every writer (NULL) (thread.c).  Return: the rings let go.
 */
int jitring_rings_thread_detach(struct jitring *jr);

#endif /* JITRING_SRC_RINGS_H */
