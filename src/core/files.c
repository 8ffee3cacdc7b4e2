/* SPDX-License-Identifier: MIT */
/*
 * The files a writer writes (files.h): pwritev with the test I/O hook,
 * the list of every handle and its lock, whose file a name is, and the
 * dump itself (made, continued, released).  Fork and exit (the front
 * door) walk the same list under the same lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "files.h"
#include "format/record.h"
#include "internal.h"
#include "perfmap.h"

static pthread_mutex_t jr_global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct jitring *jr_all; /* every handle ever made, newest first */

void jitring_handles_lock(void)
{
	pthread_mutex_lock(&jr_global_lock);
}

void jitring_handles_unlock(void)
{
	pthread_mutex_unlock(&jr_global_lock);
}

struct jitring *jitring_handles_first(void)
{
	return jr_all;
}

void jitring_handles_add(struct jitring *jr)
{
	pthread_mutex_lock(&jr_global_lock);
	jr->next = jr_all;
	jr_all = jr;
	pthread_mutex_unlock(&jr_global_lock);
}

/* ------------------------------------------------------------------ */
/* I/O, with a test-only fault hook (testpoint.h).                     */

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
		    jitring_handle_closed(h) == closed)
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
	if (h && (k != kind || !jitring_handle_closed(h))) {
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
void jitring_files_drop_removed(void)
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
			if (*held_fd(h, k) >= 0 && jitring_handle_closed(h) &&
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

/*
 * Let go of @jr's dump (JITRING_F_RELEASE, at close).  Not of its perf
 * map: that name is one per process, so the next writer takes its
 * descriptor over and nothing piles up.
 */
void jitring_files_let_go(struct jitring *jr)
{
	int fd;

	pthread_mutex_lock(&jr_global_lock);
	fd = *held_fd(jr, JR_KIND_DUMP);
	*held_fd(jr, JR_KIND_DUMP) = -1;
	pthread_mutex_unlock(&jr_global_lock);
	if (fd >= 0)
		close(fd);
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
void jitring_file_release(struct jr_file *f)
{
	if (f->marker)
		munmap(f->marker, f->marker_len);
	f->marker = NULL;
}

/*
 * Create (or continue) <dir>/jit-<pid>.dump, write its header, map its
 * first page.  With @child, from the fork child handler.
 */
int jitring_file_open(struct jitring *jr, bool child, struct jr_opening *op)
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
void jitring_file_abandon(struct jitring *jr, struct jr_opening *op)
{
	struct jr_file *f = &jr->file;

	if (jr->map_hold >= 0)
		jitring_perfmap_abandon(jr, op->map_from);
	jitring_file_release(f);
	file_uncut(f, op);
	/* f->path is "<dir>/jit-<pid>.dump" (file_open()). */
	jitring_file_unclaim(JR_KIND_DUMP, f->dir, strrchr(f->path, '/') + 1,
			     f->fd, op->from, false);
	f->fd = -1;
}
