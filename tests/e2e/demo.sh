#!/bin/bash
# SPDX-License-Identifier: MIT
#
# `make demo`: run the test JIT as a small multithreaded runtime built on
# the trampoline kit (testjit --mode runtime: every thread creates its
# functions with jitring_trampolines_get(), each a fresh copy of the
# built-in trampoline that calls the C evaluator jit_eval_hot), validate
# its jitdump, and, where perf works, profile it and show what perf sees;
# then (x86_64) a JIT whose functions carry line tables, to show each hot
# loop's samples on its own source line (perf report --sort srcline,
# perf annotate).
#
#   demo.sh BUILD_DIR
#
# Environment: DEMO_THREADS (64), DEMO_FUNCTIONS (300 per thread),
# DEMO_SECONDS (2), DEMO_PERF_FUNCTIONS (64 per thread: perf inject writes
# one ELF per function), DEMO_PERF_SECONDS (3), DEMO_ENGINE (rings).
#
# Leaves its files in BUILD_DIR/demo (dumps, perf.data, injected ELFs and
# top-symbols.png) so the profile can be explored afterwards.  Exits 0 on a
# healthy system, also when perf (or gnuplot) cannot be used here, saying
# why; 1 when jitring or the pipeline misbehaves.  Takes about 20 s.

set -u
export LC_ALL=C

THREADS=${DEMO_THREADS:-64}
FUNCTIONS=${DEMO_FUNCTIONS:-300}
RUN_SECONDS=${DEMO_SECONDS:-2}
PERF_FUNCTIONS=${DEMO_PERF_FUNCTIONS:-64}
PERF_SECONDS=${DEMO_PERF_SECONDS:-3}
ENGINE=${DEMO_ENGINE:-rings}
PREFIX='py::func_'	# testjit --mode runtime's function names
TOP=10

. "$(dirname "$0")/perf_common.sh" # e2e_hot_js

if [ $# -ne 1 ]; then
	echo "usage: $0 BUILD_DIR" >&2
	exit 2
fi
build=$(cd "$1" && pwd) || exit 2
src=$(cd "$(dirname "$0")/../.." && pwd) || exit 2
testjit=$build/tests/e2e/testjit
dumptool=$build/tools/jitring-dump
work=$build/demo

section() {
	echo
	echo "=== $* ==="
}

die() {
	echo "demo: FAILED: $*" >&2
	exit 1
}

# summary KEY FILE: the value of "KEY: value" in testjit's summary.
summary() {
	sed -n "s|^$1: ||p" "$2" | head -n 1
}

for f in "$testjit" "$dumptool"; do
	[ -x "$f" ] || die "$f is missing; build first (ninja -C $build)"
done

rm -rf "$work"
mkdir -p "$work/plain" "$work/perf" "$work/home" || die "cannot create $work"
t_demo=$(date +%s.%N)

# --- 1. the runtime on its own ----------------------------------------------
section "1. testjit --mode runtime: $THREADS threads x $FUNCTIONS functions, $ENGINE engine, ${RUN_SECONDS} s"
"$testjit" --mode runtime --threads "$THREADS" --functions "$FUNCTIONS" \
	--seconds "$RUN_SECONDS" --engine "$ENGINE" --dir "$work/plain" \
	> "$work/plain/testjit.out" 2> "$work/plain/testjit.err"
rc=$?
if [ $rc -eq 77 ]; then
	cat "$work/plain/testjit.out"
	echo "demo: nothing to show on $(uname -m) (no built-in trampoline)"
	exit 0
fi
[ $rc -eq 0 ] || { cat "$work/plain/testjit.out" "$work/plain/testjit.err"; die "testjit failed"; }
out=$work/plain/testjit.out
echo "threads:    $(summary threads "$out")"
echo "functions:  $(summary functions "$out")"
echo "get():      $(summary 'jitring_trampolines_get other calls' "$out")"
echo "entries/s:  $(summary entries/s "$out")"
echo "calls:      $(summary calls "$out")"
echo "stats:"
for k in entries_written records_written bytes_written trampoline_copies \
	trampoline_arenas_ahead trampoline_arenas_waited refills_ahead refills_waited \
	ring_full_waits late_entries refused_nomem io_error; do
	awk -v k="$k" '$1 == k { printf "  %-20s %s\n", $1, $2 }' "$out"
done
[ "$(summary result "$out")" = ok ] || die "testjit reported a failure"

section "2. jitring-dump --check --sorted"
dump=$(find "$work/plain" -maxdepth 1 -name 'jit-*.dump' | head -n 1)
[ -n "$dump" ] || die "no jit-<pid>.dump in $work/plain"
"$dumptool" --check --sorted "$dump" || die "the dump breaks a rule"

# --- 2. what perf sees ------------------------------------------------------
section "3. perf: record -k 1 --call-graph dwarf, inject --jit, report"
why=
if ! command -v perf > /dev/null 2>&1; then
	why="perf is not installed"
elif [ "$(id -u)" != 0 ] &&
	[ "$(cat /proc/sys/kernel/perf_event_paranoid 2> /dev/null || echo 2)" -gt 2 ]; then
	why="kernel.perf_event_paranoid forbids perf for non-root users"
elif ! probe=$(cd "$work/perf" && HOME=$work/home timeout 30 \
	perf record -e cpu-clock -o probe.data true 2>&1); then
	why="'perf record -e cpu-clock true' fails: $(echo "$probe" | tail -n 1)"
fi
if [ -n "$why" ]; then
	echo "perf cannot be used here ($why); skipping the profile."
	section "done (without perf)"
	exit 0
fi
rm -f "$work/perf/probe.data"

cd "$work/perf" || die "cd $work/perf"
export HOME=$work/home		# perf inject fills ~/.debug
echo "\$ perf record -k 1 -e cpu-clock -F 499 --call-graph dwarf -m 32M -o perf.data -- testjit --threads $THREADS --functions $PERF_FUNCTIONS ..."
t0=$(date +%s.%N)
timeout 120 perf record -k 1 -e cpu-clock -F 499 --call-graph dwarf -m 32M -o perf.data -- \
	"$testjit" --mode runtime --threads "$THREADS" --functions "$PERF_FUNCTIONS" \
	--seconds "$PERF_SECONDS" --engine "$ENGINE" --dir "$work/perf" \
	> testjit.out 2> record.err ||
	{ cat testjit.out record.err; die "perf record -- testjit failed"; }
grep -v '^\[ perf record: Woken' record.err
[ "$(summary result testjit.out)" = ok ] || { cat testjit.out; die "testjit reported a failure"; }
dump=$(find . -maxdepth 1 -name 'jit-*.dump' | head -n 1)
dump=${dump#./}
[ -n "$dump" ] || die "no jit-<pid>.dump in $work/perf"
pid=${dump#jit-}
pid=${pid%.dump}
"$dumptool" --check --sorted "$dump" > check.out || { cat check.out; die "the dump breaks a rule"; }

echo "\$ perf inject --jit -i perf.data -o perf.jit.data"
timeout 300 perf inject --jit -i perf.data -o perf.jit.data > inject.err 2>&1 ||
	{ tail -n 5 inject.err; die "perf inject --jit failed"; }
echo "$(find . -maxdepth 1 -name "jitted-$pid-*.so" | wc -l) ELF images injected for $(awk '$1 == "CODE_LOAD" { print $2 }' check.out) CODE_LOAD records"

echo "\$ perf script -F comm,tid,ip,sym,dso   (call chains, DWARF unwinding)"
timeout 120 perf script -i perf.jit.data --pid "$pid" -F comm,tid,ip,sym,dso \
	> script.txt 2> script.err || { tail -n 5 script.err; die "perf script failed"; }
echo "\$ perf report --children --sort sym"
timeout 120 perf report -i perf.jit.data --stdio --children --sort sym -g none \
	--pid "$pid" -q > report.txt 2> report.err ||
	{ tail -n 5 report.err; die "perf report failed"; }

# A sample belongs to the innermost trampoline on its call chain: the JIT
# function whose evaluation was running.  shares.txt: "samples name".
awk -v pfx="$PREFIX" '
	BEGIN { RS = ""; re = "^" pfx "[0-9]+$" }
	{
		total++
		n = split($0, f, "\n")
		for (i = 2; i <= n; i++) {
			split(f[i], w, " ")
			if (w[2] ~ re) { by[w[2]]++; jit++; break }
		}
	}
	END {
		print total + 0, jit + 0 > "totals.txt"
		for (k in by) print by[k], k
	}' script.txt | sort -k1,1nr -k2,2 > shares.txt
read -r total jit < totals.txt
[ "$total" -gt 0 ] || die "perf script shows no samples for pid $pid"

section "4. top $TOP JIT functions (samples whose call chain runs through the trampoline; $total samples of testjit, pid $pid)"
head -n "$TOP" shares.txt | awk -v total="$total" '
	{ printf "  %2d. %6.2f%%  %6d samples  %s\n", NR, 100 * $1 / total, $1, $2 }'
printf "  all %s* trampolines: %d of %d samples (%.1f%%)\n" "$PREFIX" "$jit" "$total" \
	"$(awk -v a="$jit" -v b="$total" 'BEGIN { print 100 * a / b }')"
echo "  perf report --children --sort sym lists each copy apart (one DSO per"
echo "  copy, $(grep -c "\] ${PREFIX}" report.txt) entries); its first ${PREFIX}* lines:"
grep "\] ${PREFIX}" report.txt | head -n 5 | sed 's/^/  /'

section "5. a call chain through a trampoline (perf script, DWARF unwinding)"
chain=$(awk -v pfx="$PREFIX" 'BEGIN { RS = "" }
	$0 ~ ("jit_eval_hot[^\n]*\n[^\n]*" pfx "0 [^\n]*\n[^\n]*jit_runtime_loop") { print; exit }' script.txt)
read -r chains good <<< "$(awk -v pfx="$PREFIX" '
	BEGIN { RS = ""; re = "^" pfx "[0-9]+$" }
	{
		n = split($0, f, "\n")
		for (i = 2; i <= n; i++) {
			split(f[i], w, " ")
			if (w[2] == "jit_eval_hot") {
				chains++
				split(f[i + 1], v, " ")
				split(f[i + 2], u, " ")
				if (v[2] ~ re && u[2] == "jit_runtime_loop") good++
				break
			}
		}
	}
	END { print chains + 0, good + 0 }' script.txt)"
if [ -n "$chain" ]; then
	echo "$chain"
else
	echo "(no sample unwound from jit_eval_hot through ${PREFIX}0 into jit_runtime_loop)"
fi
echo "$good of $chains samples in jit_eval_hot unwound through a trampoline into jit_runtime_loop"

section "6. source lines (testjit --mode asm --lines: two hot loops, a line table each)"
if [ "$(uname -m)" != x86_64 ]; then
	echo "(testjit --mode asm generates x86_64 code only; skipped on $(uname -m))"
else
	mkdir -p "$work/lines/src"
	e2e_hot_js "$work/lines/src/hot.js"
	cd "$work/lines" || die "cd $work/lines"
	echo "\$ perf record -k 1 -e cpu-clock -- testjit --mode asm --lines $work/lines/src/hot.js ..."
	echo "  (rows: line 10 at +0x0, line 20 at +0xc, line 30 at +0x11; jitring closes"
	echo "   the table at the code's end, so perf covers the last row's loop too)"
	timeout 60 perf record -k 1 -e cpu-clock -o perf.data -- \
		"$testjit" --mode asm --lines "$work/lines/src/hot.js" --threads 2 \
		--functions 4 --seconds 2 --engine "$ENGINE" --dir "$work/lines" \
		> testjit.out 2> record.err ||
		{ cat testjit.out record.err; die "perf record -- testjit --lines failed"; }
	timeout 120 perf inject --jit -i perf.data -o perf.jit.data > inject.err 2>&1 ||
		{ tail -n 5 inject.err; die "perf inject --jit (lines) failed"; }
	ldump=$(find . -maxdepth 1 -name 'jit-*.dump' | head -n 1)
	lpid=${ldump#./jit-}
	lpid=${lpid%.dump}
	echo "\$ perf report --sort sym,srcline"
	timeout 60 perf report -i perf.jit.data --stdio --sort sym,srcline \
		--pid "$lpid" -q > report.txt 2> report.err ||
		{ tail -n 5 report.err; die "perf report --sort srcline failed"; }
	head -n 8 report.txt | sed 's/^/  /'
	grep -q 'hot\.js:30' report.txt || die "no sample is on hot.js:30 (the last row)"
	echo "\$ perf annotate --stdio -s jit_func_t0_0   (source from the absolute path)"
	timeout 60 perf annotate -i perf.jit.data --stdio -s jit_func_t0_0 2> annotate.err |
		awk '/loop|function hot/ || ($1 ~ /^[0-9.]+$/ && $1 + 0 >= 1)' |
		head -n 8 | sed 's/^/  /'
	cd "$work/perf" || die "cd $work/perf"
fi

section "7. chart"
if ! command -v gnuplot > /dev/null 2>&1; then
	echo "gnuplot is missing; trying: bash scripts/deps.sh bench"
	bash "$src/scripts/deps.sh" bench > deps.log 2>&1 || tail -n 3 deps.log
fi
if command -v gnuplot > /dev/null 2>&1; then
	head -n "$TOP" shares.txt | awk -v total="$total" \
		'{ printf "\"%s\" %.3f\n", $2, 100 * $1 / total }' > top.dat
	if gnuplot > gnuplot.err 2>&1 <<EOF
set terminal pngcairo size 900,520 font ",10" noenhanced
set output "$work/top-symbols.png"
set title "testjit --mode runtime: $THREADS threads, samples per JIT function (via its trampoline)"
set ylabel "% of samples"
set style fill solid 0.8
set boxwidth 0.7
set xtics rotate by -35
set grid ytics
set yrange [0:*]
set offsets 0.5, 0.5, graph 0.1, 0
unset key
plot "top.dat" using 0:2:xtic(1) with boxes lc rgb "#3a6ea5", \
     "" using 0:2:(sprintf("%.1f", \$2)) with labels offset 0,0.7
EOF
	then
		echo "saved $work/top-symbols.png"
	else
		tail -n 3 gnuplot.err
		echo "gnuplot failed; no chart"
	fi
else
	echo "gnuplot is not available; no chart"
fi

section "done"
# The ~/.debug copies of the injected ELFs are not needed to explore.
rm -rf "$work/home/.debug"
printf "profile took %.1f s, demo %.1f s; files are in %s\n" \
	"$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" \
	"$(awk -v a="$t_demo" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$work"
echo "explore: cd $work/perf && HOME=$work/home perf report -i perf.jit.data --children"
[ "$good" -gt 0 ] || die "no call chain went from jit_eval_hot through a trampoline into jit_runtime_loop"
[ $((jit * 2)) -gt "$total" ] || die "fewer than half the samples ran under a trampoline"
[ "$(head -n 1 shares.txt | awk '{ print $2 }')" = "${PREFIX}0" ] ||
	die "the hottest function is not ${PREFIX}0"
exit 0
