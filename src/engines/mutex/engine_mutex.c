/* SPDX-License-Identifier: MIT */
/*
 * The mutex engine: the design every JIT runtime uses today, kept as the
 * yardstick the rings engine is measured against.  It follows CPython's
 * Python/perf_jit_trampoline.c: one process-wide lock held across the whole
 * group; inside it a CLOCK_MONOTONIC read per record, getpid() and
 * syscall(SYS_gettid) per entry, the code_index increment, and fwrite() of
 * each piece into a FILE with a 2 MiB buffer, on the calling thread.  It is
 * deliberately not tuned.
 *
 * Where it goes beyond CPython it is for correctness only:
 *  - A group is never split by a buffer flush: before a group that would
 *    not fit in the buffer the buffer is flushed, so the file only ever
 *    receives whole groups.  On a write error the file is truncated back to
 *    the end of the last fully flushed buffer (a group boundary), the
 *    buffered groups are counted lost and the writer fails (sticky error).
 *  - The engine state is never freed (like the handle): a thread that takes
 *    the lock after close sees the state and returns -ESHUTDOWN, instead of
 *    writing to a closed FILE as CPython's free_state race did.
 *  - code_index values come from the process-wide counter in blocks of
 *    JR_ID_BLOCK (one atomic per 64 entries instead of one per entry), so
 *    they are unique across writers; the blocks are remembered, so a move
 *    of an index this writer never handed out is refused.
 *
 * Invariants: every field below is protected by lock; flushed_off is the
 * file size the kernel has and always a group boundary.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "core/internal.h"
#include "core/perfmap.h"
#include "engine_mutex.h"
#include "format/record.h"

#define MUTEX_BUF_SIZE (2u << 20)

struct mutex_eng {
	pthread_mutex_t lock;
	FILE *f;
	char *buf;             /* the FILE's 2 MiB buffer */
	FILE *map;             /* perf map lines, flushed with the dump */
	uint64_t off;          /* logical end of file, buffer included */
	uint64_t flushed_off;  /* what the kernel has: a group boundary */
	uint64_t pend_entries; /* groups in the buffer */
	uint64_t pend_records;
	uint64_t id_next; /* next code_index of the current block */
	uint64_t id_end;  /* end of the current block */
	uint64_t *blocks; /* starts of the blocks taken, ascending */
	size_t nblocks;
	size_t blocks_cap;
};

/*
 * Set on this thread from before it asks for the lock until after it gave
 * the lock back, so that a signal handler interrupting it anywhere in
 * between (even inside pthread_mutex_lock/unlock) sees it and returns
 * -EDEADLK instead of blocking on a lock its own thread holds.  Only the
 * thread itself and its signal handlers touch it: volatile plus a signal
 * fence is the whole synchronization.
 */
static __thread volatile sig_atomic_t in_write;

/* Take the engine lock, or -EDEADLK if this thread is already inside. */
static int lock_take(struct mutex_eng *m)
{
	if (in_write)
		return -EDEADLK;
	in_write = 1;
	atomic_signal_fence(memory_order_seq_cst); /* pairs: lock_drop() */
	pthread_mutex_lock(&m->lock);
	return 0;
}

static void lock_drop(struct mutex_eng *m)
{
	pthread_mutex_unlock(&m->lock);
	atomic_signal_fence(memory_order_seq_cst); /* pairs: lock_take() */
	in_write = 0;
}

static int open_stream(struct jitring *jr, struct mutex_eng *m)
{
	int fd = dup(jr->file.fd);

	if (fd < 0)
		return -errno;
	m->f = fdopen(fd, "w");
	if (!m->f) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	/*
	 * A real 2 MiB buffer.  (CPython passes NULL here, and glibc then
	 * ignores the size and uses st_blksize, 4 KiB: the yardstick follows
	 * the stated design, which is also the kinder one to the mutex.)
	 */
	if (!m->buf)
		m->buf = malloc(MUTEX_BUF_SIZE);
	if (!m->buf) {
		fclose(m->f);
		m->f = NULL;
		return -ENOMEM;
	}
	setvbuf(m->f, m->buf, _IOFBF, MUTEX_BUF_SIZE);
	/* After the header (pwrite()) or the end of a continued dump. */
	if (fseeko(m->f, (off_t)jr->file.start, SEEK_SET)) {
		int ret = -errno;

		fclose(m->f);
		m->f = NULL;
		return ret;
	}
	m->off = m->flushed_off = jr->file.start;
	m->pend_entries = m->pend_records = 0;
	if (jr->map_fd >= 0) {
		int mfd = dup(jr->map_fd);

		m->map = mfd >= 0 ? fdopen(mfd, "w") : NULL;
		if (!m->map) {
			int ret = -errno;

			if (mfd >= 0)
				close(mfd);
			fclose(m->f);
			m->f = NULL;
			return ret;
		}
	}
	return 0;
}

/* Drop the map stream's buffered lines (their groups did not make it). */
static void map_discard(struct mutex_eng *m)
{
	if (m->map) {
		__fpurge(m->map);
		fclose(m->map);
		m->map = NULL;
	}
}

static int mutex_start(struct jitring *jr)
{
	struct mutex_eng *m = calloc(1, sizeof(*m));
	int ret;

	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->lock, NULL);
	ret = open_stream(jr, m);
	if (ret) {
		free(m->buf);
		free(m);
		return ret;
	}
	jr->eng = m;
	return 0;
}

/* Drop the buffer's groups after a failed write; caller holds the lock. */
static int fail_locked(struct jitring *jr, struct mutex_eng *m, int err)
{
	int fd = fileno(m->f);

	/* Whatever part of the buffer reached the file is cut off again. */
	if (ftruncate(fd, (off_t)m->flushed_off))
		jitring_log(jr, JITRING_LOG_ERR, "ftruncate: %s",
			    strerror(errno));
	__fpurge(m->f);
	clearerr(m->f);
	map_discard(m);
	jitring_count(&jr->c.lost_io, m->pend_entries);
	m->pend_entries = m->pend_records = 0;
	m->off = m->flushed_off;
	jitring_set_io_error(jr, err);
	return err;
}

static int flush_locked(struct jitring *jr, struct mutex_eng *m)
{
	if (!m->f)
		return 0;
	if (fflush(m->f) == EOF || ferror(m->f))
		return fail_locked(jr, m, errno ? -errno : -EIO);
	/* The map only ever names groups the dump has. */
	if (m->map && fflush(m->map) == EOF) {
		jitring_log(jr, JITRING_LOG_ERR, "perf map: %s",
			    strerror(errno));
		map_discard(m);
	}
	jitring_count(&jr->c.entries_written, m->pend_entries);
	jitring_count(&jr->c.records_written, m->pend_records);
	jitring_count(&jr->c.bytes_written, m->off - m->flushed_off);
	if (m->pend_entries)
		jitring_count(&jr->c.batches, 1);
	m->pend_entries = m->pend_records = 0;
	m->flushed_off = m->off;
	return 0;
}

/* Make room so that @bytes go into the buffer without a flush mid-group. */
static int reserve_locked(struct jitring *jr, struct mutex_eng *m,
			  uint64_t bytes)
{
	if (__fpending(m->f) + bytes > MUTEX_BUF_SIZE)
		return flush_locked(jr, m);
	return 0;
}

static int lock_open(struct jitring *jr, struct mutex_eng *m)
{
	uint32_t s = atomic_load_explicit(&jr->state, memory_order_acquire);
	int ret;

	/*
	 * Closing: refuse before the lock, which close holds while it
	 * flushes (a handler interrupting jitring_close() on this thread
	 * gets -ESHUTDOWN rather than a self-deadlock).
	 */
	if (unlikely(s != JR_OPEN && s != JR_FORKED))
		return jitring_refuse_state(jr, s);
	ret = lock_take(m);
	if (ret) {
		jitring_count(&jr->c.refused_invalid, 1);
		return ret;
	}
	s = atomic_load_explicit(&jr->state, memory_order_acquire);
	if (unlikely(s != JR_OPEN && s != JR_FORKED)) {
		lock_drop(m);
		return jitring_refuse_state(jr, s);
	}
	return 0;
}

/*
 * End a write or move under the lock.  @ret is 0 or the file's error from
 * this call's own flush or commit, which then wrote nothing of it: count
 * it as refused.
 */
static int unlock_ret(struct jitring *jr, struct mutex_eng *m, int ret)
{
	lock_drop(m);
	if (ret)
		jitring_count(&jr->c.refused_io, 1);
	return ret;
}

/* After a group went into the FILE: account it, or fail the writer. */
static int commit_locked(struct jitring *jr, struct mutex_eng *m,
			 uint64_t bytes, uint32_t records)
{
	if (ferror(m->f))
		return fail_locked(jr, m, -EIO);
	m->off += bytes;
	m->pend_entries++;
	m->pend_records += records;
	return 0;
}

/*
 * Make room for more block starts.  mmap/mremap, not malloc: a write may
 * run in a signal handler that interrupted malloc (see jitring_write()).
 * Without memory the block goes unrecorded and its moves get -ENOENT, as
 * with the rings engine.
 */
static void blocks_grow(struct mutex_eng *m)
{
	size_t old = m->blocks_cap * sizeof(*m->blocks);
	size_t len = old ? 2 * old : jitring_page_size();
	void *p = old ? mremap(m->blocks, old, len, MREMAP_MAYMOVE) :
			mmap(NULL, len, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return;
	m->blocks = p;
	m->blocks_cap = len / sizeof(*m->blocks);
}

/* The next code_index, under the lock. */
static uint64_t id_next_locked(struct mutex_eng *m)
{
	if (m->id_next == m->id_end) {
		uint64_t start = jitring_ids_take();

		if (m->nblocks == m->blocks_cap)
			blocks_grow(m);
		if (m->nblocks < m->blocks_cap)
			m->blocks[m->nblocks++] = start;
		m->id_next = start;
		m->id_end = start + JR_ID_BLOCK;
	}
	return m->id_next++;
}

/* Did this writer hand out @id?  Under the lock. */
static bool id_issued_locked(const struct mutex_eng *m, uint64_t id)
{
	size_t lo = 0, hi = m->nblocks;

	/* The last block whose start is <= @id. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->blocks[mid] <= id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || id - m->blocks[lo - 1] >= JR_ID_BLOCK)
		return false;
	/* In the current block only what was handed out so far. */
	return m->blocks[lo - 1] + JR_ID_BLOCK != m->id_end || id < m->id_next;
}

static int64_t mutex_write(struct jitring *jr, const struct jitring_group *g)
{
	struct mutex_eng *m = jr->eng;
	const struct jitring_entry *e = g->e;
	uint64_t code_index;
	int ret;

	ret = lock_open(jr, m);
	if (ret)
		return ret;
	ret = reserve_locked(jr, m, g->total);
	if (ret)
		goto out;

	if (g->unw_size) {
		struct jitdump_code_unwinding_info u;
		struct jitdump_eh_frame_hdr h;
		int32_t pc_begin = jitring_record_pc_begin(g);
		const char *eh = e->eh_frame;
		static const char zeros[8];

		jitring_record_unw_fixed(g, jitring_clock_ns(), &u);
		fwrite(&u, sizeof(u), 1, m->f);
		fwrite(eh, g->eh.pc_begin_off, 1, m->f);
		fwrite(&pc_begin, sizeof(pc_begin), 1, m->f);
		fwrite(eh + g->eh.pc_begin_off + 4,
		       e->eh_frame_size - g->eh.pc_begin_off - 4, 1, m->f);
		jitring_record_eh_hdr(g, &h);
		fwrite(&h, sizeof(h), 1, m->f);
		if (g->eh_pad)
			fwrite(zeros, g->eh_pad, 1, m->f);
	}
	if (g->dbg_size) {
		struct jitdump_code_debug_info d;

		jitring_record_dbg_fixed(g, jitring_clock_ns(), &d);
		fwrite(&d, sizeof(d), 1, m->f);
		/* The closing row included: the rings engine's rows. */
		for (uint32_t i = 0; i < g->dbg_rows; i++) {
			struct jitdump_debug_entry de;
			const char *file = jitring_record_dbg_row(g, i, &de);

			fwrite(&de, sizeof(de), 1, m->f);
			fwrite(file, strlen(file) + 1, 1, m->f);
		}
	}
	{
		struct jitdump_code_load l;
		uint64_t ts = jitring_clock_ns();
		uint32_t pid = (uint32_t)getpid();
		uint32_t tid = (uint32_t)syscall(SYS_gettid);
		char namebuf[JITRING_NAME_MAX + 1];
		const char *name = e->name;

		if (e->nr_name_parts) {
			/* The yardstick: formats the name, as runtimes do. */
			jitring_record_put_name(g, (uint8_t *)namebuf);
			name = namebuf;
		}
		code_index = id_next_locked(m);
		jitring_record_load_fixed(g, ts, pid, tid, code_index, &l);
		fwrite(&l, sizeof(l), 1, m->f);
		fwrite(name, g->name_len, 1, m->f);
		fwrite(jitring_record_code(e), e->code_size, 1, m->f);
		if (m->map) {
			char line[JR_PERFMAP_LINE_MAX];

			fwrite(line,
			       jitring_perfmap_line(line, l.code_addr,
						    l.code_size, name,
						    g->name_len - 1),
			       1, m->map);
		}
	}
	ret = commit_locked(jr, m, g->total, g->nr_records);
out:
	ret = unlock_ret(jr, m, ret);
	return ret ? ret : (int64_t)code_index;
}

static int mutex_move(struct jitring *jr, uint64_t code_index,
		      const void *new_addr, const void *old_addr,
		      uint64_t code_size)
{
	struct mutex_eng *m = jr->eng;
	uint8_t rec[JR_MOVE_SIZE];
	int ret;

	ret = lock_open(jr, m);
	if (ret)
		return ret;
	if (!id_issued_locked(m, code_index)) {
		lock_drop(m);
		jitring_count(&jr->c.refused_invalid, 1);
		return -ENOENT;
	}
	ret = reserve_locked(jr, m, sizeof(rec));
	if (!ret) {
		jitring_record_encode_move(rec, jitring_clock_ns(),
					   (uint32_t)getpid(),
					   (uint32_t)syscall(SYS_gettid),
					   code_index, old_addr, new_addr,
					   code_size);
		fwrite(rec, sizeof(rec), 1, m->f);
		ret = commit_locked(jr, m, sizeof(rec), 1);
	}
	return unlock_ret(jr, m, ret);
}

static int mutex_flush(struct jitring *jr)
{
	struct mutex_eng *m = jr->eng;
	int ret = lock_take(m);

	if (ret)
		return ret;
	ret = flush_locked(jr, m);
	lock_drop(m);
	return ret;
}

/* Close's work under the lock; late callers find CLOSING and refuse. */
static int stop_locked(struct jitring *jr, struct mutex_eng *m)
{
	int ret;

	if (m->f && (jr->flags & JITRING_F_WRITE_CLOSE) &&
	    !atomic_load_explicit(&jr->io_error, memory_order_relaxed)) {
		struct jitdump_prefix p = {
			.id = JIT_CODE_CLOSE,
			.total_size = sizeof(p),
			.timestamp = jitring_clock_ns(),
		};

		fwrite(&p, sizeof(p), 1, m->f);
		m->off += sizeof(p);
		m->pend_records++;
	}
	ret = flush_locked(jr, m);
	if (m->f) {
		if (fclose(m->f) == EOF && !ret)
			ret = -errno;
		m->f = NULL;
	}
	if (m->map) {
		fclose(m->map);
		m->map = NULL;
	}
	free(m->buf);
	m->buf = NULL;
	/* Late callers are refused before they look at the blocks. */
	if (m->blocks)
		munmap(m->blocks, m->blocks_cap * sizeof(*m->blocks));
	m->blocks = NULL;
	m->nblocks = m->blocks_cap = 0;
	/* The engine state stays: a late caller must find the lock. */
	return ret;
}

static int mutex_stop(struct jitring *jr)
{
	struct mutex_eng *m = jr->eng;
	int ret;

	pthread_mutex_lock(&m->lock);
	ret = stop_locked(jr, m);
	pthread_mutex_unlock(&m->lock);
	return ret;
}

static int mutex_exit(struct jitring *jr, const struct timespec *until)
{
	struct mutex_eng *m = jr->eng;
	int ret;

	/* exit() from a handler that interrupted this thread's own write:
	 * the lock is held below us. */
	if (in_write)
		return -EDEADLK;
	/* A writer holds it across its group, and its flush if the buffer
	 * filled: a write stuck in the kernel is not waited for past
	 * @until. */
	ret = pthread_mutex_timedlock(&m->lock, until);
	if (ret)
		return -ret;
	/* The FILE is closed here, so exit()'s flush of every stream
	 * (without their locks) never writes half a group. */
	ret = stop_locked(jr, m);
	pthread_mutex_unlock(&m->lock);
	return ret;
}

static void mutex_fork_prepare(struct jitring *jr)
{
	struct mutex_eng *m = jr->eng;

	pthread_mutex_lock(&m->lock);
}

static void mutex_fork_parent(struct jitring *jr)
{
	struct mutex_eng *m = jr->eng;

	pthread_mutex_unlock(&m->lock);
}

static uint32_t mutex_fork_child(struct jitring *jr)
{
	struct mutex_eng *m = jr->eng;

	/* Taken in prepare by the forking thread, which is this one. */
	pthread_mutex_unlock(&m->lock);
	in_write = 0;
	if (m->f) {
		/* The buffer holds the parent's groups: never write them. */
		__fpurge(m->f);
		fclose(m->f);
		m->f = NULL;
	}
	map_discard(m);
	/* The child's file has none of the parent's loads to move. */
	m->nblocks = 0;
	m->id_next = m->id_end = 0;
	if (jr->file.fd < 0 || open_stream(jr, m))
		m->f = NULL;
	/* No thread to restart: writes go on at once. */
	return JR_OPEN;
}

const struct jitring_engine_ops jitring_mutex_ops = {
	.start = mutex_start,
	.write = mutex_write,
	.move = mutex_move,
	.flush = mutex_flush,
	/* pause, kick, kit_register: no thread of its own. */
	.stop = mutex_stop,
	.exit = mutex_exit,
	.fork_prepare = mutex_fork_prepare,
	.fork_parent = mutex_fork_parent,
	.fork_child = mutex_fork_child,
};
