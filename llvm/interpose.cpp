// SPDX-License-Identifier: MIT
//
// libjitring-llvm-perf.so: LLVM's perf listener, replaced.  Exports the two
// names through which programs ask LLVM for its perf listener, the C API's
// LLVMCreatePerfJITEventListener() and the C++
// llvm::JITEventListener::createPerfJITEventListener(), and answers both
// with one jitring listener for the process, so a program that turns on
// LLVM's perf support (PostgreSQL's jit_profiling_support) writes its dump
// through jitring when this library is preloaded (LD_PRELOAD) or linked
// ahead of libLLVM.  It must be built against the LLVM major version the
// program uses.
//
// The dump goes to $JITRING_DIR, else /tmp (jitring_open()'s default).  If
// jitring cannot open it, the program gets LLVM's own listener instead
// (one line on stderr says why), so turning profiling on never breaks the
// program.  The writer is never closed: jitring flushes it at exit().

#include "jitring-llvm.h"

#include <llvm/ExecutionEngine/JITEventListener.h>

#include <dlfcn.h>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace {

std::once_flag once;
LLVMJITEventListenerRef the_listener;

LLVMJITEventListenerRef get()
{
	std::call_once(once, [] {
		int ret = jitring_llvm_listener_open(nullptr, &the_listener);
		if (ret == 0)
			return;
		the_listener = nullptr;
		auto real = reinterpret_cast<LLVMJITEventListenerRef (*)(void)>(
			dlsym(RTLD_NEXT, "LLVMCreatePerfJITEventListener"));
		std::fprintf(stderr,
			     "jitring-llvm-perf: cannot open the jitdump "
			     "(%s); using LLVM's perf listener\n",
			     std::strerror(-ret));
		if (real)
			the_listener = real();
	});
	return the_listener;
}

} // namespace

extern "C" JITRING_API LLVMJITEventListenerRef
LLVMCreatePerfJITEventListener(void)
{
	return get();
}

namespace llvm {
JITRING_API JITEventListener *JITEventListener::createPerfJITEventListener()
{
	return unwrap(get());
}
} // namespace llvm
