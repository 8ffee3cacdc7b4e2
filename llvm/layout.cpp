// SPDX-License-Identifier: MIT
//
// Room for perf's unwinding data after each JIT function.
//
// perf inject maps each function's injected ELF over
// [code_addr, code_addr + ALIGN_8(code_size) + mapped_size): the unwinding
// data sits right after the code, and DWARF unwinding reads it through
// that mapping.  LLVM packs the functions of one object back to back in
// .text, so the next function's CODE_LOAD, mapped later, takes those
// bytes over: the function keeps its name but perf can no longer unwind
// through it (only the last function of each object unwinds).  The cure
// is a layout with room after every function: each function in its own
// section (TargetOptions::FunctionSections), and a memory manager that
// leaves JITRING_LLVM_CODE_PAD bytes after every code section it places.
// The listener counts the functions that still lack the room
// (jitring_llvm_stats.unwind_overlap).

#include "jitring-llvm.h"

#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/SectionMemoryManager.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm-c/OrcEE.h>

using namespace llvm;

namespace {

class PaddedMemoryManager final : public SectionMemoryManager {
public:
	uint8_t *allocateCodeSection(uintptr_t size, unsigned align,
				     unsigned id, StringRef name) override
	{
		return SectionMemoryManager::allocateCodeSection(
			size + JITRING_LLVM_CODE_PAD, align, id, name);
	}
};

} // namespace

extern "C" {

JITRING_API void
jitring_llvm_target_machine_prepare(LLVMTargetMachineRef tm)
{
	if (tm)
		reinterpret_cast<TargetMachine *>(tm)->Options.FunctionSections =
			true;
}

JITRING_API LLVMOrcObjectLayerRef
jitring_llvm_object_layer_create(LLVMOrcExecutionSessionRef es)
{
	auto *layer = new orc::RTDyldObjectLinkingLayer(
		*reinterpret_cast<orc::ExecutionSession *>(es),
		[] { return std::make_unique<PaddedMemoryManager>(); });
	return reinterpret_cast<LLVMOrcObjectLayerRef>(
		static_cast<orc::ObjectLayer *>(layer));
}

} // extern "C"

std::unique_ptr<RuntimeDyld::MemoryManager> jitring_llvm_memory_manager()
{
	return std::make_unique<PaddedMemoryManager>();
}
