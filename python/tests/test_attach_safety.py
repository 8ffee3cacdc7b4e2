# SPDX-License-Identifier: MIT
"""python -m jitring record --pid where it must refuse, and check FILE...

 1. root (skipped per case when not root) records with -o in a folder
    that another user (nobody) owns, while that user swaps every name
    record or the target might use there for a script of its own (which
    would create a marker file) or a link to a victim file, in a loop:
    once for a service of that user, once for a service of root's.  No
    code of the attacker runs, the victim is untouched, and record either
    records or refuses in one line; root's record PROGRAM with -o in that
    folder is refused in one line before the program runs;
 2. --duration huge, inf, nan, negative, zero: exit 2, one error line,
    no traceback, nothing made; the target's watcher, its wait failing
    (a limit select cannot take), still ends the window;
 3. a second record --pid on a process whose window is open: refused
    while it is open (exit 2, one line) naming the first record's pid;
 4. before 3.14: a standby service whose program set its own handler for
    the signal is told so when the window starts; any version: a 3.11
    target is told jitring needs 3.12 (standby) or 3.14 (remote);
 5. check A B: exit 0 with two valid dumps; non-zero with one damaged,
    naming it.
Needs perf for 3 (skipped without).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import jrtest

SERVICE = textwrap.dedent("""
    import os, signal, sys, time
    if os.environ.get("SVC_STANDBY"):
        from jitring._target import standby
        standby()
    if os.environ.get("SVC_OWN_HANDLER"):
        signal.signal(signal.SIGRTMIN + 7, lambda s, f: None)
    if os.environ.get("SVC_UID"):
        # Another user's service (the interpreter loaded as root: the
        # cached one is in root's home), dumpable as such a one is.
        import ctypes
        u = int(os.environ["SVC_UID"])
        os.setgroups([])
        os.setresgid(u, u, u)
        os.setresuid(u, u, u)
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)   # PR_SET_DUMPABLE

    def work_fn(n):
        return sum(i * i for i in range(n))

    print("ready", flush=True)
    while True:
        work_fn(3000)
        time.sleep(0.02)
""")

NEWER = sys.version_info >= (3, 14)

# Every name record --pid or its target used, uses or might use in -o.
NAMES = [".attach-start.py", ".attach-stop.py", ".attach-answer",
         "perf-record.log", "perf.data", "perf.jit.data",
         "jitring-record.json", ".jitring-manifest", "processes.jsonl",
         "start.py", "stop.py", "answer"]


class Service:
    def __init__(self, py, **env):
        e = dict(os.environ)
        e.pop("JITRING_PROFILE", None)
        e.pop("JITRING_DIR", None)
        if not NEWER:
            e["JITRING_PROFILE"] = "standby"
            e["SVC_STANDBY"] = "1"
        e.update(env)
        self.p = subprocess.Popen([py, "-c", SERVICE], env=e,
                                  stdout=subprocess.PIPE, text=True)
        self.ok = self.p.stdout.readline().strip() == "ready"
        self.pid = self.p.pid

    def stop(self):
        self.p.kill()
        self.p.wait()


def record(py, pid, out, *args, timeout=120):
    t0 = time.monotonic()
    try:
        p = subprocess.run([py, "-m", "jitring", "record", "-o", out,
                            "--pid", str(pid)] + list(args),
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        p = subprocess.CompletedProcess(e.cmd, None, "", "(still running "
                                        "after %d s: killed)" % timeout)
    return p, time.monotonic() - t0


def one_line(p):
    lines = p.stderr.strip().splitlines()
    return p.returncode == 2 and len(lines) == 1 and \
        "Traceback" not in p.stderr


def racer(folder, victim, marker, uid, seconds):
    """A process of @uid that, for @seconds, swaps every name in @folder
    as soon as anything of another user's is there (record has begun:
    an empty folder until then, so that any -o check passes) for its own
    script, or for a link to @victim, as fast as it can."""
    script = "open(%r, 'w').write('pwned')\n" % marker
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                theirs = [n for n in os.listdir(folder)
                          if os.lstat(os.path.join(folder, n)).st_uid != uid]
            except OSError:
                theirs = []
            if not theirs:
                continue
            for n in NAMES + theirs:
                f = os.path.join(folder, n)
                try:
                    os.unlink(f)
                except OSError:
                    pass
                try:
                    if n.endswith(".py"):
                        tmp = f + ".x"
                        with open(tmp, "w") as fh:
                            fh.write(script)
                        os.rename(tmp, f)
                    else:
                        os.symlink(victim, f)
                except OSError:
                    pass
    finally:
        os._exit(0)


def empty(folder):
    for n in os.listdir(folder):
        f = os.path.join(folder, n)
        if os.path.isdir(f) and not os.path.islink(f):
            shutil.rmtree(f, ignore_errors=True)
        else:
            os.unlink(f)


def test_privileged(t, py, svc):
    import pwd
    if os.geteuid() != 0:
        t.skip_part("root records another user's folder", "not root")
        return
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        t.skip_part("root records another user's folder", "no user nobody")
        return
    base = tempfile.mkdtemp(prefix="jitring-attsafe.")
    try:
        os.chmod(base, 0o755)
        victim = os.path.join(base, "victim")
        with open(victim, "w") as f:
            f.write("precious\n")
        attack = os.path.join(base, "attack")      # -o: nobody's folder
        marks = os.path.join(base, "marks")
        for d in (attack, marks):
            os.mkdir(d, 0o755)
            os.chown(d, uid, -1)
        marker = os.path.join(marks, "pwned")
        for who, env in (("a service of nobody's", {"SVC_UID": str(uid)}),
                         ("a service of root's", {})):
            svc = Service(py, **env)
            rp = racer(attack, victim, marker, uid, 60)
            try:
                if not t.check(svc.ok, "%s runs" % who):
                    continue
                # Three tries, as the race was won three of three.
                for i in range(3):
                    empty(attack)
                    p, took = record(py, svc.pid, attack, "--duration",
                                     "1", timeout=60)
                    print("  " + (p.stderr.strip() or "recorded"))
                    t.check((p.returncode == 0 or one_line(p) and
                             "nobody" in p.stderr) and
                            "Traceback" not in p.stderr,
                            "root, -o in nobody's folder, %s (%d): "
                            "recorded, or refused in one line naming "
                            "nobody (%.1f s)"
                            % (who, i, took),
                            "%s %s" % (p.returncode, p.stderr[-600:]))
            finally:
                os.kill(rp, 9)
                os.waitpid(rp, 0)
                svc.stop()
            with open(victim) as f:
                t.check(f.read() == "precious\n" and
                        not os.path.exists(marker),
                        "%s: no code of the attacker ran, the victim "
                        "untouched" % who)
        # record PROGRAM as root: the same folder refused before the
        # program runs, and nothing written in it.
        empty(attack)
        ran = os.path.join(base, "ran")
        prog = os.path.join(base, "prog.py")
        with open(prog, "w") as f:
            f.write("open(%r, 'w').close()\n" % ran)
        p = subprocess.run([py, "-m", "jitring", "record", "-o", attack,
                            prog], capture_output=True, text=True,
                           timeout=120)
        t.check(p.returncode == 2 and one_line(p) and
                "nobody" in p.stderr and not os.path.exists(ran) and
                not os.listdir(attack),
                "root's record PROGRAM, -o in nobody's folder: refused in "
                "one line naming nobody, the program not run",
                (p.returncode, p.stderr[-600:], os.listdir(attack)))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_durations(t, py, svc):
    for i, v in enumerate(("1e10", "inf", "nan", "-5", "0", "1e400",
                           "604801")):
        out = os.path.join(t.scratch, "dur%d" % i)
        p, took = record(py, svc.pid, out, "--duration", v, timeout=20)
        last = p.stderr.strip().splitlines()[-1:] or [""]
        t.check(p.returncode == 2 and "Traceback" not in p.stderr and
                "--duration" in last[0] and not os.path.exists(out),
                "--duration %s: exit 2, one error line, nothing made" % v,
                "%s %s" % (p.returncode, p.stderr[-600:]))
    # The watcher's wait failing ends the window (in this process).
    import jitring
    from jitring._target import _watcher
    d = os.path.join(t.scratch, "watch")
    os.mkdir(d)
    jitring.start(dir=d)
    r, w = os.pipe()
    try:
        _watcher(-1, r, 1e10)
    except Exception:
        pass
    on = jitring.is_active()
    if on:
        jitring.stop()
    os.close(w)
    t.check(not on, "the watcher's wait failing (limit 1e10) ends the "
            "window")


def test_second(t, py, svc):
    from test_record import perf_usable
    why = perf_usable()
    if why:
        t.skip_part("a second record --pid", why)
        return
    out1 = os.path.join(t.scratch, "first")
    # A window longer than any wait (it is ended by SIGINT below): the
    # second is refused "at once" where the first is still open then.
    first = subprocess.Popen([py, "-m", "jitring", "record", "-o", out1,
                              "--pid", str(svc.pid), "--duration", "600"],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        line = first.stderr.readline()
        if not t.check("attached to process" in line,
                       "the first record --pid attached", line):
            return
        p, took = record(py, svc.pid, os.path.join(t.scratch, "second"),
                         "--duration", "1", timeout=300)
        t.check(one_line(p) and str(first.pid) in p.stderr and
                first.poll() is None,
                "a second record --pid: refused while the first's window "
                "is open (in %.1f s), naming the first's pid %d"
                % (took, first.pid),
                "%s %s" % (p.returncode, p.stderr[-600:]))
    finally:
        first.send_signal(2)
        try:
            first.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            first.kill()
            first.communicate()


def test_messages(t, py, svc):
    from jitring.attach.probe import probe, route
    from jitring.attach.window import Window
    from jitring.common.errors import AttachError
    info = {"pid": 1, "version": (3, 11), "argv": ["python3.11"],
            "env": {"JITRING_PROFILE": "standby"}, "uid": os.geteuid()}
    try:
        route(info)
        msg = ""
    except AttachError as e:
        msg = str(e)
    t.check("3.12" in msg and "3.14" in msg and "\n" not in msg,
            "a 3.11 target: jitring needs 3.12 (standby) or 3.14 (remote)",
            msg)
    if NEWER:
        return
    own = Service(py, SVC_OWN_HANDLER="1")
    try:
        info = probe(own.pid)
        out = os.path.join(t.scratch, "own")
        os.mkdir(out)
        t0 = time.monotonic()
        at = "start"
        try:
            w = Window(info, out, 60.0)
            try:
                w.start()
                at = "stop"
                w.stop()
                msg = ""
            finally:
                w.close()
        except AttachError as e:
            msg = str(e)
        took = time.monotonic() - t0
        # Told by start() (which waits 2 s for an answer), not at the end
        # of the window: a time bound would follow the machine's load.
        t.check("its own handler" in msg and at == "start",
                "a standby service with its own handler for the signal: "
                "told so when the window starts (%.1f s)" % took,
                (at, msg))
    finally:
        own.stop()


def test_check(t, py, svc):
    d = os.path.join(t.scratch, "check")
    os.mkdir(d)
    subprocess.run([py, "-c", "import sys, jitring\n"
                    "jitring.start(dir=sys.argv[1])\n"
                    "def f(): return 1\n"
                    "f()\njitring.stop()\n", d], check=True)
    a = jrtest.dumps(d)[0]
    b = os.path.join(d, "b.dump")
    c = os.path.join(d, "c.dump")
    shutil.copy(a, b)
    with open(a, "rb") as f:
        data = f.read()
    with open(c, "wb") as f:
        f.write(data[:len(data) - 7])
    p = subprocess.run([py, "-m", "jitring", "check", a, b],
                       capture_output=True, text=True)
    t.check(p.returncode == 0, "check A B: both valid, exit 0",
            "%d %s" % (p.returncode, p.stderr[-400:]))
    p = subprocess.run([py, "-m", "jitring", "check", a, c],
                       capture_output=True, text=True)
    last = p.stderr.strip().splitlines()[-1:] or [""]
    t.check(p.returncode != 0 and c in last[0] and a not in last[0],
            "check A C, C damaged: exit %d, naming C" % p.returncode,
            p.stderr[-400:])


def fixture(t):
    """The interpreter, and the service the durations and second cases
    record (stopped after the last case)."""
    py = sys.executable
    t0 = time.monotonic()
    svc = Service(py)
    t.check(svc.ok, "the service runs")
    try:
        yield py, svc
    finally:
        svc.stop()
    print("%.1f s" % (time.monotonic() - t0))


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
