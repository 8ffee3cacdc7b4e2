# SPDX-License-Identifier: MIT
"""perf record beside the program: its command line for the call-graph
mode chosen (dwarf, or frame pointers where the interpreter keeps them),
started and stopped, and the recording's metadata (META) it leads to."""

import os
import select
import signal
import subprocess
import sys
import time

from jitring.common.folder import claim
from jitring.record.job import pdeathsig
from jitring.record.maxstack import max_stack


class Perf:
    """perf record -p PID, attached and enabled before PID runs."""

    def __init__(self, perf, out, opts, pid, gated=False):
        self.log = os.path.join(out, "perf-record.log")
        claim(out, ["perf-record.log", "perf.data"])
        cr, cw = os.pipe()
        ar, aw = os.pipe()
        # A gated program has not exec'd yet: what perf would synthesize
        # from its maps is record's own image (the same interpreter, at
        # other addresses), which perf 6.1 keeps beside the real one
        # after exec and then fails to unwind most samples through.  The
        # program's own mappings all come as events after exec.
        synth = ["--synth", "no"] if gated else []
        # --no-bpf-event: with -p, perf opens its BPF side-band event on
        # the task itself, not inherited; the kernel then never takes two
        # threads' perf contexts for clones, and every context switch
        # between the program's threads takes the slow path (a cpu-clock
        # hrtimer cancelled and started again each time): 2-4x the time
        # of contended free-threaded code, as root.  Without it, -p costs
        # what 'perf record -- CMD' does (python/README.md).  Lost:
        # records of BPF programs loaded while recording.
        cmd = perf + ["record", "-k", "1", "--no-bpf-event", "-e",
                      opts.event, "-F",
                      str(opts.freq), "--call-graph", perf_call_graph(opts),
                      "-D", "-1", "--control", "fd:%d,%d" % (cr, aw),
                      "-p", str(pid)] + synth + [
                      "-o", os.path.join(out, "perf.data")]
        if opts.wait or opts.wall:
            from jitring.wait.setup import perf_args
            cmd[cmd.index("-p"):cmd.index("-p")] = perf_args(
                opts.call_graph, opts.wait_stack_size, opts.wait_freq,
                opts.wait_budget)
        # --wait: the watch over perf.data's budget, from enable() on.
        self.budget = None
        self.out, self.waits = out, opts.wait or opts.wall
        self.wait_budget, self.wait_freq = opts.wait_budget, opts.wait_freq
        self.pid = pid
        if not opts.keep_debug:
            # No build-ids (no cache: a 5.4 MB copy of kallsyms a
            # recording, most of an fp recording's folder); it is finished
            # at once, from the files in place.  With build-ids in its
            # header, perf script looked the vDSO up in the cache, found
            # nothing and could neither name nor unwind a sample in it
            # (jitring.perf.live's segments, which have none, could).
            cmd.insert(cmd.index("-p"), "--no-buildid")
        with open(self.log, "wb") as log:
            self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=log,
                                      pass_fds=(cr, aw), process_group=0,
                                      preexec_fn=pdeathsig)
        os.close(cr)
        os.close(aw)
        self.ctl, self.ack = cw, ar

    def enable(self, timeout=60.0):
        """True once perf has its events on; False if it died first."""
        try:
            os.write(self.ctl, b"enable\n")
        except OSError:
            return False
        end = time.monotonic() + timeout
        got = b""
        while b"ack" not in got:
            left = end - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.ack], [], [], left)
            if not r:
                return False
            chunk = os.read(self.ack, 64)
            if not chunk:
                return False
            got += chunk
        if self.waits and self.budget is None:
            from jitring.wait.setup import Budget
            self.budget = Budget(self.out, self.wait_budget,
                                       self.ctl, self.ack, self.p,
                                       self.pid, self.wait_freq)
        return True

    def stop(self):
        """SIGINT (perf writes its data and exits), then wait; SIGKILL if
        it has not ended in a minute.  The control descriptors close
        only after: perf 6.1 takes a hang-up on its control descriptor
        for a monitored thread's and gives up ("Thread and evlist pollfd
        index mismatch"), leaving perf.data without its header."""
        if self.budget is not None:
            self.budget.stop()
            self.budget = None
        if self.p.poll() is None:
            try:
                self.p.send_signal(signal.SIGINT)
            except OSError:
                pass
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        for fd in (self.ctl, self.ack):
            try:
                os.close(fd)
            except OSError:
                pass
        self.ctl = self.ack = -1
        return self.p.returncode

    def why(self):
        try:
            with open(self.log, errors="replace") as f:
                lines = [l.rstrip() for l in f if l.strip() and
                         not l.startswith(("Events ", "[ perf record"))]
        except OSError:
            lines = []
        return "\n  ".join(lines[-6:]) or "(perf said nothing)"


def perf_call_graph(opts):
    """perf record's --call-graph value: fp, or dwarf with the stack copy's
    size."""
    if opts.call_graph == "dwarf":
        return "dwarf,%d" % opts.stack_size
    return opts.call_graph


def keeps_frame_pointers():
    """Whether this interpreter was built with frame pointers (Debian
    sid's 3.15, CPython 3.15's default; not 3.13 or 3.14 by default)."""
    import sysconfig
    flags = " ".join(sysconfig.get_config_var(v) or ""
                     for v in ("CFLAGS", "PY_CFLAGS", "CONFIGURE_CFLAGS"))
    return "-fno-omit-frame-pointer" in flags.split()


def meta_of(opts, command):
    """What the finishing reads of how the recording was made."""
    return {"version": 1, "command": command, "python": sys.executable,
            "event": opts.event, "freq": opts.freq,
            "keep_debug": opts.keep_debug, "top_only": opts.no_children,
            "inject": opts.inject, "perf_script": opts.perf_script,
            "call_graph": opts.call_graph,
            "keep_perf_data": opts.keep_perf_data, "inline": opts.inline,
            "cwd": os.getcwd(), "started": time.time(),
            "max_stack": max_stack(), "stack_size": opts.stack_size,
            "wait": opts.wait or opts.wall, "wall": opts.wall,
            "wait_stack_size": opts.wait_stack_size,
            "wait_freq": opts.wait_freq,
            "wait_budget": opts.wait_budget,

            "trampoline_elf": (opts.call_graph == "dwarf" and
                               not opts.memfd_trampolines)}
