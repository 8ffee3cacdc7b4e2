#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What preloading libjitring-llvm-perf.so costs a process that never asks
# for LLVM's perf listener (bench/README.md "LLVM preload: the cost of
# being in the environment"): /bin/true, python3 -c pass and sh -c :,
# each without and with LD_PRELOAD.
#
#   bench/llvm_preload.sh [PRELOAD] [RUNS]
#	PRELOAD: the library (default build/llvm/libjitring-llvm-perf.so);
#	RUNS: runs per command and variant (default 400).
#
# Peak RSS: /usr/bin/time -f %M (KB), the median of 5 runs.  Start-up:
# the wall and CPU (user + system, from wait4) time per run, mean over
# RUNS, the two variants interleaved in blocks of 20 so that drift in the
# machine's load falls on both alike.  One markdown table on stdout.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
preload=$(realpath "${1:-$root/build/llvm/libjitring-llvm-perf.so}")
runs=${2:-400}
[ -f "$preload" ] || { echo "llvm_preload.sh: no $preload (ninja -C build)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "llvm_preload.sh: needs /usr/bin/time (Debian: time)" >&2; exit 2; }
py=/usr/bin/python3

peak_kb() {
	local i
	for i in 1 2 3 4 5; do
		/usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -n 1
	done | sort -n | sed -n 3p
}

echo "preload: $preload"
echo "runs: $runs per command and variant; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| command | peak RSS KB | with preload | wall ms/run | with preload | CPU ms/run | with preload |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for cmd in "/bin/true" "$py -c pass" "sh -c :"; do
	# shellcheck disable=SC2086
	rss0=$(peak_kb $cmd)
	# shellcheck disable=SC2086
	rss1=$(LD_PRELOAD=$preload peak_kb $cmd)
	times=$("$py" - "$preload" "$runs" $cmd <<'PY'
import os, sys, time
preload, runs, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
envs = [dict(os.environ), dict(os.environ, LD_PRELOAD=preload)]
wall, cpu = [0.0, 0.0], [0.0, 0.0]
devnull = os.open(os.devnull, os.O_WRONLY)
for block in range(0, runs, 20):
    for v in (0, 1):
        for _ in range(min(20, runs - block)):
            t = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                os.dup2(devnull, 1)
                os.execve(argv[0] if argv[0].startswith('/') else
                          '/bin/' + argv[0], argv, envs[v])
            _, _, ru = os.wait4(pid, 0)
            wall[v] += time.perf_counter() - t
            cpu[v] += ru.ru_utime + ru.ru_stime
print(' '.join('%.3f' % (x * 1000 / runs) for x in
               (wall[0], wall[1], cpu[0], cpu[1])))
PY
)
	read -r w0 w1 c0 c1 <<<"$times"
	echo "| \`$cmd\` | $rss0 | $rss1 | $w0 | $w1 | $c0 | $c1 |"
done
