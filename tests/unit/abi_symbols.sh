#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The library exports exactly the public API: the functions jitring.h
# declares with JITRING_API, the global list of src/libjitring.map, the
# dynamic symbols of libjitring.so and the global symbols of the installed
# libjitring.a are one and the same set (no internal jitring_* symbol, no
# reader, nothing else).
#   abi_symbols.sh SRCDIR BUILDDIR
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# JITRING_API <type...> jitring_name(  -- possibly over two lines.
tr '\n' ' ' <"$src/include/jitring.h" |
	grep -oE 'JITRING_API [a-z_0-9 *]*\bjitring_[a-z_0-9]+\(' |
	sed -E 's/.*\b(jitring_[a-z_0-9]+)\($/\1/' | sort -u >"$tmp/header"
sed -n '/global:/,/local:/p' "$src/src/libjitring.map" |
	grep -oE '^\s+jitring_[a-z_0-9]+;' | tr -d ' \t;' | sort -u >"$tmp/map"
nm -D --defined-only "$build/src/libjitring.so" |
	awk '$2 ~ /^[TDBRVW]$/ {sub(/@.*/, "", $3); print $3}' | sort -u >"$tmp/so"
nm -g --defined-only "$build/src/libjitring.a" 2>/dev/null |
	awk 'NF == 3 {print $3}' | sort -u >"$tmp/a"

fail=0
for f in map so a; do
	if ! diff -u "$tmp/header" "$tmp/$f" >"$tmp/diff"; then
		echo "public API in jitring.h vs $f differ:"
		cat "$tmp/diff"
		fail=1
	fi
done
n=$(wc -l <"$tmp/header")
[ "$n" -ge 15 ] || { echo "only $n JITRING_API functions found"; fail=1; }
echo "$n public functions; libjitring.so and libjitring.a export exactly those"
if [ $fail = 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
