/* SPDX-License-Identifier: MIT */
/*
 * libjitring-llvm-perf.so: LLVM's perf listener, replaced, for programs
 * that ask LLVM for it (LD_PRELOAD).  It defines the two names through
 * which programs ask, the C API's LLVMCreatePerfJITEventListener() and the
 * C++ llvm::JITEventListener::createPerfJITEventListener(), and the two
 * calls through which a C-API ORC program (PostgreSQL's llvmjit.so) builds
 * its JIT, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine() and
 * LLVMOrcCreateRTDyldObjectLinkingLayerWithSectionMemoryManager(), and
 * the two through which a C++ MCJIT program (lli) does,
 * llvm::EngineBuilder::setMCJITMemoryManager() and
 * llvm::EngineBuilder::create(TargetMachine *), to give it the layout perf
 * needs to unwind through every JIT function (layout.cpp).
 *
 * Preloaded, it lands in every process the environment reaches: shells,
 * scripts, helpers that never JIT.  So it is C and links only libc: no
 * libLLVM, no C++ runtime, no jitring, no constructor.  The first call of
 * one of these names finds the libLLVM that defines the real one
 * (dlsym(RTLD_NEXT) and dladdr()), reads its major version from its file
 * name (libLLVM-14.so.1; libLLVM.so.18.1 from LLVM 18 on), and dlopens
 * libjitring-llvm-perf-<major>.so from this library's own folder: the
 * listener built against that LLVM (perf_backend.cpp).  Each call then
 * forwards to it.  Where there is none (an LLVM the build did not have,
 * LLVM linked statically into the program), one line on stderr names the
 * LLVM found and those built for, and every call goes to LLVM's own
 * function (RTLD_NEXT): the program runs as without the preload.  If
 * jitring cannot open the dump, the program gets LLVM's own listener and
 * one line on stderr says why: turning profiling on never breaks the
 * program.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHIM_API __attribute__((visibility("default")))
#define CXX_CREATE "_ZN4llvm16JITEventListener26createPerfJITEventListenerEv"
/* llvm::EngineBuilder::setMCJITMemoryManager(std::unique_ptr<
 * RTDyldMemoryManager>) and llvm::EngineBuilder::create(TargetMachine *). */
#define CXX_SET_MM                                                             \
	"_ZN4llvm13EngineBuilder21setMCJITMemoryManagerESt10unique_ptrINS_"    \
	"19RTDyldMemoryManagerESt14default_deleteIS2_EE"
#define CXX_EB_CREATE "_ZN4llvm13EngineBuilder6createEPNS_13TargetMachineE"

/* Filled once by resolve(); read-only afterwards. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *(*real_create)(void);
static void *(*real_create_cxx)(void);
static void *(*real_jtmb)(void *tm);
static void *(*real_layer)(void *es);
static void *(*real_set_mm)(void *self, void **mm);
static void *(*real_eb_create)(void *self, void *tm);
static void *(*be_listener)(int *err);
static void (*be_prepare)(void *tm);
static void *(*be_layer)(void *es);
static void *(*be_wrap_mm)(void *mm);

/*
 * The major version in a libLLVM file name: libLLVM-14.so.1 (Debian,
 * LLVM up to 17) or libLLVM.so.18.1 (LLVM 18 on); 0 if it is neither.
 */
static int llvm_major(const char *path)
{
	const char *base = strrchr(path, '/');
	const char *v;

	base = base ? base + 1 : path;
	if (!strncmp(base, "libLLVM-", 8))
		v = base + 8;
	else if (!strncmp(base, "libLLVM.so.", 11))
		v = base + 11;
	else
		return 0;
	if (*v < '1' || *v > '9')
		return 0;
	return atoi(v);
}

static void resolve(void)
{
	char path[PATH_MAX];
	const char *where = NULL;
	const char *why = NULL;
	Dl_info di;
	int major = 0;
	void *h = NULL;

	real_create = (void *(*)(void))dlsym(RTLD_NEXT,
					     "LLVMCreatePerfJITEventListener");
	real_create_cxx = (void *(*)(void))dlsym(RTLD_NEXT, CXX_CREATE);
	real_jtmb = (void *(*)(void *))dlsym(
		RTLD_NEXT,
		"LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine");
	real_layer = (void *(*)(void *))dlsym(
		RTLD_NEXT,
		"LLVMOrcCreateRTDyldObjectLinkingLayerWithSectionMemoryManager");
	real_set_mm = (void *(*)(void *, void **))dlsym(RTLD_NEXT, CXX_SET_MM);
	real_eb_create =
		(void *(*)(void *, void *))dlsym(RTLD_NEXT, CXX_EB_CREATE);

	/* Any of them names the libLLVM: the first one found. */
	void *known = (void *)real_create;
	if (!known)
		known = (void *)real_create_cxx;
	if (!known)
		known = (void *)real_jtmb;
	if (!known)
		known = (void *)real_layer;
	if (!known)
		known = (void *)real_set_mm;
	if (known && dladdr(known, &di) && di.dli_fname) {
		where = di.dli_fname;
		major = llvm_major(where);
	}

	/* The listener libraries sit beside this one. */
	if (major && dladdr((void *)resolve, &di) && di.dli_fname) {
		const char *slash = strrchr(di.dli_fname, '/');
		int dir = slash ? (int)(slash - di.dli_fname) : 1;
		int n = snprintf(path, sizeof(path),
				 "%.*s/libjitring-llvm-perf-%d.so", dir,
				 slash ? di.dli_fname : ".", major);

		if (n > 0 && (size_t)n < sizeof(path)) {
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			why = h ? "it lacks jitring's entry points" : dlerror();
		}
		if (h) {
			be_listener = (void *(*)(int *))dlsym(
				h, "jitring_llvm_perf_listener");
			be_prepare = (void (*)(void *))dlsym(
				h, "jitring_llvm_target_machine_prepare");
			be_layer = (void *(*)(void *))dlsym(
				h, "jitring_llvm_object_layer_create");
			be_wrap_mm = (void *(*)(void *))dlsym(
				h, "jitring_llvm_perf_mcjit_memory_manager");
			if (be_listener && be_prepare && be_layer && be_wrap_mm)
				return;
			be_listener = NULL;
			be_prepare = NULL;
			be_layer = NULL;
			be_wrap_mm = NULL;
		}
	}
	if (!where)
		fprintf(stderr,
			"jitring-llvm-perf: no libLLVM in this process "
			"(LLVM linked statically?); jitring's listener "
			"is built for LLVM %s; using LLVM's perf "
			"listener\n",
			JITRING_LLVM_VERSIONS);
	else
		fprintf(stderr,
			"jitring-llvm-perf: this process uses LLVM %d "
			"(%s); jitring's listener is built for LLVM %s "
			"(%s); using LLVM's perf listener\n",
			major, where, JITRING_LLVM_VERSIONS,
			why ? why : "none for this file name");
}

/*
 * jitring's listener, or LLVM's (through `real`) where there is none for
 * this LLVM or jitring cannot open the dump.
 */
static void *listener(void *(*const *real)(void))
{
	static int said;
	int err;
	void *l;

	pthread_once(&once, resolve);
	if (be_listener) {
		l = be_listener(&err);
		if (l)
			return l;
		if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			fprintf(stderr,
				"jitring-llvm-perf: cannot open the "
				"jitdump (%s); using LLVM's perf "
				"listener\n",
				strerror(-err));
	}
	return *real ? (*real)() : NULL;
}

SHIM_API void *LLVMCreatePerfJITEventListener(void);
SHIM_API void *LLVMCreatePerfJITEventListener(void)
{
	return listener(&real_create);
}

SHIM_API void *create_perf_cxx(void) __asm__(CXX_CREATE);
SHIM_API void *create_perf_cxx(void)
{
	return listener(&real_create_cxx);
}

SHIM_API void *LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(void *tm);
SHIM_API void *LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(void *tm)
{
	pthread_once(&once, resolve);
	if (be_prepare)
		be_prepare(tm);
	return real_jtmb(tm);
}

SHIM_API void *
LLVMOrcCreateRTDyldObjectLinkingLayerWithSectionMemoryManager(void *es);
SHIM_API void *
LLVMOrcCreateRTDyldObjectLinkingLayerWithSectionMemoryManager(void *es)
{
	pthread_once(&once, resolve);
	return be_layer ? be_layer(es) : real_layer(es);
}

/*
 * MCJIT through EngineBuilder (lli): the same layout.  A unique_ptr
 * argument is passed by address (Itanium C++ ABI: not trivially
 * copyable); its pointer is replaced by the wrapper, which owns the
 * program's memory manager, and the caller destroys the emptied
 * unique_ptr as it would have.
 */
SHIM_API void *set_mm_cxx(void *self, void **mm) __asm__(CXX_SET_MM);
SHIM_API void *set_mm_cxx(void *self, void **mm)
{
	pthread_once(&once, resolve);
	if (be_wrap_mm && *mm)
		*mm = be_wrap_mm(*mm);
	return real_set_mm(self, mm);
}

SHIM_API void *eb_create_cxx(void *self, void *tm) __asm__(CXX_EB_CREATE);
SHIM_API void *eb_create_cxx(void *self, void *tm)
{
	pthread_once(&once, resolve);
	if (be_prepare)
		be_prepare(tm);
	return real_eb_create(self, tm);
}
