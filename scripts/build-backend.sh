#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package's build backend, offline: meson-python and a meson new
# enough for it, from Debian trixie's architecture-independent packages,
# unpacked into a private folder outside the clone.  Prints the settings
# that put it in front for a build (nothing else goes to stdout):
#
#   eval "$(bash scripts/build-backend.sh)"
#   pip wheel --no-build-isolation --no-index .
#
# Usage: scripts/build-backend.sh [--check] [--root]
#   --check  print the settings only if the backend is cached, else exit 1
#   --root   print the unpacked root instead of the settings
#
# Why: Debian 12's meson 1.0.1 cannot introspect Python >= 3.12 (its
# python module imports distutils) and its python3-mesonpy 0.12 is too
# old; PyPI is not reachable here.  trixie's meson (1.7), python3-mesonpy
# (0.17), python3-pyproject-metadata (0.9) and python3-packaging (25) are
# pure Python and run on bookworm's python3 and on the interpreter pip
# runs under.  Ninja is Debian 12's (meson-python needs >= 1.8.2).
#
# As scripts/build-python.sh does for Sources: apt reads trixie's Packages
# index from the mirror this machine's own apt configuration names, into a
# private state and cache directory (apt's configuration, lists and dpkg's
# database stay as they were), and apt-helper downloads each .deb checking
# the sha256 that the signed index gives.  `dpkg-deb -x` unpacks them; no
# maintainer script runs, nothing is installed in the system.
#
# Cache: ${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}/backend
# (usr/bin/meson, usr/lib/python3/dist-packages/{mesonbuild,mesonpy,...}),
# built in a temporary folder beside it and renamed into place, under a
# lock, so an interrupted run leaves nothing a later run trusts.
set -euo pipefail

SUITE=trixie
PKGS=(meson python3-mesonpy python3-pyproject-metadata python3-packaging)

check=0
root=0
for a in "$@"; do
	case "$a" in
	--check) check=1 ;;
	--root) root=1 ;;
	-h|--help) sed -n '3,33p' "$0"; exit 0 ;;
	*) echo "usage: $0 [--check] [--root]" >&2; exit 2 ;;
	esac
done

log() { echo "build-backend: $*" >&2; }
die() { log "$*"; exit 1; }
. "$(dirname "$0")/apt-private.sh"

cache=${JITRING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jitring}
final=$cache/backend
site=usr/lib/python3/dist-packages

cached() {
	[ -f "$final/.jitring-built" ] && [ -x "$final/usr/bin/meson" ] &&
		[ -d "$final/$site/mesonpy" ]
}

emit() {
	if [ $root -eq 1 ]; then
		echo "$final"
		return
	fi
	# Single-quoted paths: the cache may sit under a path with spaces.
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
command -v ninja >/dev/null ||
	log "warning: no ninja on PATH (meson-python needs ninja >= 1.8.2; apt-get install ninja-build)"

apt_stage backend emit
apt_private "$tmp/apt" "deb $uri $SUITE main"
log "reading $SUITE's Packages index from $uri"
apt-get "${APT_OPTS[@]}" -qq update >&2 || die "apt-get update of $SUITE's Packages failed"

# Lines: 'URL' file size SHA256:hash, one per package, from the index
# whose Release file apt verified.
uris=$(apt-get "${APT_OPTS[@]}" --print-uris download "${PKGS[@]}" 2>&1) ||
	die "apt cannot locate ${PKGS[*]} in $SUITE: $uris"
[ "$(grep -c "^'" <<<"$uris")" -eq ${#PKGS[@]} ] ||
	die "expected ${#PKGS[@]} packages from apt, got: $uris"

# meson-python and its friends are pure Python: the same on every machine.
while read -r _ file _; do
	case "$file" in
	*_all.deb) ;;
	*) die "$file is not architecture-independent" ;;
	esac
done < <(grep "^'" <<<"$uris")
apt_unpack "$uris" "$tmp/debs" "$tmp/root"

# The unpacked meson must run and be the one found (bookworm's own meson
# is in /usr/lib/python3/dist-packages too, behind PYTHONPATH).
ver=$(PYTHONPATH="$tmp/root/$site" python3 "$tmp/root/usr/bin/meson" --version) ||
	die "the unpacked meson does not run"
mpy=$(PYTHONPATH="$tmp/root/$site" python3 -c \
	'import mesonpy, sys; print(mesonpy.__version__)') ||
	die "the unpacked meson-python does not import"
log "meson $ver, meson-python $mpy"
touch "$tmp/root/.jitring-built"
rm -rf "$final"
mv "$tmp/root" "$final"
emit
