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
import re

__all__ = ["write_html", "write_folded", "label", "escape"]

# The vendored files (scripts/web-assets.sh pins them) and their versions,
# named on the page.
WEB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "web")
FLAME_JS = "d3-flamegraph.umd.min.js"
FLAME_CSS = "d3-flamegraph.css"
D3_JS = "d3.min.js"
LIBRARIES = "d3-flame-graph 5.0.0 (Apache-2.0) on d3 7.9.2 (ISC)"

# Nodes with fewer samples than this share of the total are left out of
# the page; their samples stay in their caller's (its self time).  At
# 1/1,000, a recording of 10,000 samples of a real program (docutils, 40
# Python frames deep) gives a page under 1 MB; at 1/10,000 it was 4.6 MB.
MIN_SHARE = 1e-3

# Frame kinds, as the page's colour mapper reads them ("l").
PROCESS, PYTHON, NATIVE, KERNEL = "r", "p", "n", "k"


# Characters a name may not carry into any output as they are: the C0
# controls (NUL, BEL, ESC, newline, ...), DEL, the C1 controls (U+0085 is
# one) and U+2028/U+2029, i.e. every line break str.splitlines() honours
# and every byte a terminal acts on.  jitring's extension escapes names
# the same way before they reach the dump (_jitring.c, name_escaped()).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {c: "\\x%02x" % c for c in
            list(range(0x20)) + list(range(0x7f, 0xa0))}
_ESCAPES.update({0x09: "\\t", 0x0a: "\\n", 0x0d: "\\r",
                 0x2028: "\\u2028", 0x2029: "\\u2029"})


def escape(name):
    """@name with each control character or line separator written as
    a visible escape: \\t \\n \\r, \\xNN (other C0, DEL, C1),
    \\u2028 \\u2029.  A backslash of the name is kept as it is, so
    escaping an escaped name changes nothing (the extension escapes at
    the source and every output escapes again)."""
    if _CONTROL.search(name) is None:
        return name
    return name.translate(_ESCAPES)


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


def _folded_frame(name):
    # ';' separates frames and a line break ends the line: neither may
    # remain.
    return escape(name).replace(";", ":")


def write_folded(path, stacks):
    """Writes the classic folded stacks to path: one ``a;b;c COUNT`` line
    per distinct stack, root first, sorted (flamegraph.pl, inferno,
    speedscope read them).  ';' in a frame name is written as ':', a
    control character or line separator as escape() writes it.  Returns
    the number of lines."""
    counts = {}
    for frames, count in _checked(stacks):
        key = ";".join(_folded_frame(f) for f in frames)
        counts[key] = counts.get(key, 0) + count
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
        for key in sorted(counts):
            f.write("%s %d\n" % (key, counts[key]))
    return len(counts)


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
    page = (_PAGE
            .replace("@TITLE@", _html_text(escape(title or
                                                   "jitring flame graph")))
            .replace("@SUBTITLE@", _html_text(escape(subtitle)))
            .replace("@LIBRARIES@", _html_text(LIBRARIES))
            .replace("@CSS@", _asset(FLAME_CSS))
            .replace("@CONFIG@", config)
            .replace("@SCRIPT@", _SCRIPT))
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


_PAGE = """<!DOCTYPE html>
<!-- Written by jitring (python -m jitring record); drawn with @LIBRARIES@,
     inlined: the file needs no network. -->
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style>
<style>
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI",
  Roboto, "DejaVu Sans", sans-serif; color: #1d1d1f; background: #fff; }
header { padding: 12px 16px 8px; border-bottom: 1px solid #e3e3e3;
  background: #fafafa; position: sticky; top: 0; z-index: 5; }
h1 { font-size: 18px; margin: 0; font-weight: 600; }
.sub { color: #555; margin-top: 2px; word-break: break-all; }
.bar { display: flex; flex-wrap: wrap; gap: 8px 14px; align-items: center;
  margin-top: 8px; }
.bar input { font: inherit; padding: 3px 8px; width: 22em;
  border: 1px solid #bbb; border-radius: 4px; }
.bar button { font: inherit; padding: 3px 10px; border: 1px solid #bbb;
  border-radius: 4px; background: #fff; cursor: pointer; }
.bar button:hover { background: #eee; }
.legend span { display: inline-flex; align-items: center; margin-right: 10px;
  color: #444; }
.legend i { display: inline-block; width: 12px; height: 12px;
  border-radius: 2px; margin-right: 4px; border: 1px solid #0002; }
#match { color: #8a0a8a; font-weight: 600; }
#details { margin-top: 6px; min-height: 1.4em; font-family: ui-monospace,
  "DejaVu Sans Mono", monospace; font-size: 13px; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; }
#chart { padding: 8px 16px 0; }
#chart svg { display: block; }
footer { color: #777; font-size: 12px; padding: 6px 16px 14px; }
.d3-flame-graph-label { font-family: ui-monospace, "DejaVu Sans Mono",
  monospace; font-size: 11.5px; }
</style>
</head>
<body>
<header>
<h1>@TITLE@</h1>
<div class="sub">@SUBTITLE@</div>
<div class="bar">
<input id="search" type="search" placeholder="Search frames (substring)"
 autocomplete="off" spellcheck="false">
<button id="reset" type="button">Reset zoom</button>
<button id="clear" type="button">Clear search</button>
<span id="match"></span>
<span class="legend"><span><i style="background:#7fb3e6"></i>Python</span><span><i
 style="background:#f0883e"></i>native</span><span><i
 style="background:#e3c33b"></i>kernel</span><span><i
 style="background:#c4c4c4"></i>process</span></span>
</div>
<div id="details"></div>
</header>
<div id="chart"></div>
<footer><span id="total"></span> <span id="note"></span><br>
The processes are on top, each frame's callees below it. Click a frame to
zoom into it, a frame above it to zoom out.
Drawn with @LIBRARIES@.</footer>
<script>@D3@</script>
<script>@FLAME@</script>
<script type="application/json" id="jitring-data">@DATA@</script>
<script>
var JITRING = @CONFIG@;
@SCRIPT@
</script>
</body>
</html>
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var cfg = JITRING, unit = cfg.unit, total = cfg.total;
  var data = JSON.parse(document.getElementById("jitring-data").textContent);
  (function names(root) {       // indices into the root's table -> names
    var t = root.t || [], todo = (root.c || []).slice();
    delete root.t;
    while (todo.length) {
      var d = todo.pop();
      d.n = t[d.n];
      if (d.f !== undefined) d.f = t[d.f];
      if (d.c) for (var i = 0; i < d.c.length; i++) todo.push(d.c[i]);
    }
  })(data);
  var pct = function (v) {
    return total ? (100 * v / total).toFixed(v * 1e4 < total ? 3 : 2) : "0";
  };
  var fmt = function (v) { return v.toLocaleString("en-US"); };
  document.getElementById("total").textContent =
    fmt(total) + " " + unit + " in all.";
  document.getElementById("note").textContent = cfg.note;
  if (!total) {
    document.getElementById("chart").textContent = "No " + unit + ".";
    document.body.setAttribute("data-rendered", Math.round(performance.now()));
    return;
  }
  function hash(s) {            // a stable 0..1 per name, for shading
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return ((h >>> 0) % 1000) / 999;
  }
  function colour(d) {
    if (d.highlight) return "#e600e6";
    var v = hash(d.data.n), k = d.data.l;
    if (k === "p")              // Python: blues
      return "rgb(" + Math.round(96 + 60 * v) + "," + Math.round(160 + 50 * v) +
        "," + Math.round(225 + 25 * v) + ")";
    if (k === "k")              // kernel: yellows
      return "rgb(" + Math.round(220 + 20 * v) + "," + Math.round(185 + 30 * v) +
        "," + Math.round(40 + 40 * v) + ")";
    if (k === "r")              // processes and the whole: greys
      return "rgb(" + Math.round(190 + 25 * v) + "," + Math.round(190 + 25 * v) +
        "," + Math.round(190 + 25 * v) + ")";
    return "rgb(" + Math.round(230 + 25 * v) + "," + Math.round(110 + 80 * v) +
      "," + Math.round(40 + 30 * v) + ")";   // native: warm
  }
  function selfOf(d) {
    var s = d.data.v, c = d.data.c;
    if (c) for (var i = 0; i < c.length; i++) s -= c[i].v;
    return s;
  }
  function describe(d) {
    var v = d.data.v, s = selfOf(d);
    return (d.data.f || d.data.n) + "  \u2014  " + fmt(v) + " " + unit +
      " (" + pct(v) + "% of all), self " + fmt(s) + " (" + pct(s) + "%)";
  }
  var chartEl = document.getElementById("chart");
  var width = function () { return Math.max(chartEl.clientWidth - 32, 300); };
  var details = document.getElementById("details");
  var hint = "Hover over a frame for its " + unit + "; click it to zoom.";
  var chart = flamegraph.default()
    .width(width())
    .cellHeight(18)
    .minFrameSize(1)
    .sort(false)
    .inverted(true)             // an icicle: deep stacks start on screen
    .setColorMapper(colour)
    .setLabelHandler(describe)
    .setDetailsElement(details);
  var term = "";
  chart.setSearchMatch(function (d, t) {
    if (!t) return false;
    var n = (d.data.f || d.data.n).toLowerCase();
    return n.indexOf(t.toLowerCase()) >= 0 ||
      d.data.n.toLowerCase().indexOf(t.toLowerCase()) >= 0;
  });
  var match = document.getElementById("match");
  chart.setSearchHandler(function (results) {
    // The matches' samples from the data, each counted once (not under
    // another match), whatever the zoom hides.
    var found = new Set(results), sum = 0;
    results.forEach(function (d) {
      for (var p = d.parent; p; p = p.parent) if (found.has(p)) return;
      sum += d.data.v;
    });
    match.textContent = term ? (results.length === 1 ? "1 frame matches" :
      results.length + " frames match") + " \u201c" + term +
      "\u201d: " + fmt(sum) + " " + unit + ", " + pct(sum) + "% of all" : "";
  });
  chart.setDetailsHandler(function (text) { details.textContent = text || hint; });
  details.textContent = hint;
  // The first drawing and a resize without animation, finished at once
  // (d3's timers run on animation frames, which a hidden or headless page
  // may not get, and a screenshot may come before they end); zooming
  // animates.
  function now(draw) {
    chart.transitionDuration(0);
    draw();
    d3.timerFlush();
    // New frames' rects grow in a fixed 250 ms animation: end it now.
    d3.select("#chart").selectAll("g.frame > rect").interrupt()
      .attr("width", function () { return this.parentNode.getAttribute("width"); });
    chart.transitionDuration(300);
  }
  now(function () { d3.select("#chart").datum(data).call(chart); });
  var input = document.getElementById("search"), timer = null;
  input.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () {
      term = input.value.trim();
      if (term) chart.search(term); else { chart.clear(); match.textContent = ""; }
    }, 150);
  });
  document.getElementById("reset").addEventListener("click", function () {
    chart.resetZoom();
  });
  document.getElementById("clear").addEventListener("click", function () {
    input.value = ""; term = ""; chart.clear(); match.textContent = "";
  });
  var rt = null;
  window.addEventListener("resize", function () {
    clearTimeout(rt);
    rt = setTimeout(function () {
      if (chart.width() !== width()) now(function () { chart.width(width()).update(); });
    }, 200);
  });
  // The search term from the address (#search=TERM), e.g. for a link.
  var m = /[#&]search=([^&]*)/.exec(location.hash);
  if (m) { input.value = decodeURIComponent(m[1]); term = input.value;
           chart.search(term); }
  // When the first drawing was done, in ms since the page began to load.
  document.body.setAttribute("data-rendered", Math.round(performance.now()));
})();
"""
