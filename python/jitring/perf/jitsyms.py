# SPDX-License-Identifier: MIT
"""The JIT code a jitdump describes, by address and time.

A dump (``jit-<pid>.dump``) describes every copy of a trampoline jitring
made: ``[UNWINDING_INFO][DEBUG_INFO] CODE_LOAD`` per function, one
contiguous group each (perf attaches the info records to the next
CODE_LOAD in file order).  A copy's address is reused by a later function
once the code object it served is freed, so an address names a function
only together with a time: the latest CODE_LOAD of that address at or
before the time, as perf's own injected mmaps resolve it.

Two uses:

  - reduce(): the dump perf inject is given, holding the groups of the
    functions a profile can name and no other (record's cost then follows
    the samples, not every function the program ever made);
  - Symbols.name(): address + time -> the ``py::`` name, for stacks perf
    unwound with frame pointers and could not name (perf 6.1 reads
    perf-<pid>.map for anonymous memory only; the trampoline arenas are a
    memfd's).
"""

import bisect
import gc
import os
import re
import struct


MAGIC = 0x4A695444


CODE_LOAD, CODE_MOVE, DEBUG_INFO, CODE_CLOSE, UNWINDING_INFO = 0, 1, 2, 3, 4


HEADER = 40


# A CODE_LOAD's fixed part (the prefix, pid, tid, vma, code_addr,
# code_size, code_index) and its name's NUL.
CODE_LOAD_MIN = 57


_PREFIX = struct.Struct("<IIQ")


_ADDR_SIZE = struct.Struct("<QQ")    # a CODE_LOAD's code_addr, code_size


_U64 = struct.Struct("<Q")


class DumpError(Exception):
    pass


class no_gc:
    """The cyclic GC off while a few hundred thousand objects are made:
    the free-threaded 3.13's collector is not generational, so each
    collection walks every object (a 200,000-load dump took 9.7 s to
    read with it, 2.2 s without)."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


class Dump:
    """A dump's CODE_LOADs, in file order: addr[i], size[i], time[i],
    and span[i] = (start, end), the file range of load i's whole group
    (its UNWINDING_INFO and DEBUG_INFO with it).  Names are read only
    when asked for (name(i)): at 200,000 loads the parse is one pass of
    unpack_from over the file read into memory."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise DumpError("%s: %s" % (path, e.strerror))
        with no_gc():
            self._parse(data)
        self.data = data

    def _parse(self, m):
        if len(m) < HEADER or _PREFIX.unpack_from(m, 0)[0] != MAGIC:
            raise DumpError("%s is not a jitdump" % self.path)
        self.header = bytes(m[:HEADER])
        addr, size, times, span = [], [], [], []
        off, end = HEADER, len(m)
        group = HEADER
        unpack, unpack2 = _PREFIX.unpack_from, _ADDR_SIZE.unpack_from
        info = (DEBUG_INFO, UNWINDING_INFO)
        while off + 16 <= end:
            rid, n, ts = unpack(m, off)
            if n < 16 or off + n > end:
                break               # perf stops here too
            if rid == CODE_LOAD and n < CODE_LOAD_MIN:
                break               # not a load: its fields run past it
            if rid == CODE_LOAD:
                a, sz = unpack2(m, off + 32)
                addr.append(a)
                size.append(sz)
                times.append(ts)
                span.append((group, off + n))
                group = off + n
            elif rid == CODE_CLOSE:
                break
            elif rid not in info:
                group = off + n     # CODE_MOVE, unknown: on their own
            off += n
        self.addr, self.size, self.time, self.span = addr, size, times, span
        # Sorted by (address, time): find() takes the last entry at or
        # below an address, then steps back over that address's later
        # loads to the one live at the time.
        order = sorted(range(len(addr)), key=lambda i: (addr[i], times[i]))
        self.order = order
        self.saddr = [addr[i] for i in order]

    @property
    def loads(self):
        return self.addr

    def live(self, a, t):
        """(find(a, t), since, until): the load, and the times between
        which the answer holds (that load's, and the next load's of its
        address or infinity)."""
        k = bisect.bisect_right(self.saddr, a) - 1
        until = float("inf")
        if k < 0:
            return -1, 0, until
        start = self.saddr[k]
        order, times = self.order, self.time
        while k >= 0 and self.saddr[k] == start:
            i = order[k]
            if times[i] <= t:
                return (i if a < start + self.size[i] else -1,
                        times[i], until)
            until = times[i]
            k -= 1
        return -1, 0, until

    def find(self, a, t):
        """The load whose code holds address @a at time @t (the latest
        load of that address at or before @t), or -1."""
        k = bisect.bisect_right(self.saddr, a) - 1
        if k < 0:
            return -1
        start = self.saddr[k]
        order, times = self.order, self.time
        while k >= 0 and self.saddr[k] == start:
            i = order[k]
            if times[i] <= t:
                return i if a < start + self.size[i] else -1
            k -= 1
        return -1

    def name(self, i):
        s, e = self.span[i]
        # The name follows the CODE_LOAD's 56 fixed bytes; the load is
        # the group's last record: find it from the group's end.
        off = s
        while off < e:
            n = _PREFIX.unpack_from(self.data, off)[1]
            if off + n == e or n < 16:
                break
            off += n
        n0 = off + 56
        n1 = self.data.find(b"\0", n0, e)
        return self.data[n0:n1 if n1 >= 0 else n0].decode(errors="replace")

    def blocks(self, shift=24):
        """The distinct addr >> shift of all code (for a byte search)."""
        out = set()
        top = 2**64 - 1
        for a, sz in zip(self.addr, self.size):
            out.add(a >> shift)
            out.add(min(a + max(sz, 1) - 1, top) >> shift)
        return out

    def write_reduced(self, src, dst, keep):
        """Write to @dst the header and the groups of the loads in @keep
        (indexes into loads), in file order, read from @src (this dump's
        file)."""
        with open(src, "rb") as f, open(dst, "wb") as out:
            out.write(self.header)
            for i in sorted(keep):
                start, end = self.span[i]
                out.write(self.data[start:end])


# The most 16 MiB blocks of JIT code referenced() searches perf.data for
# (jitring's trampoline arenas take a few).
MAX_BLOCKS = 4096


def referenced(pd, dumps):
    """{pid: set of load indexes} of the JIT code the samples of @pd (a
    jitring.perf.data.PerfData) can reach: each sample's IP, and every
    8-byte word of its user-stack copy that lies in a load's code at the
    sample's time (a return address into a trampoline; a stale word may
    add a function the profile does not show, never miss one the
    unwinder can reach, as it unwinds from that copy alone).  @dumps:
    {pid: Dump}.  An address is looked up in every dump, not only the
    sample's process's: a fork child runs its parent's copies, which perf
    names from the parent's injected images (it clones the parent's maps
    at the fork).

    The stack copies are not read word by word: the mapped file is
    searched (memmem) for the high five bytes of each 16 MiB block that
    holds JIT code, and only the hits are looked at."""
    samples = []                    # (stack_offset, stack_end, time)
    found = {pid: set() for pid in dumps}
    every = list(dumps.items())

    def mark(addr, t):
        for pid, d in every:
            i = d.find(addr, t)
            if i >= 0:
                found[pid].add(i)

    if not every:
        return found
    for pid, _, t, ip, _, _, so, sn in pd.samples():
        mark(ip, t)
        if sn:
            samples.append((so, so + sn, t))
    if not samples:
        return found
    starts = [s[0] for s in samples]
    blocks = set()
    for d in dumps.values():
        blocks |= d.blocks(24)
    if len(blocks) > MAX_BLOCKS:
        # A search of the whole file each: a damaged dump's addresses
        # would make it endless.
        raise DumpError("the dumps' code spans %d blocks of 16 MiB"
                        % len(blocks))
    m = pd.m
    lo, hi = pd.data
    unpack = _U64.unpack_from
    for b in blocks:
        pat = struct.pack("<Q", b << 24)[3:]
        h = m.find(pat, lo, hi)
        while h >= 0:
            w = h - 3
            k = bisect.bisect_right(starts, w) - 1
            if k >= 0:
                so, se, t = samples[k]
                if w + 8 <= se and not (w - so) & 7:
                    mark(unpack(m, w)[0], t)
            h = m.find(pat, h + 1, hi)
    return found


# ---- the dumps perf inject is given -----------------------------------
FULL = ".full"


DUMP_NAME = re.compile(r"^jit-(\d+)\.dump$")


# The trampolines' ELF file (JITRING_F_TRAMPOLINE_ELF: record in dwarf mode).
TRAMP_NAME = re.compile(r"^jitring-tramp-(\d+)-[0-9a-f]+\.so$")


def restore(out, paths=()):
    """Put back every full dump reduce() moved aside: those of @paths and
    any in @out (one left by an interrupted finishing)."""
    fulls = [p + FULL for p in paths]
    fulls += [os.path.join(out, n) for n in os.listdir(out)
              if n.endswith(FULL) and DUMP_NAME.match(n[:-len(FULL)])]
    for f in fulls:
        # Never over a dump some process writes (a full dump beside one is
        # then left as it is).
        if os.path.exists(f) and not (os.path.exists(f[:-len(FULL)]) and
                                      written(f[:-len(FULL)])):
            os.replace(f, f[:-len(FULL)])


def relative_markers(perf_data):
    """Rename, in place, the dumps' marker mmaps of @perf_data to
    ``./jit-<pid>.dump`` where the dump lies beside it: perf inject, run
    in that folder, then opens the dumps (and writes its images) there
    wherever the folder has been moved, where the kernel gave perf the
    absolute path.  The trampolines' ELF files' mmaps likewise (perf
    script reads their unwind tables).  The new name is never longer
    (the rest of the name's room is zeroed).  Returns how many; -1 when
    @perf_data is not read here (left as it is)."""
    from jitring.perf.data import PerfData, PerfDataError, keep_index
    d = os.path.dirname(os.path.abspath(perf_data))
    edits = []
    try:
        with PerfData(perf_data) as pd:
            for off, _, _, _, name in pd.mmap2_raw():
                base = os.path.basename(name).decode(errors="replace")
                new = b"./" + os.path.basename(name)
                if (name.startswith(b"/") and
                        (DUMP_NAME.match(base) or TRAMP_NAME.match(base)) and
                        len(new) <= len(name) and
                        os.path.isfile(os.path.join(d, base))):
                    edits.append((off, new.ljust(len(name), b"\0")))
    except PerfDataError:
        return -1
    if edits:
        with open(perf_data, "r+b") as f:
            for off, b in edits:
                f.seek(off)
                f.write(b)
        keep_index(perf_data)     # names only: records stay
    return len(edits)


def marked_dumps(pd):
    """({pid: Dump}, {pid: path}) of the dumps perf.data's marker mmaps
    name (where perf inject opens them: a relative name from perf.data's
    folder)."""
    dumps, paths = {}, {}
    here = os.path.dirname(os.path.abspath(pd.path))
    for pid, name in pd.mmap2_names():
        name = os.path.join(here, name)
        m = DUMP_NAME.match(os.path.basename(name))
        if not m or int(m.group(1)) != pid or not os.path.isfile(name):
            continue
        paths[pid] = name
        dumps[pid] = Dump(name)
    return dumps, paths


def written(path):
    """Whether a process still writes the dump at @path: the library
    holds a write lock on it (an OFD lock, or flock where the kernel has
    none) while its session is on, or until exit without release."""
    import fcntl
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return True         # not ours to move
    try:
        for lock, unlock in ((lambda: fcntl.lockf(fd, fcntl.LOCK_EX |
                                                  fcntl.LOCK_NB),
                              lambda: fcntl.lockf(fd, fcntl.LOCK_UN)),
                             (lambda: fcntl.flock(fd, fcntl.LOCK_EX |
                                                  fcntl.LOCK_NB),
                              lambda: fcntl.flock(fd, fcntl.LOCK_UN))):
            try:
                lock()
            except OSError:
                return True
            unlock()
        return False
    finally:
        os.close(fd)


def reduce(out, perf_data):
    """Give perf inject only the JIT code the samples can reach: each dump
    perf.data's marker mmaps name (where perf inject will open it) is
    moved aside to <dump>.full and a dump of the reached functions' groups
    written in its place; restore(out) undoes it.  Only dumps in @out that
    no process writes any more: a live dump (a service's own, its jitring
    on before record came) is never moved, and is given whole.  Returns
    {path: (loads, kept)}; raises PerfDataError or DumpError where
    perf.data or a dump cannot be read (the caller then injects the full
    dumps)."""
    from jitring.perf.data import PerfData
    restore(out)
    stats = {}
    here = os.path.realpath(out)
    with PerfData(perf_data) as pd, no_gc():
        dumps, paths = marked_dumps(pd)
        paths = {pid: p for pid, p in paths.items()
                 if os.path.dirname(os.path.realpath(p)) == here and
                 not written(p)}
        found = referenced(pd, {pid: dumps[pid] for pid in paths})
    for pid, path in paths.items():
        d, keep = dumps[pid], found.get(pid, set())
        full = path + FULL
        os.replace(path, full)
        try:
            d.write_reduced(full, path, keep)
        except BaseException:
            os.replace(full, path)
            raise
        stats[path] = (len(d.loads), len(keep))
    return stats


# ---- frame-pointer stacks ---------------------------------------------
ARENA = "/memfd:jitring-trampolines"


def _inside(r, a):
    if not r:
        return False
    k = bisect.bisect_right(r[0], a) - 1
    return k >= 0 and a < r[1][k]


class FPNames:
    """The names of the trampoline frames of stacks perf recorded with
    frame pointers (--call-graph fp), which perf script prints as
    ``[unknown]`` in ``/memfd:jitring-trampolines (deleted)``: perf 6.1
    reads perf-<pid>.map for anonymous memory only.  perf script prints
    them map-relative (every arena is the memfd at offset 0), so the
    absolute addresses come from perf.data's own callchains: of each
    sample (tid, time), the entries inside an arena, in order, one per
    such frame perf script prints."""

    def __init__(self, perf_data):
        from jitring.perf.data import PerfData
        self.chains = {}
        with PerfData(perf_data) as pd, no_gc():
            dumps, _ = marked_dumps(pd)
            arenas = {}
            for pid, addr, n, name in pd.mmap2():
                if name.startswith(ARENA):
                    arenas.setdefault(pid, []).append((addr, addr + n))
            # A fork child runs its parent's arenas (no MMAP2 of its
            # own for them) and its parent's copies (in the parent's
            # dump): the process's own dump first, then any; an address
            # in any process's arenas is a trampoline's.
            allr = sorted(r for lst in arenas.values() for r in lst)
            allr = ([a for a, _ in allr], [e for _, e in allr])
            order = list(dumps.items())
            # A profile's chains repeat the same return addresses: each
            # address is placed in or out of the arenas once (@inside;
            # every process's are in allr), and each (process, address)
            # named once for the times its own dump's answer holds
            # (@held: since, until, name).
            inside, held = {}, {}
            for pid, tid, t, ip, co, nr, _, _ in pd.samples():
                if not nr or not allr[0]:
                    continue
                own = dumps.get(pid)
                names = []
                for a in pd.chain(co, nr):
                    v = inside.get(a)
                    if v is None:
                        v = inside[a] = _inside(allr, a)
                    if not v:
                        continue
                    h = held.get((pid, a))
                    if h is not None and h[0] <= t < h[1]:
                        names.append(h[2])
                        continue
                    name = None
                    if own is not None:
                        i, since, until = own.live(a, t)
                        if i >= 0:
                            name = own.name(i)
                            held[(pid, a)] = (since, until, name)
                    if name is None:
                        for p, d in order:
                            i = d.find(a, t)
                            if i >= 0:
                                name = d.name(i)
                                break
                    names.append(name)
                if names:
                    self.chains[(tid, t)] = names

    def resolve(self, tid, t, frames):
        """@frames (leaf first, (symbol, dso) as perf script printed them)
        with the arena frames named."""
        names = self.chains.get((tid, t))
        if not names:
            return frames
        out, k = [], 0
        for sym, dso in frames:
            # perf script prints the dso "(/memfd:... (deleted))": the
            # reader splits it at the inner " (".
            if (dso.startswith(ARENA) or ARENA in sym) and k < len(names):
                if names[k]:
                    sym, dso = names[k], ""
                k += 1
            out.append((sym, dso))
        return out


# ---- DWARF stacks through the trampolines' ELF file -------------------
def memfd_arenas(perf_data):
    """Whether @perf_data maps trampolines from the memfd image (a
    process without the ELF file); True where it cannot be read."""
    from jitring.perf.data import PerfData, PerfDataError
    try:
        with PerfData(perf_data) as pd:
            return any(name.startswith(ARENA)
                       for _, _, _, name in pd.mmap2())
    except (PerfDataError, OSError):
        return True


class ELFNames:
    """The names of the trampoline frames of stacks perf unwound itself
    through the trampolines' ELF file (JITRING_F_TRAMPOLINE_ELF), which
    perf script prints as ``[unknown]`` in ``jitring-tramp-*.so`` at an
    address of the file (its offsets are its addresses): the process's
    address is where the file's offset 0 lies (every mapping of the file
    in a process keeps its layout, see the library's elf_image.c) plus
    that, and the dumps name it, as perf's injected mmaps would have
    (the latest load of the address at or before the sample's time: the
    process's own dump first, then any, for a fork child that runs its
    parent's copies)."""

    def __init__(self, perf_data):
        from jitring.perf.data import PerfData
        self.bases = {}
        with PerfData(perf_data) as pd:
            self.dumps, _ = marked_dumps(pd)
            for pid, base, name in pd.mmap2_bases():
                b = os.path.basename(name)
                if TRAMP_NAME.match(b):
                    self.bases[b] = base
        self.order = list(self.dumps.items())
        self.names = {}
        self.base_of = {}   # dso as perf script printed it -> base
        self.memo = {}      # (pid, address) -> (since, until, name)
        self.spans = {}     # (pid, (dso, address)) -> the same, named()

    def name(self, pid, t, dso, addr):
        """The name of file address @addr of the ELF file @dso (as perf
        script printed it) in process @pid at time @t, or None."""
        base = self.base_of.get(dso)
        if base is None:
            base = self.base_of[dso] = \
                self.bases.get(os.path.basename(dso), -1)
        if base < 0:
            return None
        a = base + addr
        # Most frames are the same few copies, sample after sample: the
        # process's own dump's answer holds until that address's next
        # load.
        m = self.memo.get((pid, a))
        if m is not None and m[0] <= t < m[1]:
            return m[2]
        own = self.dumps.get(pid)
        if own is not None:
            i, since, until = own.live(a, t)
            if i >= 0:
                n = self.memo[(pid, a)] = (since, until, own.name(i))
                return n[2]
        for d in [d for _, d in self.order]:
            i = d.find(a, t)
            if i >= 0:
                k = (id(d), i)
                n = self.names.get(k)
                if n is None:
                    n = self.names[k] = d.name(i)
                return n
        return None

    def named(self, pid, t, frames):
        """(names, since, until): name() of each of @frames ((dso,
        address) pairs) in process @pid at time @t, and the times
        between which every one of those answers holds (t alone where
        one came from another process's dump, or from none)."""
        lo, hi = 0, float("inf")
        out = []
        spans = self.spans
        for fr in frames:
            k = (pid, fr)
            c = spans.get(k)
            if c is None or not c[0] <= t < c[1]:
                dso, addr = fr
                n = self.name(pid, t, dso, addr)
                base = self.base_of[dso]
                m = self.memo.get((pid, base + addr)) if base >= 0 \
                    else None
                if base < 0:
                    c = (0, float("inf"), None)     # never named
                elif m is not None and m[0] <= t < m[1]:
                    c = m
                else:
                    c = (t, t + 1, n)
                spans[k] = c
            if c[0] > lo:
                lo = c[0]
            if c[1] < hi:
                hi = c[1]
            out.append(c[2])
        return out, lo, hi

    def resolve(self, pid, t, frames):
        """@frames (leaf first: (symbol, dso), or (symbol, dso, address)
        for a frame in an ELF file) with those named ((name, "")), or as
        perf printed them where no dump names them."""
        out = []
        for fr in frames:
            if len(fr) == 3:
                n = self.name(pid, t, fr[1], fr[2])
                fr = (n, "") if n else fr[:2]
            out.append(fr)
        return out
