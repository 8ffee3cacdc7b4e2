#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Build CPython 3.13.5 from its pristine upstream tarball, free-threaded
# (configure --disable-gil) by default, and cache it outside the clone so
# later runs reuse it.  Prints the interpreter's path on stdout (everything
# else goes to stderr).
#
# Usage: scripts/build-python.sh [--gil|--fp] [--check] [--no-deps]
#   --gil      the GIL build of the same tarball (a separate cache entry)
#   --fp       free-threaded, compiled with frame pointers (as Debian
#              sid's 3.15 is), for record's frame-pointer mode
#   --check    print the cached interpreter's path, or exit 1 if none
#   --no-deps  do not run scripts/deps.sh python first
#
# The tarball is python3.13_3.13.5.orig.tar.xz from the python3.13 source
# package of Debian's trixie suite: apt reads trixie's Sources index from
# the mirror this machine's own apt configuration names, into a private
# state and cache directory (apt's configuration and lists stay as they
# were), and apt-helper downloads the file and checks its sha256.  No
# Debian patch is applied.
#
# Cache: ${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}/
#   cpython-3.13.5-nogil/  cpython-3.13.5-gil/  cpython-3.13.5-nogil-fp/
#   src/<tarball>
# Each build happens in a temporary directory beside its final place and
# is renamed into place at the end, so an interrupted run leaves nothing
# half-built that a later run would trust.  A lock serialises concurrent
# runs.
set -euo pipefail

VER=3.13.5
TARBALL=python3.13_${VER}.orig.tar.xz
SHA256=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
SUITE=trixie
SRCPKG=python3.13

variant=nogil
check=0
deps=1
for a in "$@"; do
	case "$a" in
	--gil) variant=gil ;;
	--fp) variant=nogil-fp ;;
	--check) check=1 ;;
	--no-deps) deps=0 ;;
	-h|--help) sed -n '3,28p' "$0"; exit 0 ;;
	*) echo "usage: $0 [--gil|--fp] [--check] [--no-deps]" >&2; exit 2 ;;
	esac
done

log() { echo "build-python: $*" >&2; }
die() { log "$*"; exit 1; }

cache=${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}
final=$cache/cpython-$VER-$variant
if [ "$variant" = gil ]; then exe=python3.13; else exe=python3.13t; fi

# A finished build has its stamp; anything else under $cache is scratch.
cached() {
	[ -f "$final/.jitring-built" ] && [ -x "$final/bin/$exe" ]
}

if cached; then
	echo "$final/bin/$exe"
	exit 0
fi
[ $check -eq 1 ] && exit 1

here=$(cd "$(dirname "$0")" && pwd)
. "$here/apt-private.sh"
[ $deps -eq 1 ] && bash "$here/deps.sh" python >&2

mkdir -p "$cache/src"
exec 9>"$cache/.lock"
flock 9
if cached; then			# another run finished it while we waited
	echo "$final/bin/$exe"
	exit 0
fi

# Holding the lock, any build directory left here is from a run that was
# killed (SIGKILL skips the trap below): nothing in it is trusted.
rm -rf "$cache"/.build-"$variant".*
tmp=$(mktemp -d "$cache/.build-$variant.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM HUP

# --- the tarball -----------------------------------------------------------

sha_ok() {
	[ -f "$1" ] && echo "$SHA256  $1" | sha256sum --quiet -c - 2>/dev/null
}

fetch_tarball() {
	local uri url want
	uri=$(apt_mirror_uri)
	[ -n "$uri" ] || die "no Debian 'main' entry in this machine's apt sources"
	apt_private "$tmp/apt" "deb-src $uri $SUITE main"
	log "reading $SUITE's Sources index from $uri"
	apt-get "${APT_OPTS[@]}" -qq update >&2 ||
		die "apt-get update of $SUITE's Sources failed"
	# Lines: 'URL' name size SHA256:hash
	url=$(apt-get "${APT_OPTS[@]}" --print-uris --only-source source "$SRCPKG" \
		2>/dev/null | awk -v t="$TARBALL" '$2 == t { print $1; exit }' |
		tr -d "'")
	if [ -z "$url" ]; then
		# trixie moved on from 3.13.5: the pool keeps the file as long
		# as any suite references it; the hash check guards the rest.
		url=${uri%/}/pool/main/p/$SRCPKG/$TARBALL
		log "$TARBALL not in $SUITE's index; trying $url"
	fi
	log "downloading $url"
	/usr/lib/apt/apt-helper -o "APT::Sandbox::User=root" \
		download-file "$url" "$tmp/$TARBALL" "SHA256:$SHA256" >&2 ||
		die "download of $TARBALL failed"
	sha_ok "$tmp/$TARBALL" || die "$TARBALL: sha256 mismatch"
	mv "$tmp/$TARBALL" "$cache/src/$TARBALL"
}

if ! sha_ok "$cache/src/$TARBALL"; then
	rm -f "$cache/src/$TARBALL"
	fetch_tarball
fi

# --- the build -------------------------------------------------------------

start=$(date +%s)
log "building CPython $VER ($variant) in $tmp"
tar -C "$tmp" -xf "$cache/src/$TARBALL"
src=$tmp/Python-$VER
[ -d "$src" ] || die "unexpected tarball layout"
conf=(--prefix="$final" --without-ensurepip --disable-test-modules)
[ "$variant" != gil ] && conf+=(--disable-gil)
# No PGO, no LTO: a release -O3 build with -g (perf unwinds with it).
fp=()
[ "$variant" = nogil-fp ] &&
	fp=(CFLAGS="-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer")
(cd "$src" && ./configure -q "${conf[@]}" "${fp[@]}") >&2 ||
	die "configure failed (see $src/config.log)"
make -C "$src" -s -j"${JOBS:-2}" >&2 || die "make failed"
make -C "$src" -s install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1 ||
	die "make install failed: $(tail -n 20 "$tmp/install.log")"
"$tmp/root$final/bin/$exe" -c 'import sys' ||
	die "the installed interpreter does not start"
touch "$tmp/root$final/.jitring-built"
rm -rf "$final"
mv "$tmp/root$final" "$final"
log "built in $(( $(date +%s) - start )) s"
"$final/bin/$exe" -c 'import sys, sysconfig
print("build-python:", sys.version.split()[0],
      "Py_GIL_DISABLED=%s" % sysconfig.get_config_var("Py_GIL_DISABLED"),
      file=sys.stderr)'
echo "$final/bin/$exe"
