#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install the Debian 12 packages jitring needs, only those missing.
# Usage: scripts/deps.sh [core|bench|fuzz|cross|python|browser|llvm|llvm15|all]   (default: core)
# cross: an aarch64 cross compiler and qemu-user, for the aarch64
# trampoline test (tests/cross/run-aarch64.sh), which skips without them.
# python: what scripts/build-python.sh needs to build CPython from source
# (xz for the tarball; zlib, bz2, lzma and libffi for the stdlib modules
# the tests and the runner use).
# browser: a headless browser for the flame graph page's test
# (python/tests/test_flame.py), which skips without it, and Node.js for
# its check of the page's script.
# llvm: LLVM 14 for the listener in llvm/, and PostgreSQL 15 (its JIT uses
# LLVM 14) as the listener's real client in the llvm suite.
# llvm15: LLVM 15 (Debian 12's llvm-15-dev), for a second listener that the
# preloaded library picks in LLVM 15 programs (lli-15), and make test-llvm15.
set -euo pipefail

core=(gcc g++ make pkg-config meson ninja-build python3 binutils
      libck-dev linux-perf)
bench=(libbenchmark-dev valgrind gnuplot-nox python3-docutils)
fuzz=(clang libclang-rt-14-dev clang-format)
cross=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
python=(xz-utils zlib1g-dev libbz2-dev liblzma-dev libffi-dev)
browser=(chromium nodejs)
llvm=(llvm-14-dev postgresql-15)
llvm15=(llvm-15-dev)

want=("${core[@]}")
case "${1:-core}" in
core) ;;
bench) want+=("${bench[@]}") ;;
fuzz) want+=("${fuzz[@]}") ;;
cross) want+=("${cross[@]}") ;;
python) want+=("${python[@]}") ;;
browser) want+=("${browser[@]}") ;;
llvm) want+=("${llvm[@]}") ;;
llvm15) want+=("${llvm15[@]}") ;;
all) want+=("${bench[@]}" "${fuzz[@]}" "${cross[@]}" "${python[@]}" "${browser[@]}" "${llvm[@]}" "${llvm15[@]}") ;;
*) echo "usage: $0 [core|bench|fuzz|cross|python|browser|llvm|llvm15|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "jitring: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
	run=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
	run=(sudo -n)
else
	echo "jitring: not root and no passwordless sudo; please run:" >&2
	echo "  sudo apt-get install -y ${missing[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -qq
"${run[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
