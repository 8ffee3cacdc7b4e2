# SPDX-License-Identifier: MIT
"""The linked trampolines ($JITRING_FP_LINK=1, x86_64): one frame-pointer
chain entry per Python frame, and nothing else changed.

Cases:
1. links: in a child with the linked set, the thread's records
   (_jitring._fp_links(), what perf's kernel unwinder follows after the
   innermost Python frame) number exactly the Python frames entered since
   start(), in plain recursion, recursion to the limit, generators,
   coroutines under asyncio, a builtin calling back (sorted's key), a
   signal handler, exceptions through frames, and 4 threads at once;
   and none in the default set.
2. stale: a link left by a frame unwound without its epilogue
   (longjmp, a greenlet switch; set by a test hook): one below the stack
   is not linked to and is cleared when the outermost call returns; one
   above it, pointing at no record, never crashes (the trampolines never
   read links).
3. greenlet: switching greenlets under the linked set does not crash
   (the chain of a switched greenlet may be wrong; skipped where
   greenlet does not import).
4. native: gdb's bt shows the same named native frames through the
   linked trampolines as through the default ones (where it names more
   than a few by default: an interpreter with symbols and without frame
   pointers), and faulthandler's C stack dump the same frames (skipped
   without gdb, or before 3.14).
5. deep: through real perf on the fp route (an interpreter that keeps
   frame pointers), a program 60 Python frames deep recorded with the
   linked set has at most 5 % of its samples cut, and its <module> holds
   at least 90 % of them (skipped elsewhere).
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import jrtest

HERE = os.path.dirname(os.path.abspath(__file__))

LINKS = textwrap.dedent("""
    import asyncio, os, signal, sys, threading, jitring
    from jitring import _jitring
    bad = []
    def depth(top):
        f, n = sys._getframe(1), 0
        while f is not top:
            n, f = n + 1, f.f_back
        return n
    def check(what, top, base):
        n, d = len(_jitring._fp_links()), depth(top)
        if n != d + base:
            bad.append("%s: %d records for %d frames" % (what, n, d + base))
    def rec(n, top, base, what):
        if n == 0:
            check(what, top, base)
            return 0
        return 1 + rec(n - 1, top, base, what)
    def gen(top, base):
        for i in range(3):
            check("generator", top, base)
            yield i
    async def coro(n, top, base):
        if n:
            return await coro(n - 1, top, base)
        await asyncio.sleep(0)
        check("coroutine", top, base)
    def key(x, top, base):
        check("sorted key", top, base)
        return x
    def boom(n):
        if n == 0:
            raise KeyError(n)
        boom(n - 1)
    def deepest(top, base):
        try:
            return deepest(top, base)
        except RecursionError:
            check("recursion limit", top, base)
            raise
    def driver():
        top = sys._getframe()
        base = len(_jitring._fp_links()) - 0
        # driver itself runs through a trampoline: one record, no frame
        # above it counted by depth().
        if base != 1:
            bad.append("driver: %d records" % base)
        rec(200, top, base, "recursion 200")
        list(gen(top, base))
        asyncio.run(coro(20, top, base))
        sorted([3, 1, 2], key=lambda x: key(x, top, base))
        def handler(signum, frame):
            check("signal handler", top, base)
        signal.signal(signal.SIGUSR1, handler)
        os.kill(os.getpid(), signal.SIGUSR1)
        try:
            boom(50)
        except KeyError:
            check("after an exception through 50 frames", top, base)
        try:
            deepest(top, base)
        except RecursionError:
            pass
        check("after the recursion limit", top, base)
    def thread_main():
        top = sys._getframe()
        base = len(_jitring._fp_links())
        for _ in range(20):
            rec(100, top, base, "thread")
            list(gen(top, base))
    jitring.start(dir=sys.argv[1])
    driver()
    ts = [threading.Thread(target=thread_main) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    linked = jitring.stats()["py_fp_link"]
    jitring.stop()
    print("linked=%d records_after=%d" % (linked, len(_jitring._fp_links())))
    print("\\n".join(bad[:10]) or "no mismatch")
""")


def child(t, src, link, *args, timeout=300):
    path = os.path.join(t.scratch, "prog.py")
    with open(path, "w") as f:
        f.write(src)
    env = dict(os.environ, JITRING_FP_LINK="1" if link else "0")
    return subprocess.run([sys.executable, path, t.scratch] + list(args),
                          capture_output=True, text=True, env=env,
                          timeout=timeout)


def x86_64(t):
    if os.uname().machine != "x86_64":
        t.skip("the linked trampoline is x86_64 only")


def test_links(t):
    """One record per Python frame, whatever entered it."""
    x86_64(t)
    p = child(t, LINKS, True)
    t.check(p.returncode == 0 and "linked=1 records_after=0" in p.stdout
            and "no mismatch" in p.stdout,
            "links: one record per Python frame in recursion, generators, "
            "coroutines, a sorted key, a signal handler, exceptions, the "
            "recursion limit and 4 threads; none left after",
            p.stdout[-1500:] + p.stderr[-1500:])
    p = child(t, LINKS, False)
    t.check(p.returncode == 0 and "linked=0" in p.stdout and
            "driver: 0 records" in p.stdout,
            "links: the default set keeps no records",
            p.stdout[-800:] + p.stderr[-800:])


STALE = textwrap.dedent("""
    import sys, jitring
    from jitring import _jitring
    def rec(n):
        return len(_jitring._fp_links()) if n == 0 else rec(n - 1)
    def plain(n):
        return 0 if n == 0 else 1 + plain(n - 1)
    jitring.start(dir=sys.argv[1])
    out = []
    # A record left below the stack (dead for sure): not linked to, and
    # cleared when the outermost call returns.
    _jitring._fp_link_set(16)
    out.append(rec(30))
    out.append(len(_jitring._fp_links()))
    # One above it that is no record (another stack, a greenlet's):
    # linked to, but never read by the trampolines.
    _jitring._fp_link_set(2**47 - 4096)
    # (_fp_links() would read it: not called here.)
    for _ in range(3):
        out.append(plain(30))
    _jitring._fp_link_set(0)
    jitring.stop()
    print("stale", out)
""")


def test_stale(t):
    """A link left behind by a frame unwound without its epilogue."""
    x86_64(t)
    p = child(t, STALE, True)
    t.check(p.returncode == 0 and "stale [31, 0, 30, 30, 30]" in p.stdout,
            "stale: a dead link is not followed and is cleared on return, "
            "a foreign one is never read",
            p.stdout[-800:] + p.stderr[-800:])


GREENLET = textwrap.dedent("""
    import sys, jitring, greenlet
    jitring.start(dir=sys.argv[1])
    def deep(n, other):
        if n:
            return deep(n - 1, other)
        for i in range(50):
            other.switch(i)
    def side(x):
        while True:
            x = main_g.switch(x + 1)
    main_g = greenlet.getcurrent()
    for r in range(20):
        g2 = greenlet.greenlet(side)
        g1 = greenlet.greenlet(lambda: deep(30 + r, g2))
        g1.switch()
        while not g1.dead:
            g1.switch()
    jitring.stop()
    print("greenlets ok")
""")


def test_greenlet(t):
    """Greenlet switches under the linked set: no crash."""
    x86_64(t)
    if subprocess.run([sys.executable, "-c", "import greenlet"],
                      capture_output=True).returncode:
        t.skip("greenlet does not import in %s" % sys.executable)
    p = child(t, GREENLET, True)
    t.check(p.returncode == 0 and "greenlets ok" in p.stdout,
            "greenlet: switching deep greenlets runs to the end",
            p.stdout[-800:] + p.stderr[-800:])


CRASH = textwrap.dedent("""
    import faulthandler, os, signal, sys, jitring
    jitring.start(dir=sys.argv[1])
    def inner():
        if sys.argv[2] == "gdb":
            os.kill(os.getpid(), signal.SIGTRAP)
        else:
            faulthandler.dump_c_stack(sys.stdout)
    def key(x):
        inner()
        return x
    def outer(n):
        return sorted([1], key=key) if n == 0 else outer(n - 1)
    sys.stdout.flush()
    outer(3)
""")


def named(lines):
    """The frames of a backtrace that name a function, addresses off."""
    out = []
    for ln in lines:
        if "??" in ln or "_PyRuntime" in ln:
            continue
        ln = re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", ln.strip())
        at = re.search(r" (?:at|from) (\S+)$", ln)
        out.append(ln.split(" (")[0].split(" [")[0] +
                   (" " + at.group(1) if at else ""))
    return out


def test_native(t):
    """gdb and faulthandler see the same native frames as before."""
    x86_64(t)
    gdb = shutil.which("gdb")
    with open(sys.executable, "rb") as f:
        elf = f.read(4) == b"\x7fELF"
    if not gdb or not elf:
        t.skip_part("gdb", "gdb is not installed" if not gdb else
                    "%s is a script (gdb runs ELF programs)" %
                    sys.executable)
    else:
        bts = []
        for link in (False, True):
            path = os.path.join(t.scratch, "prog.py")
            with open(path, "w") as f:
                f.write(CRASH)
            env = dict(os.environ, JITRING_FP_LINK="1" if link else "0")
            p = subprocess.run(
                [gdb, "-batch", "-nx", "-ex", "set pagination off", "-ex",
                 "run", "-ex", "bt", "--args", sys.executable, path,
                 t.scratch, "gdb"], capture_output=True, text=True,
                env=env, timeout=300)
            bts.append(named(ln for ln in p.stdout.splitlines()
                             if ln.startswith("#")))
        if len(bts[0]) < 10:
            # No symbols, or frame pointers: gdb's walk then ends at
            # the first trampoline ("frame did not save the PC").
            t.skip_part("gdb", "gdb names only %d frames of %s by "
                        "default" % (len(bts[0]), sys.executable))
        else:
            t.check(bts[0] == bts[1],
                    "native: gdb's bt names the same %d native frames "
                    "with either set" % len(bts[0]), bts)
    if sys.version_info < (3, 14):
        t.skip_part("faulthandler", "no faulthandler.dump_c_stack before "
                    "3.14")
        return
    dumps = []
    for link in (False, True):
        p = child(t, CRASH, link, "faulthandler")
        dumps.append(named(ln for ln in p.stdout.splitlines()
                           if ln.startswith("  ")))
    t.check(dumps[0] and dumps[0] == dumps[1],
            "native: faulthandler's C stack the same with either set",
            dumps)


def test_deep(t):
    """The fp route records the 60-frame program whole."""
    x86_64(t)
    py, env = jrtest.record_python(t)
    p = subprocess.run([py, "-c", "import jitring.record.perf as m; "
                        "print(m.keeps_frame_pointers())"],
                       capture_output=True, text=True, env=env)
    if p.stdout.strip() != "True":
        t.skip("%s keeps no frame pointers (no fp route)" % py)
    sys.path.insert(0, HERE)
    from test_record import DEEP, deep_shares
    out = os.path.join(t.scratch, "deep")
    p = subprocess.run([py, "-m", "jitring", "record", "-o", out, "--",
                        DEEP, "20", "250"], capture_output=True, text=True,
                       env=dict(env, JITRING_FP_LINK="1"), timeout=600)
    if not t.check(p.returncode == 0, "deep: record", p.stderr[-1500:]):
        return
    mod, cut, _ = deep_shares(out, DEEP)
    t.check(cut <= 5 and mod >= 90,
            "deep, fp, linked: %.1f%% cut (at most 5), <module> %.1f%% "
            "(at least 90)" % (cut, mod), p.stdout[-2000:])


if __name__ == "__main__":
    jrtest.main(globals())
