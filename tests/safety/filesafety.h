/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the file-safety tests (tests/safety/test_files_*.c) on top of
 * tests/harness.h: scratch directories under a given parent, writing named
 * entries, asking whether anyone holds a file's lock, and inode numbers.
 */
#ifndef JITRING_TESTS_SAFETY_FILESAFETY_H
#define JITRING_TESTS_SAFETY_FILESAFETY_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "reader/reader.h"

/* mkdtemp() under @parent ("/tmp" if NULL) into @buf (>= 128 bytes). */
static inline void sf_mkdtemp(char *buf, const char *parent)
{
	int n = snprintf(buf, 128, "%s/jitring-safety-XXXXXX",
			 parent ? parent : "/tmp");

	T_REQUIRE(n > 0 && n < 128);
	T_REQUIRE(mkdtemp(buf) != NULL);
}

/* @n entries named "<prefix><i>"; code_index of each into @idx if set. */
static inline void sf_write(struct jitring *jr, const char *prefix,
			    unsigned int n, int64_t *idx)
{
	static const unsigned char code[64];

	for (unsigned int i = 0; i < n; i++) {
		char name[64];
		struct jitring_entry e = {
			.name = name,
			.code_addr = code + (i % 32),
			.code_size = 16,
		};
		int64_t id;

		snprintf(name, sizeof(name), "%s%u", prefix, i);
		id = jitring_write(jr, &e);
		T_CHECK(id > 0);
		if (idx)
			idx[i] = id;
	}
}

/* Does anyone hold a lock on @path?  1 yes, 0 no, -1 cannot tell. */
static inline int sf_locked(const char *path)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	int ret;

	if (fd < 0)
		return -1;
	ret = fcntl(fd, F_OFD_GETLK, &fl) ? -1 : fl.l_type != F_UNLCK;
	close(fd);
	return ret;
}

static inline int sf_ino(const char *path, ino_t *ino)
{
	struct stat st;

	if (lstat(path, &st))
		return -errno;
	*ino = st.st_ino;
	return 0;
}

#endif /* JITRING_TESTS_SAFETY_FILESAFETY_H */
