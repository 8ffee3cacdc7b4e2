/* SPDX-License-Identifier: MIT */
/*
 * The test harness of tests/, stress/ and the helpers bench/ shares with
 * them.  Checks print file:line and values and carry on; a binary prints
 * "N passed, N failed" last and exits 0 (pass), 1 (fail) or 77 (skip),
 * the automake codes meson understands.
 *
 * Below the checks, what several tests had each written for themselves:
 * engines and writers, scratch directories, whole files, waiting on a
 * condition, fields at any alignment, an .eh_frame for test entries, and
 * dumps read back with the independent reader (src/reader/reader.h).
 * Header-only (static inline), so every binary keeps its own counters.
 */
#ifndef JITRING_TESTS_HARNESS_H
#define JITRING_TESTS_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "jitring.h"
#include "reader/reader.h"

/*
 * Built with ASan (T_ASAN) or TSan (T_TSAN): 0 or 1, for #if and for C
 * conditions alike.  gcc says so one way, clang another.
 */
#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#ifndef T_ASAN
#define T_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__)
#define T_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define T_TSAN 1
#endif
#endif
#ifndef T_TSAN
#define T_TSAN 0
#endif
#define T_SANITIZED (T_ASAN || T_TSAN)

#define T_EXIT_PASS 0
#define T_EXIT_FAIL 1
#define T_EXIT_SKIP 77

/* Atomic: checks run on many threads (and in signal handlers). */
static _Atomic unsigned long t_passed, t_failed;

#define T_CHECK(c)                                                          \
	do {                                                                \
		if (c) {                                                    \
			t_passed++;                                         \
		} else {                                                    \
			t_failed++;                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n",        \
				__FILE__, __LINE__, #c);                    \
		}                                                           \
	} while (0)

#define T_CHECK_EQ(a, b)                                                    \
	do {                                                                \
		long long t_a_ = (long long)(a), t_b_ = (long long)(b);     \
		if (t_a_ == t_b_) {                                         \
			t_passed++;                                         \
		} else {                                                    \
			t_failed++;                                         \
			fprintf(stderr,                                     \
				"%s:%d: %s == %s failed: %lld != %lld\n",   \
				__FILE__, __LINE__, #a, #b, t_a_, t_b_);    \
		}                                                           \
	} while (0)

/* Fatal variant for preconditions the rest of a test depends on. */
#define T_REQUIRE(c)                                                        \
	do {                                                                \
		if (!(c)) {                                                 \
			fprintf(stderr, "%s:%d: requirement failed: %s\n",  \
				__FILE__, __LINE__, #c);                    \
			t_failed++;                                         \
			exit(t_report());                                   \
		}                                                           \
	} while (0)

/*
 * The binary's verdict: a test that made no check shows nothing, and
 * fails rather than passes.
 */
static inline int t_report(void)
{
	if (!atomic_load(&t_passed) && !atomic_load(&t_failed)) {
		printf("FAIL: the test made no check\n");
		t_failed++;
	}
	printf("%lu passed, %lu failed\n", atomic_load(&t_passed),
	       atomic_load(&t_failed));
	fflush(stdout);
	return t_failed ? T_EXIT_FAIL : T_EXIT_PASS;
}

/* Skips the rest of the test; after a failed check, fails instead. */
static inline void t_skip(const char *why)
{
	printf("SKIP: %s\n", why);
	if (atomic_load(&t_failed)) {
		printf("FAIL: skipped after %lu failed check(s): the test "
		       "fails\n",
		       atomic_load(&t_failed));
		exit(t_report());
	}
	printf("%lu passed, 0 failed\n", atomic_load(&t_passed));
	fflush(stdout);
	exit(T_EXIT_SKIP);
}

/* ------------------------------------------------------------------ */
/* Writers.                                                             */

/* The engines; tests that run once per engine loop over these. */
static const uint32_t t_engines[] = { JITRING_ENGINE_RINGS,
				      JITRING_ENGINE_MUTEX };

static inline const char *t_engine_name(uint32_t engine)
{
	return engine == JITRING_ENGINE_MUTEX ? "mutex" : "rings";
}

/* @fn(@engine); if a check failed in it, say in what and with which. */
static inline void t_run(const char *what, uint32_t engine,
			 void (*fn)(uint32_t engine))
{
	unsigned long before = t_failed;

	fn(engine);
	if (t_failed != before)
		fprintf(stderr, "  ^ in %s, engine %s\n", what,
			t_engine_name(engine));
}

/* jitring_open() with @engine, @dir and @flags, the rest the defaults. */
static inline int t_open(uint32_t engine, const char *dir, uint32_t flags,
			 struct jitring **out)
{
	struct jitring_config c;

	jitring_config_init(&c);
	c.engine = engine;
	c.dir = dir;
	c.flags = flags;
	return jitring_open(&c, out);
}

/* A writer's counters (jitring_stats() with the size filled in). */
static inline struct jitring_stats t_stats(const struct jitring *jr)
{
	struct jitring_stats st;

	memset(&st, 0, sizeof(st));
	st.struct_size = sizeof(st);
	jitring_stats(jr, &st);
	return st;
}

/*
 * jitring_write() of a 16-byte entry (a ret, then zeros) named @name at
 * @addr, its bytes passed as code_bytes (nothing is read at @addr).
 */
static inline int64_t t_write_at(struct jitring *jr, const char *name,
				 uint64_t addr)
{
	static const uint8_t code[16] = { 0xc3 };
	struct jitring_entry e = {
		.name = name,
		.code_addr = (const void *)(uintptr_t)addr,
		.code_size = sizeof(code),
		.code_bytes = code,
	};

	return jitring_write(jr, &e);
}

/* /proc/self/statm in bytes: the address space (@resident false) or the
 * resident set of this process, 0 if it cannot be read. */
static inline uint64_t t_statm_bytes(bool resident)
{
	unsigned long v[2] = { 0, 0 };
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &v[0], &v[1]) != 2)
		v[0] = v[1] = 0;
	fclose(f);
	return (uint64_t)v[resident] * (uint64_t)sysconf(_SC_PAGESIZE);
}

static inline uint64_t t_rss_bytes(void)
{
	return t_statm_bytes(true);
}

/* Bytes as MiB, for messages. */
/* Threads of this process whose name starts with @prefix. */
static inline long t_threads_named(const char *prefix)
{
	char path[64], buf[32];
	struct dirent *de;
	long n = 0;
	DIR *d = opendir("/proc/self/task");

	while (d && (de = readdir(d))) {
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm",
			 de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f) &&
		    !strncmp(buf, prefix, strlen(prefix)))
			n++;
		fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

static inline double t_mib(uint64_t b)
{
	return (double)b / (1 << 20);
}

/* CLOCK_MONOTONIC in ns. */
static inline uint64_t t_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* Scratch directories.                                                 */

static unsigned t_rm_failed; /* what t_rm_one() could not remove */

static inline int t_rm_one(const char *path, const struct stat *sb,
			   int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	if (remove(path))
		t_rm_failed++; /* carry on past it */
	return 0;
}

/*
 * Remove @dir and everything below it (a test's scratch directory).
 * Returns 0, or -1 if anything could not be removed.
 */
static inline int t_rmtree(const char *dir)
{
	t_rm_failed = 0;
	if (nftw(dir, t_rm_one, 16, FTW_DEPTH | FTW_PHYS))
		return -1;
	return t_rm_failed ? -1 : 0;
}

/**
 * struct t_dir - A scratch directory and the dump a writer makes in it.
 * @path: /tmp/jitring-<what>-XXXXXX (t_dir_make()).
 * @dump: @path/jit-<pid>.dump, <pid> the process that made @path.
 */
struct t_dir {
	char path[64];
	char dump[128];
};

/*
 * Directories made and not removed yet, with the process that made them.
 * At its exit (a T_REQUIRE that ended the run early, say) they are kept
 * if anything failed, and said so, else removed; a fork child leaves its
 * parent's alone.
 */
static struct {
	char path[64];
	pid_t owner;
} t_live_dirs[16];

static inline void t_live_dirs_exit(void)
{
	for (size_t i = 0; i < sizeof(t_live_dirs) / sizeof(t_live_dirs[0]);
	     i++) {
		if (!t_live_dirs[i].path[0] || t_live_dirs[i].owner != getpid())
			continue;
		if (t_failed)
			fprintf(stderr, "kept %s\n", t_live_dirs[i].path);
		else
			t_rmtree(t_live_dirs[i].path);
	}
}

/* A fresh directory /tmp/jitring-@what-XXXXXX. */
static inline void t_dir_make(struct t_dir *d, const char *what)
{
	static bool registered;
	size_t i;

	if (!registered)
		registered = atexit(t_live_dirs_exit) == 0;
	snprintf(d->path, sizeof(d->path), "/tmp/jitring-%s-XXXXXX", what);
	T_REQUIRE(mkdtemp(d->path) != NULL);
	snprintf(d->dump, sizeof(d->dump), "%s/jit-%d.dump", d->path,
		 (int)getpid());
	for (i = 0; i < sizeof(t_live_dirs) / sizeof(t_live_dirs[0]); i++) {
		if (!t_live_dirs[i].path[0]) {
			memcpy(t_live_dirs[i].path, d->path, sizeof(d->path));
			t_live_dirs[i].owner = getpid();
			break;
		}
	}
}

/* Entries in @d (what the writer left there). */
static inline unsigned t_dir_count(const struct t_dir *d)
{
	DIR *dir = opendir(d->path);
	struct dirent *de;
	unsigned n = 0;

	T_REQUIRE(dir != NULL);
	while ((de = readdir(dir)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(dir);
	return n;
}

/* Remove @d and all in it; checks that nothing was left. */
static inline void t_dir_remove(const struct t_dir *d)
{
	for (size_t i = 0; i < sizeof(t_live_dirs) / sizeof(t_live_dirs[0]);
	     i++)
		if (!strcmp(t_live_dirs[i].path, d->path))
			t_live_dirs[i].path[0] = '\0';
	T_CHECK_EQ(t_rmtree(d->path), 0);
}

/* ------------------------------------------------------------------ */
/* Whole files.                                                         */

/*
 * The bytes of the regular file @path and their number in *@len, with a
 * NUL after them (not counted); NULL if it cannot be opened or is not a
 * regular file.  O_NONBLOCK: a FIFO planted there cannot hang the test.
 */
static inline unsigned char *t_slurp(const char *path, size_t *len)
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

/* ------------------------------------------------------------------ */
/* Waiting for another thread.                                          */

/*
 * Wait on @cond under @lock (pointers to a pthread mutex and condition)
 * until @expr holds or @sec seconds passed; the value of @expr then.  A
 * statement expression: @expr is evaluated under @lock.
 */
#define T_COND_WAIT(lock, cond, expr, sec)                                  \
	({                                                                  \
		struct timespec t_ts_;                                      \
		bool t_ok_ = true;                                          \
		clock_gettime(CLOCK_REALTIME, &t_ts_);                      \
		t_ts_.tv_sec += (sec);                                      \
		pthread_mutex_lock(lock);                                   \
		while (!(expr) && t_ok_)                                    \
			t_ok_ = pthread_cond_timedwait(cond, lock,          \
						       &t_ts_) == 0;        \
		t_ok_ = (expr);                                             \
		pthread_mutex_unlock(lock);                                 \
		t_ok_;                                                      \
	})

/* Sleep @ns whole, across signals. */
static inline void t_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull),
			       (long)(ns % 1000000000ull) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static inline void t_sleep_ms(unsigned ms)
{
	t_sleep_ns((uint64_t)ms * 1000000ull);
}

/* qsort() order of uint64_t values. */
static inline int t_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Wait for @pred, checked each millisecond, at most @ms milliseconds (a
 * bounded wait for a condition, not a sleep standing in for one); the
 * value of @pred then.
 */
#define T_POLL_UNTIL(pred, ms)                                              \
	({                                                                  \
		unsigned t_w_ = 0;                                          \
		while (!(pred) && t_w_ < (ms)) {                            \
			t_sleep_ms(1);                                      \
			t_w_++;                                             \
		}                                                           \
		(bool)(pred);                                               \
	})

/* The value of @expr read under @lock. */
#define T_LOCKED(lock, expr)                                                \
	({                                                                  \
		__typeof__(expr) t_v_;                                      \
		pthread_mutex_lock(lock);                                   \
		t_v_ = (expr);                                              \
		pthread_mutex_unlock(lock);                                 \
		t_v_;                                                       \
	})

/* Run @stmt under @lock, then wake every waiter on @cond. */
#define T_COND_SET(lock, cond, stmt)                                        \
	do {                                                                \
		pthread_mutex_lock(lock);                                   \
		stmt;                                                       \
		pthread_cond_broadcast(cond);                               \
		pthread_mutex_unlock(lock);                                 \
	} while (0)

/*
 * A thread parked in a testpoint hook: *@parked is true (and @cond
 * broadcast) while it waits for *@go, under @lock.
 */
static inline void t_cond_park(pthread_mutex_t *lock, pthread_cond_t *cond,
			       bool *parked, const bool *go)
{
	pthread_mutex_lock(lock);
	*parked = true;
	pthread_cond_broadcast(cond);
	while (!*go)
		pthread_cond_wait(cond, lock);
	*parked = false;
	pthread_mutex_unlock(lock);
}

/* ------------------------------------------------------------------ */
/* Fields of dumps and .eh_frame data: host order, any alignment.      */

static inline uint32_t t_rd32(const void *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline int32_t t_rds32(const void *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline uint64_t t_rd64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void t_wr32(void *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

/* ------------------------------------------------------------------ */
/* Test entries.                                                        */

/*
 * .eh_frame for @code_size bytes of code into @buf (@size bytes): the
 * host preset, or only its entry rules for code too short for the rest
 * (the x86_64 trampoline has rules at offset 7).  Returns its size, or
 * what jitring_eh_frame_build() returned (a negative errno).
 */
static inline int t_eh_frame(uint64_t code_size, unsigned char *buf,
			     size_t size)
{
	const struct jitring_cfi *host =
		jitring_cfi_preset(JITRING_CFI_HOST_FP_TRAMPOLINE);
	struct jitring_cfi entry_only;
	int n;

	if (!host)
		return -EINVAL;
	n = jitring_eh_frame_build(host, code_size, buf, size);
	if (n == -EINVAL) {
		entry_only = *host;
		entry_only.nr_ops = entry_only.nr_init;
		n = jitring_eh_frame_build(&entry_only, code_size, buf, size);
	}
	return n;
}

/* ------------------------------------------------------------------ */
/* Dumps, read back with the independent reader (src/reader/reader.h). */

/**
 * struct t_load - A CODE_LOAD as the reader saw it.
 * @name: its name (cut at 63 bytes).
 * @index: its code_index.
 * @ts: its timestamp.
 * @tid: its thread.
 * @code_size: its code size.
 * @code: its first 64 code bytes.
 */
struct t_load {
	char name[64];
	uint64_t index;
	uint64_t ts;
	uint32_t tid;
	uint64_t code_size;
	uint8_t code[64];
};

/**
 * struct t_dump - A dump file read by t_dump_read().
 * @buf: the file's bytes.
 * @len: their number.
 * @check: jitring_check(JITRING_CHECK_SORTED) of them.
 * @res: what it found.
 * @loads: the CODE_LOADs, in file order.
 * @nloads: their number.
 * @moves: the CODE_MOVEs.
 */
struct t_dump {
	unsigned char *buf;
	size_t len;
	int check;
	struct jitring_check_result res;
	struct t_load *loads;
	size_t nloads;
	size_t moves;
};

/*
 * Read the dump at @path (it must be there), check it (a failed check is
 * printed; it is @d->check the caller checks) and list its CODE_LOADs.
 * t_dump_free() lets go of it.
 */
static inline void t_dump_read(struct t_dump *d, const char *path)
{
	struct jitring_reader rd;
	struct jitring_rd_record rec;
	size_t cap = 0;

	memset(d, 0, sizeof(*d));
	d->buf = t_slurp(path, &d->len);
	T_REQUIRE(d->buf != NULL);
	d->check = jitring_check(d->buf, d->len, JITRING_CHECK_SORTED,
				 &d->res);
	if (d->check)
		fprintf(stderr, "%s: jitring_check: %s at %llu: %s\n", path,
			d->res.rule ? d->res.rule : "?",
			(unsigned long long)d->res.off, d->res.detail);
	if (jitring_reader_init(&rd, d->buf, d->len, 0, NULL))
		return;
	while (jitring_reader_next(&rd, &rec) == 1) {
		struct t_load *l;

		if (rec.id == JITRING_RD_CODE_MOVE)
			d->moves++;
		if (rec.id != JITRING_RD_CODE_LOAD)
			continue;
		if (d->nloads == cap) {
			cap = cap ? 2 * cap : 256;
			d->loads = realloc(d->loads, cap * sizeof(*d->loads));
			T_REQUIRE(d->loads != NULL);
		}
		l = &d->loads[d->nloads++];
		memset(l, 0, sizeof(*l));
		snprintf(l->name, sizeof(l->name), "%s", rec.name);
		l->index = rec.code_index;
		l->ts = rec.ts;
		l->tid = rec.tid;
		l->code_size = rec.code_size;
		memcpy(l->code, rec.code,
		       rec.code_size < sizeof(l->code) ? rec.code_size :
							 sizeof(l->code));
	}
}

static inline void t_dump_free(struct t_dump *d)
{
	free(d->buf);
	free(d->loads);
	memset(d, 0, sizeof(*d));
}

/* The first CODE_LOAD named @name, or NULL. */
static inline const struct t_load *t_dump_find(const struct t_dump *d,
					       const char *name)
{
	for (size_t i = 0; i < d->nloads; i++)
		if (!strcmp(d->loads[i].name, name))
			return &d->loads[i];
	return NULL;
}

/* CODE_LOADs whose name starts with @prefix. */
static inline size_t t_dump_count(const struct t_dump *d, const char *prefix)
{
	size_t n = 0;

	for (size_t i = 0; i < d->nloads; i++)
		n += !strncmp(d->loads[i].name, prefix, strlen(prefix));
	return n;
}

/*
 * CODE_LOADs named "<@prefix>..." in the dump at @path, which must pass
 * jitring_check(JITRING_CHECK_SORTED) (a failure is printed); -1 if it is
 * missing or does not.  *@closes, if set, gets its CLOSE records.
 */
static inline long t_dump_loads(const char *path, const char *prefix,
				uint64_t *closes)
{
	struct jitring_check_result res;
	struct jitring_rd_record rec;
	struct jitring_reader rd;
	size_t len;
	unsigned char *buf = t_slurp(path, &len);
	long n = 0;

	if (!buf)
		return -1;
	if (jitring_check(buf, len, JITRING_CHECK_SORTED, &res)) {
		fprintf(stderr, "%s: jitring_check: %s at %llu: %s\n", path,
			res.rule ? res.rule : "?", (unsigned long long)res.off,
			res.detail);
		free(buf);
		return -1;
	}
	if (closes)
		*closes = res.count[JITRING_RD_CODE_CLOSE];
	T_REQUIRE(jitring_reader_init(&rd, buf, len, 0, NULL) == 0);
	while (jitring_reader_next(&rd, &rec) == 1)
		if (rec.id == JITRING_RD_CODE_LOAD &&
		    !strncmp(rec.name, prefix, strlen(prefix)))
			n++;
	free(buf);
	return n;
}

#endif /* JITRING_TESTS_HARNESS_H */
