# SPDX-License-Identifier: MIT
"""Make perf 6.1 unwind processes that exec'd, by forgetting what they
mapped before exec.

A child that a Python program forks and that execs the interpreter again
(subprocess, multiprocessing spawn and forkserver) starts, in perf's view,
with a copy of its parent's mappings (PERF_RECORD_FORK); exec does not
clear them (perf only flushes its unwind cache on a COMM event with
PERF_RECORD_MISC_COMM_EXEC), so after exec the child holds the
interpreter twice: the parent's mapping at the parent's address and its
own.  perf 6.1's DWARF unwinder (libunwind, read_unwind_spec_eh_frame())
places .eh_frame_hdr from the lowest address any mapping of that file has
in the process; when the stale one is lower (half the time, with address
randomisation) every sample of the child stops at its leaf, and its
Python functions vanish from the profile.

The fix, done to perf.data before perf inject reads it: right after each
COMM event marked COMM_EXEC, a PERF_RECORD_MMAP2 of "//anon" over the
whole user address space, for the same pid and tid and with the same
sample_id fields (so the same time and event): perf's overlap fix-up drops
every mapping from before exec, and the mappings exec then makes split the
anonymous one as they arrive.  The file is rewritten in place: records in
the data section are copied, the feature sections after it move by what
was added, and offsets that point past the data section move with them.
"""

import os
import struct

HEADER = struct.Struct("<8sQQQQQQQQ32s")     # perf_file_header
SECTION = struct.Struct("<QQ")
EVENT = struct.Struct("<IHH")               # perf_event_header
RECORD_COMM = 3
RECORD_MMAP2 = 10
MISC_COMM_EXEC = 1 << 13
MISC_USER = 2
USER_END = 1 << 47
PROT_READ = 1
MAP_PRIVATE = 2
ANON = b"//anon\0\0"


def _wipe(comm):
    """The MMAP2 record that goes after @comm (a COMM_EXEC record)."""
    pid, tid = struct.unpack_from("<II", comm, 8)
    end = comm.index(b"\0", 16)
    name_len = (end - 16 + 1 + 7) & ~7
    trailer = comm[16 + name_len:]
    body = struct.pack("<IIQQQIIQQII", pid, tid, 0, USER_END, 0, 0, 0, 0,
                       0, PROT_READ, MAP_PRIVATE) + ANON + trailer
    return EVENT.pack(RECORD_MMAP2, MISC_USER, EVENT.size + len(body)) + body


def fix(path, chunk=1 << 20):
    """Rewrite @path (perf.data); returns how many wipes were added, 0
    (file untouched) when it has no exec to fix, -1 when it is not a
    perf.data this reads (left as it is)."""
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
        if len(head) < HEADER.size:
            return -1
        (magic, size, attr_size, a_off, a_size, d_off, d_size, t_off,
         t_size, feats) = HEADER.unpack(head)
        if magic != b"PERFILE2" or size != HEADER.size or not d_size:
            return -1
        # First pass: are there exec'd processes at all?
        f.seek(d_off)
        pos, end, execs = d_off, d_off + d_size, 0
        while pos + EVENT.size <= end:
            h = f.read(EVENT.size)
            typ, misc, sz = EVENT.unpack(h)
            if sz < EVENT.size or pos + sz > end:
                return -1
            if typ == RECORD_COMM and misc & MISC_COMM_EXEC:
                execs += 1
            f.seek(sz - EVENT.size, os.SEEK_CUR)
            pos += sz
        if not execs:
            return 0
        tmp = path + ".execfix"
        with open(tmp, "wb") as out:
            f.seek(0)
            out.write(f.read(d_off))            # header, attrs, ids: as is
            f.seek(d_off)
            pos, added = d_off, 0
            while pos < end:
                h = f.read(EVENT.size)
                typ, misc, sz = EVENT.unpack(h)
                rec = h + f.read(sz - EVENT.size)
                out.write(rec)
                if typ == RECORD_COMM and misc & MISC_COMM_EXEC:
                    w = _wipe(rec)
                    out.write(w)
                    added += len(w)
                pos += sz
            # The feature sections: a table of (offset, size) for each
            # bit set in adds_features, then their contents.
            nfeat = bin(int.from_bytes(feats, "little")).count("1")
            table = []
            f.seek(end)
            for _ in range(nfeat):
                table.append(SECTION.unpack(f.read(SECTION.size)))
            for off, sz in table:
                out.write(SECTION.pack(off + added if off >= end else off,
                                       sz))
            while True:
                b = f.read(chunk)
                if not b:
                    break
                out.write(b)
            # The header again, its data size and moved offsets.
            def moved(off):
                return off + added if off >= end else off
            out.seek(0)
            out.write(HEADER.pack(magic, size, attr_size, moved(a_off),
                                  a_size, d_off, d_size + added,
                                  moved(t_off) if t_size else t_off,
                                  t_size, feats))
    os.replace(tmp, path)
    return execs
