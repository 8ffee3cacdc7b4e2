#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A multithreaded Python program under python -m jitring, through real perf:
#
#   perf_python.sh PYTHON PKGDIR DUMPTOOL [ENGINE]
#
# PYTHON the interpreter, PKGDIR the directory holding the built jitring
# package, DUMPTOOL jitring-dump, ENGINE rings (default) or mutex.
#  1. perf record -k 1 -e cpu-clock --call-graph dwarf -- PYTHON -m jitring
#     drive.py: 4 threads calling hot_a / hot_b from perf_prog.py's worker
#     until each has run 0.5 s on a CPU (perf's cpu-clock samples count CPU
#     time, so the profile is as large on a loaded machine as on an idle
#     one)
#  2. jitring-dump --check --sorted on its dump
#  3. perf inject --jit: one jitted-<pid>-<n>.so per CODE_LOAD
#  4. perf report --sort sym names py::hot_a:<prog> and py::hot_b:<prog>,
#     and more than 50% of the process's samples have a py::hot_* frame
#  5. perf script: at least 80% of the call chains with a py::hot_* frame
#     go on, further out, through py::worker:<prog> (DWARF unwinding from
#     the interpreter through the trampoline copies into the caller's
#     Python frame and its copy)
# Exit 0 pass, 1 fail (scratch directory kept), 77 when perf cannot be used.
# Takes about 10 s.

set -u
export LC_ALL=C

THREADS=4
CPU_SECONDS=0.5		# each thread's CPU time
MIN_HOT_SHARE=50	# percent of the process's samples under py::hot_*
MIN_CHAIN_SHARE=80	# percent of py::hot_* chains reaching py::worker
MIN_CHAINS=50

if [ $# -lt 3 ]; then
	echo "usage: $0 PYTHON PKGDIR DUMPTOOL [rings|mutex]" >&2
	exit 2
fi
python=$1
pkgdir=$(cd "$2" && pwd) || exit 2
dumptool=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
engine=${4:-rings}
here=$(cd "$(dirname "$0")" && pwd)

# pass/fail/skip and the perf set-up (probe, scratch directory, $HOME) are
# the e2e tests' own; python/ lives in the same repository (-P: through
# the subprojects/jitring-python link).
common=$(cd -P "$here/../../tests/e2e" 2> /dev/null && pwd)/perf_common.sh
[ -f "$common" ] || { echo "no tests/e2e/perf_common.sh next to python/" >&2; exit 2; }
. "$common"
[ -x "$python" ] || fail "$python is not executable"
[ -x "$dumptool" ] || fail "$dumptool not built"
e2e_perf pyperf
cp "$here/perf_prog.py" prog.py
prog=$scratch/prog.py
# The threads, each bounded by its own CPU time: worker's one call of
# hot_a or hot_b (no deadline) at a time.
cat > drive.py << 'EOF'
import sys
import threading
import time

import prog


def run(k, cpu):
    end = time.thread_time() + cpu
    while time.thread_time() < end:
        prog.worker(k, float("inf"), 1)


threads, cpu = int(sys.argv[1]), float(sys.argv[2])
ts = [threading.Thread(target=run, args=(k, cpu)) for k in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("done", threads, "threads")
EOF

echo "$python, engine $engine, $THREADS threads, ${CPU_SECONDS} s of CPU each; scratch $scratch"
start=$(date +%s)

# --- 1-2: record and check the dump ---------------------------------------
mkdir dump
if ! PYTHONPATH=$pkgdir timeout 120 perf record -k 1 -e cpu-clock -F 499 \
	--call-graph dwarf -o perf.data -- "$python" -m jitring --dir dump \
	--engine "$engine" drive.py $THREADS $CPU_SECONDS \
	> prog.out 2> record.err; then
	cat prog.out record.err
	fail "perf record -- python -m jitring drive.py failed"
fi
grep -q "^done $THREADS threads" prog.out || fail "drive.py: $(cat prog.out)"
dumps=(dump/jit-*.dump)
{ [ ${#dumps[@]} -eq 1 ] && [ -f "${dumps[0]}" ]; } ||
	fail "expected one jit-<pid>.dump, found: ${dumps[*]}"
dump=${dumps[0]}
pid=${dump##*/jit-}
pid=${pid%.dump}
out=$("$dumptool" --check --sorted "$dump" 2>&1) ||
	fail "jitring-dump --check --sorted $dump: $out"
loads=$(echo "$out" | awk '$1 == "CODE_LOAD" { print $2 }')
pass "jitring-dump --check --sorted: $(echo "$out" | head -n 1)"
for f in hot_a hot_b worker; do
	n=$("$dumptool" "$dump" | grep -c "name=py::$f:$prog\$")
	[ "$n" -eq 1 ] || fail "py::$f:$prog is in the dump $n times, want 1"
done
pass "py::hot_a, py::hot_b and py::worker once each in the dump"

# --- 3: inject --------------------------------------------------------------
timeout 120 perf inject --jit -i perf.data -o perf.jit.data \
	> inject.err 2>&1 ||
	fail "perf inject --jit failed: $(tail -n 5 inject.err)"
n_elf=$(find dump -maxdepth 1 -name "jitted-$pid-*.so" | wc -l)
[ "$n_elf" -eq "$loads" ] ||
	fail "perf inject wrote $n_elf jitted-$pid-*.so, want $loads"
pass "perf inject --jit: $n_elf ELF images"

# --- 4: perf report names the script's functions ---------------------------
timeout 60 perf report -i perf.jit.data --stdio --children --sort sym \
	--pid "$pid" -g none -q > report.txt 2> report.err ||
	fail "perf report failed: $(tail -n 5 report.err)"
for f in hot_a hot_b worker; do
	grep -q "\] py::$f:$prog\$" report.txt ||
		fail "perf report --children --sort sym does not name py::$f:$prog"
done
pass "perf report names py::hot_a, py::hot_b and py::worker"
echo "perf report --children --sort sym, top 6:"
head -n 6 report.txt

# --- 5: DWARF call chains through the trampolines --------------------------
timeout 120 perf script -i perf.jit.data --pid "$pid" -F comm,tid,ip,sym,dso \
	> script.txt 2> script.err ||
	fail "perf script failed: $(tail -n 5 script.err)"
# One sample per paragraph: a "comm tid" line, then "addr sym (dso)" frames
# innermost first.
read -r samples chains good <<< "$(awk -v hot="^py::hot_[ab]:" \
	-v caller="py::worker:$prog" '
	BEGIN { RS = "" }
	{
		samples++
		n = split($0, f, "\n")
		for (i = 2; i <= n; i++) {
			split(f[i], w, " ")
			if (w[2] ~ hot) {
				chains++
				ok = 0
				for (j = i + 1; j <= n; j++) {
					split(f[j], v, " ")
					if (v[2] == caller) { ok = 1; break }
				}
				if (ok) good++
				else if (bad++ < 3) print "broken chain:\n" $0 > "/dev/stderr"
				break
			}
		}
	}
	END { print samples + 0, chains + 0, good + 0 }' script.txt 2> broken.txt)"
[ "$chains" -ge $MIN_CHAINS ] ||
	fail "only $chains of $samples samples have a py::hot_* frame, want >= $MIN_CHAINS"
share=$((chains * 100 / samples))
[ "$share" -gt $MIN_HOT_SHARE ] ||
	fail "only $chains of $samples samples ($share%) have a py::hot_* frame, want > $MIN_HOT_SHARE%"
pass "$chains of $samples samples ($share%) have a py::hot_* frame"
cshare=$((good * 100 / chains))
if [ "$cshare" -lt $MIN_CHAIN_SHARE ]; then
	cat broken.txt
	fail "only $good of $chains chains ($cshare%) go from py::hot_* on to py::worker, want >= $MIN_CHAIN_SHARE%"
fi
pass "$good of $chains chains ($cshare%) unwind from py::hot_* through to py::worker"
echo "example call chain:"
awk 'BEGIN { RS = "" } /py::hot_a:[^\n]*\n(.*\n)*[^\n]*py::worker:/ { print; exit }' \
	script.txt | head -n 20

echo "took $(($(date +%s) - start)) s"
cd /
rm -rf "$scratch"
echo "$passed passed, $failed failed"
exit 0
