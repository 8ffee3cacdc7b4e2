# SPDX-License-Identifier: MIT
"""jitring.perf.script.ScriptReader, the reading of perf script's text, on
synthetic text in the format script() has perf print (no perf):
- samples with their heads (pid, comm, tid, time, event) and frames,
  leaf first, as Sample (a tuple: s[4] is the time);
- a name with a line break continues its frame, a blank line in a name
  too; a line that looks like a sample's head but whose (pid, tid, time)
  is not in the keys (or was taken already) is part of a name; without
  keys, a line starts a sample only after a blank one;
- the same text fed whole, as a file, and in chunks of 1, 7 and 4096
  characters: the same samples (raw ones too);
- the samples of one stack share one tuple of frames, and stacks one
  tuple a frame; names and commands escaped (newline, tab, ESC, BEL,
  DEL, U+0085, U+2028, U+2029); a function inlined into another given
  its host's file;
- the trampolines' naming hooks: FPNames's resolve() per sample,
  ELFNames's named() once per stack and process while its range holds,
  a frame in a trampolines' ELF file keeping its address;
- raw samples (jitring.perf.live's) named and escaped later by emit() as if
  read with the rest; end() between slices;
- script() on such text in place of perf script's pipes, one slice and
  three (two read in forked readers): the same Samples.
"""

import io
import os
import pickle
import tempfile

import jrtest
from jitring.perf import script as scripting
from jitring.perf.script import ScriptReader, _inlined
from jitring.profile.model import Sample


EVENT = "cpu-clock:ppp"
PY_DSO = "/tmp/perf-4242.map"
LIB = "/usr/lib/libpython3.13t.so.1.0"


def head(pid, tid, t, comm="python3.13t", event=EVENT):
    """A sample's first line as perf script prints it with call chains
    (time in ns)."""
    return "%s %5d/%-5d %5d.%09d: %s: " % (comm, pid, tid, t // 10**9,
                                          t % 10**9, event)


def frame(addr, sym, dso):
    """A frame's line as perf script prints it."""
    return "\t%16x %s (%s)" % (addr, sym, dso)


def sample(h, *frames):
    """A sample's text: its head, its frames, the blank line after."""
    return "\n".join((h,) + frames) + "\n\n"


def read(text, keys, chunk=None, **kw):
    """The samples of @text read by a ScriptReader: @keys a dict of
    (pid, tid, time) -> count (copied) or None; fed whole, as a file
    ("file") or in chunks of @chunk characters."""
    r = ScriptReader(None if keys is None else dict(keys), **kw)
    if chunk == "file":
        r.feed(io.StringIO(text))
    elif chunk:
        r.feed(text[i:i + chunk] for i in range(0, len(text), chunk))
    else:
        r.feed([text])
    r.end()
    return r.samples


def keys_of(*heads):
    """The keys of samples @heads [(pid, tid, time)]."""
    k = {}
    for h in heads:
        k[h] = k.get(h, 0) + 1
    return k


T0 = 1000 * 10**9 + 123456789
A = frame(0x7f0000001000, "py::a:/srv/m.py", PY_DSO)
B = frame(0x7f0000002000, "py::b:/srv/m.py", PY_DSO)
EVAL = frame(0x55000000a000, "_PyEval_EvalFrameDefault", LIB)
FA = ("py::a:/srv/m.py", PY_DSO)
FB = ("py::b:/srv/m.py", PY_DSO)
FEVAL = ("_PyEval_EvalFrameDefault", LIB)


def test_samples(t):
    text = (sample(head(10, 11, T0), A, EVAL, B, EVAL) +
            sample(head(10, 12, T0 + 5, comm="my prog"), B,
                   frame(0xffffffff81000000, "do_syscall_64",
                         "[kernel.kallsyms]"),
                   frame(0x7f00, "operator new(unsigned long)",
                         "libstdc++.so.6"),
                   "\t    7f0000009999",
                   "\t    7f0000009998 [unknown] ([unknown])") +
            sample(head(20, 20, T0 + 9, event="sched:sched_switch"), A))
    keys = keys_of((10, 11, T0), (10, 12, T0 + 5), (20, 20, T0 + 9))
    got = read(text, keys)
    t.check(got == [
        (10, "python3.13t", (FA, FEVAL, FB, FEVAL), 11, T0, EVENT),
        (10, "my prog", (FB, ("do_syscall_64", "[kernel.kallsyms]"),
                         ("operator new(unsigned long)", "libstdc++.so.6"),
                         ("[unknown]", ""), ("[unknown]", "[unknown]")),
         12, T0 + 5, EVENT),
        (20, "python3.13t", (FA,), 20, T0 + 9, "sched:sched_switch")],
        "three samples, their heads and frames leaf first", got)
    t.check(all(type(s) is Sample for s in got) and
            [s.time for s in got] == [s[4] for s in got] and
            got[0].pid == 10 and got[0].tid == 11 and
            got[1].comm == "my prog" and got[2].event == "sched:sched_switch"
            and got[0].frames == got[0][2],
            "each a Sample, its fields by name and by index")
    t.check(read(text, None) == got,
            "without keys (blank lines between samples): the same")
    # The time is optional in perf's head: 0 where it has none.
    got = read("comm     5/6     cpu-clock: \n" + A + "\n\n", None)
    t.check(got == [(5, "comm", (FA,), 6, 0, "cpu-clock")],
            "a head without a time: time 0", got)
    # Lines before the first sample's head (none of perf.data's): left.
    got = read("junk line\n" + A + "\n\n" + sample(head(10, 11, T0), B),
               keys_of((10, 11, T0)))
    t.check(got == [(10, "python3.13t", (FB,), 11, T0, EVENT)],
            "lines before the first head left out", got)


def test_line_break(t):
    # A name with a line break: its next line continues it (perf prints
    # the name as given); a blank line in a name too.
    broken = "\t%16x py::two\nlines:/srv/m.py (%s)" % (0x7f0000003000,
                                                       PY_DSO)
    blank = "\t%16x py::gap\n\nafter:/srv/m.py (%s)" % (0x7f0000004000,
                                                       PY_DSO)
    text = (sample(head(10, 11, T0), A, broken, EVAL) +
            sample(head(10, 11, T0 + 1), blank, B) +
            sample(head(10, 11, T0 + 2), A, B))
    keys = keys_of((10, 11, T0), (10, 11, T0 + 1), (10, 11, T0 + 2))
    for k, what in ((keys, "keys"), (None, "no keys")):
        got = read(text, k)
        t.check(got == [
            (10, "python3.13t", (FA, ("py::two\\nlines:/srv/m.py", PY_DSO),
                                 FEVAL), 11, T0, EVENT),
            (10, "python3.13t", (("py::gap\\n\\nafter:/srv/m.py", PY_DSO),
                                 FB), 11, T0 + 1, EVENT),
            (10, "python3.13t", (FA, FB), 11, T0 + 2, EVENT)],
            "%s: a name's line breaks continue its frame, escaped" % what,
            got)
    # The blank lines after a sample are not part of its last name (nor
    # is a line break that ends it: the text cannot tell).
    got = read(sample(head(10, 11, T0), A, "\t7f01 py::end\n"), None)
    t.check(got == [(10, "python3.13t", (FA, ("py::end", "")), 11, T0,
                     EVENT)],
            "the blank lines after a sample not part of its last name",
            got)


# test_hostile.py's hostile name: a newline, then a whole forged sample.
FORGED = ("nl\nforged 1/1 1.000000000: cpu-clock:\n\tdeadbeef x (y)\n\n"
          "evil 0/0 1.000000000: cpu-clock:")


def test_forged_head(t):
    hostile = "\t%16x py::%s:a.py (%s)" % (0x7f0000005000, FORGED, PY_DSO)
    text = (sample(head(10, 11, T0), A, hostile, EVAL) +
            sample(head(10, 11, T0 + 1), B))
    keys = keys_of((10, 11, T0), (10, 11, T0 + 1))
    got = read(text, keys)
    t.check([s[:2] + s[3:] for s in got] ==
            [(10, "python3.13t", 11, T0, EVENT),
             (10, "python3.13t", 11, T0 + 1, EVENT)] and
            got[1].frames == (FB,),
            "keys: two samples, no forged one (pid 1 or 0)", got)
    # "\tdeadbeef x (y)" reads as a frame of its own: the text alone
    # cannot tell (the extension escapes names before perf sees them).
    names = [f[0] for f in got[0].frames]
    t.check(names[0] == "py::a:/srv/m.py" and
            names[1] == "py::nl\\nforged 1/1 1.000000000: cpu-clock:" and
            names[2] == "x (y)\\n\\nevil 0/0 1.000000000: cpu-clock::a.py"
            and names[3:] == [FEVAL[0]],
            "the forged heads are part of the names around them", names)
    # Without keys, a line after a blank one starts a sample: the forged
    # "evil 0/0" one does (what keys are for), the first one not.
    got = read(text, None)
    t.check([(s.pid, s.tid) for s in got] == [(10, 11), (0, 0), (10, 11)],
            "no keys: a head only after a blank line",
            [s[:2] + s[3:] for s in got])
    # A head of perf.data's, taken as often as perf.data holds it: once
    # more, the same line is a name's.
    again = "\t7f02 py::x\n" + head(10, 11, T0) + " (d)"
    got = read(sample(head(10, 11, T0), A, again) +
               sample(head(10, 11, T0), B) + sample(head(10, 11, T0 + 1), A),
               keys_of((10, 11, T0), (10, 11, T0 + 1)))
    t.check([s.time for s in got] == [T0, T0 + 1] and
            got[0].frames[0] == FA and
            got[0].frames[1][0].startswith("py::x\\n") and
            " 10/11 " in got[0].frames[1][0] and got[1].frames == (FA,),
            "a head's key taken once: the same line again is a name's",
            got)
    got = read(sample(head(10, 11, T0), A) + sample(head(10, 11, T0), B),
               keys_of((10, 11, T0), (10, 11, T0)))
    t.check([s.frames for s in got] == [(FA,), (FB,)],
            "a key counted twice: two samples", got)


def hostile_text():
    """Samples with every kind of name that makes the reading go line by
    line, and plain ones: (text, keys)."""
    names = [FORGED, "esc\x1b[31mred\x07bel", "two\nlines", "gap\n\nx",
             "sep\u2028line\u2029para\x85nel\x0bvt\x0cff\x1cfs\x7f",
             "tab\tin", "semi;colon", "end\n"]
    text, keys = [], {}
    t = T0
    for i in range(40):
        t += 1000 + i
        h = (100 + i % 3, 200 + i % 5, t)
        keys[h] = keys.get(h, 0) + 1
        n = names[i % len(names)]
        fr = [A, "\t%16x py::%s:f.py (%s)" % (0x7f0000010000 + i % 4, n,
                                              PY_DSO), EVAL, B][i % 3:]
        if i % 6 == 1:
            # A name that ends in a line break: three in a row after it.
            fr.append("\t%16x py::tail\n" % 0x7f0000020000)
        text.append(sample(head(*h, comm="c\x1bomm" if i % 7 == 0
                                else "python3.13t"), *fr))
        if i % 5 == 0:
            # Its key taken already: lines of the name before it.
            text.append(sample(head(*h), B, EVAL, A))
    return "".join(text), keys


def test_chunks(t):
    text, keys = hostile_text()
    whole = read(text, keys)
    names = {f[0] for s in whole for f in s.frames}
    t.check(len(whole) == 40 and "py::two\\nlines:f.py" in names and
            "py::gap\\n\\nx:f.py" in names and "py::tail" in names,
            "the hostile text: 40 samples, the names whole", names)
    for chunk in (1, 7, 4096, "file"):
        got = read(text, keys, chunk)
        t.check(got == whole, "fed in chunks of %s: the same samples"
                % chunk)
    raw = read(text, keys, raw=True)
    for chunk in (1, 7, 4096):
        t.check(read(text, keys, chunk, raw=True) == raw,
                "raw, in chunks of %s: the same samples" % chunk)
    # Without its last blank line or newline: the same.
    for cut in (1, 2):
        t.check(read(text[:-cut], keys, 7) == whole,
                "the text without its last %d newline(s): the same" % cut)
    nokeys = read(text, None)
    for chunk in (1, 7, 4096):
        t.check(read(text, None, chunk) == nokeys,
                "no keys, in chunks of %s: the same samples" % chunk)


def test_shared(t):
    other = frame(0x7f0000006000, "py::c:/srv/m.py", PY_DSO)
    text = "".join(sample(head(10, 11, T0 + i), *st) for i, st in
                   enumerate([(A, EVAL, B), (A, other), (A, EVAL, B),
                              (A, EVAL, B)]))
    # One with a name's line break, read line by line, and the last read
    # line by line (no blank line after it): the same tuples.
    text += sample(head(10, 11, T0 + 4), A, EVAL, B, "\t7f00 py::n\nm (d)")
    text += sample(head(10, 11, T0 + 5), A, EVAL, B)[:-2]
    keys = keys_of(*[(10, 11, T0 + i) for i in range(6)])
    got = read(text, keys)
    t.check(len(got) == 6 and got[0].frames is got[2].frames is
            got[3].frames is got[5].frames,
            "the samples of one stack share one tuple of frames",
            [id(s.frames) for s in got])
    t.check(got[1].frames[0] is got[0].frames[0] is got[4].frames[0],
            "stacks share one tuple a frame")
    t.check(got[4].frames[:3] == got[0].frames and
            got[4].frames[3] == ("py::n\\nm", "d"),
            "the line-by-line sample's frames", got[4])


def test_escaping(t):
    # (A name or command is stripped of white space at its ends, U+0085,
    # U+2028 and U+2029 included: the names here end in another.)
    names = {
        "py::nl\nx": "py::nl\\nx",
        "tab\there": "tab\\there",
        "esc\x1b[31m\x07": "esc\\x1b[31m\\x07",
        "del\x7f nel\x85.": "del\\x7f nel\\x85.",
        "sep\u2028par\u2029.": "sep\\u2028par\\u2029.",
        "cr\rx": "cr\\rx",
        "back\\slash": "back\\slash",
        "ünïcode": "ünïcode",
    }
    for raw, want in names.items():
        got = read(sample(head(10, 11, T0), "\t7f00 %s (lib%s.so)"
                          % (raw, raw)), keys_of((10, 11, T0)))
        t.check(len(got) == 1 and
                got[0].frames == ((want, "lib%s.so" % want),),
                "%r escaped as %r, in its file too" % (raw, want), got)
    for raw, want in (("c\x07\x1b", "c\\x07\\x1b"), ("a\u2028b", "a\\u2028b"),
                      ("t\tab", "t\\tab"), ("x\x85\x7f", "x\\x85\\x7f")):
        got = read(sample(head(10, 11, T0, comm=raw), A),
                   keys_of((10, 11, T0)))
        t.check([s.comm for s in got] == [want],
                "command %r escaped as %r" % (raw, want), got)
    # The raw reading leaves names as they are.
    got = read(sample(head(10, 11, T0, comm="c\x07"), "\t7f00 a\x1bb (d)"),
               keys_of((10, 11, T0)), raw=True)
    t.check(got == [((10, "c\x07", 11, T0, EVENT), (("a\x1bb", "d"),))],
            "raw: the head and frames as read", got)


def test_inlined(t):
    inl = frame(0x55000000b000, "inner_helper", "inlined")
    inl2 = frame(0x55000000b000, "innermost", "inlined")
    host = frame(0x55000000b000, "host_fn", "/usr/lib/libx.so")
    got = read(sample(head(10, 11, T0), inl2, inl, host, EVAL, inl),
               keys_of((10, 11, T0)))
    t.check(got and got[0].frames == (
        ("innermost", "/usr/lib/libx.so"), ("inner_helper",
                                            "/usr/lib/libx.so"),
        ("host_fn", "/usr/lib/libx.so"), FEVAL, ("inner_helper", "")),
        "inlined frames given their host's file (none at the root)", got)
    st = [("a", "inlined"), ("b", "x.so"), ("c", "inlined"), ("d", "y")]
    t.check(_inlined(st) == [("a", "x.so"), ("b", "x.so"),
                                     ("c", "y"), ("d", "y")],
            "_inlined() on a list", st)


class FPNames:
    """jitring.perf.jitsyms.FPNames's hook: resolve(tid, time, frames)."""

    def __init__(self):
        self.calls = []

    def resolve(self, tid, t, frames):
        self.calls.append((tid, t))
        return [("py::named\n%d" % tid, "") if d == PY_DSO else (s, d)
                for s, d in frames]


class ELFNames:
    """jitring.perf.jitsyms.ELFNames's hook: named(pid, time, [(dso,
    address)]) -> (a name or None each, since, until)."""

    def __init__(self):
        self.calls = []

    def named(self, pid, t, frames):
        self.calls.append((pid, t, frames))
        since = t - t % 100
        return (["fn_%x_%d" % (a, since) if a != 0x7e0000002000 else None
                 for d, a in frames], since, since + 100)


def test_names(t):
    text = (sample(head(10, 11, T0), A, EVAL) +
            sample(head(10, 12, T0 + 1), A, EVAL))
    fp = FPNames()
    got = read(text, None, names=fp)
    t.check(fp.calls == [(11, T0), (12, T0 + 1)] and [s.frames for s in got]
            == [(("py::named\\n11", ""), FEVAL),
                (("py::named\\n12", ""), FEVAL)],
            "fp: each sample's frames named by tid and time, escaped",
            (fp.calls, got))
    tr1 = "\t%16x [unknown] (/tmp/jitring-tramp-42-1.so)" % 0x7e0000001000
    tr2 = "\t%16x keep (/tmp/jitring-tramp-42-1.so)" % 0x7e0000002000
    base = T0 - T0 % 100
    text = "".join(sample(head(10, 11, base + d), tr1, EVAL, tr2)
                   for d in (1, 50, 99, 100, 150))
    text += sample(head(20, 21, base + 2), tr1, EVAL, tr2)
    elf = ELFNames()
    got = read(text, None, names=elf, elf=True)
    t.check([c[:2] for c in elf.calls] == [(10, base + 1), (10, base + 100),
                                           (20, base + 2)] and
            elf.calls[0][2] == [("/tmp/jitring-tramp-42-1.so",
                                 0x7e0000001000),
                                ("/tmp/jitring-tramp-42-1.so",
                                 0x7e0000002000)],
            "elf: named once a stack and process while its range holds, "
            "with the trampolines' addresses", elf.calls)
    name = "fn_7e0000001000_%d"
    t.check([s.frames for s in got] ==
            [((name % base, ""), FEVAL,
              ("keep", "/tmp/jitring-tramp-42-1.so"))] * 3 +
            [((name % (base + 100), ""), FEVAL,
              ("keep", "/tmp/jitring-tramp-42-1.so"))] * 2 +
            [((name % base, ""), FEVAL,
              ("keep", "/tmp/jitring-tramp-42-1.so"))] and
            got[0].frames is got[1].frames is got[5].frames,
            "elf: the names given, a frame not named left as read",
            [s.frames for s in got])
    raw = read(text, None, elf=True, raw=True)
    t.check(raw[0][1][0] == (
        "[unknown]", "/tmp/jitring-tramp-42-1.so", 0x7e0000001000),
        "elf, raw: a trampoline's frame keeps its address", raw[0])
    # Its name going on past a blank line (a block read whole, then one
    # that is not a sample's): the address kept with the name.
    text = sample(head(10, 11, T0), A, tr1 + "\n\ncut (x)", B)
    for chunk in (None, 1, 7):
        raw = read(text, None, chunk, elf=True, raw=True)
        t.check([s[1] for s in raw] == [(
            FA, ("[unknown] (/tmp/jitring-tramp-42-1.so)\n\ncut", "x",
                 0x7e0000001000), FB)],
            "elf, raw: a trampoline's name past a blank line (chunks of "
            "%s)" % chunk, raw)


def test_raw_then_emit(t):
    # jitring.perf.live reads a segment raw and pickles it; script(pre=)
    # names and escapes it with the rest: as if read with them.
    text, keys = hostile_text()
    whole = read(text, keys)
    raw = pickle.loads(pickle.dumps(read(text, keys, raw=True)))
    r = ScriptReader(None)
    for h, stack in raw:
        r.emit(h, stack)
    t.check(r.samples == whole and all(type(s) is Sample for s in r.samples),
            "raw samples emitted later: the same Samples")
    # Two slices, each ended: the second's first line a head again.
    half = text.index("\n\n", len(text) // 2) + 2
    r = ScriptReader(dict(keys))
    r.feed([text[:half]])
    r.end()
    r.feed([text[half:]])
    r.end()
    t.check(r.samples == whole, "fed in two slices, each ended: the same")


class Pipe:
    """A perf script process as run_script(stream=True) gives it: its
    output, a pipe (here a file)."""

    def __init__(self, path):
        self.stdout = open(path, "rb")

    def wait(self):
        return 0


def test_script(t):
    text, keys = hostile_text()
    whole = read(text, keys)
    folder = tempfile.mkdtemp(dir=t.scratch)
    saved = (scripting.run_script, scripting.check_script,
             scripting.sample_keys)
    # The slices cut between two samples (perf script --time).
    cuts = [0] + [text.index("\n\n", len(text) * i // 3) + 2
                  for i in (1, 2)] + [len(text)]

    def run_script(steps, perf, out, data, k, inline, stream=False,
                   most=4, tag=""):
        paths = []
        for i in range(min(most, 3)):
            p = os.path.join(folder, "part%d" % i)
            with open(p, "w") as f:
                f.write(text[cuts[i]:cuts[i + 1]] if most > 1 else text)
            paths.append(p)
        return [Pipe(p) for p in paths], [None] * len(paths)
    try:
        scripting.run_script = run_script
        scripting.check_script = lambda *a, **k: None
        scripting.sample_keys = lambda path: dict(keys)
        for most in (1, 3):
            got = scripting.script(None, None, folder, most=most)
            t.check(got == whole and
                    all(type(s) is Sample for s in got),
                    "script() of %d slice(s): the same Samples" % most)
            t.check(len({id(s.frames) for s in got}) ==
                    len({s.frames for s in got}) or most > 1,
                    "one slice: one tuple a stack")
    finally:
        (scripting.run_script, scripting.check_script,
         scripting.sample_keys) = saved


if __name__ == "__main__":
    jrtest.main(globals())
