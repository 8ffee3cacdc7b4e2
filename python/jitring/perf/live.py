# SPDX-License-Identifier: MIT
"""record's reading of the samples while the program runs.

A recording that perf script reads itself (dwarf mode through the
trampolines' ELF files; fp mode) is finished mostly by perf script (in
dwarf mode its unwinding of each sample's stack copy) and the reading of
its text (jitring.perf.script.script): work that grows with the samples.
Done after the program, it took 9-14 s after a 27 s rst2html, while the
program had left a CPU idle throughout.  So, while the program runs, a
thread of record's (Live) reads perf.data as perf record appends to it,
and every SEGMENT samples has a stretch of it read by a reader process
at low priority (python -m jitring.perf.live): the stretch is made a
perf.data of its own, live-N.data, on which the reader runs perf script
and leaves the samples, unnamed, pickled in live-N.pickle.  At the
finish (Live.finish()), only the samples after the last segment read
are left (a reader still at work when the program ends is ended: at
nice 10 on a busy machine it could hold the finish up); they are one
more segment, read as the whole file was before, and
every sample is named there, the trampolines' names from the whole
dumps and, in fp mode, perf.data's own callchains
(jitring.perf.script.script(pre=...)).

Why a segment's samples read as they would in the whole file:
  - a segment holds the file's header, every record of perf.data that
    is not a sample or a round's end, from the data section's start to
    the end read so far, and all the records of its stretch, in the
    file's order: perf script sorts records by time and unwinds each
    sample against the mappings, threads and commands of the records
    before it, which are all there (a record after them changes nothing
    before it; the rounds' ends only let perf sort less at a time);
  - perf record empties every CPU's buffer in each round and ends the
    round with a FINISHED_ROUND record: a record that happened before a
    sample of round k was written in round k or k + 1.  A stretch ends
    after a round that has at least one whole round read after it;
  - the stretches and the tail cover the data section's samples by
    offset, each sample in one of them.
The segments are read one at a time; the samples come back in the
file's order of stretches, which the outputs do not depend on (they are
sorted).

Anything that goes wrong while the program runs (a full disk, perf
script failing, a file that is not what this reads) ends the live
reading, and the finishing reads the whole file as without it.  The
thread only reads perf.data and writes its own files (claimed in the
folder's manifest first); the program, perf record and the finishing's
lock are not touched.
"""

import json
import mmap
import os
import pickle
import re
import signal
import subprocess
import sys
import threading

from jitring.common.errors import RecordError
from jitring.common.folder import claim
from jitring.perf.data import (HEADER, MAGIC, PERF_RECORD_FINISHED_ROUND,
                               PERF_RECORD_SAMPLE, _HDR)
from jitring.perf.driver import Steps, die_with_parent
from jitring.perf.script import script, script_logs


# perf's record types end below this (the kernel's below 64, perf's own
# from 64): the feature sections perf record writes at its end read as
# records of a larger type or of size 0.
RECORD_MAX = 127


# A segment when this many samples are ready (about 2 s of a busy
# thread at record's 999 Hz: each reader's start-up is 0.2 s of CPU).
SEGMENT = 2000


# How often the thread looks at perf.data, in seconds.
POLL = 0.5


# A reader's niceness: below the program (the tests, on a loaded
# machine, set 0 with $JITRING_PY_TEST_LIVE_NICE).
NICE = 10


# The room a segment leaves on the disk besides twice its own size.
ROOM = 256 << 20


def _env_int(name, default):
    try:
        return int(os.environ.get(name) or default)
    except ValueError:
        return default


class Live:
    """The reading of @out's perf.data while perf record writes it: by a
    thread of its own once start()ed, or by poll() and wait()."""

    def __init__(self, out, perf, inline, fp=False):
        self.out, self.perf, self.inline, self.fp = out, perf, inline, fp
        self.path = os.path.join(out, "perf.data")
        self.segment = _env_int("JITRING_PY_TEST_LIVE_SEGMENT", SEGMENT)
        self.prefix = None      # the file up to its data section
        self.pos = None         # the next record's offset
        self.others = []        # (offset, bytes) of the other records but
                                # FINISHED_ROUND
        self.rounds = []        # (offset after a round, samples before it)
                                # of the last two rounds
        self.begin = None       # (offset, samples before it): not read yet
        self.n = 0              # samples read
        self.parts = []         # the readers' pickles, done, in order
        self.reader = None      # (process, data file, pickle)
        self.failed = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="jitring-live")

    def start(self):
        self.thread.start()
        return self

    def poll(self):
        """Take what perf record wrote since; start a reader on the next
        segment where none runs and one is ready.  Whether one runs."""
        self._reap(block=False)
        if self.reader is None:
            self._scan()
            self._next()
        return self.reader is not None

    def wait(self):
        """Wait for the reader that runs, if any."""
        self._reap(block=True)

    # -- the thread ----------------------------------------------------

    def _run(self):
        # The reader is this thread's to end: the kernel ends it too (its
        # PR_SET_PDEATHSIG) when this thread, which started it, ends.
        try:
            while not self.stopping.wait(POLL):
                self.poll()
            self._abandon()
        except Exception as e:      # any failure: the whole file later
            self.failed = "%s: %s" % (type(e).__name__, e)
            self._kill()

    def _abandon(self):
        """The program has ended: a reader done by now is taken; one
        still at work is ended, and its stretch goes to the tail, read at
        the finish's own priority in parallel slices (a reader at nice 10
        on a busy machine could hold the finish up for long)."""
        r = self.reader
        if r is None or r[0].poll() is not None:
            self._reap(block=False)
            return
        self._kill()
        r[0].wait()
        self.reader = None
        for path in (r[1], r[2], r[2] + ".tmp"):
            _unlink(path)
        self.begin = r[3]

    def _kill(self):
        # The reader's process group: it and its perf script.
        r = self.reader
        if r is not None:
            try:
                os.killpg(r[0].pid, signal.SIGKILL)
            except OSError:
                pass

    def _scan(self, end=None):
        """Take the whole records written since the last scan (up to
        @end, the data section's end once perf record is done)."""
        final = end is not None
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return          # perf record has not made it yet
        with f:
            size = os.fstat(f.fileno()).st_size
            if self.prefix is None:
                head = f.read(HEADER.size)
                if len(head) < HEADER.size or head[:8] != MAGIC:
                    return
                d_off = HEADER.unpack(head)[5]
                if size < d_off:
                    return
                f.seek(0)
                self.prefix = f.read(d_off)
                self.pos = d_off
                self.begin = (d_off, 0)
            if end is None:
                end = size
            if end <= self.pos:
                return
            with mmap.mmap(f.fileno(), end, access=mmap.ACCESS_READ) as m:
                off, n = self.pos, self.n
                unpack = _HDR.unpack_from
                while off + 8 <= end:
                    typ, _, sz = unpack(m, off)
                    if sz < 8 or typ > RECORD_MAX:
                        # Not a record: perf record, ending, has written
                        # its feature sections after the data and not yet
                        # the header that says where the data ends.
                        if final:
                            raise ValueError("a record of type %d and "
                                             "size %d at %#x"
                                             % (typ, sz, off))
                        break
                    if off + sz > end:
                        break       # perf writes the rest next
                    if typ == PERF_RECORD_SAMPLE:
                        n += 1
                    elif typ == PERF_RECORD_FINISHED_ROUND:
                        # Not kept: a segment has those of its stretch
                        # (perf script sorts the rest at its end).
                        self.rounds.append((off + sz, n))
                    else:
                        self.others.append((off, m[off:off + sz]))
                    off += sz
                self.pos, self.n = off, n
                del self.rounds[:-2]    # all _next() needs

    def _next(self):
        """Start a reader on the next stretch if it has enough samples."""
        # The round before the last read: one whole round after it.
        if len(self.rounds) < 2:
            return
        b, nb = self.rounds[-2]
        if nb - self.begin[1] < self.segment:
            return
        # The segment is a copy of its stretch until read: only where the
        # disk keeps room for perf record after it.
        st = os.statvfs(self.out)
        if st.f_bavail * st.f_frsize < 2 * (b - self.begin[0]) + ROOM:
            return
        self._start_reader(self.begin, b, self.pos)
        self.begin = (b, nb)

    def _write(self, name, a, b, end, prefix=None):
        """live-N.data: the header, the records that are not samples in
        [data, a) and [b, end) and all of [a, b), in the file's order."""
        prefix = prefix or self.prefix
        path = os.path.join(self.out, name)
        claim(self.out, [name])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC |
                     os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f, open(self.path, "rb") as src:
            f.write(prefix)
            f.writelines(r for o, r in self.others if o < a)
            src.seek(a)
            left = b - a
            while left > 0:
                chunk = src.read(min(left, 1 << 22))
                if not chunk:
                    raise ValueError("perf.data ends before %#x" % b)
                f.write(chunk)
                left -= len(chunk)
            f.writelines(r for o, r in self.others if b <= o < end)
            size = f.tell() - len(prefix)
            h = list(HEADER.unpack_from(prefix, 0))
            # The data section's size; no feature sections (perf record
            # writes them at its end).
            h[6], h[7], h[8], h[9] = size, 0, 0, bytes(32)
            f.seek(0)
            f.write(HEADER.pack(*h))
        return path

    def _start_reader(self, begin, b, end):
        k = len(self.parts)
        data = self._write("live-%d.data" % k, begin[0], b, end)
        dest = os.path.join(self.out, "live-%d.pickle" % k)
        claim(self.out, [os.path.basename(dest),
                                 "live-%d.log" % k])
        # Not profiled itself where the user's environment asks for it.
        env = {n: v for n, v in os.environ.items()
               if not n.startswith("JITRING_PROFILE")}
        with open(os.path.join(self.out, "live-%d.log" % k), "wb") as log:
            p = subprocess.Popen(
                # -P: nothing of the folder (its cwd) on sys.path.
                [sys.executable, "-P", "-m", "jitring.perf.live", self.out,
                 os.path.basename(data), os.path.basename(dest),
                 json.dumps(self.perf), "1" if self.inline else "0",
                 "fp" if self.fp else "elf"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                cwd=self.out, process_group=0, preexec_fn=_below)
        # (the process, its segment, its pickle, the stretch's start)
        self.reader = (p, data, dest, begin)

    def _reap(self, block):
        """Take the reader's result once it is done (@block: wait)."""
        if self.reader is None:
            return
        p, data, dest, _ = self.reader
        if block:
            p.wait()
        elif p.poll() is None:
            return
        self.reader = None
        _unlink(data)
        if p.returncode != 0:
            raise RuntimeError("a reader ended with status %d (%s)"
                               % (p.returncode, dest[:-7] + ".log"))
        _unlink(dest[:-7] + ".log")
        self.parts.append(dest)

    # -- record's side -------------------------------------------------

    def finish(self):
        """Once perf record has ended: ([the pickles], the tail segment's
        name in the folder) for jitring.perf.script.script(pre=, data=), or
        None where the live reading failed or read nothing (read the
        whole file)."""
        self.stopping.set()
        self._join()
        if self.failed is not None or not self.parts:
            # Nothing read (a short program): the whole file, not a copy.
            self.discard()
            return None
        try:
            with open(self.path, "rb") as f:
                head = f.read(HEADER.size)
                h = HEADER.unpack(head)
                if self.prefix is None or h[5] != len(self.prefix):
                    raise ValueError("perf.data's layout changed")
                f.seek(0)
                prefix = f.read(h[5])
            self._scan(end=h[5] + h[6])
            if self.pos != h[5] + h[6]:
                raise ValueError("perf.data's records end at %#x, not "
                                 "%#x" % (self.pos, h[5] + h[6]))
            tail = self._write("live-tail.data", self.begin[0], self.pos,
                               self.pos, prefix)
        except Exception as e:
            self.failed = "%s: %s" % (type(e).__name__, e)
            self.discard()
            return None
        return list(self.parts), os.path.basename(tail)

    def discard(self):
        """End the thread and any reader; remove the live files."""
        self.stopping.set()
        self._kill()
        self._join()
        if self.reader is not None:
            self.reader[0].wait()
            self.reader = None
        drop(self.out)

    def _join(self):
        if self.thread.is_alive():
            self.thread.join()


# A segment's rewrite (jitring.perf.execfix's DATA.execfix) is left too where
# its reader was ended in the middle of it.
LIVE_FILE = re.compile(
    r"^live-(\d+|tail)(\.data(\.execfix)?|\.pickle(\.tmp)?|\.log|"
    r"-perf-script(-\d+)?\.log)$")


def drop(out):
    """Remove the live reading's files from @out."""
    try:
        names = os.listdir(out)
    except OSError:
        return
    for name in names:
        if LIVE_FILE.match(name):
            _unlink(os.path.join(out, name))


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _below():
    """A reader runs below the program's priority, and ends with the
    thread that started it."""
    try:
        os.nice(_env_int("JITRING_PY_TEST_LIVE_NICE", NICE))
    except OSError:
        pass
    die_with_parent(signal.SIGKILL)


def main(argv):
    """python -m jitring.perf.live OUT DATA PICKLE PERF-JSON INLINE MODE: read
    the segment DATA of the folder OUT, a recording in MODE (elf: dwarf
    through the trampolines' ELF files; fp), into PICKLE."""
    out, data, dest, perf, inline, mode = argv
    from jitring.perf.execfix import fix
    fix(os.path.join(out, data))
    tag = data[:-len(".data")] + "-"
    try:
        with Steps() as steps:
            got = script(steps, json.loads(perf), out,
                                 inline=inline == "1", fp=mode == "fp",
                                 elf=mode == "elf", data=data, raw=True,
                                 tag=tag, most=1)
    except (RecordError, OSError) as e:
        sys.stderr.write("jitring live reader: %s\n" % e)
        return 1
    tmp = os.path.join(out, dest + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(got, f, pickle.HIGHEST_PROTOCOL)
    os.rename(tmp, os.path.join(out, dest))
    for name in script_logs(1, tag):
        _unlink(os.path.join(out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
