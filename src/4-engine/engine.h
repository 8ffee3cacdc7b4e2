/* SPDX-License-Identifier: MIT */
/*
 * The one place that knows both engines: a write, whichever engine the
 * writer runs.  Header only, so that jitring_write() still inlines it.
 */
#ifndef JITRING_SRC_ENGINE_H
#define JITRING_SRC_ENGINE_H

#include <stdint.h>

#include "compiler.h"
#include "engine_mutex.h"
#include "internal.h"
#include "rings.h"

struct jitring_group;

/*
 * jitring_write() of a group planned elsewhere (the trampoline kit plans
 * once per set and renames per copy).
 */
static inline int64_t jitring_write_group(struct jitring *jr,
					  struct jitring_group *g)
{
	if (likely(jr->engine == JITRING_ENGINE_RINGS))
		return jitring_rings_write(jr, g);
	return jitring_mutex_write(jr, g);
}

#endif /* JITRING_SRC_ENGINE_H */
