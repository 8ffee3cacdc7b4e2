/* SPDX-License-Identifier: MIT */
#ifndef JITRING_SRC_FUTEX_H
#define JITRING_SRC_FUTEX_H

#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * Process-private futexes on 32-bit C11 atomics.  The atomics around each
 * call carry the memory ordering (and what TSan checks); the futex only
 * decides who sleeps.
 */
static inline void jr_futex_wait(_Atomic uint32_t *addr, uint32_t val,
				 const struct timespec *rel)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, rel, NULL,
		0);
}

static inline void jr_futex_wake(_Atomic uint32_t *addr, int n)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL,
		0);
}

#endif /* JITRING_SRC_FUTEX_H */
