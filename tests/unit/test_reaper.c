/* SPDX-License-Identifier: MIT */
/*
 * The reaper (src/core/reaper.c): a process whose main thread leaves
 * through pthread_exit() without jitring_close() ends by itself, with
 * status 0, once only jitring's threads are left, and its dumps are whole.
 * Each case runs in a child process; the parent waits for it against a
 * deadline (20 s, for sanitizer runs on a slow machine), kills it if it
 * hangs, and reads its dump back with the independent reader: well
 * formed, every entry written there once (each code_index once), and the
 * CLOSE record that only the exit path writes.
 *
 *  1. main pthread_exit()s while 6 threads write (rings): they write half
 *     their entries, wait until main is a zombie, write the rest and
 *     return.  The same with the mutex engine, with the write thread on
 *     (JITRING_WRITE_THREAD=1) and with ready_rings set.
 *  2. main pthread_exit()s with no other application thread (both engines).
 *  3. a fork child, forked by a thread that is not main: there the
 *     forking thread is main; it starts 4 writing threads and
 *     pthread_exit()s.
 *  4. SIGTERM while no application thread is left and jitring is
 *     finishing the file (the exit path parked at "exit_close"): the child
 *     dies of SIGTERM (jitring's threads block every signal; the reaper
 *     unblocks it).  Testpoint builds only.
 *  5. main pthread_exit()s while a thread is blocked in read() on a pipe:
 *     the child stays alive while the reaper polls ("reaper_poll", 5
 *     polls seen); once the parent writes to the pipe the thread returns
 *     and the child ends with 0.  Testpoint builds only.
 *  6. the reaper cannot be started (fault "reaper_start"): the log hook
 *     hears why, and the process lives on as it did before the reaper
 *     (the test kills it).  Testpoint builds only.
 *
 * Under TSan the runtime keeps a thread of its own, which keeps such a
 * process alive with or without jitring; the child names it to the reaper
 * through the "reaper_foreign" fault point (testpoint builds).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "common/testpoint.h"

#define N_THREADS 6
#define N_FORK_THREADS 4
#define N_ENTRIES 400
#define DEADLINE_MS 20000u
#define POLLS_ALIVE 5

/* After one case hung, the others wait only this long: the run is failed
 * already, and each hang would cost the whole deadline. */
static unsigned deadline_ms = DEADLINE_MS;

struct child_cfg {
	const char *what;
	uint32_t engine;
	uint32_t ready_rings;
	bool write_thread;
	unsigned threads; /* writing application threads besides main */
};

/* ------------------------------------------------------------------ */
/* In the child.                                                        */

/* A failure in a child: say so and end with 3 (the parent checks 0). */
#define C_REQUIRE(c)                                                           \
	do {                                                                   \
		if (!(c)) {                                                    \
			fprintf(stderr, "%s:%d: child: %s\n", __FILE__,        \
				__LINE__, #c);                                 \
			_exit(3);                                              \
		}                                                              \
	} while (0)

static struct jitring *c_jr;
/* Tids of the child's application threads (main excluded). */
static _Atomic pid_t app_tids[N_THREADS + 2];
static _Atomic unsigned app_ready;
static int status_fd = -1; /* the child's end of the pipe to the parent */
#ifdef JITRING_TESTPOINTS
/* What the testpoint hook does: set by the cases that use it. */
static _Atomic unsigned polls;
static _Atomic int park_exit_close;
static _Atomic int tell_polls;
static _Atomic int fail_start;
#endif

static pid_t c_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* This process's main thread (tid == pid) has left: a zombie. */
static bool main_is_zombie(void)
{
	char path[64], buf[256];
	const char *p;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)getpid());
	f = fopen(path, "r");
	if (!f)
		return true; /* gone altogether */
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

static void app_register(void)
{
	unsigned i = atomic_fetch_add(&app_ready, 1);

	C_REQUIRE(i < sizeof(app_tids) / sizeof(app_tids[0]));
	atomic_store(&app_tids[i], c_gettid());
}

static void tell_parent(char c)
{
	while (write(status_fd, &c, 1) < 0 && errno == EINTR)
		;
}

#ifdef JITRING_TESTPOINTS
static void hook(const char *name, void *arg)
{
	(void)arg;
	if (!strcmp(name, "reaper_poll")) {
		if (atomic_fetch_add(&polls, 1) + 1 == POLLS_ALIVE &&
		    atomic_load(&tell_polls))
			tell_parent('p');
	} else if (!strcmp(name, "exit_close") &&
		   atomic_load(&park_exit_close)) {
		/* The process is finishing its dump: held here for good,
		 * until a signal ends it. */
		tell_parent('x');
		for (;;)
			pause();
	}
}

/*
 * Whether @tid is a thread of the sanitizer's (TSan's background thread):
 * neither jitring's ("jitring-*") nor one of the application's.
 */
static int foreign(const char *name, void *arg)
{
	pid_t tid = (pid_t)(intptr_t)arg;
	char path[64], comm[32] = "";
	unsigned n = atomic_load(&app_ready);
	FILE *f;

	if (!strcmp(name, "reaper_start"))
		return atomic_load(&fail_start);
	if (strcmp(name, "reaper_foreign") || !T_TSAN)
		return 0;
	for (unsigned i = 0; i < n; i++)
		if (atomic_load(&app_tids[i]) == tid)
			return 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	return strncmp(comm, "jitring-", 8) != 0;
}

static void hooks_set(void)
{
	atomic_store(&jitring_testpoint_hook, hook);
	atomic_store(&jitring_fault_hook, foreign);
}
#else
static void hooks_set(void)
{
}
#endif

static void write_range(unsigned t, unsigned from, unsigned to)
{
	char name[32];

	for (unsigned i = from; i < to; i++) {
		snprintf(name, sizeof(name), "t%u-%u", t, i);
		C_REQUIRE(t_write_at(c_jr, name,
				     0x10000000ull + ((uint64_t)t << 20) +
					     (uint64_t)i * 64) >= 0);
	}
}

/* An application thread: half its entries, then (main gone) the rest. */
static void *writer_main(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;

	app_register();
	write_range(t, 0, N_ENTRIES / 2);
	/* A bounded wait for a condition (main has left), not a sleep
	 * standing in for one. */
	C_REQUIRE(T_POLL_UNTIL(main_is_zombie(), DEADLINE_MS));
	write_range(t, N_ENTRIES / 2, N_ENTRIES);
	return NULL;
}

static void start_writers(unsigned n, unsigned first)
{
	pthread_attr_t attr;

	/* Detached: nobody joins them once main has left (TSan would call
	 * a finished joinable thread leaked). */
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (unsigned i = 0; i < n; i++) {
		pthread_t t;

		C_REQUIRE(pthread_create(&t, &attr, writer_main,
					 (void *)(uintptr_t)(first + i)) == 0);
	}
	pthread_attr_destroy(&attr);
	/* Registered before main leaves: see foreign(). */
	C_REQUIRE(T_POLL_UNTIL(atomic_load(&app_ready) >= n, DEADLINE_MS));
}

/* The log hook: tells the parent when the reaper could not start. */
static void log_fn(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	if (strstr(msg, "cannot start the reaper"))
		tell_parent('l');
}

static void open_writer(const struct child_cfg *cfg, const char *dir)
{
	struct jitring_config c;

	if (cfg->write_thread)
		setenv("JITRING_WRITE_THREAD", "1", 1);
	jitring_config_init(&c);
	c.engine = cfg->engine;
	c.dir = dir;
	c.flags = JITRING_F_WRITE_CLOSE;
	c.ready_rings = cfg->ready_rings;
	c.log = log_fn;
	C_REQUIRE(jitring_open(&c, &c_jr) == 0);
}

/* Cases 1 and 2: main writes some, starts the writers and leaves. */
static void child_exit_main(const struct child_cfg *cfg, const char *dir)
{
	hooks_set();
	open_writer(cfg, dir);
	/* Main's own entries are "t<threads>-*". */
	write_range(cfg->threads, 0, N_ENTRIES);
	start_writers(cfg->threads, 0);
	pthread_exit(NULL);
}

/* Case 3, the grandchild's main (the thread that forked). */
static void *fork_main(void *arg)
{
	const char *dir = arg;
	bool reaped = false;
	pid_t pid;
	int st;

	(void)dir;
	pid = fork();
	C_REQUIRE(pid >= 0);
	if (pid == 0) {
		/* Only this thread is left here: it is main now. */
		atomic_store(&app_ready, 0);
		start_writers(N_FORK_THREADS, 0);
		write_range(N_FORK_THREADS, 0, N_ENTRIES);
		pthread_exit(NULL);
	}
	/* Tell the parent whose dump to read, then wait for it. */
	C_REQUIRE(write(status_fd, &pid, sizeof(pid)) == sizeof(pid));
	/* T_POLL_UNTIL() tests its condition once more at the end: not
	 * waitpid() itself. */
	if (!T_POLL_UNTIL(reaped ||
				  (reaped = waitpid(pid, &st, WNOHANG) == pid),
			  DEADLINE_MS)) {
		kill(pid, SIGKILL);
		C_REQUIRE(!"the fork child ended by itself");
	}
	C_REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return NULL;
}

/* Case 3: open, write, fork from another thread; this child then exits
 * normally. */
static void child_fork(const struct child_cfg *cfg, const char *dir)
{
	pthread_t t;

	hooks_set();
	open_writer(cfg, dir);
	write_range(9, 0, N_ENTRIES / 4);
	C_REQUIRE(pthread_create(&t, NULL, fork_main, (void *)dir) == 0);
	C_REQUIRE(pthread_join(t, NULL) == 0);
	exit(0);
}

#ifdef JITRING_TESTPOINTS
/* Case 4: park the exit path, then leave. */
static void child_sigterm(const struct child_cfg *cfg, const char *dir)
{
	atomic_store(&park_exit_close, 1);
	hooks_set();
	open_writer(cfg, dir);
	write_range(0, 0, N_ENTRIES);
	pthread_exit(NULL);
}

static int read_fd = -1;

static void *reader_main(void *arg)
{
	char c;

	(void)arg;
	app_register();
	while (read(read_fd, &c, 1) < 0 && errno == EINTR)
		;
	return NULL;
}

/* Case 6: main leaves, and the reaper cannot start. */
static void child_no_reaper(const struct child_cfg *cfg, const char *dir)
{
	atomic_store(&fail_start, 1);
	hooks_set();
	open_writer(cfg, dir);
	write_range(0, 0, N_ENTRIES);
	pthread_exit(NULL);
}

/* Case 5: a thread blocked in read() outlives main. */
static void child_blocked(const struct child_cfg *cfg, const char *dir)
{
	pthread_attr_t attr;
	pthread_t t;

	atomic_store(&tell_polls, 1);
	hooks_set();
	open_writer(cfg, dir);
	write_range(0, 0, N_ENTRIES);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	C_REQUIRE(pthread_create(&t, &attr, reader_main, NULL) == 0);
	pthread_attr_destroy(&attr);
	C_REQUIRE(T_POLL_UNTIL(atomic_load(&app_ready) >= 1, DEADLINE_MS));
	pthread_exit(NULL);
}
#endif

/* ------------------------------------------------------------------ */
/* In the parent.                                                       */

/*
 * Wait for @pid until the deadline; kill it past that.  Return: its wait
 * status, or -1 if it had to be killed.
 */
static int wait_child(pid_t pid, const char *what)
{
	uint64_t end = t_now_ns() + (uint64_t)deadline_ms * 1000000u;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return st;
		T_REQUIRE(r == 0);
		if (t_now_ns() >= end)
			break;
		t_sleep_ms(2);
	}
	fprintf(stderr, "%s: child %d still alive after %u ms: killed\n", what,
		(int)pid, deadline_ms);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	deadline_ms = 2000;
	return -1;
}

/* Read one byte (or @len bytes) from @fd, waiting until the deadline. */
static bool read_within(int fd, void *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, (int)deadline_ms);
	while (r < 0 && errno == EINTR);
	return r == 1 && read(fd, buf, len) == (ssize_t)len;
}

/* The dump of @pid in @dir: whole, @want entries each once, one CLOSE. */
static void check_dump(const char *dir, pid_t pid, size_t want,
		       const char *what)
{
	char path[160];
	struct t_dump d;
	uint64_t *idx;
	unsigned long before = t_failed;

	snprintf(path, sizeof(path), "%s/jit-%d.dump", dir, (int)pid);
	t_dump_read(&d, path);
	T_CHECK_EQ(d.check, 0);
	T_CHECK_EQ(d.nloads, want);
	T_CHECK_EQ(d.res.count[JITRING_RD_CODE_CLOSE], 1);
	idx = calloc(d.nloads + 1, sizeof(*idx));
	T_REQUIRE(idx);
	for (size_t i = 0; i < d.nloads; i++)
		idx[i] = d.loads[i].index;
	qsort(idx, d.nloads, sizeof(*idx), t_cmp_u64);
	for (size_t i = 1; i < d.nloads; i++)
		T_CHECK(idx[i] != idx[i - 1]);
	free(idx);
	t_dump_free(&d);
	if (t_failed != before)
		fprintf(stderr, "  ^ in the dump of %s\n", what);
}

static pid_t spawn(void (*fn)(const struct child_cfg *, const char *),
		   const struct child_cfg *cfg, const char *dir, int *to_parent)
{
	int fds[2];
	pid_t pid;

	T_REQUIRE(pipe(fds) == 0);
	fflush(NULL);
	pid = fork();
	T_REQUIRE(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		status_fd = fds[1];
		fn(cfg, dir);
		_exit(4); /* not reached */
	}
	close(fds[1]);
	*to_parent = fds[0];
	return pid;
}

/* Cases 1 and 2. */
static void case_exit_main(const struct child_cfg *cfg)
{
	struct t_dir d;
	pid_t pid;
	int fd, st;

	t_dir_make(&d, "reaper");
	pid = spawn(child_exit_main, cfg, d.path, &fd);
	st = wait_child(pid, cfg->what);
	T_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		check_dump(d.path, pid, (size_t)(cfg->threads + 1) * N_ENTRIES,
			   cfg->what);
	printf("%s: %s\n", cfg->what,
	       st == -1      ? "hung" :
	       WIFEXITED(st) ? "ended by itself" :
			       "killed");
	close(fd);
	t_dir_remove(&d);
}

/* Case 3. */
static void case_fork(void)
{
	struct child_cfg cfg = { .what = "fork child" };
	struct t_dir d;
	pid_t pid, gpid = 0;
	int fd, st;

	t_dir_make(&d, "reaper");
	pid = spawn(child_fork, &cfg, d.path, &fd);
	T_CHECK(read_within(fd, &gpid, sizeof(gpid)));
	st = wait_child(pid, cfg.what);
	T_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (gpid > 0 && st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		check_dump(d.path, gpid, (N_FORK_THREADS + 1) * N_ENTRIES,
			   cfg.what);
	printf("fork child whose main left: %s\n",
	       st == 0 ? "ended by itself" : "failed");
	close(fd);
	t_dir_remove(&d);
}

#ifdef JITRING_TESTPOINTS
/* Case 4. */
static void case_sigterm(void)
{
	struct child_cfg cfg = { .what = "sigterm" };
	struct t_dir d;
	char c = 0;
	pid_t pid;
	int fd, st;

	t_dir_make(&d, "reaper");
	pid = spawn(child_sigterm, &cfg, d.path, &fd);
	T_CHECK(read_within(fd, &c, 1) && c == 'x');
	if (c == 'x')
		T_CHECK(kill(pid, SIGTERM) == 0);
	st = wait_child(pid, cfg.what);
	T_CHECK(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
	printf("SIGTERM while the dump is finished: %s\n",
	       st != -1 && WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) :
					     "not ended by it");
	close(fd);
	t_dir_remove(&d);
}

/* Case 5. */
static void case_blocked(void)
{
	struct child_cfg cfg = { .what = "blocked reader" };
	struct t_dir d;
	int data[2], fd, st;
	char c = 0;
	pid_t pid;

	t_dir_make(&d, "reaper");
	T_REQUIRE(pipe(data) == 0);
	read_fd = data[0];
	pid = spawn(child_blocked, &cfg, d.path, &fd);
	close(data[0]);
	/* The reaper polled 5 times with the reader alive ... */
	T_CHECK(read_within(fd, &c, 1) && c == 'p');
	/* ... and the child still lives. */
	T_CHECK_EQ(waitpid(pid, &st, WNOHANG), 0);
	/* Let the reader return: now the child ends. */
	T_CHECK(write(data[1], "g", 1) == 1);
	close(data[1]);
	st = wait_child(pid, cfg.what);
	T_CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		check_dump(d.path, pid, N_ENTRIES, cfg.what);
	printf("blocked reader: alive after %d polls, then %s\n", POLLS_ALIVE,
	       st == 0 ? "ended by itself" : "failed");
	close(fd);
	t_dir_remove(&d);
}
/* Case 6. */
static void case_no_reaper(void)
{
	struct child_cfg cfg = { .what = "no reaper" };
	struct t_dir d;
	char c = 0;
	pid_t pid;
	int fd, st;

	t_dir_make(&d, "reaper");
	pid = spawn(child_no_reaper, &cfg, d.path, &fd);
	/* The log hook heard why ... */
	T_CHECK(read_within(fd, &c, 1) && c == 'l');
	/* ... and the process lives on as it did before the reaper: on the
	 * flusher, for good (SIGKILL only). */
	T_CHECK_EQ(waitpid(pid, &st, WNOHANG), 0);
	kill(pid, SIGKILL);
	T_CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) &&
		WTERMSIG(st) == SIGKILL);
	printf("no reaper: the log hook heard it (%s)\n",
	       c == 'l' ? "yes" : "no");
	close(fd);
	t_dir_remove(&d);
}
#endif

int main(void)
{
	static const struct child_cfg cases[] = {
		{ "writers, rings", JITRING_ENGINE_RINGS, 0, false, N_THREADS },
		{ "writers, mutex", JITRING_ENGINE_MUTEX, 0, false, N_THREADS },
		{ "writers, rings, write thread", JITRING_ENGINE_RINGS, 0, true,
		  N_THREADS },
		{ "writers, rings, ready_rings", JITRING_ENGINE_RINGS, 16,
		  false, N_THREADS },
		{ "main alone, rings", JITRING_ENGINE_RINGS, 0, false, 0 },
		{ "main alone, mutex", JITRING_ENGINE_MUTEX, 0, false, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		case_exit_main(&cases[i]);
	case_fork();
#ifdef JITRING_TESTPOINTS
	case_sigterm();
	case_blocked();
	case_no_reaper();
#else
	printf("SIGTERM, blocked-reader and no-reaper cases: need "
	       "-Dtestpoints=true\n");
#endif
	return t_report();
}
