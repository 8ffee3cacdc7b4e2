/* SPDX-License-Identifier: MIT */
/* Shared benchmark helpers; see benchlib.h. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "common/clock.h"
#include "harness.h"
#include "core/internal.h"
#include "format/record.h"

static const char *const engine_names[BENCH_NR_ENGINES] = {
	"floor", "rings", "mutex",
};
static const char *const shape_names[BENCH_NR_SHAPES] = {
	"cpython", "load", "unw_dbg_load", "code4k",
};

const char *bench_engine_name(int engine)
{
	return engine >= 0 && engine < BENCH_NR_ENGINES ? engine_names[engine]
							: "?";
}

const char *bench_shape_name(int shape)
{
	return shape >= 0 && shape < BENCH_NR_SHAPES ? shape_names[shape]
						     : "?";
}

int bench_engine_parse(const char *s)
{
	for (int i = 0; i < BENCH_NR_ENGINES; i++)
		if (strcmp(s, engine_names[i]) == 0)
			return i;
	return -1;
}

int bench_shape_parse(const char *s)
{
	for (int i = 0; i < BENCH_NR_SHAPES; i++)
		if (strcmp(s, shape_names[i]) == 0)
			return i;
	return -1;
}

/* ------------------------------------------------------------------ */
/* Shapes.                                                              */

/* CPython names perf trampolines "py::<qualname>:<filename>": 39 bytes. */
static const char shape_name[] = "py::fibonacci_recursive:/srv/app/fib.py";
static const char line_file[] = "/srv/app/module.py";

#define TRAMP_SIZE 30u
#define UDL_CODE_SIZE 256u
#define UDL_LINES 20u
#define CODE4K_SIZE 4096u

static struct {
	pthread_once_t once;
	uint8_t code[CODE4K_SIZE] __attribute__((aligned(64)));
	uint8_t eh_tramp[256] __attribute__((aligned(8)));
	uint8_t eh_udl[256] __attribute__((aligned(8)));
	struct jitring_line lines[UDL_LINES];
	struct jitring_entry e[BENCH_NR_SHAPES];
	uint64_t bytes[BENCH_NR_SHAPES];
} S = { .once = PTHREAD_ONCE_INIT };

static int build_eh(uint64_t code_size, uint8_t *buf, size_t size)
{
	int n = t_eh_frame(code_size, buf, size);

	if (n <= 0) {
		fprintf(stderr, "bench: jitring_eh_frame_build: %d\n", n);
		abort();
	}
	return n;
}

static void shapes_init(void)
{
	int n;

	for (unsigned i = 0; i < CODE4K_SIZE; i++)
		S.code[i] = (uint8_t)(0x90 + (i * 7u) % 13u);
	for (unsigned i = 0; i < UDL_LINES; i++) {
		S.lines[i].addr = (uint64_t)(uintptr_t)S.code + i * 12u;
		S.lines[i].line = 100 + (int32_t)i;
		S.lines[i].discrim = 0;
		S.lines[i].file = line_file;
	}

	/* CPython: UNWINDING_INFO for the trampoline + CODE_LOAD. */
	n = build_eh(TRAMP_SIZE, S.eh_tramp, sizeof(S.eh_tramp));
	S.e[SHAPE_CPYTHON] = (struct jitring_entry){
		.name = shape_name,
		.code_addr = S.code,
		.code_size = TRAMP_SIZE,
		.eh_frame = S.eh_tramp,
		.eh_frame_size = (uint32_t)n,
	};
	S.e[SHAPE_LOAD] = (struct jitring_entry){
		.name = shape_name,
		.code_addr = S.code,
		.code_size = TRAMP_SIZE,
	};
	n = build_eh(UDL_CODE_SIZE, S.eh_udl, sizeof(S.eh_udl));
	S.e[SHAPE_UDL] = (struct jitring_entry){
		.name = shape_name,
		.code_addr = S.code,
		.code_size = UDL_CODE_SIZE,
		.eh_frame = S.eh_udl,
		.eh_frame_size = (uint32_t)n,
		.nr_lines = UDL_LINES,
		.lines = S.lines,
	};
	S.e[SHAPE_CODE4K] = (struct jitring_entry){
		.name = shape_name,
		.code_addr = S.code,
		.code_size = CODE4K_SIZE,
	};
	for (int i = 0; i < BENCH_NR_SHAPES; i++) {
		struct jitring_group g;
		int ret = jitring_record_plan(&g, &S.e[i]);

		if (ret) {
			fprintf(stderr, "bench: shape %s: plan %d\n",
				shape_names[i], ret);
			abort();
		}
		S.bytes[i] = g.total;
	}
}

const struct jitring_entry *bench_shape_entry(int shape)
{
	pthread_once(&S.once, shapes_init);
	return &S.e[shape];
}

uint64_t bench_shape_bytes(int shape)
{
	pthread_once(&S.once, shapes_init);
	return S.bytes[shape];
}

/* ------------------------------------------------------------------ */
/* The floor.                                                           */

/* Same size as a default ring, so the cache footprint is comparable. */
#define FLOOR_BUF (64u << 10)

static __thread uint8_t *fl_buf;
static __thread uint32_t fl_pos;
static __thread uint32_t fl_pid, fl_tid;
static __thread uint64_t fl_next;

static __attribute__((noinline)) int floor_attach(void)
{
	void *p = mmap(NULL, FLOOR_BUF, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return -errno;
	fl_buf = p;
	fl_pid = (uint32_t)getpid();
	fl_tid = (uint32_t)syscall(SYS_gettid);
	return 0;
}

int64_t bench_floor_write(const struct jitring_entry *e)
{
	struct jitring_group g;
	int ret = jitring_record_plan(&g, e);

	if (__builtin_expect(ret != 0, 0))
		return ret;
	if (__builtin_expect(!fl_buf, 0)) {
		ret = floor_attach();
		if (ret)
			return ret;
	}
	if (__builtin_expect(g.total > FLOOR_BUF, 0))
		return -E2BIG;
	if (fl_pos + g.total > FLOOR_BUF)
		fl_pos = 0;
	jitring_record_encode(&g, fl_buf + fl_pos, jitring_clock_ns(), fl_pid,
			      fl_tid, ++fl_next);
	fl_pos += (uint32_t)g.total;
	return (int64_t)fl_next;
}

/* ------------------------------------------------------------------ */
/* Writers.                                                             */

const char *bench_dir(void)
{
	const char *d = getenv("JITRING_BENCH_DIR");

	return d && *d ? d : "/dev/shm";
}

static void dump_path(char *buf, size_t size)
{
	snprintf(buf, size, "%s/jit-%ld.dump", bench_dir(), (long)getpid());
}

int bench_open(int engine, struct jitring **out)
{
	struct jitring_config cfg;
	char path[PATH_MAX];

	dump_path(path, sizeof(path));
	unlink(path);
	jitring_config_init(&cfg);
	cfg.engine = engine == BENCH_MUTEX ? JITRING_ENGINE_MUTEX
					   : JITRING_ENGINE_RINGS;
	cfg.dir = bench_dir();
	return jitring_open(&cfg, out);
}

int bench_close(struct jitring *jr)
{
	char path[PATH_MAX];
	int ret = jitring_close(jr);

	dump_path(path, sizeof(path));
	unlink(path);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Clocks, histograms, RSS.                                             */

uint64_t bench_now_ns(void)
{
	return jitring_clock_ns();
}

void bench_futex_wait(void *word, unsigned v)
{
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

void bench_futex_wake(void *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static double ns_per_tick;
static pthread_once_t tick_once = PTHREAD_ONCE_INIT;

static void tick_calibrate(void)
{
#if defined(__x86_64__)
	uint64_t n0 = bench_now_ns(), t0 = bench_ticks_begin(), n1, t1;
	struct timespec d = { 0, 50 * 1000000 };

	nanosleep(&d, NULL);
	n1 = bench_now_ns();
	t1 = bench_ticks_end();
	ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
#else
	ns_per_tick = 1.0;
#endif
}

double bench_ns_per_tick(void)
{
	pthread_once(&tick_once, tick_calibrate);
	return ns_per_tick;
}

void bench_hist_reset(struct bench_hist *h)
{
	memset(h, 0, sizeof(*h));
}

void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src)
{
	dst->count += src->count;
	if (src->max > dst->max)
		dst->max = src->max;
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
}

/* Upper edge (inclusive) of bucket @i. */
static double bucket_hi(unsigned i)
{
	unsigned e, sub;

	if (i < HIST_SUB)
		return i;
	e = (i - HIST_SUB) / HIST_SUB + HIST_SUB_BITS;
	sub = (i - HIST_SUB) % HIST_SUB;
	return ((double)(HIST_SUB + sub + 1) * (double)(1ull << (e - HIST_SUB_BITS))) - 1;
}

double bench_hist_quantile(const struct bench_hist *h, double q)
{
	uint64_t want, seen = 0;

	if (!h->count)
		return 0;
	want = (uint64_t)(q * (double)h->count + 0.999999);
	if (want < 1)
		want = 1;
	if (want > h->count)
		want = h->count;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= want) {
			double v = bucket_hi(i);

			return v > (double)h->max ? (double)h->max : v;
		}
	}
	return (double)h->max;
}

uint64_t bench_wakes(struct jitring *jr)
{
	return atomic_load_explicit(&jr->c.wakes, memory_order_relaxed);
}

uint64_t bench_flusher_cpu_ns(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	uint64_t v = 0;

	while (d && (de = readdir(d))) {
		char path[320], comm[32] = "";
		unsigned long long ns;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
			 de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f) ||
		    strncmp(comm, "jitring-flush", 13)) {
			fclose(f);
			continue;
		}
		fclose(f);
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat",
			 de->d_name);
		f = fopen(path, "r");
		if (f && fscanf(f, "%llu", &ns) == 1)
			v += ns;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return v;
}
