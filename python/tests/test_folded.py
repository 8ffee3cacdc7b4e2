# SPDX-License-Identifier: MIT
"""What record's stacks.folded holds (jitring.record.finish, no perf).

Samples as perf script gives them (leaf first, the interpreter's eval
loop and call machinery between the Python frames) through summarize()
and the writers of stacks.folded and flame.html, as record finishes
them:

  lean      stacks.folded leaves out the interpreter's native frames under
            the innermost Python frame (python*, libpython*), their
            samples that function's own; the frames of other files under
            it (libc, an extension, the kernel) stay, in order; stacks
            that differ only there are one line, their counts added
  whole     every sample is in stacks.folded, each Python function with
            its share, the same as the tables'; a stack with no Python
            frame keeps its interpreter frames
  page      flame.html keeps the interpreter's frames
"""

import json
import os
import re

import jrtest
from jitring.output.flame import FlamePage
from jitring.output.folded import FoldedFile
from jitring.profile.aggregate import summarize
from jitring.profile.model import Profile

PY = "/opt/py/bin/python3.13t"
LIBPY = "/opt/py/lib/libpython3.13t.so.1.0"
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
EXT = "/opt/py/lib/_fast.cpython-313t.so"
KERNEL = "[kernel.kallsyms]"

# The outer part of every Python stack, leaf first: run() called by
# <module>, each through the eval loop, under the interpreter's start.
OUTER = [("_PyEval_EvalFrameDefault", PY), ("py::run:/app/a.py", ""),
         ("_PyEval_EvalFrameDefault", PY), ("_PyObject_Call", PY),
         ("py::<module>:/app/a.py", ""), ("_PyEval_EvalFrameDefault", PY),
         ("Py_RunMain", PY), ("main", PY),
         ("__libc_start_main", LIBC), ("_start", PY)]

STACKS = [
    # run() at work in its own bytecode: an attribute lookup, twice
    # (two lookups' frames), then a call into the allocator.
    ([("find_name_in_mro", PY), ("_PyType_LookupRef", PY),
      ("PyObject_GetAttr", PY)] + OUTER, 5),
    ([("_PyObject_GenericGetAttrWithDict", PY),
      ("PyObject_GetAttr", PY)] + OUTER, 3),
    ([("_mi_malloc", LIBPY), ("PyObject_Malloc", LIBPY)] + OUTER, 2),
    # memcpy in libc under the interpreter's call into it, a page fault
    # under that.
    ([("asm_exc_page_fault", KERNEL), ("memcpy", LIBC),
      ("PyBytes_FromStringAndSize", PY)] + OUTER, 4),
    # an extension's function, called through vectorcall.
    ([("fast_sum", EXT), ("cfunction_vectorcall_FASTCALL", PY),
      ("PyObject_Vectorcall", PY)] + OUTER, 6),
    # no Python frame: the interpreter's finalization.
    ([("_PyGC_Fini", PY), ("Py_FinalizeEx", PY), ("Py_RunMain", PY),
      ("main", PY), ("__libc_start_main", LIBC), ("_start", PY)], 1),
]
TOTAL = sum(n for _, n in STACKS)
PROC = "python3.13t a.py [42]"


def finished(t):
    samples = []
    for i, (frames, n) in enumerate(STACKS):
        for j in range(n):
            samples.append((42, "python3.13t", tuple(frames), 42,
                            1000 * i + j, "cpu-clock"))
    procs = {42: {"pid": 42, "argv": ["python3.13t", "a.py"]}}
    summary = summarize(samples, procs, None)
    meta = {"command": ["a.py"], "started": 0}
    out = t.scratch
    profile = Profile(out, meta, summary)
    FoldedFile().write(profile)
    FlamePage().write(profile)
    rows, total = summary.functions, summary.total
    lines = {}
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            lines[stack] = lines.get(stack, 0) + int(n)
    with open(os.path.join(out, "flame.html")) as f:
        page = f.read()
    return lines, rows, total, page


def test_lean(t):
    lines, _, _, _ = finished(t)
    base = PROC + ";py::<module>:/app/a.py;py::run:/app/a.py"
    want = {base: 10,
            base + ";memcpy [libc.so.6];asm_exc_page_fault [kernel]": 4,
            base + ";fast_sum [_fast.cpython-313t.so]": 6}
    py_lines = {k: v for k, v in lines.items() if "py::" in k}
    t.check(py_lines == want, "lean: the interpreter's frames under run() "
            "left out, its samples run()'s own, libc, kernel and extension "
            "frames kept in order", sorted(py_lines.items()))
    interp = [k for k in py_lines
              if re.search(r"\[(lib)?python3\.13t[^]]*\]", k)]
    t.check(not interp, "lean: no interpreter frame in a stack with a "
            "Python frame", interp)


def test_whole(t):
    lines, rows, total, _ = finished(t)
    t.check(sum(lines.values()) == TOTAL == total, "whole: every sample "
            "in stacks.folded", (sum(lines.values()), TOTAL, total))
    shares = {}
    for stack, n in lines.items():
        for fr in set(stack.split(";")):
            if fr.startswith("py::"):
                shares[fr] = shares.get(fr, 0) + n
    table = {name: tot for tot, _, name in rows}
    t.check(shares == table, "whole: each Python function's samples in "
            "stacks.folded are the tables' total", (shares, table))
    self_run = {name: s for _, s, name in rows}.get("py::run:/app/a.py")
    t.check(self_run == TOTAL - 1, "whole: run()'s self holds the "
            "interpreter's frames under it", self_run)
    fini = PROC + (";_start [python3.13t];__libc_start_main [libc.so.6];"
                   "main [python3.13t];Py_RunMain [python3.13t];"
                   "Py_FinalizeEx [python3.13t];_PyGC_Fini [python3.13t]")
    t.check(lines.get(fini) == 1, "whole: a stack with no Python frame "
            "keeps its interpreter frames", sorted(lines))


def test_page(t):
    _, _, _, page = finished(t)
    m = re.search(r'<script[^>]*id="data"[^>]*>(.*?)</script>', page, re.S)
    text = m.group(1) if m else page
    for name in ("find_name_in_mro", "PyObject_GetAttr", "_mi_malloc",
                 "fast_sum"):
        t.check(json.dumps(name)[1:-1] in text, "page: flame.html keeps "
                "%s" % name)


if __name__ == "__main__":
    jrtest.main(globals())
