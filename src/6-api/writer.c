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
 * Fork: pthread_atfork handlers take jr_global_lock and the lock of every
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

#include "clock.h"
#include "engine_mutex.h"
#include "internal.h"
#include "perfmap.h"
#include "record.h"
#include "rings.h"
#include "testpoint.h"

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

int jitring_struct_in(void *dst, size_t dsize, const void *src, uint32_t ssize,
		      size_t v1)
{
	const unsigned char *tail = (const unsigned char *)src + dsize;

	if (ssize < v1)
		return -EINVAL;
	for (size_t i = 0; ssize > dsize && i < ssize - dsize; i++)
		if (tail[i])
			return -E2BIG;
	memset(dst, 0, dsize);
	memcpy(dst, src, ssize < dsize ? ssize : dsize);
	return 0;
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
			n = jitring_io_hook(fd, cur, iovcnt,
					    (off_t)(off + total));
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
					iovcnt :
					(int)JR_ARRAY_SIZE(local);

			/* cur may already point into local: memmove. */
			memmove(local, cur, sizeof(*cur) * (size_t)k);
			local[0].iov_base = (char *)local[0].iov_base + n;
			local[0].iov_len -= (size_t)n;
			if (k < iovcnt) {
				/* Finish the partial vector alone, then go on. */
				uint64_t more;

				ret = jitring_file_pwritev_all(
					fd, local, 1, off + total, &more);
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
/* code_index values.                                                   */

/*
 * One counter for the process: two writers, open at once or one after the
 * other on the same dump, never hand out the same index (perf names each
 * injected ELF by it).  Blocks of JR_ID_BLOCK, aligned: the rings engine
 * keeps one idmap word per block.  Relaxed: uniqueness is the RMW's, and
 * nothing else is published through the counter.
 */
static _Atomic uint64_t jr_ids = JR_ID_BLOCK;

uint64_t jitring_ids_take(void)
{
	return atomic_fetch_add_explicit(&jr_ids, JR_ID_BLOCK,
					 memory_order_relaxed);
}

uint64_t jitring_ids_peek(void)
{
	return atomic_load_explicit(&jr_ids, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* Whose file is it.                                                    */

/*
 * The dump (and the perf map) is named by pid, and a pid is not unique:
 * another process with the same pid in another pid namespace may share the
 * directory, an earlier process with our pid may have left its dump, and a
 * directory has many spellings (D, D/, ./D, a symlink to D).  So a file is
 * told by what it is, never by its path string:
 *
 *  - ours: a writer of this process holds a descriptor to it (device and
 *    inode compared).  Every file a writer makes stays open, with its
 *    lock, until exit, also after jitring_close() (perf inject still needs
 *    the dump), or until a later writer continues it;
 *  - live: somebody holds its lock.  The owner takes an OFD lock (per open
 *    file description, so a second open of the file conflicts even inside
 *    this process, and our own dup()s share it) on the file it made and
 *    keeps it as long as it keeps the descriptor;
 *  - stale: a regular file we own, with one link, that nobody holds the
 *    lock of.  Only the holder of a file's lock ever unlinks it, after
 *    checking that the name still refers to it, so two processes racing
 *    over one stale file cannot remove each other's new one.
 *
 * A creator locks its O_EXCL file right away; if someone else got the lock
 * first (taking the fresh file for a stale one), the creator gives up with
 * -EEXIST and the other one wins.  Nothing here opens anything but a
 * regular file (O_NOFOLLOW, O_NONBLOCK, fstat() after open), waits for a
 * lock, or holds the global lock across a system call.
 */

static int *held_fd(struct jitring *h, enum jr_kind kind)
{
	return kind == JR_KIND_MAP ? &h->map_hold : &h->file.fd;
}

static struct jr_ident *held_id(struct jitring *h, enum jr_kind kind)
{
	return kind == JR_KIND_MAP ? &h->map_id : &h->file.id;
}

static void global_lock(bool child)
{
	/*
	 * A fork child runs single-threaded inside the atfork handler,
	 * which already holds the lock, and holds it until the end: the
	 * engines' locks atfork_prepare() took after it are released only
	 * by their fork_child handlers, so taking it again meanwhile would
	 * invert the order (TSan reports it).
	 */
	if (!child)
		pthread_mutex_lock(&jr_global_lock);
}

static void global_unlock(bool child)
{
	if (!child)
		pthread_mutex_unlock(&jr_global_lock);
}

static bool handle_closed(struct jitring *h)
{
	/* Pairs with the release store of JR_CLOSED in jitring_close(): its
	 * engine no longer touches the file. */
	return atomic_load_explicit(&h->state, memory_order_acquire) ==
	       JR_CLOSED;
}

/*
 * Lock the whole file through its open file description.  Kernels before
 * 3.15 have no OFD locks; flock(2) locks have the same per-description
 * semantics.
 * Return: 0; -EAGAIN if someone else holds it; -errno (-ENOLCK, ...) if
 * the file system cannot lock.
 */
static int lock_file(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	if (!fcntl(fd, F_OFD_SETLK, &fl))
		return 0;
	if (errno == EINVAL && !flock(fd, LOCK_EX | LOCK_NB))
		return 0;
	return errno == EACCES || errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

/* Is @fd still the file named @name in @dirfd?  *@st gets fstat(@fd). */
static bool still_named(int dirfd, const char *name, int fd, struct stat *st)
{
	struct stat n;

	return !fstat(fd, st) &&
	       !fstatat(dirfd, name, &n, AT_SYMLINK_NOFOLLOW) &&
	       n.st_dev == st->st_dev && n.st_ino == st->st_ino;
}

static bool stale_shape(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == geteuid() &&
	       st->st_nlink == 1;
}

/*
 * The file @st at @name is not ours: remove it if it is stale.
 * Return: 0 if it is gone (by us or someone else: try again), -EEXIST if
 * it must stay.
 */
static int stale_remove(int dirfd, const char *name, const struct stat *st)
{
	struct stat fst;
	int fd, ret = -EEXIST;

	if (!stale_shape(st))
		return -EEXIST;
	fd = openat(dirfd, name,
		    O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errno == ENOENT ? 0 : -EEXIST;
	if (fstat(fd, &fst) || fst.st_dev != st->st_dev ||
	    fst.st_ino != st->st_ino || !stale_shape(&fst))
		goto out;
	/* Held by its owner (live), or no locks here: never touch it. */
	if (lock_file(fd))
		goto out;
	ret = 0;
	/* Ours to remove only while the name still refers to it. */
	if (still_named(dirfd, name, fd, &fst) && stale_shape(&fst) &&
	    unlinkat(dirfd, name, 0) && errno != ENOENT)
		ret = -EEXIST;
out:
	close(fd);
	return ret;
}

/*
 * A writer of this process, closed or not as @closed says, that holds a
 * @kind file made under the same name (the same directory, by device and
 * inode, and pid).  Called with the global lock.
 */
static struct jitring *held_same_name(enum jr_kind kind,
				      const struct jr_ident *id, bool closed)
{
	for (struct jitring *h = jr_all; h; h = h->next) {
		const struct jr_ident *hid = held_id(h, kind);

		if (*held_fd(h, kind) >= 0 && hid->dir_dev == id->dir_dev &&
		    hid->dir_ino == id->dir_ino && hid->pid == id->pid &&
		    handle_closed(h) == closed)
			return h;
	}
	return NULL;
}

/* Which writer of this process holds the file @st?  Global lock held. */
static struct jitring *held_file(const struct stat *st, enum jr_kind *kind)
{
	for (struct jitring *h = jr_all; h; h = h->next)
		for (int k = JR_KIND_DUMP; k <= JR_KIND_MAP; k++) {
			const struct jr_ident *id = held_id(h, k);

			if (*held_fd(h, k) >= 0 && id->dev == st->st_dev &&
			    id->ino == st->st_ino) {
				*kind = (enum jr_kind)k;
				return h;
			}
		}
	return NULL;
}

/*
 * We made @fd with O_EXCL: lock it, and drop what closed writers still
 * hold of earlier files of that name (no longer there: nobody can continue
 * them, and their locks guard nothing).
 */
static int claim_new(struct jitring *jr, enum jr_kind kind, int dirfd,
		     const char *name, int fd, bool child)
{
	struct jr_ident *id = held_id(jr, kind);
	int drop[16], ndrop = 0;
	struct stat st;
	int ret = lock_file(fd);

	if (ret == -EAGAIN)
		/* Taken for a stale file between our open and our lock. */
		return -EEXIST;
	if (ret)
		jitring_log(jr, JITRING_LOG_WARNING,
			    "cannot lock %s (%s): a process with our pid in "
			    "another pid namespace could replace it",
			    name, strerror(-ret));
	if (!still_named(dirfd, name, fd, &st))
		return -EEXIST;
	id->dev = st.st_dev;
	id->ino = st.st_ino;

	global_lock(child);
	for (struct jitring *h; ndrop < (int)JR_ARRAY_SIZE(drop) &&
				(h = held_same_name(kind, id, true));) {
		drop[ndrop++] = *held_fd(h, kind);
		*held_fd(h, kind) = -1;
	}
	global_unlock(child);
	while (ndrop)
		close(drop[--ndrop]);
	return 0;
}

/*
 * The file @st at the name may be ours.  Return: its descriptor, taken
 * over from the closed writer *@from that holds it; -EEXIST if a writer
 * that is not closed holds it (or as another kind); -ENOENT if no writer
 * of this process holds it.
 */
static int claim_ours(struct jitring *jr, enum jr_kind kind,
		      const struct stat *st, bool child, struct jitring **from)
{
	enum jr_kind k;
	struct jitring *h;
	int fd = -ENOENT;

	global_lock(child);
	h = held_file(st, &k);
	if (h && (k != kind || !handle_closed(h))) {
		fd = -EEXIST;
	} else if (h) {
		fd = *held_fd(h, kind);
		*held_fd(h, kind) = -1;
		*held_id(jr, kind) = *held_id(h, kind);
		*from = h;
	}
	global_unlock(child);
	return fd;
}

/*
 * Close what closed writers hold of files that are gone (unlinked, their
 * directory maybe too: nobody can continue them and their locks guard no
 * name), so a process that makes writers in ever new directories does not
 * pile up descriptors.  Once per jitring_open(), before its claims.  The
 * fstat() calls run without the global lock; a descriptor is closed only if
 * its writer still holds it.
 */
static void drop_removed(void)
{
	struct {
		struct jitring *h;
		enum jr_kind kind;
		int fd;
	} c[32];
	int n = 0, i;

	pthread_mutex_lock(&jr_global_lock);
	for (struct jitring *h = jr_all; h && n < (int)JR_ARRAY_SIZE(c);
	     h = h->next)
		for (int k = JR_KIND_DUMP; k <= JR_KIND_MAP; k++)
			if (*held_fd(h, k) >= 0 && handle_closed(h) &&
			    n < (int)JR_ARRAY_SIZE(c))
				c[n++] = (typeof(c[0])){ h, k, *held_fd(h, k) };
	pthread_mutex_unlock(&jr_global_lock);
	for (i = 0; i < n; i++) {
		struct stat st;

		if (fstat(c[i].fd, &st) || st.st_nlink)
			c[i].fd = -1;
	}
	pthread_mutex_lock(&jr_global_lock);
	for (i = 0; i < n; i++) {
		if (c[i].fd >= 0 && *held_fd(c[i].h, c[i].kind) == c[i].fd)
			*held_fd(c[i].h, c[i].kind) = -1;
		else
			c[i].fd = -1;
	}
	pthread_mutex_unlock(&jr_global_lock);
	for (i = 0; i < n; i++)
		if (c[i].fd >= 0)
			close(c[i].fd);
}

int jitring_file_claim(struct jitring *jr, enum jr_kind kind, const char *dir,
		       const char *name, uint32_t pid, bool child,
		       struct jitring **from)
{
	struct jr_ident *id = held_id(jr, kind);
	struct stat st;
	int dirfd, fd, ret = -EEXIST;

	*from = NULL;
	/* O_PATH: search permission is all the *at() calls need. */
	dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	if (fstat(dirfd, &st)) {
		ret = -errno;
		goto out;
	}
	memset(id, 0, sizeof(*id));
	id->dir_dev = st.st_dev;
	id->dir_ino = st.st_ino;
	id->pid = pid;
	/* One open writer per name: even if its file was removed. */
	global_lock(child);
	if (held_same_name(kind, id, false))
		goto out_unlock;
	global_unlock(child);

	JITRING_TESTPOINT(claim_open, jr);
	for (int tries = 0; tries < 4; tries++) {
		fd = openat(dirfd, name,
			    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
				    O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
			    0644);
		if (fd >= 0) {
			ret = claim_new(jr, kind, dirfd, name, fd, child);
			if (ret)
				close(fd);
			else
				ret = fd;
			goto out;
		}
		if (errno != EEXIST) {
			ret = -errno;
			goto out;
		}
		if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
			if (errno == ENOENT)
				continue;
			ret = -errno;
			goto out;
		}
		ret = claim_ours(jr, kind, &st, child, from);
		if (ret != -ENOENT)
			goto out;
		ret = stale_remove(dirfd, name, &st);
		if (ret)
			goto out;
		ret = -EEXIST;
	}
	goto out;

out_unlock:
	global_unlock(child);
out:
	close(dirfd);
	return ret;
}

void jitring_file_unclaim(enum jr_kind kind, const char *dir, const char *name,
			  int fd, struct jitring *from, bool child)
{
	struct stat st;
	int dirfd;

	if (from) {
		global_lock(child);
		*held_fd(from, kind) = fd;
		global_unlock(child);
		return;
	}
	/* Still locked by us: nobody else removes it meanwhile. */
	dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dirfd >= 0) {
		/* Our claim made this file: its identity is fd's. */
		if (still_named(dirfd, name, fd, &st))
			unlinkat(dirfd, name, 0);
		close(dirfd);
	}
	close(fd);
}

/* ------------------------------------------------------------------ */
/* The dump file.                                                       */

/* What an open in progress may have to undo. */
struct jr_opening {
	struct jitring *from;     /* the closed writer whose dump we continue */
	struct jitring *map_from; /* ... and whose perf map */
	bool close_cut;           /* its CLOSE record was cut off */
	struct jitdump_prefix close_rec;
};

/*
 * Go on where the closed writer @from left the dump: after its last
 * complete record, less its CLOSE record (perf stops parsing at CLOSE).
 */
static int dump_continue(struct jitring *jr, struct jitring *from,
			 struct jr_opening *op)
{
	struct jr_file *f = &jr->file;
	uint64_t end = atomic_load_explicit(&from->c.bytes_written,
					    memory_order_relaxed);
	struct stat st;

	if (fstat(f->fd, &st))
		return -errno;
	if ((uint64_t)st.st_size > end) {
		/* Not ours after our last record: cut it off. */
		if (ftruncate(f->fd, (off_t)end))
			return -errno;
	} else if ((uint64_t)st.st_size < end) {
		jitring_log(jr, JITRING_LOG_WARNING,
			    "%s was cut to %lld bytes since its writer closed",
			    f->path ? f->path : "dump", (long long)st.st_size);
		end = (uint64_t)st.st_size;
	}
	if (end < sizeof(struct jitdump_header))
		return -EIO;
	/* The CLOSE record is last iff it was asked for and nothing failed. */
	if ((from->flags & JITRING_F_WRITE_CLOSE) &&
	    !atomic_load_explicit(&from->io_error, memory_order_relaxed) &&
	    end >= sizeof(struct jitdump_header) + sizeof(op->close_rec) &&
	    pread(f->fd, &op->close_rec, sizeof(op->close_rec),
		  (off_t)(end - sizeof(op->close_rec))) ==
		    (ssize_t)sizeof(op->close_rec) &&
	    op->close_rec.id == JIT_CODE_CLOSE &&
	    op->close_rec.total_size == sizeof(op->close_rec)) {
		end -= sizeof(op->close_rec);
		if (ftruncate(f->fd, (off_t)end))
			return -errno;
		op->close_cut = true;
	}
	f->start = end;
	return 0;
}

/* Put back the CLOSE record dump_continue() cut off. */
static void file_uncut(struct jr_file *f, const struct jr_opening *op)
{
	int ret = 0;

	if (op->close_cut &&
	    pwrite(f->fd, &op->close_rec, sizeof(op->close_rec),
		   (off_t)f->start) != (ssize_t)sizeof(op->close_rec))
		/* Without it the dump still ends on a record boundary. */
		ret = ftruncate(f->fd, (off_t)f->start);
	(void)ret;
}

/*
 * Unmap the marker.  The dump stays (perf inject needs it), and so do its
 * descriptor and lock (see "Whose file is it").
 */
static void file_release(struct jr_file *f)
{
	if (f->marker)
		munmap(f->marker, f->marker_len);
	f->marker = NULL;
}

/*
 * Create (or continue) <dir>/jit-<pid>.dump, write its header, map its
 * first page.  With @child, from the fork child handler.
 */
static int file_open(struct jitring *jr, bool child, struct jr_opening *op)
{
	struct jr_file *f = &jr->file;
	struct jitdump_header h;
	char name[32], path[PATH_MAX];
	size_t page = jitring_page_size();
	uint32_t pid = (uint32_t)getpid();
	int fd, ret;
	void *map;

	snprintf(name, sizeof(name), "jit-%u.dump", pid);
	ret = snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	if (ret < 0 || (size_t)ret >= sizeof(path))
		return -ENAMETOOLONG;
	free(f->path);
	f->path = strdup(path);
	if (!f->path)
		return -ENOMEM;
	fd = jitring_file_claim(jr, JR_KIND_DUMP, f->dir, name, pid, child,
				&op->from);
	if (fd < 0)
		return fd;
	f->fd = fd;
	f->pid = pid;
	op->close_cut = false;
	if (op->from) {
		ret = dump_continue(jr, op->from, op);
		if (ret)
			goto err_unclaim;
	} else {
		ssize_t n;

		jitring_record_header(&h, jr->elf_mach, pid,
				      jitring_clock_ns());
		n = pwrite(fd, &h, sizeof(h), 0);
		if (n != (ssize_t)sizeof(h)) {
			/* A short write sets no errno. */
			ret = n < 0 ? -errno : -EIO;
			goto err_unclaim;
		}
		f->start = sizeof(h);
	}
	/* A marker for each writer: perf finds (and injects) the dump
	 * through every executable mapping of it. */
	map = mmap(NULL, page, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		ret = -errno;
		goto err_uncut;
	}
	f->marker = map;
	f->marker_len = page;
	/* bytes_written is the file's size (what earlier writers left too). */
	atomic_store_explicit(&jr->c.bytes_written, f->start,
			      memory_order_relaxed);
	return 0;

err_uncut:
	file_uncut(f, op);
err_unclaim:
	jitring_file_unclaim(JR_KIND_DUMP, f->dir, name, fd, op->from, child);
	f->fd = -1;
	return ret;
}

/* Undo file_open() (and the perf map's open) after a later failure. */
static void file_abandon(struct jitring *jr, struct jr_opening *op)
{
	struct jr_file *f = &jr->file;

	if (jr->map_hold >= 0)
		jitring_perfmap_abandon(jr, op->map_from);
	file_release(f);
	file_uncut(f, op);
	/* f->path is "<dir>/jit-<pid>.dump" (file_open()). */
	jitring_file_unclaim(JR_KIND_DUMP, f->dir, strrchr(f->path, '/') + 1,
			     f->fd, op->from, false);
	f->fd = -1;
}
/* ------------------------------------------------------------------ */
/* Fork.                                                                */

static void atfork_prepare(void)
{
	pthread_mutex_lock(&jr_global_lock);
	for (struct jitring *jr = jr_all; jr; jr = jr->next) {
		/* CLOSED is final; read under jr_global_lock, and only the
		 * forking thread reads fork_locked until the handlers end. */
		jr->fork_locked = !handle_closed(jr);
		if (!jr->fork_locked)
			continue;
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
		if (jr->fork_locked)
			pthread_mutex_unlock(&jr->lock);
	}
	pthread_mutex_unlock(&jr_global_lock);
}

static void atfork_child(void)
{
	/*
	 * First the parent's files, closed writers' too: the child keeps no
	 * copy, so its lock does not keep them live after the parent exits,
	 * and none of them is ever taken for one of the child's.
	 */
	for (struct jitring *jr = jr_all; jr; jr = jr->next) {
		if (jr->file.fd >= 0)
			close(jr->file.fd);
		if (jr->map_hold >= 0)
			close(jr->map_hold);
		jr->file.fd = jr->map_hold = jr->map_fd = -1;
	}
	for (struct jitring *jr = jr_all; jr; jr = jr->next) {
		uint32_t s =
			atomic_load_explicit(&jr->state, memory_order_relaxed);
		struct jr_opening op;
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
		file_release(&jr->file);
		atomic_store_explicit(&jr->io_error, 0, memory_order_relaxed);
		/* The child's file starts empty: so do its counters. */
		memset(&jr->c, 0, sizeof(jr->c));
		ret = file_open(jr, true, &op);
		if (!ret && (jr->flags & JITRING_F_PERF_MAP))
			ret = jitring_perfmap_open(jr, true, &op.map_from);
		if (jr->engine == JITRING_ENGINE_MUTEX)
			jitring_mutex_fork_child(jr);
		else
			jitring_rings_fork_child(jr);
		/* The rings engine starts its flusher on first use. */
		atomic_store_explicit(&jr->state,
				      ret ? JR_FAILED :
				      jr->engine == JITRING_ENGINE_RINGS ?
					    JR_FORKED :
					    JR_OPEN,
				      memory_order_relaxed);
		if (ret)
			atomic_store_explicit(&jr->io_error, ret,
					      memory_order_relaxed);
	}
	pthread_mutex_unlock(&jr_global_lock);
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
		if (jr->engine == JITRING_ENGINE_RINGS)
			jitring_rings_kick(jr);
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
#define JR_EXIT_WAIT_NS (2000ull * 1000000u)

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
	what = "calls still inside the library";
	if (users_wait(jr, deadline))
		goto err_unlock;
	what = "the engine's last write";
	if (jr->engine == JITRING_ENGINE_MUTEX)
		ret = jitring_mutex_exit(jr, &until);
	else
		ret = jitring_rings_exit(jr, &until);
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

static void atexit_close(void)
{
	uint64_t deadline = jitring_clock_ns() + JR_EXIT_WAIT_NS;
	struct jitring *jr;

	pthread_mutex_lock(&jr_global_lock);
	jr = jr_all;
	pthread_mutex_unlock(&jr_global_lock);
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
	drop_removed();
	ret = file_open(jr, false, &op);
	if (ret)
		goto err_free;
	if (jr->flags & JITRING_F_PERF_MAP) {
		ret = jitring_perfmap_open(jr, false, &op.map_from);
		if (ret)
			goto err_file;
	}
	if (jr->engine == JITRING_ENGINE_MUTEX)
		ret = jitring_mutex_start(jr);
	else
		ret = jitring_rings_start(jr);
	if (ret)
		goto err_file;
	pthread_mutex_lock(&jr_global_lock);
	jr->next = jr_all;
	jr_all = jr;
	pthread_mutex_unlock(&jr_global_lock);
	*out = jr;
	return 0;

err_file:
	file_abandon(jr, &op);
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

	if (jr->engine == JITRING_ENGINE_MUTEX)
		ret = jitring_mutex_stop(jr);
	else
		ret = jitring_rings_stop(jr);
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

/*
 * An argument error: but once close has started, -ESHUTDOWN wins over it
 * (every call on a closed writer gets -ESHUTDOWN).  Only this error path
 * reads the state, so valid calls pay nothing for the rule.  Relaxed: the
 * answer is one of two refusals either way, and a caller ordered after
 * the close (its own earlier call, or any synchronisation) sees CLOSING by
 * coherence and happens-before.
 */
JR_NOINLINE int jitring_refuse_args(struct jitring *jr, int err)
{
	if (atomic_load_explicit(&jr->state, memory_order_relaxed) >=
	    JR_CLOSING) {
		jitring_count(&jr->c.refused_shutdown, 1);
		return -ESHUTDOWN;
	}
	jitring_count(&jr->c.refused_invalid, 1);
	return err;
}

int64_t jitring_write_group(struct jitring *jr, struct jitring_group *g)
{
	if (likely(jr->engine == JITRING_ENGINE_RINGS))
		return jitring_rings_write(jr, g);
	return jitring_mutex_write(jr, g);
}

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

int jitring_pause(struct jitring *jr)
{
	uint32_t s;
	int ret = 0;

	if (!handle_ok(jr))
		return -EINVAL;
	s = jitring_enter(jr);
	if (s >= JR_CLOSING)
		return jitring_refuse_state(jr, s);
	/* FORKED: the child's engine has no flusher yet; mutex: none. */
	if (s == JR_OPEN && jr->engine == JITRING_ENGINE_RINGS)
		ret = jitring_rings_pause(jr);
	jitring_exit(jr);
	if (!ret)
		ret = atomic_load_explicit(&jr->io_error, memory_order_relaxed);
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
