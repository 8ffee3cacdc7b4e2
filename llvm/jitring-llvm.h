/* SPDX-License-Identifier: MIT */
/*
 * jitring-llvm: an LLVM JIT event listener that writes perf jitdump files
 * through jitring.  For every function of an object that RuntimeDyld
 * loads (ORC's RTDyldObjectLinkingLayer, MCJIT) it writes one group:
 * UNWINDING_INFO built from the object's own .eh_frame, DEBUG_INFO from
 * its DWARF line table when it has one, and a CODE_LOAD named by the
 * symbol.  The calling (compiling) thread takes no lock and does no file
 * I/O: the records go through jitring's per-thread rings (a futex wake of
 * jitring's background thread, when it sleeps, is the only system call).
 *
 * Three lines for a runtime using LLVM's C API:
 *
 *	LLVMJITEventListenerRef l;
 *	if (jitring_llvm_listener_open(NULL, &l) == 0)
 *		LLVMOrcRTDyldObjectLinkingLayerRegisterJITEventListener(layer, l);
 *
 * C++ callers pass llvm::unwrap(l) (a llvm::JITEventListener *) to
 * registerJITEventListener().  The library libjitring-llvm-perf.so exports
 * the same listener as LLVMCreatePerfJITEventListener, for programs that
 * already ask LLVM for its perf listener (LD_PRELOAD it; see docs/llvm.md).
 */
#ifndef JITRING_LLVM_H
#define JITRING_LLVM_H

#include <jitring.h>
#include <llvm-c/ExecutionEngine.h>
#include <llvm-c/Orc.h>
#include <llvm-c/TargetMachine.h>

#ifdef __cplusplus
#include <memory>
#include <llvm/ExecutionEngine/RuntimeDyld.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * struct jitring_llvm_stats - What one listener has done.
 * @struct_size: sizeof(struct jitring_llvm_stats) as the caller compiled
 *	it; the library fills min(struct_size, its own size) bytes.
 * @objects: objects notified (notifyObjectLoaded calls).
 * @functions: functions written (CODE_LOAD records).
 * @with_unwind: of @functions, those written with UNWINDING_INFO.
 * @with_lines: of @functions, those written with DEBUG_INFO.
 * @no_fde: functions whose object had no usable FDE for them (written
 *	without UNWINDING_INFO; perf then stops unwinding at that frame).
 * @refused: functions jitring_write() refused (not in the dump).
 * @freed: notifyFreeingObject calls (nothing is written for them: the
 *	jitdump format has no unload record).
 * @unwind_overlap: of @with_unwind, functions followed so closely by the
 *	next function of their object that perf's mapping of their unwinding
 *	data is taken over by it: perf names them but cannot unwind through
 *	them.  Zero with the layout jitring_llvm_object_layer_create() and
 *	jitring_llvm_target_machine_prepare() give (see docs/llvm.md).
 */
struct jitring_llvm_stats {
	uint32_t struct_size;
	uint32_t reserved;
	uint64_t objects;
	uint64_t functions;
	uint64_t with_unwind;
	uint64_t with_lines;
	uint64_t no_fde;
	uint64_t refused;
	uint64_t freed;
	uint64_t unwind_overlap;
};

/** Bytes the memory manager of jitring_llvm_object_layer_create() leaves
 *  free after each code section, for perf's mapping of the unwinding data
 *  of the function before it (the CIE and FDE, 20 bytes of header, and
 *  alignment: under 150 bytes for LLVM's usual frames). */
#define JITRING_LLVM_CODE_PAD 256u

/**
 * jitring_llvm_listener_open() - Open a writer and a listener on it.
 * @cfg: the writer's options (see jitring_open()), or NULL for defaults:
 *	the dump goes to $JITRING_DIR, else /tmp.
 * @out: receives the listener; untouched on failure.
 *
 * Call it before the JIT makes code executable (jitring_open() maps the
 * dump's marker page, which is how perf finds the dump).
 *
 * Context: any thread; not async-signal-safe.
 * Return: 0; -EINVAL for a NULL @out; -ENOMEM; or what jitring_open()
 * returns.
 */
JITRING_API int jitring_llvm_listener_open(const struct jitring_config *cfg,
					   LLVMJITEventListenerRef *out);

/**
 * jitring_llvm_listener_writer() - The listener's jitring writer.
 * @l: a listener from jitring_llvm_listener_open().
 *
 * For jitring_stats() and jitring_flush().
 *
 * Context: any thread.
 * Return: the writer (never NULL for a valid @l).
 */
JITRING_API struct jitring *
jitring_llvm_listener_writer(LLVMJITEventListenerRef l);

/**
 * jitring_llvm_listener_stats() - Counters of a listener.
 * @l: the listener.
 * @st: filled; st->struct_size must be set.
 *
 * Context: any thread.
 * Return: 0; -EINVAL for NULL arguments or a struct_size below 8.
 */
JITRING_API int jitring_llvm_listener_stats(LLVMJITEventListenerRef l,
					    struct jitring_llvm_stats *st);

/**
 * jitring_llvm_listener_close() - Close the writer and free the listener.
 * @l: the listener, or NULL.
 *
 * Only once no JIT that the listener is registered with can notify it
 * any more (the JIT is destroyed, or the listener unregistered).
 *
 * Context: any thread; not async-signal-safe.
 */
JITRING_API void jitring_llvm_listener_close(LLVMJITEventListenerRef l);

/**
 * jitring_llvm_object_layer_create() - An RTDyld object layer laid out for
 *	perf.
 * @es: the execution session.
 *
 * As LLVMOrcCreateRTDyldObjectLinkingLayerWithSectionMemoryManager(), with
 * a memory manager that leaves JITRING_LLVM_CODE_PAD bytes after each code
 * section.  With jitring_llvm_target_machine_prepare() (one function per
 * section), perf can unwind through every function; without this layout
 * only the last function of each object unwinds (names are right either
 * way).
 *
 * Context: any thread.
 * Return: the layer (dispose of it as of any object layer).
 */
JITRING_API LLVMOrcObjectLayerRef
jitring_llvm_object_layer_create(LLVMOrcExecutionSessionRef es);

/**
 * jitring_llvm_target_machine_prepare() - Put each function in its own
 *	section.
 * @tm: the target machine the JIT compiles with, before it is handed to
 *	LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(); NULL is
 *	ignored.
 *
 * Sets TargetOptions::FunctionSections (C++: JITTargetMachineBuilder::
 * getOptions().FunctionSections = true does the same).
 *
 * Context: any thread, before the target machine is used.
 */
JITRING_API void jitring_llvm_target_machine_prepare(LLVMTargetMachineRef tm);

#ifdef __cplusplus
}

/**
 * jitring_llvm_memory_manager() - The memory manager of
 *	jitring_llvm_object_layer_create(), for C++ callers that make their
 *	own RTDyldObjectLinkingLayer.
 */
JITRING_API std::unique_ptr<llvm::RuntimeDyld::MemoryManager>
jitring_llvm_memory_manager();
#endif

#endif /* JITRING_LLVM_H */
