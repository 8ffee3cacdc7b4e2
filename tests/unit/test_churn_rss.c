/* SPDX-License-Identifier: MIT */
/*
 * Thread churn keeps the resident set near what the live threads hold.
 *
 * Storms of C_THREADS threads start every C_PERIOD_MS; each writes
 * C_ENTRIES small entries (a few KiB in all) and exits.  Their rings go
 * back to the pool and the next storm's threads take them again, faster
 * than the flusher's one-second idle trim.  A recycled ring used to keep
 * its pages and its positions, so each owner wrote on from where the last
 * one stopped and, over a few dozen reuses, every pooled ring had its
 * whole 64 KiB resident: 68 MB here for about 1 MB of live data.  Now a
 * recycled ring starts again at its first byte with only its first page
 * resident (docs/api.md: a ready ring costs one resident page).
 *
 * Checks: every write returned a code_index and every entry reached the
 * file; the resident set sampled after each storm, past the first tenth
 * of the run, stays under what it was before the first storm plus one
 * ring_min ring per live thread plus C_SLACK (stacks, the allocator's
 * arenas, the pool's own pages).  Not checked under a sanitizer, whose
 * allocator grows with the thread count; the run is shorter there.
 *
 * `test_churn_rss -v` prints the figures.
 */
#include <pthread.h>
#include <stdbool.h>

#include "harness.h"

/* The shape, overridable with -D for other figures (docs/reliability.md). */
#ifndef C_THREADS
#define C_THREADS 128
#endif
#ifndef C_PERIOD_MS
#define C_PERIOD_MS 20
#endif
#ifndef C_STORMS
#define C_STORMS (T_SANITIZED ? 20 : 100)
#endif
#define C_ENTRIES 50
#define C_RING (64u << 10) /* ring_min of adaptive rings */
#define C_SLACK (16ull << 20)

static _Atomic long bad;

static void *churner(void *arg)
{
	static const uint8_t code[32] = { 0xc3 };
	struct jitring *jr = arg;
	struct jitring_entry e = {
		.name = "churn",
		.code_addr = (const void *)(uintptr_t)0x400000,
		.code_size = sizeof(code),
		.code_bytes = code,
	};

	for (int i = 0; i < C_ENTRIES; i++)
		if (jitring_write(jr, &e) <= 0)
			atomic_fetch_add(&bad, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	bool verbose = argc > 1 && !strcmp(argv[1], "-v");
	uint64_t base, peak = 0, last = 0, bound, t0, next;
	pthread_t th[C_THREADS];
	struct jitring_stats st;
	struct jitring *jr;
	struct t_dir d;

	t_dir_make(&d, "churn-rss");
	T_REQUIRE(t_open(JITRING_ENGINE_RINGS, d.path, 0, &jr) == 0);
	base = t_rss_bytes();
	bound = base + (uint64_t)C_THREADS * C_RING + C_SLACK;
	t0 = next = t_now_ns();
	for (int s = 0; s < C_STORMS; s++) {
		int n = 0;

		for (; n < C_THREADS; n++)
			if (pthread_create(&th[n], NULL, churner, jr))
				break;
		T_CHECK_EQ(n, C_THREADS);
		for (int i = 0; i < n; i++)
			pthread_join(th[i], NULL);
		last = t_rss_bytes();
		if (s >= C_STORMS / 10 && last > peak)
			peak = last;
		/* The storms' pace, not a wait for anything. */
		next += (uint64_t)C_PERIOD_MS * 1000000u;
		while (t_now_ns() < next)
			t_sleep_ms(1);
	}
	T_CHECK_EQ(jitring_flush(jr), 0);
	st = t_stats(jr);
	if (verbose || (!T_SANITIZED && peak > bound))
		printf("%d storms of %d threads every %d ms (%.1f s): VmRSS "
		       "%.1f MiB open, peak %.1f MiB, last %.1f MiB, bound "
		       "%.1f MiB\n",
		       C_STORMS, C_THREADS, C_PERIOD_MS,
		       (double)(t_now_ns() - t0) / 1e9, t_mib(base), t_mib(peak),
		       t_mib(last), t_mib(bound));
	T_CHECK_EQ(atomic_load(&bad), 0);
	T_CHECK_EQ(st.entries_written,
		   (uint64_t)C_STORMS * C_THREADS * C_ENTRIES);
	if (!T_SANITIZED)
		T_CHECK(peak <= bound);
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);
	return t_report();
}
