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
anonymous one as they arrive.  Only a COMM_EXEC of a process perf knew
mappings of before gets one (_stale_execs()); when none does, the file
is left as it is.  The file is rewritten in place: records in the data
section are copied, the feature sections after it move by what was
added, and offsets that point past the data section move with them.
"""

import os
import struct

from jitring.perf.data import (HEADER, PERF_RECORD_COMM, PERF_RECORD_FORK,
                               PERF_RECORD_MMAP, PERF_RECORD_MMAP2, PerfData,
                               PerfDataError)


SECTION = struct.Struct("<QQ")


EVENT = struct.Struct("<IHH")               # perf_event_header


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
    return EVENT.pack(PERF_RECORD_MMAP2, MISC_USER,
                      EVENT.size + len(body)) + body


def _time_at(pd):
    """The offset from a non-sample record's end of its time (in its
    sample_id trailer: pid and tid, time, id, stream id, cpu, identifier,
    those the events' sample_type has), or None where the records carry
    no time (no sample_id_all, no PERF_SAMPLE_TIME, layouts that
    differ)."""
    from jitring.perf.data import (S_CPU, S_ID, S_IDENTIFIER, S_STREAM_ID,
                                   S_TIME)
    if len({(a.sample_type, a.sample_id_all) for a in pd.attrs}) != 1:
        return None
    a = pd.attr
    if not a.sample_id_all or not a.sample_type & S_TIME:
        return None
    after = bin(a.sample_type & (S_ID | S_STREAM_ID | S_CPU |
                                 S_IDENTIFIER)).count("1")
    return 8 * (after + 1)


def _stale_execs(pd):
    """(offset, size) of the COMM_EXEC records of @pd whose process perf
    knew mappings of before: one a FORK record started (with its
    parent's mappings), or one with an MMAP record of an earlier time
    (the records' order in the file is not their time's across CPUs).
    The others need no wipe: record's own program, forked before perf
    started and never synthesized (--synth no), has no mapping in perf's
    view before its exec, so the perf.data of a program that starts no
    process (a GB in dwarf mode) is left as it is, not copied.  Where
    the records carry no time, every COMM_EXEC."""
    at = _time_at(pd)
    forked, first_map, execs = set(), {}, []
    m = pd.m
    for typ, misc, off, sz in pd.records_of(PERF_RECORD_FORK,
                                            PERF_RECORD_MMAP,
                                            PERF_RECORD_MMAP2,
                                            PERF_RECORD_COMM):
        if at is None or sz < 16 + at:
            t = None
        else:
            t = struct.unpack_from("<Q", m, off + sz - at)[0]
        if typ == PERF_RECORD_FORK:
            pid, ppid = struct.unpack_from("<II", m, off + 8)
            if pid != ppid:         # a process, not a thread
                forked.add(pid)
        elif typ in (PERF_RECORD_MMAP, PERF_RECORD_MMAP2):
            pid = struct.unpack_from("<I", m, off + 8)[0]
            if t is not None and t < first_map.get(pid, t + 1):
                first_map[pid] = t
        elif typ == PERF_RECORD_COMM and misc & MISC_COMM_EXEC:
            pid = struct.unpack_from("<I", m, off + 8)[0]
            execs.append((off, sz, pid, t))
    return [(off, sz) for off, sz, pid, t in execs
            if t is None or pid in forked or first_map.get(pid, t) < t]


def fix(path):
    """Rewrite @path (perf.data); returns how many wipes were added, 0
    (file untouched) when it has no exec to fix, -1 when it is not a
    perf.data this reads (left as it is)."""
    try:
        pd = PerfData(path)
    except PerfDataError:
        return -1
    with pd:
        m = pd.m
        (magic, size, attr_size, a_off, a_size, d_off, d_size, t_off,
         t_size, feats) = pd.header
        end = d_off + d_size
        if size != HEADER.size or not d_size:
            return -1
        try:
            execs = _stale_execs(pd)
        except (PerfDataError, struct.error):
            return -1
        if not execs:
            return 0
        if execs[-1][0] + execs[-1][1] > end:
            return -1
        nfeat = bin(int.from_bytes(feats, "little")).count("1")
        if end + nfeat * SECTION.size > len(m):
            return -1
        try:
            wipes = [_wipe(m[off:off + sz]) for off, sz in execs]
        except (ValueError, struct.error):
            return -1           # a COMM record without its fields
        added = sum(map(len, wipes))

        def moved(off):
            return off + added if off >= end else off
        tmp = path + ".execfix"
        mv = memoryview(m)
        try:
            with open(tmp, "wb") as out:
                # Header, attributes, ids: as they are; the data section
                # with a wipe after each exec.
                pos = 0
                for (off, sz), w in zip(execs, wipes):
                    out.write(mv[pos:off + sz])
                    out.write(w)
                    pos = off + sz
                out.write(mv[pos:end])
                # The feature sections: a table of (offset, size) for each
                # bit set in adds_features, then their contents.
                for i in range(nfeat):
                    off, sz = SECTION.unpack_from(m, end + i * SECTION.size)
                    out.write(SECTION.pack(moved(off), sz))
                out.write(mv[end + nfeat * SECTION.size:])
                # The header again, its data size and moved offsets.
                out.seek(0)
                out.write(HEADER.pack(magic, size, attr_size,
                                      moved(a_off), a_size, d_off,
                                      d_size + added,
                                      moved(t_off) if t_size else t_off,
                                      t_size, feats))
        except BaseException:
            # A full disk, a signal: perf.data stays as it was.
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        finally:
            mv.release()
    os.replace(tmp, path)
    return len(execs)
