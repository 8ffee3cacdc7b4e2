# SPDX-License-Identifier: MIT
"""What perf lost: its own warnings (perf record's and perf inject's
logs), the LOST records in perf.data, and whether perf record itself ran
out of disk."""

import os
import struct

from jitring.common.folder import FULL
from jitring.perf.driver import tail_of


def lost_line(out):
    """One line for perf's warnings about lost data, or None.  perf
    script's own ("Processed N events and lost M chunks!") counts the
    records of the file it read, which record may have read in segments
    (jitring.perf.live): what perf lost is counted from the recording's
    records instead, the same however it was read."""
    lost = []
    for log in ("perf-record.log", "perf-inject.log"):
        try:
            with open(os.path.join(out, log), errors="replace") as f:
                for line in f:
                    if "lost" in line.lower() or "LOST" in line:
                        lost.append(line.strip())
        except OSError:
            pass
    chunks, events, samples = lost_records(out)
    if chunks or samples:
        # perf record's LOST_SAMPLES count the kernel's LOST events'
        # samples: the one or the other.
        lost.append("lost %d %s%s (its buffers were full: check IO/CPU "
                    "overload)" % (samples or events,
                                   "samples" if samples else "events",
                                   " in %d chunks" % chunks if chunks
                                   else ""))
    if not lost:
        return None
    return "perf warned: %s%s (details: %s/perf-*.log)" % (
        lost[0], " (and %d more)" % (len(lost) - 1) if len(lost) > 1
        else "", out)


def lost_records(out):
    """(chunks, events, samples): the LOST records of the recording in
    @out and the events they lost, and the samples its LOST_SAMPLES
    records lost; zeros where it cannot be read."""
    from jitring.perf.data import (PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES,
                                   PerfData, PerfDataError)
    chunks = events = samples = 0
    for name in ("perf.jit.data", "perf.data"):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        try:
            with PerfData(path) as pd:
                for typ, _, off, size in pd.records_of(
                        PERF_RECORD_LOST,
                        PERF_RECORD_LOST_SAMPLES):
                    if typ == PERF_RECORD_LOST and size >= 24:
                        chunks += 1
                        events += struct.unpack_from("<Q", pd.m, off + 16)[0]
                    elif typ == PERF_RECORD_LOST_SAMPLES and \
                            size >= 16:
                        samples += struct.unpack_from("<Q", pd.m, off + 8)[0]
        except (PerfDataError, OSError):
            return 0, 0, 0
        break
    return chunks, events, samples


def perf_lost(out):
    """Whether perf record itself ran out of space (perf.data is then
    cut short, its samples lost)."""
    said = tail_of(os.path.join(out, "perf-record.log"), 1000)
    return any(os.strerror(e) in said for e in FULL)
