#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The body of `make stress` (run that; this script is its internals): the
# long stress runs (meson suite stress-long: the scenario, fault and crash
# programs with their long settings), a short libFuzzer run of each
# harness, then one summary table.  Exits non-zero if anything failed (or
# a fuzzer found a crash).  docs/reliability.md is filled from the table
# this prints.
#
# Usage: bash stress/run-long.sh BUILDDIR
# Environment (make stress passes its variables of the same names):
#   STRESS_SECONDS duration of every timed long run (default: 30); exported
#                  to the programs as JITRING_STRESS_SECONDS, which
#                  overrides their --seconds
#   FUZZ_SECONDS   seconds per fuzzer (default: 60)
#   FUZZ_BUILD     clang build directory for the fuzzers (default: build-fuzz)
#   SKIP_FUZZ=1    skip the fuzzers; SKIP_LONG=1 skip the long stress runs
set -uo pipefail

build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
stress_seconds=${STRESS_SECONDS:-30}
fuzz_seconds=${FUZZ_SECONDS:-60}
fuzz_build=${FUZZ_BUILD:-$src/build-fuzz}
summary=$build/stress-summary.md
started=$(date -u '+%Y-%m-%d %H:%M UTC')
failed=0
rows=()

say() { printf '\n=== %s\n' "$*"; }

cd "$src" || exit 2
if [ ! -f "$build/build.ninja" ]; then
	echo "run-long.sh: $build is not a configured build directory" >&2
	exit 2
fi
ninja -C "$build" || exit 2

# ------------------------------------------------------------------
# 1. Long stress runs (suite stress-long: the scenario programs and the
#    fault/crash programs with long settings).
if [ "${SKIP_LONG:-0}" != 1 ]; then
	say "long stress runs (meson suite stress-long, $stress_seconds s each)"
	log="$build/meson-logs/testlog.json"
	rm -f "$log" "$build/stress-long.json"
	JITRING_STRESS_SECONDS=$stress_seconds \
		meson test -C "$build" --no-rebuild --suite stress-long \
		--timeout-multiplier 20 --print-errorlogs --num-processes 1 ||
		failed=1
	if ! cp "$log" "$build/stress-long.json"; then
		echo "FAILED: no meson test log for the long runs" >&2
		failed=1
	fi
fi

# ------------------------------------------------------------------
# 2. Fuzzers (clang + libFuzzer), in their own build directory.
fuzz_results=()
if [ "${SKIP_FUZZ:-0}" != 1 ]; then
	say "fuzzers ($fuzz_seconds s each, build in $fuzz_build)"
	if ! command -v clang >/dev/null; then
		echo "run-long.sh: clang not found (make deps-clang)" >&2
		fuzz_results+=("fuzz|-|clang missing|FAIL")
		failed=1
	else
		if [ ! -f "$fuzz_build/build.ninja" ]; then
			CC=clang CXX=clang++ meson setup "$fuzz_build" \
				-Dfuzz=true -Dtestpoints=true -Db_lundef=false \
				-Dbench=disabled || failed=1
		fi
		if ninja -C "$fuzz_build" tests/fuzz/fuzz_reader \
			tests/fuzz/fuzz_encoder; then
			# Replay the committed seeds once, then fuzz.
			meson test -C "$fuzz_build" --no-rebuild --suite fuzz \
				--print-errorlogs || failed=1
			for f in reader encoder; do
				work=$fuzz_build/fuzz-corpus/$f
				art=$fuzz_build/fuzz-artifacts
				mkdir -p "$work" "$art"
				cp -n tests/fuzz/corpus/$f/* "$work/" 2>/dev/null
				out=$fuzz_build/fuzz-$f.log
				echo "fuzz_$f: $fuzz_seconds s, corpus $work"
				"$fuzz_build/tests/fuzz/fuzz_$f" \
					-max_total_time="$fuzz_seconds" \
					-print_final_stats=1 -rss_limit_mb=2048 \
					-artifact_prefix="$art/$f-" "$work" \
					>"$out" 2>&1
				rc=$?
				execs=$(sed -n \
					's/^stat::number_of_executed_units: *//p' \
					"$out" | tail -n1)
				cov=$(grep -o 'cov: [0-9]*' "$out" | tail -n1)
				if [ $rc -eq 0 ]; then
					res=PASS
				else
					res=FAIL
					failed=1
					echo "FAILED: fuzz_$f (exit $rc); log $out," \
						"inputs in $art" >&2
					grep -E '^(fuzz_|==[0-9]+==ERROR|SUMMARY)' \
						"$out" | head -n 5 >&2
				fi
				fuzz_results+=("fuzz_$f|${execs:-0}|${cov:-}|$res")
			done
		else
			fuzz_results+=("fuzz|-|build failed|FAIL")
			failed=1
		fi
	fi
fi

# ------------------------------------------------------------------
# 3. Summary: one row per long run (with the RESULT line each scenario
#    program prints last), then the fuzzers.
say "summary"
python3 - "$build/stress-long.json" "$summary" "$started" \
	"${fuzz_results[@]+"${fuzz_results[@]}"}" <<'EOF'
import json, os, platform, re, sys

log, out, started, fuzz = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows, bad = [], 0
tests = []
if os.path.exists(log):
    with open(log) as f:
        tests = [json.loads(l) for l in f if l.strip()]
for t in tests:
    name = t["name"].split(" / ")[-1]
    res = t.get("result", "?")
    ok = res in ("OK", "SKIP", "EXPECTEDFAIL")
    if not ok:
        bad += 1
    results = [dict(kv.split("=", 1) for kv in line.split()[1:])
               for line in (t.get("stdout") or "").splitlines()
               if line.startswith("RESULT ")]
    # One row per RESULT line (a program may run several scenarios).
    for r in results or [{}]:
        outcome = "PASS" if res == "OK" else res
        if r and r.get("outcome") != "PASS" and ok:
            outcome += " (" + r.get("outcome", "?") + ")"
        rows.append([r.get("scenario", name), r.get("engine", "-"),
                     r.get("threads", "-"), r.get("written", "-"),
                     r.get("verified", "-"), r.get("lost", "-"),
                     r.get("faults", "-"), outcome,
                     "%.1f" % float(t.get("duration", 0)), name])
hdr = ["scenario", "engine", "threads", "entries written", "verified",
       "lost", "faults injected", "outcome", "seconds", "meson test"]
lines = ["| " + " | ".join(hdr) + " |",
         "|" + "|".join("---" for _ in hdr) + "|"]
lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
lines += ["", "| fuzzer | executions | coverage | outcome |",
          "|---|---|---|---|"]
for f in fuzz:
    n, ex, cov, res = f.split("|")
    if res != "PASS":
        bad += 1
    lines.append("| %s | %s | %s | %s |" % (n, ex, cov, res))
cpu = "?"
try:
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
        cpu = m.group(1) if m else "?"
except OSError:
    pass
meta = ("Run of `make stress` started %s on %s (%s, %d CPUs, Linux %s)."
        % (started, platform.node(), cpu, os.cpu_count() or 0,
           platform.release()))
text = meta + "\n\n" + "\n".join(lines) + "\n"
with open(out, "w") as f:
    f.write(text)
print(text)
for t in tests:
    if t.get("result") not in ("OK", "SKIP", "EXPECTEDFAIL"):
        print("FAILED: %s (%s)" % (t["name"].split(" / ")[-1],
                                  t.get("result")))
print("summary written to %s" % out)
sys.exit(1 if bad else 0)
EOF
[ $? -eq 0 ] || failed=1

if [ $failed -ne 0 ]; then
	echo "make stress: FAILED (see the FAILED lines above)" >&2
	exit 1
fi
echo "make stress: all passed"
