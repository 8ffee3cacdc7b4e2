# SPDX-License-Identifier: MIT
"""The flame graph page (jitring.output.flame) in a real headless browser.

A page is written from synthetic stacks with known hot functions (two
processes; hot_a 29%, hot_b 10% and hot_c 18% (and 5% in the second
process) of all samples, native_sort 38% through native and kernel frames;
400 one-sample stacks under hot_c that the page prunes) and loaded from file:// in Debian's chromium with the network cut
(a proxy that does not exist, every host name unresolvable):

  offline   the file holds no http(s) URL but XML namespace names and d3's
            banner comment, the vendored assets are inlined unchanged and
            match web/SHA256SUMS, and the page's script runs to its end
  frames    --dump-dom: the hot functions, the process roots, a native and
            a kernel frame are SVG frames with their names, labelled, as
            wide as their share, Python frames blue and native ones warm
  search    #search=hot_ highlights hot_a/hot_b/hot_c and gives their 62%
  zoom      a click on a frame zooms to it; Reset zoom and typing into the
            search box (scripted inside a copy of the page) do their part
  picture   --screenshot: a PNG of the window's size, not blank, with the
            Python and the native colours in it
  folded    write_folded: the a;b;c COUNT lines
  sources   the page's script (web/flame.js) parses under Node.js
            (skipped without node), and the template (web/flame.html)
            holds each of its markers once

Each is a case of its own (test_flame.py zoom runs that alone).  Exit 77
when no chromium can be installed or run (scripts/deps.sh browser;
JITRING_CHROMIUM names another binary), at the first case that loads the
page (sources, offline and folded need no browser).
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib

import jrtest

from jitring.output.flame import (D3_JS, FLAME_CSS, FLAME_JS, PAGE, SCRIPT,
                                  WEB_DIR, write_html)
from jitring.output.folded import write_folded

P1 = "python3 [pid 4242] app.py"
P2 = "python3 [pid 4243] worker.py"
BASE = [P1, "_start [python3.13]", "Py_RunMain [python3.13]",
        "py::<module>:app.py", "py::main:app.py"]
HOT = [
    (BASE + ["py::hot_a:app.py", "py::helper:app.py"], 3000),
    (BASE + ["py::hot_b:app.py", "py::helper:app.py"], 1000),
    (BASE + ["py::hot_c:app.py"], 1500),
    (BASE + ["py::native_sort:app.py", "list_sort [python3.13]",
             "unsafe_object_compare [python3.13]"], 3500),
    (BASE + ["py::native_sort:app.py", "list_sort [python3.13]",
             "asm_exc_page_fault [kernel]", "handle_mm_fault [kernel]"], 500),
    ([P2, "py::Worker.run:worker.py", "py::hot_c:worker.py"], 500),
]
# 400 stacks of 1 sample each (1/10,400 of the total: under the page's
# 1/1,000), under hot_c: pruned into its self time.
SMALL = [(BASE + ["py::hot_c:app.py", "py::tiny_%d:app.py" % i], 1)
         for i in range(400)]
STACKS = HOT + SMALL
TOTAL = sum(c for _, c in STACKS)           # 10,400

# URLs allowed in the page: names, never fetched (XML namespaces d3 uses
# to make elements) and d3's banner comment.
NAMES = {"http://www.w3.org/1999/xhtml", "http://www.w3.org/1999/xlink",
         "http://www.w3.org/2000/svg", "http://www.w3.org/2000/xmlns/",
         "http://www.w3.org/XML/1998/namespace", "https://d3js.org"}

WIDTH, HEIGHT = 1280, 800


def find_chromium():
    env = os.environ.get("JITRING_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    def __init__(self, t, exe):
        self.t, self.exe, self.n = t, exe, 0

    def run(self, url, *args, timeout=120):
        """(returncode, stdout, stderr, seconds) of one headless load, the
        network cut, a fresh profile each time."""
        self.n += 1
        profile = os.path.join(self.t.scratch, "profile-%d" % self.n)
        cmd = [self.exe, "--headless", "--no-sandbox", "--disable-gpu",
               "--user-data-dir=" + profile, "--no-first-run",
               "--no-default-browser-check", "--disable-extensions",
               "--disable-background-networking", "--disable-sync",
               "--proxy-server=127.0.0.1:9",
               "--host-resolver-rules=MAP * ~NOTFOUND",
               "--window-size=%d,%d" % (WIDTH, HEIGHT),
               "--hide-scrollbars",
               # Frames are drawn as virtual time passes: d3's transitions
               # (which set the labels) run on animation frames.
               "--run-all-compositor-stages-before-draw",
               "--virtual-time-budget=10000"]
        cmd += list(args) + [url]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=timeout,
                               env=dict(os.environ, HOME=self.t.scratch))
        except subprocess.TimeoutExpired:
            return None, "", "timed out after %d s" % timeout, timeout
        except OSError as e:
            return None, "", str(e), 0
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def attrs(tag):
    return dict(re.findall(r'([\w:-]+)="([^"]*)"', tag))


def frames(dom):
    """name -> list of (g attributes, fill of its rect, label text, width):
    the frame's width as its <g> gives it (its rect grows to it in an
    animation that a headless page may leave unfinished), 0 without a
    filled rect."""
    out = {}
    for m in re.finditer(r'<g ([^>]*class="frame[^"]*"[^>]*)>(.*?)</g>', dom,
                         re.S):
        a = attrs(m.group(1))
        rect = attrs((re.findall(r'<rect ([^>]*)>', m.group(2)) or [""])[0])
        lab = re.search(r'<div class="d3-flame-graph-label"[^>]*>([^<]*)<',
                        m.group(2))
        out.setdefault(unescape(a.get("name", "")), []).append(
            (a, rect.get("fill", ""), unescape(lab.group(1)) if lab else "",
             float(a.get("width", 0)) if "fill" in rect else 0.0))
    return out


def unescape(s):
    return (s.replace("&lt;", "<").replace("&gt;", ">")
            .replace("&quot;", '"').replace("&amp;", "&"))


def rgb(fill):
    m = re.match(r"rgb\((\d+),\s*(\d+),\s*(\d+)\)", fill)
    return tuple(int(x) for x in m.groups()) if m else None


def png_pixels(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB(A) PNG,
    decoded with zlib and the PNG row filters."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError("PNG depth %d colour type %d interlace %d"
                         % (depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif ft == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def check_static(t, html):
    with open(html, encoding="utf-8") as f:
        text = f.read()
    urls = set(re.findall(r"https?://[^\s\"'<>()\\]+", text))
    t.check(urls <= NAMES, "offline: the page holds no http(s) URL but "
            "namespace names", sorted(urls - NAMES))
    # Outside the scripts (d3's own code has i.src=... for d3.image).
    markup = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
    t.check(markup.count("<script") == 0 and
            not re.search(r"""(src|href)\s*=|@import|url\(""", markup),
            "offline: no src=, href=, @import or url() in the markup and "
            "styles")
    web = WEB_DIR
    sums = {}
    with open(os.path.join(web, "SHA256SUMS")) as f:
        for line in f:
            digest, name = line.split()
            sums[name] = digest
    import hashlib
    bad = [n for n, d in sums.items()
           if hashlib.sha256(open(os.path.join(web, n), "rb").read())
           .hexdigest() != d]
    t.check(len(sums) >= 5 and not bad, "the package's web assets match "
            "web/SHA256SUMS (%d files)" % len(sums), bad)
    inlined = [n for n in (D3_JS, FLAME_JS, FLAME_CSS)
               if open(os.path.join(web, n), encoding="utf-8").read()
               not in text]
    t.check(not inlined, "d3, d3-flame-graph and its CSS are inlined "
            "unchanged", inlined)
    m = re.search(r'<script type="application/json" id="jitring-data">'
                  r'(.*?)</script>', text, re.S)
    tree = json.loads(m.group(1)) if m else {}
    t.check(tree.get("v") == TOTAL and len(tree.get("c", [])) == 2,
            "the embedded tree: %d samples under 2 processes" % TOTAL,
            (tree.get("v"), [c.get("n") for c in tree.get("c", [])]))
    return text


def check_frames(t, dom, seconds):
    t.check('data-rendered="' in dom, "offline: the page's script ran to "
            "its end with the network cut (%.1f s, drawn at %s ms)"
            % (seconds, (re.findall(r'data-rendered="(\d+)"', dom) or
                         ["?"])[0]))
    fr = frames(dom)
    t.check(len(fr) >= 15, "frames: %d named SVG frames" % len(fr))
    full = fr.get("all", [({}, "", "", 0)])[0][3]
    t.check(full > WIDTH / 2, "frames: the root spans the chart (%.0f px)"
            % full)
    want = {  # name: share of all samples
        P1: 9900 / TOTAL, P2: 500 / TOTAL,
        "hot_a (app.py)": 3000 / TOTAL, "hot_b (app.py)": 1000 / TOTAL,
        "hot_c (app.py)": 1900 / TOTAL, "native_sort (app.py)": 4000 / TOTAL,
        "hot_c (worker.py)": 500 / TOTAL,
        "list_sort [python3.13]": 4000 / TOTAL,
        "asm_exc_page_fault [kernel]": 500 / TOTAL,
    }
    for name, share in want.items():
        got = fr.get(name)
        w = got[0][3] if got else 0
        t.check(got and abs(w / full - share) < 0.005 and
                got[0][2] == name,
                "frames: %s drawn and labelled, %.1f%% wide" % (name,
                                                                100 * share),
                "%s: width %.1f of %.1f, label %r" % (
                    "found" if got else "missing", w, full,
                    got[0][2] if got else None))
    tiny = [n for n in fr if n.startswith("tiny_")]
    t.check(not tiny and "400 frames under 0.1% of the total" in dom,
            "frames: the 400 pruned frames are not drawn and the page says "
            "so", tiny[:3])
    none = [({}, "", "", 0)]
    py = rgb(fr.get("hot_a (app.py)", none)[0][1])
    nat = rgb(fr.get("list_sort [python3.13]", none)[0][1])
    t.check(py and nat and py[2] > py[0] and nat[0] > nat[2],
            "frames: Python frames blue, native ones warm", (py, nat))
    return fr


def check_search(t, dom):
    fr = frames(dom)
    lit = sorted(n for n, v in fr.items() if v[0][1].lower() == "#e600e6")
    t.check(lit == ["hot_a (app.py)", "hot_b (app.py)", "hot_c (app.py)",
                    "hot_c (worker.py)"],
            "search: hot_ highlights exactly the hot functions", lit)
    want = "4 frames match \u201chot_\u201d: 6,400 samples, 61.54% of all"
    m = re.search(r'<span id="match">([^<]*)</span>', dom)
    t.check(m and unescape(m.group(1)) == want,
            "search: the matched share is shown (%s)" % want,
            m.group(1) if m else "no match line")


# Driven from inside the page (a script added to a copy of it): a click on
# native_sort's frame, then, for the second run, on Reset zoom and typing
# into the search box.  Its 1000 ms are the page's virtual time
# (--virtual-time-budget): they pass once the click's transition has run
# its frames, however slow or loaded the machine.
CLICK = """<script>
document.querySelector('g[name="native_sort (app.py)"]')
  .dispatchEvent(new MouseEvent("click", {bubbles: true}));
if (location.hash === "#reset") setTimeout(function () {
  document.getElementById("reset").click();
  var box = document.getElementById("search");
  box.value = "HOT_A";
  box.dispatchEvent(new Event("input"));
}, 1000);
</script>
"""


def driven(t, html):
    with open(html, encoding="utf-8") as f:
        text = f.read()
    i = text.rindex("</body>")
    path = os.path.join(t.scratch, "driven.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:i] + CLICK + text[i:])
    return "file://" + path


def check_zoom(t, dom, dom_reset):
    fr = frames(dom)
    full = fr.get("all", [({}, "", "", 0)])[0][3]
    ns = fr.get("native_sort (app.py)", [({}, "", "", 0)])[0]
    hot = [v[0][3] for n, v in fr.items() if n.startswith("hot_")]
    main = fr.get("main (app.py)", [({}, "", "", 0)])[0][0]
    t.check(full > 0 and abs(ns[3] - full) < 1 and max(hot or [0]) < 1 and
            "fade" in main.get("class", ""),
            "zoom: a click on native_sort widens it to the chart, its "
            "siblings go, its callers fade",
            "native_sort %.0f of %.0f, hot_* %s, main class %r" % (
                ns[3], full, hot, main.get("class")))
    fr = frames(dom_reset)
    full = fr.get("all", [({}, "", "", 0)])[0][3]
    a = fr.get("hot_a (app.py)", [({}, "", "", 0)])[0]
    t.check(full > 0 and abs(a[3] / full - 3000 / TOTAL) < 0.005,
            "zoom: Reset zoom gives hot_a its 28.8% again",
            "%.0f of %.0f" % (a[3], full))
    lit = sorted(n for n, v in fr.items() if v[0][1].lower() == "#e600e6")
    m = re.search(r'<span id="match">([^<]*)</span>', dom_reset)
    want = "1 frame matches \u201cHOT_A\u201d: 3,000 samples, 28.85% of all"
    t.check(lit == ["hot_a (app.py)"] and m and unescape(m.group(1)) == want,
            "search box: typing HOT_A highlights hot_a (any case) and "
            "shows its share", (lit, m.group(1) if m else None))


def check_png(t, path):
    try:
        w, h, rows = png_pixels(path)
    except (OSError, ValueError, zlib.error, TypeError) as e:
        t.check(False, "picture: a PNG", e)
        return
    t.check((w, h) == (WIDTH, HEIGHT), "picture: %dx%d PNG" % (w, h))
    colours = {}
    for row in rows[::2]:
        for px in row[::2]:
            colours[px] = colours.get(px, 0) + 1
    n = sum(colours.values())
    top = max(colours.values())
    t.check(len(colours) > 50 and top < 0.9 * n,
            "picture: not blank (%d colours, the commonest %.0f%%)"
            % (len(colours), 100.0 * top / n))
    blue = sum(c for (r, g, b), c in colours.items() if b > r + 40)
    warm = sum(c for (r, g, b), c in colours.items()
               if r > b + 100 and r > 180)
    t.check(blue > 0.02 * n and warm > 0.02 * n,
            "picture: Python (blue) and native (warm) frames fill it "
            "(%.0f%%, %.0f%%)" % (100.0 * blue / n, 100.0 * warm / n))


def check_folded(t):
    path = os.path.join(t.scratch, "stacks.folded")
    n = write_folded(path, HOT + [([P2, "a;b", "c"], 2),
                                        ([P2, "a;b", "c"], 3)])
    with open(path) as f:
        lines = f.read().splitlines()
    t.check(n == 7 and len(lines) == 7 and
            "%s;a:b;c 5" % P2 in lines and
            ";".join(HOT[0][0]) + " 3000" in lines and lines == sorted(lines),
            "folded: root first, one sorted line per stack, ';' in a name "
            "written as ':'", lines[:2])
    try:
        write_folded(path, [([P1], 0)])
        ok = False
    except ValueError:
        ok = True
    t.check(ok, "folded: a count of 0 is refused")


def check_sources(t):
    """The page's own script, a file of the package: Node.js parses it
    (node --check), before any browser; and the template holds each
    marker write_html() fills in, once."""
    web = WEB_DIR
    node = shutil.which("node") or shutil.which("nodejs")
    if node:
        p = subprocess.run([node, "--check",
                            os.path.join(web, SCRIPT)],
                           capture_output=True, text=True, timeout=60)
        t.check(p.returncode == 0, "web/%s: Node.js finds no syntax error"
                % SCRIPT, p.stderr[-800:])
    else:
        t.skip_part("the page script's syntax", "no node on PATH "
                    "(scripts/deps.sh browser installs nodejs)")
    with open(os.path.join(web, PAGE), encoding="utf-8") as f:
        page = f.read()
    counts = {m: page.count(m) for m in
              ("@CSS@", "@CONFIG@", "@SCRIPT@", "@D3@", "@FLAME@", "@DATA@")}
    t.check(all(n == 1 for n in counts.values()),
            "web/%s holds each marker once" % PAGE, counts)


class Page:
    """The page, written once from STACKS, and the browser that loads it,
    found at its first use: the file skips (77) where none runs."""

    def __init__(self, t):
        self.t = t
        self.html = os.path.join(t.scratch, "flame.html")
        info = write_html(self.html, iter(STACKS), title="test_flame",
                                 subtitle="synthetic stacks")
        print("page: %d bytes, %d nodes, %d pruned" % (
            info["bytes"], info["nodes"], info["pruned_nodes"]))
        self.url = "file://" + self.html
        self.b = None

    def browser(self):
        if self.b is None:
            exe = find_chromium()
            if not exe:
                self.t.skip("no chromium on PATH (scripts/deps.sh browser "
                            "installs it; JITRING_CHROMIUM names another)")
            b = Browser(self.t, exe)
            rc, out, err, _ = b.run("about:blank", "--dump-dom", timeout=60)
            if rc != 0 or "<html" not in out:
                self.t.skip("chromium does not run here (exit %s): %s"
                            % (rc, " | ".join(err.strip().splitlines()[-3:])))
            self.b = b
        return self.b


def test_sources(t, page):
    check_sources(t)


def test_offline(t, page):
    check_static(t, page.html)


def test_frames(t, page):
    rc, dom, err, secs = page.browser().run(page.url, "--dump-dom")
    if t.check(rc == 0, "chromium --dump-dom exits 0", err[-500:]):
        check_frames(t, dom, secs)


def test_search(t, page):
    rc, dom, err, _ = page.browser().run(page.url + "#search=hot_",
                                         "--dump-dom")
    check_search(t, dom)


def test_zoom(t, page):
    b = page.browser()
    durl = driven(t, page.html)
    rc, dom, err, _ = b.run(durl, "--dump-dom")
    rc, dom_reset, err, _ = b.run(durl + "#reset", "--dump-dom")
    check_zoom(t, dom, dom_reset)


def test_picture(t, page):
    png = os.path.join(t.scratch, "flame.png")
    rc, out, err, _ = page.browser().run(page.url, "--screenshot=" + png)
    t.check(rc == 0 and os.path.exists(png), "chromium --screenshot "
            "writes a PNG", err[-500:])
    if os.path.exists(png):
        check_png(t, png)
        if os.environ.get("JITRING_FLAME_PNG"):
            shutil.copy(png, os.environ["JITRING_FLAME_PNG"])


def test_folded(t, page):
    check_folded(t)


if __name__ == "__main__":
    jrtest.main(globals(), lambda t: (Page(t),))
