/* SPDX-License-Identifier: MIT */
/*
 * The reaper (reaper.c): ends the process, as glibc would have, once its
 * main thread left through pthread_exit() and only jitring's own threads
 * are left.
 */
#ifndef JITRING_SRC_REAPER_H
#define JITRING_SRC_REAPER_H

/*
 * Each of jitring's own threads (the flusher, the write thread) calls
 * begin first thing and end just before it returns, on itself: the reaper
 * counts every other task as the application's.
 */
void jitring_reaper_thread_begin(void);
void jitring_reaper_thread_end(void);

/*
 * From jitring_open(), once a writer is open: remember the main thread if
 * this is it, and start the reaper if main has already left.
 */
void jitring_reaper_open(void);

#endif /* JITRING_SRC_REAPER_H */
