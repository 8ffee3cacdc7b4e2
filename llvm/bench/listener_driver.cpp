// SPDX-License-Identifier: MIT
//
// listener_driver: what a JIT event listener costs the compiling thread,
// per object, from notifyObjectLoaded() to its return: jitring's listener
// against LLVM's PerfJITEventListener, at 1, 8 and 64 compiling threads,
// in one run.
//
// Each thread loads objects with its own RuntimeDyld (what an ORC layer
// does per object: load, relocate, finalise), then times only the
// listener call.  The objects are compiled once up front: 4 functions
// each, no debug info (as PostgreSQL's JIT emits them).  write(2) and
// writev(2) are interposed (this program exports them) to time the file
// I/O each listener does on the calling thread; jitring's background
// thread's writes are counted apart.
//
// Usage: listener_driver [--objects N] [--dir DIR] [--threads T]
//                        [--only jitring|llvm]
// Prints one line per (listener, threads): ns per object (median, p99,
// mean), write calls and ns in write per object on the JIT threads, and
// how often a jitring thread found its ring full and waited for the
// background thread (lossless mode; what makes its tail).

#include "jitring-llvm.h"

#include <llvm/ExecutionEngine/JITEventListener.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/RuntimeDyld.h>
#include <llvm/ExecutionEngine/SectionMemoryManager.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>

#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace llvm;

namespace {

thread_local bool in_notify;
std::atomic<uint64_t> jit_writes{0}, jit_write_ns{0}, other_writes{0};

uint64_t now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

} // namespace

// The interposed system calls: libLLVM's raw_fd_ostream and libjitring
// call these through the PLT.
// One of them: counted apart outside notifyObjectLoaded(), timed inside.
static ssize_t interposed(long nr, long a, long b, long c)
{
	if (!in_notify) {
		other_writes.fetch_add(1, std::memory_order_relaxed);
		return syscall(nr, a, b, c);
	}
	uint64_t t0 = now_ns();
	ssize_t r = syscall(nr, a, b, c);
	jit_write_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
	jit_writes.fetch_add(1, std::memory_order_relaxed);
	return r;
}

extern "C" ssize_t write(int fd, const void *buf, size_t n)
{
	return interposed(SYS_write, fd, long(buf), long(n));
}

extern "C" ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	return interposed(SYS_writev, fd, long(iov), cnt);
}

namespace {

class NoResolver final : public JITSymbolResolver {
public:
	void lookup(const LookupSet &, OnResolvedFunction done) override
	{
		done(LookupResult());
	}
	Expected<LookupSet> getResponsibilitySet(const LookupSet &) override
	{
		return LookupSet();
	}
};

std::unique_ptr<MemoryBuffer> compile(TargetMachine &tm, unsigned seed)
{
	LLVMContext ctx;
	Module mod("m" + std::to_string(seed), ctx);
	mod.setDataLayout(tm.createDataLayout());
	mod.setTargetTriple(tm.getTargetTriple().str());
	Type *i64 = Type::getInt64Ty(ctx);
	for (unsigned f = 0; f < 4; f++) {
		Function *fn = Function::Create(
			FunctionType::get(i64, {i64}, false),
			Function::ExternalLinkage,
			"bench_" + std::to_string(seed) + "_" +
				std::to_string(f),
			mod);
		IRBuilder<> b(BasicBlock::Create(ctx, "entry", fn));
		BasicBlock *loop = BasicBlock::Create(ctx, "loop", fn);
		BasicBlock *done = BasicBlock::Create(ctx, "done", fn);
		b.CreateBr(loop);
		b.SetInsertPoint(loop);
		PHINode *v = b.CreatePHI(i64, 2);
		v->addIncoming(fn->getArg(0), &fn->getEntryBlock());
		Value *n = b.CreateAdd(
			b.CreateMul(v, ConstantInt::get(i64, 6364136223846793005ull)),
			ConstantInt::get(i64, seed * 4 + f));
		v->addIncoming(n, loop);
		b.CreateCondBr(b.CreateICmpSGT(n, ConstantInt::get(i64, 0)),
			       loop, done);
		b.SetInsertPoint(done);
		b.CreateRet(n);
	}
	SmallVector<char, 0> buf;
	raw_svector_ostream os(buf);
	legacy::PassManager pm;
	if (tm.addPassesToEmitFile(pm, os, nullptr, CGFT_ObjectFile)) {
		std::fprintf(stderr, "cannot emit objects\n");
		std::exit(1);
	}
	pm.run(mod);
	return MemoryBuffer::getMemBufferCopy(StringRef(buf.data(), buf.size()));
}

struct Result {
	std::vector<uint64_t> ns;
};

void run_thread(JITEventListener *l,
		const std::vector<std::unique_ptr<object::ObjectFile>> &objs,
		unsigned first, unsigned count, std::vector<uint64_t> &ns)
{
	NoResolver resolver;
	std::vector<std::unique_ptr<SectionMemoryManager>> mms;
	for (unsigned i = 0; i < count; i++) {
		const object::ObjectFile &obj = *objs[(first + i) % objs.size()];
		auto mm = std::make_unique<SectionMemoryManager>();
		RuntimeDyld dyld(*mm, resolver);
		auto info = dyld.loadObject(obj);
		dyld.resolveRelocations();
		dyld.finalizeWithMemoryManagerLocking();
		if (dyld.hasError()) {
			std::fprintf(stderr, "RuntimeDyld: %s\n",
				     dyld.getErrorString().str().c_str());
			std::exit(1);
		}
		JITEventListener::ObjectKey key = first + i + 1;
		in_notify = true;
		uint64_t t0 = now_ns();
		l->notifyObjectLoaded(key, obj, *info);
		uint64_t t1 = now_ns();
		in_notify = false;
		ns.push_back(t1 - t0);
		mms.push_back(std::move(mm));
	}
}

} // namespace

int main(int argc, char **argv)
{
	std::vector<unsigned> thread_counts = {1, 8, 64};
	unsigned objects = 1024;
	std::string dir = "/tmp", only;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!std::strcmp(argv[i], "--objects"))
			objects = unsigned(std::atoi(argv[i + 1]));
		else if (!std::strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!std::strcmp(argv[i], "--only"))
			only = argv[i + 1];
		else if (!std::strcmp(argv[i], "--threads"))
			thread_counts = {unsigned(std::atoi(argv[i + 1]))};
	}
	InitializeNativeTarget();
	InitializeNativeTargetAsmPrinter();
	auto jtmb = orc::JITTargetMachineBuilder::detectHost();
	if (!jtmb) {
		std::fprintf(stderr, "%s\n", toString(jtmb.takeError()).c_str());
		return 1;
	}
	auto tm = jtmb->createTargetMachine();
	if (!tm) {
		std::fprintf(stderr, "%s\n", toString(tm.takeError()).c_str());
		return 1;
	}
	std::vector<std::unique_ptr<MemoryBuffer>> bufs;
	std::vector<std::unique_ptr<object::ObjectFile>> objs;
	for (unsigned i = 0; i < 64; i++) {
		bufs.push_back(compile(**tm, i));
		auto o = object::ObjectFile::createObjectFile(
			bufs.back()->getMemBufferRef());
		if (!o) {
			std::fprintf(stderr, "%s\n",
				     toString(o.takeError()).c_str());
			return 1;
		}
		objs.push_back(std::move(*o));
	}

	// LLVM's listener writes $JITDUMPDIR/.debug/jit/...; jitring's
	// $JITRING_DIR/jit-<pid>.dump.
	setenv("JITDUMPDIR", dir.c_str(), 1);
	struct jitring_config cfg;
	jitring_config_init(&cfg);
	cfg.dir = dir.c_str();
	LLVMJITEventListenerRef jr;
	int ret = jitring_llvm_listener_open(&cfg, &jr);
	if (ret < 0) {
		std::fprintf(stderr, "jitring_llvm_listener_open: %s\n",
			     std::strerror(-ret));
		return 1;
	}
	JITEventListener *llvm_l = JITEventListener::createPerfJITEventListener();
	struct {
		const char *name;
		JITEventListener *l;
	} listeners[] = {{"jitring", unwrap(jr)}, {"llvm", llvm_l}};

	std::printf("%-8s %7s %7s %10s %10s %10s %12s %12s %10s\n",
		    "listener", "threads", "objects", "median_ns", "p99_ns",
		    "mean_ns", "writes/obj", "write_ns/obj", "ring_waits");
	struct jitring *w = jitring_llvm_listener_writer(jr);
	for (unsigned threads : thread_counts) {
		for (auto &L : listeners) {
			if (!only.empty() && only != L.name)
				continue;
			jit_writes = 0;
			jit_write_ns = 0;
			struct jitring_stats st0 = {}, st1 = {};
			st0.struct_size = st1.struct_size = sizeof(st0);
			jitring_stats(w, &st0);
			std::vector<std::vector<uint64_t>> ns(threads);
			std::vector<std::thread> th;
			unsigned per = objects / threads;
			for (unsigned t = 0; t < threads; t++)
				th.emplace_back(run_thread, L.l, std::cref(objs),
						t * per, per, std::ref(ns[t]));
			for (auto &x : th)
				x.join();
			std::vector<uint64_t> all;
			for (auto &v : ns)
				all.insert(all.end(), v.begin(), v.end());
			std::sort(all.begin(), all.end());
			double mean = 0;
			for (uint64_t x : all)
				mean += double(x);
			mean /= double(all.size());
			jitring_stats(w, &st1);
			std::printf("%-8s %7u %7zu %10llu %10llu %10.0f %12.2f "
				    "%12.0f %10llu\n",
				    L.name, threads, all.size(),
				    (unsigned long long)all[all.size() / 2],
				    (unsigned long long)all[all.size() * 99 / 100],
				    mean, double(jit_writes) / double(all.size()),
				    double(jit_write_ns) / double(all.size()),
				    (unsigned long long)(st1.ring_full_waits -
							 st0.ring_full_waits));
			std::fflush(stdout);
		}
	}
	jitring_flush(jitring_llvm_listener_writer(jr));
	return 0;
}
