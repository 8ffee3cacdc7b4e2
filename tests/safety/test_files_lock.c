/* SPDX-License-Identifier: MIT */
/*
 * The owner's lock on its files, for both engines:
 * process P opens writer W1 on D1, writes and closes it, opens W2 on D2
 * with JITRING_F_PERF_MAP and writes; P forks C, whose W2 writes into its
 * own D2/jit-C.dump and /tmp/perf-C.map.  Checked from outside:
 *
 *  - while P lives, D1/jit-P.dump (closed writer: perf inject still needs
 *    it), D2/jit-P.dump and /tmp/perf-P.map are locked, so no process with
 *    P's pid in another pid namespace takes them for stale;
 *  - C's own dump and map are locked while C lives;
 *  - once P has exited (C still alive), none of P's files is locked: C
 *    kept no copy of P's descriptors, so P's files are not made to look
 *    live by C;
 *  - once C has exited, neither are C's;
 *  - every file has all its entries.
 *
 * Before the fix no file was ever locked.
 */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "filesafety.h"

static void put_pid(int fd, pid_t pid)
{
	T_REQUIRE(write(fd, &pid, sizeof(pid)) == sizeof(pid));
}

static pid_t get_pid(int fd)
{
	pid_t pid = -1;

	T_REQUIRE(read(fd, &pid, sizeof(pid)) == sizeof(pid));
	return pid;
}

static void wait_byte(int fd)
{
	char c;

	if (read(fd, &c, 1) != 1)
		_exit(3);
}

/* P: returns only in P, never in C. */
static int run_p(uint32_t engine, const char *d1, const char *d2,
		 int to_main, int from_main_p, int from_main_c)
{
	unsigned long failed0 = t_failed; /* ours only, not the parent's */
	struct jitring *w1, *w2;
	pid_t c;

	if (t_open(engine, d1, 0, &w1))
		return 1;
	sf_write(w1, "p_closed_", 5, NULL);
	if (jitring_close(w1))
		return 1;
	if (t_open(engine, d2, JITRING_F_PERF_MAP, &w2))
		return 1;
	sf_write(w2, "p_live_", 5, NULL);
	if (jitring_flush(w2))
		return 1;
	c = fork();
	if (c < 0)
		return 1;
	if (c == 0) {
		sf_write(w2, "c_", 2, NULL);
		if (jitring_flush(w2))
			_exit(1);
		put_pid(to_main, getpid());
		wait_byte(from_main_c);
		exit(t_failed != failed0); /* exit(3): its atexit flush */
	}
	put_pid(to_main, getpid());
	wait_byte(from_main_p);
	return t_failed != failed0; /* W2 open: exit(3) flushes it */
}

static void scenario(uint32_t engine)
{
	char d1[128], d2[128], p_d1[256], p_d2[256], p_map[64];
	char c_d2[256], c_map[64];
	int up[2], go_p[2], go_c[2], st;
	pid_t p, c, first;

	sf_mkdtemp(d1, NULL);
	sf_mkdtemp(d2, NULL);
	T_REQUIRE(pipe(up) == 0 && pipe(go_p) == 0 && pipe(go_c) == 0);
	fflush(NULL);
	p = fork();
	T_REQUIRE(p >= 0);
	if (p == 0) {
		close(up[0]);
		close(go_p[1]);
		close(go_c[1]);
		exit(run_p(engine, d1, d2, up[1], go_p[0], go_c[0]));
	}
	close(up[1]);
	close(go_p[0]);
	close(go_c[0]);
	/* C and P report in either order; P is the one we forked. */
	first = get_pid(up[0]);
	c = get_pid(up[0]);
	if (c == p)
		c = first;
	T_REQUIRE(c > 0 && c != p);
	snprintf(p_d1, sizeof(p_d1), "%s/jit-%d.dump", d1, (int)p);
	snprintf(p_d2, sizeof(p_d2), "%s/jit-%d.dump", d2, (int)p);
	snprintf(p_map, sizeof(p_map), "/tmp/perf-%d.map", (int)p);
	snprintf(c_d2, sizeof(c_d2), "%s/jit-%d.dump", d2, (int)c);
	snprintf(c_map, sizeof(c_map), "/tmp/perf-%d.map", (int)c);

	/* Both alive. */
	T_CHECK_EQ(sf_locked(p_d1), 1);
	T_CHECK_EQ(sf_locked(p_d2), 1);
	T_CHECK_EQ(sf_locked(p_map), 1);
	T_CHECK_EQ(sf_locked(c_d2), 1);
	T_CHECK_EQ(sf_locked(c_map), 1);

	/* P gone, C alive: P's files are free, C's are not. */
	T_REQUIRE(write(go_p[1], "x", 1) == 1);
	T_CHECK(waitpid(p, &st, 0) == p && WIFEXITED(st) &&
		WEXITSTATUS(st) == 0);
	T_CHECK_EQ(sf_locked(p_d1), 0);
	T_CHECK_EQ(sf_locked(p_d2), 0);
	T_CHECK_EQ(sf_locked(p_map), 0);
	T_CHECK_EQ(sf_locked(c_d2), 1);
	T_CHECK_EQ(sf_locked(c_map), 1);

	/* C gone. */
	T_REQUIRE(write(go_c[1], "x", 1) == 1);
	T_CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) &&
		WEXITSTATUS(st) == 0);
	T_CHECK_EQ(sf_locked(c_d2), 0);
	T_CHECK_EQ(sf_locked(c_map), 0);

	T_CHECK_EQ(t_dump_loads(p_d1, "p_closed_", NULL), 5);
	T_CHECK_EQ(t_dump_loads(p_d2, "p_live_", NULL), 5);
	T_CHECK_EQ(t_dump_loads(p_d2, "c_", NULL), 0);
	T_CHECK_EQ(t_dump_loads(c_d2, "c_", NULL), 2);
	T_CHECK_EQ(t_dump_loads(c_d2, "p_", NULL), 0);

	close(up[0]);
	close(go_p[1]);
	close(go_c[1]);
	unlink(p_map);
	unlink(c_map);
	t_rmtree(d1);
	t_rmtree(d2);
}

int main(void)
{
	/* C is orphaned when P exits: have it reparented to us. */
	T_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
	for (size_t i = 0; i < 2; i++)
		t_run("scenario", t_engines[i], scenario);
	return t_report();
}
