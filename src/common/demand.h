/* SPDX-License-Identifier: MIT */
#ifndef JITRING_SRC_DEMAND_H
#define JITRING_SRC_DEMAND_H

#include <stdint.h>

/*
 * A stock's demand, for the flusher alone (no atomics): things taken per
 * window of JR_DEMAND_WINDOW_NS, the recent peak of that decaying by a
 * quarter (rounded up, so it reaches 0) each window with less.  The ring
 * pool and the trampoline arenas are both kept at twice the peak, so a
 * storm's stock is made while it lasts and given back within about two
 * seconds once it is over.  While a stock is above its floor, its owner
 * asks the flusher for a round at jr_demand_next(), idle or not.
 */
#define JR_DEMAND_WINDOW_NS (100u * 1000000ull)

struct jr_demand {
	uint32_t peak;  /* taken per window, the recent peak (decays) */
	uint32_t win;   /* taken in this window */
	uint64_t since; /* this window's start */
};

/* Count @n more taken at @now.  Return: the peak. */
static inline uint32_t jr_demand_peak(struct jr_demand *d, uint32_t n,
				      uint64_t now)
{
	d->win += n;
	if (now - d->since >= JR_DEMAND_WINDOW_NS) {
		uint32_t decayed = d->peak - (d->peak + 3) / 4;

		d->peak = d->win > decayed ? d->win : decayed;
		d->win = 0;
		d->since = now;
	} else if (d->win > d->peak) {
		d->peak = d->win;
	}
	return d->peak;
}

/* When the peak next falls: the end of this window. */
static inline uint64_t jr_demand_next(const struct jr_demand *d)
{
	return d->since + JR_DEMAND_WINDOW_NS;
}

#endif /* JITRING_SRC_DEMAND_H */
