/* SPDX-License-Identifier: MIT */
/*
 * The mutex engine (engine_mutex.c): the design runtimes use today, one
 * lock around the whole group and fwrite into a 2 MiB FILE buffer on the
 * calling thread.  The yardstick the rings engine is measured against.
 */
#ifndef JITRING_SRC_ENGINE_MUTEX_H
#define JITRING_SRC_ENGINE_MUTEX_H

#include <stdint.h>
#include <time.h>

#include "internal.h"

struct jitring_group;

int jitring_mutex_start(struct jitring *jr);
int64_t jitring_mutex_write(struct jitring *jr, const struct jitring_group *g);
int jitring_mutex_move(struct jitring *jr, uint64_t code_index,
		       const void *new_addr, const void *old_addr,
		       uint64_t code_size);
int jitring_mutex_flush(struct jitring *jr);
int jitring_mutex_stop(struct jitring *jr);
/*
 * exit(3) with the writer CLOSING: close's flush and FILE close, waiting
 * for the lock until @until (CLOCK_REALTIME).  Return: 0, the file's
 * error, -ETIMEDOUT (a writer held the lock past @until) or -EDEADLK
 * (this thread's own write holds it).
 */
int jitring_mutex_exit(struct jitring *jr, const struct timespec *until);
void jitring_mutex_fork_prepare(struct jitring *jr);
void jitring_mutex_fork_parent(struct jitring *jr);
void jitring_mutex_fork_child(struct jitring *jr);

#endif /* JITRING_SRC_ENGINE_MUTEX_H */
