// SPDX-License-Identifier: MIT
//
// The validator (jitring_check(), what `jitring-dump --check` runs) on
// files built to defeat its hash sets against ordinary ones.
// "crafted": N CODE_LOADs whose code_index values all collided
// in the checker's old, unkeyed sets (tests/safety/hostile.h); "random":
// N scattered code_index values, the same records otherwise.  Both are
// 64-byte loads from 64 threads; the check is of an in-memory image, so
// only the checker is timed.  The crafted/random ratio is the figure that
// matters: with the old sets it was ~900 at N = 100,000 and grew with N.
//
//   bench_check [google-benchmark flags]
#include <benchmark/benchmark.h>

#include <cstdlib>

extern "C" {
#include "reader/reader.h"
}
#include "hostile.h"

namespace {

void BM_check(benchmark::State &state, int crafted)
{
	const size_t n = static_cast<size_t>(state.range(0));
	struct hostile_buf b = {};
	struct jitring_check_result res;

	hostile_dump(&b, n, crafted);
	for (auto _ : state) {
		int ret = jitring_check(b.p, b.len, JITRING_CHECK_SORTED, &res);

		benchmark::DoNotOptimize(ret);
		if (ret != 0)
			state.SkipWithError("the file did not check as valid");
	}
	state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
	state.SetBytesProcessed(static_cast<int64_t>(state.iterations() *
						     b.len));
	free(b.p);
}

} // namespace

BENCHMARK_CAPTURE(BM_check, random, 0)
	->Arg(10000)->Arg(100000)->Arg(1000000)
	->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_check, crafted, 1)
	->Arg(10000)->Arg(100000)->Arg(1000000)
	->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
