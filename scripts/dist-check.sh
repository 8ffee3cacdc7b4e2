#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A release file installed where nothing can be built: in a private mount
# namespace in which no C compiler, no meson or ninja, no C headers
# (/usr/include) and no Python headers are visible, a fresh venv of the
# interpreter, `pip install --no-index --no-deps` of FILE, then
# `python -m jitring record` of a small process tree (a parent, a
# subprocess and a fork child, each with its own hot function) through
# real perf, whose tables must name the three functions, and
# `python -m jitring check` of the dumps it wrote.  A wheel passes; the
# sdist (or a wheel that needed building) fails at the install, as it
# would on a user's server.
#
# Usage: scripts/dist-check.sh FILE WHICH [WORKDIR]
#   FILE   a wheel (or, to see the check fail, the sdist)
#   WHICH  the interpreter, as scripts/wheel-build.sh's wheel_python
#          takes it: nogil, gil, sid3.14, sid3.15 or a path
# Prints "dist-check: FILE: installed in N ms, SIZE bytes; ..." and exits
# 0; 1 on a failure (its log named), 77 where the check cannot run here
# (no perf, perf refused, no mount namespace).
#
# The masks: an empty tmpfs over each header and compiler folder and the
# build backend's cache, /dev/null bound over each compiler, meson and
# ninja program (links resolved), all in a namespace that `unshare -m`
# makes (as root; unprivileged, `unshare -rm`), so the machine's own view
# is untouched.  The namespace checks its masks first: a compiler or
# header still visible fails the check.
set -uo pipefail

say() { echo "dist-check: $*"; }

if [ "${1:-}" = --inside ]; then
	shift
	inside=1
else
	inside=0
fi
file=${1:?file}
which=${2:?interpreter}
scripts=$(cd "$(dirname "$0")" && pwd -P)
. "$scripts/wheel-build.sh"

if [ $inside -eq 0 ]; then
	work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/jitring-dist-check.XXXXXX")}
	rm -rf "$work" && mkdir -p "$work" || exit 1
	work=$(cd "$work" && pwd -P)
	file=$(cd "$(dirname "$file")" && pwd -P)/$(basename "$file")
	[ -f "$file" ] || { say "FAIL: no file $file"; exit 1; }
	# The interpreter is had (built, fetched) outside the namespace.
	wheel_python "$which" "$work/python.log" || { say "FAIL: $wheel_why"; exit 1; }
	command -v perf >/dev/null ||
		{ say "SKIP: no perf (apt-get install linux-perf)"; exit 77; }
	if [ "$(id -u)" -eq 0 ]; then
		ns=(unshare -m --propagation private)
	else
		ns=(unshare -rm --propagation private)
	fi
	"${ns[@]}" true 2>/dev/null ||
		{ say "SKIP: no mount namespace (${ns[*]})"; exit 77; }
	"${ns[@]}" bash "$0" --inside "$file" "$which" "$work" >"$work/check.log" 2>&1
	rc=$?
	case $rc in
	0) say "$(tail -n 1 "$work/check.log")" ;;
	77) say "SKIP: $(tail -n 1 "$work/check.log")" ;;
	*) say "FAIL: $(basename "$file") with $which (exit $rc; $work/check.log):"
	   tail -n 25 "$work/check.log" | sed 's/^/    /' ;;
	esac
	exit $rc
fi

# --- inside the namespace --------------------------------------------------

work=$3
fail() { echo "FAIL: $*"; exit 1; }
wheel_python "$which" "$work/python-inside.log" || fail "$wheel_why"
wheel_env
export PIP_NO_CACHE_DIR=1

empty=$work/empty
mkdir -p "$empty"
dirs=(/usr/include /usr/local/include /usr/lib/gcc /usr/lib/gcc-cross
	/usr/libexec/gcc /usr/*-linux-gnu/include /usr/lib/llvm-* "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
	"$(dirname "$(dirname "$(readlink -f "$py")")")/include")
root=$(bash "$scripts/build-backend.sh" --root --check 2>/dev/null) && dirs+=("$root")
nd=0
for d in "${dirs[@]}"; do
	[ -d "$d" ] || continue
	nd=$((nd + 1))
	mount -t tmpfs -o ro,size=4k none "$d" 2>/dev/null ||
		mount --bind -o ro "$empty" "$d" || fail "cannot mask $d"
done
# Every compiler driver (cross ones too), meson and ninja on PATH.
names=()
progs=()
for d in /usr/local/bin /usr/bin /bin; do
	for f in "$d"/*; do
		[[ "${f##*/}" =~ ^(.*-)?(cc|c\+\+|gcc|g\+\+|cpp|c89|c99|clang|clang\+\+|tcc|gnatgcc)(-[0-9.]+)?$|^meson$|^ninja$ ]] ||
			continue
		names+=("${f##*/}")
		f=$(readlink -f "$f")
		[ -e "$f" ] && progs+=("$f")
	done
done
for f in $(printf '%s\n' "${progs[@]}" | sort -u); do
	mount --bind /dev/null "$f" || fail "cannot mask $f"
done
export PATH=/usr/local/bin:/usr/bin:/bin
# (bash's command -v names a file it cannot run: run each instead.)
for c in cc gcc c++ g++ clang meson ninja "${names[@]}"; do
	! "$c" --version >/dev/null 2>&1 || fail "mask: $c still runs ($(command -v "$c"))"
done
for h in /usr/include/stdio.h "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h"; do
	[ ! -e "$h" ] || fail "mask: $h is still visible"
done
echo "masked: $nd folders, $(printf '%s\n' "${progs[@]}" | sort -u | wc -l) programs; no compiler, meson, ninja or header visible"

venv=$work/venv
wheel_mkvenv "$venv" >"$work/venv.log" 2>&1 || fail "venv: $(tail -n 5 "$work/venv.log")"
t0=$(date +%s%N)
"$venv/bin/python" -m pip install --no-index --no-deps "$file" >"$work/install.log" 2>&1 ||
	fail "pip install --no-index $(basename "$file"): $(tail -n 15 "$work/install.log")"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "installed $(basename "$file") in $ms ms"

# The program: three processes, a hot function each, printing nothing that
# names them (the tables must).
cat >"$work/tree.py" <<'EOF'
import os, subprocess, sys, time

def spin(seconds):
    end = time.thread_time() + seconds
    s = 0
    while time.thread_time() < end:
        for i in range(10000):
            s += i * i
    return s

def dist_parent_hot():
    return spin(0.3)

def dist_fork_hot():
    return spin(0.3)

CHILD = ("import time\n"
         "def dist_child_hot():\n"
         "    end = time.thread_time() + 0.3\n"
         "    s = 0\n"
         "    while time.thread_time() < end:\n"
         "        for i in range(10000):\n"
         "            s -= i\n"
         "dist_child_hot()\n")

if __name__ == "__main__":
    dist_parent_hot()
    subprocess.run([sys.executable, "-c", CHILD], check=True)
    pid = os.fork()
    if pid == 0:
        dist_fork_hot()
        os._exit(0)
    os.waitpid(pid, 0)
EOF
cd "$work" || fail "cd $work"
out=$work/record
env -i HOME="$HOME" LANG=C.UTF-8 PATH="$venv/bin:$PATH" TMPDIR="${TMPDIR:-/tmp}" \
	python -m jitring record -o "$out" -- tree.py >"$work/record.txt" 2>"$work/record.err"
rc=$?
[ $rc -ne 2 ] || ! grep -qi "perf" "$work/record.err" ||
	{ cat "$work/record.err"; echo "perf refused or missing: $(tail -n 1 "$work/record.err")"; exit 77; }
[ $rc -eq 0 ] || fail "record exited $rc: $(tail -n 15 "$work/record.err")"
grep -q " in 3 processes:" "$work/record.txt" ||
	fail "record's tables are not of 3 processes: $(head -n 8 "$work/record.txt")"
for fn in dist_parent_hot dist_child_hot dist_fork_hot; do
	grep -q "^ .*%  $fn:" "$work/record.txt" ||
		fail "record's tables do not name $fn: $(head -n 40 "$work/record.txt")"
done
set -- "$out"/jit-*.dump
[ -f "$1" ] || fail "no dump in $out"
"$venv/bin/python" -m jitring check "$@" >"$work/check-dumps.log" 2>&1 ||
	fail "python -m jitring check: $(tail -n 10 "$work/check-dumps.log")"
echo "record: 3 processes' functions in the tables, $# dumps checked"
echo "$(basename "$file"): installed in $ms ms, $(stat -c %s "$file") bytes; record and check passed"
