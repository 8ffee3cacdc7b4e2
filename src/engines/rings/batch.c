/* SPDX-License-Identifier: MIT */
/*
 * Rings engine, consumer side: batches and the write thread.  The merge
 * (merge.c) fills a batch with whole groups in file order, as iovecs
 * into ring memory; this file gets each into the file with one
 * pwritev() at its offset, counts it, writes its perf-map lines, and only
 * then publishes each ring's head past its groups (seq_cst, paired with
 * a producer waiting for space).
 *
 * The write thread ("jitring-write", started once batches fill up on a
 * machine of 4 CPUs or more, or always with JITRING_WRITE_THREAD=1:
 * io_policy()) takes the pwritev() and the kernel's copy off the merge:
 * the flusher fixes a batch's groups, order and file offset and posts
 * it; the thread writes posted batches one at a time, in the order
 * posted, while the flusher merges the next.  At most JR_BATCHES - 1 are
 * posted at once; the flusher takes them back in order (io_reap()) and
 * only then counts them and publishes heads, from each group's ring
 * position recorded in the batch (the merge has read further by then).
 * Before a flush ticket is checked, at close and before the flusher
 * sleeps, every posted batch is taken back (jitring_batch_settle()), so
 * what waits on the file never waits on a batch the thread still holds.
 * After a failed write the thread writes nothing more, so the file still
 * ends where the failure left it.  The flusher creates and joins the
 * thread inside its rounds, under fork_lock: a fork() waits for that (a
 * sanitizer's fork handling is not safe against a thread being made or
 * ending during it).
 *
 * Invariants: batches reach the file one at a time in order (the write
 * thread writes posted ones in order, and the flusher writes one itself
 * only after taking back every batch it posted); head only moves past
 * bytes that are in the file (or dropped after a failure); the file ends
 * on a group boundary after every batch, and after a failed write it is
 * truncated back to one and no longer written.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "core/files.h"
#include "core/perfmap.h"
#include "core/reaper.h"
#include "flusher.h"
#include "flusher_internal.h"
#include "rings_internal.h"

/* CPUs this process may run on for a write thread to pay. */
#define JR_IO_MIN_CPUS 4

/*
 * Publish @r's head at @rd (what is in the file) if that moves it on;
 * wake a space waiter.
 */
static void head_publish(struct jr_ring *r, uint32_t rd)
{
	if ((int32_t)(rd - r->head_local) <= 0)
		return;
	r->head_local = rd;
	/*
	 * Pairs with the acquire loads of head in slot_reserve() and
	 * wait_space(); seq_cst against the space_waiter Dekker.
	 */
	atomic_store_explicit(&r->head, rd, memory_order_seq_cst);
	if (atomic_load_explicit(&r->space_waiter, memory_order_seq_cst))
		jr_futex_wake(&r->head, 1);
}

/*
 * Every ring's head up to where the merge has read it (past padding too).
 * Only with no batch posted or being filled: then all of it is in the
 * file.
 */
static void publish_heads(struct jr_rings *e)
{
	for (uint32_t i = 0; i < e->nreg; i++)
		head_publish(e->reg[i], e->reg[i]->rd);
}

/* The perf map lines of the first @ok groups of @b, in order. */
static void perfmap_batch(struct jr_rings *e, const struct jr_batch *b,
			  uint32_t ok)
{
	struct jr_merge *m = e->m;
	char *buf = m->mapbuf;
	size_t n = 0;

	for (uint32_t i = 0; i < ok; i++) {
		uint64_t start = i ? b->grp[i - 1].file_end : 0;

		if (n + JR_PERFMAP_LINE_MAX > sizeof(m->mapbuf)) {
			jitring_perfmap_write(e->jr, buf, n);
			n = 0;
		}
		n += jitring_perfmap_line_load(buf + n, b->grp[i].base,
					       b->grp[i].file_end - start);
	}
	jitring_perfmap_write(e->jr, buf, n);
}

/* Write @b at its offset (either thread). */
static void batch_write(struct jr_rings *e, struct jr_batch *b)
{
	b->done = 0;
	b->ret = jitring_file_pwritev_all(e->jr->file.fd, b->iov, (int)b->niov,
					  b->off, &b->done);
}

/*
 * @b was written (or not, after a failure): keep whole groups only, count
 * them, and move each ring's head past its groups in it.
 */
static void batch_done(struct jr_rings *e, struct jr_batch *b, bool posted)
{
	struct jitring *jr = e->jr;
	uint64_t good = b->bytes;
	uint32_t ok = b->ngrp, records = 0;

	if (e->failed) {
		ok = 0;
		good = 0;
	} else if (b->ret) {
		/* Keep whole groups only; cut a torn tail off. */
		ok = 0;
		while (ok < b->ngrp && b->grp[ok].file_end <= b->done)
			ok++;
		good = ok ? b->grp[ok - 1].file_end : 0;
		if (b->done != good &&
		    ftruncate(jr->file.fd, (off_t)(b->off + good)))
			jitring_log(jr, JITRING_LOG_ERR,
				    "ftruncate after failed write: %s",
				    strerror(errno));
		e->failed = true;
		jitring_set_io_error(jr, b->ret);
	}
	e->file_off += good;
	if (ok && jr->map_fd >= 0)
		perfmap_batch(e, b, ok);
	for (uint32_t i = 0; i < b->ngrp; i++) {
		if (i < ok)
			records += b->grp[i].records;
		free(b->grp[i].jumbo);
	}
	if (ok) {
		jitring_count(&jr->c.entries_written, ok);
		jitring_count(&jr->c.records_written, records);
		jitring_count(&jr->c.bytes_written, good);
		jitring_count(&jr->c.batches, 1);
	}
	if (b->ngrp > ok)
		jitring_count(&jr->c.lost_io, b->ngrp - ok);
	if (!posted) {
		/* Written here, nothing else posted: all of it is in. */
		publish_heads(e);
	} else {
		/* Backwards: a ring's last group in the batch sets its head,
		 * and its earlier ones then move nothing. */
		for (uint32_t i = b->ngrp; i-- > 0;)
			head_publish(b->grp[i].ring, b->grp[i].rd_end);
	}
	b->niov = b->ngrp = 0;
	b->bytes = 0;
	b->last = NULL;
}

/*
 * Fetch a batch's bytes into this core's cache before the kernel copies
 * them: its iovecs point into many rings, a few lines each, which the
 * copy would miss on one by one.
 */
static void batch_prefetch(const struct jr_batch *b)
{
	for (uint32_t i = 0; i < b->niov; i++) {
		const uint8_t *p = b->iov[i].iov_base;
		size_t n = b->iov[i].iov_len < JR_PREFETCH_MAX ?
				   b->iov[i].iov_len :
				   JR_PREFETCH_MAX;

		for (size_t o = 0; o < n; o += 64)
			__builtin_prefetch(p + o, 0, 2);
	}
}

/*
 * How long to spin before a futex wait: a batch takes tens of
 * microseconds to write, about what waking a sleeping thread costs.
 */
#define JR_IO_SPIN_NS 20000u

/* Spin a while for *@w to leave @v; false if it did not. */
static bool io_spin(_Atomic uint32_t *w, uint32_t v)
{
	uint64_t until = 0;

	for (uint32_t i = 1;; i++) {
		if (atomic_load_explicit(w, memory_order_relaxed) != v)
			return true;
		jr_cpu_relax();
		if (i % 64)
			continue;
		if (!until)
			until = jitring_clock_ns() + JR_IO_SPIN_NS;
		else if (jitring_clock_ns() > until)
			return false;
	}
}

/*
 * The write thread: pwritev() the batches the flusher posts, in the order
 * posted.  It touches nothing but the posted batches, the ring bytes their
 * iovecs point at (which no head passes until the flusher reaped the
 * batch) and the descriptor.  After a failed write it writes nothing more
 * (each later batch is marked not written), so the file still ends where
 * the first failure left it.
 */
static void *io_main(void *arg)
{
	struct jr_rings *e = arg;
	struct jr_merge *m = e->m;
	uint32_t n = atomic_load_explicit(&m->written, memory_order_relaxed);

	/* Counted as jitring's, not the application's (reaper.c). */
	jitring_reaper_thread_begin();
	pthread_setname_np(pthread_self(), "jitring-write");
	/* Read after our join (jitring_batch_io_stop()). */
	m->io_tid = (pid_t)syscall(SYS_gettid);
	JITRING_TESTPOINT(io_thread, e->jr);
	for (;;) {
		struct jr_batch *b;
		/* Pairs with the release store in io_post(). */
		uint32_t p =
			atomic_load_explicit(&m->posted, memory_order_acquire);

		if (p == n) {
			/* Pairs with the seq_cst store in jitring_batch_io_stop(). */
			if (atomic_load_explicit(&m->io_quit,
						 memory_order_seq_cst))
				break;
			if (io_spin(&m->posted, n))
				continue;
			/*
			 * Dekker with io_post() and jitring_batch_io_stop(): they store
			 * posted or io_quit, then load io_idle (and clear it
			 * before waking us); we store io_idle, then load
			 * both.  All seq_cst.  The futex is io_idle itself,
			 * so a wake between our check and our wait is not
			 * lost: the wait sees it cleared.
			 */
			atomic_store_explicit(&m->io_idle, 1,
					      memory_order_seq_cst);
			if (atomic_load_explicit(&m->posted,
						 memory_order_seq_cst) == n &&
			    !atomic_load_explicit(&m->io_quit,
						  memory_order_seq_cst))
				jr_futex_wait(&m->io_idle, 1, NULL);
			atomic_store_explicit(&m->io_idle, 0,
					      memory_order_relaxed);
			continue;
		}
		b = &m->bat[n % JR_BATCHES];
		if (m->io_failed) {
			b->ret = -ECANCELED;
			b->done = 0;
		} else {
			batch_prefetch(b);
			batch_write(e, b);
			m->io_failed = b->ret != 0;
		}
		n++;
		/* Pairs with the acquire load in io_reap(); seq_cst: the
		 * Dekker with fl_wait there. */
		atomic_store_explicit(&m->written, n, memory_order_seq_cst);
		if (atomic_load_explicit(&m->fl_wait, memory_order_seq_cst))
			jr_futex_wake(&m->written, 1);
	}
	jitring_reaper_thread_end();
	return NULL;
}

/*
 * Finish the batches the write thread wrote, in order; with @all, wait
 * for every posted one, else until one more may be posted.
 */
static void io_reap(struct jr_rings *e, bool all)
{
	struct jr_merge *m = e->m;
	uint32_t posted =
		atomic_load_explicit(&m->posted, memory_order_relaxed);

	while (m->reaped != posted) {
		/* Pairs with the seq_cst store in io_main(). */
		uint32_t w =
			atomic_load_explicit(&m->written, memory_order_acquire);

		if (w == m->reaped) {
			/* Room to post one more and still fill another. */
			if (!all && posted - m->reaped < JR_BATCHES - 1)
				return;
			if (io_spin(&m->written, w))
				continue;
			atomic_store_explicit(&m->fl_wait, 1,
					      memory_order_seq_cst);
			jr_futex_wait(&m->written, w, NULL);
			atomic_store_explicit(&m->fl_wait, 0,
					      memory_order_relaxed);
			continue;
		}
		while (m->reaped != w)
			batch_done(e, &m->bat[m->reaped++ % JR_BATCHES], true);
	}
}

/* After a seq_cst store of posted or io_quit: wake the write thread if
 * it sleeps (the Dekker in io_main()). */
static void io_wake(struct jr_merge *m)
{
	if (atomic_load_explicit(&m->io_idle, memory_order_seq_cst)) {
		atomic_store_explicit(&m->io_idle, 0, memory_order_relaxed);
		jr_futex_wake(&m->io_idle, 1);
	}
}

static void io_post(struct jr_rings *e, struct jr_batch *b)
{
	struct jr_merge *m = e->m;
	uint32_t p = atomic_load_explicit(&m->posted, memory_order_relaxed);

	b->off = m->post_off;
	m->post_off += b->bytes;
	/* Pairs with the acquire load in io_main(): b's contents.  seq_cst:
	 * the Dekker with io_idle there. */
	atomic_store_explicit(&m->posted, p + 1, memory_order_seq_cst);
	io_wake(m);
	m->cur = &m->bat[(p + 1) % JR_BATCHES];
}

/*
 * Whether batches go to a write thread: $JITRING_WRITE_THREAD "1" always
 * (from the first batch), "0" never; otherwise once batches fill up, and
 * only with at least JR_IO_MIN_CPUS CPUs to run on: on fewer the
 * hand-offs cost more than the overlap gains (docs/design.md).
 */
uint32_t jitring_batch_io_policy(void)
{
	const char *v = getenv("JITRING_WRITE_THREAD");
	cpu_set_t set;

	if (v && !strcmp(v, "1"))
		return JR_IO_ALWAYS;
	if ((v && !strcmp(v, "0")) || sched_getaffinity(0, sizeof(set), &set))
		return JR_IO_NEVER;
	return CPU_COUNT(&set) >= JR_IO_MIN_CPUS ? JR_IO_WHEN_FULL :
						   JR_IO_NEVER;
}

/* Start the write thread (flusher thread only); on failure write here. */
static void io_start(struct jr_rings *e)
{
	struct jr_merge *m = e->m;

	if (m->io_running || m->io_broken || m->io_policy == JR_IO_NEVER)
		return;
	atomic_store_explicit(&m->io_quit, 0, memory_order_relaxed);
	m->io_failed = false;
	if (JITRING_FAULT(io_start, e->jr) ||
	    pthread_create(&m->io_thread, NULL, io_main, e)) {
		m->io_broken = true;
		return;
	}
	m->io_running = true;
}

/*
 * Finish every posted batch and let the write thread go: joined, and out
 * of the process's thread count (a pause returns with it down, see
 * jitring_pause(); so does anyone counting threads before a fork).
 */
void jitring_batch_io_stop(struct jr_rings *e)
{
	struct jr_merge *m = e->m;

	io_reap(e, true);
	if (!m->io_running)
		return;
	/* Pairs with the seq_cst load in io_main(). */
	atomic_store_explicit(&m->io_quit, 1, memory_order_seq_cst);
	io_wake(m);
	pthread_join(m->io_thread, NULL);
	m->io_running = false;
	jitring_reaper_thread_gone(m->io_tid);
}

/*
 * Hand the batch being filled to the file: post it to the write thread
 * (after finishing what it wrote, and waiting for a free slot), or write
 * it here when there is none.  Either way batches reach the file one at a
 * time in order, so it ends on a group boundary after each.  @full: the
 * batch filled up, the merge is behind.
 */
void jitring_batch_submit(struct jr_rings *e, bool full)
{
	struct jr_merge *m = e->m;
	struct jr_batch *b = m->cur;

	io_reap(e, false);
	if (!b->ngrp) {
		/* Nothing to write; with nothing posted, heads may still
		 * move (padding). */
		if (m->reaped ==
		    atomic_load_explicit(&m->posted, memory_order_relaxed))
			publish_heads(e);
		return;
	}
	m->round_groups += b->ngrp;
	if (full || m->io_policy == JR_IO_ALWAYS)
		io_start(e);
	if (m->io_running && !e->failed) {
		io_post(e, b);
		return;
	}
	io_reap(e, true);
	b->off = e->file_off;
	if (!e->failed)
		batch_write(e, b);
	batch_done(e, b, false);
	m->post_off = e->file_off;
}

/* Everything merged so far in the file, every head published. */
void jitring_batch_settle(struct jr_rings *e)
{
	jitring_batch_submit(e, false);
	io_reap(e, true);
	publish_heads(e);
}

void jitring_batch_fork_prepare(struct jr_rings *e)
{
	if (e->m)
		io_reap(e, true);
}

void jitring_batch_fork_child(struct jr_rings *e)
{
	if (!e->m)
		return;
	e->m->io_running = false;
}

void jitring_batch_write_close(struct jr_rings *e)
{
	struct jitring *jr = e->jr;
	struct jitdump_prefix p = {
		.id = JIT_CODE_CLOSE,
		.total_size = sizeof(p),
		.timestamp = jitring_clock_ns(),
	};
	struct iovec iov = { &p, sizeof(p) };
	uint64_t done;
	int ret;

	if (!(jr->flags & JITRING_F_WRITE_CLOSE) || e->failed ||
	    atomic_load_explicit(&jr->io_error, memory_order_relaxed))
		return;
	ret = jitring_file_pwritev_all(jr->file.fd, &iov, 1, e->file_off,
				       &done);
	if (ret) {
		if (done && ftruncate(jr->file.fd, (off_t)e->file_off))
			jitring_log(jr, JITRING_LOG_ERR, "ftruncate: %s",
				    strerror(errno));
		jitring_set_io_error(jr, ret);
		return;
	}
	e->file_off += sizeof(p);
	jitring_count(&jr->c.records_written, 1);
	jitring_count(&jr->c.bytes_written, sizeof(p));
}
