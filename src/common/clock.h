/* SPDX-License-Identifier: MIT */
#ifndef JITRING_SRC_CLOCK_H
#define JITRING_SRC_CLOCK_H

#include <stdint.h>
#include <time.h>

/*
 * CLOCK_MONOTONIC in nanoseconds: the clock of `perf record -k 1`.  Read
 * through the vDSO, no system call.  Never returns 0 on Linux (the clock
 * starts at boot), which matters because perf mishandles a 0 timestamp.
 */
static inline uint64_t jitring_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A relative timeout of @ns for futex(2). */
static inline struct timespec jitring_clock_rel(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000u),
		.tv_nsec = (long)(ns % 1000000000u),
	};

	return ts;
}

#endif /* JITRING_SRC_CLOCK_H */
