#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Trampoline kit under a storm: THREADS threads each create FUNCS functions
# through jitring_trampolines_get() as a runtime would (testjit --mode
# runtime: each copy is called, and the writer's counters must equal the
# copies made), so hundreds of threads race for arena switches, the
# successor links and the flusher's refills.  Then the dump must hold
# every copy once, whole and in time order (jitring-dump --check --sorted).
# Run by `make test` (suite stress), also under ASan and TSan.
#
# usage: kit_storm.sh TESTJIT JITRING_DUMP ENGINE THREADS FUNCS
set -u
[ $# -eq 5 ] || { echo "usage: $0 TESTJIT JITRING_DUMP ENGINE THREADS FUNCS" >&2; exit 2; }
testjit=$1 dumptool=$2 engine=$3 threads=$4 funcs=$5
dir=$(mktemp -d "${TMPDIR:-/tmp}/jitring-kitstorm.XXXXXX") || exit 2
fail() {
	echo "FAIL: $*"
	echo "kept: $dir"
	exit 1
}
"$testjit" --mode runtime --engine "$engine" --threads "$threads" \
	--functions "$funcs" --seconds 1 --dir "$dir" > "$dir/testjit.txt" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
	# No built-in trampoline template on this architecture.
	echo "SKIP: $(tail -n 1 "$dir/testjit.txt")"
	rm -rf "$dir"
	exit 77
fi
[ $rc -eq 0 ] ||
	fail "testjit exited $rc ($(tail -n 3 "$dir/testjit.txt" | tr '\n' ' '))"
grep -q '^result: ok' "$dir/testjit.txt" || fail "testjit: no 'result: ok'"
dumps=("$dir"/jit-*.dump)
[ ${#dumps[@]} -eq 1 ] && [ -f "${dumps[0]}" ] || fail "expected one dump in $dir"
"$dumptool" --check --sorted "${dumps[0]}" > "$dir/check.txt" 2>&1 ||
	fail "jitring-dump --check --sorted: $(head -n 3 "$dir/check.txt" | tr '\n' ' ')"
loads=$(awk '$1 == "CODE_LOAD" { print $2; exit }' "$dir/check.txt")
want=$((threads * funcs))
[ "$loads" = "$want" ] || fail "CODE_LOAD records: $loads, want $want"
echo "ok: $engine, $threads threads x $funcs copies: $loads CODE_LOADs, dump valid and sorted"
rm -rf "$dir"
