# SPDX-License-Identifier: MIT
"""The recording's folder, through real perf: what record and report
leave there and what they leave alone.

 1. a full disk (a 24 MiB tmpfs as -o's parent, root only): the program
    finds jitring-record.json already written and exits 7; the disk is
    filled as the finishing starts (by a perf wrapper, before perf
    script); record exits 7 with one line naming the report command, no
    traceback; once space is made, `report DIR` finishes it;
 2. --force in a folder of the user's (server.log, perf.data.2024,
    flamegraph.svg, stacks.folded.bak, ...): every one kept, twice (no
    manifest, then record's manifest); without --force it is refused; a
    symlink in place of .debug is not followed; a user's flame.html is
    refused, not overwritten; processes.jsonl lists each pid once;
 3. a folder moved before it is finished: report finishes it;
 4. two reports of one unfinished folder at once: both exit 0 with the
    same tables;
 5. a refused -e leaves no folder;
 6. Ctrl-Z: bash (job control on) reports the same status for the
    program under record as for python itself (148), and both go on
    after SIGCONT;
 7. report's errors say `jitring report:`;
 8. the live reading's files dropped from a folder, in process: each
    kind, a reader's rewrite cut off by its end (live-N.data.execfix)
    among them, and none of the user's or perf's files.
Skips (77) where perf cannot record here.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import jrtest

SHORT = textwrap.dedent("""
    def spin_short(n):
        s = 0
        for i in range(n):
            s += i
        return s
    spin_short(1500000)
""")

# A program that finds jitring-record.json written before it runs; the
# disk is filled by the finishing's perf script (test_full_disk), after
# perf record has written all it had: a filler in the program raced with
# the data perf still held in its buffers.
FILL = textwrap.dedent("""
    import os, sys
    META = os.path.join(os.environ["JITRING_DIR"], "jitring-record.json")
    first = os.path.exists(META)
    def spin_fill(n):
        s = 0
        for i in range(n):
            s += i
        return s
    spin_fill(4000000)
    sys.exit(7 if first else 8)
""")

TSTP = textwrap.dedent("""
    import os, signal
    os.kill(os.getpid(), signal.SIGTSTP)
    print("continued", flush=True)
""")

# Stopped, its status, continued, its end (bash with job control on).
JOB = "set -m; \"$@\"; echo stopped=$?; kill -CONT %1; wait %1; echo end=$?"

PLANTED = ("server.log", "perf.data.2024", "flamegraph.svg",
           "stacks.folded.bak", "jit-notes.txt", "perf.notes",
           "flame-old.png")


class Rec:
    def __init__(self, t, py, env):
        self.t, self.py, self.env = t, py, env

    def path(self, name, text=None):
        p = os.path.join(self.t.scratch, name)
        if text is not None:
            with open(p, "w") as f:
                f.write(text)
        return p

    def argv(self, args):
        return [self.py, "-m", "jitring"] + args

    def run(self, args, env=None):
        return subprocess.run(self.argv(args), capture_output=True,
                              text=True, env=env or self.env,
                              cwd=self.t.scratch, timeout=300)

    def start(self, args, env=None):
        return subprocess.Popen(self.argv(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=env or self.env, cwd=self.t.scratch)

    def perf_env(self, name, inject):
        """An environment whose perf runs @inject (shell) for the
        finishing's perf steps (perf inject, perf script: dwarf mode
        finishes with perf script alone), the real perf for all else."""
        d = self.path(name)
        os.mkdir(d)
        with open(os.path.join(d, "perf"), "w") as f:
            f.write("#!/bin/sh\nfor a; do case \"$a\" in inject|script) "
                    "%s;; esac; done\nexec %s \"$@\"\n"
                    % (inject, shutil.which("perf")))
        os.chmod(os.path.join(d, "perf"), 0o755)
        return dict(self.env, PATH=d + os.pathsep + self.env["PATH"])


def spun(p, fn="spin_short"):
    return ("py::%s" % fn) in p.stdout or (" %s:" % fn) in p.stdout


def tables(stdout):
    """The report's lines from its first table on (paths differ by
    nothing between two reports of one folder)."""
    i = stdout.find(" samples of ")
    return stdout[stdout.rfind("\n", 0, i) + 1:] if i >= 0 else ""


def test_full_disk(t, r):
    if os.geteuid() != 0:
        t.skip_part("full disk", "a tmpfs needs root")
        return
    mnt = r.path("full")
    os.mkdir(mnt)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs",
                        mnt], capture_output=True, text=True)
    if p.returncode != 0:
        t.skip_part("full disk", "mount -t tmpfs: " + p.stderr.strip())
        return
    try:
        out = os.path.join(mnt, "rec")
        prog = r.path("fill.py", FILL)
        # Each perf script of the finishing (parallel slices: one file
        # each) fills what is left of the disk first.
        env = r.perf_env("fill-perf", "dd if=/dev/zero of=%s/filler.$$ "
                         "bs=64k 2>/dev/null" % mnt)
        p = r.run(["record", "-o", out, "--", prog], env=env)
        lines = p.stderr.strip().splitlines()
        t.check(p.returncode == 7, "full disk: record exits with the "
                "program's status (7; 8: no jitring-record.json while it "
                "ran)", "%d %s" % (p.returncode, p.stderr[-1500:]))
        t.check("Traceback" not in p.stderr and len(lines) == 1 and
                "jitring report %s" % out in lines[0],
                "full disk: one line, the report command, no traceback",
                p.stderr[-1500:] + p.stdout[-300:])
        # Space made: the fillers gone and the file system grown.
        for n in os.listdir(mnt):
            if n.startswith("filler"):
                os.unlink(os.path.join(mnt, n))
        g = subprocess.run(["mount", "-o", "remount,size=256m", mnt],
                           capture_output=True, text=True)
        t.check(g.returncode == 0, "full disk: the tmpfs grown", g.stderr)
        p = r.run(["report", out])
        t.check(p.returncode == 0 and spun(p, "spin_fill") and
                os.path.exists(os.path.join(out, "flame.html")),
                "full disk: report finishes it once there is space",
                "%d %s %s" % (p.returncode, p.stdout[-800:],
                              p.stderr[-800:]))
    finally:
        subprocess.run(["umount", "-l", mnt])


def test_force(t, r):
    prog = r.path("short.py", SHORT)
    mine = r.path("mine")
    outside = r.path("outside")
    os.mkdir(mine)
    os.mkdir(outside)
    for n in PLANTED:
        with open(os.path.join(mine, n), "w") as f:
            f.write("the user's " + n)
    with open(os.path.join(outside, "keep.txt"), "w") as f:
        f.write("outside")

    def kept():
        gone = []
        for n in PLANTED:
            try:
                with open(os.path.join(mine, n)) as f:
                    if f.read() != "the user's " + n:
                        gone.append(n + " (changed)")
            except OSError:
                gone.append(n)
        return gone

    p = r.run(["record", "-o", mine, "--force", "--", prog])
    t.check(p.returncode == 0 and spun(p), "--force into the user's "
            "folder: recorded", p.stdout[-600:] + p.stderr[-600:])
    t.check(not kept(), "--force, no manifest: all %d user files kept"
            % len(PLANTED), kept())
    pids = []
    with open(os.path.join(mine, "processes.jsonl")) as f:
        import json
        pids = [json.loads(l)["pid"] for l in f if l.strip()]
    t.check(pids and len(pids) == len(set(pids)),
            "processes.jsonl lists each pid once", pids)

    p = r.run(["record", "-o", mine, "--", prog])
    t.check(p.returncode == 2 and "--force" in p.stderr and not kept(),
            "without --force: the user's folder refused",
            p.stderr[-400:])
    debug = os.path.join(mine, ".debug")
    shutil.rmtree(debug, ignore_errors=True)
    os.symlink(outside, debug)
    p = r.run(["record", "-o", mine, "--force", "--", prog])
    t.check(p.returncode == 0 and spun(p) and not kept(),
            "--force again (record's manifest): the user's files kept, "
            "the recording replaced", kept() or p.stderr[-600:])
    t.check(os.path.exists(os.path.join(outside, "keep.txt")),
            "a symlink where .debug was is not followed")

    theirs = r.path("theirs")
    os.mkdir(theirs)
    with open(os.path.join(theirs, "flame.html"), "w") as f:
        f.write("theirs")
    p = r.run(["record", "-o", theirs, "--force", "--", prog])
    with open(os.path.join(theirs, "flame.html")) as f:
        same = f.read() == "theirs"
    t.check(p.returncode == 2 and "flame.html" in p.stderr and same,
            "--force: a user's flame.html is refused, not overwritten",
            "%d %s" % (p.returncode, p.stderr[-400:]))


def unfinished(t, r, name):
    """A recording whose finishing failed (its perf step exits 9)."""
    out = r.path(name)
    p = r.run(["record", "-o", out, "--", r.path("short.py", SHORT)],
              env=r.perf_env("noinject-" + name, "exit 9"))
    ok = p.returncode == 2 and os.path.exists(os.path.join(out,
                                                           "perf.data"))
    t.check(ok, "%s: a recording left unfinished" % name,
            "%d %s" % (p.returncode, p.stderr[-500:]))
    return out if ok else None


def test_moved(t, r):
    out = unfinished(t, r, "before-move")
    if not out:
        return
    moved = r.path("moved-here")
    os.rename(out, moved)
    p = r.run(["report", moved])
    t.check(p.returncode == 0 and spun(p), "a moved folder: report "
            "finishes it", "%d %s" % (p.returncode, p.stderr[-800:]))


def test_concurrent(t, r):
    out = unfinished(t, r, "twice")
    if not out:
        return
    # Each perf step a second slower: the two finishings overlap.
    env = r.perf_env("slowinject", "sleep 1")
    a = r.start(["report", out], env=env)
    b = r.start(["report", out], env=env)
    (ao, ae), (bo, be) = a.communicate(timeout=300), b.communicate(
        timeout=300)
    t.check(a.returncode == 0 and b.returncode == 0,
            "two reports at once: both exit 0",
            "%d %d %s | %s" % (a.returncode, b.returncode, ae[-600:],
                               be[-600:]))
    t.check(tables(ao) and tables(ao) == tables(bo),
            "two reports at once: the same tables",
            tables(ao)[:300] + " | " + tables(bo)[:300])


def test_refused_event(t, r):
    out = r.path("bad-event")
    p = r.run(["record", "-o", out, "-e", "no-such-event-zz", "--",
               r.path("short.py", SHORT)])
    t.check(p.returncode == 2 and not os.path.exists(out),
            "a refused -e: exit 2, no folder left",
            "%d %s" % (p.returncode, p.stderr[-300:]))


def test_ctrl_z(t, r):
    prog = r.path("tstp.py", TSTP)
    got = []
    for argv in ([r.py, prog],
                 r.argv(["record", "-o", r.path("tstp"), "--", prog])):
        p = subprocess.run(["bash", "-c", JOB, "job"] + argv,
                           capture_output=True, text=True, env=r.env,
                           cwd=r.t.scratch, timeout=300,
                           start_new_session=True)
        got.append((p.returncode, [l for l in p.stdout.splitlines()
                                   if l.startswith(("stopped=", "end=",
                                                    "continued"))]))
    want = (0, ["stopped=148", "continued", "end=0"])
    t.check(got[0] == want, "Ctrl-Z: python itself: 148, then on", got[0])
    t.check(got[1] == got[0], "Ctrl-Z under record: the status python "
            "gets, then on", got[1])


def test_report_errors(t, r):
    out = r.path("garbage")
    os.mkdir(out)
    with open(os.path.join(out, "jitring-record.json"), "w") as f:
        f.write('{"version": 1, "event": "cpu-clock"}')
    with open(os.path.join(out, "perf.data"), "w") as f:
        f.write("not perf data")
    p = r.run(["report", out])
    t.check(p.returncode == 2 and p.stderr.startswith("jitring report: ")
            and "jitring record" not in p.stderr and
            "Traceback" not in p.stderr,
            "report's errors say 'jitring report:'",
            "%d %s" % (p.returncode, p.stderr[-400:]))


def test_live_leftovers(t, r):
    from jitring.perf.live import drop
    d = os.path.join(t.scratch, "leftovers")
    os.mkdir(d)
    live = ["live-1.data", "live-1.data.execfix", "live-tail.data",
            "live-tail.data.execfix", "live-2.pickle", "live-2.pickle.tmp",
            "live-3.log", "live-3-perf-script.log",
            "live-3-perf-script-1.log"]
    kept = ["perf.data", "perf.data.execfix", "live-notes.txt",
            "live-1.data.bak", "server.log"]
    for name in live + kept:
        open(os.path.join(d, name), "w").close()
    drop(d)
    t.check(sorted(os.listdir(d)) == sorted(kept), "the live reading's "
            "files dropped, a cut-off rewrite among them; the others kept",
            sorted(os.listdir(d)))


def fixture(t):
    py, env = jrtest.record_python(t)
    return (Rec(t, py, env),)


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
