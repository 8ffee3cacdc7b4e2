/* SPDX-License-Identifier: MIT */
/*
 * Opens racing opens: 4 threads open, write and close writers on one
 * directory (spelled two ways, both engines) as fast as they can, 40 times
 * each.  An open either wins (0) or finds the dump held (-EEXIST); never
 * two writers at once; every session's entries end up in the one dump,
 * continued from session to session, each once, with unique code_index
 * values.  Exercises the claim's create/lock/take-over races in one
 * process (and under TSan, the handle list and the descriptor hand-over).
 */
#include <pthread.h>

#include "filesafety.h"

#define THREADS 4
#define ROUNDS 40
#define PER 5

static char dir[128], dir_slash[160], dump[256];
static _Atomic int open_now, max_open, sessions, refused, other_err;

static void *racer(void *arg)
{
	int t = (int)(intptr_t)arg;

	for (int i = 0; i < ROUNDS; i++) {
		struct jitring *jr;
		char prefix[32];
		int ret = t_open(t_engines[(t + i) & 1],
				 (t & 1) ? dir_slash : dir, 0, &jr);
		int now;

		if (ret == -EEXIST) {
			atomic_fetch_add(&refused, 1);
			continue;
		}
		if (ret) {
			fprintf(stderr, "open: %d\n", ret);
			atomic_fetch_add(&other_err, 1);
			continue;
		}
		now = atomic_fetch_add(&open_now, 1) + 1;
		if (now > atomic_load(&max_open))
			atomic_store(&max_open, now);
		snprintf(prefix, sizeof(prefix), "t%d_%d_", t, i);
		sf_write(jr, prefix, PER, NULL);
		atomic_fetch_sub(&open_now, 1);
		T_CHECK_EQ(jitring_close(jr), 0);
		atomic_fetch_add(&sessions, 1);
	}
	jitring_thread_detach(NULL);
	return NULL;
}

int main(void)
{
	pthread_t tid[THREADS];

	sf_mkdtemp(dir, NULL);
	snprintf(dir_slash, sizeof(dir_slash), "%s/", dir);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", dir, (int)getpid());
	for (int t = 0; t < THREADS; t++)
		T_REQUIRE(pthread_create(&tid[t], NULL, racer,
					 (void *)(intptr_t)t) == 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(tid[t], NULL);
	printf("%d sessions, %d opens refused\n", atomic_load(&sessions),
	       atomic_load(&refused));
	T_CHECK_EQ(atomic_load(&other_err), 0);
	T_CHECK_EQ(atomic_load(&max_open), 1);
	T_CHECK(atomic_load(&sessions) > 0);
	T_CHECK_EQ(atomic_load(&sessions) + atomic_load(&refused),
		   THREADS * ROUNDS);
	T_CHECK_EQ(t_dump_loads(dump, "t", NULL),
		   (long)atomic_load(&sessions) * PER);
	t_rmtree(dir);
	return t_report();
}
