# SPDX-License-Identifier: MIT
"""The outputs of a profile (jitring.record.finish's writers, no perf).

Samples as perf script gives them (leaf first, the interpreter's eval
loop between the Python frames) through summarize() into a Profile,
then each writer of WRITERS into a folder of its own:

  summary   summarize()'s named rows: processes, functions (total and
            self), the cut statistics; they still unpack as tuples
  folded    stacks.folded: a line per program stack, root first, sorted,
            the interpreter's frames under the innermost Python frame
            left out; the counts add up to the samples
  page      flame.html: its tree holds every stack with its count (the
            interpreter's frames kept), its title and subtitle say what
            was recorded
  tables    the process table and the functions' tables by total and by
            self, in their order, with the no-Python-frame line; the
            shares add up; --top cuts them; more processes than fit
            are said; no samples and no Python frame each said
  notes     jitring's own samples, cut stacks, samples before the window,
            where the files are, perf report's command, the exit status;
            the browser opened where asked, said where none is found
  waits     record --wait's tables after the CPU's, the waits' page in
            the notes
  table     WRITERS: file writers claim files finish() makes again
            (OUTPUTS); in finish()'s order, their stdout is the tables
            then the notes
  meta      read_meta() gives a Meta: a property per key, its default
            where absent, a key it does not know kept when written back
"""

import contextlib
import io
import json
import os
import re
import time

import jrtest
from jitring.common.errors import RecordError
from jitring.common.folder import META, OUTPUTS, read_meta, write_meta
from jitring.common.meta import Meta
from jitring.output import WRITERS
from jitring.output.flame import FlamePage
from jitring.output.folded import FoldedFile
from jitring.output.notes import Notes
from jitring.output.tables import NO_PYTHON, Tables
from jitring.output.waits import WaitFlame, WaitFolded, WaitTables
from jitring.profile.aggregate import summarize
from jitring.profile.cuts import CUT
from jitring.profile.model import Profile, Sample


PY = "/opt/py/bin/python3.13t"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
EVAL = ("_PyEval_EvalFrameDefault", PY)
# A thread's first frames, leaf first: the interpreter's main under libc.
START = [("Py_RunMain", PY), ("main", PY), ("__libc_start_main", LIBC),
         ("_start", PY)]
A, B = "/app/a.py", "/app/b.py"


def py(name, path=A):
    return "py::%s:%s" % (name, path)


def stack(names, path=A, leaf=(), start=START):
    """Leaf-first frames of the Python functions @names (root first, of
    @path), each with its eval loop, @leaf's native frames at the leaf,
    the thread's start at the root."""
    frames = list(leaf)
    for name in reversed(names):
        frames += [EVAL, (py(name, path), "")]
    return tuple(frames + [EVAL] + list(start))


# (pid, comm, frames, samples)
STACKS = [
    # work() at work, an attribute lookup of the interpreter's under it.
    (42, "python3.13t", stack(["<module>", "main", "work"],
                              leaf=[("PyObject_GetAttr", PY)]), 6),
    # helper() called by work(), in libc's memcpy.
    (42, "python3.13t", stack(["<module>", "main", "work", "helper"],
                              leaf=[("memcpy", LIBC)]), 3),
    (42, "python3.13t", stack(["<module>", "main"]), 1),
    # No Python frame: the interpreter's finalization.
    (42, "python3.13t", (("_PyGC_Fini", PY), ("Py_FinalizeEx", PY)) +
     tuple(START), 2),
    # A forked process's.
    (43, "python3.13t", stack(["<module>", "child"], path=B), 4),
    # A cut stack: it stops in work(), no thread start below.
    (42, "python3.13t", (EVAL, (py("helper"), ""), EVAL, (py("work"), "")),
     1),
    # jitring's flush thread: its own work, left out.
    (42, "jitring-flush", (("write", LIBC),) + tuple(START), 2),
]
PROCS = {42: {"pid": 42, "argv": ["/opt/py/bin/python3.13t", "a.py"]},
         43: {"pid": 43, "argv": ["python3.13t", "b.py", "x"],
              "how": "fork", "ppid": 42}}
P42 = "python3.13t a.py [42]"
P43 = "python3.13t b.py x (fork of 42) [43]"
META_OF = {"command": ["a.py"], "cwd": "/app", "event": "cpu-clock",
           "freq": 999, "started": 0, "call_graph": "dwarf",
           "stack_size": 8192, "pid": 42, "status": 0}
# The program's samples (jitring's own left out), and the no-Python ones.
TOTAL, NOPY = 17, 2


def samples(stacks=STACKS):
    got = []
    for i, (pid, comm, frames, n) in enumerate(stacks):
        got += [Sample(pid, comm, frames, pid, 1000 * i + j, "cpu-clock")
                for j in range(n)]
    return got


def profile(t, name, meta=None, stacks=STACKS, procs=PROCS, **view):
    """The Profile of @stacks, its folder a new one in the scratch."""
    out = os.path.join(t.scratch, name)
    os.mkdir(out)
    return Profile(out, dict(META_OF, **(meta or {})),
                   summarize(samples(stacks), procs, None), **view)


def printed(writer, p):
    """What @writer prints of @p: (stdout, stderr)."""
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        writer.write(p)
    return o.getvalue(), e.getvalue()


def folded_lines(path):
    with open(path) as f:
        return [line.rstrip("\n").rpartition(" ") for line in f]


def page_stacks(path):
    """{stack (root first, the process first): samples} of flame.html's
    tree: each node's own samples (its count less its children's)."""
    with open(path) as f:
        page = f.read()
    m = re.search(r'<script type="application/json" id="jitring-data">'
                  r'(.*?)</script>', page, re.S)
    root = json.loads(m.group(1))
    names = root["t"]
    got = {}
    todo = [(c, ()) for c in root.get("c", ())]
    while todo:
        node, above = todo.pop()
        path = above + (names[node.get("f", node["n"])],)
        kids = node.get("c", ())
        own = node["v"] - sum(c["v"] for c in kids)
        if own:
            got[path] = own
        todo += [(c, path) for c in kids]
    return page, root["v"], got


def test_summary(t):
    s = summarize(samples(), PROCS, None)
    t.check(s.total == TOTAL and
            s.processes == [(13, 42, "python3.13t a.py"),
                            (4, 43, "python3.13t b.py x (fork of 42)")],
            "summary: the processes, most samples first, named by "
            "processes.jsonl's argv", (s.total, s.processes))
    t.check(s.processes[0].samples == 13 and s.processes[0].pid == 42 and
            s.processes[1].command == "python3.13t b.py x (fork of 42)",
            "summary: a process row's fields by name", s.processes)
    rows = {r.name: (r.total, r.self) for r in s.functions}
    want = {py("<module>"): (10, 0), py("main"): (10, 1),
            py("work"): (10, 6), py("helper"): (4, 4),
            py("<module>", B): (4, 0), py("child", B): (4, 4)}
    t.check(rows == want, "summary: each function's total (on the stack) "
            "and self (innermost)", rows)
    t.check(sum(r.self for r in s.functions) + NOPY == TOTAL,
            "summary: the self counts and the no-Python samples add up to "
            "the total")
    t.check(s.cut == (TOTAL, 1, 0, 2) and s.cut.samples == TOTAL and
            s.cut.cut == 1 and s.cut.deep == 0 and s.cut.own == 2,
            "summary: the cut statistics (one cut stack, not at perf's "
            "limit; two samples of jitring's own)", s.cut)
    folded, per, total, rows, cut = s
    t.check(folded is s.folded and per is s.processes and
            rows is s.functions and cut is s.cut and total == TOTAL,
            "summary: unpacks as the 5-tuple it was")


def test_folded(t):
    p = profile(t, "folded")
    FoldedFile().write(p)
    lines = folded_lines(os.path.join(p.out, "stacks.folded"))
    keys = [k for k, _, _ in lines]
    t.check(keys == sorted(keys) and len(set(keys)) == len(keys),
            "folded: one line per stack, sorted", keys)
    got = {k: int(n) for k, _, n in lines}
    base = ";".join([P42, py("<module>"), py("main")])
    want = {
        base + ";" + py("work"): 6,
        base + ";" + py("work") + ";" + py("helper") +
        ";memcpy [libc.so.6]": 3,
        base: 1,
        P42 + ";_start [python3.13t];__libc_start_main [libc.so.6];"
        "main [python3.13t];Py_RunMain [python3.13t];"
        "Py_FinalizeEx [python3.13t];_PyGC_Fini [python3.13t]": 2,
        ";".join([P43, py("<module>", B), py("child", B)]): 4,
        ";".join([P42, CUT, py("work"), py("helper")]): 1,
    }
    t.check(got == want, "folded: the program stacks, root first under "
            "their process; the interpreter's frame under work() left "
            "out, libc's kept; the cut stack under its marker",
            sorted(got.items()))
    t.check(sum(got.values()) == TOTAL, "folded: the counts add up to the "
            "samples", sum(got.values()))


def test_page(t):
    p = profile(t, "page")
    FlamePage().write(p)
    page, total, got = page_stacks(os.path.join(p.out, "flame.html"))
    want = {tuple(k): n for k, n in p.stacks()}
    t.check(total == TOTAL and got == want, "page: the tree holds every "
            "stack with its count", (total, sorted(got.items())))
    work = (P42, py("<module>"), py("main"), py("work"),
            "PyObject_GetAttr [python3.13t]")
    t.check(got.get(work) == 6, "page: the interpreter's frame under "
            "work() kept", sorted(got))
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(0))
    t.check("jitring: a.py" in page and
            "17 samples of cpu-clock at 999 Hz, %s" % when in page,
            "page: title and subtitle say the command, the samples, the "
            "event and its frequency")


def table_rows(text, title):
    """The rows (total %, self %, function) of the table under @title."""
    lines = text.split("\n")
    i = next(i for i, l in enumerate(lines) if l.startswith(title))
    rows = []
    for line in lines[i + 2:]:
        m = re.match(r"^ *([\d.]+)% +([\d.]+)%  (.*)$", line)
        if not m:
            break
        rows.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    return rows


def test_tables(t):
    p = profile(t, "tables")
    text, err = printed(Tables(), p)
    lines = text.split("\n")
    t.check(lines[:5] == ["", "17 samples of cpu-clock at 999 Hz in 2 "
                          "processes:",
                          "     pid  samples  command",
                          "      42    76.5%  python3.13t a.py",
                          "      43    23.5%  python3.13t b.py x (fork "
                          "of 42)"] and not err,
            "tables: the samples, event and frequency, a line a process "
            "with its share", lines[:5])
    by_total = table_rows(text, "Hottest Python functions by total")
    names = [n for _, _, n in by_total]
    t.check(names == ["work:a.py", "main:a.py", "<module>:a.py",
                      "child:b.py", "helper:a.py", "<module>:b.py",
                      NO_PYTHON],
            "tables: by total, most first (then by self, then by name), "
            "files relative to the program's folder, the no-Python line "
            "last", names)
    by_self = table_rows(text, "By self")
    t.check([n for _, _, n in by_self] ==
            ["work:a.py", "child:b.py", "helper:a.py", "main:a.py",
             NO_PYTHON], "tables: by self, the functions with samples of "
            "their own", by_self)
    share = sum(s for _, s, _ in by_self)
    t.check(abs(share - 100.0) <= 0.05 * len(by_self), "tables: the self "
            "column adds up to 100%", share)
    t.check(by_total[0][:2] == (58.8, 35.3) and
            by_total[-1][:2] == (11.8, 11.8), "tables: the shares of all "
            "samples", by_total)
    top = profile(t, "tables-top", top=2)
    text, _ = printed(Tables(), top)
    t.check([n for _, _, n in table_rows(text, "Hottest")] ==
            ["work:a.py", "main:a.py", NO_PYTHON] and
            [n for _, _, n in table_rows(text, "By self")] ==
            ["work:a.py", "child:b.py", NO_PYTHON],
            "tables: --top 2 keeps two functions a table", text)


def test_tables_edges(t):
    many = [(100 + i, "python3.13t", stack(["<module>"]), 10 - i)
            for i in range(10)]
    p = profile(t, "tables-many", stacks=many, procs={}, top=3)
    text, _ = printed(Tables(), p)
    lines = text.split("\n")
    t.check(len([l for l in lines if re.match(r"^ +1\d\d +", l)]) == 8 and
            "                   (2 more in %s)"
            % os.path.join(p.out, "stacks.folded") in lines,
            "tables: 8 processes at least, the rest said with where they "
            "are", text)
    t.check("     100    18.2%  python3.13t (without jitring)" in lines,
            "tables: a process with no record in processes.jsonl", lines)
    p = profile(t, "tables-none", stacks=[])
    text, _ = printed(Tables(), p)
    t.check(text == "\njitring record: no samples (did the program run "
            "long enough?)\n", "tables: no samples said", text)
    p = profile(t, "tables-nopy", stacks=[STACKS[3]])
    text, _ = printed(Tables(), p)
    t.check(text.endswith("\nno sample has a Python function on its "
                          "stack\n") and "in 1 process:" in text,
            "tables: no Python frame said", text)


def test_notes(t):
    p = profile(t, "notes", meta={"status": 3})
    p.early = 5
    text, err = printed(Notes(), p)
    out = p.out
    want = [
        "",
        "2 samples of jitring's own work (its start, stop and "
        "bookkeeping in the program's processes) left out.",
        "5.9%% of samples have a cut stack (%s at the root of the flame "
        "graph): the totals of the outer functions are too low by up to "
        "that share." % CUT,
        "  dwarf mode copied 8192 bytes of each sample's stack; record "
        "with --stack-size 32768 for deeper stacks (perf.data grows with "
        "it)",
        "5 samples from before jitring started in process 42 (perf is on "
        "first, to see the start) left out",
        "flame graph: %s/flame.html" % out,
        "perf report: perf --buildid-dir /dev/null report -i "
        "%s/perf.data --children --sort sym" % out,
        "stacks:      %s/stacks.folded (folded)" % out,
        "(the program exited with status 3)",
        ""]
    t.check(text.split("\n") == want and not err, "notes: own samples, "
            "the cut stacks and what records them whole, the samples "
            "before the window, the files, perf report's command, the "
            "exit status", text)
    p = profile(t, "notes-jit", meta={"keep_debug": True,
                                      "perf_script": True})
    with open(os.path.join(p.out, "perf.jit.data"), "w"):
        pass
    text, _ = printed(Notes(), p)
    lines = text.split("\n")
    t.check("perf report: perf report -i %s/perf.jit.data --children "
            "--sort sym" % p.out in lines and
            "stacks:      %s/stacks.folded (folded), %s/perf.script.txt "
            "(perf script)" % (p.out, p.out) in lines and
            not any(l.startswith(("(the program", "5 samples"))
                    for l in lines),
            "notes: perf.jit.data once injected, the build-id cache kept, "
            "perf.script.txt kept; status 0 and no early samples unsaid",
            text)


def test_browser(t):
    import webbrowser
    p = profile(t, "browser", browser=True, prog="report")
    opened = []
    was = webbrowser.open
    webbrowser.open = lambda url: opened.append(url) or False
    try:
        text, err = printed(Notes(), p)
    finally:
        webbrowser.open = was
    html = os.path.join(p.out, "flame.html")
    t.check(opened == ["file://" + html], "browser: the flame graph "
            "opened", opened)
    t.check(err == "jitring report: no web browser found; open %s\n" % html,
            "browser: none found, said with the page's path", err)
    opened.clear()
    printed(Notes(), profile(t, "no-browser"))
    t.check(not opened, "browser: not opened unless asked")


def test_waits(t):
    p = profile(t, "waits", top=7)
    waits = [w for w in WRITERS
             if isinstance(w, (WaitFolded, WaitFlame, WaitTables))]
    t.check(len(waits) == 3 and not any(w.wanted(p) for w in waits) and
            printed(Notes(), p)[0].find("flame-wait.html") < 0,
            "waits: no wait output without record --wait")
    p.waits = object()      # what jitring.wait.waits.Waits.read() gives
    t.check(all(w.wanted(p) for w in waits),
            "waits: the wait outputs apply to a recording with waits")
    text, _ = printed(Notes(), p)
    t.check("waits:       %s/flame-wait.html" % p.out in text.split("\n"),
            "waits: the notes give the waits' page", text)


def test_table(t):
    names = [w.name for w in WRITERS]
    t.check(names == ["folded", "flame", "stacks-wait", "flame-wait",
                      "tables", "wait-tables", "notes"],
            "table: WRITERS in order", names)
    files = [f for w in WRITERS for f in w.files]
    t.check(files and set(files) <= set(OUTPUTS) and
            len(files) == len(set(files)), "table: each file a writer "
            "writes is one finish() claims and makes again", files)
    p = profile(t, "table")
    got = io.StringIO()
    with contextlib.redirect_stdout(got):
        for w in WRITERS:
            if w.files and w.wanted(p):
                w.write(p)
        for w in WRITERS:
            if not w.files and w.wanted(p):
                w.write(p)
    written = sorted(os.listdir(p.out))
    t.check(written == sorted(f for w in WRITERS if w.wanted(p)
                              for f in w.files),
            "table: the files written are the writers' (no waits here)",
            written)
    want = printed(Tables(), p)[0] + printed(Notes(), p)[0]
    t.check(got.getvalue() == want, "table: stdout is the tables, then "
            "the notes", got.getvalue())


def test_meta(t):
    out = os.path.join(t.scratch, "meta")
    os.mkdir(out)
    data = {"version": 1, "command": ["a.py", "x"], "freq": 99,
            "call_graph": "fp", "attached": True, "pid": 7,
            "from_a_later_version": {"k": [1, 2]}}
    with open(os.path.join(out, META), "w") as f:
        json.dump(data, f, indent=1)
    m = read_meta(out)
    t.check(isinstance(m, Meta) and isinstance(m, dict) and m == data,
            "meta: read_meta() gives a Meta, a dict of the file", m)
    t.check((m.command, m.freq, m.call_graph, m.attached, m.pid) ==
            (["a.py", "x"], 99, "fp", True, 7) and
            m.get("freq") == 99, "meta: a property per key, as get() "
            "reads it")
    t.check((m.event, m.started, m.inject, m.live_segments, m.status,
             m.max_stack) == ("cpu-clock", 0, "reduced", 0, None, None),
            "meta: the defaults where absent")
    m.exec_fixed = True
    m.live_segments, m.live_failed = 3, "why"
    write_meta(out, m)
    with open(os.path.join(out, META)) as f:
        text = f.read()
    want = dict(data, exec_fixed=True, live_segments=3, live_failed="why")
    t.check(text == json.dumps(want, indent=1), "meta: properties set "
            "keys; written back, a key it does not know is kept, in "
            "order", text)
    with open(os.path.join(out, META), "w") as f:
        f.write("[1]")
    try:
        read_meta(out)
        t.check(False, "meta: a file that holds no object is refused")
    except RecordError as e:
        t.check("holds no object" in str(e), "meta: a file that holds no "
                "object is refused", e)
    p = Profile(out, {"event": "cycles"}, summarize([], {}, None))
    t.check(isinstance(p.meta, Meta) and p.meta.event == "cycles",
            "meta: a Profile of a plain dict has a Meta")


if __name__ == "__main__":
    jrtest.main(globals())
