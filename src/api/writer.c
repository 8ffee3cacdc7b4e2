/* SPDX-License-Identifier: MIT */
/*
 * The front door: config, open and close, the public calls and their
 * dispatch to the writer's engine through its operations (jr->ops, which
 * engines/ picks: this file names neither engine), fork and exit
 * handling, and statistics.  The dump file itself and the handle list are
 * files.c's (core/).
 *
 * Lifetime (see internal.h): handles are tombstones kept on the handle
 * list (files.h) for the life of the process.  jitring_close() moves state OPEN/FAILED/FORKED ->
 * CLOSING with a seq_cst CAS (only one closer wins; others get -EBADF),
 * waits for cold-path users to leave, lets the engine drain and stop, then
 * releases the file and sets CLOSED.
 *
 * Fork: pthread_atfork handlers take the handle list's lock and the lock of every
 * handle not yet closed (so no close or open is half done), and the
 * engine's own locks.  A closed handle's lock guards only its trampoline
 * list and a second close, neither of which the child's handler touches:
 * it is not taken (a process that opened and closed thousands of writers
 * would take as many locks per fork) and the child makes it anew.  In
 * the child each live writer gets a fresh jit-<childpid>.dump (open, pwrite
 * and mmap only) and the engine drops what the parent's threads had
 * buffered: those entries belong to the parent's file.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/testpoint.h"
#include "core/files.h"
#include "core/internal.h"
#include "core/perfmap.h"
#include "core/reaper.h"
#include "engines/engine.h"
#include "format/record.h"

/* Version 1 of the caller-sized structs ends at these fields: frozen. */
_Static_assert(JITRING_CONFIG_SIZE_V1 ==
		       offsetof(struct jitring_config, reserved) +
			       sizeof(uint32_t),
	       "struct jitring_config v1 is frozen");
_Static_assert(JITRING_CONFIG_SIZE_V2 ==
		       offsetof(struct jitring_config, ready_copies) +
			       sizeof(uint32_t),
	       "struct jitring_config v2 is frozen");
_Static_assert(JITRING_STATS_SIZE_V2 ==
		       offsetof(struct jitring_stats, rings_grown_waited) +
			       sizeof(uint64_t),
	       "struct jitring_stats v2 is frozen");
_Static_assert(JITRING_STATS_SIZE_V1 == offsetof(struct jitring_stats,
						 trampoline_arenas_waited) +
						sizeof(uint64_t),
	       "struct jitring_stats v1 is frozen");
_Static_assert(offsetof(struct jitring_entry, name_parts) == 64 &&
		       sizeof(struct jitring_entry) == 72,
	       "struct jitring_entry v1 is frozen");
#define JR_RING_MIN (4u << 10)
#define JR_RING_MAX (64u << 20)
#define JR_RING_ADAPT_MIN (64u << 10)
#define JR_RING_ADAPT_MAX (4u << 20)
#define JR_BUDGET_DEFAULT (512ull << 20)
#define JR_DELAY_DEFAULT 20u
#define JR_HOLDBACK_DEFAULT 10u

static pthread_once_t jr_atfork_once = PTHREAD_ONCE_INIT;

unsigned int jitring_version(void)
{
	return (JITRING_VERSION_MAJOR << 16) | JITRING_VERSION_MINOR;
}

void jitring_config_init(struct jitring_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->struct_size = sizeof(*cfg);
}

/* ------------------------------------------------------------------ */
/* Fork.                                                                */

static void atfork_prepare(void)
{
	jitring_handles_lock();
	for (struct jitring *jr = jitring_handles_first(); jr; jr = jr->next) {
		/* CLOSED is final; read under the list's lock, and only the
		 * forking thread reads fork_locked until the handlers end. */
		jr->fork_locked = !jitring_handle_closed(jr);
		if (!jr->fork_locked)
			continue;
		pthread_mutex_lock(&jr->lock);
		if (atomic_load_explicit(&jr->state, memory_order_relaxed) >=
		    JR_CLOSING)
			continue;
		jr->ops->fork_prepare(jr);
	}
}

static void atfork_parent(void)
{
	for (struct jitring *jr = jitring_handles_first(); jr; jr = jr->next) {
		if (atomic_load_explicit(&jr->state, memory_order_relaxed) <
		    JR_CLOSING)
			jr->ops->fork_parent(jr);
		if (jr->fork_locked)
			pthread_mutex_unlock(&jr->lock);
	}
	jitring_handles_unlock();
}

static void atfork_child(void)
{
	/*
	 * First the parent's files, closed writers' too: the child keeps no
	 * copy, so its lock does not keep them live after the parent exits,
	 * and none of them is ever taken for one of the child's.
	 */
	for (struct jitring *jr = jitring_handles_first(); jr; jr = jr->next) {
		if (jr->file.fd >= 0)
			close(jr->file.fd);
		if (jr->map_hold >= 0)
			close(jr->map_hold);
		jr->file.fd = jr->map_hold = jr->map_fd = -1;
	}
	for (struct jitring *jr = jitring_handles_first(); jr; jr = jr->next) {
		uint32_t s =
			atomic_load_explicit(&jr->state, memory_order_relaxed);
		struct jr_opening op;
		uint32_t next;
		int ret;

		/*
		 * Taken in atfork_prepare() by the forking thread, which is
		 * this one: unlock (a mutex made anew instead would still be
		 * held in TSan's view of this thread, and others' locks
		 * taken later would look inverted).  A closed handle's was
		 * not taken, and may have been held by a thread the child
		 * does not have: made anew.
		 */
		if (jr->fork_locked)
			pthread_mutex_unlock(&jr->lock);
		else
			pthread_mutex_init(&jr->lock, NULL);
		atomic_store_explicit(&jr->users, 0, memory_order_relaxed);
		if (s >= JR_CLOSING) {
			/* A close was under way in the parent: not ours. */
			atomic_store_explicit(&jr->state, JR_CLOSED,
					      memory_order_relaxed);
			continue;
		}
		/* The parent's mapping. */
		jitring_file_release(&jr->file);
		atomic_store_explicit(&jr->io_error, 0, memory_order_relaxed);
		/* The child's file starts empty: so do its counters. */
		memset(&jr->c, 0, sizeof(jr->c));
		ret = jitring_file_open(jr, true, &op);
		if (!ret && (jr->flags & JITRING_F_PERF_MAP))
			ret = jitring_perfmap_open(jr, true, &op.map_from);
		/* OPEN, or FORKED: an engine that restarts its threads on
		 * first use. */
		next = jr->ops->fork_child(jr);
		atomic_store_explicit(&jr->state, ret ? JR_FAILED : next,
				      memory_order_relaxed);
		if (ret)
			atomic_store_explicit(&jr->io_error, ret,
					      memory_order_relaxed);
	}
	jitring_handles_unlock();
}

/*
 * After the CAS to CLOSING: wait until no call is inside the engine, or
 * until @deadline (CLOCK_MONOTONIC ns; UINT64_MAX: for as long as it
 * takes).  Return: 0, or -ETIMEDOUT with calls still inside.
 */
static int users_wait(struct jitring *jr, uint64_t deadline)
{
	/*
	 * seq_cst: the load half of the Dekker pair with jitring_enter()
	 * (seq_cst fetch_add of users, then seq_cst load of state) against
	 * the CAS to CLOSING; also acquires jitring_exit()'s release
	 * decrements.
	 */
	for (unsigned spins = 0;
	     atomic_load_explicit(&jr->users, memory_order_seq_cst); spins++) {
		if (deadline != UINT64_MAX && jitring_clock_ns() >= deadline)
			return -ETIMEDOUT;
		jitring_engine_kick(jr);
		if (spins < 64)
			jr_cpu_relax();
		else
			usleep(100);
	}
	return 0;
}

/*
 * exit(3) (or a return from main) while other threads may still write:
 * every writer still open is closed as jitring_close() would, but bounded
 * and freeing nothing.  Flushing alone is not enough: the process's end
 * would stop the flusher, its write thread or a mutex writer in the middle
 * of a write, and the dump would end in a torn group.  The writer becomes
 * CLOSING, so a write that begins from here on returns -ESHUTDOWN; once
 * the engine has stopped, every write that returned a code_index is in the
 * file, and nothing writes to it any more.  Nothing is freed: the other
 * threads run until the process ends, and find the writer closing; a later
 * jitring_close() gets -EBADF.
 *
 * All writers together wait at most JR_EXIT_WAIT_NS: for the handle's lock
 * (a close or fork under way), for calls inside the library to leave, and
 * for the engine (the flusher's last round, or the mutex engine's lock).
 * A writer whose wait ran out is left as it is and logged: the process
 * ends with a write maybe under way, and its dump may end in a torn group,
 * as after a crash (jitring-dump --check --allow-truncated reads it).
 * The one wait not bounded: a rings writer paused with no flusher thread
 * (pthread_create failed) is drained on this thread, as close would.
 */
#define JR_EXIT_WAIT_NS (5000ull * 1000000u)

/* CLOCK_REALTIME at the CLOCK_MONOTONIC time @deadline (ns), for the
 * pthread calls that take only the former. */
static struct timespec realtime_at(uint64_t deadline)
{
	uint64_t now = jitring_clock_ns();
	uint64_t left = deadline > now ? deadline - now : 0;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	left += (uint64_t)ts.tv_nsec;
	ts.tv_sec += (time_t)(left / 1000000000u);
	ts.tv_nsec = (long)(left % 1000000000u);
	return ts;
}

static void exit_close(struct jitring *jr, uint64_t deadline)
{
	struct timespec until = realtime_at(deadline);
	const char *what = "a close or fork under way";
	uint32_t s;
	int ret;

	if (pthread_mutex_timedlock(&jr->lock, &until))
		goto err_wait;
	s = atomic_load_explicit(&jr->state, memory_order_relaxed);
	do {
		if (s >= JR_CLOSING) {
			pthread_mutex_unlock(&jr->lock);
			return;
		}
		/* As in jitring_close(). */
	} while (!atomic_compare_exchange_weak_explicit(
		&jr->state, &s, JR_CLOSING, memory_order_seq_cst,
		memory_order_relaxed));
	JITRING_TESTPOINT(exit_close, jr);
	what = "calls still inside the library";
	if (users_wait(jr, deadline))
		goto err_unlock;
	what = "the engine's last write";
	ret = jr->ops->exit(jr, &until);
	if (ret == -ETIMEDOUT || ret == -EDEADLK)
		goto err_unlock;
	pthread_mutex_unlock(&jr->lock);
	return;

err_unlock:
	pthread_mutex_unlock(&jr->lock);
err_wait:
	jitring_log(jr, JITRING_LOG_WARNING,
		    "exit: gave up waiting for %s; %s may end in a torn entry",
		    what, jr->file.path);
}

/*
 * Runs on the thread that called exit(): an application thread, or the
 * reaper after main's pthread_exit() (reaper.c).  Never on a flusher or
 * write thread, which it joins: neither ever calls exit().
 */
static void atexit_close(void)
{
	uint64_t deadline = jitring_clock_ns() + JR_EXIT_WAIT_NS;
	struct jitring *jr;

	jitring_handles_lock();
	jr = jitring_handles_first();
	jitring_handles_unlock();
	/* Handles are never freed and the list only grows at the head. */
	for (; jr; jr = jr->next)
		if (atomic_load_explicit(&jr->state, memory_order_acquire) <
		    JR_CLOSING)
			exit_close(jr, deadline);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	atexit(atexit_close);
}

/* ------------------------------------------------------------------ */
/* Open and close.                                                      */

static int config_load(struct jitring *jr, const struct jitring_config *ucfg)
{
	struct jitring_config cfg;
	const char *dir;

	jitring_config_init(&cfg);
	if (ucfg) {
		int ret = jitring_struct_in(&cfg, sizeof(cfg), ucfg,
					    ucfg->struct_size,
					    JITRING_CONFIG_SIZE_V1);

		if (ret)
			return ret;
	}
	if (cfg.engine > JITRING_ENGINE_MUTEX || (cfg.flags & ~JITRING_F_ALL) ||
	    cfg.reserved)
		return -EINVAL;
	if (cfg.ring_size &&
	    (cfg.ring_size < JR_RING_MIN || cfg.ring_size > JR_RING_MAX ||
	     (cfg.ring_size & (cfg.ring_size - 1))))
		return -EINVAL;

	jr->engine = cfg.engine == JITRING_ENGINE_DEFAULT ?
			     JITRING_ENGINE_RINGS :
			     cfg.engine;
	jr->ops = jitring_engine_ops_of(jr->engine);
	jr->flags = cfg.flags;
	jr->ring_min = cfg.ring_size ? cfg.ring_size : JR_RING_ADAPT_MIN;
	jr->ring_max = cfg.ring_size ? cfg.ring_size : JR_RING_ADAPT_MAX;
	/* Rings are mapped in batches but unmapped and trimmed one by one:
	 * none may share a page (16 or 64 KiB pages on some kernels).  Both
	 * are powers of two, so the result is too. */
	if (jr->ring_min < (uint32_t)jitring_page_size())
		jr->ring_min = (uint32_t)jitring_page_size();
	if (jr->ring_max < jr->ring_min)
		jr->ring_max = jr->ring_min;
	jr->max_delay_ms = cfg.max_delay_ms ? cfg.max_delay_ms :
					      JR_DELAY_DEFAULT;
	jr->holdback_ms = cfg.holdback_ms ? cfg.holdback_ms :
					    JR_HOLDBACK_DEFAULT;
	jr->mem_budget = cfg.mem_budget ? cfg.mem_budget : JR_BUDGET_DEFAULT;
	if (jr->mem_budget < jr->ring_min)
		return -EINVAL;
	jr->ready_rings = cfg.ready_rings;
	jr->ready_copies = cfg.ready_copies;
	jr->log = cfg.log;
	jr->log_arg = cfg.log_arg;
	jr->elf_mach = cfg.elf_mach ? cfg.elf_mach : jitring_record_host_mach();

	dir = cfg.dir;
	if (!dir || !*dir)
		dir = secure_getenv("JITRING_DIR");
	if (!dir || !*dir)
		dir = "/tmp";
	if (strlen(dir) >= PATH_MAX)
		return -ENAMETOOLONG;
	jr->file.dir = strdup(dir);
	return jr->file.dir ? 0 : -ENOMEM;
}

int jitring_open(const struct jitring_config *cfg, struct jitring **out)
{
	struct jr_opening op = { 0 };
	struct jitring *jr;
	int ret;

	if (!out)
		return -EINVAL;
	pthread_once(&jr_atfork_once, atfork_register);

	jr = aligned_alloc(JITRING_CACHELINE, sizeof(*jr));
	if (!jr)
		return -ENOMEM;
	memset(jr, 0, sizeof(*jr));
	jr->magic = JR_MAGIC;
	jr->file.fd = -1;
	jr->map_fd = jr->map_hold = -1;
	atomic_init(&jr->state, JR_OPEN);
	pthread_mutex_init(&jr->lock, NULL);

	ret = config_load(jr, cfg);
	if (ret)
		goto err_free;

	/* No lock held: claiming the files may wait on the file system. */
	jitring_files_drop_removed();
	ret = jitring_file_open(jr, false, &op);
	if (ret)
		goto err_free;
	if (jr->flags & JITRING_F_PERF_MAP) {
		ret = jitring_perfmap_open(jr, false, &op.map_from);
		if (ret)
			goto err_file;
	}
	ret = jr->ops->start(jr);
	if (ret)
		goto err_file;
	jitring_handles_add(jr);
	/* A main thread that left by pthread_exit() ends the process once
	 * only jitring's threads are left (reaper.c). */
	jitring_reaper_open();
	*out = jr;
	return 0;

err_file:
	jitring_file_abandon(jr, &op);
err_free:
	free(jr->map_path);
	free(jr->file.path);
	free(jr->file.dir);
	pthread_mutex_destroy(&jr->lock);
	free(jr);
	return ret;
}

static int handle_ok(const struct jitring *jr)
{
	return jr && jr->magic == JR_MAGIC;
}

int jitring_close(struct jitring *jr)
{
	uint32_t s;
	int ret;

	if (!handle_ok(jr))
		return -EINVAL;
	pthread_mutex_lock(&jr->lock);
	s = atomic_load_explicit(&jr->state, memory_order_relaxed);
	do {
		if (s >= JR_CLOSING) {
			pthread_mutex_unlock(&jr->lock);
			return -EBADF;
		}
		/* Pairs with the seq_cst loads of state in jitring_enter()
		 * and in the rings write path (after setting BUSY). */
	} while (!atomic_compare_exchange_weak_explicit(
		&jr->state, &s, JR_CLOSING, memory_order_seq_cst,
		memory_order_relaxed));
	JITRING_TESTPOINT(close_closing, jr);

	users_wait(jr, UINT64_MAX);

	ret = jr->ops->stop(jr);
	if (!ret)
		ret = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
	jitring_file_release(&jr->file);
	jitring_perfmap_close(jr);
	if (jr->flags & JITRING_F_RELEASE)
		jitring_files_let_go(jr);
	/* Pairs with the acquire in jitring_refuse_state(). */
	atomic_store_explicit(&jr->state, JR_CLOSED, memory_order_release);
	pthread_mutex_unlock(&jr->lock);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Calls.                                                               */

int64_t jitring_write(struct jitring *jr, const struct jitring_entry *e)
{
	struct jitring_group g;
	int ret;

	if (unlikely(!handle_ok(jr)))
		return -EINVAL;
	ret = jitring_record_plan(&g, e);
	if (unlikely(ret))
		return jitring_refuse_args(jr, ret);
	return jitring_write_group(jr, &g);
}

int jitring_move(struct jitring *jr, uint64_t code_index, const void *new_addr,
		 const void *old_addr, uint64_t code_size)
{
	int ret;

	if (!handle_ok(jr))
		return -EINVAL;
	ret = jitring_record_move_check(new_addr, code_size);
	if (ret)
		return jitring_refuse_args(jr, ret);
	return jr->ops->move(jr, code_index, new_addr, old_addr, code_size);
}

int jitring_flush(struct jitring *jr)
{
	uint32_t s;
	int ret;

	if (!handle_ok(jr))
		return -EINVAL;
	s = jitring_enter(jr);
	if (s >= JR_CLOSING)
		return jitring_refuse_state(jr, s);
	ret = jr->ops->flush(jr);
	jitring_exit(jr);
	if (!ret) {
		ret = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
		if (!ret)
			jitring_count(&jr->c.flushes, 1);
	}
	return ret;
}

int jitring_pause(struct jitring *jr)
{
	uint32_t s;
	int ret = 0;

	if (!handle_ok(jr))
		return -EINVAL;
	s = jitring_enter(jr);
	if (s >= JR_CLOSING)
		return jitring_refuse_state(jr, s);
	/* FORKED: the child's engine has no thread yet; no pause: none at
	 * all. */
	if (s == JR_OPEN && jr->ops->pause)
		ret = jr->ops->pause(jr);
	jitring_exit(jr);
	if (!ret)
		ret = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
	return ret;
}

int jitring_thread_detach(struct jitring *jr)
{
	if (jr && !handle_ok(jr))
		return 0;
	return jitring_engine_thread_detach(jr);
}

void jitring_stats(const struct jitring *jr, struct jitring_stats *st)
{
	struct jitring_stats s;
	const struct jr_counters *c;

	if (!handle_ok(jr) || !st || st->struct_size < JITRING_STATS_SIZE_V1)
		return;
	c = &jr->c;
	memset(&s, 0, sizeof(s));
	s.struct_size = st->struct_size;
	s.engine = jr->engine;
#define LOAD(f) s.f = atomic_load_explicit(&c->f, memory_order_relaxed)
	LOAD(entries_written);
	LOAD(records_written);
	LOAD(bytes_written);
	LOAD(refused_invalid);
	LOAD(refused_nomem);
	LOAD(refused_dropped);
	LOAD(refused_shutdown);
	LOAD(refused_io);
	LOAD(lost_io);
	LOAD(flushes);
	LOAD(ring_full_waits);
	LOAD(refills_ahead);
	LOAD(refills_waited);
	LOAD(batches);
	LOAD(late_entries);
	LOAD(holdback_max_ns);
	LOAD(threads_attached);
	LOAD(threads_total);
	LOAD(rings_grown);
	LOAD(trampoline_copies);
	LOAD(trampoline_arenas_ahead);
	LOAD(trampoline_arenas_waited);
	LOAD(rings_grown_waited);
#undef LOAD
	s.io_error = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
	/* What the caller's version has room for; a newer caller's extra
	 * bytes are left alone. */
	memcpy(st, &s,
	       st->struct_size < sizeof(s) ? st->struct_size : sizeof(s));
}
