# SPDX-License-Identifier: MIT
# Sourced by python/tests/wheel_test.sh (the suite's wheels) and
# scripts/dist.sh (`make dist`, the release's): the interpreters jitring's
# wheels are built for and building a wheel or the sdist offline, one
# code for both.
#
#   wheel_python WHICH LOG  WHICH: nogil (the free-threaded CPython 3.13.5
#       of scripts/build-python.sh), gil (its GIL build), sid3.14, sid3.15
#       (Debian sid's, scripts/sid-python.sh) or an interpreter's path.
#       Sets py, pytag and abitag (the wheel's tags: cp313, cp313t),
#       build_cflags (CFLAGS its headers need: Debian's pyconfig.h is
#       multiarch) and pipwhl (a pip wheel where the interpreter has no
#       ensurepip: Debian splits it off).  Returns non-zero with the
#       reason in wheel_why where the interpreter cannot be had (the
#       scripts' messages go to LOG).
#   wheel_env               pip sees nothing of the machine's
#       configuration nor the caller's environment (exported).
#   wheel_mkvenv DIR        a venv of $py with pip.
#   wheel_backend           sets backend (scripts/build-backend.sh's
#       settings: meson-python and meson) or returns non-zero.
#   wheel_build VENV SRC OUT [BUILDDIR]  `pip wheel` of SRC into OUT,
#       offline (--no-build-isolation --no-index), pip's output in OUT.log;
#       BUILDDIR keeps meson's build directory from run to run.
#   wheel_sdist VENV SRC OUT  the sdist (meson dist: git HEAD) into OUT,
#       its log in OUT.log; prints its path.

wheel_scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

wheel_python() {
	local which=$1 log=$2
	py= build_cflags= pipwhl= wheel_why=
	case "$which" in
	nogil|gil)
		local flag=
		[ "$which" = gil ] && flag=--gil
		py=$(bash "$wheel_scripts/build-python.sh" $flag 2>"$log") || {
			wheel_why="scripts/build-python.sh $flag failed: $(tail -n 5 "$log")"
			return 1
		} ;;
	sid3.1[45])
		local v=${which#sid}
		py=$(bash "$wheel_scripts/sid-python.sh" "$v" 2>"$log") || {
			wheel_why="no sid python$v (scripts/sid-python.sh: $(tail -n 3 "$log"))"
			return 1
		}
		build_cflags=$(bash "$wheel_scripts/sid-python.sh" "$v" --cflags) ;;
	/*)
		[ -x "$which" ] || { wheel_why="$which: not an executable"; return 1; }
		py=$which ;;
	*)
		wheel_why="unknown interpreter '$which'"
		return 1 ;;
	esac
	local tags
	tags=$("$py" -c 'import sys, sysconfig
t = "cp%d%d" % sys.version_info[:2]
print(t, t + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))' 2>>"$log") || {
		wheel_why="$py does not start: $(tail -n 3 "$log")"
		return 1
	}
	read -r pytag abitag <<<"$tags"
	if ! "$py" -c 'import ensurepip; ensurepip.version()' >/dev/null 2>&1; then
		pipwhl=$(ls "$("$py" -c 'import sys; print(sys.prefix)')"/share/python-wheels/pip-*.whl 2>/dev/null | head -n 1)
		[ -n "$pipwhl" ] || {
			wheel_why="$py has no ensurepip and no pip wheel (no offline pip)"
			return 1
		}
	fi
	return 0
}

wheel_env() {
	export PIP_CONFIG_FILE=/dev/null PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
	unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV
	unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE JITRING_PROFILE
}

wheel_mkvenv() {
	if [ -z "$pipwhl" ]; then
		"$py" -m venv "$1"
	else
		"$py" -m venv --without-pip "$1" &&
			"$1/bin/python" "$pipwhl/pip" install -q --no-index --no-deps "$pipwhl"
	fi
}

wheel_backend() {
	backend=$(bash "$wheel_scripts/build-backend.sh" 2>"$1") || {
		wheel_why="no build backend (scripts/build-backend.sh: $(tail -n 3 "$1"))"
		return 1
	}
}

# In subshells: the backend's PATH and PYTHONPATH for the build only.
wheel_build() (
	eval "$backend"
	[ -z "$build_cflags" ] || export CFLAGS="$build_cflags${CFLAGS:+ $CFLAGS}"
	cd "$2" && "$1/bin/python" -m pip wheel -q --no-build-isolation \
		--no-index --no-deps -Ccompile-args=-j2 \
		${4:+-Cbuild-dir="$4"} -w "$3" . >"$3.log" 2>&1
)

wheel_sdist() (
	eval "$backend"
	mkdir -p "$3" && cd "$2" && "$1/bin/python" -c '
import sys, mesonpy
print(mesonpy.build_sdist(sys.argv[1]))' "$3" >"$3.log" 2>&1 &&
		ls "$3"/jitring-*.tar.gz 2>/dev/null | head -n 1
)
