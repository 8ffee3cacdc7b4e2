/* SPDX-License-Identifier: MIT */
/*
 * /tmp/perf-<pid>.map (JITRING_F_PERF_MAP) is claimed with the same checks
 * whether or not a closed writer of this process left one.
 * For both engines: a writer with the flag is opened and closed, its
 * map is removed, something is planted at the map's path, and a new writer
 * with the flag is opened:
 *
 *   planted                         open        the planted thing
 *   FIFO                            -EEXIST     not opened: open returns
 *                                               at once (a watchdog fails
 *                                               the test after 20 s)
 *   another user's file (root only) -EEXIST     unchanged
 *   a hard link to a file of ours   -EEXIST     unchanged
 *   symlink to a file / dangling    -EEXIST     unchanged / not created
 *   a directory                     -EEXIST     unchanged
 *   a file another process holds    -EEXIST     unchanged (a live map of a
 *     the lock of (a live map)                  process with our pid in
 *                                               another pid namespace)
 *   a stale file of ours            0           replaced, never written:
 *                                               the old inode keeps its
 *                                               bytes
 *
 * Before the fix every one of them but the symlinks was reopened through
 * its path: our lines went into the planted file and the FIFO made
 * jitring_open() block forever holding the global lock.
 *
 * Then, with testpoints: while a jitring_open() is inside the file claim,
 * fork() on another thread completes (the global lock is not held there).
 */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "filesafety.h"

#ifdef JITRING_TESTPOINTS
#include "common/testpoint.h"
#endif

static char map[64], dir[128], victim[256];

/* ---- a watchdog for calls that must not block ---- */

static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cond = PTHREAD_COND_INITIALIZER;
static int wd_armed;
static const char *wd_what;

static void *watchdog(void *arg)
{
	struct timespec until;

	(void)arg;
	pthread_mutex_lock(&wd_lock);
	for (;;) {
		while (!wd_armed)
			pthread_cond_wait(&wd_cond, &wd_lock);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 20;
		while (wd_armed == 1)
			if (pthread_cond_timedwait(&wd_cond, &wd_lock,
						   &until) == ETIMEDOUT &&
			    wd_armed == 1) {
				fprintf(stderr, "blocked for 20 s: %s\n",
					wd_what);
				t_failed++;
				unlink(map);
				_exit(t_report());
			}
		if (wd_armed == 2)
			wd_armed = 0;
		pthread_cond_broadcast(&wd_cond);
	}
	return NULL;
}

static void wd_arm(const char *what)
{
	pthread_mutex_lock(&wd_lock);
	wd_what = what;
	wd_armed = 1;
	pthread_cond_broadcast(&wd_cond);
	pthread_mutex_unlock(&wd_lock);
}

static void wd_disarm(void)
{
	pthread_mutex_lock(&wd_lock);
	wd_armed = 2;
	pthread_cond_broadcast(&wd_cond);
	while (wd_armed)
		pthread_cond_wait(&wd_cond, &wd_lock);
	pthread_mutex_unlock(&wd_lock);
}

/* ---- plants ---- */

enum plant {
	P_FIFO,
	P_OTHER_USER,
	P_HARDLINK,
	P_SYMLINK,
	P_DANGLING,
	P_DIR,
	P_LIVE,
	P_STALE,
	P_COUNT,
};

static const char *const plant_names[] = {
	"FIFO", "another user's file", "hard link", "symlink",
	"dangling symlink", "directory", "live map", "stale map of ours",
};

static const char precious[] = "precious data, not a perf map\n";

static void write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	T_REQUIRE(fd >= 0);
	T_REQUIRE(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
	close(fd);
}

static bool content_is(int fd, const char *s)
{
	char buf[256];
	ssize_t n = pread(fd, buf, sizeof(buf), 0);

	return n == (ssize_t)strlen(s) && !memcmp(buf, s, (size_t)n);
}

/*
 * Plant @p at the map path.  *@keep gets a descriptor of the planted file
 * (to read it back, or to hold its lock), or -1.  Return false to skip.
 */
static bool plant(enum plant p, int *keep, pid_t *holder)
{
	char target[300];
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };

	*keep = -1;
	*holder = 0;
	switch (p) {
	case P_FIFO:
		T_REQUIRE(mkfifo(map, 0666) == 0);
		break;
	case P_OTHER_USER:
		if (geteuid() != 0)
			return false;
		write_str(map, precious);
		T_REQUIRE(chown(map, 65534, 65534) == 0);
		*keep = open(map, O_RDONLY | O_CLOEXEC);
		break;
	case P_HARDLINK:
		write_str(victim, precious);
		T_REQUIRE(link(victim, map) == 0);
		*keep = open(victim, O_RDONLY | O_CLOEXEC);
		break;
	case P_SYMLINK:
		write_str(victim, precious);
		T_REQUIRE(symlink(victim, map) == 0);
		*keep = open(victim, O_RDONLY | O_CLOEXEC);
		break;
	case P_DANGLING:
		snprintf(target, sizeof(target), "%s/nothing", dir);
		T_REQUIRE(symlink(target, map) == 0);
		break;
	case P_DIR:
		T_REQUIRE(mkdir(map, 0755) == 0);
		break;
	case P_LIVE:
		/* As another process with our pid would: its own lock on
		 * its own map, held by a process that is not us. */
		write_str(map, precious);
		*keep = open(map, O_RDWR | O_CLOEXEC);
		T_REQUIRE(*keep >= 0);
		{
			int go[2];
			char c;

			T_REQUIRE(pipe(go) == 0);
			*holder = fork();
			T_REQUIRE(*holder >= 0);
			if (*holder == 0) {
				/* Take the lock, tell, hold it until killed. */
				if (fcntl(*keep, F_OFD_SETLK, &fl))
					_exit(1);
				if (write(go[1], "x", 1) != 1)
					_exit(1);
				for (;;)
					pause();
			}
			close(go[1]);
			T_REQUIRE(read(go[0], &c, 1) == 1);
			close(go[0]);
		}
		break;
	case P_STALE:
		write_str(map, precious);
		*keep = open(map, O_RDONLY | O_CLOEXEC);
		break;
	default:
		return false;
	}
	return true;
}

static void unplant(enum plant p, pid_t holder)
{
	if (holder > 0) {
		kill(holder, SIGKILL);
		waitpid(holder, NULL, 0);
	}
	if (p == P_DIR)
		rmdir(map);
	else
		unlink(map);
	unlink(victim);
}

static void planted(uint32_t engine)
{
	struct jitring *jr, *const sentinel = (struct jitring *)&jr;
	struct stat st;

	for (int p = 0; p < P_COUNT; p++) {
		unsigned long before = t_failed;
		int keep, ret;
		pid_t holder;

		char d[128], d2[128];

		/* A writer with a map, closed; then its map is removed.  The
		 * next writer in another directory: only the map is in
		 * question. */
		sf_mkdtemp(d, dir);
		sf_mkdtemp(d2, dir);
		T_REQUIRE(t_open(engine, d, JITRING_F_PERF_MAP, &jr) == 0);
		sf_write(jr, "first_", 2, NULL);
		T_CHECK_EQ(jitring_close(jr), 0);
		T_REQUIRE(unlink(map) == 0);

		if (!plant((enum plant)p, &keep, &holder)) {
			printf("skipped: %s (needs root)\n", plant_names[p]);
			t_rmtree(d);
			t_rmtree(d2);
			continue;
		}
		jr = sentinel;
		wd_arm(plant_names[p]);
		ret = t_open(engine, d2, JITRING_F_PERF_MAP, &jr);
		wd_disarm();
		if (p == P_STALE) {
			T_CHECK_EQ(ret, 0);
			/* A new file; the old one never got a byte. */
			T_CHECK(content_is(keep, precious));
			T_CHECK(lstat(map, &st) == 0 && S_ISREG(st.st_mode));
			if (ret == 0) {
				sf_write(jr, "second_", 3, NULL);
				T_CHECK_EQ(jitring_close(jr), 0);
			}
			T_CHECK(content_is(keep, precious));
		} else {
			T_CHECK_EQ(ret, -EEXIST);
			T_CHECK(jr == sentinel);
			if (ret == 0)
				jitring_close(jr);
			if (keep >= 0)
				T_CHECK(content_is(keep, precious));
		}
		switch (p) {
		case P_FIFO:
			T_CHECK(lstat(map, &st) == 0 && S_ISFIFO(st.st_mode));
			break;
		case P_DANGLING:
			T_CHECK(lstat(map, &st) == 0 && S_ISLNK(st.st_mode));
			{
				char target[300];

				snprintf(target, sizeof(target), "%s/nothing",
					 dir);
				T_CHECK(lstat(target, &st) != 0);
			}
			break;
		case P_DIR:
			T_CHECK(lstat(map, &st) == 0 && S_ISDIR(st.st_mode));
			break;
		case P_OTHER_USER:
			T_CHECK(lstat(map, &st) == 0 && st.st_uid == 65534);
			break;
		default:
			break;
		}
		if (keep >= 0)
			close(keep);
		unplant((enum plant)p, holder);
		t_rmtree(d);
		t_rmtree(d2);
		if (t_failed != before)
			fprintf(stderr, "  ^ planted: %s, engine %s\n",
				plant_names[p], t_engine_name(engine));
	}
	jitring_thread_detach(NULL);
}

/* ---- the global lock is not held while a file is claimed ---- */

#ifdef JITRING_TESTPOINTS
static _Atomic int forks_done, hook_calls;

static void *forker(void *arg)
{
	pid_t pid = fork();

	(void)arg;
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	atomic_store(&forks_done, 1);
	return NULL;
}

static void claim_hook(const char *name, void *arg)
{
	pthread_t t;

	(void)arg;
	if (strcmp(name, "claim_open") || atomic_fetch_add(&hook_calls, 1))
		return;
	/* fork() takes the global lock in its atfork handler: it must
	 * complete while this thread is inside the claim. */
	T_REQUIRE(pthread_create(&t, NULL, forker, NULL) == 0);
	wd_arm("fork() while jitring_open() claims its dump");
	pthread_join(t, NULL);
	wd_disarm();
}

static void fork_during_claim(void)
{
	struct jitring *jr;
	char d[128];

	sf_mkdtemp(d, NULL);
	atomic_store(&jitring_testpoint_hook, claim_hook);
	T_CHECK_EQ(t_open(JITRING_ENGINE_MUTEX, d, 0, &jr), 0);
	atomic_store(&jitring_testpoint_hook, NULL);
	T_CHECK(atomic_load(&hook_calls) >= 1);
	T_CHECK_EQ(atomic_load(&forks_done), 1);
	jitring_close(jr);
	t_rmtree(d);
}
#endif

int main(void)
{
	pthread_t wd;

	snprintf(map, sizeof(map), "/tmp/perf-%d.map", (int)getpid());
	unlink(map);
	sf_mkdtemp(dir, NULL);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	T_REQUIRE(pthread_create(&wd, NULL, watchdog, NULL) == 0);
	pthread_detach(wd);

	for (size_t i = 0; i < 2; i++)
		planted(t_engines[i]);
#ifdef JITRING_TESTPOINTS
	fork_during_claim();
#else
	printf("skipped: fork during a claim (needs -Dtestpoints=true)\n");
#endif
	unlink(map);
	t_rmtree(dir);
	return t_report();
}
