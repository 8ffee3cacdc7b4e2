/* SPDX-License-Identifier: MIT */
/*
 * A gate in front of the flusher's writes, for tests that must stall the
 * flusher deterministically: install t_iogate_pwritev() as
 * jitring_io_hook (testpoint builds) and shut the gate; the flusher's
 * next pwritev() then waits (counted in .parked) until the gate opens.
 * One gate per test program; .count is a spare counter under the same
 * lock for tests that also wait on their producers.
 */
#ifndef JITRING_TESTS_IOGATE_H
#define JITRING_TESTS_IOGATE_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/uio.h>
#include <time.h>

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	unsigned parked; /* flusher writes waiting at the gate now */
	unsigned count;  /* the test's own (t_iogate_bump()) */
} t_iogate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false,
	       0, 0 };

static inline ssize_t t_iogate_pwritev(int fd, const struct iovec *iov,
				       int cnt, off_t off)
{
	pthread_mutex_lock(&t_iogate.lock);
	t_iogate.parked++;
	pthread_cond_broadcast(&t_iogate.cond);
	while (!t_iogate.open)
		pthread_cond_wait(&t_iogate.cond, &t_iogate.lock);
	t_iogate.parked--;
	pthread_mutex_unlock(&t_iogate.lock);
	return pwritev(fd, iov, cnt, off);
}

static inline void t_iogate_set(bool open)
{
	pthread_mutex_lock(&t_iogate.lock);
	t_iogate.open = open;
	pthread_cond_broadcast(&t_iogate.cond);
	pthread_mutex_unlock(&t_iogate.lock);
}

/* Add @n to .count (0 resets it) and wake waiters. */
static inline void t_iogate_bump(int n)
{
	pthread_mutex_lock(&t_iogate.lock);
	t_iogate.count = n ? t_iogate.count + (unsigned)n : 0;
	pthread_cond_broadcast(&t_iogate.cond);
	pthread_mutex_unlock(&t_iogate.lock);
}

/*
 * Wait until *@v (.parked or .count) >= @want, at most @sec seconds
 * (0: no limit).  Returns the final value.
 */
static inline unsigned t_iogate_wait(const unsigned *v, unsigned want,
				     int sec)
{
	struct timespec ts;
	unsigned got;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += sec;
	pthread_mutex_lock(&t_iogate.lock);
	while (*v < want) {
		if (!sec)
			pthread_cond_wait(&t_iogate.cond, &t_iogate.lock);
		else if (pthread_cond_timedwait(&t_iogate.cond, &t_iogate.lock,
						&ts))
			break;
	}
	got = *v;
	pthread_mutex_unlock(&t_iogate.lock);
	return got;
}

#endif /* JITRING_TESTS_IOGATE_H */
