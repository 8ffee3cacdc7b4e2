#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# auditwheel, offline, for `make dist` (scripts/dist.sh): Debian sid's
# python3-auditwheel with the pure-Python packages it imports
# (python3-pyelftools, python3-packaging), and this machine's own suite's
# patchelf (auditwheel repair refuses to start without one), unpacked into
# a private folder outside the clone.  Prints the settings that put it in
# front (nothing else goes to stdout):
#
#   eval "$(bash scripts/auditwheel.sh)"
#   python3 -m auditwheel show dist/jitring-...whl
#
# Usage: scripts/auditwheel.sh [--check]
#   --check  print the settings only if it is cached, else exit 1
#
# Why sid: bookworm has no auditwheel and trixie dropped it; sid's 6.7 is
# pure Python and runs on bookworm's python3 (3.11).  patchelf comes from
# the machine's own suite (bookworm's 0.14, >= the 0.14 auditwheel needs):
# sid's is built against a newer glibc than the machine's.
#
# Fetched as scripts/build-backend.sh does: apt reads the Packages indexes
# from the mirror this machine's apt configuration names, into a private
# state (the machine's apt configuration, lists and dpkg database stay as
# they were); apt-helper downloads each .deb checking the sha256 of the
# signed index; `dpkg-deb -x` unpacks it; nothing is installed.
#
# Cache: ${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}/auditwheel
# (usr/bin/patchelf, usr/lib/python3/dist-packages/{auditwheel,elftools,
# packaging}), made in a temporary folder beside it and renamed into
# place under a lock.
set -euo pipefail

PKGS=(python3-auditwheel/sid python3-pyelftools/sid python3-packaging/sid)

check=0
for a in "$@"; do
	case "$a" in
	--check) check=1 ;;
	-h|--help) sed -n '3,30p' "$0"; exit 0 ;;
	*) echo "usage: $0 [--check]" >&2; exit 2 ;;
	esac
done

log() { echo "auditwheel.sh: $*" >&2; }
die() { log "$*"; exit 1; }
. "$(dirname "$0")/apt-private.sh"

cache=${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}
final=$cache/auditwheel
site=usr/lib/python3/dist-packages

cached() {
	[ -f "$final/.jitring-built" ] && [ -x "$final/usr/bin/patchelf" ] &&
		[ -d "$final/$site/auditwheel" ]
}

emit() {
	printf "export PATH='%s'\"\${PATH:+:\$PATH}\"\n" "$final/usr/bin"
	printf "export PYTHONPATH='%s'\"\${PYTHONPATH:+:\$PYTHONPATH}\"\n" \
		"$final/$site"
}

if cached; then
	emit
	exit 0
fi
[ $check -eq 1 ] && exit 1

command -v dpkg-deb >/dev/null || die "dpkg-deb is missing"
own=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$own" ] || die "no VERSION_CODENAME in /etc/os-release"
apt_stage auditwheel emit
apt_private "$tmp/apt" "deb $uri sid main"
echo "deb $uri $own main" >>"$tmp/apt/sources.list"
log "reading sid's and $own's Packages indexes from $uri"
apt-get "${APT_OPTS[@]}" -qq update >&2 || die "apt-get update failed"
pkgs=("${PKGS[@]}" "patchelf/$own")
uris=$(apt-get "${APT_OPTS[@]}" --print-uris download "${pkgs[@]}" 2>&1) ||
	die "apt cannot locate ${pkgs[*]}: $uris"
[ "$(grep -c "^'" <<<"$uris")" -eq ${#pkgs[@]} ] ||
	die "expected ${#pkgs[@]} packages from apt, got: $uris"

apt_unpack "$uris" "$tmp/debs" "$tmp/root"

# Both must run from the unpacked root (bookworm's python3 may have its
# own packaging in /usr/lib/python3/dist-packages, behind PYTHONPATH).
"$tmp/root/usr/bin/patchelf" --version >&2 || die "the unpacked patchelf does not run"
ver=$(PYTHONPATH="$tmp/root/$site" python3 -c '
import auditwheel, packaging, sys
assert auditwheel.__file__.startswith(sys.argv[1]), auditwheel.__file__
from importlib.metadata import version
print(version("auditwheel"))' "$tmp/root/$site") ||
	die "the unpacked auditwheel does not import"
log "auditwheel $ver"
touch "$tmp/root/.jitring-built"
rm -rf "$final"
mv "$tmp/root" "$final"
emit
