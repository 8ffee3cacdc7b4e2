#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A writer closed and a new one opened on the same directory, under real
# perf (a runtime that switches profiling off and on again):
#
#   perf_reopen.sh BUILD_DIR ENGINE        (ENGINE: rings or mutex)
#
#  1. perf record -k 1 -e cpu-clock -- reopenjit (session 1: sess1_fn_0..3,
#     close; session 2, same directory: sess2_fn_0..3, close; each runs
#     its functions for 1 s of CPU time, so the profile is as large on a
#     loaded machine as on an idle one)
#  2. jitring-dump --check --sorted: one valid dump, 8 CODE_LOADs
#  3. the recording holds one marker mapping of the dump per session
#  4. perf inject --jit: 8 distinct jitted-<pid>-<index>.so (code_index
#     unique across the sessions); inject processes the whole dump at each
#     marker, so every function is injected once per marker
#  5. perf report --sort sym names all 8 functions of both sessions, and
#     more than 50% of the process's samples are in them
#
# Exit 0 pass, 1 fail (the scratch directory is kept and named), 77 when
# perf cannot be used here.  Takes about 5 s.

set -u
export LC_ALL=C

MIN_JIT_SHARE=50

. "$(dirname "$0")/perf_common.sh"
e2e_args "$@"
e2e_prog reopenjit
e2e_perf reopen

# --- 1 ----------------------------------------------------------------------
timeout 60 perf record -k 1 -e cpu-clock -o perf.data -- \
	"$prog" --engine "$engine" --dir "$scratch" --seconds 1 \
	> prog.out 2> record.err ||
	fail "perf record -- reopenjit failed: $(cat prog.out record.err)"
grep -q '^result: ok' prog.out || fail "reopenjit: $(cat prog.out)"
pid=$(awk '$1 == "pid:" { print $2 }' prog.out)
dump=$scratch/jit-$pid.dump
[ -f "$dump" ] || fail "no $dump"
n_dumps=$(find . -maxdepth 1 -name 'jit-*.dump' | wc -l)
[ "$n_dumps" -eq 1 ] || fail "$n_dumps dumps, want the one continued dump"
pass "both sessions ran, one dump"

# --- 2 ----------------------------------------------------------------------
out=$("$dumptool" --check --sorted "$dump" 2>&1) ||
	fail "jitring-dump --check --sorted: $out"
n_load=$(echo "$out" | awk '$1 == "CODE_LOAD" { print $2 }')
[ "$n_load" = 8 ] || fail "dump has ${n_load:-no} CODE_LOADs, want 8"
pass "jitring-dump --check --sorted: $(echo "$out" | head -n 1)"

# --- 3 ----------------------------------------------------------------------
n_mark=$(timeout 60 perf script -i perf.data --show-mmap-events 2> /dev/null |
	grep -c "PERF_RECORD_MMAP.* r-xp $dump\$")
[ "$n_mark" -eq 2 ] || fail "$n_mark marker mappings of the dump, want 2"
pass "one marker mapping per session ($n_mark)"

# --- 4 ----------------------------------------------------------------------
timeout 60 perf inject --jit -i perf.data -o perf.jit.data > inject.err 2>&1 ||
	fail "perf inject --jit failed: $(tail -n 5 inject.err)"
n_elf=$(find . -maxdepth 1 -name "jitted-$pid-*.so" | wc -l)
[ "$n_elf" -eq 8 ] || fail "perf inject wrote $n_elf jitted-$pid-*.so, want 8"
n_inj=$(timeout 60 perf script -i perf.jit.data --show-mmap-events 2> /dev/null |
	grep -c "PERF_RECORD_MMAP.*jitted-$pid-[0-9]*\.so\$")
pass "perf inject --jit: $n_elf ELF images, $n_inj injected mappings (8 per marker)"

# --- 5 ----------------------------------------------------------------------
timeout 60 perf report -i perf.jit.data --stdio --sort sym --pid "$pid" \
	-n -q > report.txt 2> report.err ||
	fail "perf report failed: $(tail -n 5 report.err)"
head -n 10 report.txt
for s in 1 2; do
	for n in 0 1 2 3; do
		grep -q "\[\.\] sess${s}_fn_$n\$" report.txt ||
			fail "perf report does not name sess${s}_fn_$n"
	done
done
pass "perf report names all functions of both sessions"
read -r total jit <<< "$(awk '
	$1 ~ /%$/ && $2 ~ /^[0-9]+$/ {
		total += $2
		if ($4 ~ /^sess[12]_fn_/) jit += $2
	}
	END { print total + 0, jit + 0 }' report.txt)"
[ "$total" -gt 0 ] || fail "no samples for pid $pid"
share=$((jit * 100 / total))
[ "$share" -gt $MIN_JIT_SHARE ] ||
	fail "only $jit of $total samples ($share%) in sess*_fn_*, want > $MIN_JIT_SHARE%"
pass "$jit of $total samples ($share%) are in the two sessions' functions"

cd / && rm -rf "$scratch"
echo "$passed passed, $failed failed"
exit 0
