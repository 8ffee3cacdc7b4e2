# SPDX-License-Identifier: MIT
"""$JITRING_PROFILE: profiling from interpreter start, in a tree of processes.

A venv of the interpreter under test gets a .pth file that puts the
package on sys.path and holds the line the installed package's
jitring-autostart.pth holds (so the test runs against this build).  A
parent started with JITRING_PROFILE=1 starts a child with subprocess and
one with multiprocessing's spawn method: each process writes its own
valid jit-<pid>.dump naming its own function, and only its own.  Unset
(and set to 0), no process writes a dump.  Also: the hook's cost at
start-up when unset, against the same venv without it (printed).
"""

import os
import subprocess
import sys
import textwrap
import time

import jrtest

import jitring

HERE = os.path.dirname(os.path.abspath(__file__))
PTH = os.path.join(HERE, "..", "jitring-autostart.pth")

TREE = textwrap.dedent("""
    import multiprocessing as mp, os, subprocess, sys
    def spawned_child_fn():
        return sum(range(1000))
    def parent_fn():
        return 1
    if __name__ == "__main__":
        parent_fn()
        subprocess.run([sys.executable, "-c",
                        "def subprocess_child_fn():\\n    return 2\\n"
                        "subprocess_child_fn()"], check=True)
        ctx = mp.get_context("spawn")
        p = ctx.Process(target=spawned_child_fn)
        p.start()
        p.join()
        print(os.getpid(), p.pid, p.exitcode)
""")


def venv(t, with_hook):
    d = os.path.join(t.scratch, "venv-hook" if with_hook else "venv-plain")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", d],
                   check=True)
    py = os.path.join(d, "bin", "python")
    site = subprocess.run([py, "-c", "import sysconfig; "
                           "print(sysconfig.get_path('platlib'))"],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(
        jitring.__file__)))
    lines = [pkg]
    if with_hook:
        with open(PTH) as f:
            lines.append(f.read().strip())
    with open(os.path.join(site, "jitring-test.pth"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return py


def run_tree(t, py, value, d):
    env = dict(os.environ, JITRING_DIR=d)
    env.pop("PYTHONPATH", None)     # the venv's .pth finds the package
    env.pop("JITRING_PROFILE", None)
    if value is not None:
        env["JITRING_PROFILE"] = value
    script = os.path.join(t.scratch, "tree.py")
    with open(script, "w") as f:
        f.write(TREE)
    return subprocess.run([py, script], capture_output=True, text=True,
                          env=env, timeout=120)


def startup_ms(py, env, n=20):
    best = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([py, "-c", "pass"], env=env, check=True)
        best.append(time.perf_counter() - t0)
    best.sort()
    return 1000 * best[len(best) // 2]


def main(t):
    if not os.path.exists(PTH):
        t.skip("no python/jitring-autostart.pth in this tree")
    py = venv(t, True)
    d = os.path.join(t.scratch, "on")
    os.mkdir(d)
    p = run_tree(t, py, "1", d)
    if not t.check(p.returncode == 0, "the tree ran with JITRING_PROFILE=1",
                   p.stderr[-800:]):
        return
    parent, child, code = p.stdout.split()
    t.check(code == "0", "the spawn child exited 0")
    files = jrtest.dumps(d)
    t.check(len(files) >= 3, "a dump per process (parent, subprocess, "
            "spawn child and its resource tracker): %d"
            % len(files), files)
    names = {}
    for f in files:
        ok, out = jrtest.check_dump(f)
        t.check(ok, "%s valid" % os.path.basename(f), out)
        pid = os.path.basename(f)[4:-5]
        names[pid] = [n.split(":")[2] for n in jrtest.load_names(f)
                      if n.startswith("py::")]
    own = {"parent_fn": parent, "spawned_child_fn": child}
    for fn, pid in own.items():
        t.check(fn in names.get(pid, []), "%s is in process %s's dump"
                % (fn, pid))
        others = [q for q, ns in names.items() if q != pid and fn in ns]
        t.check(not others, "%s in no other process's dump" % fn, others)
    sub = [q for q, ns in names.items() if "subprocess_child_fn" in ns]
    t.check(len(sub) == 1 and sub[0] not in (parent, child),
            "the subprocess child's function in its own dump only", sub)

    for value in (None, "0"):
        off = os.path.join(t.scratch, "off-%s" % value)
        os.mkdir(off)
        p = run_tree(t, py, value, off)
        t.check(p.returncode == 0 and not jrtest.dumps(off),
                "JITRING_PROFILE %s: no dump" %
                ("unset" if value is None else "=" + value),
                p.stderr[-300:] + str(jrtest.dumps(off)))

    plain = venv(t, False)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("JITRING_PROFILE", None)
    a, b = startup_ms(plain, env), startup_ms(py, env)
    print("start-up with the hook installed and JITRING_PROFILE unset: "
          "%.2f ms against %.2f ms without it (median of 20)" % (b, a))


if __name__ == "__main__":
    jrtest.Test().run(main)
