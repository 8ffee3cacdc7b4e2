/* SPDX-License-Identifier: MIT */
/*
 * The public API end to end, for both engines (every test runs once with
 * JITRING_ENGINE_RINGS and once with JITRING_ENGINE_MUTEX), each in its own
 * mkdtemp() directory under /tmp that is removed afterwards.  Dump files are
 * read back with the independent reader (src/reader/reader.c):
 * jitring_check() with JITRING_CHECK_SORTED, plus record-by-record
 * iteration compared with what the test wrote.
 *
 *  1. open: argument and config errors, $JITRING_DIR, missing directory,
 *     a file as directory, a planted symlink, a second open, an open after
 *     close (continues the dump), a stale dump;
 *     the header and the r-xp marker mapping in /proc/self/maps;
 *  2. write/flush: entries of every shape (including ones larger than half
 *     a ring), inputs scribbled over after each call, incremental flushes,
 *     timestamps taken inside the call, and the counters;
 *  3. bad input to write and move: each errno, counted, nothing written;
 *     jitring_move() round trip; moves of never-issued indices;
 *  4. close: CLOSE record with JITRING_F_WRITE_CLOSE only, -ESHUTDOWN and
 *     -EBADF afterwards, stats after close, marker unmapped;
 *  5. jitring_thread_detach();
 *  6. 8 threads x 500 writes: all present once, per-thread order kept;
 *  7. version, config init, stats struct_size rules, eh_frame_build errors.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "reader/reader.h"

#define ALIGN_UP(x, a) (((uint64_t)(x) + ((a) - 1)) / (a) * (a))
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t my_tid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

static uint32_t host_mach(void)
{
#if defined(__x86_64__)
	return EM_X86_64;
#elif defined(__aarch64__)
	return EM_AARCH64;
#else
	return 0; /* not checked */
#endif
}

/* ------------------------------------------------------------------ */
/* Directories and files.                                              */

static long long file_size(const char *path)
{
	struct stat st;

	if (lstat(path, &st))
		return -1;
	return (long long)st.st_size;
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	T_REQUIRE(fd >= 0);
	T_REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

/* Mappings of @path in /proc/self/maps; @perms gets the first's perms. */
static int maps_of(const char *path, char perms[8])
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int n = 0;

	T_REQUIRE(f != NULL);
	perms[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		char p[8];
		int at = 0;
		size_t l;

		if (sscanf(line, "%*s %7s %*s %*s %*s %n", p, &at) != 1 || !at)
			continue;
		l = strlen(line + at);
		if (l && line[at + l - 1] == '\n')
			line[at + --l] = '\0';
		if (strcmp(line + at, path))
			continue;
		if (!n++)
			memcpy(perms, p, sizeof(p));
	}
	fclose(f);
	return n;
}

/* ------------------------------------------------------------------ */
/* Writers and entries.                                                */

#define NLINES 3

/* An entry whose every buffer is its own heap allocation. */
struct went {
	struct jitring_entry e;
	char *name;
	unsigned char *code;  /* at code_addr */
	unsigned char *bytes; /* code_bytes, or NULL */
	unsigned char *eh;
	struct jitring_line *lines;
	char *files[NLINES];
};

static void went_make(struct went *w, const char *name, uint64_t code_size,
		      bool unw, bool dbg, bool patched, unsigned seed)
{
	memset(w, 0, sizeof(*w));
	w->name = strdup(name);
	w->code = malloc(code_size);
	T_REQUIRE(w->name && w->code);
	for (uint64_t i = 0; i < code_size; i++)
		w->code[i] = (unsigned char)(i * 131 + seed * 7 + 1);
	w->e.name = w->name;
	w->e.code_addr = w->code;
	w->e.code_size = code_size;
	if (patched) {
		w->bytes = malloc(code_size);
		T_REQUIRE(w->bytes);
		for (uint64_t i = 0; i < code_size; i++)
			w->bytes[i] = (unsigned char)~w->code[i];
		w->e.code_bytes = w->bytes;
	}
	if (unw) {
		int n;

		w->eh = malloc(JITRING_EH_FRAME_MAX);
		T_REQUIRE(w->eh);
		n = t_eh_frame(code_size, w->eh, JITRING_EH_FRAME_MAX);
		T_REQUIRE(n > 0);
		w->e.eh_frame = w->eh;
		w->e.eh_frame_size = (uint32_t)n;
	}
	if (dbg) {
		w->lines = calloc(NLINES, sizeof(*w->lines));
		T_REQUIRE(w->lines);
		for (unsigned i = 0; i < NLINES; i++) {
			char f[32];

			snprintf(f, sizeof(f), "src%u/file%u.js", seed, i);
			w->files[i] = strdup(f);
			T_REQUIRE(w->files[i]);
			w->lines[i].addr = (uint64_t)(uintptr_t)w->code +
					   code_size * i / NLINES;
			w->lines[i].line = (int32_t)(seed * 10 + i);
			w->lines[i].discrim = (int32_t)i;
			w->lines[i].file = w->files[i];
		}
		w->e.lines = w->lines;
		w->e.nr_lines = NLINES;
	}
}

/*
 * A deep copy to compare the file with: same addresses, own copies of the
 * bytes (code_bytes holds what the dump must contain).
 */
static void went_snapshot(struct went *d, const struct went *s)
{
	const unsigned char *src = s->bytes ? s->bytes : s->code;

	memset(d, 0, sizeof(*d));
	d->e = s->e;
	d->name = strdup(s->name);
	d->bytes = malloc(s->e.code_size);
	T_REQUIRE(d->name && d->bytes);
	memcpy(d->bytes, src, s->e.code_size);
	d->e.name = d->name;
	d->e.code_bytes = d->bytes;
	if (s->eh) {
		d->eh = malloc(JITRING_EH_FRAME_MAX);
		T_REQUIRE(d->eh);
		memcpy(d->eh, s->eh, s->e.eh_frame_size);
		d->e.eh_frame = d->eh;
	}
	if (s->lines) {
		d->lines = calloc(NLINES, sizeof(*d->lines));
		T_REQUIRE(d->lines);
		for (unsigned i = 0; i < NLINES; i++) {
			d->files[i] = strdup(s->files[i]);
			T_REQUIRE(d->files[i]);
			d->lines[i] = s->lines[i];
			d->lines[i].file = d->files[i];
		}
		d->e.lines = d->lines;
	}
}

/* The library copied everything before returning: overwrite it all. */
static void went_scribble(struct went *w)
{
	memset(w->name, 'Z', strlen(w->name));
	memset(w->code, 0xee, w->e.code_size);
	if (w->bytes)
		memset(w->bytes, 0xdd, w->e.code_size);
	if (w->eh)
		memset(w->eh, 0xcc, w->e.eh_frame_size);
	for (unsigned i = 0; w->lines && i < NLINES; i++) {
		memset(w->files[i], 'Q', strlen(w->files[i]));
		w->lines[i].addr = ~0ull;
		w->lines[i].line = -7;
	}
}

static void went_free(struct went *w)
{
	free(w->name);
	free(w->code);
	free(w->bytes);
	free(w->eh);
	free(w->lines);
	for (unsigned i = 0; i < NLINES; i++)
		free(w->files[i]);
}

/* ------------------------------------------------------------------ */
/* Reading dumps back.                                                 */

/* The dump at @path must check out (t_dump_free() it). */
static void dump_read(struct t_dump *d, const char *path)
{
	t_dump_read(d, path);
	T_CHECK_EQ(d->check, 0);
	/* Both engines close every line table at the end of its code. */
	T_CHECK_EQ(d->res.lines_uncovered, 0);
}

static void check_header(const struct jitring_rd_header *h, uint32_t mach)
{
	T_CHECK_EQ(h->magic, 0x4A695444u);
	T_CHECK_EQ(h->version, 1);
	T_CHECK_EQ(h->total_size, 40);
	if (mach)
		T_CHECK_EQ(h->elf_mach, mach);
	T_CHECK_EQ(h->pad1, 0);
	T_CHECK_EQ(h->pid, (uint32_t)getpid());
	T_CHECK_EQ(h->flags, 0);
	T_CHECK(h->timestamp != 0);
}

/* What a group in the file must match. */
struct exp {
	const struct jitring_entry *e;
	int64_t index;
	uint32_t tid;
	uint64_t t0, t1; /* the clock around the write call */
};

static void check_unwind(const struct jitring_rd_record *rec,
			 const struct jitring_entry *e)
{
	const unsigned char *pay = rec->unwind, *hdr;
	uint32_t eh = e->eh_frame_size;
	uint32_t fde_off = 4 + t_rd32(e->eh_frame); /* after the CIE */
	uint32_t pcb = fde_off + 8;
	uint64_t code = (uint64_t)(uintptr_t)e->code_addr;
	uint64_t eh_rt = code + ALIGN_UP(e->code_size, 8);
	uint64_t hdr_rt = eh_rt + eh;

	T_CHECK_EQ(rec->unwinding_size, eh + 20);
	T_CHECK_EQ(rec->eh_frame_hdr_size, 20);
	T_CHECK_EQ(rec->mapped_size, ALIGN_UP(eh + 20, 16));
	T_CHECK_EQ(rec->size % 8, 0);
	T_CHECK(memcmp(pay, e->eh_frame, pcb) == 0);
	T_CHECK(memcmp(pay + pcb + 4, (const unsigned char *)e->eh_frame +
			       pcb + 4, eh - pcb - 4) == 0);
	T_CHECK_EQ(eh_rt + pcb + (uint64_t)(int64_t)t_rds32(pay + pcb), code);
	hdr = pay + eh;
	T_CHECK_EQ(hdr[0], 1);
	T_CHECK_EQ(hdr[1], 0x1b);
	T_CHECK_EQ(hdr[2], 0x03);
	T_CHECK_EQ(hdr[3], 0x3b);
	T_CHECK_EQ(hdr_rt + 4 + (uint64_t)(int64_t)t_rds32(hdr + 4), eh_rt);
	T_CHECK_EQ(t_rd32(hdr + 8), 1);
	T_CHECK_EQ(hdr_rt + (uint64_t)(int64_t)t_rds32(hdr + 12), code);
	T_CHECK_EQ(hdr_rt + (uint64_t)(int64_t)t_rds32(hdr + 16),
		   eh_rt + fde_off);
	for (uint32_t i = 40 + eh + 20; i < rec->size; i++)
		T_CHECK_EQ(rec->raw[i], 0);
}

/*
 * The caller's rows, then (both engines) a closing row at the code's end
 * repeating the last one, when the last row starts inside the code.
 */
static void check_debug(const struct jitring_rd_record *rec,
			const struct jitring_entry *e)
{
	uint64_t end = (uint64_t)(uintptr_t)e->code_addr + e->code_size;
	uint32_t rows = e->nr_lines + (e->lines[e->nr_lines - 1].addr < end);
	struct jitring_rd_line ln;
	size_t cursor = 0;
	uint32_t n = 0;

	T_CHECK_EQ(rec->code_addr, (uint64_t)(uintptr_t)e->code_addr);
	T_CHECK_EQ(rec->nr_entry, rows);
	while (jitring_reader_line(rec, &cursor, &ln) == 1) {
		const struct jitring_line *l =
			&e->lines[n < e->nr_lines ? n : e->nr_lines - 1];

		T_REQUIRE(n < rows);
		T_CHECK_EQ(ln.addr, n < e->nr_lines ? l->addr : end);
		T_CHECK_EQ(ln.line, l->line);
		T_CHECK_EQ(ln.discrim, l->discrim);
		T_CHECK(strcmp(ln.file, l->file) == 0);
		n++;
	}
	T_CHECK_EQ(n, rows);
}

static void check_load(const struct jitring_rd_record *rec,
		       const struct exp *x)
{
	const struct jitring_entry *e = x->e;
	const void *bytes = e->code_bytes ? e->code_bytes : e->code_addr;

	T_CHECK_EQ(rec->pid, (uint32_t)getpid());
	T_CHECK_EQ(rec->tid, x->tid);
	T_CHECK_EQ(rec->vma, (uint64_t)(uintptr_t)e->code_addr);
	T_CHECK_EQ(rec->code_addr, (uint64_t)(uintptr_t)e->code_addr);
	T_CHECK_EQ(rec->code_size, e->code_size);
	T_CHECK(x->index > 0);
	T_CHECK_EQ(rec->code_index, x->index);
	T_CHECK(strcmp(rec->name, e->name) == 0);
	T_CHECK(memcmp(rec->code, bytes, e->code_size) == 0);
}

static void check_ts(const struct jitring_rd_record *rec, const struct exp *x)
{
	if (!x->t0)
		return;
	/* CLOCK_MONOTONIC read inside the call. */
	T_CHECK(rec->ts >= x->t0);
	T_CHECK(rec->ts <= x->t1);
}

/* Read the group of @x from @r. */
static void check_group(struct jitring_reader *r, const struct exp *x)
{
	struct jitring_rd_record rec;
	const struct jitring_entry *e = x->e;

	if (e->eh_frame_size) {
		T_REQUIRE(jitring_reader_next(r, &rec) == 1);
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_UNWINDING_INFO);
		check_ts(&rec, x);
		if (rec.id == JITRING_RD_CODE_UNWINDING_INFO)
			check_unwind(&rec, e);
	}
	if (e->nr_lines) {
		T_REQUIRE(jitring_reader_next(r, &rec) == 1);
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_DEBUG_INFO);
		check_ts(&rec, x);
		if (rec.id == JITRING_RD_CODE_DEBUG_INFO)
			check_debug(&rec, e);
	}
	T_REQUIRE(jitring_reader_next(r, &rec) == 1);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_LOAD);
	check_ts(&rec, x);
	if (rec.id == JITRING_RD_CODE_LOAD)
		check_load(&rec, x);
}

/*
 * The file holds exactly the groups @x[0..n) in order, then a CLOSE if
 * @want_close, and nothing else.  Returns the file size.
 */
static size_t check_file(const char *path, const struct exp *x, size_t n,
			 bool want_close)
{
	struct t_dump d;
	struct jitring_reader r;
	struct jitring_rd_record rec;
	struct jitring_rd_header h;
	size_t len;

	dump_read(&d, path);
	T_CHECK_EQ(d.res.count[JITRING_RD_CODE_LOAD], n);
	T_CHECK_EQ(d.res.count[JITRING_RD_CODE_MOVE], 0);
	T_CHECK_EQ(d.res.count[JITRING_RD_CODE_CLOSE], want_close);
	T_CHECK_EQ(d.res.zero_tail, 0);
	T_REQUIRE(jitring_reader_init(&r, d.buf, d.len, 0, &h) == 0);
	check_header(&h, host_mach());
	for (size_t i = 0; i < n; i++)
		check_group(&r, &x[i]);
	if (want_close) {
		T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_CLOSE);
	}
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
	len = d.len;
	t_dump_free(&d);
	return len;
}

/* Write @w, snapshot it into @snap and fill @x; scribble over @w. */
static void write_one(struct jitring *jr, struct went *w, struct went *snap,
		      struct exp *x)
{
	went_snapshot(snap, w);
	x->e = &snap->e;
	x->tid = my_tid();
	x->t0 = now_ns();
	x->index = jitring_write(jr, &w->e);
	x->t1 = now_ns();
	T_CHECK(x->index > 0);
	went_scribble(w);
}

/* ------------------------------------------------------------------ */
/* 1. open                                                              */

static void test_open_errors(uint32_t engine)
{
	struct t_dir d;
	struct jitring_config c;
	struct jitring *jr, *const sentinel = (struct jitring *)&d;
	static const uint32_t bad_rings[] = {
		1, 2048, 4095, 4097, 6000, 3u << 12, 128u << 20, 1u << 31,
	};

	t_dir_make(&d, "api");
	jitring_config_init(&c);
	c.engine = engine;
	c.dir = d.path;

	T_CHECK_EQ(jitring_open(&c, NULL), -EINVAL);

#define OPEN_EINVAL(stmt)                                                   \
	do {                                                                \
		struct jitring_config b_ = c;                               \
		(void)b_;                                                   \
		stmt;                                                       \
		jr = sentinel;                                              \
		T_CHECK_EQ(jitring_open(&b_, &jr), -EINVAL);                \
		T_CHECK(jr == sentinel);                                    \
	} while (0)
	OPEN_EINVAL(b_.struct_size = JITRING_CONFIG_SIZE_V1 - 1);
	OPEN_EINVAL(b_.struct_size = 4);
	OPEN_EINVAL(b_.struct_size = 0);
	OPEN_EINVAL(b_.engine = 3);
	OPEN_EINVAL(b_.engine = 0xffffffffu);
	OPEN_EINVAL(b_.flags = JITRING_F_ALL + 1); /* the first unknown bit */
	OPEN_EINVAL(b_.flags = JITRING_F_WRITE_CLOSE | (1u << 31));
	OPEN_EINVAL(b_.reserved = 1);
	for (size_t i = 0; i < ARRAY_SIZE(bad_rings); i++)
		OPEN_EINVAL(b_.ring_size = bad_rings[i]);
#undef OPEN_EINVAL
	/* None of that created anything. */
	T_CHECK_EQ(t_dir_count(&d), 0);

	/* Smallest and largest ring sizes are accepted. */
	c.ring_size = 4096;
	T_CHECK_EQ(jitring_open(&c, &jr), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);
	t_dir_make(&d, "api");
	c.dir = d.path;
	c.ring_size = 64u << 20;
	c.mem_budget = 64u << 20;
	T_CHECK_EQ(jitring_open(&c, &jr), 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

static void test_open_paths(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr, *jr2;
	struct jitring *const sentinel = (struct jitring *)&d;
	char p[256];
	size_t len;
	unsigned char *buf;
	struct stat st;

	/* Missing directory. */
	t_dir_make(&d, "api");
	snprintf(p, sizeof(p), "%s/missing", d.path);
	jr = sentinel;
	T_CHECK_EQ(t_open(engine, p, 0, &jr), -ENOENT);
	T_CHECK(jr == sentinel);

	/* A path that does not fit PATH_MAX. */
	{
		char *longdir = malloc(PATH_MAX + 16);

		T_REQUIRE(longdir);
		memset(longdir, 'a', PATH_MAX + 15);
		longdir[0] = '/';
		longdir[PATH_MAX + 15] = '\0';
		T_CHECK_EQ(t_open(engine, longdir, 0, &jr), -ENAMETOOLONG);
		longdir[PATH_MAX - 8] = '\0'; /* fits, but not with the name */
		T_CHECK_EQ(t_open(engine, longdir, 0, &jr), -ENAMETOOLONG);
		T_CHECK(jr == sentinel);
		free(longdir);
	}

	/* A regular file where the directory should be. */
	snprintf(p, sizeof(p), "%s/file", d.path);
	write_file(p, "not a directory\n");
	T_CHECK_EQ(t_open(engine, p, 0, &jr), -ENOTDIR);
	T_CHECK(jr == sentinel);
	T_CHECK_EQ(t_dir_count(&d), 1);
	t_dir_remove(&d);

	/* A planted symlink to a victim: refused, victim untouched. */
	t_dir_make(&d, "api");
	snprintf(p, sizeof(p), "%s/victim", d.path);
	write_file(p, "precious data\n");
	T_REQUIRE(symlink(p, d.dump) == 0);
	T_CHECK_EQ(t_open(engine, d.path, 0, &jr), -EEXIST);
	T_CHECK(jr == sentinel);
	buf = t_slurp(p, &len);
	T_REQUIRE(buf != NULL);
	T_CHECK(len == 14 && memcmp(buf, "precious data\n", 14) == 0);
	free(buf);
	T_CHECK(lstat(d.dump, &st) == 0 && S_ISLNK(st.st_mode));
	t_dir_remove(&d);

	/* A dangling symlink: nothing is created at its target. */
	t_dir_make(&d, "api");
	snprintf(p, sizeof(p), "%s/target", d.path);
	T_REQUIRE(symlink(p, d.dump) == 0);
	T_CHECK_EQ(t_open(engine, d.path, 0, &jr), -EEXIST);
	T_CHECK_EQ(file_size(p), -1);
	t_dir_remove(&d);

	/* A second writer in the same directory while the first is open. */
	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);
	jr2 = sentinel;
	T_CHECK_EQ(t_open(engine, d.path, 0, &jr2), -EEXIST);
	T_CHECK(jr2 == sentinel);
	T_CHECK_EQ(t_open(engine == JITRING_ENGINE_RINGS ?
				   JITRING_ENGINE_MUTEX : JITRING_ENGINE_RINGS,
			   d.path, 0, &jr2), -EEXIST);
	{
		/* The first still works. */
		struct went w, s;
		struct exp x;

		went_make(&w, "still_works", 24, true, true, false, 1);
		write_one(jr, &w, &s, &x);
		T_CHECK_EQ(jitring_flush(jr), 0);
		check_file(d.dump, &x, 1, false);
		T_CHECK_EQ(jitring_close(jr), 0);
		/* The dump stays after close; a new writer of this process
		 * continues it (tests/unit/test_reopen.c has the rest). */
		len = (size_t)file_size(d.dump);
		T_CHECK_EQ(t_open(engine, d.path, 0, &jr2), 0);
		T_CHECK_EQ(file_size(d.dump), (long long)len);
		T_CHECK_EQ(jitring_close(jr2), 0);
		check_file(d.dump, &x, 1, false);
		went_free(&w);
		went_free(&s);
	}
	t_dir_remove(&d);

	/* A stale dump of ours (pid reuse) is replaced by a fresh one. */
	t_dir_make(&d, "api");
	write_file(d.dump, "stale junk from a process that had our pid, "
			   "long enough to be longer than a header\n");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);
	T_CHECK_EQ(file_size(d.dump), 40);
	check_file(d.dump, NULL, 0, false);
	{
		struct went w, s;
		struct exp x;

		went_make(&w, "after_stale", 8, false, false, false, 2);
		write_one(jr, &w, &s, &x);
		T_CHECK_EQ(jitring_flush(jr), 0);
		check_file(d.dump, &x, 1, false);
		went_free(&w);
		went_free(&s);
	}
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* The header, the mapping, $JITRING_DIR and elf_mach. */
static void test_open_ok(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct jitring_config c;
	struct jitring_stats st;
	struct t_dump du;
	char perms[8];
	uint64_t t0, t1;

	/* cfg.dir NULL: $JITRING_DIR. */
	t_dir_make(&d, "api");
	T_REQUIRE(setenv("JITRING_DIR", d.path, 1) == 0);
	t0 = now_ns();
	T_REQUIRE(t_open(engine, NULL, 0, &jr) == 0);
	t1 = now_ns();
	unsetenv("JITRING_DIR");
	T_CHECK_EQ(file_size(d.dump), 40);
	dump_read(&du, d.dump);
	check_header(&du.res.header, host_mach());
	T_CHECK(du.res.header.timestamp >= t0 && du.res.header.timestamp <= t1);
	T_CHECK_EQ(du.res.records, 0);
	t_dump_free(&du);
	/* perf finds the dump through an executable mapping of it. */
	T_CHECK_EQ(maps_of(d.dump, perms), 1);
	T_CHECK(strcmp(perms, "r-xp") == 0);
	st = t_stats(jr);
	T_CHECK_EQ(st.engine, engine);
	T_CHECK_EQ(st.entries_written, 0);
	T_CHECK_EQ(st.bytes_written, 40);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(maps_of(d.dump, perms), 0);
	T_CHECK_EQ(file_size(d.dump), 40);
	t_dir_remove(&d);

	/* A config from a newer caller (larger struct_size): zero bytes we
	 * do not know are its defaults; a non-zero one asks for a feature
	 * we lack (test_abi has the rest). */
	t_dir_make(&d, "api");
	{
		struct {
			struct jitring_config c;
			uint64_t future[4];
		} big;

		memset(&big, 0, sizeof(big));
		jitring_config_init(&big.c);
		big.c.struct_size = sizeof(big);
		big.c.engine = engine;
		big.c.dir = d.path;
		big.future[3] = 1;
		T_CHECK_EQ(jitring_open(&big.c, &jr), -E2BIG);
		T_CHECK_EQ(file_size(d.dump), -1);
		big.future[3] = 0;
		T_CHECK_EQ(jitring_open(&big.c, &jr), 0);
		T_CHECK_EQ(file_size(d.dump), 40);
		T_CHECK_EQ(jitring_close(jr), 0);
	}
	t_dir_remove(&d);

	/* A chosen elf_mach goes into the header. */
	t_dir_make(&d, "api");
	jitring_config_init(&c);
	c.engine = engine;
	c.dir = d.path;
	c.elf_mach = 183; /* EM_AARCH64, whatever the host */
	T_REQUIRE(jitring_open(&c, &jr) == 0);
	dump_read(&du, d.dump);
	T_CHECK_EQ(du.res.header.elf_mach, 183);
	t_dump_free(&du);
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* jitring_open(NULL, ...): the default engine in $JITRING_DIR. */
static void test_open_null_cfg(void)
{
	struct t_dir d;
	struct jitring *jr;
	struct jitring_config c = JITRING_CONFIG_INIT;
	struct t_dump du;
	char perms[8];

	t_dir_make(&d, "api");
	T_REQUIRE(setenv("JITRING_DIR", d.path, 1) == 0);
	T_REQUIRE(jitring_open(NULL, &jr) == 0);
	unsetenv("JITRING_DIR");
	T_CHECK_EQ(t_stats(jr).engine, JITRING_ENGINE_RINGS);
	dump_read(&du, d.dump);
	check_header(&du.res.header, host_mach());
	t_dump_free(&du);
	T_CHECK_EQ(maps_of(d.dump, perms), 1);
	T_CHECK(strcmp(perms, "r-xp") == 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);

	/* JITRING_CONFIG_INIT is a usable config. */
	t_dir_make(&d, "api");
	c.dir = d.path;
	T_REQUIRE(jitring_open(&c, &jr) == 0);
	T_CHECK_EQ(t_stats(jr).engine, JITRING_ENGINE_RINGS);
	T_CHECK_EQ(file_size(d.dump), 40);
	T_CHECK_EQ(jitring_close(jr), 0);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* ------------------------------------------------------------------ */
/* 2. write and flush                                                   */

#define NW 40

static void test_write_flush(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct jitring_stats st;
	struct went *w = calloc(NW, sizeof(*w)), *s = calloc(NW, sizeof(*s));
	struct exp x[NW];
	size_t size = 0;
	uint64_t records = 0, flushes = 0;

	T_REQUIRE(w && s);
	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);

	/* Nothing written yet. */
	T_CHECK_EQ(jitring_flush(jr), 0);
	flushes++;
	T_CHECK_EQ(file_size(d.dump), 40);

	for (unsigned i = 0; i < NW; i++) {
		static const uint64_t sizes[] = { 1, 7, 8, 9, 16, 100, 4096 };
		char name[64];
		uint64_t cs = sizes[i % ARRAY_SIZE(sizes)];

		/* Two entries larger than half a ring, one larger than it. */
		if (i == 13)
			cs = 40000;
		if (i == 27)
			cs = 70000;
		snprintf(name, sizeof(name), "jit_fn_%u_%llu", i,
			 (unsigned long long)cs);
		went_make(&w[i], name, cs, i % 4 == 1 || i % 4 == 3,
			  i % 4 >= 2, i % 3 == 0, i);
		write_one(jr, &w[i], &s[i], &x[i]);
		records += 1 + (x[i].e->eh_frame_size != 0) +
			   (x[i].e->nr_lines != 0);
		/* Flush and look at the file every 10 entries. */
		if (i % 10 == 9) {
			T_CHECK_EQ(jitring_flush(jr), 0);
			flushes++;
			size = check_file(d.dump, x, i + 1, false);
			st = t_stats(jr);
			T_CHECK_EQ(st.entries_written, i + 1);
			T_CHECK_EQ(st.records_written, records);
			T_CHECK_EQ(st.bytes_written, size);
			T_CHECK_EQ(st.flushes, flushes);
		}
	}
	/* code_index values unique. */
	for (unsigned i = 0; i < NW; i++)
		for (unsigned j = 0; j < i; j++)
			T_CHECK(x[i].index != x[j].index);

	st = t_stats(jr);
	T_CHECK_EQ(st.engine, engine);
	T_CHECK_EQ(st.entries_written, NW);
	T_CHECK_EQ(st.records_written, records);
	T_CHECK_EQ(st.bytes_written, size);
	T_CHECK_EQ(st.flushes, flushes);
	T_CHECK_EQ(st.refused_invalid, 0);
	T_CHECK_EQ(st.refused_nomem, 0);
	T_CHECK_EQ(st.refused_dropped, 0);
	T_CHECK_EQ(st.refused_shutdown, 0);
	T_CHECK_EQ(st.refused_io, 0);
	T_CHECK_EQ(st.lost_io, 0);
	T_CHECK_EQ(st.io_error, 0);
	T_CHECK(st.batches >= 1);
	if (engine == JITRING_ENGINE_RINGS) {
		T_CHECK_EQ(st.threads_attached, 1);
		T_CHECK_EQ(st.threads_total, 1);
	}

	/* A flush with nothing new changes nothing but the count. */
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(file_size(d.dump), (long long)size);
	T_CHECK_EQ(t_stats(jr).flushes, flushes + 1);

	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(check_file(d.dump, x, NW, false), size);
	for (unsigned i = 0; i < NW; i++) {
		went_free(&w[i]);
		went_free(&s[i]);
	}
	free(w);
	free(s);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* Close without a flush writes what is pending. */
static void test_close_pending(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct went w[5], s[5];
	struct exp x[5];

	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);
	for (unsigned i = 0; i < 5; i++) {
		char name[32];

		snprintf(name, sizeof(name), "pending_%u", i);
		went_make(&w[i], name, 32 + i, i & 1, i & 2, false, i);
		write_one(jr, &w[i], &s[i], &x[i]);
	}
	T_CHECK_EQ(jitring_close(jr), 0);
	check_file(d.dump, x, 5, false);
	T_CHECK_EQ(t_stats(jr).entries_written, 5);
	for (unsigned i = 0; i < 5; i++) {
		went_free(&w[i]);
		went_free(&s[i]);
	}
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* ------------------------------------------------------------------ */
/* 3. bad input                                                         */

static void test_bad_input(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct jitring_stats st0, st;
	struct went w, s, m;
	struct exp x;
	long long size0;
	unsigned refused = 0;
	char *longname, *nonul;
	unsigned char eh_bad[JITRING_EH_FRAME_MAX + 8];
	struct jitring_line lines[3];
	struct jitring_line *many;
	int other;

	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);
	went_make(&w, "good", 64, true, true, false, 3);
	went_make(&m, "model", 64, true, true, false, 4);
	write_one(jr, &w, &s, &x);
	T_CHECK_EQ(jitring_flush(jr), 0);
	size0 = file_size(d.dump);
	st0 = t_stats(jr);
	T_CHECK_EQ(st0.entries_written, 1);

	longname = malloc(JITRING_NAME_MAX + 2);
	nonul = malloc(JITRING_NAME_MAX + 1);
	many = calloc((size_t)JITRING_LINES_MAX + 1, sizeof(*many));
	T_REQUIRE(longname && nonul && many);
	memset(longname, 'l', JITRING_NAME_MAX + 1);
	longname[JITRING_NAME_MAX + 1] = '\0';
	memset(nonul, 'n', JITRING_NAME_MAX + 1);
	for (size_t i = 0; i <= JITRING_LINES_MAX; i++) {
		many[i].addr = (uint64_t)(uintptr_t)m.code;
		many[i].file = "f";
	}

	/* Each case starts from the valid model entry @m. */
#define BAD(want, stmt)                                                     \
	do {                                                                \
		struct jitring_entry e_ = m.e;                              \
		(void)e_;                                                   \
		memcpy(lines, m.lines, sizeof(lines));                      \
		e_.lines = lines;                                           \
		memcpy(eh_bad, m.eh, m.e.eh_frame_size);                    \
		stmt;                                                       \
		T_CHECK_EQ(jitring_write(jr, &e_), (want));                 \
		refused++;                                                  \
		T_CHECK_EQ(t_stats(jr).refused_invalid, refused);          \
	} while (0)

	T_CHECK_EQ(jitring_write(jr, NULL), -EINVAL);
	refused++;
	T_CHECK_EQ(t_stats(jr).refused_invalid, refused);
	BAD(-EINVAL, e_.name = NULL);
	BAD(-EINVAL, e_.name = "");
	BAD(-E2BIG, e_.name = longname);
	BAD(-E2BIG, e_.name = nonul);
	BAD(-EINVAL, e_.code_addr = NULL);
	BAD(-EINVAL, e_.code_size = 0);
	BAD(-E2BIG, (e_.code_size = (uint64_t)JITRING_CODE_MAX + 1,
		     e_.eh_frame = NULL, e_.eh_frame_size = 0));
	BAD(-E2BIG, (e_.code_size = UINT64_MAX, e_.eh_frame = NULL,
		     e_.eh_frame_size = 0));
	BAD(-EINVAL, e_.eh_frame = NULL);
	BAD(-EINVAL, e_.eh_frame_size = 0);
	BAD(-EINVAL, e_.eh_frame_size -= 2);
	BAD(-E2BIG, (e_.eh_frame = eh_bad,
		     e_.eh_frame_size = JITRING_EH_FRAME_MAX + 4));
	BAD(-EINVAL, (e_.eh_frame = eh_bad, eh_bad[8] = 7)); /* CIE version */
	BAD(-EINVAL, (e_.eh_frame = eh_bad, eh_bad[4] = 1)); /* CIE id */
	BAD(-EINVAL, e_.lines = NULL);
	BAD(-EINVAL, lines[1].file = NULL);
	BAD(-EINVAL, lines[2].addr = lines[1].addr - 1);
	BAD(-E2BIG, lines[0].file = longname);
	BAD(-E2BIG, lines[2].file = nonul);
	BAD(-E2BIG, (e_.lines = many, e_.nr_lines = JITRING_LINES_MAX + 1));
#undef BAD

	/* Refusals wrote nothing. */
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(file_size(d.dump), size0);
	st = t_stats(jr);
	T_CHECK_EQ(st.entries_written, 1);
	T_CHECK_EQ(st.bytes_written, (uint64_t)size0);
	T_CHECK_EQ(st.refused_invalid, refused);

	/* NULL writer: -EINVAL everywhere, nothing counted anywhere. */
	T_CHECK_EQ(jitring_write(NULL, &m.e), -EINVAL);
	T_CHECK_EQ(jitring_move(NULL, (uint64_t)x.index, m.code, NULL, 64),
		   -EINVAL);
	T_CHECK_EQ(jitring_flush(NULL), -EINVAL);
	T_CHECK_EQ(jitring_close(NULL), -EINVAL);
	memset(&st, 0x5a, sizeof(st));
	st.struct_size = sizeof(st);
	{
		struct jitring_stats copy = st;

		jitring_stats(NULL, &st);
		T_CHECK(memcmp(&copy, &st, sizeof(st)) == 0);
	}

	/* Moves: bad arguments and unknown indices. */
	T_CHECK_EQ(jitring_move(jr, (uint64_t)x.index, NULL, m.code, 64),
		   -EINVAL);
	refused++;
	T_CHECK_EQ(jitring_move(jr, (uint64_t)x.index, &other, m.code, 0),
		   -EINVAL);
	refused++;
	T_CHECK_EQ(jitring_move(jr, (uint64_t)x.index, &other, m.code,
				(uint64_t)JITRING_CODE_MAX + 1), -EINVAL);
	refused++;
	T_CHECK_EQ(jitring_move(jr, 0, &other, m.code, 64), -ENOENT);
	refused++;
	T_CHECK_EQ(jitring_move(jr, 1ull << 40, &other, m.code, 64), -ENOENT);
	refused++;
	/* The next index, not handed out yet (this thread, still attached). */
	T_CHECK_EQ(jitring_move(jr, (uint64_t)x.index + 1, &other, m.code, 64),
		   -ENOENT);
	refused++;
	T_CHECK_EQ(jitring_move(jr, UINT64_MAX, &other, m.code, 64), -ENOENT);
	refused++;
	/* Every refusal is counted (-ENOENT has no counter of its own). */
	T_CHECK_EQ(t_stats(jr).refused_invalid, refused);
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(file_size(d.dump), size0);

	/* A real move: CODE_MOVE after its LOAD. */
	{
		uint64_t t0 = now_ns(), t1;
		struct t_dump du;
		struct jitring_reader r;
		struct jitring_rd_record rec;

		T_CHECK_EQ(jitring_move(jr, (uint64_t)x.index, &other,
					x.e->code_addr, 64), 0);
		t1 = now_ns();
		T_CHECK_EQ(jitring_flush(jr), 0);
		dump_read(&du, d.dump);
		T_CHECK_EQ(du.res.count[JITRING_RD_CODE_MOVE], 1);
		T_CHECK_EQ(du.len, (size_t)size0 + 64);
		T_REQUIRE(jitring_reader_init(&r, du.buf, du.len, 0, NULL) ==
			  0);
		check_group(&r, &x);
		T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_MOVE);
		T_CHECK_EQ(rec.code_index, x.index);
		T_CHECK_EQ(rec.new_code_addr, (uint64_t)(uintptr_t)&other);
		T_CHECK_EQ(rec.old_code_addr,
			   (uint64_t)(uintptr_t)x.e->code_addr);
		T_CHECK_EQ(rec.code_size, 64);
		T_CHECK_EQ(rec.pid, (uint32_t)getpid());
		T_CHECK_EQ(rec.tid, my_tid());
		T_CHECK(rec.ts >= t0 && rec.ts <= t1);
		T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
		t_dump_free(&du);
		st = t_stats(jr);
		T_CHECK_EQ(st.entries_written, 2);
		T_CHECK_EQ(st.bytes_written, (uint64_t)size0 + 64);
		T_CHECK_EQ(st.refused_invalid, refused);
	}

	T_CHECK_EQ(jitring_close(jr), 0);
	free(longname);
	free(nonul);
	free(many);
	went_free(&w);
	went_free(&s);
	went_free(&m);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/*
 * jitring_move() of an index no jitring_write() returned: -ENOENT ("a
 * code_index this writer never handed out"), whichever thread asks.
 */
struct one_write {
	struct jitring *jr;
	const struct jitring_entry *e;
	int64_t index;
};

static void *write_once_thread(void *arg)
{
	struct one_write *o = arg;

	o->index = jitring_write(o->jr, o->e);
	return NULL;
}

static void test_move_unissued(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct went w;
	struct one_write o;
	pthread_t t;
	int64_t mine;
	int other;

	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);
	went_make(&w, "moved_fn", 16, false, false, false, 5);

	/* Another thread wrote exactly one entry and left. */
	o.jr = jr;
	o.e = &w.e;
	T_REQUIRE(pthread_create(&t, NULL, write_once_thread, &o) == 0);
	T_REQUIRE(pthread_join(t, NULL) == 0);
	T_REQUIRE(o.index > 0);
	T_CHECK_EQ(jitring_move(jr, (uint64_t)o.index + 1, &other, NULL, 16),
		   -ENOENT);

	/* This thread wrote one, detached, and asks about the next index. */
	mine = jitring_write(jr, &w.e);
	T_REQUIRE(mine > 0);
	jitring_thread_detach(jr);
	T_CHECK_EQ(jitring_move(jr, (uint64_t)mine + 1, &other, NULL, 16),
		   -ENOENT);

	/* Only moves of real indices may reach the file. */
	T_CHECK_EQ(jitring_move(jr, (uint64_t)o.index, &other, NULL, 16), 0);
	T_CHECK_EQ(jitring_flush(jr), 0);
	{
		struct t_dump du;

		dump_read(&du, d.dump);
		if (du.check == 0) {
			T_CHECK_EQ(du.res.count[JITRING_RD_CODE_LOAD], 2);
			T_CHECK_EQ(du.res.count[JITRING_RD_CODE_MOVE], 1);
		}
		t_dump_free(&du);
	}
	T_CHECK_EQ(jitring_close(jr), 0);
	went_free(&w);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* ------------------------------------------------------------------ */
/* 4. close                                                             */

static void test_close(uint32_t engine)
{
	for (unsigned with_close = 0; with_close < 2; with_close++) {
		struct t_dir d;
		struct jitring *jr;
		struct jitring_stats st;
		struct went w[3], s[3];
		struct exp x[3];
		struct t_dump du;
		char perms[8];
		long long size;
		int other;

		t_dir_make(&d, "api");
		T_REQUIRE(t_open(engine, d.path,
				 with_close ? JITRING_F_WRITE_CLOSE : 0,
				 &jr) == 0);
		T_CHECK_EQ(maps_of(d.dump, perms), 1);
		for (unsigned i = 0; i < 3; i++) {
			char name[32];

			snprintf(name, sizeof(name), "closing_%u", i);
			went_make(&w[i], name, 20, i == 1, i == 2, i == 0, i);
			write_one(jr, &w[i], &s[i], &x[i]);
		}
		T_CHECK_EQ(jitring_flush(jr), 0);
		T_CHECK_EQ(jitring_close(jr), 0);

		/* Never unlinked; CLOSE last only when asked for. */
		size = file_size(d.dump);
		T_CHECK(size > 40);
		check_file(d.dump, x, 3, with_close);
		dump_read(&du, d.dump);
		T_CHECK_EQ(du.res.count[JITRING_RD_CODE_CLOSE], with_close);
		t_dump_free(&du);
		T_CHECK_EQ(maps_of(d.dump, perms), 0);

		/* Everything after close is refused and counted. */
		went_free(&w[0]);
		went_make(&w[0], "too_late", 20, false, false, false, 9);
		T_CHECK_EQ(jitring_write(jr, &w[0].e), -ESHUTDOWN);
		T_CHECK_EQ(t_stats(jr).refused_shutdown, 1);
		T_CHECK_EQ(jitring_move(jr, (uint64_t)x[0].index, &other,
					NULL, 20), -ESHUTDOWN);
		T_CHECK_EQ(t_stats(jr).refused_shutdown, 2);
		T_CHECK_EQ(jitring_flush(jr), -ESHUTDOWN);
		/* "refused_shutdown: calls refused with -ESHUTDOWN". */
		T_CHECK_EQ(t_stats(jr).refused_shutdown, 3);
		T_CHECK_EQ(jitring_close(jr), -EBADF);
		T_CHECK_EQ(jitring_close(jr), -EBADF);
		T_CHECK_EQ(file_size(d.dump), size);

		/* Stats still work and describe the file. */
		st = t_stats(jr);
		T_CHECK_EQ(st.engine, engine);
		T_CHECK_EQ(st.refused_invalid, 0);
		T_CHECK_EQ(st.entries_written, 3);
		T_CHECK_EQ(st.records_written, 5 + with_close);
		T_CHECK_EQ(st.bytes_written, (uint64_t)size);
		T_CHECK_EQ(st.flushes, 1);
		if (engine == JITRING_ENGINE_RINGS)
			T_CHECK_EQ(st.threads_total, 1);

		for (unsigned i = 0; i < 3; i++) {
			went_free(&w[i]);
			went_free(&s[i]);
		}
		t_dir_remove(&d);
		jitring_thread_detach(NULL);
	}
}

/* A writer that never wrote: the CLOSE record alone follows the header. */
static void test_close_empty(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct jitring_stats st;

	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, JITRING_F_WRITE_CLOSE, &jr) == 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	check_file(d.dump, NULL, 0, true);
	T_CHECK_EQ(file_size(d.dump), 40 + 16);
	st = t_stats(jr);
	T_CHECK_EQ(st.entries_written, 0);
	T_CHECK_EQ(st.records_written, 1);
	T_CHECK_EQ(st.bytes_written, 40 + 16);
	t_dir_remove(&d);
}

/* ------------------------------------------------------------------ */
/* 5. thread detach                                                     */

struct detach_arg {
	struct jitring *jr;
	struct went w[6], s[6];
	struct exp x[6];
	int det[3];
};

static void *detach_thread(void *arg)
{
	struct detach_arg *a = arg;

	for (unsigned i = 0; i < 6; i++) {
		if (i == 3)
			a->det[0] = jitring_thread_detach(a->jr);
		write_one(a->jr, &a->w[i], &a->s[i], &a->x[i]);
	}
	a->det[1] = jitring_thread_detach(a->jr);
	a->det[2] = jitring_thread_detach(a->jr);
	return NULL;
}

static void *detach_null_thread(void *arg)
{
	*(int *)arg = jitring_thread_detach(NULL);
	return NULL;
}

static void test_detach(uint32_t engine)
{
	struct t_dir d;
	struct detach_arg *a = calloc(1, sizeof(*a));
	struct jitring_stats st;
	pthread_t t;
	int n = -1;
	/* The mutex engine has no rings to release. */
	int want = engine == JITRING_ENGINE_RINGS ? 1 : 0;

	T_REQUIRE(a);
	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &a->jr) == 0);
	for (unsigned i = 0; i < 6; i++) {
		char name[32];

		snprintf(name, sizeof(name), "detached_%u", i);
		went_make(&a->w[i], name, 12 + i, i == 4, i == 2, false, i);
	}
	T_REQUIRE(pthread_create(&t, NULL, detach_thread, a) == 0);
	T_REQUIRE(pthread_join(t, NULL) == 0);
	T_CHECK_EQ(a->det[0], want);
	T_CHECK_EQ(a->det[1], want);
	T_CHECK_EQ(a->det[2], 0);

	T_CHECK_EQ(jitring_flush(a->jr), 0);
	check_file(d.dump, a->x, 6, false);
	st = t_stats(a->jr);
	T_CHECK_EQ(st.entries_written, 6);
	if (engine == JITRING_ENGINE_RINGS) {
		T_CHECK_EQ(st.threads_total, 2);
		T_CHECK_EQ(st.threads_attached, 0);
	}

	/* A thread with nothing attached releases nothing. */
	T_REQUIRE(pthread_create(&t, NULL, detach_null_thread, &n) == 0);
	T_REQUIRE(pthread_join(t, NULL) == 0);
	T_CHECK_EQ(n, 0);
	n = -1;
	T_REQUIRE(pthread_create(&t, NULL, detach_null_thread, &n) == 0);
	T_REQUIRE(pthread_join(t, NULL) == 0);
	T_CHECK_EQ(n, 0);

	T_CHECK_EQ(jitring_close(a->jr), 0);
	for (unsigned i = 0; i < 6; i++) {
		went_free(&a->w[i]);
		went_free(&a->s[i]);
	}
	free(a);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* ------------------------------------------------------------------ */
/* 6. many threads                                                      */

#define NTHREADS 8
#define NPER 500
#define CODE_POOL 65536

static unsigned char code_pool[CODE_POOL];
static unsigned char pool_eh[JITRING_EH_FRAME_MAX];
static uint32_t pool_eh_size;

struct mt {
	struct jitring *jr;
	pthread_barrier_t *start;
	unsigned t;
	uint32_t tid;
	int64_t idx[NPER];
	int errors;
};

static void mt_entry(unsigned t, unsigned seq, char *name, size_t nsz,
		     struct jitring_entry *e, struct jitring_line *lines)
{
	size_t off = ((size_t)t * NPER + seq) * 16 % (CODE_POOL - 64);

	snprintf(name, nsz, "t%u-%u", t, seq);
	memset(e, 0, sizeof(*e));
	e->name = name;
	e->code_addr = code_pool + off;
	e->code_size = 16 + seq % 5;
	/* Every 7th entry is a full group, to catch interleaving. */
	if (seq % 7 == 0) {
		e->eh_frame = pool_eh;
		e->eh_frame_size = pool_eh_size;
		lines[0].addr = (uint64_t)(uintptr_t)e->code_addr;
		lines[0].line = (int32_t)seq;
		lines[0].file = name;
		lines[1] = lines[0];
		lines[1].addr += 4;
		e->lines = lines;
		e->nr_lines = 2;
	}
}

static void *mt_thread(void *arg)
{
	struct mt *m = arg;
	struct jitring_line lines[2];
	struct jitring_entry e;
	char name[32];

	m->tid = my_tid();
	pthread_barrier_wait(m->start);
	for (unsigned seq = 0; seq < NPER; seq++) {
		mt_entry(m->t, seq, name, sizeof(name), &e, lines);
		m->idx[seq] = jitring_write(m->jr, &e);
		if (m->idx[seq] <= 0)
			m->errors++;
	}
	return NULL;
}

static void test_threads(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct mt *m = calloc(NTHREADS, sizeof(*m));
	pthread_t th[NTHREADS];
	pthread_barrier_t start;
	struct t_dump du;
	struct jitring_reader r;
	struct jitring_rd_record rec, unw;
	struct jitring_stats st;
	int next[NTHREADS] = { 0 };
	unsigned loads = 0, pending = 0;
	bool have_unw = false;
	int n;

	T_REQUIRE(m);
	for (size_t i = 0; i < CODE_POOL; i++)
		code_pool[i] = (unsigned char)(i * 7 + i / 251);
	/* Built for 16 bytes; the library re-places it for each size. */
	n = t_eh_frame(16, pool_eh, sizeof(pool_eh));
	T_REQUIRE(n > 0);
	pool_eh_size = (uint32_t)n;

	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);
	T_REQUIRE(pthread_barrier_init(&start, NULL, NTHREADS) == 0);
	for (unsigned t = 0; t < NTHREADS; t++) {
		m[t].jr = jr;
		m[t].start = &start;
		m[t].t = t;
		T_REQUIRE(pthread_create(&th[t], NULL, mt_thread, &m[t]) == 0);
	}
	for (unsigned t = 0; t < NTHREADS; t++)
		T_REQUIRE(pthread_join(th[t], NULL) == 0);
	pthread_barrier_destroy(&start);
	T_CHECK_EQ(jitring_flush(jr), 0);

	for (unsigned t = 0; t < NTHREADS; t++)
		T_CHECK_EQ(m[t].errors, 0);
	dump_read(&du, d.dump);
	T_CHECK_EQ(du.res.count[JITRING_RD_CODE_LOAD], NTHREADS * NPER);
	T_CHECK_EQ(du.res.tids, NTHREADS);
	T_REQUIRE(jitring_reader_init(&r, du.buf, du.len, 0, NULL) == 0);
	while (jitring_reader_next(&r, &rec) == 1) {
		struct jitring_entry e;
		struct jitring_line lines[2];
		char name[32];
		unsigned t, seq;

		if (rec.id == JITRING_RD_CODE_UNWINDING_INFO) {
			unw = rec;
			have_unw = true;
			pending++;
			continue;
		}
		if (rec.id == JITRING_RD_CODE_DEBUG_INFO) {
			pending++;
			continue;
		}
		T_CHECK_EQ(rec.id, JITRING_RD_CODE_LOAD);
		if (rec.id != JITRING_RD_CODE_LOAD)
			continue;
		loads++;
		if (sscanf(rec.name, "t%u-%u", &t, &seq) != 2 ||
		    t >= NTHREADS || seq >= NPER) {
			T_CHECK(!"unexpected name");
			continue;
		}
		/* Each once, in the thread's order, with its index. */
		T_CHECK_EQ(seq, next[t]);
		next[t] = (int)seq + 1;
		T_CHECK_EQ(rec.code_index, m[t].idx[seq]);
		T_CHECK_EQ(rec.tid, m[t].tid);
		/* The group is the one the entry described. */
		mt_entry(t, seq, name, sizeof(name), &e, lines);
		T_CHECK_EQ(rec.code_addr, (uint64_t)(uintptr_t)e.code_addr);
		T_CHECK_EQ(rec.code_size, e.code_size);
		T_CHECK(memcmp(rec.code, e.code_addr, e.code_size) == 0);
		T_CHECK_EQ(pending, e.nr_lines ? 2 : 0);
		if (have_unw && e.nr_lines)
			check_unwind(&unw, &e);
		pending = 0;
		have_unw = false;
	}
	T_CHECK_EQ(loads, NTHREADS * NPER);
	for (unsigned t = 0; t < NTHREADS; t++)
		T_CHECK_EQ(next[t], NPER);
	t_dump_free(&du);

	st = t_stats(jr);
	T_CHECK_EQ(st.entries_written, NTHREADS * NPER);
	T_CHECK_EQ(st.bytes_written, (uint64_t)file_size(d.dump));
	T_CHECK_EQ(st.refused_invalid + st.refused_nomem + st.refused_dropped,
		   0);
	T_CHECK_EQ(jitring_close(jr), 0);
	free(m);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

/* ------------------------------------------------------------------ */
/* 7. small functions                                                   */

static void test_version_config(void)
{
	struct jitring_config a, b = JITRING_CONFIG_INIT, z;

	T_CHECK_EQ(jitring_version(),
		   (JITRING_VERSION_MAJOR << 16) | JITRING_VERSION_MINOR);

	memset(&a, 0xff, sizeof(a));
	jitring_config_init(&a);
	memset(&z, 0, sizeof(z));
	z.struct_size = sizeof(z);
	T_CHECK_EQ(a.struct_size, sizeof(a));
	T_CHECK(memcmp(&a, &z, sizeof(a)) == 0);

	T_CHECK_EQ(b.struct_size, sizeof(b));
	T_CHECK_EQ(b.engine, 0);
	T_CHECK_EQ(b.flags, 0);
	T_CHECK_EQ(b.ring_size, 0);
	T_CHECK(b.dir == NULL);
	T_CHECK_EQ(b.max_delay_ms, 0);
	T_CHECK_EQ(b.holdback_ms, 0);
	T_CHECK_EQ(b.mem_budget, 0);
	T_CHECK(b.log == NULL);
	T_CHECK(b.log_arg == NULL);
	T_CHECK_EQ(b.elf_mach, 0);
	T_CHECK_EQ(b.reserved, 0);
}

static void test_stats_size(uint32_t engine)
{
	struct t_dir d;
	struct jitring *jr;
	struct jitring_stats st, copy;
	struct {
		struct jitring_stats s;
		uint64_t tail[2];
	} big;
	static const uint32_t small[] = {
		0, 4, 8, JITRING_STATS_SIZE_V1 - 8,
		JITRING_STATS_SIZE_V1 - 1,
	};
	struct went w, s;
	struct exp x;

	t_dir_make(&d, "api");
	T_REQUIRE(t_open(engine, d.path, 0, &jr) == 0);
	went_make(&w, "stats", 8, false, false, false, 1);
	write_one(jr, &w, &s, &x);
	T_CHECK_EQ(jitring_flush(jr), 0);

	/* Smaller than version 1: untouched. */
	for (size_t i = 0; i < ARRAY_SIZE(small); i++) {
		memset(&st, 0xab, sizeof(st));
		st.struct_size = small[i];
		copy = st;
		jitring_stats(jr, &st);
		T_CHECK(memcmp(&st, &copy, sizeof(st)) == 0);
	}
	jitring_stats(jr, NULL);

	/* Larger than the library's: its own size is filled, no more. */
	memset(&big, 0xab, sizeof(big));
	big.s.struct_size = sizeof(big);
	jitring_stats(jr, &big.s);
	T_CHECK_EQ(big.s.engine, engine);
	T_CHECK_EQ(big.s.entries_written, 1);
	T_CHECK_EQ(big.s.refused_invalid, 0);
	T_CHECK_EQ(big.tail[0], 0xababababababababull);
	T_CHECK_EQ(big.tail[1], 0xababababababababull);

	T_CHECK_EQ(jitring_close(jr), 0);
	went_free(&w);
	went_free(&s);
	t_dir_remove(&d);
	jitring_thread_detach(NULL);
}

static void test_eh_frame_build_errors(void)
{
	const struct jitring_cfi *host =
		jitring_cfi_preset(JITRING_CFI_HOST_FP_TRAMPOLINE);
	unsigned char buf[256];
	int n;

	T_REQUIRE(host != NULL);
	T_CHECK_EQ(jitring_eh_frame_build(NULL, 8, buf, sizeof(buf)), -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(NULL, 8, NULL, 0), -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(host, 0, buf, sizeof(buf)), -EINVAL);
	T_CHECK_EQ(jitring_eh_frame_build(host, (uint64_t)JITRING_CODE_MAX + 1,
					  buf, sizeof(buf)), -EINVAL);
	n = jitring_eh_frame_build(host, 64, NULL, 0);
	T_REQUIRE(n > 0 && (size_t)n < sizeof(buf));
	memset(buf, 0x3c, sizeof(buf));
	T_CHECK_EQ(jitring_eh_frame_build(host, 64, buf, (size_t)n - 1),
		   -ENOSPC);
	T_CHECK_EQ(buf[0], 0x3c);
	T_CHECK_EQ(buf[n - 2], 0x3c);
	T_CHECK_EQ(jitring_eh_frame_build(host, 64, buf, (size_t)n), n);
	T_CHECK_EQ(buf[n], 0x3c);
	T_CHECK_EQ(n % 4, 0);
}

int main(void)
{
	int n;

	/* Nothing attached to this thread yet. */
	n = jitring_thread_detach(NULL);
	T_CHECK_EQ(n, 0);

	test_version_config();
	test_eh_frame_build_errors();
	test_open_null_cfg();
	for (size_t i = 0; i < ARRAY_SIZE(t_engines); i++) {
		uint32_t en = t_engines[i];

		t_run("open_errors", en, test_open_errors);
		t_run("open_paths", en, test_open_paths);
		t_run("open_ok", en, test_open_ok);
		t_run("write_flush", en, test_write_flush);
		t_run("close_pending", en, test_close_pending);
		t_run("bad_input", en, test_bad_input);
		t_run("move_unissued", en, test_move_unissued);
		t_run("close", en, test_close);
		t_run("close_empty", en, test_close_empty);
		t_run("detach", en, test_detach);
		t_run("threads", en, test_threads);
		t_run("stats_size", en, test_stats_size);
	}
	return t_report();
}
