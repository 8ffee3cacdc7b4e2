#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Line tables end to end through real perf:
#
#   perf_lines.sh BUILD_DIR ENGINE        (ENGINE: rings or mutex)
#
# testjit --mode asm --lines FILE generates functions with two hot loops
# of equal cost and describes each with the natural three-row table:
# line 10 at +0x0, line 20 at +0xc (loop 1), line 30 at +0x11 (loop 2), no
# row at the end.  perf 6.1 ends its generated line program at the last
# row, so without the closing row the library appends, loop 2's samples
# get no line ("??:0").  For FILE an absolute path, then a relative name:
#  1. perf record -k 1, testjit; jitring-dump --check --sorted: valid and
#     no line table left open (no "warning:");
#  2. perf inject --jit;
#  3. addr2line on an injected ELF: each loop's addresses, and the
#     epilogue after loop 2, give FILE:20, FILE:30, FILE:30;
#  4. perf report --sort srcline --full-source-path: FILE:20 and FILE:30
#     each hold at least 25% of the process's samples, "??:0" under 10%;
#  5. perf annotate shows the source lines of FILE next to the loops (for
#     the relative name, run where the name resolves).
#
# testjit runs for CPU_SECONDS of CPU time (--cpu-seconds), not a time on
# the clock: perf's cpu-clock samples count CPU time, so the profile holds
# as many samples on a loaded machine as on an idle one.
#
# Exit 0 pass, 1 fail (the scratch directory is kept and named), 77 when
# perf cannot be used here or the host is not x86_64.  About 10 s.

set -u
export LC_ALL=C

THREADS=2
FUNCTIONS=2
CPU_SECONDS=2		# testjit's CPU time (--cpu-seconds)
MIN_LINE_SHARE=25	# percent of the samples for each loop's line
MAX_UNKNOWN=10		# percent of the samples without a line

. "$(dirname "$0")/perf_common.sh"
e2e_args "$@"
e2e_prog testjit
testjit=$prog
e2e_perf lines addr2line nm

# The "source" the table names: a line 20 and a line 30 to show.
mkdir -p src
e2e_hot_js src/hot.js
echo "engine $engine, $THREADS threads x $FUNCTIONS functions, ${CPU_SECONDS} s of CPU; scratch $scratch"
start=$(date +%s)

# run KIND FILE [DIR]: FILE as the table's file name; for a relative name,
# DIR is where it resolves (perf annotate runs there).
run() {
	local kind=$1 file=$2 where=${3:-$scratch}
	local dump pid out so sym base a line want
	mkdir -p "$kind"
	echo "--- $kind: file \"$file\""

	# 1. record, and the dump as written
	timeout 60 perf record -k 1 -e cpu-clock -o "$kind/perf.data" -- \
		"$testjit" --mode asm --lines "$file" --threads $THREADS \
		--functions $FUNCTIONS --cpu-seconds $CPU_SECONDS --engine "$engine" \
		--dir "$scratch/$kind" > "$kind/testjit.out" 2> "$kind/record.err" ||
		{ cat "$kind/testjit.out" "$kind/record.err"; fail "perf record -- testjit failed ($kind)"; }
	grep -q '^result: ok' "$kind/testjit.out" ||
		fail "testjit reported a failure ($kind): $(cat "$kind/testjit.out")"
	dump=$(find "$kind" -maxdepth 1 -name 'jit-*.dump' | head -n 1)
	[ -n "$dump" ] || fail "no jit-<pid>.dump in $kind"
	pid=${dump##*/jit-}
	pid=${pid%.dump}
	out=$("$dumptool" --check --sorted "$dump" 2>&1) ||
		fail "jitring-dump --check --sorted $dump: $out"
	[ "$(echo "$out" | awk '$1 == "CODE_DEBUG_INFO" { print $2 }')" = \
		$((THREADS * FUNCTIONS)) ] || fail "expected $((THREADS * FUNCTIONS)) DEBUG_INFO records: $out"
	if echo "$out" | grep -q '^warning:'; then
		fail "a line table is left open: $(echo "$out" | grep '^warning:')"
	fi
	pass "$kind: dump valid, every line table reaches the end of its code"

	# 2. inject
	timeout 60 perf inject --jit -i "$kind/perf.data" -o "$kind/perf.jit.data" \
		> "$kind/inject.err" 2>&1 ||
		fail "perf inject --jit failed ($kind): $(tail -n 5 "$kind/inject.err")"

	# 3. each row through addr2line, on one injected ELF
	so=$(grep -l "jit_func_t0_0" "$kind"/jitted-"$pid"-*.so | head -n 1)
	[ -n "$so" ] || fail "no injected ELF holds jit_func_t0_0 ($kind)"
	sym=$(nm "$so" | awk '$3 == "jit_func_t0_0" { print $1 }')
	[ -n "$sym" ] || fail "nm finds no jit_func_t0_0 in $so"
	base=$((16#$sym))
	# +0x2 prologue, +0xd loop 1, +0x12 loop 2, +0x16 epilogue
	for a in 2:10 13:20 18:30 22:30; do
		want="$file:${a#*:}"
		line=$(addr2line -e "$so" "$(printf '0x%x' $((base + ${a%%:*})))")
		[ "$line" = "$want" ] ||
			fail "addr2line $so at +${a%%:*}: '$line', want '$want'"
	done
	pass "$kind: addr2line gives $file:10, :20 (loop 1), :30 (loop 2), :30 (epilogue)"

	# 4. perf report --sort srcline
	timeout 60 perf report -i "$kind/perf.jit.data" --stdio --sort srcline \
		--full-source-path --pid "$pid" -n -q > "$kind/report.txt" 2> "$kind/report.err" ||
		fail "perf report failed ($kind): $(tail -n 5 "$kind/report.err")"
	echo "perf report --sort srcline --full-source-path (pid $pid):"
	head -n 5 "$kind/report.txt"
	# Lines: "  49.85%  1994  hot.js:30"
	read -r total l20 l30 unknown <<< "$(awk -v f20="$file:20" -v f30="$file:30" '
		$1 ~ /%$/ && $2 ~ /^[0-9]+$/ {
			total += $2
			if ($3 == f20) l20 += $2
			else if ($3 == f30) l30 += $2
			else if ($3 == "??:0") unknown += $2
		}
		END { print total + 0, l20 + 0, l30 + 0, unknown + 0 }' "$kind/report.txt")"
	[ "$total" -gt 100 ] || fail "only $total samples for pid $pid ($kind)"
	[ $((l20 * 100 / total)) -ge $MIN_LINE_SHARE ] ||
		fail "$file:20 has $l20 of $total samples, want >= $MIN_LINE_SHARE%"
	[ $((l30 * 100 / total)) -ge $MIN_LINE_SHARE ] ||
		fail "$file:30 has $l30 of $total samples, want >= $MIN_LINE_SHARE% (the last row's code)"
	[ $((unknown * 100 / total)) -lt $MAX_UNKNOWN ] ||
		fail "$unknown of $total samples have no line (??:0), want < $MAX_UNKNOWN%"
	pass "$kind: $file:20 $l20, $file:30 $l30, ??:0 $unknown of $total samples"

	# 5. perf annotate finds the source
	(cd "$where" && timeout 60 perf annotate -i "$scratch/$kind/perf.jit.data" \
		--stdio -s jit_func_t0_0) > "$kind/annotate.txt" 2> "$kind/annotate.err" ||
		fail "perf annotate failed ($kind): $(tail -n 5 "$kind/annotate.err")"
	grep -q "loop 2" "$kind/annotate.txt" ||
		fail "perf annotate shows no source line of $file ($kind)"
	pass "$kind: perf annotate shows the source next to the loops"
}

run absolute "$scratch/src/hot.js"
run relative hot.js "$scratch/src"

echo "took $(($(date +%s) - start)) s"
cd /
rm -rf "$scratch"
echo "$passed passed, $failed failed"
exit 0
