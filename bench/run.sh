#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Run the benchmark matrix and write bench/results/ (bench/README.md).
#
#   bash bench/run.sh quick|full [BUILD_DIR]
#
# quick: CPython shape at 1..4096 threads, the other shapes at 1/8/256/4096,
#        one repetition, 150k entries per round, 3 rounds (2.5 minutes idle).
# full:  every shape at every thread count, 3 repetitions (interleaved:
#        the whole matrix once, then again), 400k entries per round,
#        5 rounds (5 minutes on an idle 2-core VM).
# Both then run the callgrind instruction counts and the RSS drivers and
# write bench/results/summary-<mode>.md, summary-<mode>.json and PNG plots,
# and print the ratio table.
#
# Environment: JITRING_BENCH_DIR, where dumps go (default /dev/shm, tmpfs;
# each dump is deleted after its benchmark).
set -euo pipefail

mode=${1:-quick}
build=${2:-build-release}
case "$mode" in
quick) reps=1 ;;
full) reps=3 ;;
*) echo "usage: $0 quick|full [BUILD_DIR]" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
if [ ! -f "$build/build.ninja" ]; then
	echo "bench/run.sh: $build is not a configured build directory" >&2
	exit 2
fi
bash scripts/deps.sh bench || echo "bench/run.sh: deps.sh failed; continuing" >&2
ninja -C "$build" bench/bench_write bench/cg_driver bench/rss_driver \
	bench/bench_check bench/stall_driver bench/storm_driver bench/wake_driver \
	bench/manycore_driver >/dev/null

export JITRING_BENCH_DIR=${JITRING_BENCH_DIR:-/dev/shm}
mkdir -p "$JITRING_BENCH_DIR"
out="$root/bench/results"
raw="$out/raw-$mode"
rm -rf "$raw"
mkdir -p "$raw"
bw="$build/bench/bench_write"
cg="$build/bench/cg_driver"
rss="$build/bench/rss_driver"
start=$(date +%s)

log() { printf '[bench %4ss] %s\n' $(($(date +%s) - start)) "$*" >&2; }

# ---- machine, compiler, flags ------------------------------------------
python3 - "$build" "$raw/machine.json" "$mode" <<'EOF'
import json, os, platform, subprocess, sys
build, dst, mode = sys.argv[1:4]
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return ""
def read(p):
    try:
        return open(p).read().strip()
    except OSError:
        return "n/a"
model = ""
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        model = line.split(":", 1)[1].strip()
        break
opts = {}
try:
    for o in json.load(open(os.path.join(build, "meson-info", "intro-buildoptions.json"))):
        if o["name"] in ("buildtype", "optimization", "debug", "b_ndebug", "b_lto",
                         "c_args", "cpp_args", "c_std", "cpp_std", "testpoints"):
            opts[o["name"]] = o["value"]
except OSError:
    pass
cmds = {}
try:
    for c in json.load(open(os.path.join(build, "compile_commands.json"))):
        f = c["file"]
        for key in ("src/engines/rings/rings.c", "bench/bench_write.cc"):
            if f.endswith(key) and key not in cmds:
                cmds[key] = c["command"]
except OSError:
    pass
m = {
    "mode": mode,
    "date_utc": sh("date -u +%Y-%m-%dT%H:%M:%SZ"),
    "git_commit": sh("git rev-parse HEAD"),
    "git_dirty": bool(sh("git status --porcelain -- src include")),
    "cpus_online": os.cpu_count(),
    "cpu_model": model,
    "hypervisor": sh("lscpu | sed -n 's/^Hypervisor vendor: *//p'") or "none",
    "kernel": platform.release(),
    "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
    "clocksource": read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
    "affinity": sh("taskset -pc $$ | sed 's/.*: //'"),
    "pinning": "none (threads float over the CPUs in affinity)",
    "memory_total": sh("sed -n 's/^MemTotal: *//p' /proc/meminfo"),
    "bench_dir": os.environ.get("JITRING_BENCH_DIR", "/dev/shm"),
    "bench_dir_fs": sh("stat -f -c %T " + os.environ.get("JITRING_BENCH_DIR", "/dev/shm")),
    "cc": sh("cc --version | head -1"),
    "cxx": sh("c++ --version | head -1"),
    "google_benchmark": sh("dpkg-query -W -f='${Version}' libbenchmark-dev"),
    "valgrind": sh("valgrind --version"),
    "meson_options": opts,
    "compile_commands": cmds,
}
json.dump(m, open(dst, "w"), indent=1)
EOF
log "machine: $(nproc) CPUs, $(uname -r), dumps in $JITRING_BENCH_DIR"

# ---- throughput and latency (google-benchmark) --------------------------
for rep in $(seq 1 "$reps"); do
	log "bench_write --matrix=$mode, repetition $rep/$reps"
	"$bw" --matrix="$mode" --benchmark_min_time=0.5 \
		--benchmark_out="$raw/gbench-rep$rep.json" \
		--benchmark_out_format=json \
		--benchmark_counters_tabular=false >"$raw/gbench-rep$rep.txt"
	[ -s "$raw/gbench-rep$rep.json" ] ||
		{ echo "bench_write produced nothing" >&2; exit 1; }
done

# ---- instructions per call (callgrind) ----------------------------------
if command -v valgrind >/dev/null; then
	log "callgrind: instructions per call"
	cgdir="$raw/callgrind"
	mkdir -p "$cgdir"
	: >"$raw/callgrind.txt"
	for shape in cpython load unw_dbg_load code4k; do
		for burst in 0 32; do
			[ "$mode" = quick ] && [ "$burst" != 0 ] && [ "$shape" != cpython ] && continue
			for engine in floor rings mutex; do
				f="$cgdir/$engine.$shape.$burst.out"
				valgrind --tool=callgrind --toggle-collect=bench_measured \
					--callgrind-out-file="$f" \
					"$cg" "$engine" "$shape" 10000 1000 "$burst" \
					>/dev/null 2>"$f.log" || { cat "$f.log" >&2; exit 1; }
				ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f")
				echo "$engine $shape $burst 10000 $ir" >>"$raw/callgrind.txt"
			done
		done
	done
	rm -rf "$cgdir"
else
	log "valgrind not found: no instruction counts"
fi

# ---- resident memory (one process per engine) ----------------------------
log "RSS at 4096 threads"
: >"$raw/rss.jsonl"
for engine in floor rings mutex; do
	"$rss" idle "$engine" 4096 2.5 >>"$raw/rss.jsonl" || true
	"$rss" peak "$engine" 4096 64 >>"$raw/rss.jsonl" || true
done
# The registration storm: 4096 threads whose first write is at the same
# moment (the rings engine may take long here; bounded by timeout).
for engine in rings mutex; do
	timeout 300 "$rss" storm "$engine" 4096 64 >>"$raw/rss.jsonl" ||
		echo "{\"kind\": \"storm\", \"engine\": \"$engine\", \"threads\": 4096, \"exit\": $?}" >>"$raw/rss.jsonl"
done

# ---- thread storms: first calls of many threads released at once -------
log "thread storms (bench/storm_driver)"
storm_threads="64 512"
[ "$mode" = full ] && storm_threads="64 512 4096"
for smode in write kit null fault; do
	for n in $storm_threads; do
		readies="0 $n"
		# Controls (no library call: the measurement itself, and one
		# page fault): READY changes nothing for them.
		case $smode in null | fault) readies=0 ;; esac
		for ready in $readies; do
			# Idle past the flusher's 1 s trim: the harder case.
			STORM_IDLE_MS=2000 timeout 600 \
				"$build/bench/storm_driver" "$smode" "$n" \
				"$ready" >>"$raw/rss.jsonl" ||
				echo "{\"kind\": \"storm\", \"mode\": \"$smode\", \"threads\": $n, \"ready\": $ready, \"exit\": $?}" >>"$raw/rss.jsonl"
		done
	done
done

# What the storm's one waker of the idle flusher pays (a FUTEX_WAKE).
"$build/bench/wake_driver" 200 >>"$raw/rss.jsonl" || true

# ---- the flusher's CPU while a flush or close waits on a stalled producer
log "flusher CPU behind a stalled producer"
"$build/bench/stall_driver" rings 500 500 >>"$raw/rss.jsonl" || true

# ---- end to end into the file: the many-core kit's driver -----------------
# Throughput with the dump written, the flusher's (and write thread's) CPU
# per entry, and the unordered floor (each thread pwrite()s its own
# buffers) beside it: summary "End to end into the file".
case "$mode" in
quick) mc_threads="1 4 16 64"; mc_entries=400000 ;;
*) mc_threads="1 2 4 16 64 512"; mc_entries=2000000 ;;
esac
log "end to end into the file (manycore_driver, threads $mc_threads)"
for r in $(seq 1 "$reps"); do
	for t in $mc_threads; do
		for engine in floor rings mutex; do
			timeout 60 "$build/bench/manycore_driver" "$engine" "$t" \
				--entries "$mc_entries" --run "$r" \
				--dir "$JITRING_BENCH_DIR" --check fast \
				>>"$raw/manycore.jsonl" 2>>"$raw/manycore.err" || true
		done
	done
done

# ---- the checker on hostile files (bench_check.cc) -------------------------
log "checker: crafted code_index collisions against random ones"
"$build/bench/bench_check" --benchmark_min_time=0.5 \
	--benchmark_out="$raw/check.json" --benchmark_out_format=json \
	>"$raw/check.txt"
python3 - "$raw/check.json" "$out/check-$mode.md" <<'EOF'
import json, re, sys
src, dst = sys.argv[1:3]
t = {}
for b in json.load(open(src))["benchmarks"]:
    m = re.match(r"BM_check/(\w+)/(\d+)$", b["name"])
    if m:
        t[(m.group(1), int(m.group(2)))] = b["cpu_time"]  # ms
rows = ["| loads | random (ms) | crafted (ms) | crafted / random |",
        "|---:|---:|---:|---:|"]
for n in sorted({n for _, n in t}):
    r, c = t.get(("random", n)), t.get(("crafted", n))
    if r and c:
        rows.append(f"| {n} | {r:.2f} | {c:.2f} | {c / r:.2f} |")
text = ("# jitring_check() on code_index values crafted to collide\n\n"
        "CPU time per check of an in-memory dump (bench/bench_check.cc); "
        "the old unkeyed sets took ~1000x longer on crafted input at "
        "100,000 loads.\n\n" + "\n".join(rows) + "\n")
open(dst, "w").write(text)
print(text)
EOF

# ---- summary, plots -------------------------------------------------------
log "summary"
python3 "$root/bench/report.py" "$raw" "$out" "$mode"
log "done in $(($(date +%s) - start)) s; results in bench/results/"
