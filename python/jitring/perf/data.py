# SPDX-License-Identifier: MIT
"""A reader of perf.data, as much of it as record needs.

perf record writes perf.data as a header, the events' attributes and a
data section of records (include/uapi/linux/perf_event.h, perf's
Documentation/perf.data-file-format.txt).  record reads the data section
once, with the file mapped, for three things:

  - the samples: their time and the user-mode stack each one copied
    (``--call-graph dwarf``), to find which JIT code a profile can name
    (jitring.perf.jitsyms), so that ``perf inject`` is given only that code;
  - the names of the files the process mapped (MMAP2), so that the dump
    perf inject would read is found as perf finds it;
  - its records and layout, for jitring.perf.execfix's rewrite, and where
    the dumps' names lie (jitring.perf.jitsyms.relative_markers).

Only single-file perf.data (no --threads directories, no compressed
records) is read; anything else is refused with PerfDataError and the
caller takes the long way (perf inject on the whole dump).

The finishing reads one perf.data several times, each reader for a few
kinds of record (MMAP2 twice, the samples, the LOST records), and a
--wait recording holds millions of switch records among them: walking
them all costs about 0.4 us a record in Python each time.  So the first
reader that asks for records by type walks the data section once and
keeps, per type, the offsets of its records; the others read only their
own records.  The index is kept only inside a kept_indexes() block (the
finishing's), and while the file's identity, size, mtime and data
section stay the same: a file written again is walked again.  A file
written in place faster than its mtime moves (a test's mutations) could
pass for the same file: outside such a block every reader walks afresh.
keep_index() tells it that a rewrite in place kept every record where it
was (jitring.perf.jitsyms.relative_markers renames).
"""

import array
import contextlib
import mmap
import os
import struct


MAGIC = b"PERFILE2"


# The record types read here: the kernel's (perf_event.h's enum
# perf_event_type), then perf's own (from 64).
PERF_RECORD_MMAP = 1


PERF_RECORD_LOST = 2


PERF_RECORD_COMM = 3


PERF_RECORD_EXIT = 4


PERF_RECORD_FORK = 7


PERF_RECORD_SAMPLE = 9


PERF_RECORD_MMAP2 = 10


PERF_RECORD_LOST_SAMPLES = 13


PERF_RECORD_SWITCH = 14


PERF_RECORD_FINISHED_ROUND = 68


PERF_RECORD_COMPRESSED = 81


PERF_CONTEXT_MAX = 2**64 - 4095     # (u64)-4095: markers lie above it


# perf_event_attr.sample_type bits, in the order their fields are laid out
# in a sample (perf_event.h, "struct perf_event_sample" comment).
S_IDENTIFIER = 1 << 16


S_IP = 1 << 0


S_TID = 1 << 1


S_TIME = 1 << 2


S_ADDR = 1 << 3


S_READ = 1 << 4


S_CALLCHAIN = 1 << 5


S_ID = 1 << 6


S_CPU = 1 << 7


S_PERIOD = 1 << 8


S_STREAM_ID = 1 << 9


S_RAW = 1 << 10


S_BRANCH_STACK = 1 << 11


S_REGS_USER = 1 << 12


S_STACK_USER = 1 << 13


# Fields a sample may have before the user stack that this reader cannot
# step over (their size depends on more of the attribute than it reads).
S_UNSUPPORTED = S_READ | S_BRANCH_STACK


HEADER = struct.Struct("<8sQQQQQQQQ32s")   # perf_file_header


_HDR = struct.Struct("<IHH")


_U64 = struct.Struct("<Q")


_U32 = struct.Struct("<I")


class PerfDataError(Exception):
    pass


# The walked files: {path: (key, {type: array of offsets})}, key as
# _index_key() gives it; kept while _KEEP (kept_indexes() blocks open).
_INDEXES = {}


_KEEP = [0]


@contextlib.contextmanager
def kept_indexes():
    """Inside, each file's index is walked once and reused (module doc);
    forgotten when the outermost block ends."""
    _KEEP[0] += 1
    try:
        yield
    finally:
        _KEEP[0] -= 1
        if not _KEEP[0]:
            _INDEXES.clear()


def _index_key(st, data):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, data)


def keep_index(path):
    """@path was rewritten in place without moving or resizing a record:
    its index (if walked) still holds."""
    got = _INDEXES.get(path)
    if got is not None:
        try:
            key = _index_key(os.stat(path), got[0][4])
        except OSError:
            _INDEXES.pop(path, None)
            return
        _INDEXES[path] = (key, got[1])


# perf_event_attr's first size (PERF_ATTR_SIZE_VER0): the fields read here
# lie in it; each attribute in the file is followed by a 16-byte section
# of its ids.
ATTR_MIN = 64 + 16


class Attr:
    __slots__ = ("type", "config", "sample_type", "regs_user", "nregs",
                 "sample_id_all", "ids")

    def __init__(self, raw):
        self.type, = _U32.unpack_from(raw, 0)
        self.config, = _U64.unpack_from(raw, 8)
        self.ids = ()       # the sample ids of its instances
        (self.sample_type,) = _U64.unpack_from(raw, 24)
        flags, = _U64.unpack_from(raw, 40)
        self.sample_id_all = bool(flags & (1 << 18))
        self.regs_user = _U64.unpack_from(raw, 80)[0] if len(raw) >= 88 \
            else 0
        self.nregs = bin(self.regs_user).count("1")


def _sample_head(st):
    """(size, read) for samples of sample_type @st: the bytes of their
    header and of their fields before the call chain (8 bytes each), and
    read(buffer, offset) -> (ip, pid, tid, time) of the sample at offset,
    0 for a field @st lacks.  One struct for all the fields: a sample costs
    one unpack, not a test of each bit."""
    fmt, got = "<8x", []
    for bit, code, names in ((S_IDENTIFIER, "8x", ()), (S_IP, "Q", ("ip",)),
                             (S_TID, "II", ("pid", "tid")),
                             (S_TIME, "Q", ("time",)), (S_ADDR, "8x", ()),
                             (S_ID, "8x", ()), (S_STREAM_ID, "8x", ()),
                             (S_CPU, "8x", ()), (S_PERIOD, "8x", ())):
        if st & bit:
            fmt += code
            got += names
    head = struct.Struct(fmt)
    size, unpack = head.size, head.unpack_from
    if len(got) == 4:
        return size, unpack
    at = [got.index(n) if n in got else None
          for n in ("ip", "pid", "tid", "time")]

    def read(m, off):
        v = unpack(m, off)
        return tuple(0 if i is None else v[i] for i in at)
    return size, read


class PerfData:
    """perf.data, mapped; close() when done (or use with)."""

    def __init__(self, path):
        self.path = path
        self.f = open(path, "rb")
        try:
            self.m = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            self.f.close()
            raise PerfDataError("%s is empty" % path)
        m = self.m
        if len(m) < HEADER.size or m[:8] != MAGIC:
            self.close()
            raise PerfDataError("%s is not a perf.data file (PERFILE2)"
                                % path)
        # (magic, size, attr_size, attrs offset and size, data offset and
        # size, event types offset and size, feature bits)
        self.header = HEADER.unpack_from(m, 0)
        _, _, attr_size, a_off, a_size, d_off, d_size = self.header[:7]
        self.data = (d_off, d_off + d_size)
        # Every offset and size is the file's word: checked before use.
        if d_off + d_size > len(m) or a_off + a_size > len(m):
            self.close()
            raise PerfDataError("%s is cut short" % path)
        if attr_size < ATTR_MIN or a_size // attr_size > 65536:
            self.close()
            raise PerfDataError("%s: attributes of %d bytes, %d in all: "
                                "not a perf.data this reads"
                                % (path, attr_size, a_size))
        self.attrs = []
        for o in range(a_off, a_off + a_size - attr_size + 1, attr_size):
            a = Attr(m[o:o + attr_size - 16])
            i_off, i_size = struct.unpack_from("<QQ", m, o + attr_size - 16)
            if i_size % 8 == 0 and i_off + i_size <= len(m):
                a.ids = struct.unpack_from("<%dQ" % (i_size // 8), m, i_off)
            self.attrs.append(a)
        if not self.attrs:
            self.close()
            raise PerfDataError("%s has no event" % path)
        self.attr = self.attrs[0]

    def close(self):
        try:
            self.m.close()
        except Exception:
            pass
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def index(self):
        """{type: array of the offsets of its records}: walked once per
        file inside a kept_indexes() block, each time outside one."""
        key = _index_key(os.fstat(self.f.fileno()), self.data)
        got = _INDEXES.get(self.path)
        if got is not None and got[0] == key:
            return got[1]
        idx = {}
        for typ, _, off, _ in self.records():
            a = idx.get(typ)
            if a is None:
                a = idx[typ] = array.array("Q")
            a.append(off)
        if _KEEP[0]:
            _INDEXES[self.path] = (key, idx)
        return idx

    def records_of(self, *types):
        """records() of the types @types only, in the file's order."""
        idx = self.index()
        offs = [idx[t] for t in types if t in idx]
        if len(offs) > 1:
            offs = [sorted(o for a in offs for o in a)]
        m = self.m
        unpack = _HDR.unpack_from
        for a in offs:
            for off in a:
                typ, misc, size = unpack(m, off)
                yield typ, misc, off, size

    def records(self):
        """(type, misc, offset, size) of each record of the data
        section."""
        m = self.m
        off, end = self.data
        unpack = _HDR.unpack_from
        while off + 8 <= end:
            typ, misc, size = unpack(m, off)
            if size < 8 or off + size > end:
                raise PerfDataError("%s: a record of size %d at %#x"
                                    % (self.path, size, off))
            if typ == PERF_RECORD_COMPRESSED:
                raise PerfDataError("%s holds compressed records (-z)"
                                    % self.path)
            yield typ, misc, off, size
            off += size

    def mmap2(self):
        """(pid, addr, len, filename) of each MMAP2 record."""
        for _, pid, addr, n, name in self.mmap2_raw():
            yield pid, addr, n, name.decode(errors="replace")

    def mmap2_raw(self):
        """(filename offset, pid, addr, len, filename bytes) of each MMAP2
        record (the offset for a rewrite in place:
        jitring.perf.jitsyms.relative_markers)."""
        m = self.m
        for typ, _, off, size in self.records_of(PERF_RECORD_MMAP2):
            # pid tid addr len pgoff (maj min ino ino_gen | build id)
            # prot flags, then the name.
            name_off = off + 8 + 8 + 24 + 24 + 8
            if name_off > off + size:
                raise PerfDataError("%s: an MMAP2 record of %d bytes at "
                                    "%#x" % (self.path, size, off))
            pid, _, addr, n = struct.unpack_from("<IIQQ", m, off + 8)
            end = m.find(b"\0", name_off, off + size)
            if end < 0:
                end = off + size
            yield name_off, pid, addr, n, m[name_off:end]

    def mmap2_bases(self):
        """(pid, addr - pgoff, filename) of each MMAP2 record: where the
        file's offset 0 would be in the process (a mapping's address for
        an offset of the file is the base plus the offset)."""
        m = self.m
        for name_off, pid, addr, _, name in self.mmap2_raw():
            # pgoff follows pid, tid, addr and len.
            pgoff = struct.unpack_from("<Q", m, name_off - 40)[0]
            yield pid, addr - pgoff, name.decode(errors="replace")

    def mmap2_names(self):
        """{(pid, filename)} of the MMAP2 records (the process's files)."""
        return {(pid, name) for pid, _, _, name in self.mmap2()}

    def samples(self):
        """(pid, tid, time, ip, chain_offset, chain_n, stack_offset,
        stack_size) of each sample: its callchain is chain_n u64 at
        chain_offset (with perf's PERF_CONTEXT_* markers); the user stack
        copy is m[stack_offset:stack_offset + stack_size] (its valid
        part, dyn_size), starting at the sample's stack pointer."""
        if len({a.sample_type for a in self.attrs}) != 1:
            raise PerfDataError("%s has events of different sample "
                                "layouts" % self.path)
        st = self.attr.sample_type
        if st & S_UNSUPPORTED:
            raise PerfDataError("%s: sample layout %#x not read here"
                                % (self.path, st))
        m = self.m
        regs_bytes = 8 * self.attr.nregs
        unpack64 = _U64.unpack_from
        # The fields before the call chain, 8 bytes each: a record shorter
        # than those is refused, and each field of a size of its own is
        # checked against the record's end before it is read.
        fixed, head = _sample_head(st)

        def cut(off, size):
            return PerfDataError("%s: a sample of %d bytes at %#x does not "
                                 "hold its fields" % (self.path, size, off))
        for typ, _, off, size in self.records_of(PERF_RECORD_SAMPLE):
            end = off + size
            if size < fixed:
                raise cut(off, size)
            ip, pid, tid, t = head(m, off)
            p = off + fixed
            co, nr = 0, 0
            if st & S_CALLCHAIN:
                if p + 8 > end:
                    raise cut(off, size)
                nr, = unpack64(m, p)
                co = p + 8
                p += 8 + 8 * nr
            if st & S_RAW:
                if p + 4 > end:
                    raise cut(off, size)
                raw, = _U32.unpack_from(m, p)
                p += 4 + raw
            if st & S_REGS_USER:
                if p + 8 > end:
                    raise cut(off, size)
                abi, = unpack64(m, p)
                p += 8 + (regs_bytes if abi else 0)
            so, sn = 0, 0
            if st & S_STACK_USER:
                if p + 8 > end:
                    raise cut(off, size)
                n, = unpack64(m, p)
                p += 8
                if n:
                    if p + n + 8 > end:
                        raise cut(off, size)
                    dyn, = unpack64(m, p + n)
                    so, sn = p, min(dyn, n)
                    p += n + 8
            if p > end:
                raise cut(off, size)
            yield pid, tid, t, ip, co, nr, so, sn

    def chain(self, offset, n):
        """A sample's callchain, without perf's context markers."""
        return [ip for ip in struct.unpack_from("<%dQ" % n, self.m, offset)
                if ip < PERF_CONTEXT_MAX]
