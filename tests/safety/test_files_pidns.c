/* SPDX-License-Identifier: MIT */
/*
 * Same pid, two pid namespaces, one dump directory:
 * containers sharing a volume.  Every process below is pid 1 of its own
 * new pid namespace, and all of them see one scratch directory as /tmp (a
 * bind mount in a private mount namespace, so /tmp/perf-1.map is this
 * test's own), so all of them name their files /tmp/d/jit-1.dump and
 * /tmp/perf-1.map.  For both engines:
 *
 *  1. the owner opens a writer with JITRING_F_PERF_MAP and writes;
 *  2. an intruder's open on the same directory gets -EEXIST, and so does
 *     its open on another directory with JITRING_F_PERF_MAP (the map is
 *     live too); it leaves nothing behind; the owner's dump is the same
 *     file;
 *  3. the owner writes more and closes its writer, but lives on: an
 *     intruder still gets -EEXIST (a closed writer's dump is what perf
 *     inject needs);
 *  4. the owner exits with all its entries in its dump and map;
 *  5. now the dump and map are stale: a new process replaces them (its
 *     open returns 0 with a fresh 40-byte dump and an empty map).
 *
 * Before the fix the intruder of step 2 replaced the live dump.  Needs
 * root (CLONE_NEWPID, mounts): exit 77 where namespaces cannot be made.
 */
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "filesafety.h"

#define SKIP_NS 77

static char shared[128];   /* the shared /tmp, outside path */
static int up[2], down[2]; /* owner -> test, test -> owner */
static uint32_t engine;

static long map_lines(const char *path)
{
	size_t len;
	unsigned char *buf = t_slurp(path, &len);
	long n = 0;

	if (!buf)
		return -1;
	for (size_t i = 0; i < len; i++)
		n += buf[i] == '\n';
	free(buf);
	return n;
}

static int owner(void)
{
	unsigned long failed0 = t_failed;
	struct jitring *jr;
	char c;

	if (t_open(engine, "/tmp/d", JITRING_F_PERF_MAP, &jr))
		return 10;
	sf_write(jr, "owner_a_", 10, NULL);
	if (jitring_flush(jr))
		return 11;
	if (write(up[1], "r", 1) != 1 || read(down[0], &c, 1) != 1)
		return 12;
	sf_write(jr, "owner_b_", 10, NULL);
	if (jitring_close(jr))
		return 13;
	if (t_dump_loads("/tmp/d/jit-1.dump", "owner_", NULL) != 20)
		return 14;
	if (map_lines("/tmp/perf-1.map") != 20)
		return 15;
	if (write(up[1], "c", 1) != 1 || read(down[0], &c, 1) != 1)
		return 16;
	return t_failed != failed0 ? 17 : 0;
}

static int intruder(void)
{
	struct jitring *jr;
	int ret = 0;

	if (t_open(engine, "/tmp/d", 0, &jr) != -EEXIST)
		ret = 20;
	else if (t_open(engine, "/tmp/e", JITRING_F_PERF_MAP, &jr) != -EEXIST)
		ret = 21;
	else if (!access("/tmp/e/jit-1.dump", F_OK))
		ret = 22; /* the failed open must not leave its dump */
	return ret;
}

static int replacer(void)
{
	struct jitring *jr;
	struct stat st;

	if (t_open(engine, "/tmp/d", JITRING_F_PERF_MAP, &jr))
		return 30;
	if (stat("/tmp/d/jit-1.dump", &st) || st.st_size != 40)
		return 31;
	if (stat("/tmp/perf-1.map", &st) || st.st_size != 0)
		return 32;
	sf_write(jr, "replacer_", 1, NULL);
	if (jitring_close(jr))
		return 33;
	return t_dump_loads("/tmp/d/jit-1.dump", "", NULL) == 1 ? 0 : 34;
}

/* Run @fn as pid 1 of a new pid namespace that sees @shared as /tmp. */
static pid_t spawn(int (*fn)(void))
{
	pid_t mid;

	fflush(NULL);
	mid = fork();
	T_REQUIRE(mid >= 0);
	if (mid == 0) {
		pid_t g;
		int st;

		if (unshare(CLONE_NEWPID | CLONE_NEWNS) ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount(shared, "/tmp", NULL, MS_BIND, NULL))
			_exit(SKIP_NS);
		g = fork();
		if (g < 0)
			_exit(SKIP_NS);
		if (g == 0)
			_exit(getpid() == 1 ? fn() : 40);
		if (waitpid(g, &st, 0) != g)
			_exit(41);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 42);
	}
	return mid;
}

static int reap(pid_t pid)
{
	int st;

	T_REQUIRE(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 43;
}

static void scenario(void)
{
	char dump[256], path[256], c;
	ino_t ino0 = 0, ino = 0;
	pid_t own;
	int ret;

	sf_mkdtemp(shared, NULL);
	snprintf(path, sizeof(path), "%s/d", shared);
	T_REQUIRE(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/e", shared);
	T_REQUIRE(mkdir(path, 0755) == 0);
	snprintf(dump, sizeof(dump), "%s/d/jit-1.dump", shared);
	T_REQUIRE(pipe(up) == 0 && pipe(down) == 0);

	/* 1. */
	own = spawn(owner);
	/* Only the owner talks: if it dies, reads see EOF. */
	close(up[1]);
	close(down[0]);
	if (read(up[0], &c, 1) != 1) {
		ret = reap(own);
		t_rmtree(shared);
		if (ret == SKIP_NS)
			t_skip("cannot make pid and mount namespaces here");
		fprintf(stderr, "owner failed: %d\n", ret);
		T_REQUIRE(0);
	}
	T_REQUIRE(sf_ino(dump, &ino0) == 0);
	/* 2. */
	T_CHECK_EQ(reap(spawn(intruder)), 0);
	T_CHECK(sf_ino(dump, &ino) == 0 && ino == ino0);
	/* 3. */
	T_REQUIRE(write(down[1], "g", 1) == 1);
	T_REQUIRE(read(up[0], &c, 1) == 1);
	T_CHECK_EQ(reap(spawn(intruder)), 0);
	T_CHECK(sf_ino(dump, &ino) == 0 && ino == ino0);
	/* 4. */
	T_REQUIRE(write(down[1], "x", 1) == 1);
	T_CHECK_EQ(reap(own), 0);
	T_CHECK_EQ(t_dump_loads(dump, "owner_", NULL), 20);
	/* 5. */
	T_CHECK_EQ(reap(spawn(replacer)), 0);
	T_CHECK_EQ(t_dump_loads(dump, "replacer_", NULL), 1);
	T_CHECK_EQ(t_dump_loads(dump, "owner_", NULL), 0);

	close(up[0]);
	close(down[1]);
	t_rmtree(shared);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() != 0)
		t_skip("needs root for pid and mount namespaces");
	for (size_t i = 0; i < 2; i++) {
		unsigned long before = t_failed;

		engine = t_engines[i];
		scenario();
		if (t_failed != before)
			fprintf(stderr, "  ^ engine %s\n",
				t_engine_name(engine));
	}
	return t_report();
}
