# SPDX-License-Identifier: MIT
"""Under jitring, only the program's work and python's own tracebacks.

record runs from a venv whose .pth carries the package's autostart hook
(jrtest.hook_venv), as from an installed wheel.

 1. own work: `record` of a hello.py that imports nothing (a pure-Python
    loop in work()): no table row, no flame.html frame and no
    stacks.folded line holds a frame of jitring's package, its extension
    or threads, json, re, enum or runpy; work and <module> hold every
    sample with a Python frame; processes.jsonl's line (written without
    json) reads back with json, for an argument with quotes, a backslash,
    control and non-ASCII characters;
 2. tracebacks: a script that raises from a function, one with a syntax
    error, one whose sys.excepthook is its own, one whose hook fails, one
    that raises KeyboardInterrupt, one that calls sys.exit("message"), and
    a -m module that raises: `python -m jitring` prints exactly what
    python prints (stdout, stderr) and exits with its status; `record`
    too for the raising script and module, once its own summary lines
    are taken off its stdout.
Skips part 1 and the record cases (77 if nothing ran) where perf cannot
record here.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import jrtest

# A pure-Python loop until the process has run argv[1] seconds of CPU
# (os, which site has imported, reads it): about 300 samples at 999 Hz
# whatever the machine's speed or load (cpu-clock counts CPU time).
HELLO = textwrap.dedent("""
    def work(seconds):
        times = __import__("os").times
        end = sum(times()[:2]) + seconds
        s = 0
        while sum(times()[:2]) < end:
            for i in range(10000):
                s += i * i
        return s


    work(float(__import__("sys").argv[1]))
    print("hello")
""")

# Frames that are not the program's.
FOREIGN = re.compile(r"/jitring/|_jitring\.|libjitring|\bjitring_|\bjr_|"
                     r"runpy|/json/|/re/|/enum\.py|importlib")

SCRIPTS = {
    "raise.py": """
        print("before")
        def inner():
            raise ValueError("boom-123")
        def outer():
            inner()
        outer()
    """,
    "syntax.py": """
        print("never")
        def bad(:
            pass
    """,
    "hook.py": """
        import sys
        def hook(t, v, tb):
            n = 0
            while tb:
                n, tb = n + 1, tb.tb_next
            print("hook:", t.__name__, v, n, "frames", file=sys.stderr)
        sys.excepthook = hook
        def f():
            raise KeyError("k")
        f()
    """,
    "badhook.py": """
        import sys
        def hook(t, v, tb):
            raise OSError("the hook fails")
        sys.excepthook = hook
        raise KeyError("k")
    """,
    "interrupt.py": """
        def f():
            raise KeyboardInterrupt
        f()
    """,
    "exit.py": """
        import sys
        sys.exit("a message, status 1")
    """,
}

MODULE = """
    def boom():
        raise RuntimeError("from a module")
    print("module", __name__)
    boom()
"""


def table_rows(out):
    """The function column of both tables (not their line of samples
    with no Python frame)."""
    from jitring.output.tables import NO_PYTHON
    rows, on = [], False
    for line in out.splitlines():
        if line.startswith(("Hottest Python functions", "By self")):
            on = True
        elif on and not line.strip():
            on = False
        elif on:
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].endswith("%") and \
                    parts[2] != NO_PYTHON:
                rows.append(parts[2])
    return rows


def flame_names(path):
    """Every frame name (short and full) the flame graph's data holds,
    below its processes (whose names hold the interpreter's path)."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    m = re.search(r'<script type="application/json" id="jitring-data">'
                  r'(.*?)</script>', page, re.S)
    # Names are in the root's table; each node's n and f index it.
    root = json.loads(m.group(1)) if m else {}
    table = root.get("t", [])
    names, todo = [], []
    for proc in root.get("c", []):
        todo += proc.get("c", [])
    while todo:
        node = todo.pop()
        names += [table[node["n"]], table[node["f"]] if "f" in node else ""]
        todo += node.get("c", [])
    return names


def test_own(t, py, env, why):
    if why:
        t.skip_part("own work under record", why)
        return
    d = os.path.join(t.scratch, "own")
    os.mkdir(d)
    with open(os.path.join(d, "hello.py"), "w") as f:
        f.write(HELLO)
    out = os.path.join(d, "rec")
    arg = 'q"b\\s\x01\ttab é \u20ac \U0001f600'
    p = subprocess.run([py, "-m", "jitring", "record", "-o", out, "--",
                        "hello.py", "0.3", arg], capture_output=True,
                       text=True, env=env, cwd=d, timeout=300)
    if not t.check(p.returncode == 0 and "hello" in p.stdout,
                   "record of hello.py: status 0, its output",
                   p.stdout[-800:] + p.stderr[-800:]):
        return
    rows = table_rows(p.stdout)
    t.check(rows and set(rows) == {"work:hello.py", "<module>:hello.py"},
            "the tables hold work and <module> and nothing else", rows)
    names = flame_names(os.path.join(out, "flame.html"))
    bad = sorted({n for n in names if FOREIGN.search(n)})
    t.check(names and not bad, "no flame.html frame of jitring, json, "
            "re, enum, runpy or importlib", bad[:8])
    bad, py_n, mine = [], 0, 0
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            stack, n = line.rsplit(" ", 1)
            frames = stack.split(";")[1:]      # the process first
            if FOREIGN.search(";".join(frames)):
                bad.append(line.strip())
            pyf = [s for s in frames if s.startswith("py::")]
            if pyf:
                py_n += int(n)
                if all(s.endswith("/hello.py") and
                       s.split(":")[2] in ("work", "<module>")
                       for s in pyf):
                    mine += int(n)
    t.check(not bad, "no stacks.folded line with jitring, json, re, enum, "
            "runpy or importlib frames", bad[:4])
    t.check(py_n >= 50 and mine == py_n,
            "work and <module> hold all the %d samples with a Python "
            "frame (at least 50)" % py_n, "%d of %d" % (mine, py_n))
    try:
        with open(os.path.join(out, "processes.jsonl")) as f:
            lines = [json.loads(line) for line in f]
    except (OSError, ValueError) as e:
        lines = e
    t.check(isinstance(lines, list) and len(lines) == 1 and
            lines[0]["argv"][-2:] == ["0.3", arg],
            "processes.jsonl: one line, json reads its argv back", lines)


def strip_summary(out):
    """record's stdout without its own lines: the summary it prints after
    the program's output, from the first of its lines on."""
    m = re.search(r"^\n(?:\d+ samples of |jitring record: no samples)",
                  out, re.M)
    return out[:m.start()] if m else out


def test_tracebacks(t, py, env, why):
    record = not why
    d = os.path.join(t.scratch, "tb")
    os.mkdir(d)
    for name, text in SCRIPTS.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(textwrap.dedent(text))
    pkg = os.path.join(d, "pkg")
    os.mkdir(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "boommod.py"), "w") as f:
        f.write(textwrap.dedent(MODULE))
    cases = [[name] for name in SCRIPTS] + [["-m", "pkg.boommod"]]
    for prog in cases:
        plain = subprocess.run([py] + prog, capture_output=True, text=True,
                               env=env, cwd=d, timeout=60)
        forms = [("python -m jitring", ["-m", "jitring"])]
        if record and prog[0] in ("raise.py", "-m"):
            forms.append(("record", ["-m", "jitring", "record", "-o",
                                     os.path.join(d, "rec"), "--force",
                                     "--"]))
        for form, pre in forms:
            p = subprocess.run([py] + pre + prog, capture_output=True,
                               text=True, env=env, cwd=d, timeout=300)
            stdout = strip_summary(p.stdout) if form == "record" \
                else p.stdout
            t.check(p.returncode == plain.returncode and
                    p.stderr == plain.stderr and stdout == plain.stdout,
                    "%s %s: python's traceback and status (%d)"
                    % (form, " ".join(prog), plain.returncode),
                    "status %d, stderr:\n%s\nplain python's:\n%s"
                    % (p.returncode, p.stderr, plain.stderr))


def fixture(t):
    """(py, env, why): the interpreter record runs from, its environment,
    and why perf cannot record here (None where it can)."""
    import jitring
    site = os.path.dirname(os.path.dirname(os.path.abspath(
        jitring.__file__)))
    if os.path.exists(os.path.join(site, "jitring-autostart.pth")):
        py = sys.executable         # an installed wheel, its .pth active
    else:
        py = jrtest.hook_venv(t, True)
    env = dict(os.environ, HOME=t.scratch)
    for k in ("JITRING_PROFILE", "PYTHONPATH", "JITRING_RECORD_PROCS",
              "JITRING_DIR"):
        env.pop(k, None)
    return py, env, jrtest.perf_usable()


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
