# SPDX-License-Identifier: MIT
"""Shared by the llvm suite's perf tests (orc_perf.py, pg_perf.py).

A test makes a Test, calls its check() for each claim, and ends with
t.done(), which prints "N passed, N failed" and exits 0 or 1; t.skip(why)
exits 77, or 1 after a failed check (a skip never hides one).  A test
that made no check fails.  Failing tests keep their scratch directory
and name it.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback


class Test:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0
        self.scratch = None
        self.cleanups = []

    def make_scratch(self):
        self.scratch = tempfile.mkdtemp(prefix='jitring-%s.' % self.name)
        os.chmod(self.scratch, 0o755)
        # Anything a tool still keeps in ~/.debug stays in the scratch.
        os.environ['HOME'] = self.scratch
        return self.scratch

    def check(self, cond, what):
        if cond:
            self.passed += 1
            print('ok: ' + what, flush=True)
        else:
            self.failed += 1
            print('FAIL: ' + what, flush=True)
        return cond

    def _finish(self):
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as e:  # keep cleaning up
                print('cleanup: %s' % e, flush=True)
        self.cleanups = []

    def skip(self, why):
        print('SKIP: ' + why, flush=True)
        if self.failed:
            self.fatal('skipped after %d failed check(s): the test fails'
                       % self.failed)
        self._finish()
        print('%d passed, 0 failed' % self.passed)
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
        sys.exit(77)

    def fatal(self, why):
        self.failed += 1
        print('FAIL: ' + why, flush=True)
        self.done()

    def done(self):
        if not self.passed and not self.failed:
            self.failed += 1
            print('FAIL: the test made no check', flush=True)
        self._finish()
        if self.failed and self.scratch:
            print('scratch directory kept: ' + self.scratch)
        elif self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
        print('%d passed, %d failed' % (self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


class Terminated(Exception):
    pass


def _terminated(signum, frame):
    raise Terminated('signal %d (a test timeout?)' % signum)


def guarded(name, body):
    """Runs body(t) for a new Test; an exception, SIGTERM (meson's timeout)
    or SIGINT fails the test, and the cleanups (a server to stop) run
    whatever happens."""
    t = Test(name)
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGINT, _terminated)
    try:
        body(t)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        t.fatal('%s: exception (above)' % name)
    t.done()


def run(cmd, **kw):
    """Runs cmd; returns CompletedProcess with text stdout/stderr.  perf
    runs with its build-id cache off: record copied libLLVM (120 MB) and
    inject each jitted-*.so into ~/.debug, and deleting orc_perf's copies
    took 31 s of its 60 (ext4 mounted with discard); every file is read
    where it lies."""
    if cmd and cmd[0] == 'perf':
        cmd = ['perf', '--buildid-dir', '/dev/null'] + list(cmd[1:])
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


def perf_usable(t, scratch):
    """Skips unless perf can record cpu-clock with DWARF call graphs."""
    if not shutil.which('perf'):
        t.skip('perf not installed (Debian: linux-perf)')
    probe = run(['perf', 'record', '-q', '-k', '1', '-e', 'cpu-clock',
                 '--call-graph', 'dwarf', '-o',
                 os.path.join(scratch, 'probe.data'), '--', 'true'])
    if probe.returncode != 0:
        t.skip('perf record does not work here: ' +
               probe.stderr.strip().splitlines()[-1:][0]
               if probe.stderr.strip() else 'perf record failed')


def dump_records(dumptool, path):
    """(ok, output) of jitring-dump --check --sorted PATH."""
    r = run([dumptool, '--check', '--sorted', path])
    return r.returncode == 0, r.stdout + r.stderr


def dump_loads(dumptool, path):
    """[(name, has_unwind, has_debug)] for each CODE_LOAD, in file order."""
    r = run([dumptool, path])
    loads = []
    unwind = debug = False
    for line in r.stdout.splitlines():
        if 'CODE_UNWINDING_INFO' in line:
            unwind = True
        elif 'CODE_DEBUG_INFO' in line:
            debug = True
        elif 'CODE_LOAD' in line:
            m = re.search(r' name=(.*)$', line)
            loads.append((m.group(1) if m else '', unwind, debug))
            unwind = debug = False
    return loads


def perf_samples(data, extra=()):
    """Each sample of `perf script` on DATA as a list of (sym, dso) frames,
    innermost first."""
    r = run(['perf', 'script', '-i', data, '-F', 'ip,sym,dso', '--no-inline']
            + list(extra))
    samples = []
    for block in r.stdout.split('\n\n'):
        frames = []
        for line in block.strip().splitlines():
            parts = line.strip().split(None, 1)
            if len(parts) < 2:
                continue
            m = re.match(r'(.*) \((.*)\)$', parts[1])
            if m:
                frames.append((m.group(1), m.group(2)))
            else:
                frames.append((parts[1], ''))
        if frames:
            samples.append(frames)
    return samples
