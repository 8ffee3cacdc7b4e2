/* SPDX-License-Identifier: MIT */
/*
 * The one place that knows both engines: which operations a writer runs,
 * and the per-thread call that spans writers of either engine.
 */
#include "engine.h"
#include "engines/mutex/engine_mutex.h"
#include "engines/rings/rings.h"

const struct jitring_engine_ops *jitring_engine_ops_of(uint32_t engine)
{
	return engine == JITRING_ENGINE_MUTEX ? &jitring_mutex_ops :
						&jitring_rings_ops;
}

int jitring_engine_thread_detach(struct jitring *jr)
{
	/* A mutex writer holds no thread's state: the rings engine finds
	 * no ring of it. */
	return jitring_rings_thread_detach(jr);
}
