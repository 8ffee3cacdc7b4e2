#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI's job (`make ci`, run by .ci/run): every test (`make test`), the
# llvm suite against LLVM 15 (`make test-llvm15`), the same
# tests under ASan+UBSan and under TSan (clang, -Werror), and the release
# build (gcc, no test hooks, -Werror), after checking the library's code
# against .clang-format.  Every part runs even if an earlier
# one failed; the last line sums them all: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."

rc=0
make --no-print-directory format-check || rc=1
for target in test test-llvm15 test-asan test-tsan check-release; do
	echo "=== make $target"
	start=$(date +%s)
	make --no-print-directory "$target" || rc=1
	echo "=== make $target: $(( $(date +%s) - start )) s"
done
logs=()
for d in build build-llvm15 build-asan build-tsan build-release-check; do
	logs+=("$d/meson-logs/testlog.json")
done
python3 scripts/test-summary.py --expect-suite python "${logs[@]}" || rc=1
exit $rc
