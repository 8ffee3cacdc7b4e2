/* SPDX-License-Identifier: MIT */
/*
 * What an engine is to the layers above it: one table of operations
 * (struct jitring_engine_ops).  Each engine fills one
 * (jitring_mutex_ops in engines/mutex, jitring_rings_ops in
 * engines/rings); engines/ picks the writer's at open (jr->ops) and is the
 * only layer that names either engine.  The front door (api/) and the kit
 * (kit/) call an engine only through
 * jr->ops, as liburcu calls a flavour through struct rcu_flavor_struct
 * and the kernel a driver through its ops tables.
 *
 * The table sits here, below both engines, because both fill it and
 * neither may include a header above its own layer (docs/design.md,
 * section 16).  So does the kit's hook (struct jr_kit_ops), which the kit
 * (above) hands to the rings engine (below).
 *
 * Contexts are the public call's that runs the operation (include/
 * jitring.h) unless said otherwise.  An operation marked optional is NULL
 * where an engine has nothing to do for it.
 */
#ifndef JITRING_SRC_ENGINE_OPS_H
#define JITRING_SRC_ENGINE_OPS_H

#include <stdbool.h>
#include <stdint.h>

struct jitring;
struct jitring_group;
struct timespec;

/*
 * What the rings engine's flusher does for the trampoline kit (kit/),
 * which sits above it: the kit registers it before it puts a set on a
 * writer's list, and the flusher calls it every round (maintain) and
 * before it sleeps (wanted).  Until then there is no set, and nothing to
 * do.
 */
struct jr_kit_ops {
	/* Refill every set's arenas ahead of demand and give back what
	 * demand no longer asks for.  Return: when to run again to follow
	 * the demand down, UINT64_MAX if every stock is at its floor. */
	uint64_t (*maintain)(struct jitring *jr, uint64_t now);
	/* Does a set have fewer ready arenas than its mark? */
	bool (*wanted)(struct jitring *jr);
};

struct jitring_engine_ops {
	/* jitring_open(): make jr->eng (and whatever drains it) for an open
	 * file.  Return: 0 or -errno (nothing left made). */
	int (*start)(struct jitring *jr);
	/* jitring_write() of a planned group: the hot path, no
	 * jitring_enter().  Return: the code_index, or a refusal. */
	int64_t (*write)(struct jitring *jr, const struct jitring_group *g);
	/* jitring_move(), arguments checked. */
	int (*move)(struct jitring *jr, uint64_t code_index,
		    const void *new_addr, const void *old_addr,
		    uint64_t code_size);
	/* jitring_flush(), inside jitring_enter().  Return: 0 or -errno. */
	int (*flush)(struct jitring *jr);
	/* Optional.  jitring_pause() of an OPEN writer, inside
	 * jitring_enter(): let the engine's threads go.  A later write
	 * starts them again. */
	int (*pause)(struct jitring *jr);
	/* Optional.  Wake whatever drains the engine, so that a call inside
	 * it finishes (close and exit, waiting for users; the kit, whose
	 * arenas the flusher makes).  Any thread, even after close: reads
	 * only the handle. */
	void (*kick)(struct jitring *jr);
	/* jitring_close(), CLOSING and no user left: drain, stop, free
	 * jr->eng.  Return: 0 (the file's error is io_error). */
	int (*stop)(struct jitring *jr);
	/*
	 * exit(3) with the writer CLOSING and no user left: what stop does
	 * before it frees, waiting until @until (CLOCK_REALTIME).  Return:
	 * 0, -ETIMEDOUT (still draining: maybe inside a write) or -EDEADLK
	 * (this thread's own write holds the engine).
	 */
	int (*exit)(struct jitring *jr, const struct timespec *until);
	/* pthread_atfork handlers of a writer not CLOSING, handle lock held:
	 * hold the engine still across fork() (prepare), let it go again
	 * (parent), and in the child drop what the parent had buffered, the
	 * child's file already open.  fork_child returns the state the
	 * child's writer starts in (JR_OPEN, or JR_FORKED: restart on first
	 * use) if its file opened. */
	void (*fork_prepare)(struct jitring *jr);
	void (*fork_parent)(struct jitring *jr);
	uint32_t (*fork_child)(struct jitring *jr);
	/* Optional.  The kit's hook, for an engine whose own thread keeps
	 * the kit's arenas ready (process-wide: the same @ops each time).
	 * Before a set is on a writer's list. */
	void (*kit_register)(const struct jr_kit_ops *ops);
};

#endif /* JITRING_SRC_ENGINE_OPS_H */
