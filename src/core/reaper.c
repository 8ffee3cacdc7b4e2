/* SPDX-License-Identifier: MIT */
/*
 * The reaper: a process whose main thread leaves through pthread_exit()
 * ends, as glibc ends it, when its last thread exits: glibc counts
 * threads (__nptl_nthreads) and the last one to leave calls exit(0).
 * jitring's own threads (the flusher and the write thread, engines/rings) never
 * leave by themselves, so they would keep such a process alive for good,
 * and since they block every signal, SIGTERM and Ctrl-C would stay
 * pending with no application thread left to take them.
 *
 * Algorithm:
 *   1. A process-wide key (main_key) gets a value on the main thread: from
 *      the library's constructor when it runs there (gettid() == getpid()),
 *      from jitring_open() called there, and in a fork child from the
 *      atfork child handler (the forking thread is the child's main).
 *      glibc runs key destructors on main only when main leaves through
 *      pthread_exit() (or is cancelled): a return from main calls exit().
 *      So main_left() running means exactly that.  jitring_open() on
 *      another thread, with main never marked in this process, looks at
 *      /proc/self/task/<pid>/stat instead: Z, main has left.
 *   2. Then, and only once a writer was opened, one reaper thread starts
 *      (reaper_start(), once per process).  A process whose main never
 *      calls pthread_exit() never has one: no thread, no timer.
 *   3. The reaper polls: it counts the tasks in /proc/self/task, leaving
 *      out main (tid == pid: a zombie now) and itself, and subtracts the
 *      jitring threads alive (own_threads).  The wait between polls
 *      starts at 10 ms and doubles up to 250 ms: this is jitring's only
 *      timer, and it exists only in a process whose main thread left.
 *   4. When no application task is left, it unblocks the signals whose
 *      default action ends the process (so a SIGTERM while the dump is
 *      being finished ends it), and calls exit(0) as glibc's last thread
 *      would: atexit handlers run (jitring's closes every open writer, as
 *      at any exit, from the reaper's thread: never a flusher's, which
 *      exit_close() joins) and stdio is flushed.
 *
 * Invariants: own_threads never counts a thread that is not running:
 * each jitring thread adds itself once it runs and takes itself off just
 * before it returns, so while it is counted its task is listed.  The
 * count and a change count share one word (the low 32 bits count, the
 * high ones change on every begin and end); a poll whose word changed
 * while it listed the tasks decides nothing and polls again.  So a poll
 * never counts fewer application tasks than there are: an error can only
 * make the reaper wait one more poll, never end a process that still has
 * an application thread.  Application threads keep every signal they
 * take until the reaper saw none of them left: unblocking earlier could
 * take a signal an application thread waits for in sigwait().
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/testpoint.h"
#include "files.h"
#include "internal.h"
#include "reaper.h"

#define JR_REAP_FIRST_MS 10u
#define JR_REAP_MAX_MS 250u
/* One begin or end in the high half of own_threads. */
#define JR_OWN_CHANGE (1ull << 32)

enum {
	REAPER_NONE,
	REAPER_RUNNING,
	REAPER_FAILED
};

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t main_key;
static bool key_made;
/* The process whose main thread holds a value of main_key. */
static _Atomic pid_t marked_pid;
/* Main has left through pthread_exit(). */
static _Atomic bool main_gone;
static _Atomic int reaper_state;
/* Low 32 bits: jitring threads running; high: changes (see above). */
static _Atomic uint64_t own_threads;

static pid_t tid_self(void)
{
	return (pid_t)syscall(SYS_gettid);
}

void jitring_reaper_thread_begin(void)
{
	/* seq_cst: ordered against the loads around the reaper's listing
	 * (app_tasks()), with which it pairs. */
	atomic_fetch_add_explicit(&own_threads, JR_OWN_CHANGE + 1,
				  memory_order_seq_cst);
}

void jitring_reaper_thread_end(void)
{
	/* Pairs with the seq_cst loads in app_tasks(). */
	atomic_fetch_add_explicit(&own_threads, JR_OWN_CHANGE - 1,
				  memory_order_seq_cst);
}

void jitring_reaper_thread_gone(pid_t tid)
{
	for (int i = 0; i < 20000 && tid > 0; i++) {
		if (syscall(SYS_tgkill, getpid(), tid, 0) && errno == ESRCH)
			return;
		sched_yield();
	}
}

/*
 * Application tasks alive: 0 means none; 1 when this poll cannot tell
 * (a jitring thread began or ended meanwhile, or /proc/self/task could
 * not be read for now: out of descriptors, say); -1 without /proc.
 */
static long app_tasks(void)
{
	pid_t pid = getpid(), self = tid_self();
	uint64_t before, after;
	struct dirent *de;
	long n = 0;
	DIR *d;

	/* Pairs with the seq_cst RMWs in jitring_reaper_thread_begin() and
	 * _end(). */
	before = atomic_load_explicit(&own_threads, memory_order_seq_cst);
	d = opendir("/proc/self/task");
	if (!d)
		return errno == ENOENT ? -1 : 1;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);

		if (tid <= 0 || tid == pid || tid == self)
			continue;
		/* A test names a sanitizer's own thread (TSan keeps one),
		 * which would keep the process alive without jitring too. */
		if (JITRING_FAULT(reaper_foreign, (void *)(intptr_t)tid))
			continue;
		n++;
	}
	closedir(d);
	/* Pairs with the seq_cst RMWs in jitring_reaper_thread_begin() and
	 * _end(). */
	after = atomic_load_explicit(&own_threads, memory_order_seq_cst);
	if (before != after)
		return 1;
	n -= (long)(uint32_t)after;
	/* Fewer tasks than counted jitring threads cannot be: wait. */
	return n < 0 ? 1 : n;
}

/*
 * What the last application thread would have had unblocked: every
 * signal whose default action ends the process (the ones that stop,
 * continue or are ignored by default stay blocked).
 */
static void unblock_fatal(void)
{
	static const int keep[] = { SIGCHLD, SIGCONT, SIGURG, SIGWINCH,
				    SIGTSTP, SIGTTIN, SIGTTOU };
	sigset_t set;

	sigfillset(&set);
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		sigdelset(&set, keep[i]);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

static void *reaper_main(void *arg)
{
	unsigned ms = JR_REAP_FIRST_MS;
	long left;

	(void)arg;
	pthread_setname_np(pthread_self(), "jitring-reaper");
	while ((left = app_tasks()) != 0) {
		struct timespec ts = { 0, (long)ms * 1000000L };

		JITRING_TESTPOINT(reaper_poll, (void *)(intptr_t)left);
		/* No /proc: the process lives on, as it would without us. */
		if (left < 0)
			return NULL;
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		ms = ms * 2 > JR_REAP_MAX_MS ? JR_REAP_MAX_MS : ms * 2;
	}
	unblock_fatal();
	exit(0);
}

/* Log @what to every writer still open (the reaper has no writer of its
 * own); handles are never freed and the list only grows at its head. */
static void log_all(const char *what, int err)
{
	struct jitring *jr;

	jitring_handles_lock();
	jr = jitring_handles_first();
	jitring_handles_unlock();
	for (; jr; jr = jr->next)
		if (atomic_load_explicit(&jr->state, memory_order_relaxed) <
		    JR_CLOSING)
			jitring_log(jr, JITRING_LOG_ERR, "%s: %s", what,
				    strerror(err));
}

/* Once per process, and only after main left and a writer was opened. */
static void reaper_start(void)
{
	pthread_attr_t attr;
	sigset_t all, old;
	int none = REAPER_NONE;
	pthread_t t;
	int ret;

	if (!atomic_compare_exchange_strong_explicit(
		    &reaper_state, &none, REAPER_RUNNING, memory_order_relaxed,
		    memory_order_relaxed))
		return;
	ret = pthread_attr_init(&attr);
	if (!ret) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		/* No application signal handler runs on it before it
		 * decided to end the process. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		ret = JITRING_FAULT(reaper_start, NULL) ?
			      EAGAIN :
			      pthread_create(&t, &attr, reaper_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
	}
	if (ret) {
		/* The process then lives on after its threads, as before. */
		atomic_store_explicit(&reaper_state, REAPER_FAILED,
				      memory_order_relaxed);
		log_all("main thread left; cannot start the reaper", ret);
	}
}

/* Main's value of main_key is being destroyed: main left through
 * pthread_exit(). */
static void main_left(void *arg)
{
	bool opened;

	(void)arg;
	/*
	 * seq_cst, then the list under its lock: a jitring_open() adding
	 * the first writer meanwhile either is seen here or, after the
	 * lock, sees main_gone (the load in jitring_reaper_open(), with
	 * which this pairs).
	 */
	atomic_store_explicit(&main_gone, true, memory_order_seq_cst);
	jitring_handles_lock();
	opened = jitring_handles_first() != NULL;
	jitring_handles_unlock();
	if (opened)
		reaper_start();
}

static void key_make(void);

/* In a fork child only the forking thread is left: it is main now. */
static void fork_child(void)
{
	/* Done already (it registered us); orders key_made before us. */
	pthread_once(&key_once, key_make);
	atomic_store_explicit(&own_threads, 0, memory_order_relaxed);
	atomic_store_explicit(&main_gone, false, memory_order_relaxed);
	atomic_store_explicit(&reaper_state, REAPER_NONE, memory_order_relaxed);
	if (key_made && !pthread_setspecific(main_key, &main_key))
		atomic_store_explicit(&marked_pid, getpid(),
				      memory_order_relaxed);
}

static void key_make(void)
{
	key_made = pthread_key_create(&main_key, main_left) == 0;
	pthread_atfork(NULL, NULL, fork_child);
}

/* On the main thread: its value of the key, once per process. */
static void mark_main(void)
{
	pid_t pid = getpid();

	pthread_once(&key_once, key_make);
	if (!key_made ||
	    atomic_load_explicit(&marked_pid, memory_order_relaxed) == pid)
		return;
	if (!pthread_setspecific(main_key, &main_key))
		atomic_store_explicit(&marked_pid, pid, memory_order_relaxed);
}

/* Loaded while main runs (at startup, or dlopen() from main). */
__attribute__((constructor)) static void reaper_init(void)
{
	if (tid_self() == getpid())
		mark_main();
}

/* Main is a zombie: it left (through pthread_exit(): exit() would have
 * ended us all). */
static bool main_zombie(void)
{
	char path[64], buf[256];
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)getpid());
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "pid (comm) S ...": comm may hold ") ". */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'Z';
}

void jitring_reaper_open(void)
{
	pthread_once(&key_once, key_make);
	if (tid_self() == getpid()) {
		mark_main();
		return;
	}
	/* Main never marked in this process: ask /proc whether it left. */
	if (atomic_load_explicit(&marked_pid, memory_order_relaxed) !=
		    getpid() &&
	    main_zombie())
		atomic_store_explicit(&main_gone, true, memory_order_relaxed);
	/* Pairs with the seq_cst store in main_left(). */
	if (atomic_load_explicit(&main_gone, memory_order_seq_cst))
		reaper_start();
}
