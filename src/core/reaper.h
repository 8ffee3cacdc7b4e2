/* SPDX-License-Identifier: MIT */
/*
 * The reaper (reaper.c): ends the process, as glibc would have, once its
 * main thread left through pthread_exit() and only jitring's own threads
 * are left.
 */
#ifndef JITRING_SRC_REAPER_H
#define JITRING_SRC_REAPER_H

#include <sys/types.h>

/*
 * Each of jitring's own threads (the flusher, the write thread) calls
 * begin first thing and end just before it returns, on itself: the reaper
 * counts every other task as the application's.
 */
void jitring_reaper_thread_begin(void);
void jitring_reaper_thread_end(void);
/*
 * After pthread_join() of one of them, @tid: wait, briefly and boundedly,
 * until the kernel no longer counts it in the process.  pthread_join()
 * returns when the kernel clears the thread's tid, before it takes the
 * thread out of the thread group's count (/proc/self/stat, which CPython
 * reads to warn about fork() in a multithreaded process).
 */
void jitring_reaper_thread_gone(pid_t tid);

/*
 * From jitring_open(), once a writer is open: remember the main thread if
 * this is it, and start the reaper if main has already left.
 */
void jitring_reaper_open(void);

#endif /* JITRING_SRC_REAPER_H */
