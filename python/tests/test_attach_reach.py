# SPDX-License-Identifier: MIT
"""python -m jitring record --pid: services whose main thread waits, requests
that come too late, children, and a service's own dump.

CPython 3.14 and later are reached through sys.remote_exec and jitring's
send to every other thread; older ones are started with
JITRING_PROFILE=standby (the signal goes to the main thread).

 1. main thread in thread.join(), Event.wait(), signal.pause(), an idle
    asyncio server, a worker thread running handle_fn: each window, once
    the main thread waits, answered while it waits, its dump naming
    handle_fn; then, through real perf, a window opened after the
    service started: the worker's loop (worker(), called before any
    window) named, at least 80 % of the samples total, as handle_fn's
    caller; the idle loop listed, its suspended coroutine not;
 2. no thread runs Python (the main thread reads stdin, nothing else):
    the window opens (start() does not wait for an answer), and once the
    service runs Python in it, jitring starts there;
 3. a request left behind (its window closed unanswered, or its record
    killed with SIGKILL): once the service runs Python again, nothing
    starts and nothing is printed on its stderr;
 4. a child forked during a window is left out of it (its jitring stops
    at the fork), and after the window neither the service nor the
    child profiles; through real perf, a window on a child forked before
    any: its worker() named as in 1;
 5. through real perf: record --pid on a service whose main thread waits
    names handle_fn, and none of jitring's attach functions;
 6. a service whose jitring was already on: record --pid killed with
    SIGKILL at 4 points of its finishing ($JITRING_TEST_KILL_POINTS: 20
    in make stress's py_attach_kill_soak, spread over the window and
    3 s after it), and report run after it: the service's dump stays
    whole, in place (the same file), growing;
 7. 3.14 and later: a thread-per-request HTTP service (its threads come
    and go all the time) whose main thread joins a thread, asked by a
    client thread without pause through 10 windows (each open until 10
    more answers), each sent to every thread with the whole process
    stopped: every answer right, the service alive after, each window's
    dump valid; its threads seized and let go, and, one thread refusing
    the seize, every thread let go and the request sent to none;
 8. through real perf, frames that ran throughout the window (on a
    free-threaded 3.13, read only with JITRING_RUNNING_FRAMES=1, which
    the services of 1, 4, 8 and 10 get, and that is checked to be so;
    a worker thread's loop: 1): a multiprocessing.Manager's server
    process, whose serve_client() loop runs a client's calls:
    serve_client named, its total at least that of the method it runs;
    none of jitring's attach functions in the service's list of those
    frames;
 9. in process, the marks: a thread in outer() -> inner() at the mark,
    then in a new call of inner() (the same code at the same depth) at
    the list: outer listed, inner not; jitring's own frames never; a
    second window marks them again; a frame a tracer had set f_trace on
    left as it was; a service's list with junk in it read as what is
    valid;
10. through real perf, an asyncio.start_server service kept busy by two
    clients (the main thread runs the loop, never waiting long): the
    window opens, the loop (run_forever, called before it) named over
    at least 80 % of the samples, the handler coroutine (resumed through
    a trampoline at each await) over most of the loop's iterations as
    handle_fn's caller; every answer right, the service answering after
    the window, its dump valid.
Skips (77) where perf cannot record (5, 6, 8 and 10 only; the perf
parts of 1 and 4).
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import jrtest

SERVICE = textwrap.dedent("""
    import os, signal, sys, threading, time
    shape = sys.argv[1]

    def handle_fn(n):
        s = 0
        for i in range(n):
            s += i * i
        return s

    def worker():
        # "quiet": a service with little to do, where jitring's own work
        # would show most.
        n, pause = (3000, 0.01) if shape == "quiet" else (20000, 0.005)
        while True:
            handle_fn(n)
            time.sleep(pause)

    def on_usr1(signum, frame):
        # A Python handler: the waiting main thread runs Python here.
        for _ in range(50):
            handle_fn(20000)
    signal.signal(signal.SIGUSR1, on_usr1)
    if shape == "manager":
        # A Manager's server process (forked: a -c program has no file
        # to import its classes from) runs each call of the client in
        # serve_client(), a loop per connection, called before any
        # window.
        import multiprocessing
        from multiprocessing.managers import BaseManager

        class Work:
            def run(self, n):
                return handle_fn(n)

        class Manager(BaseManager):
            pass
        Manager.register("Work", Work)
        m = Manager(ctx=multiprocessing.get_context("fork"))
        m.start()
        w = m.Work()
        w.run(10)
        print("ready", flush=True)
        print(m._process.pid, flush=True)
        while True:
            w.run(20000)
    if shape not in ("stdin", "gate", "http", "aserve"):
        threading.Thread(target=worker, daemon=True).start()
    if shape == "http":
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = str(handle_fn(int(self.path[1:]))).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        print("ready", flush=True)
        print(server.server_address[1], flush=True)
        t = threading.Thread(target=server.serve_forever)
        t.start()
        t.join()
    if shape == "aserve":
        # An asyncio server kept busy by its client: the main thread runs
        # the loop, a line in, its answer out, never waiting long.
        import asyncio

        async def handle_conn(reader, writer):
            while line := await reader.readline():
                writer.write(b"%d\\n" % handle_fn(int(line)))
                await writer.drain()
            writer.close()

        async def main():
            server = await asyncio.start_server(handle_conn, "127.0.0.1", 0)
            print("ready", flush=True)
            print(server.sockets[0].getsockname()[1], flush=True)
            await server.serve_forever()
        asyncio.run(main())
    print("ready", flush=True)
    if shape == "join":
        t = threading.Thread(target=threading.Event().wait)
        t.start()
        t.join()
    elif shape in ("event", "quiet"):
        threading.Event().wait()
    elif shape == "pause":
        while True:
            signal.pause()
    elif shape == "asyncio":
        import asyncio
        async def main():
            await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
            await asyncio.Event().wait()
        asyncio.run(main())
    elif shape == "gate":
        # The standby signal held back until a line comes: a request
        # that waits, as one to a main thread that runs no Python.
        sig = signal.SIGRTMIN + 7
        signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
        sys.stdin.readline()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        print("open", flush=True)       # the signal's handler has run
        worker()
    elif shape in ("stdin", "fork"):
        ends = []
        for line in sys.stdin:
            if line.strip() == "thread":
                ev = threading.Event()
                t = threading.Thread(target=ev.wait)
                t.start()
                ends.append((ev, t))
                print(t.native_id, flush=True)
            elif line.strip() == "end":
                ev, t = ends.pop()
                ev.set()
                t.join()
                print("ended", flush=True)
            elif line.strip() == "run":
                for _ in range(50):
                    handle_fn(20000)
                print("ran", flush=True)
            elif line.strip() == "fork":
                # "forked" once the child is past os.fork() (its hooks
                # have run: jitring stopped there in a window).
                r, w = os.pipe()
                if os.fork() == 0:
                    os.close(r)
                    os.write(w, b"x")
                    os.close(w)
                    worker()
                os.close(w)
                os.read(r, 1)
                os.close(r)
                print("forked", flush=True)
""")


class Service:
    def __init__(self, py, shape, env):
        self.p = subprocess.Popen([py, "-c", SERVICE, shape],
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, text=True)
        self.ready = self.p.stdout.readline().strip() == "ready"
        self.pid = self.p.pid

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def stop(self):
        self.p.kill()
        _, err = self.p.communicate()
        return err


def profiling(pid):
    """What of @pid profiles: jitring's threads, and its dump's mapping."""
    what = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                    name = f.read().strip()
            except OSError:
                continue
            if name.startswith("jitring"):
                what.append(name)
        with open("/proc/%d/maps" % pid) as f:
            what += [line.split()[-1] for line in f
                     if "jit-%d.dump" % pid in line]
    except OSError:
        pass
    return what


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def main_waits(pid, timeout=60):
    """Whether @pid's main thread comes to wait, asleep in the kernel at
    the same place in three reads 10 ms or more apart, within @timeout s:
    the wait a service's shape is about has begun (a thread that waits
    for a lock a moment is not taken for it).  What the cases sync on
    before a window, rather than a time that a loaded machine outlasts."""
    end = time.monotonic() + timeout
    seen = []
    while time.monotonic() < end:
        try:
            with open("/proc/%d/task/%d/stat" % (pid, pid)) as f:
                state = f.read().rpartition(")")[2].split()[0]
            with open("/proc/%d/task/%d/wchan" % (pid, pid)) as f:
                wchan = f.read().strip()
        except (OSError, IndexError):
            return False
        seen = seen + [wchan] if state == "S" and wchan not in ("", "0") \
            else []
        if len(seen) >= 3 and len(set(seen[-3:])) == 1:
            return True
        time.sleep(0.01)
    return False


def env_for(newer, **kw):
    env = dict(os.environ)
    for k in ("PYTHONPATH", "JITRING_PROFILE", "JITRING_DIR",
              "JITRING_RUNNING_FRAMES"):
        env.pop(k, None)
    if not newer:
        env["JITRING_PROFILE"] = "standby"
    env.update(kw)
    return env


def names_handle(out):
    dumps = jrtest.dumps(out)
    return len(dumps) >= 1 and jrtest.check_dump(dumps[0])[0] and any(
        x.startswith("py::handle_fn:") for x in jrtest.load_names(dumps[0]))


def test_shapes(t, py, newer):
    """Services whose main thread waits: each window answered while it
    waits, and, in a window through perf, the worker's loop (worker(),
    called before any window: it never returns) named over its thread's
    samples."""
    from jitring.attach.probe import probe
    from jitring.attach.window import Window
    from jitring.common.errors import AttachError
    from test_record import dump_names
    why = jrtest.perf_usable()
    if why:
        t.skip_part("the worker's loop through perf", why)
    # queue.Queue().get() waits as Event.wait() does (Condition.wait(): a
    # lock's acquire with no timeout).
    for shape in ("join", "event", "pause", "asyncio"):
        svc = Service(py, shape, env_for(newer, **running_env()))
        try:
            waits = main_waits(svc.pid)
            out = os.path.join(t.scratch, "shape-" + shape)
            os.mkdir(out)
            w = Window(probe(svc.pid), out, 60.0)
            t0 = time.monotonic()
            try:
                a = w.start()
                # Past start()'s 2 s (a loaded machine), the answer comes
                # later: what is checked is that it comes while the main
                # thread waits (broken, it never would).
                if a.get("pending"):
                    a = w.poll(60.0) or a
                took = time.monotonic() - t0
                # The worker's handle_fn named in the window's dump.
                dump_names(out, b"py::handle_fn:")
                w.stop()
            except AttachError as e:
                a, took = {"error": str(e)}, time.monotonic() - t0
            finally:
                w.close()
            t.check(waits and a.get("ok") and not a.get("pending") and
                    names_handle(out),
                    "main thread waiting in %s: answered (in %.2f s), "
                    "handle_fn named" % (shape, took),
                    (waits, a, os.listdir(out)))
            if not why:
                listed = check_running(t, py, svc.pid, "main thread in " +
                                       shape, "worker", "handle_fn",
                                       "running-" + shape)
            if shape == "asyncio" and not why:
                # The server's coroutine waits in the loop, suspended: on
                # no thread's stack, so not listed; the loop that waits
                # is (the main thread's), with no samples under it.
                main = listed.get(svc.pid, [])
                t.check("BaseEventLoop.run_forever" in main and
                        "main" not in main,
                        "the idle loop listed, its coroutine not", listed)
        finally:
            err = svc.stop()
        t.check(not err, shape + ": nothing on the service's stderr", err)


def test_no_python(t, py, newer):
    """No thread runs Python: the window opens at once, and jitring starts
    when the service runs Python in it."""
    from jitring.attach.probe import probe
    from jitring.attach.window import Window
    if not newer:
        t.skip_part("no thread runs Python",
                    "standby's signal makes the main thread run Python")
        return
    svc = Service(py, "stdin", env_for(newer))
    try:
        waits = main_waits(svc.pid)
        out = os.path.join(t.scratch, "nopython")
        os.mkdir(out)
        w = Window(probe(svc.pid), out, 60.0)
        try:
            t0 = time.monotonic()
            a = w.start()
            took = time.monotonic() - t0
            svc.send("run")
            late = w.poll(60.0)
            ran = svc.p.stdout.readline().strip() == "ran"
            # handle_fn's calls again, all of them with jitring on.
            svc.send("run")
            ran = ran and svc.p.stdout.readline().strip() == "ran"
            w.stop()
        finally:
            w.close()
        # start() returns without an answer: were it to wait for one, it
        # would never return (the service runs Python only after it).
        t.check(waits and a.get("pending"),
                "no thread runs Python: the window opens (after %.2f s) "
                "with the answer to come" % took, (waits, a))
        t.check(late and late.get("ok") and ran and names_handle(out),
                "and jitring starts once the service runs Python",
                (late, ran, os.listdir(out)))
    finally:
        err = svc.stop()
    t.check(not err, "nothing on the service's stderr", err)


# A record that sends its request, says so, and waits to be killed.
FAKE_RECORD = textwrap.dedent("""
    import os, sys, time
    from jitring.attach.probe import probe
    from jitring.attach.window import Window
    w = Window(probe(int(sys.argv[1])), sys.argv[2], 60.0)
    w._send()
    print("sent", flush=True)
    time.sleep(600)
""")


def test_void(t, py, newer):
    """Requests that outlive their window do nothing later."""
    from jitring.attach.probe import probe
    from jitring.attach.window import Window
    shape = "stdin" if newer else "gate"
    # What wakes the service, and its line once it has run Python since
    # (the request's turn has come then: what it would start is there).
    wake, woke = ("run", "ran") if newer else ("", "open")
    # The window closed unanswered (3.14+: record gives up on it).
    if newer:
        svc = Service(py, shape, env_for(newer))
        try:
            waits = main_waits(svc.pid)
            out = os.path.join(t.scratch, "void-closed")
            os.mkdir(out)
            w = Window(probe(svc.pid), out, 60.0)
            try:
                a = w.start()
                w.stop()
            finally:
                w.close()
            import shutil
            shutil.rmtree(out)
            svc.send(wake)
            ran = svc.p.stdout.readline().strip() == woke
            left = profiling(svc.pid)
        finally:
            err = svc.stop()
        t.check(waits and a.get("pending") and ran and not left and
                not err, "a window closed unanswered: its request, run "
                "later, starts nothing, prints nothing",
                (waits, a, ran, left, err))
    # Its record killed (SIGKILL) before the service ran it.
    svc = Service(py, shape, env_for(newer))
    try:
        waits = main_waits(svc.pid)
        out = os.path.join(t.scratch, "void-killed")
        os.mkdir(out)
        rec = subprocess.Popen([py, "-c", FAKE_RECORD, str(svc.pid), out],
                               stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ))
        sent = rec.stdout.readline().strip() == "sent"
        rec.kill()
        rec.wait()
        svc.send(wake)
        ran = svc.p.stdout.readline().strip() == woke
        left = profiling(svc.pid)
    finally:
        err = svc.stop()
    t.check(waits and sent and ran and not left and not err and
            not jrtest.dumps(out),
            "record killed before the service ran its request: nothing "
            "starts, nothing printed", (waits, sent, ran, left, err))


def test_children(t, py, newer):
    from jitring.attach.probe import probe
    from jitring.attach.window import Window
    svc = Service(py, "fork", env_for(newer, **running_env()))
    try:
        # A child forked before any window: a worker process of a
        # pre-fork server.
        svc.send("fork")
        early = svc.p.stdout.readline().strip() == "forked" and \
            children(svc.pid)
        waits = main_waits(svc.pid)
        out = os.path.join(t.scratch, "children")
        os.mkdir(out)
        w = Window(probe(svc.pid), out, 60.0)
        try:
            a = w.start()
            svc.send("fork")
            # "forked": the child is past the fork, where its jitring
            # stops.
            forked = svc.p.stdout.readline().strip() == "forked"
            kids = children(svc.pid)
            on = [profiling(k) for k in kids]
            w.stop()
        finally:
            w.close()
        # The threads end a moment after the stop's answer: 60 s for a
        # loaded machine, the loop done as soon as they have.
        jrtest.poll(lambda: not (profiling(svc.pid) or
                                 any(profiling(k) for k in kids)))
        left = [profiling(svc.pid)] + [profiling(k) for k in kids]
        t.check(waits and a.get("ok") and forked and len(kids) == 2 and
                not any(on), "a child forked in the window is left out "
                "of it", (waits, a, kids, on))
        t.check(not any(left),
                "after the window, neither the service nor its child "
                "profiles", left)
        # A window on the child forked before any: its worker() (called
        # at the fork, below the main thread's <module>) named.
        why = jrtest.perf_usable()
        if why:
            t.skip_part("a child forked before the window, through perf",
                        why)
        elif t.check(early, "a child forked before the window", early):
            check_running(t, py, early[0], "a child forked before the "
                          "window", "worker", "handle_fn", "running-fork")
    finally:
        for k in children(svc.pid):
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass
        svc.stop()


def test_record_own(t, py, newer):
    from test_record import perf_usable, sections, has
    why = perf_usable()
    if why:
        t.skip_part("record --pid through perf", why)
        return
    svc = Service(py, "quiet", env_for(newer))
    try:
        waits = main_waits(svc.pid)
        out = os.path.join(t.scratch, "rec-own")
        p = subprocess.run([py, "-m", "jitring", "record", "-o", out,
                            "--pid", str(svc.pid), "--duration", "1"],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, HOME=t.scratch))
        s = sections(p.stdout)
        tables = "\n".join(str(v) for v in s.values())
        own = [f for f in ("target_start", "target_stop", "target_request",
                           "standby_handler", "_watcher", "_jitring_request")
               if f in tables]
        t.check(waits and p.returncode == 0 and
                has(s["total"], "handle_fn") and not own,
                "record --pid, a quiet service, its main thread waiting: "
                "handle_fn named, none of jitring's attach functions",
                (waits, own, p.stdout[-1500:], p.stderr[-600:]))
    finally:
        svc.stop()


def total_shares(stdout):
    """{function: total %} of record's total table."""
    shares, on = {}, False
    for line in stdout.splitlines():
        if line.startswith("Hottest Python functions by total"):
            on = True
        elif on and not line.strip() and shares:
            break
        elif on:
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].endswith("%"):
                shares[parts[2].split(":", 1)[0]] = float(parts[0][:-1])
    return shares


ATTACH_OWN = ("target_start", "target_stop", "target_request",
              "standby_handler", "_watcher", "_jitring_request")


def ft313():
    """Whether this is a free-threaded 3.13 running without the GIL: a
    service there lists the frames that ran throughout a window only
    with JITRING_RUNNING_FRAMES=1 (jitring._running.frames_readable())."""
    return sys.version_info[:2] == (3, 13) and \
        not getattr(sys, "_is_gil_enabled", lambda: True)()


def running_env():
    """What a service's environment needs for its list of the frames that
    ran throughout a window."""
    return {"JITRING_RUNNING_FRAMES": "1"} if ft313() else {}


# The least total share (%) of the frame that holds a service's work and
# ran throughout the window: every sample of its thread is under it, and
# the service's other threads wait (measured 95-100 %, 2 loaded CPUs).
RUNNING_SHARE = 80
# The least share (%) of a busy asyncio server's loop iterations
# (BaseEventLoop._run_once) that its handler coroutine takes (measured
# 96-99 %, 2 loaded CPUs).
HANDLER_SHARE = 70


def record_pid(t, py, pid, name, duration="1", opened=None):
    """record --pid @pid for @duration seconds into the scratch folder
    @name, calling @opened() once its window opened (it says so): (its
    CompletedProcess, {function: total %}, {tid: [qualname of each frame
    that ran throughout, outermost first]}, stacks.folded)."""
    import json
    out = os.path.join(t.scratch, name)
    argv = [py, "-m", "jitring", "record", "-o", out, "--pid", str(pid),
            "--duration", duration]
    r = subprocess.Popen(argv, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, HOME=t.scratch))
    try:
        first = r.stderr.readline()
        if opened:
            opened()
        o, e = r.communicate(timeout=300)
    finally:
        r.kill()
        r.wait()
    p = subprocess.CompletedProcess(argv, r.returncode, o, first + e)
    try:
        with open(os.path.join(out, "stacks.folded")) as f:
            folded = f.read()
    except OSError:
        folded = ""
    try:
        with open(os.path.join(out, "running-frames.json")) as f:
            data = json.load(f)
        listed = {th["tid"]: [fr[0] for fr in th["frames"]]
                  for th in data["threads"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        listed = {"error": [repr(e)]}
    return p, total_shares(p.stdout), listed, folded


def calls(folded, outer, inner):
    """Whether a stack of @folded has @outer with @inner next."""
    for line in folded.splitlines():
        fr = line.rpartition(" ")[0].split(";")
        if any(a.startswith("py::%s:" % outer) and
               b.startswith("py::%s:" % inner) for a, b in zip(fr, fr[1:])):
            return True
    return False


def own_named(p, listed):
    """jitring's attach functions in record's tables or in the list of
    the frames that ran throughout."""
    return [f for f in ATTACH_OWN if f in p.stdout or
            any(f in n for fs in listed.values() for n in fs)]


def check_running(t, py, pid, what, outer, inner, name):
    """record --pid @pid (its window opened after the service started):
    @outer, the frame that holds @pid's work (entered before the window:
    never through a trampoline), listed and named in the tables with at
    least RUNNING_SHARE % of the samples total, as @inner's caller."""
    p, shares, listed, folded = record_pid(t, py, pid, name)
    names = [n for fs in listed.values() for n in fs]
    own = own_named(p, listed)
    t.check(p.returncode == 0 and outer in names and
            shares.get(outer, 0) >= RUNNING_SHARE and
            calls(folded, outer, inner) and not own,
            "%s: %s, running since before the window, listed and named "
            "(%.1f%% total, at least %d%%) as %s's caller"
            % (what, outer, shares.get(outer, 0), RUNNING_SHARE, inner),
            (own, listed, shares, p.stdout[-1500:], p.stderr[-600:]))
    return listed


def test_running(t, py, newer):
    """Frames that ran throughout the window (called before it: no
    trampoline) are named at the root of their thread's samples."""
    from jitring._running import frames_readable
    # A free-threaded 3.13 without the GIL reads other threads' frames
    # only where the service asks for it.
    saved = os.environ.pop("JITRING_RUNNING_FRAMES", None)
    readable = frames_readable()
    if saved is not None:
        os.environ["JITRING_RUNNING_FRAMES"] = saved
    t.check(readable != ft313(), "other threads' frames read by default: "
            "%s (not on a free-threaded 3.13)" % readable)
    why = jrtest.perf_usable()
    if why:
        t.skip_part("frames running throughout the window", why)
        return
    # A worker thread's loop: test_shapes.
    for shape, outer, inner in (("manager", "Server.serve_client",
                                 "Work.run"),):
        svc = Service(py, shape, env_for(newer, **running_env()))
        try:
            # Its "ready" came after a first call: serve_client() runs.
            pid = int(svc.p.stdout.readline()) if shape == "manager" \
                else svc.pid
            p, shares, listed, folded = record_pid(
                t, py, pid, "running-" + shape, "1.5")
        finally:
            # The service killed first (its calls would fail, EOFError on
            # its stderr, once the Manager's server is gone), then the
            # server (which holds the service's pipes), then read.
            svc.p.kill()
            svc.p.wait()
            if shape == "manager" and pid != svc.pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (OSError, NameError):
                    pass
            err = svc.stop()
        names = [n for fs in listed.values() for n in fs]
        own = own_named(p, listed)
        t.check(p.returncode == 0 and shares.get(inner, 0) > 0 and
                shares.get(outer, 0) >= shares[inner] and
                calls(folded, outer, inner) and outer in names and not own,
                "%s, running since before the window: named in the "
                "tables (%.1f%% total, %s %.1f%%) as %s's caller, and "
                "listed" % (outer, shares.get(outer, 0), inner,
                            shares.get(inner, 0), inner),
                (own, names, shares, p.stdout[-1500:], p.stderr[-600:]))
        t.check(not err, shape + ": nothing on the service's stderr", err)


def test_asyncio_busy(t, py, newer):
    """An asyncio server kept busy by its clients (the main thread runs
    the loop and never waits long): the window opens, the handler
    coroutine named with its share, every answer right."""
    import socket
    import threading
    why = jrtest.perf_usable()
    if why:
        t.skip_part("a busy asyncio server through perf", why)
        return
    svc = Service(py, "aserve", env_for(newer, **running_env()))
    stats = {"asked": 0, "wrong": [], "done": False}
    port = None

    def client(seed):
        # Two clients, so that the loop has a line to answer while the
        # other one reads its answer.
        n = 5000 + seed
        try:
            with socket.create_connection(("127.0.0.1", port),
                                          timeout=30) as c:
                f = c.makefile("rwb")
                while not stats["done"]:
                    n = 5000 + (n * 7919) % 15000
                    f.write(b"%d\n" % n)
                    f.flush()
                    got = f.readline()
                    stats["asked"] += 1
                    # sum(i * i for i in range(n)), not computed here.
                    if got != b"%d\n" % ((n - 1) * n * (2 * n - 1) // 6):
                        stats["wrong"].append((n, got))
        except OSError as e:
            stats["wrong"].append(repr(e))
    clients = [threading.Thread(target=client, args=(i,)) for i in (1, 2)]
    # Answers before the window and after it, each waited for (a loaded
    # machine answers later, not fewer); those in it show in the profile
    # (handle_fn's samples).  The window is open once the service's dump
    # is in the recording's folder and the service profiles, and over
    # once it no longer does (its jitring threads and its dump's mapping
    # gone).
    asked = []
    rec = os.path.join(t.scratch, "asyncio-busy")

    def opened():
        # The clients stop once the window closed and the service
        # answered them after it, not to slow record's finishing.
        jrtest.poll(lambda: jrtest.dumps(rec) and profiling(svc.pid))
        jrtest.poll(lambda: not profiling(svc.pid))
        n = stats["asked"]
        asked.append(n)
        jrtest.poll(lambda: stats["asked"] > n)
        asked.append(stats["asked"])
        stats["done"] = True
    try:
        port = int(svc.p.stdout.readline())
        for c in clients:
            c.start()
        jrtest.poll(lambda: stats["asked"] >= 20)
        asked.append(stats["asked"])
        p, shares, listed, folded = record_pid(t, py, svc.pid,
                                               os.path.basename(rec), "1",
                                               opened)
    finally:
        stats["done"] = True
        for c in clients:
            if c.ident is not None:
                c.join()
        alive = svc.p.poll() is None
        err = svc.stop()
    main = listed.get(svc.pid, [])
    own = own_named(p, listed)
    loop = "BaseEventLoop.run_forever"
    t.check(p.returncode == 0 and loop in main and
            shares.get(loop, 0) >= RUNNING_SHARE and not own,
            "the loop, running since before the window, listed and named "
            "(%.1f%% total, at least %d%%)"
            % (shares.get(loop, 0), RUNNING_SHARE),
            (own, listed, shares, p.stdout[-1500:], p.stderr[-600:]))
    # The handler's frame is suspended at each await, resumed through a
    # trampoline: named as any call, inside the loop's frames.  Its share
    # is taken of the loop's iterations: perf samples from before the
    # window's answer (jitring starting in a service starved of CPU: up
    # to 3 s seen), named by no trampoline, count to the loop's own frame.
    run = shares.get("BaseEventLoop._run_once", 0)
    conn = shares.get("handle_conn", 0)
    part = 100.0 * conn / run if run else 0.0
    t.check(part >= HANDLER_SHARE and shares.get("handle_fn", 0) > 0 and
            calls(folded, "handle_conn", "handle_fn"),
            "the handler coroutine named (%.1f%% total, %.1f%% of the "
            "loop's iterations, at least %d%%) as handle_fn's caller "
            "(%.1f%%)" % (conn, part, HANDLER_SHARE,
                          shares.get("handle_fn", 0)), shares)
    # Before the window; at its end and after it.
    t.check(len(asked) == 3 and asked[0] >= 20 and asked[2] > asked[1] and
            not stats["wrong"], "%d requests before the window, %d more "
            "after it: every answer right" % (
                asked[0], asked[-1] - asked[-2] if len(asked) == 3 else 0),
            (asked, stats["wrong"][:5]))
    t.check(alive and not err, "the service alive after, nothing on its "
            "stderr", err)
    out = os.path.join(t.scratch, "asyncio-busy")
    dumps = jrtest.dumps(out)
    t.check(dumps and all(jrtest.check_dump(d)[0] for d in dumps),
            "its dump valid", [(d, jrtest.check_dump(d)) for d in dumps])


def test_marks(t, py, newer):
    """The window's marks in this process: what ran throughout is told
    from a new call of the same function."""
    import threading
    from jitring._running import _running_threads, _tag_running
    from jitring.common.folder import checked_running
    from jitring.profile.classify import own_work, program_stack
    go = [threading.Event(), threading.Event()]
    at = [threading.Event(), threading.Event()]
    done = threading.Event()

    def inner(i):
        at[i].set()
        go[i].wait(30)

    def outer():
        inner(0)
        inner(1)
        done.wait(30)

    def traced():
        # A frame a tracer set f_trace on: left to it.
        sys._getframe().f_trace = mine
        at.append(None)
        done.wait(30)

    def mine(frame, event, arg):
        return mine
    th = threading.Thread(target=outer, name="outer")
    th2 = threading.Thread(target=traced)
    th.start()
    th2.start()
    try:
        at[0].wait(10)
        end = time.monotonic() + 10
        while None not in at and time.monotonic() < end:
            time.sleep(0.01)
        marks = _tag_running()
        go[0].set()
        at[1].wait(10)
        fr = sys._current_frames()[th.ident]
        names = []
        while fr is not None:
            names.append(fr.f_code.co_name)
            fr = fr.f_back
        del fr
        listed = {x["tid"]: [f[0] for f in x["frames"]]
                  for x in _running_threads(marks)}
        # A second window: the frames that ran through the first are
        # marked again.
        again = {x["tid"]: [f[0] for f in x["frames"]]
                 for x in _running_threads(_tag_running())}
        f = sys._current_frames()[th2.ident]
        while f is not None and f.f_code.co_name != "traced":
            f = f.f_back
        kept = f is not None and f.f_trace is mine
    finally:
        go[1].set()
        done.set()
        th.join()
        th2.join()
    got = listed.get(th.native_id, [])
    t.check("inner" in names and got and
            got[-1] == "test_marks.<locals>.outer",
            "a thread in a new call of inner() at the list: outer() "
            "listed last, inner() not", (names, got))
    mainl = listed.get(threading.main_thread().native_id, [])
    own = [n for fs in listed.values() for n in fs
           if n.split(".")[-1] in ATTACH_OWN + ("_tag_running",
                                               "_running_threads")]
    t.check(mainl and mainl[-1] == "test_marks" and not own,
            "the caller's own thread listed up to jitring's first frame",
            (mainl, own))
    t.check(kept and listed.get(th2.native_id, []) ==
            ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"],
            "a tracer's f_trace left as it was, and the list stopping "
            "there", (kept, listed))
    t.check(again.get(th.native_id, [])[:len(got) + 1] ==
            got + ["test_marks.<locals>.inner"],
            "a second window: the frames marked again, the new call of "
            "inner() too", (again, got))
    junk = {"pid": 5, "threads": [
        {"tid": 7, "frames": [["a", "f.py", 1], ["b", "g.py", 2],
                              ["c", 3, 4], ["d", "h.py", 5]]},
        {"tid": True, "frames": [["x", "y", 1]]}, {"tid": -3},
        {"tid": 8, "frames": "no"}, "thread", {"tid": 9, "frames": []}]}
    t.check(checked_running(junk) ==
            {"pid": 5, "threads": [{"tid": 7, "frames": [
                ["a", "f.py", 1], ["b", "g.py", 2]]}]} and
            checked_running([1]) is None and
            checked_running({"pid": "1", "threads": []}) is None,
            "a list with junk: read as what is valid up to it",
            checked_running(junk))
    # A thread that runs sys.remote_exec's request late (a main thread
    # that woke after another thread had started jitring) is sampled in
    # the request script: jitring's work, left out of the tables.
    # sys.remote_exec runs the script's text as "<string>".
    prog = ("py::Server.serve_forever:/usr/lib/python3/managers.py",
            "python")
    for fn in ("<string>", "/tmp/jitring-%d/attach-%d.py"
               % (os.getuid(), os.getpid())):
        req = ("py::_jitring_request:" + fn, "python")
        t.check(own_work("python", [req, prog]) and
                program_stack([req, prog]) == [prog[0]] and
                not own_work("python", [prog]) and
                not own_work("python", [("py::f:" + fn, "python"),
                                                prog]),
                "the attach request's function in %s: jitring's work, "
                "left out of a sample's stack; another function there "
                "the program's" % fn)


def test_live_dump(t, py, newer):
    """A service whose jitring was on: record killed while it finishes,
    then report: the service's dump whole and in place each time."""
    from test_record import perf_usable
    why = perf_usable()
    if why:
        t.skip_part("record --pid killed while it finishes", why)
        return
    d = os.path.join(t.scratch, "live")
    os.mkdir(d)
    svc = Service(py, "event", env_for(newer, JITRING_PROFILE="1",
                                       JITRING_DIR=d))
    dump = os.path.join(d, "jit-%d.dump" % svc.pid)
    try:
        # Its dump made at start-up, before "ready".
        main_waits(svc.pid)
        ino = os.stat(dump).st_ino
        bad = []
        # Where to kill record: once a file of its finishing is there (and
        # a while after), or a time after its window opened; with
        # $JITRING_TEST_KILL_POINTS (20 in make stress's soak) more
        # times, spread from the window's start to 3 s after its end.
        points = [("perf-inject.log", 0.0), ("perf-inject.log", 0.2),
                  ("perf.jit.data", 0.0), (None, 1.5)]
        extra = int(os.environ.get("JITRING_TEST_KILL_POINTS", "4")) - 4
        points += [(None, -0.45 + 3.5 * k / max(1, extra - 1))
                   for k in range(max(0, extra))]
        for i, (when, after) in enumerate(points):
            out = os.path.join(t.scratch, "live%d" % i)
            p = subprocess.Popen([py, "-m", "jitring", "record", "-o", out,
                                  "--pid", str(svc.pid), "--duration",
                                  "0.5"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, HOME=t.scratch))
            p.stderr.readline()
            end = time.monotonic() + 60
            while when and p.poll() is None and time.monotonic() < end \
                    and not os.path.exists(os.path.join(out, when)):
                time.sleep(0.002)
            time.sleep(after + (0.5 if when is None else 0.0))
            p.kill()
            p.communicate()
            for step in ("killed", "report"):
                if step == "report" and os.path.isdir(out):
                    subprocess.run([py, "-m", "jitring", "report", out],
                                   capture_output=True, timeout=300,
                                   env=dict(os.environ, HOME=t.scratch))
                st = os.stat(dump) if os.path.exists(dump) else None
                if st is None or st.st_ino != ino or \
                        os.path.exists(dump + ".full") or \
                        profiling(svc.pid) == []:
                    bad.append((when, after, step, st and st.st_ino,
                                os.listdir(d)))
        t.check(not bad, "record killed at %d points of its window and "
                "finishing, and report after: the service's dump in "
                "place, the same file, still written" % len(points), bad)
    finally:
        svc.stop()
    t.check(jrtest.check_dump(dump)[0], "and whole once the service exits",
            jrtest.check_dump(dump))


def test_thread_per_request(t, py, newer):
    """Threads that exit all the time while record writes to every
    thread's state: each is stopped meanwhile, so none is written to
    after it is gone."""
    import http.client
    import random
    import threading
    from jitring.attach import window as windows
    from jitring.attach.probe import probe
    from jitring.attach.window import Window
    from jitring.common.errors import AttachError
    if not newer:
        t.skip_part("a thread-per-request service",
                    "standby asks the main thread only")
        return
    svc = Service(py, "http", env_for(newer))
    port = int(svc.p.stdout.readline())
    stats = {"asked": 0, "wrong": [], "done": False}
    answered = threading.Condition()
    sends = []

    def client():
        while not stats["done"]:
            n = random.randrange(100, 3000)
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("GET", "/%d" % n)
                got = c.getresponse().read().decode()
                c.close()
            except OSError as e:
                got = repr(e)
            with answered:
                stats["asked"] += 1
                if got != str(sum(i * i for i in range(n))):
                    stats["wrong"].append((n, got))
                answered.notify_all()

    # Window calls it by its module's name.
    real = windows.send_all_threads

    def counted(pid, script, ver):
        try:
            n = real(pid, script, ver)
        except (OSError, ValueError) as e:
            sends.append(repr(e))
            raise
        sends.append(n)
        return n
    windows.send_all_threads = counted
    c = threading.Thread(target=client)
    c.start()
    bad, outs, few = [], [], []
    try:
        for i in range(10):
            out = os.path.join(t.scratch, "http%d" % i)
            os.mkdir(out)
            outs.append(out)
            w = Window(probe(svc.pid), out, 60.0)
            try:
                a = w.start()
                # Open until 10 more answers (their threads come and go),
                # however long a loaded machine takes to give them.
                n = stats["asked"]
                with answered:
                    if not answered.wait_for(
                            lambda: stats["asked"] >= n + 10, 60):
                        few.append(i)
                w.stop()
            except AttachError as e:
                a = {"error": str(e)}
            finally:
                w.close()
            if not a.get("ok") or a.get("pending"):
                bad.append((i, a))
    finally:
        windows.send_all_threads = real
        stats["done"] = True
        c.join()
    alive = svc.p.poll() is None
    err = svc.stop()
    t.check(not bad, "a thread-per-request service, 10 windows: each "
            "answered", bad)
    t.check(sends and all(isinstance(n, int) and n >= 1 for n in sends),
            "each sent to every thread, the process stopped meanwhile",
            sends)
    t.check(not few and not stats["wrong"],
            "10 answers or more in each window (%d requests in all): every "
            "answer right" % stats["asked"], (few, stats["wrong"][:5]))
    t.check(alive and not err, "the service alive after, nothing on its "
            "stderr", err)
    invalid = [(o, jrtest.dumps(o)) for o in outs
               if not jrtest.dumps(o) or
               not all(jrtest.check_dump(d)[0] for d in jrtest.dumps(o))]
    t.check(not invalid, "each window's dump valid", invalid)


def tracing(pid):
    """{tid: (state, tracer pid)} of @pid's threads."""
    what = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                st = dict(l.split(":", 1) for l in f if ":" in l)
        except OSError:
            continue
        what[int(tid)] = (st["State"].split()[0], int(st["TracerPid"]))
    return what


def let_go(pid, timeout=30):
    """tracing(@pid) once no thread of it is stopped or traced, or as it
    is after @timeout s (a detached thread may show its stop a moment)."""
    end = time.monotonic() + timeout
    while True:
        now = tracing(pid)
        if all(s != "t" and tr == 0 for s, tr in now.values()) or \
                time.monotonic() >= end:
            return now
        time.sleep(0.01)


def test_seize(t, py, newer):
    """send_all_threads()'s stop: every thread stopped while held, every
    one let go after, and none written to where one refuses."""
    import errno
    from jitring.attach import ptrace as ptracing
    from jitring.attach.ptrace import (_PTRACE_SEIZE, _detach_all, _ptrace_fn,
                                       _seize_all, send_all_threads)
    if not newer:
        t.skip_part("the threads' stop", "standby asks the main thread only")
        return
    svc = Service(py, "event", env_for(newer))
    try:
        waits = main_waits(svc.pid)
        ptrace = _ptrace_fn()
        held = _seize_all(svc.pid, ptrace)
        during = tracing(svc.pid)
        seized = set(held)
        _detach_all(held, ptrace)
        after = let_go(svc.pid)
        t.check(waits and during and seized == set(during) and
                all(s == "t" and tr == os.getpid()
                    for s, tr in during.values()) and
                all(s != "t" and tr == 0 for s, tr in after.values()),
                "every thread stopped (a ptrace stop) while held, every "
                "one let go after", (during, after))
        calls = []

        def refusing(req, tid, data=0):
            if req == _PTRACE_SEIZE:
                calls.append(tid)
                if len(calls) == 2:
                    return errno.EPERM
            return ptrace(req, tid, data)
        real = ptracing._ptrace_fn
        ptracing._ptrace_fn = lambda: refusing
        try:
            send_all_threads(svc.pid, "/nonexistent/jitring.py",
                                     sys.version_info[:2])
            refused = False
        except OSError:
            refused = True
        finally:
            ptracing._ptrace_fn = real
        after = let_go(svc.pid)
        t.check(refused and all(s != "t" and tr == 0
                                for s, tr in after.values()),
                "one thread refusing the seize: every thread let go",
                (refused, after))
    finally:
        err = svc.stop()
    t.check(not err, "and the request sent to none (nothing on the "
            "service's stderr)", err)
    # A thread that exits between the listing and its seize: the kernel
    # may refuse the seize (EPERM, a thread with an exit state) rather
    # than say it is gone (ESRCH); either way it is left out, not taken
    # for a refusal.
    svc = Service(py, "stdin", env_for(newer))
    try:
        svc.send("thread")
        tid = int(svc.p.stdout.readline())
        seen = []

        def exiting(req, t_, data=0):
            if req == _PTRACE_SEIZE and not seen:
                # The first seize (the listing is made): end the thread.
                svc.send("end")
                seen.append(svc.p.stdout.readline().strip())
            if req == _PTRACE_SEIZE and t_ == tid:
                seen.append(t_)
                return errno.EPERM
            return ptrace(req, t_, data)
        ptracing._ptrace_fn = lambda: exiting
        try:
            n = send_all_threads(svc.pid, "/nonexistent/jitring.py",
                                         sys.version_info[:2])
        except OSError as e:
            n = e
        finally:
            ptracing._ptrace_fn = real
        after = tracing(svc.pid)
    finally:
        svc.stop()
    t.check(seen == ["ended", tid] and isinstance(n, int) and
            all(s != "t" and tr == 0 for s, tr in after.values()),
            "a thread exiting during the seize (EPERM): left out, the "
            "rest sent to and let go", (seen, n, after))


def fixture(t):
    import jitring
    site = os.path.dirname(os.path.dirname(os.path.abspath(
        jitring.__file__)))
    if os.path.exists(os.path.join(site, "jitring-autostart.pth")):
        py = sys.executable
    else:
        py = jrtest.hook_venv(t, True)
    return py, sys.version_info >= (3, 14)


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
