#!/bin/bash
# SPDX-License-Identifier: MIT
#
# `make demo`: run the test JIT, validate its jitdump, and, where perf works,
# profile it and show what perf sees.
#
#   demo.sh BUILD_DIR
#
# Leaves its files in BUILD_DIR/demo (dumps, perf.data, injected ELFs) so
# the profile can be explored afterwards.  Exits 0 on a healthy system, also
# when perf cannot be used here; 1 when jitring or the pipeline misbehaves.

set -u
export LC_ALL=C

THREADS=${DEMO_THREADS:-8}
FUNCTIONS=${DEMO_FUNCTIONS:-300}
RUN_SECONDS=${DEMO_SECONDS:-3}
ENGINE=${DEMO_ENGINE:-rings}

if [ $# -ne 1 ]; then
	echo "usage: $0 BUILD_DIR" >&2
	exit 2
fi
build=$(cd "$1" && pwd) || exit 2
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

for f in "$testjit" "$dumptool"; do
	[ -x "$f" ] || die "$f is missing; build first (ninja -C $build)"
done
if [ "$(uname -m)" != x86_64 ]; then
	echo "demo: testjit generates x86_64 code only; nothing to show on $(uname -m)"
	exit 0
fi

rm -rf "$work"
mkdir -p "$work/plain" "$work/perf" "$work/home" || die "cannot create $work"

# --- 1. the JIT on its own --------------------------------------------------
section "1. testjit: $THREADS threads x $FUNCTIONS functions, $ENGINE engine, ${RUN_SECONDS} s"
"$testjit" --threads "$THREADS" --functions "$FUNCTIONS" --seconds "$RUN_SECONDS" \
	--engine "$ENGINE" --dir "$work/plain" > "$work/plain/testjit.out" ||
	{ cat "$work/plain/testjit.out"; die "testjit failed"; }
sed -n '/^== testjit summary ==$/,$p' "$work/plain/testjit.out" | sed 1d

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
echo "\$ perf record -k 1 -e cpu-clock -F 499 --call-graph dwarf -o perf.data -- testjit ..."
t0=$(date +%s.%N)
timeout 120 perf record -k 1 -e cpu-clock -F 499 --call-graph dwarf -o perf.data -- \
	"$testjit" --threads "$THREADS" --functions "$FUNCTIONS" \
	--seconds "$RUN_SECONDS" --engine "$ENGINE" --dir "$work/perf" \
	> testjit.out 2> record.err ||
	{ cat testjit.out record.err; die "perf record -- testjit failed"; }
grep -v '^\[ perf record: Woken' record.err
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

timeout 120 perf report -i perf.jit.data --stdio --no-children -g none --sort sym \
	--pid "$pid" -n -q > report.txt 2> report.err ||
	{ tail -n 5 report.err; die "perf report failed"; }
read -r total jit <<< "$(awk '
	$1 ~ /%$/ && $2 ~ /^[0-9]+$/ { total += $2; if ($4 ~ /^jit_func_/) jit += $2 }
	END { print total + 0, jit + 0 }' report.txt)"
[ "$total" -gt 0 ] || die "perf report shows no samples for pid $pid"

section "4. top 10 JIT symbols (share of the $total samples of testjit, pid $pid)"
awk -v total="$total" '
	$1 ~ /%$/ && $2 ~ /^[0-9]+$/ && $4 ~ /^jit_func_/ && n < 10 {
		n++
		printf "  %2d. %6.2f%%  %6d samples  %s\n", n, 100 * $2 / total, $2, $4
	}' report.txt
printf "  all jit_func_* symbols: %d of %d samples (%.1f%%)\n" "$jit" "$total" \
	"$(awk -v a="$jit" -v b="$total" 'BEGIN { print 100 * a / b }')"

section "5. a call chain through a JIT frame (perf script, DWARF unwinding)"
timeout 120 perf script -i perf.jit.data --pid "$pid" -F comm,tid,ip,sym,dso \
	> script.txt 2> script.err || { tail -n 5 script.err; die "perf script failed"; }
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
				break
			}
		}
	}
	END { print chains + 0, good + 0 }' script.txt)"
# Prefer a chain through a hot function (some thread's function 0).
chain=$(awk 'BEGIN { RS = "" }
	/jit_func_t[0-9]+_0 [^\n]*\n[^\n]*jit_caller_hot/ { print; found = 1; exit }
	/jit_func_[^\n]*\n[^\n]*jit_caller_hot/ && any == "" { any = $0 }
	END { if (!found && any != "") print any }' script.txt)
if [ -n "$chain" ]; then
	echo "$chain"
else
	echo "(no sample unwound from a jit_func_* frame into jit_caller_hot)"
fi
echo "$good of $chains samples in jit_func_* unwound into jit_caller_hot"

section "done"
# The ~/.debug copies of the injected ELFs are not needed to explore.
rm -rf "$work/home/.debug"
printf "profile took %.1f s; files are in %s\n" \
	"$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$work"
echo "explore: cd $work/perf && HOME=$work/home perf report -i perf.jit.data"
[ "$good" -gt 0 ] || die "no call chain continued from JIT code into jit_caller_hot"
[ $((jit * 2)) -gt "$total" ] || die "fewer than half the samples are in JIT symbols"
exit 0
