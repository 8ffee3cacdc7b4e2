/* SPDX-License-Identifier: MIT */
/*
 * Writer lifecycle: config, the dump file and its marker mapping, the
 * public entry points, fork handling and statistics.
 *
 * Lifetime (see internal.h): handles are tombstones kept on jr_all for the
 * life of the process.  jitring_close() moves state OPEN/FAILED/FORKED ->
 * CLOSING with a seq_cst CAS (only one closer wins; others get -EBADF),
 * waits for cold-path users to leave, lets the engine drain and stop, then
 * releases the file and sets CLOSED.
 *
 * Fork: pthread_atfork handlers take jr_global_lock and every live handle's
 * lock (so no close or open is half done), and the engine's own locks.  In
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "internal.h"
#include "perfmap.h"
#include "record.h"
#include "rings.h"
#include "testpoint.h"

#define JR_CONFIG_V1_SIZE ((uint32_t)sizeof(struct jitring_config))
#define JR_STATS_V1_SIZE ((uint32_t)sizeof(struct jitring_stats))
#define JR_RING_MIN (4u << 10)
#define JR_RING_MAX (64u << 20)
#define JR_RING_ADAPT_MIN (64u << 10)
#define JR_RING_ADAPT_MAX (4u << 20)
#define JR_BUDGET_DEFAULT (512ull << 20)
#define JR_DELAY_DEFAULT 20u
#define JR_HOLDBACK_DEFAULT 10u

static pthread_mutex_t jr_global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct jitring *jr_all; /* every handle ever made, newest first */
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

void jitring_log(const struct jitring *jr, int level, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!jr->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	jr->log(jr->log_arg, level, msg);
}

void jitring_set_io_error(struct jitring *jr, int err)
{
	int32_t none = 0;
	uint32_t open = JR_OPEN;

	if (atomic_compare_exchange_strong_explicit(&jr->io_error, &none, err,
						    memory_order_relaxed,
						    memory_order_relaxed))
		jitring_log(jr, JITRING_LOG_ERR, "jitdump %s failed: %s",
			    jr->file.path, strerror(-err));
	/*
	 * Writers test state only; the error value is read after they see
	 * JR_FAILED.  Pairs with the acquire load of state in
	 * jitring_refuse_state().
	 */
	atomic_compare_exchange_strong_explicit(&jr->state, &open, JR_FAILED,
						memory_order_release,
						memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* I/O, with a test-only fault hook.                                   */

#ifdef JITRING_TESTPOINTS
jitring_io_hook_fn jitring_io_hook;
_Atomic(jitring_testpoint_fn) jitring_testpoint_hook;
_Atomic(jitring_fault_fn) jitring_fault_hook;
#endif

int jitring_file_pwritev_all(int fd, const struct iovec *iov, int iovcnt,
			     uint64_t off, uint64_t *done)
{
	struct iovec local[64];
	const struct iovec *cur = iov;
	uint64_t total = 0;
	int ret = 0;

	*done = 0;
	while (iovcnt > 0) {
		ssize_t n;

#ifdef JITRING_TESTPOINTS
		if (jitring_io_hook)
			n = jitring_io_hook(fd, cur, iovcnt, (off_t)(off + total));
		else
#endif
			n = pwritev(fd, cur, iovcnt, (off_t)(off + total));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			break;
		}
		if (n == 0) {
			ret = -EIO;
			break;
		}
		total += (uint64_t)n;
		/* Skip what was written; copy the rest so @iov stays const. */
		while (iovcnt > 0 && (size_t)n >= cur->iov_len) {
			n -= (ssize_t)cur->iov_len;
			cur++;
			iovcnt--;
		}
		if (iovcnt > 0 && n > 0) {
			int k = iovcnt < (int)JR_ARRAY_SIZE(local) ?
				iovcnt : (int)JR_ARRAY_SIZE(local);

			/* cur may already point into local: memmove. */
			memmove(local, cur, sizeof(*cur) * (size_t)k);
			local[0].iov_base = (char *)local[0].iov_base + n;
			local[0].iov_len -= (size_t)n;
			if (k < iovcnt) {
				/* Finish the partial vector alone, then go on. */
				uint64_t more;

				ret = jitring_file_pwritev_all(fd, local, 1,
							       off + total,
							       &more);
				total += more;
				if (ret)
					break;
				cur++;
				iovcnt--;
				continue;
			}
			cur = local;
		}
	}
	*done = total;
	return ret;
}

/* ------------------------------------------------------------------ */
/* The dump file.                                                       */

/* Is @path a file a writer of this process (open or closed) made? */
static int path_is_ours(const char *path)
{
	for (struct jitring *h = jr_all; h; h = h->next)
		if ((h->file.path && strcmp(h->file.path, path) == 0) ||
		    (h->map_path && strcmp(h->map_path, path) == 0))
			return 1;
	return 0;
}

/*
 * A dump left by an earlier process that had our pid (pid reuse) is ours
 * to replace: a regular file we own with one link.  Anything else at the
 * path (a planted symlink, another user's file, a hard link, a dump this
 * process made) is refused.  Called with jr_global_lock held.
 */
static int stale_dump_replaceable(const char *path)
{
	struct stat st;

	if (lstat(path, &st))
		return 0;
	return S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	       st.st_nlink == 1 && !path_is_ours(path);
}

bool jitring_map_reusable(const char *path)
{
	bool found = false;

	for (struct jitring *h = jr_all; h; h = h->next) {
		if (!h->map_path || strcmp(h->map_path, path))
			continue;
		if (atomic_load_explicit(&h->state, memory_order_acquire) !=
		    JR_CLOSED)
			return false;
		found = true;
	}
	return found;
}

int jitring_file_create_excl(const char *path)
{
	for (int tries = 0;; tries++) {
		int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
				    O_CLOEXEC, 0644);

		if (fd >= 0)
			return fd;
		if (errno != EEXIST || tries > 0 ||
		    !stale_dump_replaceable(path))
			return -errno;
		if (unlink(path) && errno != ENOENT)
			return -EEXIST;
	}
}

static int file_create(struct jr_file *f, uint32_t elf_mach)
{
	struct jitdump_header h;
	char path[PATH_MAX];
	long page = sysconf(_SC_PAGESIZE);
	uint32_t pid = (uint32_t)getpid();
	int fd, n, ret;
	void *map;

	n = snprintf(path, sizeof(path), "%s/jit-%u.dump", f->dir, pid);
	if (n < 0 || (size_t)n >= sizeof(path))
		return -ENAMETOOLONG;
	fd = jitring_file_create_excl(path);
	if (fd < 0)
		return fd;

	jitring_record_header(&h, elf_mach, pid, jitring_clock_ns());
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		ret = errno ? -errno : -EIO;
		goto err_unlink;
	}
	map = mmap(NULL, (size_t)page, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd,
		   0);
	if (map == MAP_FAILED) {
		ret = -errno;
		goto err_unlink;
	}
	free(f->path);
	f->path = strdup(path);
	if (!f->path) {
		munmap(map, (size_t)page);
		ret = -ENOMEM;
		goto err_unlink;
	}
	f->fd = fd;
	f->pid = pid;
	f->marker = map;
	f->marker_len = (size_t)page;
	return 0;

err_unlink:
	unlink(path);
	close(fd);
	return ret;
}

/* Unmap and close; the dump itself stays (perf inject needs it). */
static void file_release(struct jr_file *f)
{
	if (f->marker)
		munmap(f->marker, f->marker_len);
	f->marker = NULL;
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

/* ------------------------------------------------------------------ */
/* Fork.                                                                */

static void atfork_prepare(void)
{
	pthread_mutex_lock(&jr_global_lock);
	for (struct jitring *jr = jr_all; jr; jr = jr->next) {
		pthread_mutex_lock(&jr->lock);
		if (atomic_load_explicit(&jr->state, memory_order_relaxed) >=
		    JR_CLOSING)
			continue;
		if (jr->engine == JITRING_ENGINE_MUTEX)
			jitring_mutex_fork_prepare(jr);
		else
			jitring_rings_fork_prepare(jr);
	}
}

static void atfork_parent(void)
{
	for (struct jitring *jr = jr_all; jr; jr = jr->next) {
		if (atomic_load_explicit(&jr->state, memory_order_relaxed) <
		    JR_CLOSING) {
			if (jr->engine == JITRING_ENGINE_MUTEX)
				jitring_mutex_fork_parent(jr);
			else
				jitring_rings_fork_parent(jr);
		}
		pthread_mutex_unlock(&jr->lock);
	}
	pthread_mutex_unlock(&jr_global_lock);
}

static void atfork_child(void)
{
	for (struct jitring *jr = jr_all; jr; jr = jr->next) {
		uint32_t s = atomic_load_explicit(&jr->state,
						  memory_order_relaxed);
		int ret;

		pthread_mutex_init(&jr->lock, NULL);
		atomic_store_explicit(&jr->users, 0, memory_order_relaxed);
		if (s >= JR_CLOSING) {
			/* A close was under way in the parent: not ours. */
			atomic_store_explicit(&jr->state, JR_CLOSED,
					      memory_order_relaxed);
			continue;
		}
		/* The parent's fd and mapping: drop ours, keep its file. */
		file_release(&jr->file);
		jitring_perfmap_close(jr);
		atomic_store_explicit(&jr->io_error, 0, memory_order_relaxed);
		ret = file_create(&jr->file, jr->elf_mach);
		if (!ret && (jr->flags & JITRING_F_PERF_MAP))
			ret = jitring_perfmap_open(jr);
		/* The child's file starts empty: so do its counters. */
		memset(&jr->c, 0, sizeof(jr->c));
		if (!ret)
			atomic_store_explicit(&jr->c.bytes_written,
					      sizeof(struct jitdump_header),
					      memory_order_relaxed);
		if (jr->engine == JITRING_ENGINE_MUTEX)
			jitring_mutex_fork_child(jr);
		else
			jitring_rings_fork_child(jr);
		/* The rings engine starts its flusher on first use. */
		atomic_store_explicit(&jr->state,
				      ret ? JR_FAILED :
				      jr->engine == JITRING_ENGINE_RINGS ?
				      JR_FORKED : JR_OPEN,
				      memory_order_relaxed);
		if (ret)
			atomic_store_explicit(&jr->io_error, ret,
					      memory_order_relaxed);
	}
	pthread_mutex_init(&jr_global_lock, NULL);
}

/*
 * exit() flushes stdio buffers, so the mutex engine's entries reach the file
 * even without jitring_close(); flush the rings engine's too.  Not close:
 * other threads may still be running.
 */
static void atexit_flush(void)
{
	struct jitring *jr;

	pthread_mutex_lock(&jr_global_lock);
	jr = jr_all;
	pthread_mutex_unlock(&jr_global_lock);
	/* Handles are never freed and the list only grows at the head. */
	for (; jr; jr = jr->next)
		if (jr->engine == JITRING_ENGINE_RINGS &&
		    atomic_load_explicit(&jr->state, memory_order_acquire) ==
			    JR_OPEN)
			jitring_flush(jr);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	atexit(atexit_flush);
}

/* ------------------------------------------------------------------ */
/* Open and close.                                                      */

static int config_load(struct jitring *jr, const struct jitring_config *ucfg)
{
	struct jitring_config cfg;
	const char *dir;

	jitring_config_init(&cfg);
	if (ucfg) {
		if (ucfg->struct_size < JR_CONFIG_V1_SIZE)
			return -EINVAL;
		memcpy(&cfg, ucfg, JR_CONFIG_V1_SIZE);
	}
	if (cfg.engine > JITRING_ENGINE_MUTEX || (cfg.flags & ~JITRING_F_ALL) ||
	    cfg.reserved)
		return -EINVAL;
	if (cfg.ring_size && (cfg.ring_size < JR_RING_MIN ||
			      cfg.ring_size > JR_RING_MAX ||
			      (cfg.ring_size & (cfg.ring_size - 1))))
		return -EINVAL;

	jr->engine = cfg.engine == JITRING_ENGINE_DEFAULT ?
		     JITRING_ENGINE_RINGS : cfg.engine;
	jr->flags = cfg.flags;
	jr->ring_min = cfg.ring_size ? cfg.ring_size : JR_RING_ADAPT_MIN;
	jr->ring_max = cfg.ring_size ? cfg.ring_size : JR_RING_ADAPT_MAX;
	jr->max_delay_ms = cfg.max_delay_ms ? cfg.max_delay_ms :
			   JR_DELAY_DEFAULT;
	jr->holdback_ms = cfg.holdback_ms ? cfg.holdback_ms :
			  JR_HOLDBACK_DEFAULT;
	jr->mem_budget = cfg.mem_budget ? cfg.mem_budget : JR_BUDGET_DEFAULT;
	if (jr->mem_budget < jr->ring_min)
		return -EINVAL;
	jr->log = cfg.log;
	jr->log_arg = cfg.log_arg;
	jr->elf_mach = cfg.elf_mach ? cfg.elf_mach :
		       jitring_record_host_mach();

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
	jr->map_fd = -1;
	atomic_init(&jr->state, JR_OPEN);
	atomic_init(&jr->next_id, 1);
	pthread_mutex_init(&jr->lock, NULL);

	ret = config_load(jr, cfg);
	if (ret)
		goto err_free;

	pthread_mutex_lock(&jr_global_lock);
	ret = file_create(&jr->file, jr->elf_mach);
	if (ret) {
		pthread_mutex_unlock(&jr_global_lock);
		goto err_free;
	}
	atomic_store_explicit(&jr->c.bytes_written,
			      sizeof(struct jitdump_header),
			      memory_order_relaxed);
	ret = jr->flags & JITRING_F_PERF_MAP ? jitring_perfmap_open(jr) : 0;
	if (!ret) {
		if (jr->engine == JITRING_ENGINE_MUTEX)
			ret = jitring_mutex_start(jr);
		else
			ret = jitring_rings_start(jr);
		if (ret && jr->map_path) {
			jitring_perfmap_close(jr);
			unlink(jr->map_path);
		}
	}
	if (ret) {
		pthread_mutex_unlock(&jr_global_lock);
		unlink(jr->file.path);
		file_release(&jr->file);
		goto err_free;
	}
	jr->next = jr_all;
	jr_all = jr;
	pthread_mutex_unlock(&jr_global_lock);
	*out = jr;
	return 0;

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

	/* Pairs with the release decrement in jitring_exit(). */
	for (unsigned spins = 0;
	     atomic_load_explicit(&jr->users, memory_order_acquire); spins++) {
		if (jr->engine == JITRING_ENGINE_RINGS)
			jitring_rings_kick(jr);
		if (spins < 64)
			jr_cpu_relax();
		else
			usleep(100);
	}

	if (jr->engine == JITRING_ENGINE_MUTEX)
		ret = jitring_mutex_stop(jr);
	else
		ret = jitring_rings_stop(jr, s == JR_FORKED);
	if (!ret)
		ret = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
	file_release(&jr->file);
	jitring_perfmap_close(jr);
	/* Pairs with the acquire in jitring_refuse_state(). */
	atomic_store_explicit(&jr->state, JR_CLOSED, memory_order_release);
	pthread_mutex_unlock(&jr->lock);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Calls.                                                               */

/*
 * The answer for a call that found state != JR_OPEN.  Counts the refusal.
 * Return: -ESHUTDOWN or the file's error.
 */
int jitring_refuse_state(struct jitring *jr, uint32_t s)
{
	if (s >= JR_CLOSING) {
		jitring_count(&jr->c.refused_shutdown, 1);
		return -ESHUTDOWN;
	}
	jitring_count(&jr->c.refused_io, 1);
	/* s is JR_FAILED, whose store was a release after io_error. */
	return atomic_load_explicit(&jr->io_error, memory_order_relaxed);
}

int64_t jitring_write(struct jitring *jr, const struct jitring_entry *e)
{
	struct jitring_group g;
	int ret;

	if (unlikely(!handle_ok(jr)))
		return -EINVAL;
	ret = jitring_record_plan(&g, e);
	if (unlikely(ret)) {
		jitring_count(&jr->c.refused_invalid, 1);
		return ret;
	}
	if (likely(jr->engine == JITRING_ENGINE_RINGS))
		return jitring_rings_write(jr, &g);
	return jitring_mutex_write(jr, &g);
}

int jitring_move(struct jitring *jr, uint64_t code_index, const void *new_addr,
		 const void *old_addr, uint64_t code_size)
{
	int ret;

	if (!handle_ok(jr))
		return -EINVAL;
	ret = jitring_record_move_check(new_addr, code_size);
	if (ret) {
		jitring_count(&jr->c.refused_invalid, 1);
		return ret;
	}
	if (jr->engine == JITRING_ENGINE_RINGS)
		return jitring_rings_move(jr, code_index, new_addr, old_addr,
					  code_size);
	return jitring_mutex_move(jr, code_index, new_addr, old_addr,
				  code_size);
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
	if (jr->engine == JITRING_ENGINE_MUTEX)
		ret = jitring_mutex_flush(jr);
	else
		ret = jitring_rings_flush(jr);
	jitring_exit(jr);
	if (!ret) {
		ret = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
		if (!ret)
			jitring_count(&jr->c.flushes, 1);
	}
	return ret;
}

int jitring_thread_detach(struct jitring *jr)
{
	if (jr && !handle_ok(jr))
		return 0;
	return jitring_rings_thread_detach(jr);
}

void jitring_stats(const struct jitring *jr, struct jitring_stats *st)
{
	struct jitring_stats s;
	const struct jr_counters *c;

	if (!handle_ok(jr) || !st || st->struct_size < JR_STATS_V1_SIZE)
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
	LOAD(tramp_copies);
	LOAD(tramp_arenas_ahead);
	LOAD(tramp_arenas_waited);
#undef LOAD
	s.io_error = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
	memcpy(st, &s, JR_STATS_V1_SIZE);
}
