/* SPDX-License-Identifier: MIT */
/*
 * The checker stays linear on code_index values chosen to collide.
 *
 * The indices of tests/safety/hostile.h all hashed to one slot in the
 * checker's old sets, so n loads cost n^2 / 2 probes (100,000 loads: 9 s
 * against 0.01 s for scattered ones).  Here:
 *  1. jitring_check() on 50,000 crafted loads: valid, and (test builds,
 *     which count set probes) fewer than 2 probes per lookup on average;
 *  2. the duplicate and unknown-index rules still fire among them, at the
 *     right offsets;
 *  3. jitring-dump --check on 100,000 crafted and 100,000 scattered loads:
 *     the same summary, and the crafted file takes at most 10 times the
 *     CPU time (the old checker: 900 times).  CPU time, not the clock's:
 *     other load on the machine stretches the one, not the other.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"
#include "reader/reader.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_probes(void)
{
	enum { N = 50000 };
	struct jitring_check_result res;
	struct hostile_buf b = { 0 };
	size_t off, first;
	double t0, dt;

	hostile_dump(&b, N, 1);
#ifdef JITRING_TESTPOINTS
	uint64_t l0 = __atomic_load_n(&jitring_reader_set_lookups,
				      __ATOMIC_RELAXED);
	uint64_t p0 = __atomic_load_n(&jitring_reader_set_probes,
				      __ATOMIC_RELAXED);
#endif
	t0 = now_s();
	T_CHECK_EQ(jitring_check(b.p, b.len, JITRING_CHECK_SORTED, &res), 0);
	dt = now_s() - t0;
	T_CHECK_EQ(res.records, N);
	T_CHECK_EQ(res.tids, 64);
	printf("%d crafted loads checked in %.3f s\n", N, dt);
#ifdef JITRING_TESTPOINTS
	{
		uint64_t l = __atomic_load_n(&jitring_reader_set_lookups,
					     __ATOMIC_RELAXED) - l0;
		uint64_t p = __atomic_load_n(&jitring_reader_set_probes,
					     __ATOMIC_RELAXED) - p0;

		printf("set lookups %llu, probes %llu (%.3f per lookup)\n",
		       (unsigned long long)l, (unsigned long long)p,
		       l ? (double)p / (double)l : 0.0);
		/* Every crafted index went to the hash set. */
		T_CHECK(l >= N);
		/* Linear probing at load <= 1/2 expects < 1.5. */
		T_CHECK(p < 2 * l);
	}
#else
	printf("probe counts need -Dtestpoints=true; timing only\n");
#endif

	/* A duplicate among them is found, with the first load's offset. */
	first = 40 + 64 * (size_t)(N / 2);
	off = hostile_load(&b, 1000 + N, 1, hostile_index(N / 2));
	T_CHECK_EQ(jitring_check(b.p, b.len, 0, &res), 1);
	T_CHECK(res.rule && strcmp(res.rule, "index-duplicate") == 0);
	T_CHECK_EQ(res.off, off);
	{
		char want[64];

		snprintf(want, sizeof(want), "already loaded at offset %zu",
			 first);
		T_CHECK(strstr(res.detail, want) != NULL);
	}
	b.len = off;

	/* A move of a loaded crafted index is fine; of another, not. */
	hostile_move(&b, 1000 + N, 1, hostile_index(7));
	T_CHECK_EQ(jitring_check(b.p, b.len, 0, &res), 0);
	off = hostile_move(&b, 1000 + N, 1, hostile_index(N));
	T_CHECK_EQ(jitring_check(b.p, b.len, 0, &res), 1);
	T_CHECK(res.rule && strcmp(res.rule, "move-unknown-index") == 0);
	T_CHECK_EQ(res.off, off);
	free(b.p);
}

/* User and system CPU time of the children waited for so far, in s. */
static double children_cpu_s(void)
{
	struct rusage ru;

	T_REQUIRE(getrusage(RUSAGE_CHILDREN, &ru) == 0);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/*
 * Run the tool on @path; return its exit code, its first line in @line,
 * the CPU time it took (its shell's too) in *@secs.
 */
static int run_check(const char *tool, const char *path, char *line,
		     size_t size, double *secs)
{
	char cmd[1024];
	double t0;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "'%s' --check '%s' 2>&1", tool, path);
	t0 = children_cpu_s();
	p = popen(cmd, "r");
	T_REQUIRE(p);
	line[0] = '\0';
	if (!fgets(line, (int)size, p))
		line[0] = '\0';
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	*secs = children_cpu_s() - t0;
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_dump(const char *path, size_t n, int crafted)
{
	struct hostile_buf b = { 0 };
	FILE *f;

	hostile_dump(&b, n, crafted);
	f = fopen(path, "wb");
	T_REQUIRE(f);
	T_REQUIRE(fwrite(b.p, 1, b.len, f) == b.len);
	T_REQUIRE(fclose(f) == 0);
	free(b.p);
}

static void test_tool(void)
{
	enum { N = 100000 };
	const char *root = getenv("JITRING_BUILD_ROOT");
	char tool[512], dir[64], crafted[128], scattered[128];
	char lc[512], ls[512];
	double tc = 1e9, ts = 1e9, t;
	int i, rc;

	if (!root || !root[0]) {
		printf("SKIP tool: JITRING_BUILD_ROOT not set\n");
		return;
	}
	snprintf(tool, sizeof(tool), "%s/tools/jitring-dump", root);
	T_REQUIRE(access(tool, X_OK) == 0);
	snprintf(dir, sizeof(dir), "/tmp/jitring-collide-XXXXXX");
	T_REQUIRE(mkdtemp(dir));
	snprintf(crafted, sizeof(crafted), "%s/crafted.dump", dir);
	snprintf(scattered, sizeof(scattered), "%s/scattered.dump", dir);
	write_dump(crafted, N, 1);
	write_dump(scattered, N, 0);

	/* Best of three, against the noise of caches. */
	for (i = 0; i < 3; i++) {
		rc = run_check(tool, crafted, lc, sizeof(lc), &t);
		T_CHECK_EQ(rc, 0);
		if (t < tc)
			tc = t;
		rc = run_check(tool, scattered, ls, sizeof(ls), &t);
		T_CHECK_EQ(rc, 0);
		if (t < ts)
			ts = t;
	}
	/* Same summary after the file name. */
	T_CHECK(strchr(lc, ':') && strchr(ls, ':') &&
		strcmp(strchr(lc, ':'), strchr(ls, ':')) == 0);
	printf("jitring-dump --check, %d loads: crafted %.3f s, scattered "
	       "%.3f s of CPU time (x%.2f)\n",
	       N, tc, ts, tc / ts);
	T_CHECK(ts > 0 && tc < 10 * ts);
	t_rmtree(dir);
}

int main(void)
{
	test_probes();
	test_tool();
	return t_report();
}
