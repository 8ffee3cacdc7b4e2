# SPDX-License-Identifier: MIT
"""Flame graphs of sampled stacks: an interactive HTML page and folded text.

``write_html`` draws with d3-flame-graph (npm ``d3-flame-graph``, Apache
2.0) on d3 v7 (npm ``d3``, ISC): both come unchanged from the npm registry
(``scripts/web-assets.sh`` fetches them and checks their sha256), are
installed with the package in ``jitring/web/`` and are inlined into every
page, so the file opens from disk with no network.  The tree is built here
(identical prefixes merged) and embedded as JSON.

Stacks are ``(frames, count)`` pairs: ``frames`` a list of str, the root
first (the first frame names the process), ``count`` an int > 0.  Frame
names as ``python -m jitring record`` gives them:

  py::<qualname>:<filename>   a Python function, shown "qualname (filename)"
  symbol [dso]                a native frame ("[unknown]" when perf has none)
  ... [kernel]                a kernel frame

Python, native and kernel frames and the processes have colours of their
own.  Names are written with their control characters and line
separators escaped (escape()), in the folded text and in the page, where
they go in as text.
"""

import gc
import json
import os
import time

from jitring.common.text import escape
from jitring.output.writer import Writer


# The vendored files (scripts/web-assets.sh pins them) and their versions,
# named on the page, in the package's web/ folder.
WEB_DIR = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "web")


FLAME_JS = "d3-flamegraph.umd.min.js"


FLAME_CSS = "d3-flamegraph.css"


D3_JS = "d3.min.js"


LIBRARIES = "d3-flame-graph 5.0.0 (Apache-2.0) on d3 7.9.2 (ISC)"


# jitring's own page around them, in the same folder: its HTML and CSS
# (the markers @NAME@ filled in by write_html()), and its script.
PAGE = "flame.html"


SCRIPT = "flame.js"


# Nodes with fewer samples than this share of the total are left out of
# the page; their samples stay in their caller's (its self time).  At
# 1/1,000, a recording of 10,000 samples of a real program (docutils, 40
# Python frames deep) gives a page under 1 MB; at 1/10,000 it was 4.6 MB.
MIN_SHARE = 1e-3


# Frame kinds, as the page's colour mapper reads them ("l").
PROCESS, PYTHON, NATIVE, KERNEL = "r", "p", "n", "k"


def label(frame):
    """(text shown, kind) of a frame name below the process root."""
    if frame.startswith("py::"):
        qualname, sep, filename = frame[4:].partition(":")
        return ("%s (%s)" % (qualname, filename) if sep else qualname,
                PYTHON)
    if frame.endswith("[kernel]") or frame.endswith("[kernel.kallsyms]"):
        return frame, KERNEL
    return frame, NATIVE


def _checked(stacks):
    """The stacks, each checked: frames non-empty, count an int > 0."""
    for frames, count in stacks:
        if isinstance(count, bool) or not isinstance(count, int) or \
                count <= 0:
            raise ValueError("a stack's count must be an int > 0, not %r"
                             % (count,))
        if not frames:
            raise ValueError("a stack with no frames (count %d)" % count)
        yield frames, count


def _tree(stacks):
    """The merged tree: each node a list [total, {frame: child} or None]
    (lists and lazily made dicts: a profile's tree may have millions of
    nodes)."""
    root = [0, None]
    for frames, count in _checked(stacks):
        root[0] += count
        node = root
        for f in frames:
            children = node[1]
            if children is None:
                children = node[1] = {}
            child = children.get(f)
            if child is None:
                child = children[f] = [0, None]
            child[0] += count
            node = child
    return root


def _json_tree(root, title, min_total):
    """The page's tree as compact JSON (short keys: n name, v total, c
    children, l kind; f the full frame name where it differs from n; each
    name as escape() writes it, and the page puts them in as text), built
    without recursion (stacks may be deep).  Names are written once: the
    root's t lists them, and every other node's n and f are indices into
    it (the page puts the names back before drawing; a name is most of a
    node, and the same few hundred recur at every depth).
    Returns (json text, nodes kept, nodes pruned, samples pruned)."""
    dumps = json.dumps
    out = []
    table = {}
    kept = pruned = pruned_samples = 0

    def index(name):
        i = table.get(name)
        if i is None:
            i = table[name] = len(table)
        return i

    def open_node(name, node, kind, full):
        nonlocal kept
        kept += 1
        out.append('{"n":%d,"v":%d,"l":"%s"' % (index(name), node[0], kind))
        if full is not None:
            out.append(',"f":%d' % index(full))

    kept += 1
    out.append('{"n":%s,"v":%d,"l":"%s"' % (dumps(title), root[0], PROCESS))
    # Each entry: (children left to write, in order) of an open node.
    stack = [[sorted((root[1] or {}).items()), 0, True, 0]]
    while stack:
        top = stack[-1]
        items, i, first = top[0], top[1], top[2]
        while i < len(items) and items[i][1][0] < min_total:
            pruned += 1
            pruned_samples += items[i][1][0]
            i += 1
        if i == len(items):
            out.append("}" if first else "]}")
            stack.pop()
            continue
        top[1] = i + 1
        name, node = items[i]
        out.append(',"c":[' if first else ",")
        top[2] = False
        depth = top[3] + 1
        name = escape(name)
        if depth == 1:
            text, kind, full = name, PROCESS, None
        else:
            text, kind = label(name)
            full = name if text != name else None
        open_node(text, node, kind, full)
        stack.append([sorted((node[1] or {}).items()), 0, True, depth])
    # The root's object is closed last: its name table goes before that.
    names = ',"t":[%s]}' % ",".join(map(dumps, table))
    text = "".join(out)
    text = text[:-1] + names
    # The text goes into a <script> element: no "<" may appear as such.
    return text.replace("<", "\\u003c"), kept, pruned, pruned_samples


def _asset(name):
    with open(os.path.join(WEB_DIR, name), encoding="utf-8") as f:
        return f.read()


def _html_text(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;").replace('"', "&quot;"))


def write_html(path, stacks, title="", subtitle="", unit="samples",
               min_share=MIN_SHARE):
    """stacks: iterable of (frames, count): frames is a list of str, ROOT
    FIRST (the first frame is the process, e.g. "python3 [pid 1234]
    app.py"), count an int > 0.  Writes one self-contained HTML file (no
    network access needed to view it): a flame graph to zoom (click a
    frame), search (highlights the matches and gives their share) and
    reset, with each frame's count and share of the total.

    Nodes under min_share of the total (default 1/10,000) are left out,
    their samples counted in their caller's self time; the page says how
    many.  unit names what the counts are ("samples", "cache-misses").
    Returns a dict: samples, nodes (kept), pruned_nodes, pruned_samples,
    bytes (of the file)."""
    # The tree holds no cycles, and the collector's passes over millions
    # of new lists would take most of the time.
    gc_was = gc.isenabled()
    gc.disable()
    try:
        root = _tree(stacks)
        min_total = root[0] * min_share if min_share > 0 else 0
        data, kept, pruned, pruned_samples = _json_tree(
            root, "all", min_total)
        del root[1]
    finally:
        if gc_was:
            gc.enable()
    note = ""
    if pruned:
        note = ("%d frames under %g%% of the total (%d %s, %.2f%%) are "
                "not drawn: each counts in its caller's self time."
                % (pruned, 100.0 * min_share, pruned_samples, unit,
                   100.0 * pruned_samples / root[0]))
    config = json.dumps({"unit": unit, "total": root[0], "note": note,
                         "libraries": LIBRARIES}).replace("<", "\\u003c")
    page = (_asset(PAGE)
            .replace("@TITLE@", _html_text(escape(title or
                                                   "jitring flame graph")))
            .replace("@SUBTITLE@", _html_text(escape(subtitle)))
            .replace("@LIBRARIES@", _html_text(LIBRARIES))
            .replace("@CSS@", _asset(FLAME_CSS))
            .replace("@CONFIG@", config)
            .replace("@SCRIPT@", _asset(SCRIPT)))
    # The large parts last, so no marker is looked for inside them.
    head, _, tail = page.partition("@D3@")
    mid, _, tail = tail.partition("@FLAME@")
    mid2, _, tail = tail.partition("@DATA@")
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(head)
        f.write(_asset(D3_JS))
        f.write(mid)
        f.write(_asset(FLAME_JS))
        f.write(mid2)
        f.write(data)
        f.write(tail)
        size = f.tell()
    return {"samples": root[0], "nodes": kept, "pruned_nodes": pruned,
            "pruned_samples": pruned_samples, "bytes": size}


class FlamePage(Writer):
    """flame.html: the interactive flame graph of the stacks."""
    name = "flame"
    files = ("flame.html",)

    def write(self, profile):
        from jitring.output.flame import write_html
        meta = profile.meta
        cmd = " ".join(str(a) for a in meta.command or [])
        write_html(os.path.join(profile.out, "flame.html"),
                          profile.stacks(),
                          title="jitring: " + cmd,
                          subtitle="%d samples of %s at %s Hz, %s"
                          % (profile.total, meta.event, meta.freq,
                             time.strftime("%Y-%m-%d %H:%M",
                                           time.localtime(meta.started))))
