#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A newer CPython than this Debian 12 machine has, for testing the Python
# package against: Debian sid's python3.14 or python3.15 (GIL builds; sid
# has no free-threaded build and no source is reachable here), unpacked
# with the sid libc6 and libraries they need (glibc 2.38 or later) into a
# private root, and run through that root's own loader.  Prints the path
# of a wrapper that starts the interpreter (sys.executable is the wrapper,
# so venvs and child processes work); nothing else goes to stdout.
#
# Usage: scripts/sid-python.sh 3.14|3.15 [--check]
#   --check  print the cached wrapper's path, or exit 1 if none
#
# Fetched as scripts/build-backend.sh does: apt reads sid's Packages index
# from the mirror this machine's own apt configuration names, into a
# private state, cache and an empty dpkg status (so it resolves the whole
# closure, as for an empty system); apt-helper downloads each .deb checking
# the sha256 of the signed index; `dpkg-deb -x` unpacks, no maintainer
# script runs, nothing is installed in the system.  Headers: Debian's
# pyconfig.h is multiarch, so builds against it need -I<root>/usr/include
# (printed by --cflags).
#
# Cache: ${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}/
#   sid-python3.14/  sid-python3.15/   (root/; the wrapper is
#   root/usr/bin/python3.X-jitring)
set -euo pipefail

ver=${1:-}
case "$ver" in
3.14|3.15) ;;
*) echo "usage: $0 3.14|3.15 [--check|--cflags]" >&2; exit 2 ;;
esac
mode=${2:-}

log() { echo "sid-python: $*" >&2; }
die() { log "$*"; exit 1; }
. "$(dirname "$0")/apt-private.sh"

cache=${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}
final=$cache/sid-python$ver
# Beside the real interpreter: CPython finds its prefix from argv[0]'s
# folder (usr/bin -> usr/lib/python3.X/os.py).
wrapper=$final/root/usr/bin/python$ver-jitring

cached() { [ -f "$final/.jitring-built" ] && [ -x "$wrapper" ]; }

if cached; then
	if [ "$mode" = --cflags ]; then
		echo "-I$final/root/usr/include"
	else
		echo "$wrapper"
	fi
	exit 0
fi
[ -n "$mode" ] && exit 1

command -v dpkg-deb >/dev/null || die "dpkg-deb is missing"
apt_stage "sid-python$ver" echo "$wrapper"
apt_private "$tmp/apt" "deb $uri sid main" -o "APT::Install-Recommends=false"
log "reading sid's Packages index from $uri"
apt-get "${APT_OPTS[@]}" -qq update >&2 || die "apt-get update of sid's Packages failed"
# The closure (as for an empty system), then each package's URL and sha256
# (`install --print-uris` gives the weaker MD5 only).  Not needed to run the
# interpreter or build against it: skip_re.
closure=$(apt-get "${APT_OPTS[@]}" install -y --print-uris \
	"python$ver" "libpython$ver-dev" python3-pip-whl 2>&1) ||
	die "apt cannot resolve python$ver in sid: $(tail -n 5 <<<"$closure")"
skip_re='^(linux-libc-dev|libc6-dev|libc-dev-bin|tzdata|ca-certificates|debconf|openssl|netbase|media-types|readline-common|python3-setuptools-whl|zlib1g-dev|libexpat1-dev|libpython[0-9.]*-testsuite)_'
names=$(grep "^'" <<<"$closure" | awk '{ print $2 }' | grep -Ev "$skip_re" |
	sed 's/_.*//')
# shellcheck disable=SC2086
uris=$(apt-get "${APT_OPTS[@]}" --print-uris download $names 2>&1) ||
	die "apt cannot locate the packages: $(tail -n 5 <<<"$uris")"
apt_unpack "$uris" "$tmp/debs" "$tmp/root" 1
log "unpacked $APT_UNPACKED packages"
rm -rf "$tmp/debs"

# The loader and libraries of the root, by their real paths (sid is
# merged-/usr; lib64/ld-linux-x86-64.so.2 is an absolute link that would
# name the system's own loader).
ld=$final/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
[ -e "$tmp/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] ||
	die "no loader in the unpacked libc6"
[ -x "$tmp/root/usr/bin/python$ver" ] || die "no usr/bin/python$ver unpacked"
cat >"$tmp/root/usr/bin/python$ver-jitring" <<EOF
#!/bin/sh
# sid's python$ver through sid's own loader and libraries
# (scripts/sid-python.sh); argv[0] stays this wrapper, or the venv's link to
# it, so sys.executable and venvs name the wrapper.
exec "$ld" --library-path "$final/root/usr/lib/x86_64-linux-gnu" \\
	--argv0 "\$0" "$final/root/usr/bin/python$ver" "\$@"
EOF
chmod +x "$tmp/root/usr/bin/python$ver-jitring"
rm -rf "$final"
mkdir -p "$final"
mv "$tmp/root" "$final/root"
# The interpreter must start and find its own prefix through the wrapper.
"$wrapper" -c 'import sys, sysconfig, venv
assert sys.prefix.endswith("/root/usr"), sys.prefix
print("sid-python:", sys.version.split()[0], sys.executable, file=sys.stderr)' ||
	{ rm -rf "$final"; die "the unpacked python$ver does not start"; }
touch "$final/.jitring-built"
echo "$wrapper"
