/* SPDX-License-Identifier: MIT */
/*
 * jitring-dump reads files that change or never end without crashing or
 * growing.  It used to map the file (SIGBUS when the
 * file shrank under it; the library itself truncates a dump after a write
 * error) and read anything else whole into memory (--check /dev/zero grew
 * by gigabytes).
 *
 *  1. A file truncated while jitring_check_stream() reads it: -ENODATA
 *     after exactly the bytes that were there, whether it shrinks below
 *     what was already read or ahead of it.  Deterministic: a testpoint
 *     in the stream's read path truncates it (test builds only).
 *  2. jitring-dump (listing) on a 16 MiB file truncated to 4 MiB while it
 *     runs: it exits 2 saying the file shrank, after listing exactly the
 *     records of the first 4 MiB.  Deterministic without a hook: the
 *     tool's output goes to a pipe nobody drains, so it blocks after its
 *     first megabyte of output, long before it has read 4 MiB; the file is
 *     truncated once that first output arrives.
 *  3. jitring-dump --check /dev/zero: refused at once (exit 2), whatever
 *     the memory limit.
 *  4. A pipe with a header and 256 MiB of zeros: valid (a zero tail), with
 *     a peak RSS (VmHWM) below 64 MiB; with a record after the zeros, the
 *     hole is reported at its start.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"
#include "reader/reader.h"
#include "common/testpoint.h"

static char dir[64];
static char tool[512];

static void write_file(const char *path, const struct hostile_buf *b)
{
	FILE *f = fopen(path, "wb");

	T_REQUIRE(f);
	T_REQUIRE(fwrite(b->p, 1, b->len, f) == b->len);
	T_REQUIRE(fclose(f) == 0);
}

/* ------------------------------------------------------------------ */
/* 1. jitring_check_stream() on a file that shrinks.                   */

#ifdef JITRING_TESTPOINTS
static int shrink_fd = -1;
static int shrink_at;
static int fills;
static off_t shrink_to;

static void shrink_hook(const char *name, void *arg)
{
	(void)arg;
	if (strcmp(name, "reader_fill") == 0 && ++fills == shrink_at)
		T_REQUIRE(ftruncate(shrink_fd, shrink_to) == 0);
}

/* Check @path with 64 KiB reads, truncated to @to before read @at. */
static void shrink_case(const struct hostile_buf *b, const char *path,
			int at, off_t to, uint64_t want_pos)
{
	struct jitring_check_result res;
	struct jitring_rd_stream st;
	int ret;

	write_file(path, b);
	shrink_fd = open(path, O_RDWR | O_CLOEXEC);
	T_REQUIRE(shrink_fd >= 0);
	shrink_at = at;
	shrink_to = to;
	fills = 0;
	T_REQUIRE(jitring_stream_open(&st, shrink_fd, 0) == 0);
	st.chunk = 64 * 1024;
	atomic_store_explicit(&jitring_testpoint_hook, shrink_hook,
			      memory_order_relaxed);
	ret = jitring_check_stream(&st, JITRING_CHECK_SORTED, &res);
	atomic_store_explicit(&jitring_testpoint_hook, NULL,
			      memory_order_relaxed);
	T_CHECK_EQ(ret, -ENODATA);
	T_CHECK_EQ(st.size, b->len);
	/* 0: cut below what two 64 KiB reads had read. */
	if (want_pos)
		T_CHECK_EQ(st.pos, want_pos);
	else
		T_CHECK(st.pos > 64 * 1024 && st.pos <= 128 * 1024);
	/* Every whole record before the end was checked. */
	T_CHECK_EQ(res.records, (st.pos - 40) / 64);
	T_CHECK(res.rule == NULL);
	jitring_stream_close(&st);
	close(shrink_fd);
}
#endif

static void test_shrink_check(void)
{
#ifdef JITRING_TESTPOINTS
	struct jitring_check_result res;
	struct jitring_rd_stream st;
	struct hostile_buf b = { 0 };
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/shrink-check.dump", dir);
	hostile_dump(&b, 65536, 0); /* 4 MiB */

	/* Below what was read: the third read finds EOF. */
	shrink_case(&b, path, 3, 100 * 1024, 0);
	/* Ahead of it, in the middle of a record. */
	shrink_case(&b, path, 2, 3 * 1024 * 1024 - 10, 3 * 1024 * 1024 - 10);

	/* Untouched, the same file is valid. */
	write_file(path, &b);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	T_REQUIRE(fd >= 0);
	T_REQUIRE(jitring_stream_open(&st, fd, 0) == 0);
	st.chunk = 64 * 1024;
	T_CHECK_EQ(jitring_check_stream(&st, JITRING_CHECK_SORTED, &res), 0);
	T_CHECK_EQ(res.records, 65536);
	jitring_stream_close(&st);
	close(fd);
	unlink(path);
	free(b.p);
#else
	printf("SKIP shrink (library): needs -Dtestpoints=true\n");
#endif
}

/* ------------------------------------------------------------------ */
/* The tool as a child process.                                         */

struct child {
	pid_t pid;
	int out; /* its stdout, or -1 */
	int err; /* its stderr */
};

/*
 * Start jitring-dump with @args and stdin @in (or /dev/null).  A watchdog
 * alarm ends it if it runs away; @as_limit bounds its address space where
 * no sanitizer needs terabytes of it.
 */
static struct child spawn(const char *const *args, int in, rlim_t as_limit)
{
	const char *argv[8];
	int out[2], err[2];
	struct child c;
	size_t i;

	argv[0] = tool;
	for (i = 0; args[i] && i < 6; i++)
		argv[i + 1] = args[i];
	argv[i + 1] = NULL;
	T_REQUIRE(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0);
	fflush(NULL);
	c.pid = fork();
	T_REQUIRE(c.pid >= 0);
	if (c.pid == 0) {
		if (in < 0)
			in = open("/dev/null", O_RDONLY);
		if (dup2(in, 0) < 0 || dup2(out[1], 1) < 0 ||
		    dup2(err[1], 2) < 0)
			_exit(126);
		alarm(60);
#if !T_SANITIZED
		if (as_limit) {
			struct rlimit rl = { as_limit, as_limit };

			setrlimit(RLIMIT_AS, &rl);
		}
#else
		(void)as_limit;
#endif
		execv(tool, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	c.out = out[0];
	c.err = err[0];
	return c;
}

/* Read @fd to EOF into @buf (NUL-terminated, truncated to @size - 1). */
static size_t slurp(int fd, char *buf, size_t size, size_t *lines)
{
	char tmp[65536];
	size_t n = 0, total = 0;
	ssize_t k, i;

	for (;;) {
		k = read(fd, tmp, sizeof(tmp));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		total += (size_t)k;
		if (lines)
			for (i = 0; i < k; i++)
				*lines += tmp[i] == '\n';
		if (buf && n + 1 < size) {
			size_t c = (size_t)k < size - 1 - n ? (size_t)k :
							      size - 1 - n;

			memcpy(buf + n, tmp, c);
			n += c;
		}
	}
	if (buf)
		buf[n] = '\0';
	return total;
}

/* Wait for @c; return its exit code, or 128 + signal. */
static int finish(struct child *c, struct rusage *ru)
{
	int st;

	if (c->out >= 0)
		close(c->out);
	close(c->err);
	T_REQUIRE(wait4(c->pid, &st, 0, ru) == c->pid);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

/* ------------------------------------------------------------------ */
/* 2. The listing of a file that shrinks under it.                      */

static void test_shrink_tool(void)
{
	enum { N = 262144 }; /* 64-byte records: 16 MiB */
	const off_t cut = 4 * 1024 * 1024;
	static char err[4096];
	struct hostile_buf b = { 0 };
	const char *args[2];
	struct child c;
	size_t lines = 0;
	char path[128], first;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/shrink-tool.dump", dir);
	hostile_dump(&b, N, 0);
	write_file(path, &b);
	free(b.p);
	fd = open(path, O_RDWR | O_CLOEXEC);
	T_REQUIRE(fd >= 0);

	args[0] = path;
	args[1] = NULL;
	c = spawn(args, -1, 0);
	/*
	 * Its first output arrives when its 1 MiB stdout buffer is full; it
	 * then blocks writing to this undrained pipe, having read at most
	 * 2 MiB of the file.  Cut the file now.
	 */
	T_REQUIRE(read(c.out, &first, 1) == 1);
	lines += first == '\n';
	T_REQUIRE(ftruncate(fd, cut) == 0);
	slurp(c.out, NULL, 0, &lines);
	slurp(c.err, err, sizeof(err), NULL);
	rc = finish(&c, NULL);
	close(fd);
	printf("listing a file cut from 16 MiB to 4 MiB: exit %d, %zu lines, stderr: %s",
	       rc, lines, err);
	T_CHECK_EQ(rc, 2); /* not 128 + SIGBUS */
	T_CHECK(strstr(err, "shrank while it was read") != NULL);
	T_CHECK(strstr(err, "16777256 bytes, only 4194304 were there") !=
		NULL);
	/* The records wholly inside the first 4 MiB, no more, no less. */
	T_CHECK_EQ(lines, (cut - 40) / 64);
	unlink(path);
}

/* ------------------------------------------------------------------ */
/* 3, 4. Endless input.                                                 */

static void test_dev_zero(void)
{
	static const char *const args[] = { "--check", "/dev/zero", NULL };
	static char out[4096], err[4096];
	struct child c;
	int rc;

	/* 1 GiB: the old reader ran into it within a second. */
	c = spawn(args, -1, (rlim_t)1 << 30);
	slurp(c.out, out, sizeof(out), NULL);
	slurp(c.err, err, sizeof(err), NULL);
	rc = finish(&c, NULL);
	printf("--check /dev/zero: exit %d: %s", rc, err);
	T_CHECK_EQ(rc, 2);
	T_CHECK(strstr(err, "not a regular file, pipe or socket") != NULL);
}

/*
 * Peak RSS of @pid's current program (VmHWM), in KiB; -1 if unknown.
 * Not ru_maxrss: that counts the forked copy of this test before exec.
 */
static long hwm_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/*
 * Feed a header, @zeros zero bytes and maybe a record to --check.  The
 * tool's peak RSS is read once everything is written and it waits for
 * more (all but the pipe's buffer is through it).
 */
static int pipe_zeros(size_t zeros, bool record, char *out, size_t size,
		      long *maxrss_kb)
{
	static const char *const args[] = { "--check", "/dev/stdin", NULL };
	static unsigned char block[1 << 16];
	struct hostile_buf b = { 0 };
	struct rusage ru;
	struct child c;
	int in[2], rc;
	size_t n;
	bool ok = true;

	T_REQUIRE(pipe2(in, O_CLOEXEC) == 0);
	c = spawn(args, in[0], 0);
	close(in[0]);
	hostile_header(&b);
	ok = write(in[1], b.p, b.len) == (ssize_t)b.len;
	for (n = 0; ok && n < zeros; n += sizeof(block)) {
		size_t k = zeros - n < sizeof(block) ? zeros - n :
						       sizeof(block);

		ok = write(in[1], block, k) == (ssize_t)k;
	}
	if (ok && record) {
		b.len = 0;
		hostile_load(&b, 1, 1, 1);
		ok = write(in[1], b.p, b.len) == (ssize_t)b.len;
	}
	*maxrss_kb = hwm_kb(c.pid);
	close(in[1]);
	free(b.p);
	slurp(c.out, out, size, NULL);
	slurp(c.err, NULL, 0, NULL);
	rc = finish(&c, &ru);
	T_CHECK(ok); /* it read everything */
	return rc;
}

static void test_pipe_zeros(void)
{
	const size_t zeros = (size_t)256 << 20;
	static char out[4096];
	long rss;
	int rc;

	rc = pipe_zeros(zeros, false, out, sizeof(out), &rss);
	printf("pipe, header + 256 MiB of zeros: exit %d, peak RSS %ld KiB\n%s",
	       rc, rss, out);
	T_CHECK_EQ(rc, 0);
	T_CHECK(strstr(out, ": ok: 0 records") != NULL);
	T_CHECK(strstr(out, "trailing zero bytes  268435456") != NULL);
	/* The old reader held all 256 MiB. */
	T_CHECK(rss > 0 && rss < 64 * 1024);

	rc = pipe_zeros((size_t)8 << 20, true, out, sizeof(out), &rss);
	printf("pipe, header + 8 MiB of zeros + a record: exit %d\n%s", rc,
	       out);
	T_CHECK_EQ(rc, 1);
	T_CHECK(strstr(out, ": offset 40: rule record-size: zero bytes") !=
		NULL);
}

int main(void)
{
	const char *root = getenv("JITRING_BUILD_ROOT");

	signal(SIGPIPE, SIG_IGN);
	snprintf(dir, sizeof(dir), "/tmp/jitring-dumpio-XXXXXX");
	T_REQUIRE(mkdtemp(dir));
	test_shrink_check();
	if (root && root[0]) {
		snprintf(tool, sizeof(tool), "%s/tools/jitring-dump", root);
		T_REQUIRE(access(tool, X_OK) == 0);
		test_shrink_tool();
		test_dev_zero();
		test_pipe_zeros();
	} else {
		printf("SKIP tool: JITRING_BUILD_ROOT not set\n");
	}
	t_rmtree(dir);
	return t_report();
}
