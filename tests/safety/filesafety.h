/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the file-safety tests (tests/safety/test_files_*.c): scratch
 * directories, writing named entries, reading a dump back with the
 * independent reader, and asking whether anyone holds a file's lock.
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
#include "reader.h"

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

static inline unsigned char *sf_slurp(const char *path, size_t *len)
{
	struct stat st;
	unsigned char *buf;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	*len = 0;
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return NULL;
	}
	buf = malloc((size_t)st.st_size + 1);
	T_REQUIRE(buf);
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = 0;
	*len = got;
	return buf;
}

/*
 * The dump at @path must pass jitring_check(SORTED); return how many of
 * its CODE_LOADs are named "<prefix><something>" (-1 if the file is
 * missing or invalid).  *@closes, if set, gets the CLOSE record count.
 */
static inline long sf_dump_count(const char *path, const char *prefix,
				 uint64_t *closes)
{
	struct jitring_check_result res;
	struct jitring_rd_header h;
	struct jitring_rd_record rec;
	struct jitring_reader rd;
	size_t len;
	unsigned char *buf = sf_slurp(path, &len);
	long n = 0;

	if (!buf)
		return -1;
	if (jitring_check(buf, len, JITRING_CHECK_SORTED, &res)) {
		fprintf(stderr, "%s: %s at %llu: %s\n", path, res.rule,
			(unsigned long long)res.off, res.detail);
		free(buf);
		return -1;
	}
	if (closes)
		*closes = res.count[JITRING_RD_CODE_CLOSE];
	T_REQUIRE(jitring_reader_init(&rd, buf, len, 0, &h) == 0);
	while (jitring_reader_next(&rd, &rec) == 1)
		if (rec.id == JITRING_RD_CODE_LOAD &&
		    !strncmp(rec.name, prefix, strlen(prefix)))
			n++;
	free(buf);
	return n;
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
