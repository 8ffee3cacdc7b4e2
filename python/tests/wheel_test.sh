#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package as users get it: build a wheel with pip through the
# root's pyproject.toml (meson-python), install it into a fresh venv of the
# same interpreter, and check the INSTALLED package: how it installs, and
# the module's suites where this interpreter can change their outcome
# (PYTHONPATH holds python/tests only, for jrtest.py; JITRING_DUMP is the
# venv's jitring-dump).
#
# Usage: wheel_test.sh MODE SRCROOT WORKDIR
#   MODE  nogil  the free-threaded CPython 3.13.5 (scripts/build-python.sh)
#         gil    the GIL build of the same tarball (built once, cached)
#         sdist  the sdist (meson dist: the committed tree, HEAD), then a
#                wheel built from the unpacked sdist, on the free-threaded
#                interpreter; the install's checks against it
#         sid3.14, sid3.15  Debian sid's CPython (GIL builds) run from a
#                private root with sid's glibc (scripts/sid-python.sh);
#                pip from Debian's pip wheel, as sid's ensurepip is split off
# Exit: 0 passed, 1 failed, 77 skipped (the reason is printed).
#
# Offline: pip comes from the interpreter's own ensurepip, the build
# backend from scripts/build-backend.sh (trixie's meson and meson-python
# .debs), `pip wheel --no-build-isolation --no-index`.  Both caches live
# outside the clone; WORKDIR is rebuilt each run, WORKDIR.meson (meson's
# build directory of a wheel from the tree) kept.
set -uo pipefail

mode=${1:?mode}
src=$(cd "${2:?srcroot}" && pwd -P)
work=${3:?workdir}

say() { echo "wheel_test[$mode]: $*"; }
skip() { say "SKIP: $*"; echo "0 passed, 0 failed"; exit 77; }
fail() { say "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

case "$mode" in
nogil|gil|sdist|sid3.14|sid3.15) ;;
*) echo "usage: $0 nogil|gil|sdist|sid3.14|sid3.15 SRCROOT WORKDIR" >&2; exit 2 ;;
esac
# The interpreters and the build: one code with `make dist`'s.
. "$src/scripts/wheel-build.sh"

t0=$(date +%s)
rm -rf "$work"
mkdir -p "$work" || fail "cannot create $work"
work=$(cd "$work" && pwd)

# --- interpreter, backend, tools --------------------------------------------

command -v ninja >/dev/null || skip "no ninja on PATH (apt-get install ninja-build)"
pyof=$mode
[ "$mode" = sdist ] && pyof=nogil
if ! wheel_python "$pyof" "$work/build-python.log"; then
	case "$mode" in
	sid*) skip "$wheel_why" ;;
	*) fail "$wheel_why" ;;
	esac
fi
say "interpreter $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
wheel_backend "$work/build-backend.log" || skip "$wheel_why"
mkvenv() { wheel_mkvenv "$@"; }
wheel_env
pip_wheel() { wheel_build "$@"; }

bvenv=$work/venv-build
mkvenv "$bvenv" >"$work/venv-build.log" 2>&1 ||
	fail "python -m venv (with ensurepip) failed: $(tail -n 5 "$work/venv-build.log")"

# --- build ----------------------------------------------------------------

if [ "$mode" = sdist ]; then
	git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
		skip "$src is not a git checkout (meson dist archives git HEAD)"
	sd=$(wheel_sdist "$bvenv" "$src" "$work/sdist") ||
		fail "sdist build failed: $(tail -n 20 "$work/sdist.log")"
	[ -n "$sd" ] || fail "no sdist in $work/sdist"
	say "sdist $(basename "$sd") ($(stat -c %s "$sd") bytes)"
	tar -C "$work/sdist" -xzf "$sd" || fail "cannot unpack $sd"
	sdsrc=$(ls -d "$work"/sdist/jitring-*/ | head -n 1)
	[ -f "$sdsrc/pyproject.toml" ] || fail "no pyproject.toml in the sdist"
	[ -f "$sdsrc/PKG-INFO" ] || fail "no PKG-INFO in the sdist"
	# A copy (scripts/dist-subprojects.sh): the sdist keeps no links.
	[ -f "$sdsrc/subprojects/jitring-python/jitring/_jitring.c" ] ||
		fail "no subprojects/jitring-python/ in the sdist"
	buildsrc=$sdsrc
else
	buildsrc=$src
fi
mkdir -p "$work/dist"
# The tree's wheels keep meson's build directory beside WORKDIR (what a
# developer's `pip wheel -Cbuild-dir` does: a warm rebuild compiles what
# changed); the sdist's is built from nothing, as a release is.
keep=
[ "$mode" = sdist ] || keep=$work.meson
pip_wheel "$bvenv" "$buildsrc" "$work/dist" $keep ||
	{ [ -n "$keep" ] && rm -rf "$keep" && say "a clean build after a kept one failed" &&
	  pip_wheel "$bvenv" "$buildsrc" "$work/dist" $keep; } ||
	fail "pip wheel failed: $(tail -n 30 "$work/dist.log")"
whl=$(ls "$work"/dist/jitring-*.whl 2>/dev/null | head -n 1)
[ -n "$whl" ] || fail "pip wheel made no jitring wheel"
say "built $(basename "$whl") in $(( $(date +%s) - t0 )) s"

# --- the wheel ------------------------------------------------------------

ver=$(sed -n "s/^  version: '\([^']*\)'.*/\1/p" "$src/meson.build" | head -n 1)
case "$(basename "$whl")" in
"jitring-$ver-$pytag-$abitag-"*linux*.whl) ;;
*) fail "$(basename "$whl"): expected jitring-$ver-$pytag-$abitag-linux_*" ;;
esac
"$py" - "$whl" "$src" >"$work/contents.txt" <<'EOF' || fail "wheel contents: $(cat "$work/contents.txt")"
import os, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
print("\n".join(names))
# Every module of the package, in its folder (each folder's meson.build
# lists them).
pkg = os.path.join(sys.argv[2], "python")
mods = sorted(os.path.relpath(os.path.join(d, f), pkg)
              for d, _, fs in os.walk(os.path.join(pkg, "jitring"))
              for f in fs if f.endswith(".py"))
want = mods + ["jitring-autostart.pth",
        "jitring/web/flame.html", "jitring/web/flame.js",
        "jitring/web/d3.min.js",
        "jitring/web/d3-flamegraph.umd.min.js", "jitring/web/d3-flamegraph.css",
        "jitring/web/LICENSE.d3", "jitring/web/LICENSE.d3-flame-graph",
        "jitring/web/SHA256SUMS"]
missing = [w for w in want if w not in names]
if not any(n.startswith("jitring/_jitring.") and n.endswith(".so") for n in names):
    missing.append("jitring/_jitring.*.so")
if not any(n.endswith(".data/scripts/jitring-dump") for n in names):
    missing.append("*.data/scripts/jitring-dump")
# Only the package: no library, headers or pkg-config file.
extra = [n for n in names
         if n.endswith((".h", ".a", ".pc")) or "libjitring" in n
         or "/headers/" in n or "/data/" in n]
if missing or extra:
    print("missing:", missing, "unexpected:", extra)
    sys.exit(1)
EOF

# --- a fresh venv with the wheel installed ---------------------------------

venv=$work/venv
mkvenv "$venv" >"$work/venv.log" 2>&1 ||
	fail "python -m venv failed: $(tail -n 5 "$work/venv.log")"
"$venv/bin/python" -m pip install -q --no-index --no-deps "$whl" \
	>"$work/install.log" 2>&1 ||
	fail "pip install failed: $(tail -n 20 "$work/install.log")"

# Nothing but the venv, the system's bin directories and the tests' helper.
run() {
	(cd "$work" && env -i HOME="$HOME" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}" \
		PATH="$venv/bin:/usr/bin:/bin" PYTHONDONTWRITEBYTECODE=1 "$@")
}

passed=0
failed=0
skipped=0
check() {	# name command...: a check of the installed package
	local name=$1 rc s=$SECONDS
	shift
	run "$@" >"$work/$name.log" 2>&1
	rc=$?
	case $rc in
	0) passed=$((passed + 1)); say "ok   $name ($((SECONDS - s)) s)" ;;
	77) skipped=$((skipped + 1)); say "skip $name: $(tail -n 1 "$work/$name.log")" ;;
	*) failed=$((failed + 1)); say "FAIL $name (exit $rc)"
	   sed 's/^/    /' "$work/$name.log" | tail -n 40 ;;
	esac
}

site=$(run python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
check import python -c '
import sys, jitring, jitring._jitring as m
want = sys.argv[1]
for f in (jitring.__file__, m.__file__):
    assert f.startswith(want + "/jitring/"), (f, want)
print(jitring.__file__, m.__file__)' "$site"
check ldd bash -c '
so=$(ls "$1"/jitring/_jitring.*.so) || exit 1
for f in "$so" "$2"; do
	bad=$(ldd "$f" | grep -v -e linux-vdso -e "libc\.so\.6" -e ld-linux)
	[ -z "$bad" ] || { echo "$f needs more than libc:"; echo "$bad"; exit 1; }
done' ldd "$site" "$venv/bin/jitring-dump"
check pth bash -c '
f=$1/jitring-autostart.pth
cmp "$f" "$2" || { echo "$f: $(cat "$f")"; exit 1; }
# Unset, the hook imports nothing.
python -c "import sys; assert \"jitring\" not in sys.modules, sorted(sys.modules)"' \
	pth "$site" "$src/python/jitring-autostart.pth"
check main_help python -m jitring --help
# A dump written by the installed package, checked by `python -m jitring
# check`, which must find the venv's jitring-dump without PATH (sysconfig's
# scripts directory), and by jitring-dump on PATH.
check check_cmd bash -c '
d=$(mktemp -d) && trap "rm -rf \"\$d\"" EXIT
"$1/bin/python" -c "
import sys, jitring
jitring.start(dir=sys.argv[1])
def installed_fn():
    return 1
installed_fn()
jitring.stop()" "$d" || exit 1
set -- "$1" "$d"/jit-*.dump
[ -f "$2" ] || { echo "no dump written"; exit 1; }
PATH=/usr/bin:/bin "$1/bin/python" -m jitring check "$2" || exit 1
jitring-dump "$2" | grep -q installed_fn || { echo "installed_fn not in the dump"; exit 1; }' \
	check "$venv"
check dump_help bash -c '[ "$(command -v jitring-dump)" = "$1" ] && jitring-dump --help' \
	dump "$venv/bin/jitring-dump"

t=$src/python/tests
# The suites run once per interpreter that can change their outcome: the
# in-tree suite already runs every one on the free-threaded 3.13.5, so
# the wheel built from the tree gets the install's own checks (above),
# and the one built from the sdist (what a release ships) those and
# record, the flame page and the autostart hook below; the GIL build and
# sid's 3.14 and 3.15 get the behaviour suites too, shortened (50
# sessions, not 300; 15 attach windows, not 20: the long runs are `make
# stress`'s).
suite() {	# name script [args]: the module's test against the install
	local name=$1
	shift
	check "$name" env PYTHONPATH="$t" JITRING_DUMP="$venv/bin/jitring-dump" \
		JITRING_TEST_SESSIONS=50 JITRING_TEST_WINDOWS=15 python "$t/$@"
}
if [ "$mode" = nogil ]; then
	:
elif [ "$mode" != sdist ]; then
	suite py_module test_module.py
	suite py_threads_rings test_threads.py rings
	suite py_threads_mutex test_threads.py mutex
	suite py_fork test_fork.py
	suite py_restart test_restart.py
	suite py_race test_race.py
	suite py_sessions test_sessions.py
fi
# record through real perf, its children found through the installed .pth
# (the in-tree py_record runs every case on the build tree).
if [ "$mode" = sdist ]; then
	suite py_record test_record.py tree
	# The flame graph page from the installed package's inlined web
	# assets (the same files in every wheel: their list is checked above),
	# drawn once (its search, zoom and picture: in tree).
	suite py_flame test_flame.py sources offline frames folded
fi
# record's frame-pointer mode where the interpreter keeps frame pointers
# (sid's 3.15), a reused trampoline copy named in it too.
if [ "$mode" = sid3.15 ]; then
	suite py_record_fp test_record.py fp reuse deep live
	# The linked trampolines, and a deep program whole in fp mode.
	suite py_fplink test_fplink.py
	# record --wait on a GIL build with stripped symbols (fp mode too).
	suite py_wait test_wait.py
fi
# record --pid through sys.remote_exec (3.14 and later): the services'
# shapes and the refusals on both; the window loop (one mechanism in
# both) on 3.15; record killed over its finishing (record's side) in
# tree alone.
case "$mode" in
sid*)
	[ "$mode" = sid3.14 ] || suite py_attach test_attach.py
	suite py_attach_safety test_attach_safety.py
	suite py_attach_reach test_attach_reach.py -live_dump
	;;
esac
# $JITRING_PROFILE through the installed .pth (once the package has it).
if [ "$mode" != nogil ] && [ -f "$site/jitring/_autostart.py" ] &&
	[ -f "$t/test_autostart.py" ]; then
	suite py_autostart test_autostart.py
fi

say "$(basename "$whl"): $passed passed, $failed failed, $skipped skipped" \
	"in $(( $(date +%s) - t0 )) s"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ] || exit 1
exit 0
