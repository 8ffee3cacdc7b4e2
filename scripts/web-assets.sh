#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The flame graph page's web assets, vendored in python/jitring/web/ and
# inlined by python/jitring/output/flame.py into each HTML file it writes:
#   d3-flamegraph.umd.min.js, d3-flamegraph.css   d3-flame-graph (Apache-2.0)
#   d3.min.js                                      d3 (ISC), which the
#       d3-flame-graph UMD bundle takes from the global `d3`
#   LICENSE.d3-flame-graph, LICENSE.d3             their licenses
# Each comes unchanged from the package's tarball on the npm registry
# (`npm pack NAME@VERSION`, which checks the registry's integrity hash);
# python/jitring/web/SHA256SUMS pins every file.
#
# Usage: scripts/web-assets.sh           fetch again, compare with SHA256SUMS
#                                        and write the files into web/
#        scripts/web-assets.sh --check   only check the files in web/
# Exit 0 when every file matches SHA256SUMS; 1 otherwise.  To move to
# another version, change the pins below, run with --update, review and
# commit the new files and SHA256SUMS.
set -euo pipefail

# python/jitring/output/flame.py names them on each page (LIBRARIES).
FLAME=d3-flame-graph@5.0.0
D3=d3@7.9.2

root=$(cd "$(dirname "$0")/.." && pwd)
web=$root/python/jitring/web
mode=${1:-fetch}

case "$mode" in
--check)
	cd "$web" && exec sha256sum --check --strict SHA256SUMS ;;
fetch|--update) ;;
*) echo "usage: $0 [--check|--update]" >&2; exit 2 ;;
esac

command -v npm >/dev/null || { echo "web-assets: npm not found (apt-get install npm)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$FLAME" "$D3" >/dev/null)
mkdir "$tmp/flame" "$tmp/d3" "$tmp/out"
tar -xzf "$tmp"/d3-flame-graph-*.tgz -C "$tmp/flame"
tar -xzf "$tmp"/d3-[0-9]*.tgz -C "$tmp/d3"
cp "$tmp/flame/package/dist/d3-flamegraph.umd.min.js" \
	"$tmp/flame/package/dist/d3-flamegraph.css" "$tmp/out/"
cp "$tmp/flame/package/LICENSE" "$tmp/out/LICENSE.d3-flame-graph"
cp "$tmp/d3/package/dist/d3.min.js" "$tmp/out/"
cp "$tmp/d3/package/LICENSE" "$tmp/out/LICENSE.d3"

if [ "$mode" = --update ]; then
	(cd "$tmp/out" && sha256sum -- * > SHA256SUMS)
	cp "$tmp"/out/* "$web/"
	echo "web-assets: $FLAME and $D3 written to $web (review SHA256SUMS)"
	exit 0
fi
cp "$web/SHA256SUMS" "$tmp/out/"
if ! (cd "$tmp/out" && sha256sum --check --strict --quiet SHA256SUMS); then
	echo "web-assets: the registry's files differ from $web/SHA256SUMS" >&2
	exit 1
fi
cp "$tmp/out"/* "$web/"
echo "web-assets: $FLAME and $D3 fetched and verified into $web"
