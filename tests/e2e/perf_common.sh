# SPDX-License-Identifier: MIT
#
# Sourced by the perf end-to-end tests (perf_*.sh) and demo.sh; defines
# functions and sets nothing else.  A test calls:
#
#   e2e_args "$@"         BUILD_DIR ENGINE: sets $build and $engine
#                         (exit 2 on a bad command line)
#   e2e_prog NAME         the x86_64 program tests/e2e/NAME under test:
#                         sets $prog and $dumptool (jitring-dump); skip
#                         on another architecture, fail if not built
#   pass/fail/skip WHY    the harness's output: "ok:", "FAIL:" (keeps and
#                         names the scratch directory) or "SKIP:", then
#                         "N passed, N failed" last; exit 1 or 77
#   e2e_perf NAME [TOOL...]  skip unless perf (and each TOOL) can be used
#                         here; then make the scratch directory
#                         $TMPDIR/jitring-NAME.XXXXXX ($scratch), cd into
#                         it and make it $HOME (perf inject copies every
#                         ELF into ~/.debug)
#   e2e_hot_js FILE       the "source" testjit --lines names: a function
#                         whose lines 20 and 30 are its two loops

passed=0
failed=0
scratch=

e2e_args() {
	if [ $# -ne 2 ]; then
		echo "usage: $0 BUILD_DIR rings|mutex" >&2
		exit 2
	fi
	build=$(cd "$1" && pwd) || exit 2
	engine=$2
	case $engine in
	rings | mutex) ;;
	*) echo "$0: unknown engine '$engine'" >&2; exit 2 ;;
	esac
}

e2e_prog() {
	prog=$build/tests/e2e/$1
	dumptool=$build/tools/jitring-dump
	[ "$(uname -m)" = x86_64 ] || skip "$1 generates x86_64 code only"
	[ -x "$prog" ] || fail "$prog not built"
	[ -x "$dumptool" ] || fail "$dumptool not built"
}

skip() {
	echo "SKIP: $*"
	echo "0 passed, 0 failed"
	[ -n "$scratch" ] && rm -rf "$scratch"
	exit 77
}

fail() {
	failed=$((failed + 1))
	echo "FAIL: $*"
	echo "scratch directory kept: $scratch"
	echo "$passed passed, $failed failed"
	exit 1
}

pass() {
	passed=$((passed + 1))
	echo "ok: $*"
}

e2e_perf() {
	local name=$1 tool paranoid probe
	shift

	command -v perf > /dev/null 2>&1 || skip "perf is not installed"
	for tool in "$@"; do
		command -v "$tool" > /dev/null 2>&1 ||
			skip "$tool (binutils) is not installed"
	done
	paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2> /dev/null || echo 2)
	if [ "$(id -u)" != 0 ] && [ "$paranoid" -gt 2 ]; then
		skip "kernel.perf_event_paranoid=$paranoid forbids perf for non-root"
	fi
	scratch=$(mktemp -d "${TMPDIR:-/tmp}/jitring-$name.XXXXXX") || exit 2
	cd "$scratch" || exit 2
	export HOME=$scratch
	if ! probe=$(timeout 30 perf record -e cpu-clock -o probe.data true 2>&1); then
		skip "'perf record -e cpu-clock true' fails here: $(echo "$probe" | tail -n 3)"
	fi
	rm -f probe.data
}

e2e_hot_js() {
	local i

	for i in $(seq 1 40); do
		case $i in
		10) echo "function hot(n) {" ;;
		20) echo "  for (let i = n; i; i--) {}   // loop 1" ;;
		30) echo "  for (let j = n; j; j--) {}   // loop 2" ;;
		40) echo "}" ;;
		*) echo "//" ;;
		esac
	done > "$1"
}
