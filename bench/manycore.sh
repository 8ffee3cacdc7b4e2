#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The many-core kit (bench/README.md "Many-core kit"): a self-contained,
# statically linked copy of bench/manycore_driver to run the end-to-end
# throughput matrix (rings, mutex, unordered floor) on another x86_64 Linux
# machine, one JSON line per run.
#
#   bench/manycore.sh build OUTDIR
#	release build (-Dtestpoints=false) in $MANYCORE_BUILD (default
#	build-manycore/ in this tree), every binary linked -static; OUTDIR
#	gets bin/manycore_driver, bin/jitring-dump, manycore.sh and BUILDINFO.
#   bench/manycore.sh run KITDIR OUT.jsonl [--quick] [--runs N]
#	[--threads 1,2,...] [--engines rings,mutex,floor] [--entries N]
#	[--timeout S] [--budget S] [--check fast|full|none]
#	default: threads 1,2,4,8,16,64,512,4096 x rings,mutex,floor x 2 runs,
#	2,000,000 entries per run; each run killed after --timeout (20 s) and
#	recorded as a timeout; no run starts after --budget (320 s) from the
#	start (recorded as skipped), so the whole matrix ends within about
#	6 minutes.  --quick: threads 1,8,512,4096, one run, 400,000 entries.
#	Also writes OUT.jsonl's machine record next to it (OUT-machine.txt).
#   bench/manycore.sh table OUT.jsonl
#	the markdown table of bench/README.md (python3).
#
# Dumps go to a fresh directory under $JITRING_BENCH_DIR, else /dev/shm
# (tmpfs) when it has 4 GB free, else $TMPDIR or /tmp; it is removed at the
# end.
set -euo pipefail

usage() {
	sed -n '3,25p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

cmd_build() {
	local out=$1 root bdir
	root=$(cd "$(dirname "$0")/.." && pwd)
	[ -f "$root/meson.build" ] || { echo "manycore.sh build: run it from a source tree" >&2; exit 2; }
	bdir=${MANYCORE_BUILD:-$root/build-manycore}
	if [ ! -f "$bdir/build.ninja" ]; then
		mkdir -p "$bdir"
		meson setup "$bdir" "$root" --buildtype=release \
			-Dtestpoints=false -Dtests=disabled -Dbench=enabled \
			-Dprefer_static=true -Dc_link_args=-static \
			-Dcpp_link_args=-static >"$bdir/setup.log" 2>&1 ||
			{ cat "$bdir/setup.log" >&2; exit 1; }
	fi
	ninja -C "$bdir" bench/manycore_driver tools/jitring-dump >/dev/null
	mkdir -p "$out/bin"
	cp "$bdir/bench/manycore_driver" "$bdir/tools/jitring-dump" "$out/bin/"
	strip "$out/bin/manycore_driver" "$out/bin/jitring-dump"
	cp "$root/bench/manycore.sh" "$out/manycore.sh"
	chmod +x "$out/manycore.sh"
	for b in "$out"/bin/*; do
		if ldd "$b" 2>&1 | grep -q "not a dynamic executable"; then
			continue
		fi
		# Dynamic: everything but glibc must be in the kit.
		if ldd "$b" | grep -v -E 'linux-vdso|ld-linux|lib(c|m|pthread|dl|rt)\.so' | grep -q .; then
			echo "manycore.sh build: $b needs more than glibc:" >&2
			ldd "$b" >&2
			exit 1
		fi
	done
	{
		echo "git $(git -C "$root" rev-parse HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
		echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) $(uname -r)"
		echo "compiler $(cc --version | head -1)"
		echo "meson buildtype release, testpoints false, linked -static"
		grep -m1 -o -- '-O[0-9s]' "$bdir/compile_commands.json" | head -1 | sed 's/^/optimization /'
		for b in "$out"/bin/*; do echo "$(basename "$b"): $(ldd "$b" 2>&1 | head -1 | sed 's/^[[:space:]]*//')"; done
	} >"$out/BUILDINFO"
	echo "kit: $out ($(du -sh "$out" | cut -f1))"
	cat "$out/BUILDINFO"
}

machine_info() {
	echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "nproc $(nproc)"
	echo "uname -r $(uname -r)"
	echo "model $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
	echo "memory $(grep MemTotal /proc/meminfo | awk '{print $2, $3}')"
	echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?')"
	echo "governor $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo 'n/a')"
	echo "affinity $(taskset -pc $$ 2>/dev/null | sed 's/.*: //' || echo '?')"
	echo "ulimit -u $(ulimit -u)"
	echo "--- lscpu"
	lscpu 2>/dev/null || echo "(no lscpu)"
}

cmd_run() {
	local kit=$1 out=$2
	shift 2
	local threads="1,2,4,8,16,64,512,4096" engines="rings,mutex,floor"
	local runs=2 entries=2000000 per=20 budget=320 check=fast
	while [ $# -gt 0 ]; do
		case "$1" in
		--quick) threads="1,8,512,4096"; runs=1; entries=400000 ;;
		--runs) runs=$2; shift ;;
		--threads) threads=$2; shift ;;
		--engines) engines=$2; shift ;;
		--entries) entries=$2; shift ;;
		--timeout) per=$2; shift ;;
		--budget) budget=$2; shift ;;
		--check) check=$2; shift ;;
		*) usage ;;
		esac
		shift
	done
	local drv="$kit/bin/manycore_driver"
	[ -x "$drv" ] || { echo "manycore.sh run: no $drv" >&2; exit 2; }
	local base=${JITRING_BENCH_DIR:-}
	if [ -z "$base" ]; then
		# tmpfs, when it has room for a few dumps (containers may give
		# it 64 MiB); a 2M-entry dump is about 490 MB.
		local free_kb
		free_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
		if [ -w /dev/shm ] && [ "${free_kb:-0}" -ge 4000000 ]; then
			base=/dev/shm
		else
			base=${TMPDIR:-/tmp}
		fi
	fi
	local dir
	dir=$(mktemp -d "$base/manycore.XXXXXX")
	run_dir=$dir
	trap 'rm -rf "$run_dir"' EXIT
	{ machine_info; echo "--- dumps in $dir"; df -Pk "$dir"; } >"${out%.jsonl}-machine.txt" 2>&1
	: >"$out"
	local start=$SECONDS n=0 fails=0 t e r line rc
	for r in $(seq 1 "$runs"); do
		for t in ${threads//,/ }; do
			for e in ${engines//,/ }; do
				n=$((n + 1))
				if [ $((SECONDS - start)) -ge "$budget" ]; then
					printf '{"rc":null,"engine":"%s","threads":%s,"run":%s,"status":"skipped"}\n' "$e" "$t" "$r" >>"$out"
					continue
				fi
				rc=0
				line=$(timeout -k 2 "$per" "$drv" "$e" "$t" --entries "$entries" \
					--run "$r" --dir "$dir" --check "$check" 2>"$dir/stderr") || rc=$?
				rm -f "$dir"/*.dump
				if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
					printf '{"rc":%s,"engine":"%s","threads":%s,"run":%s,"status":"timeout","timeout_s":%s}\n' "$rc" "$e" "$t" "$r" "$per" >>"$out"
					fails=$((fails + 1))
				elif [ -z "$line" ]; then
					printf '{"rc":%s,"engine":"%s","threads":%s,"run":%s,"status":"crash","stderr":"%s"}\n' "$rc" "$e" "$t" "$r" \
						"$(head -c 200 "$dir/stderr" | tr '"\\\n' "'' ")" >>"$out"
					fails=$((fails + 1))
				else
					[ "$rc" = 0 ] || fails=$((fails + 1))
					echo "{\"rc\":$rc,\"status\":\"$([ "$rc" = 0 ] && echo ok || echo fail)\",${line#\{}" >>"$out"
				fi
				printf '[manycore %3ss] run %s %-5s %4s threads: %s\n' $((SECONDS - start)) "$r" "$e" "$t" \
					"$(tail -1 "$out" | grep -o -E '"(status|entries_per_s|flusher_cpu_ns_per_entry)":[^,]*' | tr '\n' ' ')" >&2
			done
		done
	done
	echo "manycore.sh: $n runs in $((SECONDS - start)) s, $fails not ok; $out" >&2
}

cmd_table() {
	python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["threads"], r["engine"]), []).append(r)
def runs(t, e):
    return sorted(by.get((t, e), []), key=lambda r: r["run"])
def tput(r):
    return r["entries_per_s"] / 1e6 if r.get("status") == "ok" else None
def fmt(v, d=2):
    return "-" if v is None else f"{v:.{d}f}"
def cell(t, e):
    vs = [tput(r) if r.get("status") == "ok" else None for r in runs(t, e)]
    out = []
    for r, v in zip(runs(t, e), vs):
        out.append(fmt(v) if v is not None else r.get("status", "?"))
    return " / ".join(out) or "-"
def best(t, e):
    vs = [tput(r) for r in runs(t, e) if tput(r) is not None]
    return max(vs) if vs else None
threads = sorted({t for t, _ in by})
print("| threads | rings Mentries/s | mutex Mentries/s | floor Mentries/s | rings/mutex | rings/floor | flusher CPU ns/entry | engine threads CPU ns/entry | process CPU ns/entry rings / mutex / floor | p99.9 write rings / mutex / floor |")
print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
for t in threads:
    rb, mb, fb = best(t, "rings"), best(t, "mutex"), best(t, "floor")
    ratio = lambda a, b: fmt(a / b) if a and b else "-"
    fl = " / ".join(fmt(r.get("flusher_cpu_ns_per_entry"), 0) for r in runs(t, "rings") if r.get("status") == "ok") or "-"
    # flusher + write thread (drivers before it had no such field)
    et = " / ".join(fmt(r.get("engine_threads_cpu_ns_per_entry"), 0) for r in runs(t, "rings") if r.get("status") == "ok") or "-"
    def cpu(e):
        v = [r["proc_cpu_ns_per_entry"] for r in runs(t, e) if r.get("status") == "ok"]
        return fmt(min(v), 0) if v else "-"
    def p999(e):
        v = [r["p999_ns"] for r in runs(t, e) if r.get("status") == "ok"]
        if not v:
            return "-"
        v = max(v)
        if v >= 1e6:
            return f"{v/1e6:.1f} ms"
        return f"{v/1000:.1f} us" if v >= 1000 else f"{v:.0f} ns"
    print(f"| {t} | {cell(t,'rings')} | {cell(t,'mutex')} | {cell(t,'floor')} | {ratio(rb,mb)} | {ratio(rb,fb)} | {fl} | {et} | {cpu('rings')} / {cpu('mutex')} / {cpu('floor')} | {p999('rings')} / {p999('mutex')} / {p999('floor')} |")
bad = [r for r in rows if r.get("status") != "ok"]
if bad:
    print()
    for r in bad:
        print(f"- {r['engine']} {r['threads']} run {r['run']}: {r.get('status')} {r.get('check_detail','')} {r.get('error','')}")
EOF
}

[ $# -ge 1 ] || usage
case "$1" in
build) [ $# -eq 2 ] || usage; cmd_build "$2" ;;
run) [ $# -ge 3 ] || usage; shift; cmd_run "$@" ;;
table) [ $# -eq 2 ] || usage; cmd_table "$2" ;;
*) usage ;;
esac
