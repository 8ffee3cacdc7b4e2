/* SPDX-License-Identifier: MIT */
#include "clock.h"

struct timespec jitring_clock_rel(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000u),
		.tv_nsec = (long)(ns % 1000000000u),
	};
	return ts;
}

struct timespec jitring_clock_deadline(uint64_t ns_from_now)
{
	return jitring_clock_rel(jitring_clock_ns() + ns_from_now);
}
