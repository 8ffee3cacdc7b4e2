# SPDX-License-Identifier: MIT
"""python -m jitring record and check, end to end through real perf.

 1. record of a 2-thread script (tests/perf_prog.py): exit 0; the table
    names py::hot_a and py::hot_b with most of the self samples and
    py::worker with children; stacks.folded has chains root first with
    worker before hot_*; perf.script.txt and perf.jit.data are there; the
    jitted images stay out of ~/.debug ($HOME is the scratch directory);
 2. record -m module, and the program's exit status passed through;
 3. a missing perf and a perf whose record is refused: a message naming
    the cause, exit 2, no traceback;
 4. check: 0 for the recording's dump, non-zero for a damaged copy.
Skips (77) where perf cannot record here.
"""

import os
import shutil
import subprocess
import sys

import jrtest

HERE = os.path.dirname(os.path.abspath(__file__))


def perf_usable():
    perf = shutil.which("perf")
    if not perf:
        return "perf is not installed"
    p = subprocess.run([perf, "record", "-e", "cpu-clock", "-o",
                        os.devnull, "true"], capture_output=True, text=True)
    if p.returncode != 0:
        return "'perf record -e cpu-clock true' fails: " + \
            p.stderr.strip()[-200:]
    return None


def jr(args, env=None, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "jitring"] + args,
                          capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def table(out):
    """{function: (total %, self %)} from the printed table."""
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("%") and \
                parts[1].endswith("%"):
            rows[parts[2]] = (float(parts[0][:-1]), float(parts[1][:-1]))
    return rows


def test_script(t, env):
    out = os.path.join(t.scratch, "rec")
    prog = os.path.join(HERE, "perf_prog.py")
    p = jr(["record", "-o", out, "--", prog, "2", "2"], env=env)
    if not t.check(p.returncode == 0, "record exits 0",
                   p.stderr[-800:]):
        return None
    rows = table(p.stdout)
    hot = {n: v for n, v in rows.items()
           if n.startswith(("hot_a:", "hot_b:"))}
    t.check(len(hot) == 2 and sum(v[1] for v in hot.values()) > 50,
            "the table names hot_a and hot_b with most self samples",
            p.stdout[-1500:])
    worker = [v for n, v in rows.items() if n.startswith("worker:")]
    t.check(worker and worker[0][0] > 50 and worker[0][1] < 10,
            "worker: most samples with children, few of its own", worker)
    for f in ("perf.data", "perf.jit.data", "perf.script.txt",
              "stacks.folded"):
        t.check(os.path.getsize(os.path.join(out, f)) > 0, f + " written")
    chains = 0
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            frames = line.rsplit(" ", 1)[0].split(";")
            py = [x for x in frames if x.startswith("py::")]
            if any(x.startswith("py::hot_") for x in py):
                w = [i for i, x in enumerate(py)
                     if x.startswith("py::worker:")]
                h = [i for i, x in enumerate(py)
                     if x.startswith("py::hot_")]
                if w and h and w[0] < h[0]:
                    chains += int(line.rsplit(" ", 1)[1])
    t.check(chains > 0, "stacks.folded: root first, py::worker above "
            "py::hot_* (%d samples)" % chains)
    t.check(not os.path.exists(os.path.join(env["HOME"], ".debug")),
            "nothing written to ~/.debug")
    dumps = jrtest.dumps(out)
    t.check(len(dumps) == 1, "one dump in the output directory", dumps)
    return dumps[0] if dumps else None


def test_module_and_status(t, env):
    mod = os.path.join(t.scratch, "pkg")
    os.mkdir(mod)
    with open(os.path.join(mod, "spin.py"), "w") as f:
        f.write("import sys\n"
                "def spin(n):\n"
                "    s = 0\n"
                "    for i in range(n):\n"
                "        s += i\n"
                "    return s\n"
                "spin(3000000)\n"
                "sys.exit(int(sys.argv[1]))\n")
    out = os.path.join(t.scratch, "rec-m")
    p = jr(["record", "-o", out, "-F", "499", "-m", "spin", "3"], env=env,
           cwd=mod)
    t.check(p.returncode == 3, "record -m module: the program's exit "
            "status (3) passed through", p.stderr[-500:])
    t.check("spin:" in p.stdout, "record -m module names its function",
            p.stdout[-800:])


def test_bad_perf(t, env):
    nobin = os.path.join(t.scratch, "nobin")
    os.mkdir(nobin)
    os.symlink(sys.executable, os.path.join(nobin, "python3"))
    e = dict(env, PATH=nobin)
    p = jr(["record", "-o", os.path.join(t.scratch, "r1"), "x.py"], env=e)
    t.check(p.returncode == 2 and "perf not found" in p.stderr and
            "Traceback" not in p.stderr,
            "no perf: a message and exit 2", p.stderr[-300:])
    fake = os.path.join(t.scratch, "fakebin")
    os.mkdir(fake)
    with open(os.path.join(fake, "perf"), "w") as f:
        f.write("#!/bin/sh\n"
                "[ \"$1\" = --version ] && { echo 'perf version 6.1'; "
                "exit 0; }\n"
                "echo 'Error:' >&2\n"
                "echo 'Access to performance monitoring and observability "
                "operations is limited.' >&2\n"
                "echo 'perf_event_open(..., 0) failed unexpectedly with "
                "error 13 (Permission denied)' >&2\n"
                "exit 255\n")
    os.chmod(os.path.join(fake, "perf"), 0o755)
    e = dict(env, PATH=fake + os.pathsep + env.get("PATH", ""))
    p = jr(["record", "-o", os.path.join(t.scratch, "r2"), "x.py"], env=e)
    t.check(p.returncode == 2 and "could not profile" in p.stderr and
            "Permission denied" in p.stderr and
            "Traceback" not in p.stderr,
            "a refused perf record: perf's reason and exit 2",
            p.stderr[-400:])


def test_check(t, env, dump):
    p = jr(["check", dump], env=env)
    t.check(p.returncode == 0, "check: the recording's dump is valid",
            p.stdout[-300:] + p.stderr[-300:])
    bad = os.path.join(t.scratch, "bad.dump")
    with open(dump, "rb") as f:
        data = bytearray(f.read())
    data[40 + 4:40 + 8] = b"\0\0\0\0"   # the first record's size
    with open(bad, "wb") as f:
        f.write(data)
    p = jr(["check", bad], env=env)
    t.check(p.returncode != 0, "check: a damaged dump fails")


def main(t):
    why = perf_usable()
    if why:
        t.skip(why)
    env = dict(os.environ, HOME=t.scratch)
    env.pop("JITRING_PROFILE", None)
    dump = test_script(t, env)
    test_module_and_status(t, env)
    test_bad_perf(t, env)
    if dump:
        test_check(t, env, dump)


if __name__ == "__main__":
    jrtest.Test().run(main)
