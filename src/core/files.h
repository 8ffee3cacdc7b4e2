/* SPDX-License-Identifier: MIT */
/*
 * The files a writer writes (files.c): the handle list, whose file a name
 * is, the dump's making and release, and pwritev with the test I/O hook.
 */
#ifndef JITRING_SRC_FILES_H
#define JITRING_SRC_FILES_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "jitring/jitdump.h"

struct iovec;

/*
 * Every handle ever made, newest first: tombstones, never freed, and the
 * list only grows at its head.  Its lock guards the list and the handing
 * over of a descriptor; no system call runs under it, so fork() (whose
 * handlers hold it) and exit() never wait for a file system.
 */
void jitring_handles_lock(void);
void jitring_handles_unlock(void);
/* The newest handle, the others after it on ->next.  Under the lock. */
struct jitring *jitring_handles_first(void);
/* Put @jr at the head, under the lock. */
void jitring_handles_add(struct jitring *jr);

/* Kinds of file a writer holds (see jitring_file_claim()). */
enum jr_kind {
	JR_KIND_DUMP,
	JR_KIND_MAP,
};

/**
 * jitring_file_claim() - Get the file @name in @dir for writer @jr.
 * @jr: the writer being opened (not yet on the handle list).
 * @kind: JR_KIND_DUMP or JR_KIND_MAP: which of @jr's idents is filled.
 * @dir: the directory (followed if it is a symlink).
 * @name: the file's name in it: never followed, never a FIFO or device.
 * @pid: the pid in @name.
 * @child: called from the fork child handler, which holds the global lock.
 * @from: receives the closed writer of this process whose file this is
 *	(to continue: its descriptor now belongs to @jr), or NULL for a new
 *	empty file.
 *
 * A new file is created O_EXCL and locked.  A file already there is
 * continued if a closed writer of this process holds it (by device and
 * inode), refused if an open one does, replaced if it is stale (a regular
 * file we own, with one link, whose lock nobody holds), and refused in
 * every other case.  Never blocks on a peer (no FIFO is opened, locks are
 * tried, not waited for) and never holds the global lock across a system
 * call.
 * Return: the descriptor (O_RDWR, O_CLOEXEC, locked); -EEXIST; or -errno.
 */
int jitring_file_claim(struct jitring *jr, enum jr_kind kind, const char *dir,
		       const char *name, uint32_t pid, bool child,
		       struct jitring **from);

/**
 * jitring_file_unclaim() - Undo jitring_file_claim() after a later failure.
 * @fd: what it returned.
 * @from: what it gave in *@from: the descriptor goes back to that writer;
 *	if NULL, the new file is unlinked (if it still has @name) and closed.
 */
void jitring_file_unclaim(enum jr_kind kind, const char *dir, const char *name,
			  int fd, struct jitring *from, bool child);

/* Close what closed writers hold of files that are gone (unlinked: nobody
 * can continue them).  Once per jitring_open(); takes the lock. */
void jitring_files_drop_removed(void);

/* Close the descriptor (and so the lock) @jr, closing, holds of its dump
 * (JITRING_F_RELEASE); takes the lock. */
void jitring_files_let_go(struct jitring *jr);

/* What an open in progress may have to undo. */
struct jr_opening {
	struct jitring *from;     /* the closed writer whose dump we continue */
	struct jitring *map_from; /* ... and whose perf map */
	bool close_cut;           /* its CLOSE record was cut off */
	struct jitdump_prefix close_rec;
};

/* Make (or continue) @jr's dump, with its header and marker mapping;
 * @child: in the fork child handler.  Return: 0 or -errno. */
int jitring_file_open(struct jitring *jr, bool child, struct jr_opening *op);
/* Undo jitring_file_open() (and the perf map's open) after a later
 * failure. */
void jitring_file_abandon(struct jitring *jr, struct jr_opening *op);
/* Unmap the marker; the descriptor and its lock stay (see files.c). */
void jitring_file_release(struct jr_file *f);

/**
 * jitring_file_pwritev_all() - pwritev(2) all of @iov at @off.
 *
 * Retries EINTR and short writes.  Goes through the test I/O hook when
 * built with testpoints.
 * Return: 0 or a negative errno; *@done holds the bytes written either way.
 */
int jitring_file_pwritev_all(int fd, const struct iovec *iov, int iovcnt,
			     uint64_t off, uint64_t *done);

#endif /* JITRING_SRC_FILES_H */
