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
// It also gives the program the layout perf needs to unwind through every
// JIT function (layout.cpp): LLVMOrcJITTargetMachineBuilderCreateFromTarget-
// Machine() puts each function in its own section, and
// LLVMOrcCreateRTDyldObjectLinkingLayerWithSectionMemoryManager() returns
// a layer whose memory manager leaves room after each.  Both are the calls
// through which a C-API ORC program (PostgreSQL's llvmjit.so) builds its
// JIT; each forwards to LLVM with only that change.
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

extern "C" JITRING_API LLVMOrcJITTargetMachineBuilderRef
LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(LLVMTargetMachineRef tm)
{
	static auto real =
		reinterpret_cast<LLVMOrcJITTargetMachineBuilderRef (*)(
			LLVMTargetMachineRef)>(dlsym(
			RTLD_NEXT,
			"LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine"));
	jitring_llvm_target_machine_prepare(tm);
	return real(tm);
}

extern "C" JITRING_API LLVMOrcObjectLayerRef
LLVMOrcCreateRTDyldObjectLinkingLayerWithSectionMemoryManager(
	LLVMOrcExecutionSessionRef es)
{
	return jitring_llvm_object_layer_create(es);
}

namespace llvm {
JITRING_API JITEventListener *JITEventListener::createPerfJITEventListener()
{
	return unwrap(get());
}
} // namespace llvm
