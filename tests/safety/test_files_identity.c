/* SPDX-License-Identifier: MIT */
/*
 * A dump is told by the file itself, not by how its directory is spelled,
 * for both engines:
 *
 *  1. writer A open on D; a second open on D, D/, D//, D/., ./D (relative),
 *     D/../D and a symlink to D: each -EEXIST, and A's dump is the same
 *     file with all of A's entries (before the fix each of them deleted
 *     A's live dump and A went on writing into the deleted file);
 *  2. after A's close, an open through each spelling continues A's dump
 *     (it is ours): every entry of every session is in it once, with
 *     unique code_index values, and the file is still A's inode;
 *  3. the dump directory itself a symlink (followed, as documented): the
 *     dump lands in the target, and an open on the target while the
 *     symlinked writer is open is refused.
 */
#include <limits.h>
#include <sys/stat.h>

#include "filesafety.h"

static void spellings(uint32_t engine)
{
	char base[128], dump[256], rel[160], link[160];
	char sp[8][300];
	const char *name;
	struct jitring *a, *b;
	struct jitring *const sentinel = (struct jitring *)&b;
	ino_t ino0 = 0, ino = 0;
	char cwd[PATH_MAX];
	unsigned int nsp = 0, i;

	sf_mkdtemp(base, NULL);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", base, (int)getpid());
	/* /tmp/jitring-safety-XXXXXX: relative to /tmp and a symlink. */
	name = strrchr(base, '/') + 1;
	snprintf(rel, sizeof(rel), "./%s", name);
	snprintf(link, sizeof(link), "%s-link", base);
	T_REQUIRE(symlink(base, link) == 0);
	snprintf(sp[nsp++], sizeof(sp[0]), "%s/", base);
	snprintf(sp[nsp++], sizeof(sp[0]), "%s//", base);
	snprintf(sp[nsp++], sizeof(sp[0]), "%s/.", base);
	snprintf(sp[nsp++], sizeof(sp[0]), "%s", rel);
	snprintf(sp[nsp++], sizeof(sp[0]), "%s/../%s", base, name);
	snprintf(sp[nsp++], sizeof(sp[0]), "%s", link);
	snprintf(sp[nsp++], sizeof(sp[0]), "%s/", link);
	T_REQUIRE(getcwd(cwd, sizeof(cwd)) != NULL);
	T_REQUIRE(chdir("/tmp") == 0);

	/* 1: A open; every other spelling is refused. */
	T_REQUIRE(t_open(engine, base, 0, &a) == 0);
	sf_write(a, "a_first_", 10, NULL);
	T_CHECK_EQ(jitring_flush(a), 0);
	T_REQUIRE(sf_ino(dump, &ino0) == 0);
	for (i = 0; i < nsp; i++) {
		b = sentinel;
		T_CHECK_EQ(t_open(engine, sp[i], 0, &b), -EEXIST);
		T_CHECK(b == sentinel);
		if (b != sentinel)
			fprintf(stderr, "  spelling %s was not refused\n",
				sp[i]);
		T_CHECK(sf_ino(dump, &ino) == 0 && ino == ino0);
	}
	/* The other engine too. */
	T_CHECK_EQ(t_open(engine == JITRING_ENGINE_MUTEX ?
				   JITRING_ENGINE_RINGS : JITRING_ENGINE_MUTEX,
			   sp[0], 0, &b), -EEXIST);
	sf_write(a, "a_second_", 10, NULL);
	T_CHECK_EQ(jitring_close(a), 0);
	T_CHECK_EQ(t_dump_loads(dump, "a_", NULL), 20);

	/* 2: after close each spelling continues the same dump. */
	for (i = 0; i < nsp; i++) {
		char prefix[32];

		snprintf(prefix, sizeof(prefix), "s%u_", i);
		b = sentinel;
		T_CHECK_EQ(t_open(engine, sp[i], 0, &b), 0);
		if (b == sentinel)
			continue;
		sf_write(b, prefix, 3, NULL);
		T_CHECK_EQ(jitring_close(b), 0);
		T_CHECK(sf_ino(dump, &ino) == 0 && ino == ino0);
		T_CHECK_EQ(t_dump_loads(dump, prefix, NULL), 3);
	}
	/* Nothing lost, every code_index unique (jitring_check). */
	T_CHECK_EQ(t_dump_loads(dump, "a_", NULL), 20);
	T_CHECK_EQ(t_dump_loads(dump, "s", NULL), 3 * nsp);

	T_REQUIRE(chdir(cwd) == 0);
	unlink(link);
	t_rmtree(base);
	jitring_thread_detach(NULL);
}

static void dir_symlink(uint32_t engine)
{
	char target[128], link[160], dump[256], ldump[300];
	struct jitring *a, *b;
	struct stat st;

	sf_mkdtemp(target, NULL);
	snprintf(link, sizeof(link), "%s-dirlink", target);
	T_REQUIRE(symlink(target, link) == 0);
	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", target, (int)getpid());
	snprintf(ldump, sizeof(ldump), "%s/jit-%d.dump", link, (int)getpid());

	T_REQUIRE(t_open(engine, link, 0, &a) == 0);
	/* Followed: the dump is a regular file in the target directory. */
	T_CHECK(lstat(dump, &st) == 0 && S_ISREG(st.st_mode));
	T_CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
	sf_write(a, "via_link_", 5, NULL);
	T_CHECK_EQ(jitring_flush(a), 0);
	T_CHECK_EQ(t_open(engine, target, 0, &b), -EEXIST);
	T_CHECK_EQ(jitring_close(a), 0);
	T_CHECK_EQ(t_dump_loads(dump, "via_link_", NULL), 5);
	T_CHECK_EQ(t_dump_loads(ldump, "via_link_", NULL), 5);
	unlink(link);
	t_rmtree(target);
	jitring_thread_detach(NULL);
}

int main(void)
{
	for (size_t i = 0; i < 2; i++) {
		t_run("spellings", t_engines[i], spellings);
		t_run("dir_symlink", t_engines[i], dir_symlink);
	}
	return t_report();
}
