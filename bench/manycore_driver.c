/* SPDX-License-Identifier: MIT */
/*
 * One run of the many-core matrix (bench/manycore.sh, bench/README.md
 * "Many-core kit"): THREADS threads write ENTRIES entries of the CPython
 * shape between them, end to end, and one JSON line says how fast.
 *
 *   manycore_driver rings|mutex|floor THREADS [--entries N] [--dir D]
 *	[--check fast|full|none] [--lat-every K] [--run R]
 *
 * The entry: a name "py::<qualname>:<file>" of 40 to 60 bytes (a table of
 * 4096, each thread walking it from its own start), the built-in
 * trampoline's CFI as .eh_frame (jitring_trampoline_builtin() +
 * jitring_eh_frame_build() for 16 bytes of code) and 16 bytes of code
 * (the template's first 16, passed as code_bytes; code_addr is a distinct
 * made-up address per entry).
 *
 * Timed, wall clock: open the writer (or the floor's file), create the
 * threads (256 KiB stacks), each writes its share back to back and exits,
 * join them, close the writer.  So thread start, ring registration and
 * the final drain are all inside.
 *
 * Engines:
 *   rings  jitring_write() on JITRING_ENGINE_RINGS, default config;
 *   mutex  jitring_write() on JITRING_ENGINE_MUTEX (one lock per group,
 *          fwrite into a 2 MiB FILE buffer);
 *   floor  the unordered floor: each thread encodes (the library's own
 *          planner and encoder, same clock) into its own 1 MiB buffer and,
 *          when it is full and at the end, reserves a file range with one
 *          atomic add and pwrite(2)s the buffer there.  No ordering, no
 *          sharing but the file offset: what any design that must write
 *          the same bytes to one file cannot beat by much.
 *
 * Reported, one JSON line: entries_per_s, mb_per_s; proc_cpu_ns_per_entry
 * (getrusage(RUSAGE_SELF) over the timed part: every thread, kernel
 * included); rings only: flusher_cpu_ns_per_entry, the CPU time of the
 * thread named "jitring-flush" (its /proc/self/task/TID/schedstat, or
 * utime+stime of .../stat where there is no schedstat, read after the
 * producers were joined) plus what the process spent during
 * jitring_close() less the closing thread's own CPU (the flusher's last
 * drain; it is joined by then); p50/p99/p999/max_ns of one write, from
 * every K-th call (--lat-every, default 8; 0: none) timed with
 * lfence;rdtsc .. rdtscp (the same for every engine); check: the dump
 * read back with the project's reader (src/reader/reader.h): "fast" (default)
 * counts CODE_LOAD records and, for rings and mutex, checks timestamps
 * never decrease; "full" is jitring_check(JITRING_CHECK_SORTED) for rings
 * and mutex (and unsorted for the floor).  The dump is deleted after.
 * Exit status: 0 when every write succeeded and the check passed, else 1.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "common/clock.h"
#include "jitring/jitdump.h"
#include "reader/reader.h"
#include "format/record.h"

#define CODE_SIZE 16u
#define NR_NAMES 4096u
#define FLOOR_BUF (1u << 20)
#define STACK_SIZE (256u << 10)

enum { E_FLOOR, E_RINGS, E_MUTEX };
static const char *const engine_names[] = { "floor", "rings", "mutex" };

static int engine;
static struct jitring *jr;
static char names[NR_NAMES][64];
static uint8_t code[CODE_SIZE];
static uint8_t eh_frame[256] __attribute__((aligned(8)));
static int eh_frame_size;
static unsigned lat_every = 8;

/* The floor's file. */
static int floor_fd = -1;
static _Atomic uint64_t floor_off;

struct worker {
	pthread_t th;
	unsigned idx;
	uint64_t n;    /* entries to write */
	uint64_t done; /* writes that returned a code_index */
	int64_t err;   /* first error, 0 if none */
	uint64_t cpu_ns; /* its thread's CPU time, at its end */
	struct bench_hist *h;
};

static uint64_t thread_cpu_ns(void);

static void die(const char *what, long v)
{
	fprintf(stderr, "manycore_driver: %s: %ld\n", what, v);
	exit(2);
}

/* "py::<qualname>:<file>": 40 to 60 bytes, like CPython's perf names. */
static void names_init(void)
{
	static const char *const dirs[] = {
		"/srv/app", "/usr/lib/python3.13", "/home/u/proj/src",
		"/opt/svc/lib/site-packages",
	};

	for (unsigned i = 0; i < NR_NAMES; i++) {
		char buf[160];
		unsigned want = 40 + (i * 7919u) % 21u; /* 40..60 */
		int n = snprintf(buf, sizeof(buf), "py::func_%05u:%s/mod_%u.py",
				 i, dirs[i % 4], i % 97);

		/* Pad the qualname or cut the path to the length wanted. */
		if ((unsigned)n < want) {
			char q[96];

			memset(q, 'x', sizeof(q));
			q[want - (unsigned)n] = 0;
			n = snprintf(buf, sizeof(buf),
				     "py::func_%05u_%s:%s/mod_%u.py", i, q + 1,
				     dirs[i % 4], i % 97);
		}
		if ((unsigned)n > want) {
			memcpy(buf + want - 3, ".py", 4);
			n = (int)want;
		}
		memcpy(names[i], buf, (size_t)n + 1);
	}
}

static void entry_init(void)
{
	struct jitring_trampoline_template t;
	int ret = jitring_trampoline_builtin(&t);

	if (ret)
		die("jitring_trampoline_builtin", ret);
	memcpy(code, t.code, t.code_size < CODE_SIZE ? t.code_size : CODE_SIZE);
	eh_frame_size = jitring_eh_frame_build(t.cfi, CODE_SIZE, eh_frame,
					       sizeof(eh_frame));
	if (eh_frame_size == -EINVAL && t.cfi) {
		/* The template's CFI steps past 16 bytes: its entry rules. */
		struct jitring_cfi c = *t.cfi;

		c.nr_ops = c.nr_init;
		eh_frame_size = jitring_eh_frame_build(&c, CODE_SIZE, eh_frame,
						       sizeof(eh_frame));
	}
	if (eh_frame_size <= 0)
		die("jitring_eh_frame_build", eh_frame_size);
}

static inline void entry_make(struct jitring_entry *e, unsigned idx,
			      uint64_t i)
{
	memset(e, 0, sizeof(*e));
	e->name = names[(idx * 131u + i) & (NR_NAMES - 1)];
	e->code_addr = (const void *)(uintptr_t)(0x100000000000ull +
						 ((uint64_t)idx << 28) +
						 i * CODE_SIZE);
	e->code_size = CODE_SIZE;
	e->code_bytes = code;
	e->eh_frame = eh_frame;
	e->eh_frame_size = (uint32_t)eh_frame_size;
}

/* ------------------------------------------------------------------ */
/* The unordered floor.                                                 */

static int floor_out(const uint8_t *buf, uint64_t len)
{
	uint64_t off = atomic_fetch_add_explicit(&floor_off, len,
						 memory_order_relaxed);

	while (len) {
		ssize_t n = pwrite(floor_fd, buf, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

struct floor_tls {
	uint8_t *buf;
	uint32_t pos, pid, tid;
	uint64_t next;
};

static inline int64_t floor_write(struct floor_tls *f,
				  const struct jitring_entry *e)
{
	struct jitring_group g;
	int ret = jitring_record_plan(&g, e);

	if (__builtin_expect(ret != 0, 0))
		return ret;
	if (f->pos + g.total > FLOOR_BUF) {
		ret = floor_out(f->buf, f->pos);
		if (ret)
			return ret;
		f->pos = 0;
	}
	jitring_record_encode(&g, f->buf + f->pos, jitring_clock_ns(), f->pid,
			      f->tid, ++f->next);
	f->pos += (uint32_t)g.total;
	return (int64_t)f->next;
}

/* ------------------------------------------------------------------ */

static void *producer(void *arg)
{
	struct worker *w = arg;
	struct floor_tls f = { 0 };
	struct jitring_entry e;
	unsigned k = lat_every ? w->idx % lat_every : 1;

	if (engine == E_FLOOR) {
		f.buf = mmap(NULL, FLOOR_BUF, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (f.buf == MAP_FAILED) {
			w->err = -errno;
			return NULL;
		}
		f.pid = (uint32_t)getpid();
		f.tid = (uint32_t)syscall(SYS_gettid);
		/* Unique over the threads: thread in the high half. */
		f.next = (uint64_t)(w->idx + 1) << 32;
	}
	for (uint64_t i = 0; i < w->n; i++) {
		int64_t r;

		entry_make(&e, w->idx, i);
		if (lat_every && ++k >= lat_every) {
			uint64_t t0 = bench_ticks_begin(), t1;

			r = engine == E_FLOOR ? floor_write(&f, &e)
					      : jitring_write(jr, &e);
			t1 = bench_ticks_end();
			bench_hist_add(w->h, t1 - t0);
			k = 0;
		} else {
			r = engine == E_FLOOR ? floor_write(&f, &e)
					      : jitring_write(jr, &e);
		}
		if (__builtin_expect(r <= 0, 0)) {
			w->err = r ? r : -EPROTO;
			break;
		}
		w->done++;
	}
	if (engine == E_FLOOR) {
		if (f.pos && !w->err) {
			int ret = floor_out(f.buf, f.pos);

			if (ret)
				w->err = ret;
		}
		munmap(f.buf, FLOOR_BUF);
	}
	w->cpu_ns = thread_cpu_ns();
	return NULL;
}

/* ------------------------------------------------------------------ */
/* CPU clocks.                                                          */

static uint64_t rusage_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
		       1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
		       1000ull;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The flusher's CPU so far: schedstat (ns) via benchlib, else utime+stime
 * of /proc/self/task/TID/stat (clock ticks) of the thread named
 * jitring-flush.  *how says which.
 */
static uint64_t flusher_cpu_ns(const char **how)
{
	uint64_t v = bench_flusher_cpu_ns();
	char path[64], buf[1024];
	long tick = sysconf(_SC_CLK_TCK);
	pid_t tid = 0;
	struct dirent *de;
	DIR *d;
	FILE *f;

	*how = "schedstat";
	if (v)
		return v;
	*how = "stat";
	/* Find it by name among this process's threads. */
	d = opendir("/proc/self/task");
	while (d && !tid && (de = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm",
			 de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f) &&
		    strncmp(buf, "jitring-flush", 13) == 0)
			tid = (pid_t)atoi(de->d_name);
		fclose(f);
	}
	if (d)
		closedir(d);
	if (!tid)
		return 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (f && fgets(buf, sizeof(buf), f)) {
		/* Fields 14 and 15 (utime, stime), after the ")" of comm. */
		char *p = strrchr(buf, ')');
		unsigned long ut = 0, st = 0;

		if (p && sscanf(p + 2,
				"%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				&ut, &st) == 2 && tick > 0)
			v = (uint64_t)(ut + st) * (1000000000ull / (uint64_t)tick);
	}
	if (f)
		fclose(f);
	return v;
}

/* ------------------------------------------------------------------ */
/* Reading the dump back.                                               */

static int check_dump(const char *path, const char *mode, uint64_t want,
		      char *detail, size_t dsize)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	void *map;
	int ret = 0;
	bool sorted = engine != E_FLOOR;

	if (fd < 0 || fstat(fd, &sb)) {
		snprintf(detail, dsize, "open: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	map = sb.st_size ? mmap(NULL, (size_t)sb.st_size, PROT_READ,
				MAP_PRIVATE | MAP_POPULATE, fd, 0)
			 : MAP_FAILED;
	close(fd);
	if (map == MAP_FAILED) {
		snprintf(detail, dsize, "mmap: %s", strerror(errno));
		return -1;
	}
	if (strcmp(mode, "full") == 0) {
		struct jitring_check_result res;
		int r = jitring_check(map, (size_t)sb.st_size,
				      sorted ? JITRING_CHECK_SORTED : 0, &res);

		if (r != 0) {
			snprintf(detail, dsize, "%s at %" PRIu64 ": %s",
				 r == 1 ? res.rule : "error", res.off, res.detail);
			ret = -1;
		} else if (res.count[JITRING_RD_CODE_LOAD] != want) {
			snprintf(detail, dsize,
				 "%" PRIu64 " CODE_LOAD, want %" PRIu64,
				 res.count[JITRING_RD_CODE_LOAD], want);
			ret = -1;
		}
	} else {
		struct jitring_reader r;
		struct jitring_rd_record rec;
		uint64_t loads = 0, last = 0;
		int n;

		n = jitring_reader_init(&r, map, (size_t)sb.st_size, 0, NULL);
		while (n == 0 && (n = jitring_reader_next(&r, &rec)) == 1) {
			if (rec.id == JITRING_RD_CODE_LOAD)
				loads++;
			if (sorted && rec.ts < last) {
				snprintf(detail, dsize,
					 "timestamp goes back at %zu", rec.off);
				ret = -1;
				break;
			}
			last = rec.ts;
			n = 0;
		}
		if (!ret && n < 0) {
			snprintf(detail, dsize, "%s at %zu: %s",
				 r.rule ? r.rule : "error", r.err_off, r.detail);
			ret = -1;
		} else if (!ret && loads != want) {
			snprintf(detail, dsize,
				 "%" PRIu64 " CODE_LOAD, want %" PRIu64, loads,
				 want);
			ret = -1;
		}
	}
	munmap(map, (size_t)sb.st_size);
	return ret;
}

/* ------------------------------------------------------------------ */

static void usage(void)
{
	fprintf(stderr,
		"usage: manycore_driver rings|mutex|floor THREADS [--entries N]"
		" [--dir D] [--check fast|full|none] [--lat-every K] [--run R]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t entries = 2000000, done = 0, bytes = 0;
	unsigned nthreads, run = 0;
	const char *dir = bench_dir(), *check = "fast", *how = "";
	char path[PATH_MAX], detail[256] = "";
	struct worker *w;
	struct bench_hist *hists = NULL, all;
	pthread_attr_t attr;
	uint64_t t0, t1, r0, r1, ra = 0, ma = 0, mb, m0, fl = 0, fl_pre = 0;
	uint64_t prod_cpu = 0, bg;
	uint64_t check_ns = 0;
	int64_t err = 0;
	unsigned created = 0;
	int ret, check_ret = 0;
	struct jitring_stats st = { .struct_size = sizeof(st) };
	double npt, secs;

	if (argc < 3)
		usage();
	for (engine = 0; engine < 3; engine++)
		if (strcmp(argv[1], engine_names[engine]) == 0)
			break;
	if (engine == 3)
		usage();
	nthreads = (unsigned)strtoul(argv[2], NULL, 0);
	if (nthreads < 1 || nthreads > 65536)
		usage();
	for (int i = 3; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (strcmp(argv[i], "--entries") == 0)
			entries = strtoull(argv[++i], NULL, 0);
		else if (strcmp(argv[i], "--dir") == 0)
			dir = argv[++i];
		else if (strcmp(argv[i], "--check") == 0)
			check = argv[++i];
		else if (strcmp(argv[i], "--lat-every") == 0)
			lat_every = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (strcmp(argv[i], "--run") == 0)
			run = (unsigned)strtoul(argv[++i], NULL, 0);
		else
			usage();
	}
	if (strcmp(check, "fast") && strcmp(check, "full") &&
	    strcmp(check, "none"))
		usage();
	if (entries < nthreads)
		entries = nthreads;

	names_init();
	entry_init();
	npt = bench_ns_per_tick();
	w = calloc(nthreads, sizeof(*w));
	if (!w)
		die("calloc", nthreads);
	if (lat_every) {
		/* Untouched pages cost nothing: a thread's values sit in a
		 * few buckets. */
		hists = mmap(NULL, (size_t)nthreads * sizeof(*hists),
			     PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (hists == MAP_FAILED)
			die("mmap hists", errno);
	}
	for (unsigned i = 0; i < nthreads; i++) {
		w[i].idx = i;
		w[i].n = entries / nthreads + (i < entries % nthreads);
		w[i].h = hists ? &hists[i] : NULL;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, STACK_SIZE);
	if (engine == E_FLOOR)
		snprintf(path, sizeof(path), "%s/floor-%ld.dump", dir,
			 (long)getpid());
	else
		snprintf(path, sizeof(path), "%s/jit-%ld.dump", dir,
			 (long)getpid());
	unlink(path);

	/* ---- timed ---- */
	r0 = rusage_ns();
	m0 = thread_cpu_ns();
	t0 = bench_now_ns();
	if (engine == E_FLOOR) {
		struct jitdump_header h;

		floor_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
				0644);
		if (floor_fd < 0)
			die("open floor file", errno);
		jitring_record_header(&h, jitring_record_host_mach(),
				      (uint32_t)getpid(), jitring_clock_ns());
		atomic_store(&floor_off, sizeof(h));
		if (pwrite(floor_fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
			die("pwrite header", errno);
	} else {
		struct jitring_config cfg;

		jitring_config_init(&cfg);
		cfg.engine = engine == E_MUTEX ? JITRING_ENGINE_MUTEX
					       : JITRING_ENGINE_RINGS;
		cfg.dir = dir;
		ret = jitring_open(&cfg, &jr);
		if (ret)
			die("jitring_open", ret);
	}
	for (; created < nthreads; created++) {
		ret = pthread_create(&w[created].th, &attr, producer,
				     &w[created]);
		if (ret) {
			err = -ret;
			break;
		}
	}
	for (unsigned i = 0; i < created; i++)
		pthread_join(w[i].th, NULL);
	if (engine == E_RINGS) {
		fl_pre = flusher_cpu_ns(&how);
		ra = rusage_ns();
		ma = thread_cpu_ns();
	}
	if (engine != E_FLOOR)
		jitring_stats(jr, &st);
	if (engine == E_FLOOR) {
		bytes = atomic_load(&floor_off);
		ret = close(floor_fd) ? -errno : 0;
	} else {
		ret = jitring_close(jr);
	}
	t1 = bench_now_ns();
	r1 = rusage_ns();
	/* ---- end ---- */

	mb = thread_cpu_ns();
	if (engine == E_RINGS)
		fl = fl_pre + (r1 - ra) - (mb - ma);
	/* What no producer and not this thread used: the engine's own
	 * threads (flusher, write thread), whenever they ran. */
	for (unsigned i = 0; i < created; i++)
		prod_cpu += w[i].cpu_ns;
	bg = r1 - r0 > prod_cpu + (mb - m0) ? r1 - r0 - prod_cpu - (mb - m0) :
					       0;
	if (ret && !err)
		err = ret;
	for (unsigned i = 0; i < created; i++) {
		done += w[i].done;
		if (w[i].err && !err)
			err = w[i].err;
	}
	if (engine != E_FLOOR) {
		struct stat sb;

		bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
	}
	if (strcmp(check, "none")) {
		uint64_t c0 = bench_now_ns();

		check_ret = check_dump(path, check, done, detail,
				       sizeof(detail));
		check_ns = bench_now_ns() - c0;
	}
	unlink(path);

	bench_hist_reset(&all);
	for (unsigned i = 0; hists && i < created; i++)
		bench_hist_merge(&all, &hists[i]);

	for (char *p = detail; *p; p++)
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
			*p = '\'';
	secs = (double)(t1 - t0) / 1e9;
	printf("{\"engine\":\"%s\",\"threads\":%u,\"threads_created\":%u,"
	       "\"run\":%u,"
	       "\"entries\":%" PRIu64 ",\"written\":%" PRIu64 ","
	       "\"bytes\":%" PRIu64 ",\"wall_s\":%.4f,"
	       "\"entries_per_s\":%.0f,\"mb_per_s\":%.1f,"
	       "\"proc_cpu_ns_per_entry\":%.1f,",
	       engine_names[engine], nthreads, created, run, entries, done, bytes, secs,
	       done / secs, bytes / secs / 1e6,
	       done ? (double)(r1 - r0) / (double)done : 0.0);
	if (engine == E_RINGS)
		printf("\"flusher_cpu_ns_per_entry\":%.1f,"
		       "\"flusher_cpu_close_ms\":%.2f,\"flusher_clock\":\"%s\",",
		       done ? (double)fl / (double)done : 0.0,
		       (double)(fl - fl_pre) / 1e6, how);
	else
		printf("\"flusher_cpu_ns_per_entry\":null,");
	printf("\"engine_threads_cpu_ns_per_entry\":%.1f,",
	       done ? (double)bg / (double)done : 0.0);
	if (engine != E_FLOOR)
		printf("\"ring_full_waits\":%" PRIu64 ",\"late_entries\":%" PRIu64
		       ",\"refills_waited\":%" PRIu64 ",",
		       st.ring_full_waits, st.late_entries, st.refills_waited);
	printf("\"lat_every\":%u,\"lat_samples\":%" PRIu64 ",\"p50_ns\":%.0f,"
	       "\"p99_ns\":%.0f,\"p999_ns\":%.0f,\"max_ns\":%.0f,",
	       lat_every, all.count, bench_hist_quantile(&all, 0.5) * npt,
	       bench_hist_quantile(&all, 0.99) * npt,
	       bench_hist_quantile(&all, 0.999) * npt, (double)all.max * npt);
	printf("\"error\":%" PRId64 ",\"check\":\"%s\",\"check_ok\":%s,"
	       "\"check_s\":%.3f,\"check_detail\":\"%s\",\"dir\":\"%s\"}\n",
	       err, check, strcmp(check, "none") ? (check_ret ? "false" : "true")
						  : "null",
	       (double)check_ns / 1e9, detail, dir);
	return err || check_ret || done != entries ? 1 : 0;
}
