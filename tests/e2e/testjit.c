/* SPDX-License-Identifier: MIT */
/*
 * testjit: a small multithreaded "JIT" that tells perf about its code
 * through the shared libjitring, for the end-to-end test and `make demo`.
 *
 *   testjit [--mode runtime|asm] [--threads T] [--functions F]
 *           [--seconds S | --cpu-seconds S] [--engine rings|mutex]
 *           [--dir D] [--unwind|--no-unwind] [--name-prefix P]
 *           [--lines FILE]
 *
 * --mode runtime (the default) is a small multithreaded runtime built on
 * the trampoline kit: each thread runs jit_runtime_loop() for S seconds
 * (and at least until it has all its functions), discovering its F
 * functions as it goes, a few more every round, as a runtime warming up
 * does.  Each function is a fresh copy of the built-in trampoline from
 * jitring_trampolines_get() named "<P><n>" (default P "py::func_"; copies
 * of the same function on different threads share the name, each with
 * its own code_index).  A function's trampoline calls the C evaluator
 * jit_eval_hot() with the function's number and work, so perf's call
 * chains read jit_eval_hot <- <P><n> <- jit_runtime_loop; function 0 is
 * the hottest, function 1 half as hot, and so on.
 *
 * --mode asm generates F copies of a hot x86_64 loop with a standard frame
 * per thread into its own executable arena, describes each copy with
 * jitring_write() (name "<P>t<thread>_<n>", default P "jit_func_",
 * .eh_frame built with jitring_eh_frame_build(), code bytes), and only then
 * calls it; then every thread calls its functions from jit_caller_hot()
 * for S seconds, with function 0 the hottest.
 *
 * --mode asm --lines FILE generates a function with two hot loops
 * instead, each under its own row of a line table in FILE (see
 * lines_code[]), for tests/e2e/perf_lines.sh and the demo: perf must
 * attribute each loop's samples to its line.
 *
 * --cpu-seconds S runs until the process has used S seconds of CPU time
 * instead of S seconds on the clock: perf's cpu-clock samples count CPU
 * time, so a profile of such a run holds as many samples on a loaded
 * machine as on an idle one (the tests under perf use it).
 *
 * The last lines are a summary ("key: value") that tests/e2e/demo.sh and
 * perf_e2e.sh read.
 *
 * Exit status: 0 ok, 1 a jitring call failed or the counters disagree,
 * 2 usage error, 77 nothing to run on this architecture (asm mode is
 * x86_64 only; runtime mode needs a built-in trampoline).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "jitring.h"

#define EXIT_SKIP 77
#define EXIT_USAGE 2

#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uint64_t)(a) - 1))

enum mode {
	MODE_RUNTIME,
	MODE_ASM,
};

struct options {
	enum mode mode;
	unsigned int threads;
	unsigned int functions;
	double seconds;
	bool cpu_time; /* --cpu-seconds: seconds of CPU time */
	enum jitring_engine engine;
	const char *dir;
	const char *prefix;
	bool unwind;
	const char *lines; /* asm: the line table's file, or NULL */
};

static struct options opt = {
	.mode = MODE_RUNTIME,
	.threads = 4,
	.functions = 64,
	.seconds = 2.0,
	.engine = JITRING_ENGINE_RINGS,
	.dir = NULL,
	.prefix = NULL,		/* per mode, see main() */
	.unwind = true,
};

static uint64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static struct jitring *jr;
static pthread_barrier_t start_barrier;
static atomic_bool stop;

/* Iterations per call of function n in one round: 64 Ki for function 0,
 * halving down to a floor, so a few functions take most of the time. */
static uint64_t iterations_of(unsigned int n)
{
	return n < 12 ? (UINT64_C(65536) >> n) : 16;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static const char *engine_name(uint32_t engine)
{
	switch (engine) {
	case JITRING_ENGINE_RINGS:
		return "rings";
	case JITRING_ENGINE_MUTEX:
		return "mutex";
	default:
		return "?";
	}
}

static void print_stats(const struct jitring_stats *st)
{
	printf("stats:\n");
#define P(f) printf("  %-18s %" PRIu64 "\n", #f, (uint64_t)st->f)
	P(entries_written);
	P(records_written);
	P(bytes_written);
	P(refused_invalid);
	P(refused_nomem);
	P(refused_dropped);
	P(refused_shutdown);
	P(refused_io);
	P(lost_io);
	P(flushes);
	P(ring_full_waits);
	P(refills_ahead);
	P(refills_waited);
	P(batches);
	P(late_entries);
	P(holdback_max_ns);
	P(threads_attached);
	P(threads_total);
	P(rings_grown);
	P(trampoline_copies);
	P(trampoline_arenas_ahead);
	P(trampoline_arenas_waited);
#undef P
	printf("  %-18s %d\n", "io_error", st->io_error);
}

/* Open the writer: before any JIT code is executable (the marker mapping). */
static int open_writer(void)
{
	struct jitring_config cfg = JITRING_CONFIG_INIT;
	int ret;

	cfg.engine = opt.engine;
	cfg.dir = opt.dir;
	ret = jitring_open(&cfg, &jr);
	if (ret < 0)
		fprintf(stderr, "testjit: jitring_open: %s\n", strerror(-ret));
	return ret;
}

/*
 * Let the workers run for opt.seconds: on the clock, or with --cpu-seconds
 * until the process has used that much more CPU time.
 */
static void run_for_seconds(void)
{
	clockid_t clk = opt.cpu_time ? CLOCK_PROCESS_CPUTIME_ID :
				       CLOCK_MONOTONIC;
	uint64_t end = clock_ns(clk) + (uint64_t)(opt.seconds * 1e9);
	struct timespec until = { (time_t)(end / 1000000000u),
				  (long)(end % 1000000000u) };

	/* Linux sleeps on the process's CPU clock too (since 2.6.12). */
	while (clock_nanosleep(clk, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
}

/* Flush and close the writer, then read its stats.  Returns 0 or 1. */
static int close_writer(struct jitring_stats *st)
{
	int ret, status = 0;

	ret = jitring_flush(jr);
	if (ret < 0) {
		fprintf(stderr, "testjit: jitring_flush: %s\n", strerror(-ret));
		status = 1;
	}
	ret = jitring_close(jr);
	if (ret < 0) {
		fprintf(stderr, "testjit: jitring_close: %s\n", strerror(-ret));
		status = 1;
	}
	memset(st, 0, sizeof(*st));
	st->struct_size = sizeof(*st);
	jitring_stats(jr, st);
	return status;
}

/* Sort @n call times; their mean, or 0. */
static double sort_times(uint64_t *times, uint64_t n, uint64_t sum)
{
	if (!n)
		return 0.0;
	qsort(times, n, sizeof(*times), cmp_u64);
	return (double)sum / (double)n;
}

/* The summary's first lines, common to both modes. */
static void print_head(const char *mode, uint32_t engine)
{
	printf("== testjit summary ==\n");
	printf("mode: %s\n", mode);
	printf("pid: %d\n", (int)getpid());
	printf("dump: %s/jit-%d.dump\n",
	       opt.dir ? opt.dir :
	       getenv("JITRING_DIR") ? getenv("JITRING_DIR") : "/tmp",
	       (int)getpid());
	printf("engine: %s\n", engine_name(engine));
	printf("threads: %u\n", opt.threads);
}

/*
 * The first call on a thread takes a ring: report it apart from the
 * steady state, whose times also include preemption (more threads than
 * cores), hence the median next to the mean.
 */
static void print_call_times(const char *fn, uint64_t first_ns,
			     uint32_t engine, const uint64_t *times,
			     uint64_t n, double mean)
{
	printf("%s first call: %.0f ns mean over %u threads%s\n", fn,
	       (double)first_ns / opt.threads, opt.threads,
	       engine == JITRING_ENGINE_RINGS ?
		       " (takes the thread's ring)" : "");
	if (n)
		printf("%s other calls: %" PRIu64 " calls, median %" PRIu64
		       " ns, p99 %" PRIu64 " ns, mean %.0f ns\n", fn, n,
		       times[n / 2], times[n * 99 / 100], mean);
}

#if defined(__x86_64__)

/*
 * The generated function, void f(uint64_t iterations):
 *
 *   0: 55            push %rbp
 *   1: 48 89 e5      mov  %rsp,%rbp
 *   4: 48 85 ff      test %rdi,%rdi
 *   7: 74 05         je   e
 *   9: 48 ff cf      dec  %rdi          <- the hot loop
 *   c: 75 fb         jne  9
 *   e: 5d            pop  %rbp
 *   f: c3            ret
 *  10: 8 bytes of salt (thread, n), never executed
 *
 * The salt makes every copy's bytes distinct, so no perf build that derives
 * build-ids from the code can merge two copies.
 */
#define CODE_OFF_MOV 1	/* after push %rbp */
#define CODE_OFF_BODY 4 /* after mov %rsp,%rbp */
#define CODE_OFF_RET 15 /* after pop %rbp */
#define CODE_SALT 16
#define CODE_SIZE 24

static const unsigned char loop_code[] = {
	0x55,
	0x48, 0x89, 0xe5,
	0x48, 0x85, 0xff,
	0x74, 0x05,
	0x48, 0xff, 0xcf,
	0x75, 0xfb,
	0x5d,
	0xc3,
};

/*
 * --lines: void f(uint64_t iterations), two loops of the same cost:
 *
 *   0: 55            push %rbp          <- row 1: line 10
 *   1: 48 89 e5      mov  %rsp,%rbp
 *   4: 48 89 f8      mov  %rdi,%rax
 *   7: 48 85 ff      test %rdi,%rdi
 *   a: 74 0a         je   16
 *   c: 48 ff cf      dec  %rdi          <- row 2: line 20, the first loop
 *   f: 75 fb         jne  c
 *  11: 48 ff c8      dec  %rax          <- row 3: line 30, the second loop
 *  14: 75 fb         jne  11
 *  16: 5d            pop  %rbp
 *  17: c3            ret
 *  18: 8 bytes of salt
 *
 * Row 3 is the last row and starts inside the code: perf 6.1 gives its
 * samples no line unless the table is closed at the code's end (the
 * library does that).
 */
#define LINES_OFF_RET 0x17
#define LINES_SALT 0x18
#define LINES_SIZE 0x20

static const unsigned char lines_code[] = {
	0x55,
	0x48, 0x89, 0xe5,
	0x48, 0x89, 0xf8,
	0x48, 0x85, 0xff,
	0x74, 0x0a,
	0x48, 0xff, 0xcf,
	0x75, 0xfb,
	0x48, 0xff, 0xc8,
	0x75, 0xfb,
	0x5d,
	0xc3,
};

static const struct {
	uint32_t off;
	int32_t line;
} lines_rows[] = { { 0x00, 10 }, { 0x0c, 20 }, { 0x11, 30 } };

_Static_assert(sizeof(loop_code) == CODE_SALT, "salt follows the code");
_Static_assert(sizeof(lines_code) == LINES_SALT, "salt follows the code");

/* The template in use: loop_code, or lines_code with --lines. */
static const unsigned char *code_tmpl = loop_code;
static unsigned int code_len = sizeof(loop_code);
static unsigned int code_size = CODE_SIZE;

/* DWARF register numbers, x86_64 psABI. */
#define DW_RBP 6
#define DW_RSP 7
#define DW_RA 16

static struct jitring_cfi_op loop_ops[] = {
	/* entry: CFA = rsp + 8, return address at CFA - 8 */
	{ 0, JITRING_CFI_DEF_CFA, DW_RSP, 8 },
	{ 0, JITRING_CFI_OFFSET, DW_RA, -8 },
	/* after push %rbp: CFA = rsp + 16, rbp saved at CFA - 16 */
	{ CODE_OFF_MOV, JITRING_CFI_DEF_CFA_OFFSET, 0, 16 },
	{ CODE_OFF_MOV, JITRING_CFI_OFFSET, DW_RBP, -16 },
	/* after mov %rsp,%rbp: CFA = rbp + 16 */
	{ CODE_OFF_BODY, JITRING_CFI_DEF_CFA_REGISTER, DW_RBP, 0 },
	/* after pop %rbp: CFA = rsp + 8, rbp restored */
	{ CODE_OFF_RET, JITRING_CFI_DEF_CFA, DW_RSP, 8 },
	{ CODE_OFF_RET, JITRING_CFI_RESTORE, DW_RBP, 0 },
};

#define OP_RET_FIRST 5 /* the two ops at CODE_OFF_RET, patched for --lines */

static const struct jitring_cfi loop_cfi = {
	.code_align = 1,
	.data_align = -8,
	.ra_reg = DW_RA,
	.nr_init = 2,
	.nr_ops = sizeof(loop_ops) / sizeof(loop_ops[0]),
	.ops = loop_ops,
};

typedef void (*jit_fn)(uint64_t iterations);

static unsigned char eh_frame[JITRING_EH_FRAME_MAX];
static uint32_t eh_frame_size;
static size_t slot_size;
static size_t page_size;

struct worker {
	pthread_t thread;
	unsigned int id;
	unsigned char *arena;
	size_t arena_size;
	jit_fn *fns;
	uint64_t *write_ns;	/* time inside each jitring_write() call */
	uint64_t writes_ok;
	uint64_t write_errors;
	int first_error;
	uint64_t calls;
	uint64_t *calls_per_fn;
	int setup_error;	/* negative errno of mmap/mprotect */
};

/*
 * The distinctive C frame the JIT code is called from: the call-graph test
 * checks that perf unwinds from a jit_func_* frame into this one.  Kept out
 * of line, and compiled with frame pointers (tests/e2e/meson.build).
 */
__attribute__((noinline)) void jit_caller_hot(struct worker *w);
__attribute__((noinline)) void jit_caller_hot(struct worker *w)
{
	unsigned int n;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (n = 0; n < opt.functions; n++) {
			w->fns[n](iterations_of(n));
			w->calls_per_fn[n]++;
		}
		w->calls += opt.functions;
		/* Keep the call above from becoming a tail call. */
		__asm__ __volatile__("" ::: "memory");
	}
}

/* Make the pages holding [p, p + len) writable or executable. */
static int protect(unsigned char *p, size_t len, int prot)
{
	uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(page_size - 1);
	uintptr_t hi = ALIGN_UP((uintptr_t)p + len, page_size);

	if (mprotect((void *)lo, hi - lo, prot) != 0)
		return -errno;
	return 0;
}

static int make_function(struct worker *w, unsigned int n)
{
	unsigned char *code = w->arena + (size_t)n * slot_size;
	struct jitring_line rows[3];
	struct jitring_entry e;
	char name[64];
	uint64_t salt, t0, t1;
	int64_t idx;
	int ret;

	/* The arena is per thread: nothing else runs in these pages now. */
	ret = protect(code, slot_size, PROT_READ | PROT_WRITE);
	if (ret)
		return ret;
	memcpy(code, code_tmpl, code_len);
	salt = ((uint64_t)w->id << 32) | n;
	memcpy(code + code_len, &salt, sizeof(salt));
	ret = protect(code, slot_size, PROT_READ | PROT_EXEC);
	if (ret)
		return ret;
	__builtin___clear_cache((char *)code, (char *)code + code_size);

	snprintf(name, sizeof(name), "%st%u_%u", opt.prefix, w->id, n);
	memset(&e, 0, sizeof(e));
	e.name = name;
	e.code_addr = code;
	e.code_size = code_size;
	if (opt.unwind) {
		e.eh_frame = eh_frame;
		e.eh_frame_size = eh_frame_size;
	}
	if (opt.lines) {
		/* The natural table: one row per part, none at the end. */
		for (unsigned int i = 0; i < 3; i++) {
			rows[i].addr = (uint64_t)(uintptr_t)code +
				       lines_rows[i].off;
			rows[i].line = lines_rows[i].line;
			rows[i].discrim = 0;
			rows[i].file = opt.lines;
		}
		e.nr_lines = 3;
		e.lines = rows;
	}
	t0 = now_ns();
	idx = jitring_write(jr, &e);
	t1 = now_ns();
	w->write_ns[n] = t1 - t0;
	if (idx > 0) {
		w->writes_ok++;
	} else {
		w->write_errors++;
		if (!w->first_error)
			w->first_error = (int)idx;
	}

	/* Described: now it may run. */
	w->fns[n] = (jit_fn)(uintptr_t)code;
	w->fns[n](1);
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned int n;
	void *p;

	/* Reserve the whole arena, then open it up page by page. */
	p = mmap(NULL, w->arena_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED) {
		w->setup_error = -errno;
	} else {
		w->arena = p;
		for (n = 0; n < opt.functions; n++) {
			w->setup_error = make_function(w, n);
			if (w->setup_error)
				break;
		}
	}
	pthread_barrier_wait(&start_barrier);
	if (!w->setup_error)
		jit_caller_hot(w);
	return NULL;
}

static int run_asm(void)
{
	struct jitring_stats st;
	struct worker *ws;
	uint64_t total_ok = 0, total_err = 0, total_calls = 0;
	uint64_t first_ns = 0, steady_ns = 0, hot_calls = 0;
	uint64_t *times = NULL, nr_times = 0;
	double wall_rate, span_s, steady_mean = 0.0;
	uint64_t t_start, t_created, t_end;
	unsigned int i;
	int ret, status = 0, first_error = 0;
	size_t need;

	page_size = (size_t)sysconf(_SC_PAGESIZE);
	if (opt.lines) {
		code_tmpl = lines_code;
		code_len = sizeof(lines_code);
		code_size = LINES_SIZE;
		loop_ops[OP_RET_FIRST].pc = LINES_OFF_RET;
		loop_ops[OP_RET_FIRST + 1].pc = LINES_OFF_RET;
	}
	ret = jitring_eh_frame_build(&loop_cfi, code_size, eh_frame,
				     sizeof(eh_frame));
	if (ret < 0) {
		fprintf(stderr, "testjit: jitring_eh_frame_build: %s\n",
			strerror(-ret));
		return 1;
	}
	eh_frame_size = (uint32_t)ret;

	/*
	 * perf maps each function as [code, code + ALIGN_8(code_size) +
	 * mapped_size), mapped_size = ALIGN_16(eh_frame_size + 20 byte
	 * .eh_frame_hdr): a slot must hold all of it, so no neighbour is
	 * inside another function's mapping.  A power of two keeps slots
	 * from straddling pages.
	 */
	need = ALIGN_UP(code_size, 8) + ALIGN_UP(eh_frame_size + 20u, 16);
	for (slot_size = 64; slot_size < need; slot_size *= 2)
		;

	if (open_writer() < 0)
		return 1;

	ws = calloc(opt.threads, sizeof(*ws));
	if (!ws)
		return 1;
	atomic_store(&stop, false);
	pthread_barrier_init(&start_barrier, NULL, opt.threads + 1);
	t_start = now_ns();
	for (i = 0; i < opt.threads; i++) {
		struct worker *w = &ws[i];

		w->id = i;
		w->arena_size = ALIGN_UP((uint64_t)opt.functions * slot_size,
					 page_size);
		w->fns = calloc(opt.functions, sizeof(*w->fns));
		w->calls_per_fn = calloc(opt.functions, sizeof(uint64_t));
		w->write_ns = calloc(opt.functions, sizeof(uint64_t));
		if (!w->fns || !w->calls_per_fn || !w->write_ns) {
			fprintf(stderr, "testjit: out of memory\n");
			return 1;
		}
		ret = pthread_create(&w->thread, NULL, worker_main, w);
		if (ret) {
			fprintf(stderr, "testjit: pthread_create: %s\n",
				strerror(ret));
			return 1;
		}
	}
	pthread_barrier_wait(&start_barrier);
	t_created = now_ns();

	/* Run for opt.seconds from the moment every function exists. */
	run_for_seconds();
	atomic_store(&stop, true);
	for (i = 0; i < opt.threads; i++)
		pthread_join(ws[i].thread, NULL);
	t_end = now_ns();

	status |= close_writer(&st);

	for (i = 0; i < opt.threads; i++) {
		struct worker *w = &ws[i];

		if (w->setup_error) {
			fprintf(stderr, "testjit: thread %u: mmap/mprotect: %s\n",
				i, strerror(-w->setup_error));
			status = 1;
		}
		if (w->write_errors && !first_error)
			first_error = w->first_error;
		total_ok += w->writes_ok;
		total_err += w->write_errors;
		total_calls += w->calls;
		if (!w->setup_error && w->write_ns)
			first_ns += w->write_ns[0];
		if (opt.functions)
			hot_calls += w->calls_per_fn[0];
	}
	if (total_err) {
		fprintf(stderr, "testjit: %" PRIu64
			" jitring_write calls failed, first: %s\n",
			total_err, strerror(-first_error));
		status = 1;
	}
	if (st.entries_written != total_ok) {
		fprintf(stderr, "testjit: entries_written %" PRIu64
			" != successful writes %" PRIu64 "\n",
			st.entries_written, total_ok);
		status = 1;
	}

	if (opt.functions > 1) {
		times = calloc((size_t)opt.threads * (opt.functions - 1),
			       sizeof(*times));
		for (i = 0; times && i < opt.threads; i++) {
			unsigned int n;

			if (ws[i].setup_error)
				continue;
			for (n = 1; n < opt.functions; n++) {
				times[nr_times++] = ws[i].write_ns[n];
				steady_ns += ws[i].write_ns[n];
			}
		}
		steady_mean = sort_times(times, nr_times, steady_ns);
	}
	span_s = (double)(t_created - t_start) / 1e9;
	wall_rate = span_s > 0 ? (double)total_ok / span_s : 0.0;
	print_head("asm (hand-assembled loops, jitring_write)", st.engine);
	printf("functions: %" PRIu64 " (%u per thread, %zu-byte slots, "
	       "code %u bytes, eh_frame %s)\n",
	       total_ok, opt.functions, slot_size, code_size,
	       opt.unwind ? "on" : "off");
	if (opt.lines)
		printf("lines: %s:10 at +0x0, :20 at +0xc (loop 1), :30 at "
		       "+0x11 (loop 2)\n", opt.lines);
	print_call_times("jitring_write", first_ns, st.engine, times,
			 nr_times, steady_mean);
	if (steady_mean > 0 && times[nr_times / 2])
		printf("entries/s: %.0f per thread from the mean, %.0f from "
		       "the median (time inside jitring_write, first calls "
		       "excluded)\n",
		       1e9 / steady_mean, 1e9 / (double)times[nr_times / 2]);
	printf("generation: %.3f s wall for all threads, %.0f functions/s "
	       "including mmap/mprotect\n", span_s, wall_rate);
	printf("calls: %" PRIu64 " JIT calls in %.2f s, %" PRIu64
	       " of them to function 0 of a thread\n",
	       total_calls, (double)(t_end - t_created) / 1e9, hot_calls);
	print_stats(&st);
	printf("result: %s\n", status ? "FAIL" : "ok");

	for (i = 0; i < opt.threads; i++) {
		free(ws[i].fns);
		free(ws[i].calls_per_fn);
		free(ws[i].write_ns);
		/* Arenas stay mapped: perf may still resolve samples. */
	}
	free(ws);
	free(times);
	pthread_barrier_destroy(&start_barrier);
	return status;
}

#else /* !__x86_64__ */

static int run_asm(void)
{
	printf("SKIP: --mode asm generates x86_64 code only\n");
	return EXIT_SKIP;
}

#endif

/* ------------------------------------------------------------------ */
/* --mode runtime: functions are copies from the trampoline kit.        */

typedef uint64_t (*eval_fn)(uint64_t fn, uint64_t work, uint64_t seed);
/* The built-in template: calls its fourth argument with the first three. */
typedef uint64_t (*trampoline_fn)(uint64_t fn, uint64_t work, uint64_t seed,
			     eval_fn eval);

struct rt_worker {
	pthread_t thread;
	unsigned int id;
	void **fns;
	uint64_t *get_ns;	/* time inside each jitring_trampolines_get() */
	uint64_t ok;
	int error;		/* first failed get, or 0 */
	uint64_t calls;
	uint64_t rounds;
	uint64_t created_ns;	/* when its last function was created */
	uint64_t sink;
};

static struct jitring_trampolines *tramps;

/*
 * The runtime's evaluator, called through each function's trampoline:
 * @work rounds of a function-specific LCG.  Out of line and with a frame
 * pointer (tests/e2e/meson.build), so perf's call chains show it under
 * the trampoline: jit_eval_hot <- <P><n> <- jit_runtime_loop.
 */
__attribute__((noinline)) uint64_t jit_eval_hot(uint64_t fn, uint64_t work,
						uint64_t seed);
__attribute__((noinline)) uint64_t jit_eval_hot(uint64_t fn, uint64_t work,
						uint64_t seed)
{
	uint64_t x = seed ^ (fn * 0x9e3779b97f4a7c15ull);

	for (uint64_t i = 0; i < work; i++) {
		x = x * 6364136223846793005ull + (2 * fn + 1);
		/* One step per iteration: no closed form, no vectors. */
		__asm__ __volatile__("" : "+r"(x));
	}
	return x;
}

/* Create this thread's next function: a fresh trampoline copy. */
static int create_function(struct rt_worker *w)
{
	unsigned int n = (unsigned int)w->ok;
	char name[256];
	uint64_t t0, t1;
	void *addr = NULL;
	int64_t idx;

	snprintf(name, sizeof(name), "%s%u", opt.prefix, n);
	t0 = now_ns();
	idx = jitring_trampolines_get(tramps, name, &addr);
	t1 = now_ns();
	w->get_ns[n] = t1 - t0;
	if (idx <= 0) {
		w->error = (int)idx;
		return -1;
	}
	/* Described: it may run now. */
	w->fns[n] = addr;
	w->ok++;
	if (w->ok == opt.functions)
		w->created_ns = t1;
	return 0;
}

/*
 * The runtime's dispatch loop.  Like a runtime warming up, a thread
 * discovers its functions as it goes (a few more every round, all of them
 * within about 64 rounds) while running every function it has once per
 * round, function n doing iterations_of(n) work, so function 0 is the
 * hottest.  Runs until stop, and at least until all functions exist.
 */
__attribute__((noinline)) void jit_runtime_loop(struct rt_worker *w);
__attribute__((noinline)) void jit_runtime_loop(struct rt_worker *w)
{
	unsigned int n, k, batch = opt.functions / 64 ? opt.functions / 64 : 1;

	while (w->ok < opt.functions ||
	       !atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (k = 0; k < batch && w->ok < opt.functions; k++)
			if (create_function(w))
				return;
		for (n = 0; n < w->ok; n++) {
			trampoline_fn f = (trampoline_fn)(uintptr_t)w->fns[n];

			w->sink += f(n, iterations_of(n), w->id, jit_eval_hot);
		}
		w->calls += w->ok;
		w->rounds++;
		__asm__ __volatile__("" ::: "memory");
	}
}

static void *rt_worker_main(void *arg)
{
	struct rt_worker *w = arg;

	pthread_barrier_wait(&start_barrier);
	jit_runtime_loop(w);
	return NULL;
}

static int run_runtime(void)
{
	struct jitring_trampoline_template tmpl;
	struct jitring_stats st;
	struct rt_worker *ws;
	uint64_t total_ok = 0, total_calls = 0, first_ns = 0, steady_ns = 0;
	uint64_t *times = NULL, nr_times = 0, hot_rounds = 0;
	uint64_t t_start, t_created, t_end;
	double span_s, steady_mean = 0.0;
	unsigned int i, failed = 0;
	int ret, status = 0, first_error = 0, eh;

	ret = jitring_trampoline_builtin(&tmpl);
	if (ret == -EOPNOTSUPP) {
		printf("SKIP: no built-in trampoline on this architecture\n");
		return EXIT_SKIP;
	}
	if (ret)
		return 1;
	if (!opt.unwind)
		tmpl.cfi = NULL;
	eh = tmpl.cfi ? jitring_eh_frame_build(tmpl.cfi, tmpl.code_size,
					       NULL, 0) : 0;

	if (open_writer() < 0)
		return 1;
	ret = jitring_trampolines_new(jr, &tmpl, &tramps);
	if (ret < 0) {
		fprintf(stderr, "testjit: jitring_trampolines_new: %s\n",
			strerror(-ret));
		return 1;
	}

	ws = calloc(opt.threads, sizeof(*ws));
	if (!ws)
		return 1;
	atomic_store(&stop, false);
	pthread_barrier_init(&start_barrier, NULL, opt.threads + 1);
	for (i = 0; i < opt.threads; i++) {
		struct rt_worker *w = &ws[i];

		w->id = i;
		w->fns = calloc(opt.functions, sizeof(*w->fns));
		w->get_ns = calloc(opt.functions, sizeof(*w->get_ns));
		if (!w->fns || !w->get_ns) {
			fprintf(stderr, "testjit: out of memory\n");
			return 1;
		}
		ret = pthread_create(&w->thread, NULL, rt_worker_main, w);
		if (ret) {
			fprintf(stderr, "testjit: pthread_create: %s\n",
				strerror(ret));
			return 1;
		}
	}
	pthread_barrier_wait(&start_barrier);
	t_start = now_ns();
	run_for_seconds();
	atomic_store(&stop, true);
	t_created = t_start;
	for (i = 0; i < opt.threads; i++) {
		pthread_join(ws[i].thread, NULL);
		if (ws[i].created_ns > t_created)
			t_created = ws[i].created_ns;
	}
	t_end = now_ns();

	status |= close_writer(&st);
	/* No copy runs any more and the writer is closed. */
	ret = jitring_trampolines_free(tramps);
	if (ret < 0) {
		fprintf(stderr, "testjit: jitring_trampolines_free: %s\n",
			strerror(-ret));
		status = 1;
	}

	for (i = 0; i < opt.threads; i++) {
		struct rt_worker *w = &ws[i];

		if (w->error) {
			failed++;
			if (!first_error)
				first_error = w->error;
		}
		total_ok += w->ok;
		total_calls += w->calls;
		hot_rounds += w->rounds;
		if (w->ok)
			first_ns += w->get_ns[0];
	}
	if (failed) {
		fprintf(stderr, "testjit: jitring_trampolines_get failed on "
			"%u threads, first: %s\n", failed,
			strerror(-first_error));
		status = 1;
	}
	if (st.trampoline_copies != total_ok || st.entries_written != total_ok) {
		fprintf(stderr, "testjit: trampoline_copies %" PRIu64
			", entries_written %" PRIu64 " != copies %" PRIu64
			"\n", st.trampoline_copies, st.entries_written, total_ok);
		status = 1;
	}

	if (opt.functions > 1) {
		times = calloc((size_t)opt.threads * (opt.functions - 1),
			       sizeof(*times));
		for (i = 0; times && i < opt.threads; i++) {
			for (unsigned int n = 1; n < ws[i].ok; n++) {
				times[nr_times++] = ws[i].get_ns[n];
				steady_ns += ws[i].get_ns[n];
			}
		}
		steady_mean = sort_times(times, nr_times, steady_ns);
	}
	span_s = (double)(t_created - t_start) / 1e9;
	print_head("runtime (jitring_trampolines_get, built-in trampoline)",
		   st.engine);
	printf("functions: %" PRIu64 " (%u per thread, named %s0..%s%u; "
	       "trampoline %u bytes, salt at %u, eh_frame %d bytes)\n",
	       total_ok, opt.functions, opt.prefix, opt.prefix,
	       opt.functions - 1, tmpl.code_size, tmpl.salt_offset, eh);
	print_call_times("jitring_trampolines_get", first_ns, st.engine,
			 times, nr_times, steady_mean);
	if (nr_times && times[nr_times / 2])
		printf("entries/s: %.0f per thread (from the median time "
		       "inside jitring_trampolines_get; the mean, %.0f ns, "
		       "also counts preemption: %u busy threads on %ld "
		       "CPUs); created at %.0f/s while running\n",
		       1e9 / (double)times[nr_times / 2], steady_mean,
		       opt.threads, sysconf(_SC_NPROCESSORS_ONLN),
		       span_s > 0 ? (double)total_ok / span_s : 0.0);
	printf("generation: all functions existed %.3f s after the start "
	       "(created while running)\n", span_s);
	printf("calls: %" PRIu64 " JIT calls in %.2f s (%" PRIu64
	       " rounds over the functions a thread had)\n", total_calls,
	       (double)(t_end - t_start) / 1e9, hot_rounds);
	print_stats(&st);
	printf("result: %s\n", status ? "FAIL" : "ok");

	for (i = 0; i < opt.threads; i++) {
		free(ws[i].fns);
		free(ws[i].get_ns);
	}
	free(ws);
	free(times);
	pthread_barrier_destroy(&start_barrier);
	return status;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: testjit [--mode runtime|asm] [--threads T] "
		   "[--functions F]\n"
		   "               [--seconds S | --cpu-seconds S] "
		   "[--engine rings|mutex] [--dir D]\n"
		   "               [--unwind|--no-unwind] [--name-prefix P]\n"
		   "               [--lines FILE]   (asm: two loops, a line "
		   "table in FILE)\n"
		   "Defaults: runtime mode, 4 threads, 64 functions each, 2 s, "
		   "rings,\n"
		   "$JITRING_DIR or /tmp, unwinding information on, prefix "
		   "py::func_ (runtime)\nor jit_func_ (asm).\n");
}

static bool parse_uint(const char *s, unsigned int lo, unsigned int hi,
		       unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = (unsigned int)v;
	return true;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "threads", required_argument, NULL, 't' },
		{ "functions", required_argument, NULL, 'f' },
		{ "seconds", required_argument, NULL, 's' },
		{ "cpu-seconds", required_argument, NULL, 'c' },
		{ "engine", required_argument, NULL, 'e' },
		{ "dir", required_argument, NULL, 'd' },
		{ "unwind", no_argument, NULL, 'u' },
		{ "no-unwind", no_argument, NULL, 'U' },
		{ "name-prefix", required_argument, NULL, 'p' },
		{ "lines", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "m:t:f:s:c:e:d:uUp:l:h", opts,
				NULL)) != -1) {
		switch (c) {
		case 'm':
			if (!strcmp(optarg, "runtime"))
				opt.mode = MODE_RUNTIME;
			else if (!strcmp(optarg, "asm"))
				opt.mode = MODE_ASM;
			else
				goto bad;
			break;
		case 't':
			if (!parse_uint(optarg, 1, 1024, &opt.threads))
				goto bad;
			break;
		case 'f':
			if (!parse_uint(optarg, 1, 1000000, &opt.functions))
				goto bad;
			break;
		case 's':
		case 'c':
			opt.cpu_time = c == 'c';
			errno = 0;
			opt.seconds = strtod(optarg, &end);
			if (errno || end == optarg || *end ||
			    !(opt.seconds >= 0 && opt.seconds <= 3600))
				goto bad;
			break;
		case 'e':
			if (!strcmp(optarg, "rings"))
				opt.engine = JITRING_ENGINE_RINGS;
			else if (!strcmp(optarg, "mutex"))
				opt.engine = JITRING_ENGINE_MUTEX;
			else
				goto bad;
			break;
		case 'd':
			opt.dir = optarg;
			break;
		case 'u':
			opt.unwind = true;
			break;
		case 'U':
			opt.unwind = false;
			break;
		case 'p':
			if (strlen(optarg) > 200)
				goto bad;
			opt.prefix = optarg;
			break;
		case 'l':
			if (!optarg[0] || strlen(optarg) > 1024)
				goto bad;
			opt.lines = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "testjit: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!opt.prefix)
		opt.prefix = opt.mode == MODE_ASM ? "jit_func_" : "py::func_";
	return opt.mode == MODE_ASM ? run_asm() : run_runtime();
bad:
	fprintf(stderr, "testjit: bad option value '%s'\n", optarg);
	usage(stderr);
	return EXIT_USAGE;
}
