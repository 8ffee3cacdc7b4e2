/* SPDX-License-Identifier: MIT */
/*
 * Atomics.  Shared state jitring owns is always _Atomic and only ever
 * touched through atomic_*_explicit() with its order spelled out at the
 * site, and every non-relaxed site names its pairing partner in a comment
 * ("Pairs with ...").  Intent macros in the style of liburing's barrier.h
 * (load_acquire(), store_release()) were tried and dropped: the C11 names
 * already say the order, and a reviewer checking a pairing wants to see
 * exactly what the standard guarantees, not a wrapper.  The one wrapper
 * left is for statistics, which are never synchronisation.
 */
#ifndef JITRING_SRC_ATOMICS_H
#define JITRING_SRC_ATOMICS_H

#include <stdatomic.h>

/* Counters only ever read as statistics. */
#define jitring_count(p, v)                                                    \
	((void)atomic_fetch_add_explicit((p), (v), memory_order_relaxed))

#endif /* JITRING_SRC_ATOMICS_H */
