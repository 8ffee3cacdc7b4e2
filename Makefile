# SPDX-License-Identifier: MIT
# Front door.  `make demo` and `make test` install what is missing (Debian
# packages), configure, build and run.  Build trees:
#   build/          tests (testpoints compiled in), demo
#   build-release/  benchmarks (no test hooks)
#   build-asan/ build-tsan/  sanitizer runs
MESON ?= meson
NINJA ?= ninja
PY ?= python3
JOBS ?= 2

.PHONY: bench-record ci check-release format-check all deps deps-bench deps-clang deps-cross deps-browser deps-llvm bench-llvm bench-llvm-preload test-llvm15 build demo test test-unit test-asan test-tsan \
	stress bench bench-full format clean python python-configure build-py test-python \
	test-python-gil bench-python wheel test-python-newer dist

all: build

deps:
	@bash scripts/deps.sh core

deps-bench:
	@bash scripts/deps.sh bench

deps-clang:
	@bash scripts/deps.sh fuzz

# Best effort: without them the llvm suite skips (and says why).
# LLVM 15 apart: without it only LLVM 14 programs get jitring's listener.
deps-llvm:
	-@bash scripts/deps.sh llvm || \
		echo "jitring: no llvm-14-dev/postgresql-15; the llvm suite will skip"
	-@bash scripts/deps.sh llvm15 || \
		echo "jitring: no llvm-15-dev; no listener for LLVM 15 programs"

# Best effort: without them the aarch64 trampoline test skips.
deps-cross:
	-@bash scripts/deps.sh cross || \
		echo "jitring: no aarch64 cross tools; trampoline_unwind_aarch64 will skip"

# Best effort: without it the flame graph page's browser test (py_flame)
# skips.
deps-browser:
	-@bash scripts/deps.sh browser || \
		echo "jitring: no chromium; py_flame will skip"

build/build.ninja: | deps deps-llvm
	$(MESON) setup build --native-file scripts/llvm14.ini -Dtestpoints=true \
		-Dbench=disabled

build: build/build.ninja
	$(NINJA) -C build

# The Python module (python/) and its 'python' test suite run on a
# free-threaded CPython 3.13.5 that scripts/build-python.sh builds once
# (about 2.5 minutes on 2 CPUs) and caches outside the clone.  `make python`
# prints its path.
python:
	@bash scripts/build-python.sh

# Point build/ at it (-Dpython); reconfigures only when the path changes.
python-configure: build/build.ninja
	@py=$$(bash scripts/build-python.sh) || exit 1; \
	cur=$$($(MESON) introspect --buildoptions build | $(PY) -c \
		'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "python"))'); \
	[ "$$cur" = "$$py" ] || $(MESON) configure build -Dpython="$$py"

build-py: python-configure
	$(NINJA) -C build

test-python: build-py deps-browser
	$(MESON) test -C build --no-rebuild --num-processes 1 --print-errorlogs --suite python

# The same suite on the GIL build of the same tarball, built standalone
# against libjitring installed from build/ into build-gil/root (the
# standalone way to build python/).
test-python-gil: build
	@py=$$(bash scripts/build-python.sh --gil) || exit 1; \
	rm -rf build-gil/root && \
	$(MESON) install -C build --quiet --no-rebuild --destdir $(CURDIR)/build-gil/root && \
	prefix=$$($(MESON) introspect --buildoptions build | $(PY) -c \
		'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))'); \
	libdir=$$($(MESON) introspect --buildoptions build | $(PY) -c \
		'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))'); \
	stage=$(CURDIR)/build-gil/root$$prefix; \
	sed -i "s|^prefix=.*|prefix=$$stage|" $$stage/$$libdir/pkgconfig/jitring.pc; \
	export PKG_CONFIG_PATH=$$stage/$$libdir/pkgconfig PATH=$$stage/bin:$$PATH; \
	[ -f build-gil/py/build.ninja ] || \
		$(MESON) setup build-gil/py python -Dpython="$$py"; \
	$(NINJA) -C build-gil/py && \
	$(MESON) test -C build-gil/py --no-rebuild \
		--num-processes 1 --print-errorlogs --suite python

# The Python package (pyproject.toml) as a wheel in build-wheel/dist, for
# the free-threaded 3.13.5 or PY_WHEEL=<interpreter>, offline: pip from the
# interpreter's own ensurepip, meson-python and meson from
# scripts/build-backend.sh.  (With network: pip wheel . in any venv.)
wheel:
	@py=$${PY_WHEEL:-$$(bash scripts/build-python.sh)} || exit 1; \
	eval "$$(bash scripts/build-backend.sh)" || exit 1; \
	rm -rf build-wheel/venv && "$$py" -m venv build-wheel/venv && \
	PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= build-wheel/venv/bin/python \
		-m pip wheel --no-build-isolation --no-index --no-deps \
		-w build-wheel/dist . && ls build-wheel/dist/*.whl

# A release's files in dist/ (scripts/dist.sh): the sdist (git HEAD) and,
# built from it, a manylinux wheel per CPython found here (3.13t and 3.13
# of scripts/build-python.sh, sid's 3.14 and 3.15; 3.12 with
# PYTHON312=/path/to/python3.12), each through auditwheel, with SHA256SUMS;
# then each wheel installed and run where no compiler, meson or header is
# visible (scripts/dist-check.sh).  py_dist runs the same in `make test`.
dist: deps
	@PYTHON312=$(PYTHON312) bash scripts/dist.sh dist

# The package against Debian sid's CPython 3.14 and 3.15 (GIL builds from
# .debs, run with sid's glibc from a private root; scripts/sid-python.sh).
test-python-newer: build-py
	$(MESON) test -C build --no-rebuild --num-processes 1 --print-errorlogs \
		--suite python-newer

demo: build
	@bash tests/e2e/demo.sh build

# Every test: unit, e2e (through real perf where permitted), the short
# stress runs, the safety suite (hostile files, tests/safety/), the
# Python module's suite and the LLVM listener's (an ORC JIT and
# PostgreSQL's JIT under perf, llvm/tests/).  The last line is the summary.
test: build-py deps-cross deps-browser
	@rm -f build/meson-logs/testlog.json
	-@$(MESON) test -C build --no-rebuild --num-processes $(JOBS) \
		--print-errorlogs --suite unit --suite e2e --suite stress --suite safety \
		--suite python --suite python-newer --suite llvm \
		> build/test-output.txt 2>&1; tail -n 40 build/test-output.txt
	@$(PY) scripts/test-summary.py --expect-suite python build/meson-logs/testlog.json

# The llvm suite again, with the listener built against LLVM 15
# (scripts/llvm15.ini); only what the suite needs is built (the preload's
# listener for every LLVM installed: lli_perf runs lli-14 too).  pg_perf
# skips there: PostgreSQL 15's JIT uses LLVM 14.
build-llvm15/build.ninja: | deps deps-llvm
	$(MESON) setup build-llvm15 --native-file scripts/llvm15.ini \
		-Dtestpoints=false -Dbench=disabled

test-llvm15: build-llvm15/build.ninja
	@if [ -x "$$(command -v llvm-config-15)" ]; then \
		$(NINJA) -C build-llvm15 llvm/tests/orcjit tools/jitring-dump \
			llvm/libjitring-llvm-perf.so $$(for v in 14 15; do \
			[ -x "$$(command -v llvm-config-$$v)" ] && \
			echo llvm/libjitring-llvm-perf-$$v.so; done); fi
	@rm -f build-llvm15/meson-logs/testlog.json
	-@$(MESON) test -C build-llvm15 --no-rebuild --num-processes 1 \
		--print-errorlogs --suite llvm \
		> build-llvm15/test-output.txt 2>&1; tail -n 20 build-llvm15/test-output.txt
	@$(PY) scripts/test-summary.py build-llvm15/meson-logs/testlog.json

test-unit: build
	$(MESON) test -C build --no-rebuild --suite unit --print-errorlogs

build-asan/build.ninja: | deps deps-clang
	CC=clang CXX=clang++ $(MESON) setup build-asan -Dtestpoints=true \
		-Dbench=disabled -Db_sanitize=address,undefined -Db_lundef=false \
		-Dwerror=true

# The sanitizer runs double every test's timeout: instrumented code runs
# several times slower (jitring_open(): 30 ms under TSan, 3 ms without).
test-asan: build-asan/build.ninja
	$(NINJA) -C build-asan
	@rm -f build-asan/meson-logs/testlog.json
	-@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	 $(MESON) test -C build-asan --no-rebuild --num-processes $(JOBS) \
		--timeout-multiplier 2 --print-errorlogs --suite unit --suite stress --suite safety \
		> build-asan/test-output.txt 2>&1; tail -n 40 build-asan/test-output.txt
	@$(PY) scripts/test-summary.py build-asan/meson-logs/testlog.json

build-tsan/build.ninja: | deps deps-clang
	CC=clang CXX=clang++ $(MESON) setup build-tsan -Dtestpoints=true \
		-Dbench=disabled -Db_sanitize=thread -Db_lundef=false \
		-Dwerror=true

test-tsan: build-tsan/build.ninja
	$(NINJA) -C build-tsan
	@rm -f build-tsan/meson-logs/testlog.json
	-@TSAN_OPTIONS="suppressions=$(CURDIR)/tsan.supp halt_on_error=1 second_deadlock_stack=1 die_after_fork=0" \
	 $(MESON) test -C build-tsan --no-rebuild --num-processes 1 \
		--timeout-multiplier 2 --print-errorlogs --suite unit --suite stress --suite safety \
		> build-tsan/test-output.txt 2>&1; tail -n 40 build-tsan/test-output.txt
	@$(PY) scripts/test-summary.py build-tsan/meson-logs/testlog.json

# The build users and distributions get: optimised (-O2 finds warnings
# that -O0 does not, such as a %s that may be truncated), no test hooks,
# every warning an error (gcc); its unit and safety tests (the testpoint
# cases skip).
build-release-check/build.ninja: | deps
	$(MESON) setup build-release-check --buildtype=release \
		-Dtestpoints=false -Dwerror=true -Dbench=disabled

check-release: build-release-check/build.ninja
	$(NINJA) -C build-release-check
	@rm -f build-release-check/meson-logs/testlog.json
	-@$(MESON) test -C build-release-check --no-rebuild \
		--num-processes $(JOBS) --print-errorlogs --suite unit \
		--suite safety > build-release-check/test-output.txt 2>&1; \
		tail -n 20 build-release-check/test-output.txt
	@$(PY) scripts/test-summary.py build-release-check/meson-logs/testlog.json

# What CI runs (.ci/run): every test, then the sanitizer runs and the
# release build.  Each ends with its own summary line; the last line
# is the sum.
ci:
	@bash scripts/ci.sh

# Long stress: the one entry point for the long stress, fault and crash
# runs and a short fuzz run of each harness (docs/reliability.md); minutes,
# not part of `make test`.  Every timed run lasts STRESS_SECONDS, each
# fuzzer FUZZ_SECONDS.  The meson suite stress-long and
# stress/run-long.sh are its internals.
STRESS_SECONDS ?= 30
FUZZ_SECONDS ?= 60

stress: build-py deps-clang
	STRESS_SECONDS=$(STRESS_SECONDS) FUZZ_SECONDS=$(FUZZ_SECONDS) \
		bash stress/run-long.sh build

# Benchmarks against the mutex design (bench/README.md).  A release build
# without test hooks; results go to bench/results/.
build-release/build.ninja: | deps deps-bench
	$(MESON) setup build-release -Dbuildtype=release -Dtestpoints=false \
		-Dtests=disabled -Dbench=enabled

bench: deps-bench build-release/build.ninja
	$(NINJA) -C build-release
	bash bench/run.sh quick build-release
	$(MAKE) bench-python

# Profiling cost per new Python code object: jitring rings / mutex against
# CPython's -X perf_jit, on the free-threaded interpreter (bench/README.md).
# Then a session's cost per call, per interpreter (bench_session.py): the
# free-threaded 3.13 and SESSION_PYTHON, interpreters with jitring's wheel
# installed (default: the venvs of the GIL 3.13 and sid's 3.14 and 3.15
# that `make test` leaves, where they exist).
SESSION_PYTHON ?= $(wildcard $(foreach m,gil sid3.14 sid3.15,\
	$(CURDIR)/build/subprojects/jitring-python/tests/wheel-$(m)/venv/bin/python))
bench-python: deps-bench build-release/build.ninja
	@py=$$(bash scripts/build-python.sh) || exit 1; \
	cur=$$($(MESON) introspect --buildoptions build-release | $(PY) -c \
		'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "python"))'); \
	[ "$$cur" = "$$py" ] || $(MESON) configure build-release -Dpython="$$py"; \
	$(NINJA) -C build-release && \
	PYTHONPATH=$(CURDIR)/build-release/subprojects/jitring-python \
	JITRING_DUMP=$(CURDIR)/build-release/tools/jitring-dump \
	$$py bench/python/bench_py.py --quick --out bench/results/python-quick.json \
		| tee bench/results/python-quick.txt && \
	PYTHONPATH=$(CURDIR)/build-release/subprojects/jitring-python \
	$$py bench/python/bench_startup.py | tee bench/results/python-startup.txt && \
	PYTHONPATH=$(CURDIR)/build-release/subprojects/jitring-python \
	$$py bench/python/bench_session.py --python $$py \
		$(foreach p,$(SESSION_PYTHON),--python $(p)) \
		| tee bench/results/session.txt

# The LLVM listener's cost per object against LLVM's perf listener
# (bench/README.md, "LLVM listener"); dumps go to a scratch folder in
# /dev/shm, removed afterwards.
bench-llvm: deps-bench deps-llvm build-release/build.ninja
	$(NINJA) -C build-release llvm/bench/listener_driver
	@d=$$(mktemp -d /dev/shm/jitring-llvm-bench.XXXXXX) && \
	build-release/llvm/bench/listener_driver --objects 1024 --dir $$d \
		| tee bench/results/llvm-listener.txt; rc=$$?; rm -rf $$d; exit $$rc

# What preloading libjitring-llvm-perf.so costs processes that never ask
# for LLVM's listener: peak RSS and start-up of /bin/true, python3 -c pass
# and sh -c :, with and without it.
bench-llvm-preload:
	$(NINJA) -C build llvm/libjitring-llvm-perf.so
	bash bench/llvm_preload.sh build/llvm/libjitring-llvm-perf.so \
		| tee bench/results/llvm-preload.txt

# What `python -m jitring record` costs at 20,000 / 100,000 fresh functions
# and on an 8-thread job: the route before it (perf inject on
# the whole dump) next to the dwarf route, in one run; the fp route too on
# FP_PYTHON, interpreters with frame pointers (default: the 3.13t of
# scripts/build-python.sh --fp, which the build tree's module serves, and
# the sid 3.15 venv `make test` leaves, where they exist).  Then real
# programs (docutils from Debian's python3-docutils among them) with the
# totals' truth, the finish and the folder.  bench/README.md.
PY_CACHE := $(or $(JITRING_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/jitring)
FP_PYTHON ?= $(wildcard $(PY_CACHE)/cpython-3.13.5-nogil-fp/bin/python3.13t \
	$(CURDIR)/build/subprojects/jitring-python/tests/wheel-sid3.15/venv/bin/python)
bench-record: build-py deps-bench
	@py=$$(bash scripts/build-python.sh) || exit 1; \
	PYTHONPATH=$(CURDIR)/build/subprojects/jitring-python \
	$$py bench/python/bench_record.py --python $$py \
		$(foreach p,$(FP_PYTHON),--python $(p)) \
		| tee bench/results/record.txt && \
	PYTHONPATH=$(CURDIR)/build/subprojects/jitring-python \
	JITRING_DUMP=$(CURDIR)/build/tools/jitring-dump \
	$$py bench/python/bench_wait.py --python $$py \
		| tee bench/results/record-wait.txt && \
	PYTHONPATH=$(CURDIR)/build/subprojects/jitring-python \
	$$py bench/python/bench_contend.py --python $$py \
		| tee bench/results/record-contend.txt && \
	PYTHONPATH=$(CURDIR)/build/subprojects/jitring-python \
	$$py bench/python/bench_fplink.py --python $$py \
		$(foreach p,$(FP_PYTHON),--python $(p)) \
		| tee bench/results/record-fplink.txt

bench-full: deps-bench build-release/build.ninja
	$(NINJA) -C build-release
	bash bench/run.sh full build-release

# The library's code follows .clang-format (clang-format 14); CI checks it.
FORMAT_FILES = include/*.h include/jitring/*.h src/*/*.c src/*/*.h src/*/*/*.c \
	src/*/*/*.h tools/*.c

format: deps-clang
	clang-format -i $(FORMAT_FILES)

format-check: deps-clang
	@clang-format --dry-run --Werror $(FORMAT_FILES) && \
		echo "format: $(words $(wildcard $(FORMAT_FILES))) files follow .clang-format"

clean:
	rm -rf build build-release build-asan build-tsan build-release-check build-gil build-llvm15 \
		build-wheel build-dist
