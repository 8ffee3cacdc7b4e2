// SPDX-License-Identifier: MIT
//
// libjitring-llvm-perf-<major>.so: the listener that libjitring-llvm-perf.so
// (perf_shim.c, the library users preload) hands out, built once for each
// LLVM major version the machine has.  The shim dlopens the one built for
// the libLLVM the process has loaded, the first time the program asks for
// LLVM's perf listener, and calls the three functions below; this library
// exports no LLVM name of its own, so loading it changes nothing else in
// the process.
//
// One jitring listener per process: the dump goes to $JITRING_DIR, else
// /tmp (jitring_open()'s default).  The writer is never closed: jitring
// flushes it at exit().

#include "jitring-llvm.h"

#include <mutex>

namespace {

std::once_flag once;
LLVMJITEventListenerRef the_listener;
int the_error;

} // namespace

extern "C" {

// The process's listener, opened on the first call; NULL with *err set to
// jitring_llvm_listener_open()'s error when the dump cannot be opened (the
// shim then hands out LLVM's own listener and says why).
JITRING_API LLVMJITEventListenerRef jitring_llvm_perf_listener(int *err)
{
	std::call_once(once, [] {
		the_error = jitring_llvm_listener_open(nullptr, &the_listener);
		if (the_error)
			the_listener = nullptr;
	});
	*err = the_error;
	return the_listener;
}

} // extern "C"
