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
//
// The layout perf needs to unwind through every function (layout.cpp) is
// given to MCJIT programs too: the shim hands EngineBuilder's memory
// manager to jitring_llvm_perf_mcjit_memory_manager(), which wraps it in
// one that leaves JITRING_LLVM_CODE_PAD bytes after each code section,
// and sets FunctionSections on the target machine EngineBuilder::create()
// gets (jitring_llvm_target_machine_prepare()).

#include "jitring-llvm.h"

#include <llvm/ExecutionEngine/RTDyldMemoryManager.h>

#include <mutex>

using namespace llvm;

namespace {

std::once_flag once;
LLVMJITEventListenerRef the_listener;
int the_error;

// The program's memory manager, asked for JITRING_LLVM_CODE_PAD more bytes
// for each code section, everything else forwarded.  One that wants its
// space reserved up front (needsToReserveAllocationSpace()) is left
// unpadded: the reservation's code size cannot know how many sections
// will come.
class PaddedForwarder final : public RTDyldMemoryManager {
public:
	explicit PaddedForwarder(RTDyldMemoryManager *inner)
		: inner_(inner), pad_(!inner->needsToReserveAllocationSpace())
	{
	}

	uint8_t *allocateCodeSection(uintptr_t size, unsigned align,
				     unsigned id, StringRef name) override
	{
		return inner_->allocateCodeSection(
			size + (pad_ ? JITRING_LLVM_CODE_PAD : 0), align, id,
			name);
	}
	uint8_t *allocateDataSection(uintptr_t size, unsigned align,
				     unsigned id, StringRef name,
				     bool ro) override
	{
		return inner_->allocateDataSection(size, align, id, name, ro);
	}
	TLSSection allocateTLSSection(uintptr_t size, unsigned align,
				      unsigned id, StringRef name) override
	{
		return inner_->allocateTLSSection(size, align, id, name);
	}
	void reserveAllocationSpace(uintptr_t code, uint32_t code_align,
				    uintptr_t ro, uint32_t ro_align,
				    uintptr_t rw, uint32_t rw_align) override
	{
		inner_->reserveAllocationSpace(code, code_align, ro, ro_align,
					       rw, rw_align);
	}
	bool needsToReserveAllocationSpace() override
	{
		return inner_->needsToReserveAllocationSpace();
	}
	bool allowStubAllocation() const override
	{
		return inner_->allowStubAllocation();
	}
	void registerEHFrames(uint8_t *addr, uint64_t load,
			      size_t size) override
	{
		inner_->registerEHFrames(addr, load, size);
	}
	void deregisterEHFrames() override { inner_->deregisterEHFrames(); }
	bool finalizeMemory(std::string *err) override
	{
		return inner_->finalizeMemory(err);
	}
	void notifyObjectLoaded(RuntimeDyld &dyld,
				const object::ObjectFile &obj) override
	{
		inner_->notifyObjectLoaded(dyld, obj);
	}
	void notifyObjectLoaded(ExecutionEngine *ee,
				const object::ObjectFile &obj) override
	{
		inner_->notifyObjectLoaded(ee, obj);
	}
	uint64_t getSymbolAddress(const std::string &name) override
	{
		return inner_->getSymbolAddress(name);
	}
	uint64_t getSymbolAddressInLogicalDylib(const std::string &name) override
	{
		return inner_->getSymbolAddressInLogicalDylib(name);
	}
	JITSymbol findSymbol(const std::string &name) override
	{
		return inner_->findSymbol(name);
	}
	JITSymbol findSymbolInLogicalDylib(const std::string &name) override
	{
		return inner_->findSymbolInLogicalDylib(name);
	}
	void *getPointerToNamedFunction(const std::string &name,
					bool abort) override
	{
		return inner_->getPointerToNamedFunction(name, abort);
	}

private:
	std::unique_ptr<RTDyldMemoryManager> inner_;
	bool pad_;
};

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

// The memory manager a program hands EngineBuilder::setMCJITMemoryManager(),
// wrapped: takes ownership of `mm` (an RTDyldMemoryManager *) and returns
// the wrapper, which owns it.  The program may keep using its own pointer
// (lli calls invalidateInstructionCache() on it): it lives as long as the
// wrapper.
JITRING_API void *jitring_llvm_perf_mcjit_memory_manager(void *mm)
{
	auto *inner = static_cast<RTDyldMemoryManager *>(mm);
	RTDyldMemoryManager *w = new (std::nothrow) PaddedForwarder(inner);
	return w ? w : mm;
}

} // extern "C"
