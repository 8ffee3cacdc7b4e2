/* SPDX-License-Identifier: MIT */
/*
 * The mutex engine (engine_mutex.c): the design runtimes use today, one
 * lock around the whole group and fwrite into a 2 MiB FILE buffer on the
 * calling thread.  The yardstick the rings engine is measured against.
 * Reached only through its operations (engine_ops.h), which engines/
 * hands out.
 */
#ifndef JITRING_SRC_ENGINE_MUTEX_H
#define JITRING_SRC_ENGINE_MUTEX_H

#include "core/engine_ops.h"

extern const struct jitring_engine_ops jitring_mutex_ops;

#endif /* JITRING_SRC_ENGINE_MUTEX_H */
