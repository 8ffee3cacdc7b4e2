# SPDX-License-Identifier: MIT
"""python -m jitring record --pid: attach to a running threaded service.

The service: stdlib http.server, 8 threads serving one listening socket,
handle_fn computing the answer; a client thread here checks every answer.
CPython 3.14 and later are reached through sys.remote_exec, older ones
are started with JITRING_PROFILE=standby.

 1. $JITRING_TEST_WINDOWS (default 20; 300 in the soak of `make stress`)
    attach/detach windows of 0.2-0.6 s through jitring._target (record
    --pid without perf): an answer in each (a window waits for one),
    every response right; every window's dump valid and naming
    handle_fn; the service's VmRSS, mappings and descriptors flat from
    window 10 to the last (each window's dump left in place, emptied);
    after the last, no jitring thread left in it;
 2. record --pid PID --duration 1 through real perf, twice: the tables
    name handle_fn (first by self) and the server threads' loop that ran
    throughout the window (where the service reads other threads' frames:
    not on a free-threaded 3.13 by default), no perf process left, the
    service still answering;
 3. refusals, each one line and exit 2 with the service untouched: a pid
    that is gone, a process that is not Python, a service whose jitring
    cannot be imported, one with another eval-frame hook (-X perf), one
    ptrace may not reach (not dumpable, record without CAP_SYS_PTRACE),
    and by version: before 3.14 one not started in standby; from 3.14
    one with remote debugging disabled;
 4. record --pid killed with SIGKILL in its window: the service stops
    profiling by itself (its watcher thread wakes on record's pidfd) and
    its dump is valid;
 5. a service whose jitring is already on (JITRING_PROFILE=1) is recorded
    as it is and left on.
Skips (77) where perf cannot record (2 only).
"""

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import jrtest

SERVICE = textwrap.dedent("""
    import http.server, os, socketserver, sys, threading
    if os.environ.get("SERVICE_NOT_DUMPABLE"):
        # As a setuid program is: ptrace needs CAP_SYS_PTRACE.
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE

    def handle_fn(n):
        s = 0
        for i in range(n):
            s += i * i
        return s

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = str(handle_fn(int(self.path[1:]))).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    def serve():
        while True:
            srv.handle_request()
    for _ in range(8):
        threading.Thread(target=serve, daemon=True).start()
    print(srv.server_address[1], flush=True)
    # The main thread in a sleep loop, as a service's main loop: requests
    # run there at its next bytecode (sys.remote_exec and the standby
    # signal both); test_attach_reach.py has main threads that wait.
    import time
    while True:
        time.sleep(0.1)
""")


def answer(n):
    # sum(i * i for i in range(n)), not computed here.
    return str((n - 1) * n * (2 * n - 1) // 6)


class Client(threading.Thread):
    def __init__(self, port, least=2000, more=3000):
        """Asks for handle_fn(n), n from @least to @least + @more."""
        super().__init__(daemon=True)
        self.port = port
        self.least, self.more = least, more
        self.ok = self.bad = 0
        self.errors = []
        self.halt = threading.Event()
        self.answered = threading.Condition()

    def answers_after(self, n, timeout=60):
        """Whether more than @n answers came (waiting up to @timeout s
        for one: an event, not a time, so a loaded machine waits)."""
        with self.answered:
            return self.answered.wait_for(lambda: self.ok + self.bad > n,
                                          timeout)

    def run(self):
        k = 0
        while not self.halt.is_set():
            n = self.least + (k * 97) % self.more
            k += 1
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/%d"
                                            % (self.port, n),
                                            timeout=30) as r:
                    body = r.read().decode()
            except Exception as e:
                body = "error: %s" % e
            with self.answered:
                if body == answer(n):
                    self.ok += 1
                else:
                    self.bad += 1
                    self.errors.append(body[:100])
                self.answered.notify_all()


class Service:
    def __init__(self, t, py, env, args=()):
        self.p = subprocess.Popen([py] + list(args) + ["-c", SERVICE],
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env,
                                  text=True)
        self.port = int(self.p.stdout.readline() or 0)
        self.pid = self.p.pid

    def status(self, key):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return None

    def maps(self):
        with open("/proc/%d/maps" % self.pid) as f:
            return sum(1 for _ in f)

    def threads(self):
        names = []
        for tid in os.listdir("/proc/%d/task" % self.pid):
            try:
                with open("/proc/%d/task/%s/comm" % (self.pid, tid)) as f:
                    names.append(f.read().strip())
            except OSError:
                pass
        return names

    def stop(self):
        self.p.kill()
        self.p.wait()


def service_env(standby):
    env = dict(os.environ)
    for k in ("PYTHONPATH", "JITRING_PROFILE", "JITRING_DIR"):
        env.pop(k, None)
    if standby:
        env["JITRING_PROFILE"] = "standby"
    return env


def test_windows(t, py, newer, svc):
    n = int(os.environ.get("JITRING_TEST_WINDOWS", "20"))
    from jitring.attach.probe import probe
    from jitring.attach.window import Window
    client = Client(svc.port)
    client.start()
    rss, maps, fds, bad, silent = {}, {}, {}, [], []
    info = probe(svc.pid)
    for i in range(1, n + 1):
        out = os.path.join(t.scratch, "w%d" % i)
        os.mkdir(out)
        w = Window(info, out, 120.0)
        try:
            w.start()
            seen = client.ok + client.bad
            threading.Event().wait(0.2 + 0.4 * ((i * 7) % 10) / 9)
            # And an answer in the window, however slow the machine.
            if not client.answers_after(seen):
                silent.append(i)
            w.stop()
        finally:
            w.close()
        dumps = jrtest.dumps(out)
        ok = len(dumps) == 1 and jrtest.check_dump(dumps[0])[0] and \
            any(x.startswith("py::handle_fn:")
                for x in jrtest.load_names(dumps[0]))
        if not ok:
            bad.append(i)
        rss[i], maps[i] = svc.status("VmRSS"), svc.maps()
        fds[i] = len(os.listdir("/proc/%d/fd" % svc.pid))
        if ok:
            # Emptied, not removed: a dump that is still there is what
            # a service would keep a descriptor of (record keeps them).
            for f in os.listdir(out):
                os.truncate(os.path.join(out, f), 0)
    client.halt.set()
    client.join(60)
    t.check(not silent and client.ok >= n and client.bad == 0,
            "%d windows: an answer in each (%d in all), every one right"
            % (n, client.ok), (silent, client.errors[:3]))
    t.check(not bad, "every window's dump valid, naming handle_fn", bad)
    first = min(10, n)
    grow = rss[n] - rss[first]
    print("VmRSS window %d: %d KiB, window %d: %d KiB; mappings %d -> %d"
          % (first, rss[first], n, rss[n], maps[first], maps[n]))
    t.check(grow < 4096 + 16 * (n - first),
            "VmRSS flat from window %d to %d (+%d KiB)" % (first, n, grow))
    t.check(abs(maps[n] - maps[first]) <= 8,
            "mappings flat from window %d to %d (%d -> %d)"
            % (first, n, maps[first], maps[n]))
    t.check(fds[n] - fds[first] <= 2,
            "descriptors flat from window %d to %d (%d -> %d)"
            % (first, n, fds[first], fds[n]))
    left = [x for x in svc.threads() if x.startswith("jitring")]
    t.check(not left, "after the last window no jitring thread is left",
            left)


def test_record(t, py, newer, svc):
    from test_record import perf_usable, leftovers, sections, has
    from jitring._running import frames_readable
    why = perf_usable()
    if why:
        t.skip_part("record --pid through perf", why)
        return
    # Requests whose handle_fn is most of their CPU time (30,000 to
    # 60,000 squares: milliseconds, against a fraction of one for the
    # server's own work), so that it leads by self on any machine, idle
    # or loaded; with the windows' smaller ones, StreamRequestHandler.
    # finish led here (26-37 % against 16-28 %), idle and loaded.
    client = Client(svc.port, 30000, 30000)
    client.start()
    for i in range(2):
        out = os.path.join(t.scratch, "rec%d" % i)
        p = subprocess.run([py, "-m", "jitring", "record", "-o", out,
                            "--pid", str(svc.pid), "--duration", "1"],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ,
                                    HOME=t.scratch))
        # The server threads' loops, running since before the window,
        # lead the total table (where the service reads other threads'
        # frames: not a free-threaded 3.13's by default); handle_fn leads
        # by self.
        s = sections(p.stdout)
        t.check(p.returncode == 0 and has(s["self"][:1], "handle_fn") and
                (has(s["total"], "serve") or
                 not frames_readable()),
                "record --pid (%d): the tables name handle_fn, and the "
                "loop that ran throughout" % i,
                p.stdout[-1200:] + p.stderr[-800:])
        t.check(not leftovers(out), "no perf process left")
    client.halt.set()
    client.join(60)
    t.check(client.ok > 0 and client.bad == 0,
            "the service answered right during record --pid",
            client.errors[:3])


def test_record_killed(t, py, newer, svc):
    """record --pid killed in its window (SIGKILL: nothing of record's
    runs): the service stops profiling by itself, its dump closed whole."""
    from test_record import perf_usable
    if perf_usable():
        t.skip_part("record --pid killed", perf_usable())
        return
    out = os.path.join(t.scratch, "killed")
    p = subprocess.Popen([py, "-m", "jitring", "record", "-o", out,
                          "--pid", str(svc.pid)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, HOME=t.scratch))
    line = p.stderr.readline()
    if not t.check("attached to process" in line, "record --pid attached",
                   line):
        p.kill()
        p.communicate()
        return
    on = any(x.startswith("jitring") for x in svc.threads())
    p.kill()
    p.communicate()
    # The watcher wakes on the pidfd at once; allow a loaded machine 30 s.
    end = time.monotonic() + 30
    while time.monotonic() < end and \
            any(x.startswith("jitring") for x in svc.threads()):
        time.sleep(0.05)
    left = [x for x in svc.threads() if x.startswith("jitring")]
    dumps = jrtest.dumps(out)
    t.check(on and not left and len(dumps) == 1 and
            jrtest.check_dump(dumps[0])[0],
            "record killed: the service stopped profiling by itself, its "
            "dump valid", (on, left, dumps))


def refused(t, py, pid, what, want, prefix=()):
    p = subprocess.run(list(prefix) + [py, "-m", "jitring", "record", "-o",
                        os.path.join(t.scratch, "refused"), "--pid",
                        str(pid), "--duration", "1"],
                       capture_output=True, text=True, timeout=120)
    t.check(p.returncode == 2 and want in p.stderr and
            len(p.stderr.strip().splitlines()) == 1 and
            not os.path.exists(os.path.join(t.scratch, "refused")),
            "refused, %s: one line, exit 2, nothing recorded" % what,
            "%d %s" % (p.returncode, p.stderr[-400:]))


def ptrace_open(nocap, pid):
    """Why the ptrace refusal cannot be staged here, or None: setpriv is
    missing, or this kernel lets a process without CAP_SYS_PTRACE read a
    process that is not dumpable."""
    if not shutil.which("setpriv"):
        return "no setpriv(1) to drop CAP_SYS_PTRACE"
    p = subprocess.run(nocap + ["head", "-c1", "/proc/%d/environ" % pid],
                       capture_output=True)
    if p.returncode == 0:
        return ("this kernel lets a process without CAP_SYS_PTRACE read "
                "one that is not dumpable")
    return None


def test_ptrace_words(t, py, newer, svc):
    """The refusal's words where ptrace is refused (staged: the reads of
    /proc fail as a refused ptrace makes them)."""
    from jitring.attach import probe as probing
    from jitring.common.errors import AttachError

    def refuse(path, binary=False):
        raise PermissionError(1, "Operation not permitted", path)
    real, probing._read = probing._read, refuse
    try:
        probing.probe(1)
        msg = ""
    except AttachError as e:
        msg = str(e)
    finally:
        probing._read = real
    t.check(msg.startswith("ptrace is not permitted on process 1: ") and
            "CAP_SYS_PTRACE" in msg and "dumpable" in msg and
            "\n" not in msg, "ptrace refused: it says what ptrace needs",
            msg)


def test_refusals(t, py, newer, svc):
    gone = subprocess.Popen(["true"])
    gone.wait()
    refused(t, py, gone.pid, "a pid that is gone", "no process")
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        refused(t, py, sleeper.pid, "not Python",
                "is not a Python interpreter")
    finally:
        sleeper.kill()
        sleeper.wait()
    cases = [("jitring not importable there", ["-S"], service_env(True),
              "jitring" if not newer else "cannot be imported")]
    if newer:
        cases.append(("remote debugging disabled", [],
                      dict(service_env(False),
                           PYTHON_DISABLE_REMOTE_DEBUG="1"),
                      "remote debugging disabled"))
    else:
        cases.append(("not started in standby", [], service_env(False),
                      "JITRING_PROFILE=standby"))
    # Another PEP 523 hook: -X perf's trampolines.
    cases.append(("another eval-frame hook there", ["-X", "perf"],
                  service_env(not newer), "another eval-frame function"))
    # ptrace refused: a service that is not dumpable, and record run
    # without CAP_SYS_PTRACE (where the kernel enforces that).
    cases.append(("ptrace not permitted", [],
                  dict(service_env(not newer), SERVICE_NOT_DUMPABLE="1"),
                  "ptrace is not permitted"))
    nocap = ["setpriv", "--bounding-set=-sys_ptrace",
             "--inh-caps=-sys_ptrace"]
    for what, args, env, want in cases:
        own = Service(t, py, env, args)
        try:
            before = own.threads()
            if what.startswith("ptrace"):
                why = ptrace_open(nocap, own.pid)
                if why:
                    t.skip_part(what, why)
                    continue
            refused(t, py, own.pid, what, want,
                    nocap if what.startswith("ptrace") else ())
            t.check(own.threads() == before and own.p.poll() is None,
                    what + ": the service untouched")
        finally:
            own.stop()


def test_as_is(t, py, newer, svc):
    from jitring.attach.probe import probe, route
    from jitring.attach.window import Window
    d = os.path.join(t.scratch, "as-is")
    os.mkdir(d)
    env = dict(service_env(False), JITRING_PROFILE="1", JITRING_DIR=d)
    own = Service(t, py, env)
    try:
        info = probe(own.pid)
        t.check(route(info) == "as-is",
                "JITRING_PROFILE=1: recorded as it is")
        out = os.path.join(t.scratch, "as-is-out")
        os.mkdir(out)
        w = Window(info, out, 60.0)
        try:
            w.start()
            w.stop()
        finally:
            w.close()
        t.check(any(x.startswith("jitring") for x in own.threads()),
                "and left on")
    finally:
        own.stop()


def fixture(t):
    """(py, newer, svc): the interpreter, whether it is 3.14 or later,
    and the service the windows and record cases attach to (stopped after
    the last case)."""
    import jitring
    site = os.path.dirname(os.path.dirname(os.path.abspath(
        jitring.__file__)))
    if os.path.exists(os.path.join(site, "jitring-autostart.pth")):
        py = sys.executable
    else:
        py = jrtest.hook_venv(t, True)
    newer = sys.version_info >= (3, 14)
    svc = Service(t, py, service_env(not newer))
    t.check(svc.port > 0, "the service runs", svc.p.stderr.read()
            if svc.p.poll() is not None else "")
    try:
        yield py, newer, svc
    finally:
        svc.stop()


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
