/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"
#include "internal.h"
#include "jitring/jitdump.h"
#include "perfmap.h"

static size_t put_hex(char *p, uint64_t v)
{
	char tmp[16];
	size_t n = 0;

	do {
		tmp[n++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	for (size_t i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return n;
}

size_t jitring_perfmap_line(char *buf, uint64_t addr, uint64_t size,
			    const char *name, size_t name_len)
{
	size_t n = put_hex(buf, addr);

	buf[n++] = ' ';
	n += put_hex(buf + n, size);
	buf[n++] = ' ';
	if (name_len > JITRING_NAME_MAX)
		name_len = JITRING_NAME_MAX;
	for (size_t i = 0; i < name_len; i++) {
		unsigned char c = (unsigned char)name[i];

		buf[n++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	buf[n++] = '\n';
	return n;
}

size_t jitring_perfmap_line_load(char *buf, const uint8_t *group, size_t len)
{
	struct jitdump_code_load l;
	struct jitdump_prefix p;
	size_t off = 0;

	/* The group's last record is its LOAD (or MOVE). */
	for (;;) {
		memcpy(&p, group + off, sizeof(p));
		if (p.id == JIT_CODE_LOAD || p.id == JIT_CODE_MOVE ||
		    off + p.total_size >= len)
			break;
		off += p.total_size;
	}
	if (p.id != JIT_CODE_LOAD)
		return 0;
	memcpy(&l, group + off, sizeof(l));
	return jitring_perfmap_line(
		buf, l.code_addr, l.code_size,
		(const char *)group + off + sizeof(l),
		strnlen((const char *)group + off + sizeof(l),
			p.total_size - sizeof(l)));
}

int jitring_perfmap_open(struct jitring *jr, bool child, struct jitring **from)
{
	char name[32], path[64];
	off_t end = 0;
	int fd;

	snprintf(name, sizeof(name), "perf-%u.map", jr->file.pid);
	snprintf(path, sizeof(path), "/tmp/%s", name);
	free(jr->map_path);
	jr->map_path = strdup(path);
	if (!jr->map_path)
		return -ENOMEM;
	/* The same checks for a new map and for one a closed writer of
	 * ours left (which is carried on after its last line). */
	fd = jitring_file_claim(jr, JR_KIND_MAP, "/tmp", name, jr->file.pid,
				child, from);
	if (fd < 0)
		return fd;
	/* The mutex engine writes through a dup() sharing this offset. */
	end = lseek(fd, 0, SEEK_END);
	if (end < 0) {
		int ret = -errno;

		jitring_file_unclaim(JR_KIND_MAP, "/tmp", name, fd, *from,
				     child);
		return ret;
	}
	jr->map_hold = jr->map_fd = fd;
	jr->map_off = (uint64_t)end;
	return 0;
}

void jitring_perfmap_abandon(struct jitring *jr, struct jitring *from)
{
	/* jr->map_path is "/tmp/perf-<pid>.map" (jitring_perfmap_open()). */
	jitring_file_unclaim(JR_KIND_MAP, "/tmp",
			     strrchr(jr->map_path, '/') + 1, jr->map_hold, from,
			     false);
	jr->map_hold = jr->map_fd = -1;
}

void jitring_perfmap_write(struct jitring *jr, const char *buf, size_t len)
{
	uint64_t off = jr->map_off;

	while (len && jr->map_fd >= 0) {
		ssize_t n = pwrite(jr->map_fd, buf, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			jitring_log(jr, JITRING_LOG_ERR, "perf map %s: %s",
				    jr->map_path, n ? strerror(errno) : "EOF");
			/* Drop the map, keep the dump; no torn last line. */
			if (ftruncate(jr->map_fd, (off_t)jr->map_off))
				jitring_log(jr, JITRING_LOG_ERR,
					    "perf map truncate: %s",
					    strerror(errno));
			/* No more lines; map_hold keeps the file ours. */
			jr->map_fd = -1;
			return;
		}
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	/* Callers pass whole lines: this is a line boundary. */
	jr->map_off = off;
}

void jitring_perfmap_close(struct jitring *jr)
{
	/* The descriptor stays in map_hold (see files.c). */
	jr->map_fd = -1;
}
