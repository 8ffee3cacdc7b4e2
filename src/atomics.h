/* SPDX-License-Identifier: MIT */
/*
 * Intent names for the C11 atomics jitring uses (liburing's barrier.h does
 * the same).  Every site gives its order explicitly; every non-relaxed site
 * names its pairing partner in a comment.  Shared state jitring owns is
 * always _Atomic and only ever touched through these or atomic_*_explicit.
 */
#ifndef JITRING_SRC_ATOMICS_H
#define JITRING_SRC_ATOMICS_H

#include <stdatomic.h>

#define jitring_load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define jitring_store_relaxed(p, v) \
	atomic_store_explicit((p), (v), memory_order_relaxed)
#define jitring_load_acquire(p) atomic_load_explicit((p), memory_order_acquire)
#define jitring_store_release(p, v) \
	atomic_store_explicit((p), (v), memory_order_release)
#define jitring_xchg_acqrel(p, v) \
	atomic_exchange_explicit((p), (v), memory_order_acq_rel)
#define jitring_add_relaxed(p, v) \
	atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
/* Counters only ever read as statistics. */
#define jitring_count(p, v) ((void)jitring_add_relaxed((p), (v)))

#endif /* JITRING_SRC_ATOMICS_H */
