#!/bin/bash
# SPDX-License-Identifier: MIT
#
# perf unwinds through trampoline copies from their ELF file, with no
# perf inject (JITRING_F_TRAMPOLINE_ELF):
#
#   perf_tramp_elf.sh BUILD_DIR ENGINE
#
# elfjit calls from main() down a chain of 12 copies of a template that
# keeps no frame pointer (built without frame pointers itself), so only
# the copies' FDEs lead perf's DWARF unwinding back to main(); it spins
# for 2 s of CPU time (as many samples on a loaded machine as on an idle
# one):
#  1. with the flag: the set's jitring-tramp-<pid>-*.so in the folder (a
#     valid ELF: readelf finds .eh_frame_hdr), and at least 80% of the
#     samples in elf_leaf unwind through the 12 copies (perf script prints
#     them in the file) to main;
#  2. without it (memfd arenas) and no inject: at most 20% do (what the
#     check above would see if perf did not read the file's tables).
#
# Exit 0 pass, 1 fail (the scratch directory is kept and named), 77 when
# perf cannot be used here.  Takes about 10 s.

set -u
export LC_ALL=C

MIN_SHARE=80
MAX_SHARE_MEMFD=20
MIN_SAMPLES=50

. "$(dirname "$0")/perf_common.sh"
e2e_args "$@"
e2e_prog elfjit
e2e_perf tramp-elf readelf

echo "engine $engine; scratch $scratch"

# share MODE: record elfjit (ELF flag MODE) in dMODE; prints "n reached
# tramp" (samples in elf_leaf, those reaching main, the most copies'
# frames in one of those stacks).
share() {
	local mode=$1 d=d$1
	mkdir -p "$d"
	if ! timeout 60 perf record -k 1 -e cpu-clock --call-graph dwarf,8192 \
		-o "$d/perf.data" -- "$prog" "$d" 2 "$mode" \
		> "$d/elfjit.out" 2> "$d/record.err"; then
		fail "perf record -- elfjit $mode failed: $(tail -n 3 "$d/record.err")"
	fi
	(cd "$d" && perf --buildid-dir /dev/null script -i perf.data \
		-F ip,sym,dso --no-inline > script.txt 2> script.err) ||
		fail "perf script ($d): $(tail -n 3 "$d/script.err")"
	awk '
		/^$/ {
			if (leaf) { n++; if (main) { r++; if (tr > most) most = tr } }
			leaf = main = tr = first = 0; next
		}
		{
			if (!first) { first = 1; leaf = ($2 == "elf_leaf") }
			if ($2 == "main") main = 1
			if ($0 ~ /jitring-tramp-/) tr++
		}
		END { print n + 0, r + 0, most + 0 }' "$d/script.txt"
}

read -r n r most < <(share 1)
files=(d1/jitring-tramp-*.so)
[ ${#files[@]} -eq 1 ] && [ -f "${files[0]}" ] ||
	fail "expected one jitring-tramp-*.so in d1, found: ${files[*]}"
readelf -lS "${files[0]}" 2> /dev/null | grep -q '\.eh_frame_hdr' ||
	fail "readelf finds no .eh_frame_hdr in ${files[0]}"
pass "the trampolines' ELF file: ${files[0]##*/}"
[ "$n" -ge $MIN_SAMPLES ] || fail "only $n samples in elf_leaf"
[ $((r * 100)) -ge $((n * MIN_SHARE)) ] ||
	fail "with the ELF file, $r of $n elf_leaf samples unwind to main (want >= $MIN_SHARE%)"
[ "$most" -ge 12 ] ||
	fail "the stacks that reach main show $most copies' frames in the file (want 12)"
pass "with the ELF file, no inject: $r of $n elf_leaf samples unwind through $most copies to main"

read -r n r most < <(share 0)
[ "$n" -ge $MIN_SAMPLES ] || fail "only $n samples in elf_leaf (memfd)"
[ $((r * 100)) -le $((n * MAX_SHARE_MEMFD)) ] ||
	fail "memfd arenas, no inject: $r of $n elf_leaf samples reach main (want <= $MAX_SHARE_MEMFD%: the check above proves nothing)"
pass "memfd arenas, no inject: $r of $n reach main (the tables are what the first case read)"

rm -rf "$scratch"
echo "$passed passed, $failed failed"
exit 0
