/* SPDX-License-Identifier: MIT */
/*
 * The flusher's CPU while someone waits for it behind a stalled producer.
 *
 *   bench/stall_driver ENGINE HOLDBACK_MS STALL_MS
 *
 * A producer thread P calls jitring_write() with code_bytes on a page
 * registered with userfaultfd: the encoder's copy of the code faults after
 * P took its timestamp, so P stalls exactly where a descheduled or
 * page-faulting JIT thread would, in a release build without test hooks.
 * Another thread then writes an entry stamped after P's, which the
 * flusher must hold back.  Measured, as CPU time of the "jitring-flush"
 * thread (bench_flusher_cpu_ns(): /proc/self/task/TID/schedstat) over
 * wall time:
 *   flush: jitring_flush() from a third thread; it returns once P is
 *          marked LATE (HOLDBACK_MS);
 *   close: jitring_close() while P is still stalled; the page is filled
 *          STALL_MS later and close returns once P committed;
 *   idle:  one second with nothing to do.
 * Prints one JSON line per phase.  Exits 77 if userfaultfd is not
 * permitted (it needs CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "harness.h"
#include "jitring.h"

static struct jitring *jr;
static int uffd = -1;
static uint8_t *page;
static long pagesz;
static char dir[] = "/tmp/jitring-stall-XXXXXX";

static const uint8_t code[16] = { 0xc3 };

static int64_t write_at(const char *name, uint64_t addr, const void *bytes)
{
	struct jitring_entry e = {
		.name = name,
		.code_addr = (const void *)(uintptr_t)addr,
		.code_size = sizeof(code),
		.code_bytes = bytes,
	};

	return jitring_write(jr, &e);
}

static void *stalled_main(void *arg)
{
	(void)arg;
	/* Faults inside the encoder's copy, after the timestamp. */
	return (void *)(intptr_t)write_at("P", 0x500000, page);
}

static void *flush_main(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)jitring_flush(jr);
}

/* Resolve P's fault: fill the page. */
static void unstall(void)
{
	static uint8_t src[65536];
	struct uffdio_copy c = {
		.dst = (uintptr_t)page,
		.src = (uintptr_t)src,
		.len = (uint64_t)pagesz,
	};

	src[0] = 0xc3;
	if (ioctl(uffd, UFFDIO_COPY, &c))
		perror("UFFDIO_COPY");
}

/* Wait until P is blocked in the fault. */
static int wait_fault(void)
{
	struct pollfd p = { .fd = uffd, .events = POLLIN };

	return poll(&p, 1, 10000) == 1 ? 0 : -1;
}

/* The close phase: who ends the stall, when, and what it saw. */
static struct {
	uint64_t ns, t0, c0;
	uint64_t wall, cpu;
} stall;

static void *unstall_main(void *arg)
{
	(void)arg;
	t_sleep_ns(stall.ns);
	stall.cpu = bench_flusher_cpu_ns() - stall.c0;
	stall.wall = bench_now_ns() - stall.t0;
	unstall();
	return NULL;
}

static void report(const char *phase, const char *engine, uint64_t wall,
		   uint64_t cpu, int ret)
{
	printf("{\"kind\": \"flusher_cpu\", \"phase\": \"%s\", \"engine\": "
	       "\"%s\", \"wall_ms\": %.1f, \"flusher_cpu_ms\": %.2f, "
	       "\"cpu_share\": %.4f, \"ret\": %d}\n",
	       phase, engine, wall / 1e6, cpu / 1e6,
	       wall ? (double)cpu / (double)wall : 0.0, ret);
}

static int setup_uffd(void)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;

	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api))
		return -1;
	page = mmap(NULL, (size_t)pagesz, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return -1;
	reg = (struct uffdio_register){
		.range = { (uintptr_t)page, (uint64_t)pagesz },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	return ioctl(uffd, UFFDIO_REGISTER, &reg);
}

int main(int argc, char **argv)
{
	struct jitring_config cfg;
	pthread_t p, f;
	uint64_t t0, c0, hold_ms, stall_ms;
	void *r;
	int ret;

	if (argc < 4) {
		fprintf(stderr, "usage: %s rings|mutex HOLDBACK_MS STALL_MS\n",
			argv[0]);
		return 2;
	}
	hold_ms = strtoull(argv[2], NULL, 10);
	stall_ms = strtoull(argv[3], NULL, 10);
	pagesz = sysconf(_SC_PAGESIZE);
	if (setup_uffd()) {
		printf("{\"kind\": \"flusher_cpu\", \"skip\": \"userfaultfd: "
		       "%s\"}\n", strerror(errno));
		return 77;
	}
	if (!mkdtemp(dir))
		return 1;
	jitring_config_init(&cfg);
	cfg.dir = dir;
	cfg.engine = strcmp(argv[1], "mutex") ? JITRING_ENGINE_RINGS :
						JITRING_ENGINE_MUTEX;
	cfg.holdback_ms = (uint32_t)hold_ms;
	if (jitring_open(&cfg, &jr))
		return 1;
	/* idle: a second with nothing to do (after the first rounds; the
	 * flusher has named itself by then). */
	t_sleep_ns(100 * 1000000ull);
	t0 = bench_now_ns();
	c0 = bench_flusher_cpu_ns();
	t_sleep_ns(1000 * 1000000ull);
	report("idle", argv[1], bench_now_ns() - t0, bench_flusher_cpu_ns() - c0, 0);
	if (cfg.engine == JITRING_ENGINE_MUTEX) {
		/* No flusher thread: nothing more to measure. */
		jitring_close(jr);
		return 0;
	}

	/* flush behind a stalled producer */
	pthread_create(&p, NULL, stalled_main, NULL);
	if (wait_fault())
		return 1;
	if (write_at("Q", 0x510000, code) <= 0)
		return 1;
	t0 = bench_now_ns();
	c0 = bench_flusher_cpu_ns();
	pthread_create(&f, NULL, flush_main, NULL);
	pthread_join(f, &r);
	report("flush", argv[1], bench_now_ns() - t0, bench_flusher_cpu_ns() - c0,
	       (int)(intptr_t)r);

	/*
	 * close while P is still stalled: the flusher must wait for P's
	 * commit.  Measured over the stall, sampled by the thread that ends
	 * it (the flusher is gone once close returns).
	 */
	stall.ns = stall_ms * 1000000ull;
	stall.t0 = bench_now_ns();
	stall.c0 = bench_flusher_cpu_ns();
	pthread_create(&f, NULL, unstall_main, NULL);
	ret = jitring_close(jr);
	pthread_join(f, NULL);
	report("close", argv[1], stall.wall, stall.cpu, ret);
	pthread_join(p, NULL);
	return 0;
}
