#!/bin/bash
# SPDX-License-Identifier: MIT
#
# End-to-end test through real perf:
#
#   perf_e2e.sh BUILD_DIR ENGINE        (ENGINE: rings or mutex)
#
# testjit --mode asm (hand-assembled loops described with jitring_write):
#  1. perf record -k 1 -e cpu-clock -- testjit (4 threads x 64 functions)
#  2. jitring-dump --check --sorted on the dump: valid, one CODE_LOAD and one
#     UNWINDING_INFO per function
#  3. perf inject --jit: one jitted-<pid>-<index>.so per function
#  4. perf report --sort sym: more than 50% of the testjit process's samples
#     are in symbols named jit_func_*, and the hottest symbol is some
#     thread's function 0 (the one testjit calls most)
#  5. perf record --call-graph dwarf, inject, perf script: at least 80% of
#     the call chains whose innermost user frame is jit_func_* continue into
#     jit_caller_hot (DWARF unwinding through the JIT code's .eh_frame)
# testjit --mode runtime (copies of the built-in trampoline from
# jitring_trampolines_get(), each calling the C evaluator jit_eval_hot):
#  6. perf record --call-graph dwarf, 2 and 3 again, then perf script: at
#     least 80% of the chains whose innermost user frame is jit_eval_hot go
#     on through a trampoline named py::func_<n> into jit_runtime_loop (DWARF
#     unwinding from C through the trampoline copy to its C caller); more
#     than 50% of the samples are attributed to a py::func_* frame, the
#     most to py::func_0; perf report --children --sort sym lists it.
#
# Each run of testjit lasts CPU_SECONDS of CPU time (--cpu-seconds), not
# a time on the clock: perf's cpu-clock samples count CPU time, so the
# profiles hold as many samples on a loaded machine as on an idle one.
#
# Exit 0 pass, 1 fail (the scratch directory is kept and named), 77 when
# perf cannot be used here.  Takes about 15 s.

set -u
export LC_ALL=C

THREADS=4
FUNCTIONS=64
CPU_SECONDS=2		# testjit's CPU time per run (--cpu-seconds)
MIN_JIT_SHARE=50	# percent of the process's samples in jit_func_*
MIN_CHAIN_SHARE=80	# percent of jit_func_* chains reaching jit_caller_hot
MIN_CHAINS=20		# fewer samples than this prove nothing
RT_PREFIX='py::func_'	# testjit --mode runtime's default names

. "$(dirname "$0")/perf_common.sh"
e2e_args "$@"
e2e_prog testjit
testjit=$prog
e2e_perf e2e

echo "engine $engine, $THREADS threads x $FUNCTIONS functions, ${CPU_SECONDS} s of CPU; scratch $scratch"
start=$(date +%s)

# run_testjit MODE SUBDIR [perf record options...]: record testjit --mode
# MODE into SUBDIR/perf.data, leave the dump in SUBDIR, set $dump and $pid.
run_testjit() {
	local mode=$1 sub=$2
	shift 2
	mkdir -p "$sub"
	if ! timeout 60 perf record -k 1 -e cpu-clock "$@" -o "$sub/perf.data" -- \
		"$testjit" --mode "$mode" --threads $THREADS --functions $FUNCTIONS \
		--cpu-seconds $CPU_SECONDS --engine "$engine" --dir "$scratch/$sub" \
		> "$sub/testjit.out" 2> "$sub/record.err"; then
		cat "$sub/testjit.out" "$sub/record.err"
		fail "perf record -- testjit failed ($sub)"
	fi
	grep -q '^result: ok' "$sub/testjit.out" ||
		fail "testjit reported a failure ($sub): $(cat "$sub/testjit.out")"
	local dumps=("$sub"/jit-*.dump)
	{ [ ${#dumps[@]} -eq 1 ] && [ -f "${dumps[0]}" ]; } ||
		fail "expected exactly one jit-<pid>.dump in $sub, found: ${dumps[*]}"
	dump=${dumps[0]}
	pid=${dump##*/jit-}
	pid=${pid%.dump}
}

# check_dump: valid and sorted, one CODE_LOAD and UNWINDING_INFO each.
check_dump() {
	local out n_load n_unw want=$((THREADS * FUNCTIONS))
	out=$("$dumptool" --check --sorted "$dump" 2>&1) ||
		fail "jitring-dump --check --sorted $dump: $out"
	n_load=$(echo "$out" | awk '$1 == "CODE_LOAD" { print $2 }')
	n_unw=$(echo "$out" | awk '$1 == "CODE_UNWINDING_INFO" { print $2 }')
	[ "$n_load" = "$want" ] ||
		fail "dump has ${n_load:-no} CODE_LOAD records, want $want"
	[ "$n_unw" = "$want" ] ||
		fail "dump has ${n_unw:-no} UNWINDING_INFO records, want $want"
	pass "jitring-dump --check --sorted: $(echo "$out" | head -n 1)"
}

# inject SUBDIR: perf inject --jit, one ELF per function.
inject() {
	local sub=$1 n_elf
	timeout 60 perf inject --jit -i "$sub/perf.data" -o "$sub/perf.jit.data" \
		> "$sub/inject.err" 2>&1 ||
		fail "perf inject --jit failed ($sub): $(tail -n 5 "$sub/inject.err")"
	n_elf=$(find "$sub" -maxdepth 1 -name "jitted-$pid-*.so" | wc -l)
	[ "$n_elf" -eq $((THREADS * FUNCTIONS)) ] ||
		fail "perf inject wrote $n_elf jitted-$pid-*.so, want $((THREADS * FUNCTIONS))"
	pass "perf inject --jit: $n_elf ELF images"
}

# --- 1-4: samples are attributed to the JIT symbols ------------------------
run_testjit asm flat
check_dump
inject flat

timeout 60 perf report -i flat/perf.jit.data --stdio --sort sym --pid "$pid" \
	-n -q > flat/report.txt 2> flat/report.err ||
	fail "perf report failed: $(tail -n 5 flat/report.err)"
# Lines: "  13.15%  1130  [.] jit_func_t1_0"
read -r total jit top <<< "$(awk '
	$1 ~ /%$/ && $2 ~ /^[0-9]+$/ {
		total += $2
		if ($4 ~ /^jit_func_/) jit += $2
		if (top == "") top = $4
	}
	END { print total + 0, jit + 0, (top == "" ? "-" : top) }' flat/report.txt)"
echo "perf report (pid $pid, --sort sym), top 8:"
head -n 8 flat/report.txt
[ "$total" -gt 0 ] || fail "perf report shows no samples for pid $pid"
share=$((jit * 100 / total))
[ "$share" -gt $MIN_JIT_SHARE ] ||
	fail "only $jit of $total samples ($share%) are in jit_func_* symbols, want > $MIN_JIT_SHARE%"
pass "$jit of $total samples ($share%) are in jit_func_* symbols (> $MIN_JIT_SHARE%)"
[[ $top =~ ^jit_func_t[0-9]+_0$ ]] ||
	fail "hottest symbol is '$top', want some thread's function 0 (jit_func_t<k>_0)"
pass "hottest symbol is $top"

# --- 5: DWARF call chains through the JIT frames ---------------------------
run_testjit asm dwarf -F 499 --call-graph dwarf
check_dump
inject dwarf

timeout 60 perf script -i dwarf/perf.jit.data --pid "$pid" -F comm,tid,ip,sym,dso \
	> dwarf/script.txt 2> dwarf/script.err ||
	fail "perf script failed: $(tail -n 5 dwarf/script.err)"
# One sample per paragraph: a "comm tid" line, then "addr sym (dso)" frames
# innermost first.  Find the innermost jit_func_* frame; the next must be
# jit_caller_hot.
read -r chains good <<< "$(awk '
	BEGIN { RS = "" }
	{
		n = split($0, f, "\n")
		for (i = 2; i <= n; i++) {
			split(f[i], w, " ")
			if (w[2] ~ /^jit_func_/) {
				chains++
				split(f[i + 1], v, " ")
				if (i < n && v[2] == "jit_caller_hot") good++
				else if (bad++ < 3) print "broken chain:\n" $0 > "/dev/stderr"
				break
			}
		}
	}
	END { print chains + 0, good + 0 }' dwarf/script.txt 2> dwarf/broken.txt)"
example=$(awk 'BEGIN { RS = "" } /jit_func_[^\n]*\n[^\n]*jit_caller_hot/ { print; exit }' \
	dwarf/script.txt)
[ "$chains" -ge $MIN_CHAINS ] ||
	fail "only $chains call chains with a jit_func_* frame, want >= $MIN_CHAINS"
cshare=$((good * 100 / chains))
if [ "$cshare" -lt $MIN_CHAIN_SHARE ]; then
	cat dwarf/broken.txt
	fail "only $good of $chains call chains ($cshare%) continue from jit_func_* into jit_caller_hot, want >= $MIN_CHAIN_SHARE%"
fi
pass "$good of $chains call chains ($cshare%) continue from jit_func_* into jit_caller_hot (>= $MIN_CHAIN_SHARE%)"
echo "example call chain:"
echo "$example"

# --- 6: the trampoline kit: chains through per-function trampolines -------
run_testjit runtime tramp -F 499 --call-graph dwarf
check_dump
inject tramp

timeout 60 perf script -i tramp/perf.jit.data --pid "$pid" -F comm,tid,ip,sym,dso \
	> tramp/script.txt 2> tramp/script.err ||
	fail "perf script failed: $(tail -n 5 tramp/script.err)"
# Per sample: is the innermost jit_eval_hot frame followed by a trampoline
# frame and then jit_runtime_loop?  And which trampoline is the innermost
# one in the chain (the function the sample is attributed to)?
read -r samples chains good attributed top top_n <<< "$(awk -v pfx="$RT_PREFIX" '
	BEGIN { RS = ""; re = "^" pfx "[0-9]+$" }
	{
		samples++
		n = split($0, f, "\n")
		for (i = 2; i <= n; i++) {
			split(f[i], w, " ")
			if (w[2] == "jit_eval_hot") {
				chains++
				split(f[i + 1], v, " ")
				split(f[i + 2], u, " ")
				if (i + 2 <= n && v[2] ~ re && u[2] == "jit_runtime_loop")
					good++
				else if (bad++ < 3) print "broken chain:\n" $0 > "/dev/stderr"
				break
			}
		}
		for (i = 2; i <= n; i++) {
			split(f[i], w, " ")
			if (w[2] ~ re) { by[w[2]]++; attributed++; break }
		}
	}
	END {
		for (k in by) if (by[k] > top_n) { top = k; top_n = by[k] }
		print samples + 0, chains + 0, good + 0, attributed + 0,
			(top == "" ? "-" : top), top_n + 0
	}' tramp/script.txt 2> tramp/broken.txt)"
[ "$chains" -ge $MIN_CHAINS ] ||
	fail "only $chains call chains with a jit_eval_hot frame, want >= $MIN_CHAINS"
cshare=$((good * 100 / chains))
if [ "$cshare" -lt $MIN_CHAIN_SHARE ]; then
	cat tramp/broken.txt
	fail "only $good of $chains chains ($cshare%) go jit_eval_hot <- ${RT_PREFIX}<n> <- jit_runtime_loop, want >= $MIN_CHAIN_SHARE%"
fi
pass "$good of $chains chains ($cshare%) go jit_eval_hot <- ${RT_PREFIX}<n> <- jit_runtime_loop (>= $MIN_CHAIN_SHARE%)"
ashare=$((attributed * 100 / samples))
[ "$ashare" -gt $MIN_JIT_SHARE ] ||
	fail "only $attributed of $samples samples ($ashare%) have a ${RT_PREFIX}* frame, want > $MIN_JIT_SHARE%"
pass "$attributed of $samples samples ($ashare%) are attributed to a trampoline; most to $top ($top_n)"
[ "$top" = "${RT_PREFIX}0" ] ||
	fail "the trampoline with the most samples is '$top', want ${RT_PREFIX}0 (the hottest function)"
pass "the hottest trampoline is ${RT_PREFIX}0"
echo "example call chain:"
awk -v pfx="$RT_PREFIX" 'BEGIN { RS = "" }
	$0 ~ ("jit_eval_hot[^\n]*\n[^\n]*" pfx "0 [^\n]*\n[^\n]*jit_runtime_loop") { print; exit }' \
	tramp/script.txt

timeout 60 perf report -i tramp/perf.jit.data --stdio --children --sort sym \
	--pid "$pid" -g none -q > tramp/report.txt 2> tramp/report.err ||
	fail "perf report --children failed: $(tail -n 5 tramp/report.err)"
grep -q "\] ${RT_PREFIX}0\$" tramp/report.txt ||
	fail "perf report --children --sort sym does not list ${RT_PREFIX}0"
pass "perf report --children --sort sym lists the trampolines: $(grep -c "\] ${RT_PREFIX}" tramp/report.txt) entries"

echo "took $(($(date +%s) - start)) s"
cd /
rm -rf "$scratch"
echo "$passed passed, $failed failed"
exit 0
