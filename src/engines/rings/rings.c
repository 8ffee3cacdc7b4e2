/* SPDX-License-Identifier: MIT */
/*
 * Rings engine: its life.  Start (the pool filled and the flusher thread
 * started before the first write), flush requests, stop at close, and
 * fork: the flusher is held between rounds across fork(), the child drops
 * everything the parent had buffered and restarts its engine on first use
 * (jitring_rings_restart(), from the first call that needs it).
 *
 * Invariants: the engine state (jr->eng) is freed only by close, after
 * every cold-path user left (jitring_enter()/jitring_exit()) and the
 * flusher's last round saw no ring BUSY; at most one thread runs flusher
 * rounds at a time: the flusher, or with none (paused, and pthread_create
 * failed) a flush, close or full writer draining under run_lock, which
 * every start after a pause takes; the restart in a fork child moves
 * FORKED -> OPEN (or FAILED) by a CAS under fork_lock, so a racing close
 * wins or loses cleanly and a failed restart is never tried again.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "core/reaper.h"
#include "flusher.h"
#include "format/record.h"
#include "pool.h"
#include "rings.h"
#include "rings_internal.h"
#include "thread.h"

/* Ready rings: at most (a ck_ring's size is a power of two), at least. */
#define JR_POOL_CAP 8192u
#define JR_POOL_FLOOR 64u
/* How long jitring_pause() waits for the flusher to find a quiet round. */
#define JR_PAUSE_WAIT_NS (50 * 1000000ull)
/*
 * The engine whose run_lock this thread holds (a pause, a flush draining, a
 * start).  A signal handler that interrupts such a call and writes must not
 * take run_lock again: it would wait for itself.
 */
static __thread struct jr_rings *tls_run_held
	__attribute__((tls_model("initial-exec")));

static void run_lock(struct jr_rings *e)
{
	pthread_mutex_lock(&e->run_lock);
	tls_run_held = e;
}

static void run_unlock(struct jr_rings *e)
{
	tls_run_held = NULL;
	pthread_mutex_unlock(&e->run_lock);
}

/* ------------------------------------------------------------------ */
/* Waking the flusher.                                                  */

void jitring_rings_wake_slow(struct jitring *jr, uint32_t s)
{
	if (s == JR_STOPPED) {
		/* Paused: whoever needs the flusher starts it again. */
		jitring_rings_resume(jr);
		return;
	}
	/* Only the waker that moves the word pays for the system call. */
	if (atomic_compare_exchange_strong_explicit(&jr->sleep, &s, JR_AWAKE,
						    memory_order_relaxed,
						    memory_order_relaxed)) {
		jitring_count(&jr->c.wakes, 1);
		jr_futex_wake(&jr->sleep, 1);
	}
}

void jitring_rings_kick(struct jitring *jr)
{
	jitring_rings_wake(jr, true);
}

/* ------------------------------------------------------------------ */
/* Flush, start, stop.                                                  */

/*
 * No flusher thread.  Paused: a write that returned after the pause
 * started one before it returned, unless pthread_create() failed (a pids
 * cgroup limit, RLIMIT_NPROC, no memory for a stack); then its entry is
 * in a ring and nobody drains it.  Drain on this thread, under run_lock
 * (no flusher can start meanwhile) and fork_lock (the rounds').  A paused
 * engine with nothing pending makes that a quick round, and never brings
 * the thread back: the pause holds.  A fork child's engine not started
 * yet has nothing of its own buffered.
 * Return: 1 if a flusher runs after all (the caller asks it), else 0.
 */
static int flush_here(struct jr_rings *e)
{
	int ret = 0;

	run_lock(e);
	if (atomic_load_explicit(&e->running, memory_order_relaxed))
		ret = 1;
	else if (e->paused)
		jitring_flusher_drain(e);
	run_unlock(e);
	return ret;
}

/* Ask the running flusher for a round that writes everything committed so
 * far, and wait.  Return: 0, or 1 if no flusher runs any longer. */
static int flush_ask(struct jitring *jr, struct jr_rings *e)
{
	uint64_t t;

	/* Pairs with the acquire load of flush_req in the flusher's round;
	 * seq_cst against a flusher pausing (news()): it sees this request,
	 * or our wake below sees JR_STOPPED and starts a flusher again. */
	t = atomic_fetch_add_explicit(&e->flush_req, 1, memory_order_seq_cst) +
	    1;
	jitring_rings_wake(jr, true);
	for (;;) {
		struct timespec rel = jitring_clock_rel(100 * 1000000u);
		uint32_t seq;

		/* Pairs with the release increment of flush_seq. */
		seq = atomic_load_explicit(&e->flush_seq, memory_order_acquire);
		/* Pairs with the release store of flush_done. */
		if (atomic_load_explicit(&e->flush_done,
					 memory_order_acquire) >= t)
			return 0;
		/*
		 * A flusher leaves only with no request pending (news()), so
		 * none runs now only if ours came after it committed to
		 * leaving and the wake above could not start one again.
		 * Pairs with the release stores of running in start_thread()
		 * and jitring_rings_pause().
		 */
		if (!atomic_load_explicit(&e->running, memory_order_acquire))
			return 1;
		jr_futex_wait(&e->flush_seq, seq, &rel);
	}
}

int jitring_rings_flush(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;

	for (;;) {
		/* Pairs with the release stores of running in start_thread()
		 * and jitring_rings_pause(). */
		if (atomic_load_explicit(&e->running, memory_order_acquire) &&
		    !flush_ask(jr, e))
			return 0;
		if (!flush_here(e))
			return 0;
	}
}

static int start_thread(struct jr_rings *e)
{
	sigset_t all, old;
	int ret;

	/* A test fails the start as a pids cgroup limit or RLIMIT_NPROC
	 * would (pthread_create's EAGAIN). */
	if (JITRING_FAULT(flusher_start, e->jr))
		return -EAGAIN;
	/* The flusher must never run the runtime's signal handlers. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&e->thread, NULL, jitring_flusher_main, e);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		return -ret;
	/* Pairs with the acquire load of running in jitring_rings_flush(). */
	atomic_store_explicit(&e->running, true, memory_order_release);
	return 0;
}

int jitring_rings_start(struct jitring *jr)
{
	struct jr_rings *e = calloc(1, sizeof(*e));
	int ret;

	if (!e)
		return -ENOMEM;
	e->jr = jr;
	e->pid = jr->file.pid;
	e->pool_cap = JR_POOL_CAP;
	e->pool_buf = calloc(e->pool_cap, sizeof(*e->pool_buf));
	if (!e->pool_buf) {
		ret = -ENOMEM;
		goto err_free;
	}
	ck_ring_init(&e->pool, e->pool_cap);
	/* What the runtime said it needs ready, within half the budget. */
	e->pool_floor = jr->ready_rings ? jr->ready_rings : JR_POOL_FLOOR;
	if (e->pool_floor > e->pool_cap / 2)
		e->pool_floor = e->pool_cap / 2;
	if ((uint64_t)e->pool_floor * jr->ring_min > jr->mem_budget / 2)
		e->pool_floor = (uint32_t)(jr->mem_budget / 2 / jr->ring_min);
	/* One ready ring even when the budget holds little more. */
	if (!e->pool_floor)
		e->pool_floor = 1;
	atomic_init(&e->pool_low, e->pool_floor);
	ret = jitring_spares_init(e);
	if (ret)
		goto err_free;
	pthread_mutex_init(&e->fork_lock, NULL);
	pthread_mutex_init(&e->run_lock, NULL);
	jitring_thread_make_lock_init(e);
	/* A continued dump (see jitring_open()) goes on after its end. */
	e->file_off = jr->file.start;
	jr->eng = e;
	ret = jitring_flusher_init(e);
	if (ret)
		goto err_free;
	/* The first threads find rings ready, not an empty pool. */
	ret = jitring_pool_prefill(e);
	if (ret)
		goto err_fini;
	ret = start_thread(e);
	if (ret)
		goto err_fini;
	return 0;

err_fini:
	jitring_pool_release(e, false);
	jitring_flusher_fini(e);
	jitring_idmap_free(e);
err_free:
	jr->eng = NULL;
	jitring_spares_fini(e);
	free(e->pool_buf);
	free(e);
	return ret;
}

/*
 * First call in a fork child: start a flusher for the child's file.  Runs
 * inside jitring_enter(), so close (which holds jr->lock while it waits for
 * users) cannot be waited on here: serialise on fork_lock instead.  The
 * state moves FORKED -> OPEN (or FAILED) by a CAS under that lock, so a
 * racing close wins or loses cleanly, and a thread that queued behind a
 * failed restart finds FAILED and does not try again (a second attempt
 * used to leak the first one's state and start a flusher for a failed
 * writer).
 * Return: the state after the attempt.
 */
int jitring_rings_restart(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;
	uint32_t s;
	int ret = 0;

	JITRING_TESTPOINT(fork_restart_enter, jr);
	pthread_mutex_lock(&e->fork_lock);
	/* Pairs with the seq_cst CASes on state here and in close. */
	s = atomic_load_explicit(&jr->state, memory_order_seq_cst);
	if (s == JR_FORKED &&
	    !atomic_load_explicit(&e->running, memory_order_relaxed)) {
		e->pid = jr->file.pid;
		ret = jitring_flusher_init(e);
		if (!ret)
			ret = JITRING_FAULT(fork_restart, jr) ?
				      -ENOMEM :
				      jitring_pool_prefill(e);
		if (!ret)
			ret = start_thread(e);
	}
	JITRING_TESTPOINT(fork_restart, jr);
	if (s == JR_FORKED) {
		if (ret) {
			int32_t none = 0;

			atomic_compare_exchange_strong_explicit(
				&jr->io_error, &none, ret, memory_order_relaxed,
				memory_order_relaxed);
			jitring_log(jr, JITRING_LOG_ERR,
				    "restart after fork: %s", strerror(-ret));
		}
		/*
		 * Release for io_error (read after FAILED is seen, see
		 * jitring_refuse_state()); seq_cst pairs with the loads of
		 * state in jitring_enter() and (B).  A racing close's CAS to
		 * CLOSING wins over ours.
		 */
		atomic_compare_exchange_strong_explicit(
			&jr->state, &s, ret ? JR_FAILED : JR_OPEN,
			memory_order_seq_cst, memory_order_relaxed);
		s = atomic_load_explicit(&jr->state, memory_order_seq_cst);
	}
	pthread_mutex_unlock(&e->fork_lock);
	return s;
}

/*
 * The flusher's last round: everything committed is written (and CLOSE, if
 * asked), then the flusher and its write thread are gone.  No user is left
 * (close and exit waited for them), so nobody takes run_lock meanwhile.
 * @until: NULL to wait for the flusher as long as it takes (close), or the
 * CLOCK_REALTIME time after which to give up waiting (exit).
 * Return: 0, or -ETIMEDOUT with the flusher still running (detached).
 */
static int finish(struct jitring *jr, struct jr_rings *e,
		  const struct timespec *until)
{
	/*
	 * Paused: rings may hold entries committed as the flusher left (it
	 * leaves when a round left nothing, but a commit can land after it;
	 * the next waker would have started it again).  Start it once more
	 * to drain them.  A fork child whose engine never started has
	 * nothing of its own buffered.
	 */
	if (e->paused && start_thread(e) == 0)
		e->paused = false;
	if (e->paused) {
		/*
		 * It could not start: run its rounds here, the last one
		 * (CLOSE included) as it would.  No user is left to take
		 * run_lock, and the pause joined the last flusher.
		 */
		atomic_store_explicit(&e->stop, 1, memory_order_relaxed);
		jitring_flusher_drain(e);
	} else if (atomic_load_explicit(&e->running, memory_order_relaxed)) {
		/* Pairs with the seq_cst load of stop in round_begin(). */
		atomic_store_explicit(&e->stop, 1, memory_order_seq_cst);
		jitring_rings_kick(jr);
		if (until ? pthread_timedjoin_np(e->thread, NULL, until) :
			    pthread_join(e->thread, NULL)) {
			/* Nobody will join it: let it go when it ends. */
			pthread_detach(e->thread);
			return -ETIMEDOUT;
		}
		atomic_store_explicit(&e->running, false, memory_order_relaxed);
	} else {
		/*
		 * No flusher: a fork child that never wrote (nothing of its
		 * own buffered): maybe CLOSE.
		 */
		jitring_batch_write_close(e);
	}
	return 0;
}

int jitring_rings_stop(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;

	finish(jr, e, NULL);
	pthread_mutex_destroy(&e->run_lock);
	jitring_pool_release(e, false);
	jitring_flusher_fini(e);
	jitring_idmap_free(e);
	jitring_spares_fini(e);
	free(e->pool_buf);
	free(e);
	jr->eng = NULL;
	return 0;
}

int jitring_rings_exit(struct jitring *jr, const struct timespec *until)
{
	/*
	 * Nothing is freed: the threads still running until the process
	 * ends own their rings, and find the writer closing.
	 */
	return finish(jr, jr->eng, until);
}

/* ------------------------------------------------------------------ */
/* Pause and resume.                                                    */

int jitring_rings_pause(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;
	uint64_t deadline;
	bool closing;
	pid_t tid;
	int ret;

	run_lock(e);
	if (!atomic_load_explicit(&e->running, memory_order_relaxed)) {
		run_unlock(e);
		return 0;
	}
	/*
	 * Everything written so far goes into the file first.  A flusher
	 * runs, and only a holder of run_lock stops it: the flush never
	 * takes the drain path (flush_here()), which takes run_lock.
	 */
	ret = jitring_rings_flush(jr);
	/* Pairs with the seq_cst loads of pause_req in jitring_round_run() and
	 * news(). */
	atomic_store_explicit(&e->pause_req, 1, memory_order_seq_cst);
	jitring_rings_kick(jr);
	/*
	 * It exits after a round that left nothing behind (rounds.c).
	 * Bounded: with threads writing all the time there may be no such
	 * round, and fork() (which takes run_lock) must not wait for one.
	 * Giving up is a CAS 1 -> 0 on pause_req; the flusher commits to
	 * leaving with a CAS 1 -> 2 first, so exactly one of the two wins;
	 * at 2 it is deciding (a last news() check) and soon exits or goes
	 * back to 1.
	 */
	deadline = jitring_clock_ns() + JR_PAUSE_WAIT_NS;
	for (;;) {
		struct timespec ts;
		uint32_t one = 1;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (!pthread_timedjoin_np(e->thread, NULL, &ts))
			break;
		/*
		 * Give up after the deadline, or at once when close began
		 * (it waits for this call to leave).  Pairs with the seq_cst
		 * CAS 1 -> 2 in the flusher.
		 */
		closing = atomic_load_explicit(&jr->state,
					       memory_order_relaxed) >=
			  JR_CLOSING;
		if ((closing || jitring_clock_ns() >= deadline) &&
		    atomic_compare_exchange_strong_explicit(
			    &e->pause_req, &one, 0, memory_order_seq_cst,
			    memory_order_relaxed)) {
			run_unlock(e);
			if (closing)
				return jitring_refuse_state(jr, JR_CLOSING);
			return ret ? ret : -EAGAIN;
		}
	}
	tid = e->flusher_tid;
	atomic_store_explicit(&e->pause_req, 0, memory_order_relaxed);
	e->paused = true;
	/* Pairs with the acquire load of running in jitring_rings_flush(). */
	atomic_store_explicit(&e->running, false, memory_order_release);
	run_unlock(e);
	jitring_reaper_thread_gone(tid);
	return ret;
}

/* Start the flusher unless one runs; under run_lock (after a pause's
 * join: never two flushers).  Return: 0 or -errno from pthread_create(). */
static int resume_locked(struct jitring *jr, struct jr_rings *e)
{
	int ret;

	if (atomic_load_explicit(&e->running, memory_order_relaxed))
		return 0;
	/*
	 * Not JR_STOPPED from here on, before the thread exists: a pause
	 * that takes run_lock next finds a running flusher, and its flush
	 * must not take this path (run_lock is not recursive).
	 */
	atomic_store_explicit(&jr->sleep, JR_AWAKE, memory_order_relaxed);
	ret = start_thread(e);
	e->paused = ret != 0;
	if (ret) {
		/* No thread: the next waker tries again. */
		atomic_store_explicit(&jr->sleep, JR_STOPPED,
				      memory_order_relaxed);
		jitring_log(jr, JITRING_LOG_ERR,
			    "cannot restart the flusher: %s", strerror(-ret));
	}
	return ret;
}

void jitring_rings_resume(struct jitring *jr)
{
	uint32_t s = jitring_enter(jr);

	/*
	 * Not from a handler that interrupted our own pause or flush (it
	 * would wait for itself): what it committed waits for the next
	 * flush, or the next waker.
	 */
	if (s == JR_OPEN && tls_run_held != jr->eng) {
		struct jr_rings *e = jr->eng;

		run_lock(e);
		resume_locked(jr, e);
		run_unlock(e);
	}
	if (s < JR_CLOSING)
		jitring_exit(jr);
}

int jitring_rings_stalled(struct jitring *jr)
{
	uint32_t s = jitring_enter(jr);
	struct jr_rings *e;
	int ret = 0;

	/* Not open: the caller's loop reads the state and refuses. */
	if (s != JR_OPEN) {
		if (s < JR_CLOSING)
			jitring_exit(jr);
		return 0;
	}
	e = jr->eng;
	if (tls_run_held == e) {
		/* A handler that interrupted our own pause or flush: the
		 * engine is ours already, and waiting would be for good. */
		jitring_count(&jr->c.refused_invalid, 1);
		ret = -EDEADLK;
	} else {
		/* Another holder is done within milliseconds (a start, a
		 * pause) or a drain's hold-back at most. */
		run_lock(e);
		/* The limit that refused the flusher may have passed. */
		if (resume_locked(jr, e) && e->paused)
			jitring_flusher_drain(e);
		run_unlock(e);
	}
	jitring_exit(jr);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Fork.                                                                */

/* Hold the flusher between rounds so the child inherits a consistent
 * registry and pool. */
void jitring_rings_fork_prepare(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;

	/*
	 * run_lock first: a pause holds it while it waits for the flusher,
	 * which needs fork_lock for its rounds.
	 */
	if (e) {
		pthread_mutex_lock(&e->run_lock);
		pthread_mutex_lock(&e->fork_lock);
		jitring_batch_fork_prepare(e);
		JITRING_TESTPOINT(fork_make_lock, jr);
		pthread_rwlock_wrlock(&e->make_lock);
		JITRING_TESTPOINT(fork_make_locked, jr);
	}
}

void jitring_rings_fork_parent(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;

	if (e) {
		pthread_rwlock_unlock(&e->make_lock);
		pthread_mutex_unlock(&e->fork_lock);
		pthread_mutex_unlock(&e->run_lock);
	}
}

uint32_t jitring_rings_fork_child(struct jitring *jr)
{
	struct jr_rings *e = jr->eng;

	jitring_thread_fork_child(jr);
	if (!e)
		return JR_FORKED;
	/*
	 * The forking thread took these in prepare and is this thread:
	 * unlock them.  The rwlock is then also made anew: the parent's
	 * readers that were waiting are counted in it and do not exist here
	 * (unlocking first keeps TSan's view of this thread's locks right).
	 */
	pthread_rwlock_unlock(&e->make_lock);
	jitring_thread_make_lock_init(e);
	pthread_mutex_unlock(&e->fork_lock);
	pthread_mutex_unlock(&e->run_lock);
	/* No flusher in the child; everything buffered is the parent's. */
	atomic_store_explicit(&e->running, false, memory_order_relaxed);
	atomic_store_explicit(&e->pause_req, 0, memory_order_relaxed);
	e->paused = false;
	jitring_batch_fork_child(e);
	jitring_pool_release(e, true);
	jitring_flusher_fini(e);
	/* The child's file has none of the parent's loads to move. */
	jitring_idmap_free(e);
	ck_ring_init(&e->pool, e->pool_cap);
	jitring_spares_reset(e);
	atomic_store_explicit(&e->pool_want, 0, memory_order_relaxed);
	atomic_store_explicit(&e->pool_missed, 0, memory_order_relaxed);
	atomic_store_explicit(&e->pool_taken, 0, memory_order_relaxed);
	atomic_store_explicit(&e->pool_low, e->pool_floor,
			      memory_order_relaxed);
	memset(&e->demand, 0, sizeof(e->demand));
	atomic_store_explicit(&e->attach, NULL, memory_order_relaxed);
	e->attach_pending = NULL;
	atomic_store_explicit(&e->pool_full, 0, memory_order_relaxed);
	atomic_store_explicit(&e->flush_req, 0, memory_order_relaxed);
	atomic_store_explicit(&e->flush_done, 0, memory_order_relaxed);
	atomic_store_explicit(&e->stop, 0, memory_order_relaxed);
	atomic_store_explicit(&jr->sleep, JR_AWAKE, memory_order_relaxed);
	e->file_off = sizeof(struct jitdump_header);
	e->flush_ticket = 0;
	e->req_seen = 0;
	e->stop_seen = false;
	e->pause_seen = false;
	e->failed = false;
	/* The flusher starts on first use (jitring_rings_restart()). */
	return JR_FORKED;
}

const struct jitring_engine_ops jitring_rings_ops = {
	.start = jitring_rings_start,
	.write = jitring_rings_write,
	.move = jitring_rings_move,
	.flush = jitring_rings_flush,
	.pause = jitring_rings_pause,
	.kick = jitring_rings_kick,
	.stop = jitring_rings_stop,
	.exit = jitring_rings_exit,
	.fork_prepare = jitring_rings_fork_prepare,
	.fork_parent = jitring_rings_fork_parent,
	.fork_child = jitring_rings_fork_child,
	.kit_register = jitring_rings_kit_register,
};
