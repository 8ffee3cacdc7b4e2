#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make dist`: the release's files, offline, into OUTDIR (default dist/):
# the sdist (meson dist: git HEAD, so commit first) and, built from that
# sdist, one wheel per CPython found here: the free-threaded 3.13.5 and
# its GIL build (scripts/build-python.sh), Debian sid's 3.14 and 3.15
# (scripts/sid-python.sh), and 3.12 where PYTHON312=/path/to/python3.12
# is given.  Each wheel goes through `auditwheel repair` (Debian's, from
# scripts/auditwheel.sh), which gives it the manylinux tag its symbols
# allow; it links libc alone, so repair must graft nothing in (a wheel
# with a jitring.libs/ fails here), and `auditwheel show` of the result
# must name that same tag.  Then SHA256SUMS, and each wheel is
# installed and run where nothing can build (scripts/dist-check.sh)
# unless --no-check.
#
# Usage: scripts/dist.sh [--no-check] [OUTDIR]
#   JITRING_DIST_WORK  the work folder (default build-dist/, rebuilt)
# The last line: "dist: N passed, N failed" (a check per wheel, the
# sdist and each wheel's build counting as one each).
set -uo pipefail

check=1
if [ "${1:-}" = --no-check ]; then
	check=0
	shift
fi
src=$(cd "$(dirname "$0")/.." && pwd -P)
out=${1:-$src/dist}
work=${JITRING_DIST_WORK:-$src/build-dist}
. "$src/scripts/wheel-build.sh"

passed=0
failed=0
say() { echo "dist: $*"; }
die() { say "FAIL: $*"; echo "dist: $passed passed, $((failed + 1)) failed"; exit 1; }

pythons=(nogil gil sid3.14 sid3.15)
[ -z "${PYTHON312:-}" ] || pythons+=("$PYTHON312")

# OUTDIR is emptied: only of what an earlier run put there.
if [ -d "$out" ] && ls -A "$out" | grep -qv -e '^jitring-' -e '^SHA256SUMS$'; then
	echo "dist: $out holds other files than a release's; not emptying it" >&2
	exit 2
fi
rm -rf "$work" "$out"
mkdir -p "$work" "$out" || exit 1
work=$(cd "$work" && pwd -P)
out=$(cd "$out" && pwd -P)
wheel_env
command -v ninja >/dev/null || die "no ninja on PATH (apt-get install ninja-build)"
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
	die "$src is not a git checkout (meson dist archives git HEAD)"
[ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ] ||
	say "note: uncommitted changes are not in the sdist nor the wheels (git HEAD)"
wheel_backend "$work/backend.log" || die "$wheel_why"
aw=$(bash "$src/scripts/auditwheel.sh" 2>"$work/auditwheel.log") ||
	die "no auditwheel (scripts/auditwheel.sh: $(tail -n 3 "$work/auditwheel.log"))"
auditwheel() ( eval "$aw"; python3 -m auditwheel "$@" )

# --- the sdist, and the tree every wheel is built from ---------------------

t0=$(date +%s)
wheel_python nogil "$work/python-sdist.log" || die "$wheel_why"
wheel_mkvenv "$work/venv-sdist" >"$work/venv-sdist.log" 2>&1 ||
	die "venv: $(tail -n 5 "$work/venv-sdist.log")"
sd=$(wheel_sdist "$work/venv-sdist" "$src" "$work/sdist") && [ -n "$sd" ] ||
	die "sdist: $(tail -n 20 "$work/sdist.log")"
tar -C "$work/sdist" -xzf "$sd" || die "cannot unpack $sd"
sdsrc=$(ls -d "$work"/sdist/jitring-*/ | head -n 1)
cp "$sd" "$out/" || exit 1
passed=$((passed + 1))
say "$(basename "$sd"): $(stat -c %s "$sd") bytes ($(( $(date +%s) - t0 )) s)"

# --- a wheel per interpreter -----------------------------------------------

built=()
for which in "${pythons[@]}"; do
	t0=$(date +%s)
	name=$which
	case "$which" in /*) name=py-$(basename "$which") ;; esac
	w=$work/$name
	mkdir -p "$w"
	wheel_python "$which" "$w/python.log" || die "$wheel_why"
	wheel_mkvenv "$w/venv" >"$w/venv.log" 2>&1 ||
		die "venv of $py: $(tail -n 5 "$w/venv.log")"
	wheel_build "$w/venv" "$sdsrc" "$w/raw" ||
		die "pip wheel with $py: $(tail -n 30 "$w/raw.log")"
	raw=$(ls "$w"/raw/jitring-*-"$pytag-$abitag"-linux_x86_64.whl 2>/dev/null | head -n 1)
	[ -n "$raw" ] || die "no $pytag-$abitag wheel in $w/raw: $(ls "$w/raw")"
	auditwheel repair -w "$w/repaired" "$raw" >"$w/repair.log" 2>&1 ||
		die "auditwheel repair $(basename "$raw"): $(tail -n 15 "$w/repair.log")"
	whl=$(ls "$w"/repaired/*.whl 2>/dev/null | head -n 1)
	tag=${whl##*-}
	tag=${tag%.whl}
	case "$tag" in
	manylinux_2_*_x86_64) ;;
	*) die "$(basename "$whl"): not a manylinux tag ($tag)" ;;
	esac
	auditwheel show "$whl" >"$w/show.log" 2>&1 ||
		die "auditwheel show $(basename "$whl"): $(tail -n 15 "$w/show.log")"
	tr -s ' \n' '  ' <"$w/show.log" |
		grep -q "consistent with the following platform tag: \"$tag\"" ||
		die "auditwheel show does not give $tag: $(cat "$w/show.log")"
	# Nothing grafted; its metadata names its Python among the tested
	# ones and admits it.
	"$py" - "$whl" >"$w/metadata.log" 2>&1 <<'EOF' ||
import operator, re, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
grafted = [n for n in z.namelist() if ".libs/" in n]
assert not grafted, "auditwheel grafted libraries in: %s" % grafted
meta = z.read(next(n for n in z.namelist()
                   if n.endswith(".dist-info/METADATA"))).decode().splitlines()
cls = "Classifier: Programming Language :: Python :: %d.%d" % sys.version_info[:2]
assert cls in meta, "no '%s'" % cls
req = [l.split(":", 1)[1] for l in meta if l.startswith("Requires-Python:")]
assert req, "no Requires-Python"
ops = {">=": operator.ge, "<": operator.lt, ">": operator.gt, "<=": operator.le}
for op, v in re.findall(r"(>=|<=|<|>)\s*([0-9.]+)", req[0]):
    want = tuple(int(x) for x in v.split("."))
    assert ops[op](sys.version_info[:len(want)], want), (req[0], sys.version)
print(cls, "Requires-Python:", req[0])
EOF
		die "$(basename "$whl") METADATA: $(tail -n 3 "$w/metadata.log")"
	cp "$whl" "$out/" || exit 1
	built+=("$which=$out/$(basename "$whl")")
	passed=$((passed + 1))
	say "$(basename "$whl"): $(stat -c %s "$whl") bytes ($(( $(date +%s) - t0 )) s;" \
		"$(sed -n 's/^Python \(.*\)/\1/p' <<<"$("$py" -V 2>&1)") at $py)"
done
(cd "$out" && sha256sum jitring-* >SHA256SUMS) || die "sha256sum"
say "$out/SHA256SUMS:"
sed 's/^/    /' "$out/SHA256SUMS"

# --- each wheel installed where nothing can build ----------------------------

if [ $check -eq 1 ]; then
	for b in "${built[@]}"; do
		which=${b%%=*}
		whl=${b#*=}
		name=$which
		case "$which" in /*) name=py-$(basename "$which") ;; esac
		bash "$src/scripts/dist-check.sh" "$whl" "$which" "$work/$name/check"
		case $? in
		0) passed=$((passed + 1)) ;;
		77) ;;
		*) failed=$((failed + 1)) ;;
		esac
	done
fi
echo "dist: $passed passed, $failed failed"
[ $failed -eq 0 ]
