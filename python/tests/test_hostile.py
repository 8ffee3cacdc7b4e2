# SPDX-License-Identifier: MIT
"""Hostile input is data, never structure: names and recordings that try
to pass for something else, through python -m jitring record and report.
The recordings take dwarf mode's perf inject route (--memfd-trampolines),
whose perf.jit.data the cases read.

 1. names: a program whose functions are named with a newline (one
    spelling a whole perf script sample, header and frame, after it),
    ESC, BEL, NUL, CR, DEL, \\x0b \\x0c \\x1c, U+0085, U+2028, U+2029
    and ';' (in the qualified name and in the file name), and a plainly
    named function burning most of the CPU, recorded: one process in the
    table, no pid 0 or forged one; the table's sample count is that of
    perf.jit.data and of stacks.folded, burn's share the same in both;
    every stacks.folded line is "frames count", as many lines as
    splitlines() finds; no raw control character or line separator in
    the terminal output, stacks.folded, flame.html or the dump (the
    extension escapes the names it gives perf); the escaped names in the
    tables and as text in flame.html's data;
 2. the readers alone: the same recording reported again with the dump's
    names put back raw (a newline in place of "\\n", same length): still
    one process and the same samples, the names escaped on the way out;
 3. fuzz, in process (seed printed; JITRING_FUZZ_SEED, _CASES to vary):
    perf.data and the dump of a small recording mutated a few hundred
    times (bytes flipped, header fields and record sizes set to 0, 1,
    odd or huge values, cut short, zeroed ranges, foreign files), each
    read by jitring.perf.data, jitring.perf.jitsyms and jitring.perf.execfix
    with a time limit: a result or PerfDataError / DumpError / OSError,
    never another exception, never a hang;
 4. fuzz, whole: `report` on a handful of damaged copies of that
    recording (perf.data or perf.jit.data cut, bytes flipped, its header
    or a record broken, empty, a foreign file; the dump, the recording's
    JSON or processes.jsonl garbage): exit 0 with valid outputs, or a
    non-zero exit with one line on stderr, never a traceback, within a
    time limit;
 5. index: jitring.perf.data's per-type index of that recording's
    perf.data gives each type's records as the whole walk does, in the
    file's order; inside kept_indexes() one walk serves every reader
    until the file is written again (unless keep_index()), and outside
    none is kept (the fuzz writes files in place faster than their
    mtime moves).
The cases, each run by name: names (1), readers (2), fuzz (3),
fuzz_report (4) and index (5).  Skips (77) where perf cannot record here.
"""

import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time

import jrtest

# Every character a name may not carry into an output as it is.
RAW = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

# Each function runs until its thread has run the CPU time it is given,
# not a count of loops: its samples (about 30 for each hostile function,
# 400 for burn at 999 Hz) are as many on a fast machine as on a slow one.
PROG = textwrap.dedent(r'''
    import time

    def burn(seconds):
        end = time.thread_time() + seconds
        s = 0
        while time.thread_time() < end:
            for i in range(10000):
                s ^= i * 3
        return s

    def make(qual, filename):
        ns = {"thread_time": time.thread_time}
        src = ("def f(seconds):\n    end = thread_time() + seconds\n"
               "    s = 0\n    while thread_time() < end:\n"
               "        for i in range(1000):\n            s += i\n"
               "    return s\n")
        exec(compile(src, filename, "exec"), ns)
        f = ns["f"]
        f.__code__ = f.__code__.replace(co_qualname=qual)
        return f

    HOSTILE = [
        ("nl\nforged 1/1 1.000000000: cpu-clock:\n\tdeadbeef x (y)\n\n"
         "evil 0/0 1.000000000: cpu-clock:", "a.py"),
        ("esc\x1b[31mred\x07bel", "b\nfile.py"),
        ("nul\x00name\rcr\x7fdel", "c.py"),
        ("sep\u2028line\u2029para\x85nel\x0bvt\x0cff\x1cfs", "d.py"),
        ("semi;colon", "e;f.py"),
    ]

    if __name__ == "__main__":
        fs = [make(q, fn) for q, fn in HOSTILE]
        for _ in range(4):
            for f in fs:
                f(0.008)
        burn(0.4)
''')

# How each hostile function is named in the outputs (qualname:file).
ESCAPED = [
    "nl\\nforged 1/1 1.000000000: cpu-clock:\\n\\tdeadbeef x (y)\\n\\n"
    "evil 0/0 1.000000000: cpu-clock::a.py",
    "esc\\x1b[31mred\\x07bel:b\\nfile.py",
    "nul\\x00name\\rcr\\x7fdel:c.py",
    "sep\\u2028line\\u2029para\\x85nel\\x0bvt\\x0cff\\x1cfs:d.py",
    "semi;colon:e;f.py",
]

SMALL = textwrap.dedent('''
    def spin(n):
        s = 0
        for i in range(n):
            s += i * i
        return s

    if __name__ == "__main__":
        spin(1500000)
''')


def jitring_cmd(args):
    return [sys.executable, "-m", "jitring"] + args


def run(t, args, timeout=120):
    try:
        return subprocess.run(jitring_cmd(args), capture_output=True,
                              text=True, errors="surrogateescape",
                              cwd=t.scratch, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def procs_table(out):
    """(total samples, [(pid, share, command)]) of record's summary."""
    total, rows, on = None, [], False
    for line in out.split("\n"):
        m = re.match(r"^(\d+) samples of ", line)
        if m:
            total = int(m.group(1))
        elif line.split()[:3] == ["pid", "samples", "command"]:
            on = True
        elif on and line.strip():
            parts = line.split(None, 2)
            rows.append((parts[0], parts[1] if len(parts) > 1 else "",
                         parts[2] if len(parts) > 2 else ""))
        elif on:
            break
    return total, rows


def table_names(out):
    """{function: total share} of the 'by total' table."""
    got, on = {}, False
    for line in out.split("\n"):
        if line.startswith("Hottest Python functions by total"):
            on = True
        elif on and not line.strip():
            if got:
                break
        elif on:
            parts = line.split(None, 2)
            if len(parts) == 3 and parts[0].endswith("%"):
                got[parts[2]] = float(parts[0][:-1])
    return got


def folded(t, out, what):
    """[(frames, count)] of @out's stacks.folded, each line checked."""
    with open(os.path.join(out, "stacks.folded"), encoding="utf-8",
              newline="") as f:
        text = f.read()
    lines = text.split("\n")
    t.check(lines[-1] == "" and len(lines) - 1 == len(text.splitlines()),
            "%s: stacks.folded has as many lines as splitlines() finds "
            "(%d)" % (what, len(lines) - 1), len(text.splitlines()))
    got, bad = [], []
    for line in lines[:-1]:
        m = re.match(r"^(\S.*) (\d+)$", line)
        if not m or RAW.search(line):
            bad.append(line)
            continue
        got.append((m.group(1).split(";"), int(m.group(2))))
    t.check(got and not bad, "%s: every stacks.folded line is 'frames "
            "count'" % what, bad[:3])
    return got


def own_left_out(out):
    """The samples record's summary says it left out as jitring's own."""
    m = re.search(r"^(\d+) samples? of jitring's own work", out, re.M)
    return int(m.group(1)) if m else 0


def real_samples(path):
    from jitring.perf.data import PerfData
    with PerfData(path) as pd:
        return [s[0] for s in pd.samples()]


def raw_chars(s):
    return sorted({"%#x" % ord(c) for c in RAW.findall(s)})


def check_recording(t, out, stdout, stderr, what):
    """The checks of a recording of PROG by record (case 1)."""
    with open(os.path.join(out, "processes.jsonl")) as f:
        pids = {json.loads(line)["pid"] for line in f if line.strip()}
    total, rows = procs_table(stdout)
    t.check(len(rows) == 1 and rows[0][0].isdigit() and
            int(rows[0][0]) in pids and rows[0][1] == "100.0%",
            "%s: one process in the table, the program's (no pid 0, "
            "nothing forged)" % what, rows)
    real = real_samples(os.path.join(out, "perf.jit.data"))
    stacks = folded(t, out, what)
    n = sum(c for _, c in stacks)
    own = own_left_out(stdout)
    t.check(total == n and total + own == len(real), "%s: the table's "
            "samples are stacks.folded's, and with jitring's own left out "
            "perf.jit.data's (%s, %d, %d + %d)"
            % (what, total, n, len(real), own))
    roots = {fr[0] for fr, _ in stacks}
    t.check(len(roots) == 1 and all(("[%d]" % p) in r for r in roots
                                    for p in pids),
            "%s: stacks.folded has one process, the program's" % what,
            sorted(roots))
    burn = sum(c for fr, c in stacks
               if any(x.startswith("py::burn:") for x in fr))
    shares = table_names(stdout)
    burn_row = [v for k, v in shares.items() if k.startswith("burn:")]
    t.check(n and burn * 2 > n and burn_row and
            abs(burn_row[0] - 100.0 * burn / n) < 0.11,
            "%s: burn has most samples, its share in the table that of "
            "stacks.folded (%.1f%%)" % (what, 100.0 * burn / max(n, 1)),
            burn_row)
    missing = [e for e in ESCAPED if e not in shares]
    t.check(not missing, "%s: each hostile function in the table, "
            "escaped" % what, missing)
    folded_names = {x for fr, _ in stacks for x in fr}
    missing = [e for e in ESCAPED
               if "py::" + e.replace(";", ":") not in folded_names]
    t.check(not missing, "%s: each hostile function in stacks.folded, "
            "escaped (';' as ':')" % what, missing)
    t.check(not raw_chars(stdout.replace("\n", "")) and
            not raw_chars(stderr.replace("\n", "")),
            "%s: no raw control character or line separator on the "
            "terminal" % what, raw_chars(stdout.replace("\n", "")) +
            raw_chars(stderr.replace("\n", "")))
    with open(os.path.join(out, "flame.html"), encoding="utf-8") as f:
        page = f.read()
    t.check(not raw_chars(page.replace("\n", "")),
            "%s: no raw control character in flame.html" % what,
            raw_chars(page.replace("\n", "")))
    m = re.search(r'<script type="application/json" id="jitring-data">'
                  r'(.*?)</script>', page, re.S)
    # Every name the page draws, from the root's table: each node's n
    # and f index it.
    texts = set(json.loads(m.group(1)).get("t", ())) if m else set()
    missing = [e for e in ESCAPED if "py::" + e not in texts]
    t.check(not missing, "%s: flame.html's data names each hostile "
            "function with its escapes as text" % what, missing)


class Recordings:
    """The recordings the cases read, each made at its first use: that
    of the hostile names (the names and readers cases) and a small one
    to damage (the fuzz cases); None where record failed."""

    def __init__(self, t):
        self.t = t
        self.made = {}
        self.seed = int(os.environ.get("JITRING_FUZZ_SEED", "20261128"))
        self.cases = int(os.environ.get("JITRING_FUZZ_CASES", "300"))
        print("seed %d" % self.seed)
        sys.stdout.flush()

    def _made(self, key, name, text, opts, what):
        """A recording of @text (as @name) into the folder @key, made at
        its first use: (folder, record's CompletedProcess), or None."""
        if key not in self.made:
            t = self.t
            prog = os.path.join(t.scratch, name)
            with open(prog, "w") as f:
                f.write(text)
            out = os.path.join(t.scratch, key)
            p = run(t, ["record", "-o", out, "--keep-perf-data"] + opts +
                    ["--memfd-trampolines", "--", prog])
            ok = t.check(p is not None and p.returncode == 0, what,
                         p and p.stderr[-800:])
            self.made[key] = (out, p) if ok else None
        return self.made[key]

    def names(self):
        """(folder, record's CompletedProcess)."""
        return self._made("names", "hostile.py", PROG, ["--top", "40"],
                          "names: record exits 0")

    def small(self):
        """The folder (perf.data kept)."""
        got = self._made("small", "small.py", SMALL, ["-F", "199"],
                         "fuzz: a small recording to damage")
        return got and got[0]


def test_names(t, rec):
    got = rec.names()
    if not got:
        return
    out, p = got
    check_recording(t, out, p.stdout, p.stderr, "names")
    dumps = jrtest.dumps(out)
    names = [n for d in dumps for n in jrtest.load_names(d)]
    t.check(names and not any(RAW.search(n) for n in names),
            "names: no name in the dump holds a control character "
            "(escaped by the extension)",
            [n for n in names if RAW.search(n)][:3])
    t.check(all(any(n == "py::" + e for n in names) for e in ESCAPED),
            "names: the dump holds each hostile name escaped")


# Escapes put back raw, each as long as the escape (the dump's records
# keep their sizes): "\n" is a newline and a space.
UNESCAPE = ((b"\\n", b"\n "), (b"\\t", b"\t "), (b"\\x1b", b"\x1b   "),
            (b"\\x07", b"\x07   "), (b"\\x00", b"\x01   "),
            (b"\\u2028", b"\xe2\x80\xa8   "), (b"\\x85", b"\xc2\x85  "))


def test_readers(t, rec):
    """The dump's names made raw again (a newline for "\\n", same
    length): the readers alone keep the samples and escape the names."""
    got = rec.names()
    if not got:
        return
    out = got[0]
    for d in jrtest.dumps(out):
        with open(d, "rb") as f:
            data = bytearray(f.read())
        off = 40
        while off + 16 <= len(data):
            rid, size = struct.unpack_from("<II", data, off)
            if size < 16:
                break
            if rid == 0:                    # CODE_LOAD: its name at +56
                end = data.index(b"\0", off + 56)
                name = bytes(data[off + 56:end])
                for esc, raw in UNESCAPE:
                    name = name.replace(esc, raw)
                data[off + 56:end] = name
            off += size
        with open(d, "wb") as f:
            f.write(data)
    for n in os.listdir(out):
        if n.startswith("jitted-") or n == "perf.jit.data":
            os.unlink(os.path.join(out, n))
    p = run(t, ["report", out, "--top", "40"])
    if not t.check(p is not None and p.returncode == 0,
                   "readers: report of raw names exits 0",
                   p and p.stderr[-800:]):
        return
    total, rows = procs_table(p.stdout)
    with open(os.path.join(out, "processes.jsonl")) as f:
        pids = {json.loads(line)["pid"] for line in f if line.strip()}
    t.check(len(rows) == 1 and rows[0][0].isdigit() and
            int(rows[0][0]) in pids,
            "readers: one process in the table, no forged one", rows)
    real = real_samples(os.path.join(out, "perf.jit.data"))
    stacks = folded(t, out, "readers")
    n = sum(c for _, c in stacks)
    own = own_left_out(p.stdout)
    t.check(total == n and total + own == len(real), "readers: the "
            "samples add up (%s, %d, %d + %d)" % (total, n, len(real), own))
    shares = table_names(p.stdout)
    t.check(any(k.startswith("esc\\x1b   [31mred\\x07   bel:b\\n file")
                for k in shares) and
            any(k.startswith("nl\\n forged") for k in shares),
            "readers: raw names escaped in the table",
            [k for k in shares if k.startswith(("esc", "nl"))])
    t.check(not raw_chars(p.stdout.replace("\n", "")),
            "readers: no raw control character on the terminal",
            raw_chars(p.stdout.replace("\n", "")))
    with open(os.path.join(out, "flame.html"), encoding="utf-8") as f:
        page = f.read()
    t.check(not raw_chars(page.replace("\n", "")),
            "readers: no raw control character in flame.html")


# ---- fuzz ----------------------------------------------------------------

class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def records_of(data):
    """Offsets of perf.data's data-section records (for mutations)."""
    d_off, d_size = struct.unpack_from("<QQ", data, 40)
    offs, off = [], d_off
    while off + 8 <= d_off + d_size:
        size = struct.unpack_from("<H", data, off + 6)[0]
        if size < 8:
            break
        offs.append(off)
        off += size
    return offs


def mutate(rng, data, offs):
    """A damaged copy of perf.data @data and what was done."""
    b = bytearray(data)
    k = rng.randrange(9)
    if k == 0:
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), "bytes flipped"
    if k == 1:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(104)] = rng.randrange(256)
        return bytes(b), "header bytes flipped"
    if k == 2:
        field = rng.randrange(1, 13)        # a u64 of the header
        v = rng.choice([0, 1, 7, 8, 16, 2**63, 2**64 - 1, len(b),
                        len(b) - 8, rng.randrange(2**64)])
        struct.pack_into("<Q", b, 8 * field if field < 13 else 96, v)
        return bytes(b), "header u64 %d = %#x" % (field, v)
    if k in (3, 4):
        off = rng.choice(offs)
        v = rng.choice([0, 1, 7, 8, 9, 15, 0xffff, rng.randrange(65536)])
        struct.pack_into("<H", b, off + 6, v)
        return bytes(b), "record at %#x size %d" % (off, v)
    if k == 5:
        off = rng.choice(offs)
        pos = off + 8 + rng.randrange(0, 64, 8)
        if pos + 8 <= len(b):
            struct.pack_into("<Q", b, pos, rng.choice(
                [0, 2**64 - 1, 2**32, rng.randrange(2**64)]))
        return bytes(b), "record field at %#x" % pos
    if k == 6:
        n = rng.randrange(len(b))
        return bytes(b[:n]), "cut at %d" % n
    if k == 7:
        s = rng.randrange(len(b))
        n = rng.randint(1, 4096)
        b[s:s + n] = bytes(len(b[s:s + n]))
        return bytes(b), "zeroed %d at %d" % (n, s)
    return rng.choice([
        (b"", "empty"),
        (b"PERFILE2", "the magic alone"),
        (b"PERFILE2" + bytes(rng.randrange(200)), "the magic and zeros"),
        (bytes(rng.randrange(256) for _ in range(4096)), "random bytes"),
        (b"#!/bin/sh\necho not perf\n", "a script"),
    ])


def mutate_dump(rng, data):
    b = bytearray(data)
    k = rng.randrange(5)
    if k == 0:
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), "bytes flipped"
    if k == 1:
        # A record's size field (the u32 at +4) somewhere after the header.
        pos = 40 + 4 + 8 * rng.randrange((len(b) - 48) // 8)
        struct.pack_into("<I", b, pos, rng.choice([0, 1, 16, 17, 56,
                                                   2**32 - 1]))
        return bytes(b), "a u32 at %d" % pos
    if k == 2:
        n = rng.randrange(len(b))
        return bytes(b[:n]), "cut at %d" % n
    if k == 3:
        pos = 40 + 8 * rng.randrange((len(b) - 48) // 8)
        struct.pack_into("<Q", b, pos, rng.choice([0, 2**64 - 1,
                                                   rng.randrange(2**64)]))
        return bytes(b), "a u64 at %d" % pos
    return bytes(rng.randrange(256) for _ in range(rng.randrange(4096))), \
        "random bytes"


def parse_all(path):
    """Everything the readers do with a perf.data (its dumps as its
    marker mmaps name them)."""
    from jitring.perf.data import PerfData
    from jitring.perf.execfix import fix
    from jitring.perf.jitsyms import FPNames, marked_dumps, referenced
    with PerfData(path) as pd:
        n = sum(1 for _ in pd.records())
        pd.mmap2_names()
        for s in pd.samples():
            if s[5]:
                pd.chain(s[4], s[5])
        dumps, _ = marked_dumps(pd)
        referenced(pd, dumps)
    FPNames(path)
    fix(path)
    return n


def parse_dump(path, tmp):
    from jitring.perf.jitsyms import Dump
    d = Dump(path)
    for i in range(len(d.loads)):
        d.name(i)
        d.find(d.addr[i], d.time[i])
    d.blocks()
    d.write_reduced(path, tmp, set(range(0, len(d.loads), 2)))


def in_process(t, out, seed, cases):
    from jitring.perf.data import PerfDataError
    from jitring.perf.jitsyms import DumpError
    ok = (PerfDataError, DumpError, OSError)
    with open(os.path.join(out, "perf.data"), "rb") as f:
        data = f.read()
    dump = jrtest.dumps(out)[0]
    with open(dump, "rb") as f:
        dump_data = f.read()
    offs = records_of(data)
    rng = random.Random(seed)
    path = os.path.join(t.scratch, "fuzz.data")
    dpath = os.path.join(t.scratch, "jit-fuzz.dump")
    tmp = os.path.join(t.scratch, "jit-fuzz.out")
    # The case's time limit (jrtest.main's alarm) shares the timer the
    # reads' limits use: set again, less the time spent, after them.
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    old = signal.signal(signal.SIGALRM, _alarm)
    bad, results = [], {"read": 0, "refused": 0}
    t0 = time.monotonic()
    try:
        for i in range(cases):
            dump_case = i % 4 == 3
            if dump_case:
                mutated, how = mutate_dump(rng, dump_data)
            else:
                mutated, how = mutate(rng, data, offs)
            with open(dpath if dump_case else path, "wb") as f:
                f.write(mutated)
            signal.setitimer(signal.ITIMER_REAL, 10)
            try:
                if dump_case:
                    parse_dump(dpath, tmp)
                else:
                    parse_all(path)
                results["read"] += 1
            except ok:
                results["refused"] += 1
            except Hang:
                bad.append((i, how, "no result in 10 s"))
            except Exception as e:
                bad.append((i, how, "%s: %s" % (type(e).__name__, e)))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old)
        if left:
            signal.setitimer(signal.ITIMER_REAL,
                             max(0.001, left - (time.monotonic() - t0)))
    print("fuzz: %d cases in %.1f s: %d read, %d refused"
          % (cases, time.monotonic() - t0, results["read"],
             results["refused"]))
    t.check(not bad, "fuzz: %d mutated perf.data and dumps read in "
            "process: a result or the readers' own error, no other "
            "exception, no hang" % cases,
            "%d cases: %s" % (len(bad), bad[:5]))


def whole(t, small, seed):
    """report on damaged copies of @small (a recording with perf.data
    kept)."""
    rng = random.Random(seed)

    def read(name):
        with open(os.path.join(small, name), "rb") as f:
            return f.read()
    data, jit = read("perf.data"), read("perf.jit.data")
    offs = records_of(data)
    b = bytearray(data)
    struct.pack_into("<H", b, offs[len(offs) // 2] + 6, 0)
    c = bytearray(data)
    for _ in range(4):
        c[rng.randrange(8, 104)] = rng.randrange(256)
    e = bytearray(data)
    for _ in range(32):
        e[rng.randrange(offs[0], offs[-1])] = rng.randrange(256)
    joffs = records_of(jit)
    j = bytearray(jit)
    for _ in range(32):
        j[rng.randrange(joffs[0], joffs[-1])] = rng.randrange(256)
    with open(sys.executable, "rb") as f:
        foreign = f.read(65536)
    with open(os.path.join(small, "processes.jsonl")) as f:
        pid = json.loads(f.readline())["pid"]
    # (what, {file: its bytes}): perf.jit.data given means the recording
    # is injected (perf.data left out); DUMP is the dump.
    cases = [
        ("bytes of the data section flipped", {"perf.data": bytes(e)}),
        ("perf.data cut in half", {"perf.data": data[:len(data) // 2]}),
        ("a record's size 0", {"perf.data": bytes(b)}),
        ("header bytes flipped", {"perf.data": bytes(c)}),
        ("perf.data empty", {"perf.data": b""}),
        ("perf.data a foreign file", {"perf.data": foreign}),
        ("perf.jit.data bytes flipped", {"perf.jit.data": bytes(j)}),
        ("perf.jit.data cut short", {"perf.jit.data": jit[:len(jit) // 3]}),
        ("jitring-record.json garbage", {"perf.data": data,
                                         "jitring-record.json": b"[\x00"}),
        ("processes.jsonl garbage", {
            "perf.data": data,
            "processes.jsonl": b'{"pid": [1]}\n[2]\n"x"\n{"pid": %d, '
                               b'"argv": 5}\n\xff\n' % pid}),
        # Last: perf inject opens the dump perf.data's marker names, the
        # original recording's, which this spoils.
        ("the dump garbage", {"perf.data": data, "DUMP": bytes(
            rng.randrange(256) for _ in range(8192))}),
    ]
    base = ("jitring-record.json", "processes.jsonl")
    bad = []
    for i, (what, files) in enumerate(cases):
        d = os.path.join(t.scratch, "whole%d" % i)
        os.mkdir(d)
        for n in os.listdir(small):
            if n in base or n.endswith(".dump"):
                shutil.copy(os.path.join(small, n), d)
        for n, content in files.items():
            for path in (jrtest.dumps(small) if n == "DUMP" else
                         [os.path.join(d, n)]):
                with open(path, "wb") as f:
                    f.write(content)
        t0 = time.monotonic()
        p = run(t, ["report", d], timeout=60)
        took = time.monotonic() - t0
        if p is None:
            bad.append((what, "no result in 60 s"))
            continue
        lines = [l for l in p.stderr.split("\n") if l.strip()]
        if "Traceback" in p.stderr:
            bad.append((what, "a traceback: " + p.stderr[-400:]))
        elif p.returncode != 0 and not (
                len(lines) == 1 and lines[0].startswith("jitring ")):
            bad.append((what, "exit %d, not one line: %r"
                        % (p.returncode, p.stderr[-300:])))
        elif p.returncode == 0 and not folded(t, d, "whole: " + what):
            bad.append((what, "exit 0 without stacks"))
        print("whole: %s: exit %d in %.1f s: %s"
              % (what, p.returncode, took, lines[-1] if lines else ""))
    t.check(not bad, "fuzz: report on %d damaged recordings: exit 0 and "
            "valid outputs, or a one-line reason and a non-zero exit; no "
            "traceback, no hang" % len(cases), bad)


def test_fuzz(t, rec):
    small = rec.small()
    if small:
        in_process(t, small, rec.seed, rec.cases)


def test_fuzz_report(t, rec):
    small = rec.small()
    if small:
        whole(t, small, rec.seed)


def rewrite(path, off):
    """Write @path's byte at @off again, in place, its mtime a second on
    (as a write a second later would leave it)."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(b)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_index(t, rec):
    """The per-type index of perf.data's records (jitring.perf.data) on
    the small recording: each type's records and a pair's as the full
    walk gives them, in the file's order; inside kept_indexes() one walk
    serves every reader of the file, until the file is written again
    (unless keep_index() says its records stayed put); outside, none is
    kept."""
    small = rec.small()
    if not small:
        return
    from jitring.perf.data import PerfData, keep_index, kept_indexes
    path = os.path.join(t.scratch, "index.data")
    shutil.copyfile(os.path.join(small, "perf.data"), path)
    with PerfData(path) as pd:
        every = list(pd.records())
        types = sorted({r[0] for r in every})
        same = all(list(pd.records_of(k)) == [r for r in every
                                               if r[0] == k]
                   for k in types)
        pair = types[:2]
        both = list(pd.records_of(*pair)) == [r for r in every
                                              if r[0] in pair]
    t.check(len(types) > 2 and same and both,
            "index: each type's records, and two types' in the file's "
            "order, as the whole walk gives them (%d types)" % len(types))
    with kept_indexes():
        with PerfData(path) as a, PerfData(path) as b:
            shared = a.index() is b.index()
        first = PerfData(path)
        idx = first.index()
        first.close()
        rewrite(path, every[-1][2] + 8)
        with PerfData(path) as c:
            walked = c.index() is not idx
            again = c.index()
        rewrite(path, every[-1][2] + 8)
        keep_index(path)
        with PerfData(path) as d:
            kept = d.index() is again
    with PerfData(path) as e, PerfData(path) as f:
        outside = e.index() is not f.index()
    t.check(shared and walked and kept and outside,
            "index: one walk for two readers in a kept_indexes() block "
            "(%s), walked again once the file is written (%s), kept after "
            "keep_index() (%s), none kept outside a block (%s)"
            % (shared, walked, kept, outside))


def fixture(t):
    why = jrtest.perf_usable()
    if why:
        t.skip(why)
    return (Recordings(t),)


if __name__ == "__main__":
    jrtest.main(globals(), fixture)
