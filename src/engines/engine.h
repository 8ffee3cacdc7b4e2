/* SPDX-License-Identifier: MIT */
/*
 * The one place that knows both engines (engine.c): it picks a writer's
 * operations at open (jr->ops, engine_ops.h), and everything above it
 * calls the engine through them.  The write stays a header inline, so
 * that jitring_write() makes one call into the engine, as before.
 */
#ifndef JITRING_SRC_ENGINE_H
#define JITRING_SRC_ENGINE_H

#include <stdint.h>

#include "core/engine_ops.h"
#include "core/internal.h"

struct jitring_group;

/* The operations of @engine (JITRING_ENGINE_RINGS or _MUTEX). */
const struct jitring_engine_ops *jitring_engine_ops_of(uint32_t engine);

/*
 * jitring_thread_detach(): let go of the calling thread's state in @jr,
 * or in every writer (NULL).  Per thread, not per writer: only the rings
 * engine keeps any.  Return: the rings let go.
 */
int jitring_engine_thread_detach(struct jitring *jr);

/*
 * jitring_write() of a group planned elsewhere (the trampoline kit plans
 * once per set and renames per copy).
 */
static inline int64_t jitring_write_group(struct jitring *jr,
					  struct jitring_group *g)
{
	return jr->ops->write(jr, g);
}

/* Wake the engine's thread if it has one (engine_ops.h, kick). */
static inline void jitring_engine_kick(struct jitring *jr)
{
	if (jr->ops->kick)
		jr->ops->kick(jr);
}

#endif /* JITRING_SRC_ENGINE_H */
