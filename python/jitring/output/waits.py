# SPDX-License-Identifier: MIT
"""record --wait's outputs: stacks-wait.folded, flame-wait.html (drawn as
flame.html is) and the wait tables printed after the CPU's."""

import os
from typing import NamedTuple

from jitring.output.flame import write_html
from jitring.output.folded import write_folded
from jitring.output.tables import fmt_name, program_dirs
from jitring.output.writer import Writer
from jitring.profile.cuts import STACK_MAX
from jitring.wait.setup import PREEMPTED, RATE, STACK_SIZE, UNSAMPLED


# ---- the files and the tables --------------------------------------------
class WaitWriter(Writer):
    """An output of record --wait's: only where the recording has waits."""

    def wanted(self, profile):
        return profile.waits is not None


class WaitFolded(WaitWriter):
    """stacks-wait.folded: the folded wait stacks."""
    name = "stacks-wait"
    files = ("stacks-wait.folded",)

    def write(self, profile):
        write_folded(os.path.join(profile.out, self.files[0]),
                            profile.waits.stacks())


class WaitFlame(WaitWriter):
    """flame-wait.html: the folded wait stacks drawn as flame.html is."""
    name = "flame-wait"
    files = ("flame-wait.html",)

    def write(self, profile):
        w = profile.waits
        cmd = " ".join(str(a) for a in w.meta.get("command") or [])
        write_html(
            os.path.join(profile.out, self.files[0]), w.stacks(),
            title="jitring waits: " + cmd,
            subtitle="where threads were off CPU, in microseconds until "
            "each ran again ([wait: REASON] under the innermost Python "
            "frame), %d context switches%s" % (
                w.switches, ", %d sampled with their stack"
                % w.samples if w.sampled else ""),
            unit="\u00b5s off CPU")


class TableRow(NamedTuple):
    """A row of the tables of blocked time."""
    ns: int
    reason: str
    function: str


class WaitTables(WaitWriter):
    """The wait tables on stdout (profile.top rows each): the header
    line, blocked time by reason, by function (total and self), the
    preempted, --wall's lines and the notes."""
    name = "wait-tables"
    files = ()

    def write(self, profile):
        w = profile.waits
        top = profile.top
        dirs = program_dirs(w.meta)
        print()
        if not self.header(w):
            return
        self.reasons(w)
        if not w.self_:
            print("\nno thread of the program blocked")
        else:
            self.blocked(w, top, dirs)
        self.preempted(w, top, dirs)
        if w.meta.get("wall"):
            self.wall(w, dirs)
        for n in self.notes(w):
            print("(%s)" % n)

    def header(self, w):
        """The line of the switches and thread time, and how their stacks
        were sampled; False where there is no table to print."""
        vol = sum(w.self_.values())
        pre = sum(r.get(PREEMPTED, 0) for r in w.per_thread.values())
        if not w.samples and any(w.threads.outs.values()):
            print("perf recorded the threads' context switches but no "
                  "sample of them (its samples of the kernel were "
                  "withheld?): no table of waits")
            return False
        off = sum(sum(w.threads.off_cpu(t).values()) for t in w.tids)
        print("%d context switches of %d thread%s over %.3f s of thread "
              "time: %.3f s off CPU (%.1f%%): %.3f s blocked (%.1f%%), "
              "%.3f s preempted (%.1f%%)%s"
              % (w.switches, len(w.tids),
                 "" if len(w.tids) == 1 else "s", w.thread_ns / 1e9,
                 off / 1e9, w.share(off), vol / 1e9, w.share(vol),
                 pre / 1e9, w.share(pre),
                 ", %.3f s with no sampled stack (%.1f%%)"
                 % (w.unsampled_ns / 1e9, w.share(w.unsampled_ns))
                 if w.unsampled_ns else ""))
        if w.sampled:
            print("(%d of them sampled with their stack, about %s a "
                  "second a thread at most (--wait-freq): a sample weighs "
                  "the switches of its thread it stands for, timed at "
                  "every switch)"
                  % (w.samples, w.meta.get("wait_freq") or "?"))
        return True

    def reasons(self, w):
        """The line of blocked time by reason."""
        reasons = {}
        for k, ns in w.self_.items():
            reasons[k.reason] = reasons.get(k.reason, 0) + ns
        if reasons:
            print("Blocked, by reason: " + ", ".join(
                "%s %.3f s (%.1f%%)" % (r, ns / 1e9, w.share(ns))
                for r, ns in sorted(reasons.items(),
                                    key=lambda r: (-r[1], r[0]))
                if w.shown(ns)))

    def blocked(self, w, top, dirs):
        """The tables of blocked time by function: total, then self."""
        rows = sorted(((sum(d.values()), name, d) for name, d in
                       w.total.items()
                       if w.shown(sum(d.values()))),
                      key=lambda r: (-r[0], r[1]))[:top]
        tot = []
        for ns, name, d in rows:
            main = max(d.items(), key=lambda r: (r[1], r[0]))[0]
            if len(d) > 1:
                main += " +%d more" % (len(d) - 1)
            tot.append(TableRow(ns, main, name))
        rows = sorted(((k, ns) for k, ns in w.self_.items()
                       if w.shown(ns)),
                      key=lambda r: (-r[1], r[0]))[:top]
        slf = [TableRow(ns, k.reason, k.function) for k, ns in rows]
        # The reason's column as wide as its longest (two spaces
        # always part it from the function).
        width = max([24] + [len(r.reason) for r in tot + slf])
        print("\nWhere threads wait, by Python function (blocked "
              "until each ran again; total: the function and all it "
              "calls; share of all thread time):")
        self.table(w, "total", tot, width, dirs)
        print("\nBy self (the innermost Python function, by reason):")
        self.table(w, "self", slf, width, dirs)

    def table(self, w, head, rows, width, dirs):
        """One table of TableRows, under its @head."""
        print("%15s  %-*s  %s" % (head, width, "reason", "function"))
        for r in rows:
            print("%s  %-*s  %s" % (w.cell(r.ns), width, r.reason,
                                    fmt_name(r.function, dirs)))

    def preempted(self, w, top, dirs):
        """The table of preempted time by the innermost function."""
        rows = sorted(((k, ns) for k, ns in w.pre_self.items()
                       if w.shown(ns)),
                      key=lambda r: (-r[1], r[0]))[:top]
        if rows:
            print("\nWhere threads were preempted (runnable, waiting for "
                  "a CPU), by the innermost Python function:")
            print("%15s  %s" % ("self", "function"))
            for name, ns in rows:
                print("%s  %s" % (w.cell(ns),
                                  fmt_name(name, dirs)))

    def notes(self, w):
        """The notes after the tables, one line each."""
        notes = []
        if w.unmatched:
            notes.append("%d switch%s without the time the thread ran "
                         "again (perf lost its record, or the recording "
                         "ended first) left out"
                         % (w.unmatched,
                            "" if w.unmatched == 1 else "es"))
        if w.own:
            notes.append("%d switch%s of jitring's own work left out"
                         % (w.own, "" if w.own == 1 else "es"))
        notes += self.lost_notes(w)
        if w.unsampled_ns * 100 > w.thread_ns:
            notes.append("%.3f s off CPU (%.1f%% of thread time) has no "
                         "sampled stack (a thread with no sample of its "
                         "kind of switch, or switches after the stacks "
                         "stopped): in no table but --wall's lines"
                         % (w.unsampled_ns / 1e9,
                            w.share(w.unsampled_ns)))
        if w.cut_ns * 100 > w.thread_ns:
            size = w.meta.get("wait_stack_size") or STACK_SIZE
            notes.append("%.1f%% of thread time waits with a cut stack "
                         "(outer frames not recorded)%s"
                         % (w.share(w.cut_ns),
                            "; record with --wait-stack-size %d for "
                            "deeper ones" % min(STACK_MAX, 4 * size)
                            if w.meta.get("call_graph") != "fp" and
                            size < STACK_MAX else ""))
        return notes

    def lost_notes(self, w):
        """What perf lost and what the budget stopped, one line each."""
        notes = []
        lost = w.threads.lost
        if lost.get("switch"):
            notes.append("perf lost %d samples of the switches (its "
                         "buffers were full): the next sample of their "
                         "thread stands for their switches"
                         % lost["switch"])
        if lost.get("records"):
            notes.append("perf lost %d of its records of switches, forks "
                         "and maps (its buffers were full): a thread whose "
                         "switch record is lost has its time off CPU off "
                         "by that switch's" % lost["records"])
        elif lost.get("any") and not lost.get("switch") and \
                not lost.get("cpu"):
            notes.append("perf lost %d records (its buffers were full; "
                         "this kernel does not say of which event): the "
                         "times off CPU may be off by their switches"
                         % lost["any"])
        got = w.budget
        if got.get("fast"):
            t = got.get("sampled_s") or 0
            if t:
                notes.append("for %.1f s of the program, switching %d "
                             "times a second (more than %d), the stacks of "
                             "its switches were sampled, about %d a second "
                             "a thread at most (--wait-freq), each "
                             "weighing the switches it stands for; taken "
                             "at every switch otherwise"
                             % (t, (got.get("sampled_n") or 0) / t, RATE,
                                got.get("freq") or 0))
            else:
                notes.append("the program switched %d times a second "
                             "(more than %d) %.1f s in, but no whole "
                             "window of its switches' stacks was sampled "
                             "(perf stopped first, or took the change "
                             "late): every switch's stack was taken"
                             % (got.get("fast_rate") or 0, RATE,
                                got["fast"]))
        if "stacks_off" in got:
            notes.append("stacks of switches were taken for the first %.1f "
                         "s only: perf.data reached half its budget "
                         "(--wait-budget %d MB); every switch after is "
                         "timed, its stack is \"%s\""
                         % (got["stacks_off"], got.get("budget", 0) >> 20,
                            UNSAMPLED))
        if "perf_off" in got:
            notes.append("perf stopped recording %.1f s in: perf.data "
                         "reached its budget (--wait-budget %d MB); what "
                         "the program did after is in no table"
                         % (got["perf_off"], got.get("budget", 0) >> 20))
        return notes

    def wall(self, w, dirs):
        """--wall's lines: each thread's life, CPU and waits by reason."""
        th = w.threads
        print("\nEach thread's time (--wall): CPU, then off CPU by "
              "reason:")
        print("%8s %8s %8s %8s  %s" % ("tid", "life", "CPU", "off CPU",
                                       "thread: reasons"))
        rows = []
        for tid in w.tids:
            span = th.life(tid)
            rows.append((span.end - span.start, tid))
        for life, tid in sorted(rows, key=lambda r: (-r[0], r[1])):
            cpu = th.on_cpu(tid)
            r = w.per_thread.get(tid, {})
            e = w.entry.get(tid)
            what = w.comm.get(tid) or th.name(tid)
            if e:
                fn = fmt_name(
                    max(e.items(), key=lambda x: (x[1], x[0]))[0],
                    dirs).split(":")[0]
                # 3.14+ names a thread "Thread-2 (target)", cut to 15
                # bytes ("Thread-2 (targ"): the function once, whole.
                base, sep, tail = what.rpartition(" (")
                if sep and tail and fn.startswith(tail.rstrip(")")):
                    what = "%s (%s)" % (base, fn)
                else:
                    what += " (%s)" % fn
            print("%8d %7.3fs %7.3fs %7.3fs  %s: %s"
                  % (tid, life / 1e9, cpu / 1e9, (life - cpu) / 1e9, what,
                     ", ".join("%s %.3f s" % (why, ns / 1e9) for why, ns in
                               sorted(r.items(),
                                      key=lambda x: (-x[1], x[0]))
                               if ns >= 500000)
                     or "-"))
