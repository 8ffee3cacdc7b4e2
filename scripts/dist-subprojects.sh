#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# meson dist script: in the tree being archived ($MESON_DIST_ROOT), turn
# each subproject that is a symbolic link (subprojects/jitring-python ->
# ../python) into a copy of what it points to.  The sdist of the Python
# package keeps regular files only (meson-python drops links), and without
# the subproject the module is not built at all.
set -euo pipefail
root=${MESON_DIST_ROOT:?run by meson dist}
for l in "$root"/subprojects/*; do
	[ -L "$l" ] || continue
	target=$(readlink -f "$l")
	case "$target" in
	"$root"/*) ;;
	*) echo "dist-subprojects: $l points outside the tree" >&2; exit 1 ;;
	esac
	rm "$l"
	cp -a "$target" "$l"
done
