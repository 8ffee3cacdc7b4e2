/* SPDX-License-Identifier: MIT */
/*
 * The built-in trampoline template of this architecture, executed, and
 * unwound by an independent DWARF unwinder: libgcc's, the one C++
 * exceptions and glibc's backtrace() use.
 *
 *  - A copy of the template in its own RX page is called with three
 *    arguments and a function pointer as the last one (CPython's shape):
 *    the callee must see the three arguments unchanged and its return
 *    value must come back.
 *  - From inside the callee, _Unwind_Backtrace() runs over the .eh_frame
 *    that jitring_eh_frame_build() made for the template, registered with
 *    __register_frame() (pc_begin pointed at the copy): it must step from
 *    the callee into the trampoline (at the return address after its
 *    call) and on into the trampoline's caller, at the same address the
 *    frame-pointer chain gives.  Unregistered, the same walk must stop at
 *    the trampoline: the CFI is what carries it through.
 *
 * Built for the host (unit suite) and by tests/cross/run-aarch64.sh for
 * aarch64, where it runs under qemu-user: the aarch64 template is then
 * executed and unwound too, not only byte-checked.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <unwind.h>

#include "harness.h"
#include "jitring.h"
#include "format/cfi_presets.h"
#include "format/eh_frame.h"

/* libgcc's registry of .eh_frame sections for code it cannot find. */
extern void __register_frame(void *begin);
extern void __deregister_frame(void *begin);

#if defined(__x86_64__)
#define TRAMP jitring_trampoline_x86_64
#define TRAMP_SIZE jitring_trampoline_x86_64_size
#define TRAMP_RET 6  /* after call *%rcx */
#define PRESET JITRING_CFI_X86_64_FP_TRAMPOLINE
#elif defined(__aarch64__)
#define TRAMP jitring_trampoline_aarch64
#define TRAMP_SIZE jitring_trampoline_aarch64_size
#define TRAMP_RET 12 /* after blr x3 */
#define PRESET JITRING_CFI_AARCH64_FP_TRAMPOLINE
#endif

#ifdef TRAMP

typedef long (*target_fn)(long, long, long);
typedef long (*trampoline_fn)(long, long, long, target_fn);

#define MAX_PCS 32

static uintptr_t pcs[MAX_PCS];
static int npcs;
static long seen[3];
static uintptr_t fp_ret_tramp, fp_ret_caller;

static _Unwind_Reason_Code collect(struct _Unwind_Context *ctx, void *arg)
{
	(void)arg;
	if (npcs == MAX_PCS)
		return _URC_END_OF_STACK;
	pcs[npcs++] = (uintptr_t)_Unwind_GetIP(ctx);
	return _URC_NO_REASON;
}

/* Frame records on both: fp[0] = the caller's fp, fp[1] = return address. */
static __attribute__((noinline)) long callee(long a, long b, long c)
{
	void **fp = __builtin_frame_address(0);
	void **trampoline_fp = fp[0];

	seen[0] = a;
	seen[1] = b;
	seen[2] = c;
	fp_ret_tramp = (uintptr_t)fp[1];
	fp_ret_caller = (uintptr_t)trampoline_fp[1];
	npcs = 0;
	_Unwind_Backtrace(collect, NULL);
	return a + b * c;
}

static __attribute__((noinline)) long caller(trampoline_fn t)
{
	long r = t(11, 22, 33, callee);

	__asm__ volatile("" ::: "memory"); /* not a tail call */
	return r;
}

int main(void)
{
	long page = sysconf(_SC_PAGESIZE);
	struct jitring_eh_frame_info info;
	uint8_t *map, *eh, *code;
	int32_t rel;
	int n;

	/* Page 0: the .eh_frame (RW), page 1: the copy (RX), within 2 GiB. */
	map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	T_REQUIRE(map != MAP_FAILED);
	eh = map;
	code = map + page;
	memcpy(code, TRAMP, TRAMP_SIZE);
	T_REQUIRE(mprotect(code, (size_t)page, PROT_READ | PROT_EXEC) == 0);
	__builtin___clear_cache((char *)code, (char *)code + TRAMP_SIZE);

	n = jitring_eh_frame_build(jitring_cfi_preset(PRESET), TRAMP_SIZE, eh,
				   (size_t)page - 4);
	T_REQUIRE(n > 0);
	T_REQUIRE(jitring_eh_frame_check(eh, (uint32_t)n, &info) == 0);
	memset(eh + n, 0, 4); /* the section's terminator */
	rel = (int32_t)((intptr_t)code - (intptr_t)(eh + info.pc_begin_off));
	memcpy(eh + info.pc_begin_off, &rel, sizeof(rel));

	/* Control: no CFI for the copy, so the walk stops inside it. */
	T_CHECK_EQ(caller((trampoline_fn)(uintptr_t)code), 11 + 22 * 33);
	T_CHECK(npcs >= 2 && pcs[1] == (uintptr_t)code + TRAMP_RET);
	T_CHECK_EQ(npcs, 2);
	printf("unregistered: %d frame(s), the walk stops in the trampoline\n",
	       npcs);

	__register_frame(eh);
	T_CHECK_EQ(caller((trampoline_fn)(uintptr_t)code), 11 + 22 * 33);
	T_CHECK_EQ(seen[0], 11);
	T_CHECK_EQ(seen[1], 22);
	T_CHECK_EQ(seen[2], 33);
	T_CHECK_EQ(fp_ret_tramp, (uintptr_t)code + TRAMP_RET);
	T_REQUIRE(npcs >= 3);
	T_CHECK(pcs[1] == (uintptr_t)code + TRAMP_RET);
	T_CHECK(pcs[2] == fp_ret_caller);
	T_CHECK(pcs[2] > (uintptr_t)caller &&
		pcs[2] < (uintptr_t)caller + 256);
	/* And on through caller() and main() to the C runtime. */
	T_CHECK(npcs >= 4);
	printf("registered: %d frames: callee, trampoline+%d, caller+%lu, "
	       "...\n", npcs, TRAMP_RET,
	       (unsigned long)(pcs[2] - (uintptr_t)caller));
	__deregister_frame(eh);
	munmap(map, 2 * (size_t)page);
	return t_report();
}

#else

int main(void)
{
	t_skip("no built-in trampoline template for this architecture");
}

#endif
