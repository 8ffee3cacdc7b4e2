#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build tests/unit/test_trampoline_unwind.c for aarch64 (with
# src/format/eh_frame.c, the only part of the library it needs) and run
# it under qemu-user: the
# aarch64 trampoline template is executed, and unwound by libgcc through
# the CFI jitring_eh_frame_build() makes for it.  Exit 77 (skip) when the
# cross compiler or qemu is missing: Debian packages gcc-aarch64-linux-gnu
# and qemu-user (`scripts/deps.sh cross` installs them).
#
# Usage: run-aarch64.sh SOURCE_ROOT BUILD_DIR
set -euo pipefail
src=$1
out=$2/test_trampoline_unwind_aarch64
cc=aarch64-linux-gnu-gcc
for tool in "$cc" qemu-aarch64; do
	if ! command -v "$tool" >/dev/null; then
		echo "skipped: $tool not installed (scripts/deps.sh cross)"
		exit 77
	fi
done
inc=(-I"$src/include" -I"$src/tests" -I"$src/src")
"$cc" -std=gnu11 -O2 -Wall -Wextra -Werror -fno-omit-frame-pointer \
	-D_GNU_SOURCE -static "${inc[@]}" \
	-o "$out" "$src/tests/unit/test_trampoline_unwind.c" \
	"$src/src/format/eh_frame.c"
exec qemu-aarch64 "$out"
