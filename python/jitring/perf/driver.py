# SPDX-License-Identifier: MIT
"""Finding and running perf: its command line for a recording's folder,
the steps (subprocesses) of a finishing that a signal must stop, and
``perf inject --jit``, given only the JIT code the samples reach
(jitring.perf.jitsyms)."""

import errno
import os
import shutil
import signal
import subprocess

from jitring.common.errors import Interrupted, RecordError
from jitring.common.folder import FULL, no_space


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def die_with_parent(sig):
    """In a child before exec (a preexec_fn): signal @sig to it when the
    thread that started it ends (PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)
    except Exception:
        pass


def find_perf():
    perf = shutil.which("perf")
    if not perf:
        raise RecordError("perf not found on PATH (Debian: apt install "
                          "linux-perf)")
    # Debian's /usr/bin/perf is a wrapper that fails at run time when no
    # perf matches the running kernel: ask it once.
    p = subprocess.run([perf, "--version"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RecordError("perf does not run here: %s"
                          % (p.stderr.strip() or p.stdout.strip()))
    return perf


def perf_cmd(perf, out, keep_debug):
    """perf, with no build-id cache unless keep_debug (~/.debug): perf
    inject would copy every file it sees into it (the interpreter, libc,
    kallsyms, each jitted image: 48 MB for a small 3.13t program, half of
    inject's time), and every step reads the files in place."""
    if keep_debug:
        return [perf]
    return [perf, "--buildid-dir", os.devnull]


class Steps:
    """Runs the finishing's subprocesses; a signal stops the one running
    (it is in record's process group, so a terminal's Ctrl-C reaches it
    too) and raises Interrupted.  A step that leaves the disk of its
    folder (cwd) full raises OSError(ENOSPC): perf script does not check
    its writes, and its output would be cut short unsaid."""

    def __init__(self):
        self.proc = None
        self.old = {}

    def __enter__(self):
        for s in SIGNALS:
            self.old[s] = signal.signal(s, self.stop)
        return self

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)

    def stop(self, signum, frame):
        raise Interrupted(signum)

    def start_all(self, cmds, outs, errs, cwd):
        """Start @cmds at once, each's stdout into its file of @outs (a
        pipe where that is None) and stderr into its file of @errs;
        their processes.  wait_all() waits for them."""
        procs = []
        try:
            for cmd, o, e in zip(cmds, outs, errs):
                with open(e, "w") as g:
                    if o is None:
                        procs.append(subprocess.Popen(
                            cmd, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=g, stdin=subprocess.DEVNULL))
                        continue
                    with open(o, "w") as f:
                        procs.append(subprocess.Popen(
                            cmd, cwd=cwd, stdout=f, stderr=g,
                            stdin=subprocess.DEVNULL))
        except BaseException:
            end_procs(procs)
            raise
        return procs

    def wait_all(self, procs, cwd):
        """Wait for @procs (start_all()); their return codes."""
        try:
            for p in procs:
                p.wait()
        except BaseException:
            end_procs(procs)
            raise
        if no_space(cwd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                          "perf script")
        return [p.returncode for p in procs]

    def run_all(self, cmds, outs, errs, cwd):
        """Run @cmds at once, each's stdout and stderr into its file of
        @outs and @errs; their return codes."""
        return self.wait_all(self.start_all(cmds, outs, errs, cwd), cwd)

    def run(self, cmd, **kw):
        p = self.proc = subprocess.Popen(cmd, **kw)
        try:
            p.wait()
        except BaseException:
            end_procs([p])
            raise
        finally:
            self.proc = None
        if kw.get("cwd") and no_space(kw["cwd"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                          "perf " + next((a for a in cmd if a in
                                          ("inject", "script")), "?"))
        return p.returncode


def end_procs(procs):
    """End the processes @procs that still run (a signal stopped the
    finishing): SIGTERM, then SIGKILL to any still there 10 s later."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def tail_of(path, n=5):
    """The last @n lines of @path, control characters escaped (perf may
    print a name in them)."""
    from jitring.common.text import escape
    try:
        with open(path, errors="replace", newline="\n") as f:
            lines = [escape(l.rstrip()) for l in f if l.strip()]
    except OSError:
        return ""
    return "\n  ".join(lines[-n:])


def failed(what, rc, log):
    """One line: @what failed with status @rc, its last words in @log."""
    if rc < 0:
        try:
            how = "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            how = "killed by signal %d" % -rc
    else:
        how = "exit %d" % rc
    last = tail_of(log, 1)
    return "%s failed (%s)%s (the whole log: %s)" % (
        what, how, ": " + last if last else "", log)


def inject(steps, perf, out, meta):
    """perf inject --jit, perf.data -> perf.jit.data; unless the recording
    asks for the whole dumps (--inject full), perf inject reads dumps of
    only the functions the samples can reach (the full ones are put back
    after).  perf.data is removed once perf.jit.data is written."""
    from jitring.perf.data import PerfDataError
    from jitring.perf.jitsyms import DumpError, reduce, restore
    log = os.path.join(out, "perf-inject.log")
    paths = []
    with open(log, "w") as f:
        try:
            restore(out)   # a finishing stopped half-way
            if meta.get("inject", "reduced") != "full":
                try:
                    stats = reduce(out,
                                            os.path.join(out, "perf.data"))
                    paths = list(stats)
                    for p, (n, k) in sorted(stats.items()):
                        f.write("jitring: %s: %d of %d functions reached "
                                "by the samples\n"
                                % (os.path.basename(p), k, n))
                except (PerfDataError, DumpError,
                        OSError) as e:
                    restore(out, paths)
                    paths = []
                    f.write("jitring: the whole dumps (%s)\n" % e)
                f.flush()
            rc = steps.run(perf + ["inject", "--jit", "-i", "perf.data",
                                   "-o", "perf.jit.data"], cwd=out,
                           stdout=f, stderr=f, stdin=subprocess.DEVNULL)
        finally:
            restore(out, paths)
    if rc != 0:
        said = tail_of(log, 1000)
        for e in FULL:
            if os.strerror(e) in said:
                raise OSError(e, os.strerror(e), "perf inject")
        raise RecordError(failed("perf inject --jit", rc, log))
    if not meta.get("keep_perf_data"):
        os.unlink(os.path.join(out, "perf.data"))
