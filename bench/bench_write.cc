// SPDX-License-Identifier: MIT
//
// jitring_write() throughput and per-call latency: the rings engine, the
// mutex engine and the floor side by side (bench/README.md).
//
// One benchmark = (mode, shape, threads, engine).  Each runs T real threads
// from a pool created before the timed region.  One google-benchmark
// iteration is one *round*: every thread writes K entries and then calls
// jitring_flush(), so the entries are in the file when the clock stops.
// The round's time is wall clock from the go signal to the last thread's
// return from jitring_flush() (UseManualTime).  We do not use ->Threads():
// google-benchmark 1.7.1 averages the per-thread wall times, which
// overstates throughput when hundreds of threads share two cores and do not
// all run for the whole round.
//
// Modes: "tput" makes no per-call measurement; "lat" also times every
// jitring_write() with rdtsc into per-thread log-linear histograms, merged
// at the end and reported as p50/p99/p99.9/max counters (ns).
//
// Flags (before google-benchmark's own):
//   --matrix=quick|full   which shapes x threads to register (default quick)
//   --threads=1,2,...     override the thread counts
//   --shapes=cpython,...  override the shapes
//   --engines=floor,rings,mutex
//   --modes=tput,lat
//   --rounds=N            iterations per benchmark (default: matrix's)
//   --budget=N            entries per round over all threads (default: matrix's)
//   --slow                also run code4k at 1024 and 4096 threads, where the
//                         rings engine collapses (minutes per round; README)
// Environment: JITRING_BENCH_DIR (default /dev/shm) for the dumps, which are
// deleted after each benchmark.
#include <benchmark/benchmark.h>

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "benchlib.h"

namespace {

long futex(std::atomic<uint32_t> *addr, int op, uint32_t val)
{
	return syscall(SYS_futex, reinterpret_cast<uint32_t *>(addr), op, val,
		       nullptr, nullptr, 0);
}

struct Params {
	int mode;   // 0 tput, 1 lat
	int shape;
	int threads;
	int engine;
	uint64_t per_thread;  // K
	int rounds;
};

struct alignas(64) Worker {
	pthread_t tid;
	int index;
	uint64_t end_ns;
	uint64_t errors;
	int64_t last_err;
	bench_hist *hist;  // lat mode only
};

// A pool of T threads parked on a futex between rounds.
class Pool {
public:
	Pool(int threads, int engine, const jitring_entry *e, bool lat)
		: n_(threads), engine_(engine), e_(e), lat_(lat),
		  w_(static_cast<size_t>(threads))
	{
		pthread_attr_t attr;

		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, 256u << 10);
		for (int i = 0; i < n_; i++) {
			w_[i].index = i;
			if (lat_) {
				w_[i].hist = static_cast<bench_hist *>(
					calloc(1, sizeof(bench_hist)));
			}
			Arg *a = new Arg{this, &w_[i]};
			int ret = pthread_create(&w_[i].tid, &attr, entry, a);
			if (ret) {
				fprintf(stderr, "pthread_create #%d: %s\n", i,
					strerror(ret));
				abort();
			}
		}
		pthread_attr_destroy(&attr);
	}

	~Pool()
	{
		stop_ = true;
		Go(nullptr, 0);
		for (auto &w : w_) {
			pthread_join(w.tid, nullptr);
			free(w.hist);
		}
	}

	// One round: every thread writes k entries then flushes.  Returns the
	// wall time in ns from the go signal to the last thread done.
	uint64_t Round(jitring *jr, uint64_t k, int lo = 0, int hi = INT32_MAX)
	{
		uint64_t t0 = bench_now_ns();

		lo_ = lo;
		hi_ = hi;
		Go(jr, k);
		WaitDone();
		uint64_t end = t0;
		for (auto &w : w_)
			end = std::max(end, w.end_ns);
		return end - t0;
	}

	void ResetHist()
	{
		for (auto &w : w_)
			if (w.hist)
				bench_hist_reset(w.hist);
	}

	void Merge(bench_hist *out) const
	{
		for (auto &w : w_)
			if (w.hist)
				bench_hist_merge(out, w.hist);
	}

	uint64_t Errors(int64_t *last) const
	{
		uint64_t n = 0;
		for (auto &w : w_) {
			n += w.errors;
			if (w.errors)
				*last = w.last_err;
		}
		return n;
	}

private:
	struct Arg {
		Pool *p;
		Worker *w;
	};

	static void *entry(void *arg)
	{
		Arg a = *static_cast<Arg *>(arg);
		delete static_cast<Arg *>(arg);
		a.p->Loop(a.w);
		return nullptr;
	}

	void Go(jitring *jr, uint64_t k)
	{
		jr_ = jr;
		k_ = k;
		done_.store(0, std::memory_order_relaxed);
		gen_.fetch_add(1, std::memory_order_release);
		futex(&gen_, FUTEX_WAKE_PRIVATE, INT32_MAX);
	}

	void WaitDone()
	{
		for (;;) {
			uint32_t d = done_.load(std::memory_order_acquire);
			if (d == static_cast<uint32_t>(n_))
				return;
			futex(&done_, FUTEX_WAIT_PRIVATE, d);
		}
	}

	template <bool kLat>
	void Work(Worker *w, jitring *jr, uint64_t k)
	{
		const jitring_entry *e = e_;
		const int engine = engine_;

		for (uint64_t i = 0; i < k; i++) {
			int64_t r;
			if (kLat) {
				uint64_t t = bench_ticks_begin();
				r = bench_write(engine, jr, e);
				bench_hist_add(w->hist, bench_ticks_end() - t);
			} else {
				r = bench_write(engine, jr, e);
			}
			if (r < 0) {
				w->errors++;
				w->last_err = r;
			}
			benchmark::DoNotOptimize(r);
		}
		if (engine != BENCH_FLOOR) {
			int r = jitring_flush(jr);
			if (r < 0) {
				w->errors++;
				w->last_err = r;
			}
		}
	}

	void Loop(Worker *w)
	{
		uint32_t seen = 0;

		for (;;) {
			uint32_t g;
			while ((g = gen_.load(std::memory_order_acquire)) == seen)
				futex(&gen_, FUTEX_WAIT_PRIVATE, seen);
			seen = g;
			if (stop_)
				return;
			if (w->index < lo_ || w->index >= hi_)
				;  // not in this (warm-up) wave
			else if (lat_)
				Work<true>(w, jr_, k_);
			else
				Work<false>(w, jr_, k_);
			w->end_ns = bench_now_ns();
			if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 ==
			    static_cast<uint32_t>(n_))
				futex(&done_, FUTEX_WAKE_PRIVATE, 1);
		}
	}

	const int n_;
	const int engine_;
	const jitring_entry *const e_;
	const bool lat_;
	std::vector<Worker> w_;
	jitring *jr_ = nullptr;
	uint64_t k_ = 0;
	int lo_ = 0, hi_ = INT32_MAX;
	bool stop_ = false;
	alignas(64) std::atomic<uint32_t> gen_{0};
	alignas(64) std::atomic<uint32_t> done_{0};
};

void BM_Write(benchmark::State &state, Params p)
{
	const jitring_entry *e = bench_shape_entry(p.shape);
	const uint64_t entry_bytes = bench_shape_bytes(p.shape);
	jitring *jr = nullptr;

	// Setup, outside the timed region: writer, threads, a warm-up round
	// (registers each thread's ring, faults in buffers).  Threads register
	// in waves of 256: when thousands of threads make their first write at
	// the same moment the rings engine can take tens of seconds and refuse
	// writes with -ENOMEM (rss_driver storm measures that); the timed
	// rounds measure the steady state.
	if (p.engine != BENCH_FLOOR) {
		int ret = bench_open(p.engine, &jr);
		if (ret) {
			state.SkipWithError(("jitring_open: " +
					     std::string(strerror(-ret))).c_str());
			for (auto _ : state) {
			}
			return;
		}
	}
	auto pool = std::make_unique<Pool>(p.threads, p.engine, e, p.mode == 1);
	for (int lo = 0; lo < p.threads; lo += 256)
		pool->Round(jr, std::min<uint64_t>(p.per_thread, 64), lo, lo + 256);
	pool->ResetHist();
	struct jitring_stats st0{};
	st0.struct_size = sizeof(st0);
	if (jr)
		jitring_stats(jr, &st0);

	uint64_t rounds = 0;
	double total_ns = 0;
	for (auto _ : state) {
		uint64_t ns = pool->Round(jr, p.per_thread);
		state.SetIterationTime(static_cast<double>(ns) * 1e-9);
		total_ns += static_cast<double>(ns);
		rounds++;
	}

	const uint64_t items = rounds * p.per_thread * static_cast<uint64_t>(p.threads);
	state.SetItemsProcessed(static_cast<int64_t>(items));
	state.SetBytesProcessed(static_cast<int64_t>(items * entry_bytes));
	auto &c = state.counters;
	c["threads"] = p.threads;
	c["entries_per_thread"] = static_cast<double>(p.per_thread);
	c["entry_bytes"] = static_cast<double>(entry_bytes);
	c["ns_per_entry"] = total_ns / static_cast<double>(items ? items : 1);

	if (p.mode == 1) {
		auto h = static_cast<bench_hist *>(calloc(1, sizeof(bench_hist)));
		pool->Merge(h);
		const double k = bench_ns_per_tick();
		c["p50_ns"] = bench_hist_quantile(h, 0.50) * k;
		c["p99_ns"] = bench_hist_quantile(h, 0.99) * k;
		c["p999_ns"] = bench_hist_quantile(h, 0.999) * k;
		c["max_ns"] = static_cast<double>(h->max) * k;
		c["samples"] = static_cast<double>(h->count);
		free(h);
	}

	int64_t last_err = 0;
	uint64_t errors = pool->Errors(&last_err);
	pool.reset();  // join the threads (their rings are released)

	if (jr) {
		struct jitring_stats st{};
		st.struct_size = sizeof(st);
		jitring_stats(jr, &st);
		const uint64_t expect = st0.entries_written + items;
		c["ring_full_waits"] = static_cast<double>(st.ring_full_waits -
							   st0.ring_full_waits);
		c["late_entries"] = static_cast<double>(st.late_entries -
							st0.late_entries);
		c["batches"] = static_cast<double>(st.batches - st0.batches);
		c["refills_waited"] = static_cast<double>(st.refills_waited);
		if (st.entries_written != expect && !errors) {
			fprintf(stderr, "entries_written %llu != %llu\n",
				(unsigned long long)st.entries_written,
				(unsigned long long)expect);
			errors++;
		}
		int ret = bench_close(jr);
		if (ret && !errors) {
			errors++;
			last_err = ret;
		}
	}
	if (errors)
		state.SkipWithError(("write errors: " + std::to_string(errors) +
				     " (last " + std::to_string(last_err) + ")")
					    .c_str());
}

std::vector<std::string> split(const std::string &s)
{
	std::vector<std::string> out;
	size_t pos = 0;
	while (pos <= s.size()) {
		size_t c = s.find(',', pos);
		if (c == std::string::npos)
			c = s.size();
		if (c > pos)
			out.push_back(s.substr(pos, c - pos));
		pos = c + 1;
	}
	return out;
}

[[noreturn]] void usage(const char *bad)
{
	fprintf(stderr, "bench_write: bad option %s (see the top of bench/bench_write.cc)\n", bad);
	exit(2);
}

}  // namespace

int main(int argc, char **argv)
{
	std::string matrix = "quick";
	std::vector<int> threads, shapes, engines, modes;
	int rounds = 0;
	uint64_t budget = 0;
	bool slow = false;
	std::vector<char *> rest;

	rest.push_back(argv[0]);
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		auto val = [&](const char *pfx) -> const char * {
			size_t n = strlen(pfx);
			return a.compare(0, n, pfx) == 0 ? argv[i] + n : nullptr;
		};
		const char *v;
		if ((v = val("--matrix="))) {
			matrix = v;
			if (matrix != "quick" && matrix != "full")
				usage(argv[i]);
		} else if ((v = val("--threads="))) {
			for (auto &t : split(v))
				threads.push_back(atoi(t.c_str()));
		} else if ((v = val("--shapes="))) {
			for (auto &t : split(v)) {
				int s = bench_shape_parse(t.c_str());
				if (s < 0)
					usage(argv[i]);
				shapes.push_back(s);
			}
		} else if ((v = val("--engines="))) {
			for (auto &t : split(v)) {
				int s = bench_engine_parse(t.c_str());
				if (s < 0)
					usage(argv[i]);
				engines.push_back(s);
			}
		} else if ((v = val("--modes="))) {
			for (auto &t : split(v)) {
				if (t == "tput")
					modes.push_back(0);
				else if (t == "lat")
					modes.push_back(1);
				else
					usage(argv[i]);
			}
		} else if ((v = val("--rounds="))) {
			rounds = atoi(v);
		} else if (a == "--slow") {
			slow = true;
		} else if ((v = val("--budget="))) {
			budget = strtoull(v, nullptr, 0);
		} else {
			rest.push_back(argv[i]);
		}
	}
	const bool full = matrix == "full";
	const std::vector<int> all_threads = {1, 2, 4, 8, 16, 64, 256, 1024, 4096};
	if (threads.empty())
		threads = all_threads;
	if (shapes.empty())
		shapes = {SHAPE_CPYTHON, SHAPE_LOAD, SHAPE_UDL, SHAPE_CODE4K};
	if (engines.empty())
		engines = {BENCH_FLOOR, BENCH_RINGS, BENCH_MUTEX};
	if (modes.empty())
		modes = {0, 1};
	if (!rounds)
		rounds = full ? 4 : 3;
	if (!budget)
		budget = full ? 250000 : 150000;

	for (int shape : shapes) {
		// The quick matrix runs the non-CPython shapes at a few thread
		// counts only.
		for (int t : threads) {
			if (!full && shape != SHAPE_CPYTHON &&
			    t != 1 && t != 8 && t != 256 && t != 4096)
				continue;
			// 4 KiB entries at 1024+ threads: 16 entries per thread
			// overflow a 64 KiB ring and the rings engine takes
			// minutes per round (bench/README.md, findings).
			if (shape == SHAPE_CODE4K && t >= 1024 && !slow)
				continue;
			for (int mode : modes) {
				for (int engine : engines) {
					Params p{};
					p.mode = mode;
					p.shape = shape;
					p.threads = t;
					p.engine = engine;
					p.rounds = rounds;
					// Entries per round: the budget, capped at
					// 48 MiB of file, at least 16 per thread.
					uint64_t b = budget;
					uint64_t cap = (48ull << 20) / bench_shape_bytes(shape);
					if (b > cap)
						b = cap;
					p.per_thread = std::max<uint64_t>(16, b / static_cast<uint64_t>(t));
					std::string name = std::string(mode ? "lat" : "tput") + "/" +
						bench_shape_name(shape) + "/" +
						bench_engine_name(engine) + "/threads:" +
						std::to_string(t);
					benchmark::RegisterBenchmark(name.c_str(), BM_Write, p)
						->Iterations(rounds)
						->UseManualTime()
						->Unit(benchmark::kMillisecond);
				}
			}
		}
	}

	int rargc = static_cast<int>(rest.size());
	benchmark::Initialize(&rargc, rest.data());
	if (benchmark::ReportUnrecognizedArguments(rargc, rest.data()))
		return 2;
	benchmark::AddCustomContext("jitring_bench_dir", bench_dir());
	benchmark::AddCustomContext("matrix", matrix);
	char buf[64];
	snprintf(buf, sizeof(buf), "%.6f", bench_ns_per_tick());
	benchmark::AddCustomContext("ns_per_tick", buf);
	benchmark::RunSpecifiedBenchmarks();
	benchmark::Shutdown();
	return 0;
}
