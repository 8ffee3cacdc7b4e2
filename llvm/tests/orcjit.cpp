// SPDX-License-Identifier: MIT
//
// orcjit: an ORC LLJIT with several compile threads, JITting a generated
// binary tree of functions, then running it from a C function so that a
// profile shows JIT frames below a known native caller.
//
//   jf_k(x), k in [0, N):  jf_{2k+1}(x) + jf_{2k+2}(x + 1) if 2k+2 < N,
//                          else a loop of --work steps (the leaves)
//   drive_jit() calls jf_0 --reps times, and with --cpu-ms MS on until
//   its thread has run MS ms on a CPU; main calls drive_jit.
//
// Each function's "source" is lines 10k+1 (entry), 10k+2 (the calls or
// the loop), 10k+3 (the return) of --src (written, for perf annotate).
//
// Usage: orcjit [--listener jitring|llvm|none] [--threads T] [--funcs N]
//               [--per-module M] [--debug] [--work W] [--reps R]
//               [--cpu-ms MS] [--src FILE] [--reuse MS] [--packed]
// --packed keeps LLVM's default layout (functions back to back in .text,
// SectionMemoryManager) instead of jitring's (one section per function,
// room after each: docs/llvm.md).
// --reuse MS instead JITs reuse_a, runs it for MS ms of CPU time, removes
// its object (freeing its memory), JITs reuse_b and runs it as long;
// prints both addresses.  Prints "functions N objects O" and the
// listener's counters.
// Runs are bounded by the thread's CPU time, not the clock: perf's
// cpu-clock samples count CPU time, so a profile gets as many samples on
// a loaded machine as on an idle one.
// Exit 0, or 1 with a message.

#include "jitring-llvm.h"

#include <llvm/ExecutionEngine/JITEventListener.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/SectionMemoryManager.h>
#include <llvm/IR/DIBuilder.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/TargetSelect.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>

using namespace llvm;
using namespace llvm::orc;

namespace {

struct Opts {
	std::string listener = "jitring";
	unsigned threads = 8;
	unsigned funcs = 1023;
	unsigned per_module = 4;
	bool debug = false;
	uint64_t work = 200000;
	unsigned reps = 4;
	long cpu_ms = 0;
	std::string src = "/tmp/orcgen.c";
	long reuse_ms = 0;
	bool packed = false;
};

[[noreturn]] void die(const std::string &what)
{
	std::fprintf(stderr, "orcjit: %s\n", what.c_str());
	std::exit(1);
}

void die_on(Error e, const char *what)
{
	if (e)
		die(std::string(what) + ": " + toString(std::move(e)));
}

std::string fname(unsigned k)
{
	return "jf_" + std::to_string(k);
}

// A leaf's loop: x = x * a + c; x ^= x >> 13, `work` times.
Value *emit_loop(IRBuilder<> &b, Function *f, Value *x, uint64_t work,
		 uint64_t salt)
{
	LLVMContext &ctx = b.getContext();
	Type *i64 = Type::getInt64Ty(ctx);
	BasicBlock *entry = b.GetInsertBlock();
	BasicBlock *loop = BasicBlock::Create(ctx, "loop", f);
	BasicBlock *done = BasicBlock::Create(ctx, "done", f);
	b.CreateBr(loop);
	b.SetInsertPoint(loop);
	PHINode *i = b.CreatePHI(i64, 2);
	PHINode *v = b.CreatePHI(i64, 2);
	i->addIncoming(ConstantInt::get(i64, 0), entry);
	v->addIncoming(x, entry);
	Value *m = b.CreateMul(v, ConstantInt::get(i64, 6364136223846793005ull));
	Value *a = b.CreateAdd(m, ConstantInt::get(i64, 1442695040888963407ull + salt));
	Value *s = b.CreateXor(a, b.CreateLShr(a, ConstantInt::get(i64, 13)));
	Value *i1 = b.CreateAdd(i, ConstantInt::get(i64, 1));
	i->addIncoming(i1, loop);
	v->addIncoming(s, loop);
	b.CreateCondBr(b.CreateICmpULT(i1, ConstantInt::get(i64, work)), loop,
		       done);
	b.SetInsertPoint(done);
	return s;
}

// One module holding functions [first, last), in its own context (so
// compile threads never share one).
ThreadSafeModule make_module(const Opts &o, unsigned first, unsigned last)
{
	auto ctx = std::make_unique<LLVMContext>();
	auto mod = std::make_unique<Module>("m" + std::to_string(first), *ctx);
	Type *i64 = Type::getInt64Ty(*ctx);
	FunctionType *ft = FunctionType::get(i64, {i64}, false);
	std::unique_ptr<DIBuilder> dib;
	DIFile *file = nullptr;
	DISubroutineType *dty = nullptr;
	if (o.debug) {
		mod->addModuleFlag(Module::Warning, "Debug Info Version",
				   DEBUG_METADATA_VERSION);
		mod->addModuleFlag(Module::Warning, "Dwarf Version", 4);
		dib = std::make_unique<DIBuilder>(*mod);
		size_t slash = o.src.rfind('/');
		file = dib->createFile(o.src.substr(slash + 1),
				       o.src.substr(0, slash));
		dib->createCompileUnit(dwarf::DW_LANG_C, file, "orcjit", true,
				       "", 0);
		DIType *di64 = dib->createBasicType("long", 64,
						     dwarf::DW_ATE_signed);
		dty = dib->createSubroutineType(
			dib->getOrCreateTypeArray({di64, di64}));
	}
	// Declare first: a call may name a function this module defines
	// later.
	for (unsigned k = first; k < last; k++)
		mod->getOrInsertFunction(fname(k), ft);
	for (unsigned k = first; k < last; k++) {
		Function *f = mod->getFunction(fname(k));
		IRBuilder<> b(BasicBlock::Create(*ctx, "entry", f));
		DISubprogram *sp = nullptr;
		if (dib) {
			sp = dib->createFunction(
				file, fname(k), fname(k), file, 10 * k + 1,
				dty, 10 * k + 1, DINode::FlagPrototyped,
				DISubprogram::SPFlagDefinition);
			f->setSubprogram(sp);
			b.SetCurrentDebugLocation(
				DILocation::get(*ctx, 10 * k + 1, 1, sp));
		}
		Value *x = f->getArg(0);
		x = b.CreateAdd(x, ConstantInt::get(i64, k));
		if (sp)
			b.SetCurrentDebugLocation(
				DILocation::get(*ctx, 10 * k + 2, 1, sp));
		Value *r;
		if (2 * k + 2 < o.funcs) {
			FunctionCallee l = mod->getOrInsertFunction(
				fname(2 * k + 1), ft);
			FunctionCallee rr = mod->getOrInsertFunction(
				fname(2 * k + 2), ft);
			Value *a = b.CreateCall(l, {x});
			Value *c = b.CreateCall(
				rr, {b.CreateAdd(x, ConstantInt::get(i64, 1))});
			r = b.CreateAdd(a, c);
		} else {
			r = emit_loop(b, f, x, o.work, k);
		}
		if (sp)
			b.SetCurrentDebugLocation(
				DILocation::get(*ctx, 10 * k + 3, 1, sp));
		b.CreateRet(r);
	}
	if (dib)
		dib->finalize();
	if (verifyModule(*mod, &errs()))
		die("generated module does not verify");
	return ThreadSafeModule(std::move(mod), std::move(ctx));
}

void write_source(const Opts &o)
{
	std::ofstream f(o.src);
	for (unsigned k = 0; k < o.funcs; k++) {
		bool leaf = 2 * k + 2 >= o.funcs;
		f << "long " << fname(k) << "(long x) {  /* line "
		  << 10 * k + 1 << " */\n";
		if (leaf)
			f << "\tfor (i = 0; i < W; i++) x = x * A + C, x ^= x >> 13;\n";
		else
			f << "\tx = " << fname(2 * k + 1) << "(x) + "
			  << fname(2 * k + 2) << "(x + 1);\n";
		f << "\treturn x;\n}\n";
		for (int i = 0; i < 6; i++)
			f << "\n";
	}
}

JITEventListener *make_listener(const Opts &o)
{
	if (o.listener == "none")
		return nullptr;
	if (o.listener == "llvm") {
		JITEventListener *l =
			JITEventListener::createPerfJITEventListener();
		if (!l)
			die("this LLVM has no perf listener");
		return l;
	}
	if (o.listener != "jitring")
		die("unknown listener " + o.listener);
	LLVMJITEventListenerRef ref;
	int ret = jitring_llvm_listener_open(nullptr, &ref);
	if (ret < 0)
		die(std::string("jitring_llvm_listener_open: ") +
		    std::strerror(-ret));
	return unwrap(ref);
}

std::unique_ptr<LLJIT> make_jit(const Opts &o, JITEventListener *l)
{
	auto jtmb = JITTargetMachineBuilder::detectHost();
	if (!jtmb)
		die("detectHost: " + toString(jtmb.takeError()));
	bool packed = o.packed;
	if (!packed)
		jtmb->getOptions().FunctionSections = true;
	auto jit = LLJITBuilder()
			   .setNumCompileThreads(o.threads)
			   .setJITTargetMachineBuilder(std::move(*jtmb))
			   .setObjectLinkingLayerCreator(
				   [l, packed](ExecutionSession &es, const Triple &)
					   -> Expected<std::unique_ptr<ObjectLayer>> {
					   auto layer = std::make_unique<
						   RTDyldObjectLinkingLayer>(
						   es, [packed]()
							   -> std::unique_ptr<RuntimeDyld::MemoryManager> {
							   if (packed)
								   return std::make_unique<
									   SectionMemoryManager>();
							   return jitring_llvm_memory_manager();
						   });
					   if (l)
						   layer->registerJITEventListener(*l);
					   return std::unique_ptr<ObjectLayer>(
						   std::move(layer));
				   })
			   .create();
	if (!jit)
		die("LLJIT: " + toString(jit.takeError()));
	return std::move(*jit);
}

uint64_t lookup(LLJIT &jit, const std::string &name)
{
	auto sym = jit.getExecutionSession().lookup(
		{&jit.getMainJITDylib()}, jit.mangleAndIntern(name));
	if (!sym)
		die("lookup " + name + ": " + toString(sym.takeError()));
	return sym->getAddress();
}

using JitFn = long (*)(long);

// Forwards to the listener under test and records how many notifications
// overlapped, to show whether ORC calls listeners concurrently.
class Overlap final : public JITEventListener {
public:
	explicit Overlap(JITEventListener *inner) : inner_(inner) {}
	void notifyObjectLoaded(ObjectKey k, const object::ObjectFile &o,
				const RuntimeDyld::LoadedObjectInfo &i) override
	{
		unsigned n = now_.fetch_add(1) + 1;
		unsigned m = max_.load();
		while (n > m && !max_.compare_exchange_weak(m, n))
			;
		inner_->notifyObjectLoaded(k, o, i);
		now_.fetch_sub(1);
	}
	void notifyFreeingObject(ObjectKey k) override
	{
		inner_->notifyFreeingObject(k);
	}
	unsigned max() const { return max_.load(); }

private:
	JITEventListener *inner_;
	std::atomic<unsigned> now_{0}, max_{0};
};

} // namespace

// CPU time this thread has run, in ns.
static uint64_t thread_cpu_ns()
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// The native caller every profile must show above the JIT frames: f
// reps times, then on until this thread has run cpu_ms ms.
extern "C" __attribute__((noinline)) long drive_jit(JitFn f, unsigned reps,
						    long cpu_ms)
{
	uint64_t end = thread_cpu_ns() + uint64_t(cpu_ms) * 1000000u;
	long acc = 0;
	for (unsigned i = 0; i < reps || thread_cpu_ns() < end; i++)
		acc += f(long(i));
	asm volatile("" : : "r"(acc) : "memory");
	return acc;
}

// Runs f until this thread has run ms ms on a CPU.
extern "C" __attribute__((noinline)) long drive_for(JitFn f, long ms)
{
	uint64_t end = thread_cpu_ns() + uint64_t(ms) * 1000000u;
	long acc = 0;
	while (thread_cpu_ns() < end)
		acc += f(acc);
	asm volatile("" : : "r"(acc) : "memory");
	return acc;
}

static void print_stats(const Opts &o, JITEventListener *l)
{
	if (o.listener != "jitring")
		return;
	struct jitring_llvm_stats st = {};
	st.struct_size = sizeof(st);
	jitring_llvm_listener_stats(wrap(l), &st);
	std::printf("listener objects %llu functions %llu with_unwind %llu "
		    "with_lines %llu no_fde %llu refused %llu freed %llu "
		    "unwind_overlap %llu\n",
		    (unsigned long long)st.objects,
		    (unsigned long long)st.functions,
		    (unsigned long long)st.with_unwind,
		    (unsigned long long)st.with_lines,
		    (unsigned long long)st.no_fde,
		    (unsigned long long)st.refused,
		    (unsigned long long)st.freed,
		    (unsigned long long)st.unwind_overlap);
}

static int run_reuse(const Opts &o, JITEventListener *l)
{
	auto jit = make_jit(o, l);
	Type *dummy = nullptr;
	(void)dummy;
	uint64_t addr[2];
	for (int phase = 0; phase < 2; phase++) {
		auto ctx = std::make_unique<LLVMContext>();
		auto mod = std::make_unique<Module>("reuse", *ctx);
		Type *i64 = Type::getInt64Ty(*ctx);
		std::string name = phase ? "reuse_b" : "reuse_a";
		Function *f = Function::Create(
			FunctionType::get(i64, {i64}, false),
			Function::ExternalLinkage, name, mod.get());
		IRBuilder<> b(BasicBlock::Create(*ctx, "entry", f));
		b.CreateRet(emit_loop(b, f, f->getArg(0), 100000, phase));
		auto rt = jit->getMainJITDylib().createResourceTracker();
		die_on(jit->addIRModule(rt, ThreadSafeModule(std::move(mod),
							     std::move(ctx))),
		       "addIRModule");
		addr[phase] = lookup(*jit, name);
		drive_for(reinterpret_cast<JitFn>(addr[phase]), o.reuse_ms);
		// Frees the object's memory: its addresses may be reused.
		die_on(rt->remove(), "remove");
	}
	std::printf("reuse_a %#llx reuse_b %#llx same %d\n",
		    (unsigned long long)addr[0], (unsigned long long)addr[1],
		    addr[0] == addr[1]);
	print_stats(o, l);
	return 0;
}

int main(int argc, char **argv)
{
	Opts o;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		auto next = [&]() -> std::string {
			if (i + 1 >= argc)
				die("missing value for " + a);
			return argv[++i];
		};
		if (a == "--listener")
			o.listener = next();
		else if (a == "--threads")
			o.threads = std::stoul(next());
		else if (a == "--funcs")
			o.funcs = std::stoul(next());
		else if (a == "--per-module")
			o.per_module = std::stoul(next());
		else if (a == "--debug")
			o.debug = true;
		else if (a == "--work")
			o.work = std::stoull(next());
		else if (a == "--reps")
			o.reps = std::stoul(next());
		else if (a == "--cpu-ms")
			o.cpu_ms = std::stol(next());
		else if (a == "--src")
			o.src = next();
		else if (a == "--packed")
			o.packed = true;
		else if (a == "--reuse")
			o.reuse_ms = std::stol(next());
		else
			die("unknown argument " + a);
	}
	if (!o.funcs || !o.per_module)
		die("--funcs and --per-module must be positive");

	InitializeNativeTarget();
	InitializeNativeTargetAsmPrinter();

	JITEventListener *l = make_listener(o);
	if (o.reuse_ms)
		return run_reuse(o, l);

	if (o.debug)
		write_source(o);
	std::unique_ptr<Overlap> overlap;
	if (l) {
		overlap = std::make_unique<Overlap>(l);
	}
	auto jit = make_jit(o, overlap.get());
	unsigned objects = 0;
	for (unsigned k = 0; k < o.funcs; k += o.per_module, objects++)
		die_on(jit->addIRModule(make_module(
			       o, k, std::min(o.funcs, k + o.per_module))),
		       "addIRModule");

	// One lookup of every function: ORC hands all modules to the compile
	// threads at once.
	SymbolLookupSet names;
	for (unsigned k = 0; k < o.funcs; k++)
		names.add(jit->mangleAndIntern(fname(k)));
	auto t0 = std::chrono::steady_clock::now();
	auto syms = jit->getExecutionSession().lookup(
		makeJITDylibSearchOrder(&jit->getMainJITDylib()), names);
	if (!syms)
		die("lookup: " + toString(syms.takeError()));
	auto t1 = std::chrono::steady_clock::now();
	std::printf("functions %u objects %u compile_ms %.1f\n", o.funcs,
		    objects,
		    std::chrono::duration<double, std::milli>(t1 - t0).count());
	JitFn root = reinterpret_cast<JitFn>(
		(*syms)[jit->mangleAndIntern(fname(0))].getAddress());
	std::printf("result %ld\n", drive_jit(root, o.reps, o.cpu_ms));
	if (overlap)
		std::printf("notifications_overlapping_max %u\n",
			    overlap->max());
	print_stats(o, l);
	return 0;
}
