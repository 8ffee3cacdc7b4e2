/* SPDX-License-Identifier: MIT */
/*
 * Test-only hooks (LTTng's TESTPOINT idea), compiled in only with
 * -Dtestpoints=true.  A testpoint lets a test park a thread at a named
 * point to widen a race window deterministically; the I/O hook replaces
 * pwritev(2) in the flusher to inject EINTR, short writes and errors; a
 * fault point (JITRING_FAULT) lets a test fail a named cold-path step.
 * Release builds contain neither: the macros expand to nothing.
 */
#ifndef JITRING_SRC_TESTPOINT_H
#define JITRING_SRC_TESTPOINT_H

#include <sys/types.h>
#include <sys/uio.h>

#ifdef JITRING_TESTPOINTS
#include <stdatomic.h>

typedef void (*jitring_testpoint_fn)(const char *name, void *arg);
typedef ssize_t (*jitring_io_hook_fn)(int fd, const struct iovec *iov,
				      int iovcnt, off_t off);
/* Return non-zero to make the named cold-path step fail as if out of
 * memory (or as the step documents). */
typedef int (*jitring_fault_fn)(const char *name, void *arg);

/* Set by tests before the threads they affect start or while quiescent. */
extern _Atomic(jitring_testpoint_fn) jitring_testpoint_hook;
extern jitring_io_hook_fn jitring_io_hook;
extern _Atomic(jitring_fault_fn) jitring_fault_hook;

#define JITRING_TESTPOINT(name, arg)                                           \
	do {                                                                   \
		jitring_testpoint_fn tp_ = atomic_load_explicit(               \
			&jitring_testpoint_hook, memory_order_relaxed);        \
		if (__builtin_expect(tp_ != NULL, 0))                          \
			tp_(#name, (void *)(arg));                             \
	} while (0)

#define JITRING_FAULT(name, arg)                                               \
	({                                                                     \
		jitring_fault_fn f_ = atomic_load_explicit(                    \
			&jitring_fault_hook, memory_order_relaxed);            \
		__builtin_expect(f_ != NULL, 0) && f_(#name, (void *)(arg));   \
	})
#else
#define JITRING_TESTPOINT(name, arg) ((void)0)
#define JITRING_FAULT(name, arg) 0
#endif

#endif /* JITRING_SRC_TESTPOINT_H */
