/* SPDX-License-Identifier: MIT */
/*
 * reopenjit: profiling switched off and on again in one process, as a
 * runtime that deactivates and reactivates perf support does (CPython's
 * sys.deactivate_stack_trampoline()/activate_stack_trampoline()).
 *
 *   reopenjit --engine rings|mutex --dir D [--seconds S]
 *
 * Session 1 opens a writer on D, generates FUNCS hot x86_64 loops named
 * "sess1_fn_<n>", describes each with jitring_write() before calling it,
 * runs them for S seconds of CPU time (perf's cpu-clock samples count CPU
 * time: as many on a loaded machine as on an idle one) and closes the
 * writer.  Session 2 does the same with a new writer on the same D
 * ("sess2_fn_<n>", new code elsewhere).  Both sessions' entries go to the
 * same jit-<pid>.dump.  Every function's bytes differ (its loop count), so
 * no two injected ELFs share a build-id.
 *
 * Prints "pid: <pid>" and "result: ok" (or what failed); exit 0 ok, 1 a
 * jitring call failed, 2 usage, 77 not x86_64.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "jitring.h"

#define FUNCS 4
#define SLOT 64

/* This thread's CPU time, in ns. */
static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
/* push rbp; mov rbp,rsp; mov ecx,N; 1: dec ecx; jnz 1b; pop rbp; ret */
static size_t emit_loop(unsigned char *p, uint32_t n)
{
	static const unsigned char head[] = { 0x55, 0x48, 0x89, 0xe5, 0xb9 };
	static const unsigned char tail[] = { 0xff, 0xc9, 0x75, 0xfc, 0x5d,
					      0xc3 };

	memcpy(p, head, sizeof(head));
	memcpy(p + sizeof(head), &n, 4);
	memcpy(p + sizeof(head) + 4, tail, sizeof(tail));
	return sizeof(head) + 4 + sizeof(tail);
}

static int session(int s, uint32_t engine, const char *dir, double seconds)
{
	struct jitring_config c;
	struct jitring *jr;
	unsigned char *arena;
	void (*fn[FUNCS])(void);
	size_t len[FUNCS];
	uint64_t end;
	int ret;

	jitring_config_init(&c);
	c.engine = engine;
	c.dir = dir;
	ret = jitring_open(&c, &jr);
	if (ret) {
		printf("result: session %d: jitring_open: %s\n", s,
		       strerror(-ret));
		return 1;
	}
	/* Never unmapped: perf may still attribute samples to it. */
	arena = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED)
		return 1;
	for (int n = 0; n < FUNCS; n++)
		len[n] = emit_loop(arena + n * SLOT,
				   100000u + 1000u * (uint32_t)s + (uint32_t)n);
	if (mprotect(arena, 4096, PROT_READ | PROT_EXEC))
		return 1;
	for (int n = 0; n < FUNCS; n++) {
		char name[32];
		struct jitring_entry e = {
			.name = name,
			.code_addr = arena + n * SLOT,
			.code_size = len[n],
		};
		int64_t id;

		snprintf(name, sizeof(name), "sess%d_fn_%d", s, n);
		id = jitring_write(jr, &e);
		if (id <= 0) {
			printf("result: session %d: jitring_write: %s\n", s,
			       strerror((int)-id));
			return 1;
		}
		fn[n] = (void (*)(void))(uintptr_t)(arena + n * SLOT);
	}
	end = now_ns() + (uint64_t)(seconds * 1e9);
	while (now_ns() < end)
		for (int n = 0; n < FUNCS; n++)
			fn[n]();
	ret = jitring_close(jr);
	if (ret) {
		printf("result: session %d: jitring_close: %s\n", s,
		       strerror(-ret));
		return 1;
	}
	return 0;
}
#endif

int main(int argc, char **argv)
{
	uint32_t engine = JITRING_ENGINE_RINGS;
	const char *dir = NULL;
	double seconds = 1.0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--engine"))
			engine = !strcmp(argv[i + 1], "mutex") ?
					 JITRING_ENGINE_MUTEX :
					 JITRING_ENGINE_RINGS;
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else
			return 2;
	}
	if (!dir || seconds <= 0)
		return 2;
#if defined(__x86_64__)
	printf("pid: %d\n", (int)getpid());
	if (session(1, engine, dir, seconds) ||
	    session(2, engine, dir, seconds))
		return 1;
	printf("result: ok\n");
	return 0;
#else
	printf("SKIP: x86_64 code only\n");
	return 77;
#endif
}
