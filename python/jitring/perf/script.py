# SPDX-License-Identifier: MIT
"""perf script's text of a recording, read into samples.

perf script unwinds each sample's stack and prints it; on a deep program
that is most of a finishing's time, so the samples are cut into slices
(by time) read by several perf script processes at once, each slice's
text read by a process of its own (forked with the reader's state).
ScriptReader reads the text: which lines start a sample, which continue a
name perf printed with its line breaks, and the names made safe as data
(jitring.common.text.escape)."""

import functools
import io
import os
import re
import shutil
import signal

from jitring.common.errors import RecordError
from jitring.common.folder import claim
from jitring.perf.driver import SIGNALS, end_procs, failed
from jitring.profile.cuts import MAX_STACK
from jitring.profile.model import Sample


# A frame in a trampolines' ELF file (jitring.perf.jitsyms.TRAMP_NAME).
TRAMP_DSO = "jitring-tramp-"


HEAD = re.compile(r"^(.*?)\s+(\d+)/(\d+)\s+(?:(\d+)\.(\d{9}):)?")


FRAME = re.compile(r"^[ \t]+[0-9a-f]+(?: (.*))?$")


def sample_keys(path):
    """{(pid, tid, time): count} of the samples of perf.data @path, or
    None where it cannot be read here (script() then trusts the text's
    layout alone)."""
    from jitring.perf.data import PerfData, PerfDataError
    keys = {}
    try:
        with PerfData(path) as pd:
            for pid, tid, t, *_ in pd.samples():
                k = (pid, tid, t)
                keys[k] = keys.get(k, 0) + 1
    except (PerfDataError, OSError):
        return None
    return keys


# perf script runs in parallel over this many time slices at most (one a
# CPU): its DWARF unwinding of each sample is most of a dwarf recording's
# finishing, and the slices' outputs, in order, are its output whole.
SCRIPT_SLICES = 4


# ... with at least this many samples a slice (fewer: one perf script).
SLICE_MIN = 1000


def slices(keys, n):
    """The perf script --time ranges ("start,stop" in s.ns, inclusive,
    open at both ends) of @n slices of about as many samples of @keys
    ({(pid, tid, time): count}), cut between two distinct times."""
    times = sorted({t for _, _, t in keys})

    def ts(t):
        return "%d.%09d" % divmod(t, 10**9)
    cuts = []
    for i in range(1, n):
        c = times[len(times) * i // n]
        if (not cuts or c > cuts[-1]) and c > times[0]:
            cuts.append(c)
    bounds = [None] + cuts + [None]
    return ["%s,%s" % ("" if a is None else ts(a),
                       "" if b is None else ts(b - 1))
            for a, b in zip(bounds, bounds[1:])]


def script_logs(n, tag=""):
    """The logs of run_script()'s @n slices: perf-script.log holds the
    first one's messages (perf warns of lost events in each, alike),
    perf-script-N.log the rest's; @tag goes before each name."""
    return [tag + ("perf-script.log" if i == 0 else "perf-script-%d.log" % i)
            for i in range(n)]


def run_script(steps, perf, out, data, keys, inline, stream=False,
               most=SCRIPT_SLICES, tag=""):
    """perf script of @data (in @out) into files, in parallel over up to
    @most time slices where there are CPUs and samples for it; returns
    the files, in order.  The logs are script_logs()'s (with @tag before
    each name, as before the files'), the slices' after the first kept
    only until they succeed.  With @stream, each slice's output is a
    pipe, read as it runs: returns (the processes, [None] a slice);
    check_script() checks them once read."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else (os.cpu_count() or 1)
    least = int(os.environ.get("JITRING_PY_TEST_SLICE_MIN") or SLICE_MIN)
    n = min(most, cpus,
            max(1, sum(keys.values()) // max(1, least)) if keys else 1)
    ranges = slices(keys, n) if n > 1 else [None]
    parts = [os.path.join(out, "%sperf.script.txt.%d" % (tag, i))
             for i in range(len(ranges))]
    if stream:
        parts = [None] * len(parts)
    logs = [os.path.join(out, n) for n in script_logs(len(ranges), tag)]
    claim(out, [os.path.basename(p) for p in parts + logs if p])
    cmds = [perf + ["script", "-i", data, "--ns", "-F",
                    "comm,pid,tid,time,event,ip,sym,dso",
                    "--max-stack", str(MAX_STACK)] +
            ([] if inline else ["--no-inline"]) +
            (["--time", r] if r else []) for r in ranges]
    procs = steps.start_all(cmds, parts, logs, cwd=out)
    if stream:
        return procs, parts
    check_script(steps, procs, out, tag)
    return parts


def check_script(steps, procs, out, tag=""):
    """Wait for run_script()'s @procs and raise RecordError where one
    failed; drops the logs of the slices after the first."""
    rcs = steps.wait_all(procs, out)
    logs = [os.path.join(out, n) for n in script_logs(len(procs), tag)]
    for rc, log in zip(rcs, logs):
        if rc != 0:
            raise RecordError(failed("perf script", rc, log))
    for log in logs[1:]:
        os.unlink(log)


# ScriptReader reads perf script's text this many characters at a time.
READ_CHUNK = 1 << 22


class ScriptReader:
    """Reads perf script's text, as script() has perf print it, into
    samples (feed(), end(), then samples): keys ({(pid, tid, time):
    count} of the samples perf.data holds, sample_keys()'s) or None,
    with names (jitring.perf.jitsyms.FPNames, or with elf ELFNames) the
    trampolines' frames named, with raw the samples as read (emit()).

    perf prints a symbol as the dump or map gave it, line breaks
    included, so the text alone cannot tell a sample's first line from
    a name's: a line starts a sample only if its pid, tid and time are
    those of a sample perf.data holds (each taken once; where perf.data
    cannot be read here, only a line after a blank one); any other line
    that is not a frame's continues the name before it.  A block of
    lines between two blank lines whose first line starts a sample and
    whose every other line is a frame's is read whole (perf prints a
    sample so); any other block line by line, with the same result.
    Names and commands come back as jitring.common.text.escape() writes
    them.  Samples of one stack share one tuple of frames."""

    def __init__(self, keys, names=None, elf=False, raw=False):
        from jitring.common.text import escape
        self.keys = keys        # {(pid, tid, time): count}, or None
        self.names = names      # the trampolines' namer (fp, elf) or None
        self.elf = elf          # frames in a trampolines' ELF file
        self.raw = raw          # samples as (head, frames read)
        self.escape = escape
        self.samples = []       # the samples read, in order
        # A deep program's recording is millions of frame lines, most of
        # them repeats (the same return addresses): each distinct line is
        # matched, split and escaped once (lrests: line -> its "rest";
        # frames: rest -> (symbol, dso[, address])), and each distinct
        # stack is named, escaped and given its hosts' files once
        # (finals), a tuple shared by its samples.
        self.lrests, self.frames, self.escaped, self.finals = {}, {}, {}, {}
        self.lframes = {}       # a frame line -> its frame
        self.named = {}         # (pid, stack) -> (since, until, its final)
        self.uniq = {}          # raw: a stack as read -> its one tuple
        # The reader's state between lines: the sample being read (head),
        # its rests as read (rests) and, where it was read whole as one
        # block of frame lines, its frames (fast) with the blank line
        # after it not yet in rests (tail; rests holds its frame lines
        # then); whether the line before was blank.
        self.head = None
        self.rests = []
        self.fast = None
        self.tail = False
        self.blank = True

    def _frame(self, rest):
        # "<sym> (<dso>)": the symbol may hold spaces.  A frame in a
        # trampolines' ELF file comes as (address, "<sym> (<dso>)") and
        # keeps its address for ELFNames.
        text = rest[1] if type(rest) is tuple else rest
        sym, sep, dso = text.rpartition(" (")
        if not sep:
            sym, dso = text, ""
        fr = (sym.strip() or "[unknown]", dso.rstrip(")").strip())
        if text is not rest:
            fr += (rest[0],)
        self.frames[rest] = fr
        return fr

    def _line_rest(self, line):
        """The rest of frame line @line, or None for any other line."""
        m = FRAME.match(line)
        if not m:
            return None
        rest = m.group(1) or ""
        if self.elf and TRAMP_DSO in rest:
            rest = (int(line.split(None, 1)[0], 16), rest)
        self.lrests[line] = rest
        return rest

    def _escaped_frame(self, fr):
        escape = self.escape
        e = self.escaped[fr] = (escape(fr[0]), escape(fr[1]))
        return e

    def _final(self, stack):
        # @stack: frames (symbol, dso) as resolved, a tuple.
        escaped, escaped_frame = self.escaped, self._escaped_frame
        f = self.finals[stack] = tuple(_inlined(
            [escaped.get(fr) or escaped_frame(fr) for fr in stack]))
        return f

    def emit(self, h, stack):
        """Adds the sample of head @h (pid, comm, tid, time in ns, event)
        and frames @stack as read (a tuple): a Sample, its frames named
        and escaped, or with raw (h, stack) as they are."""
        if self.raw:
            self.samples.append((h, self.uniq.setdefault(stack, stack)))
            return
        finals, final = self.finals, self._final
        if self.elf:
            # Named once per stack and process while no frame of it
            # changes its name (a trampoline's copy given to another
            # function).
            k = (h[0], stack)
            c = self.named.get(k)
            t = h[3]
            if c is None or not c[0] <= t < c[1]:
                pos = [i for i, fr in enumerate(stack) if len(fr) == 3]
                nm, lo, hi = self.names.named(h[0], t, [stack[i][1:]
                                                         for i in pos])
                st = list(stack)
                for i, n in zip(pos, nm):
                    st[i] = (n, "") if n else st[i][:2]
                st = tuple(st)
                c = self.named[k] = (lo, hi, finals.get(st) or final(st))
            f = c[2]
        elif self.names:
            st = tuple(self.names.resolve(h[2], h[3], list(stack)))
            f = finals.get(st) or final(st)
        else:
            f = finals.get(stack) or final(stack)
        self.samples.append(Sample(h[0], self.escape(h[1]), f, h[2], h[3],
                                   h[4]))

    def _starts(self, line, after_blank):
        """The head (pid, comm, tid, time, event) of @line where it starts
        a sample (its pid, tid and time a sample's of keys, each taken
        once; without keys, @after_blank), else None."""
        m = HEAD.match(line)
        if not m:
            return None
        t = int(m.group(4)) * 10**9 + int(m.group(5)) \
            if m.group(4) else 0
        h = (int(m.group(2)), m.group(1).strip(), int(m.group(3)), t,
             line[m.end():].strip().rstrip(":"))
        keys = self.keys
        if keys is None:
            return h if after_blank else None
        k = (h[0], h[2], t)
        if not keys.get(k):
            return None
        keys[k] -= 1
        return h

    def _done(self):
        """Emits the sample read last."""
        if self.fast is not None:
            self.emit(self.head, self.fast)
            return
        rests = self.rests
        if rests:
            last = rests[-1]      # the blank line after it
            rests[-1] = (last[0], last[1].rstrip("\n")) \
                if type(last) is tuple else last.rstrip("\n")
        frames, frame = self.frames, self._frame
        self.emit(self.head, tuple([frames.get(rest) or frame(rest)
                                    for rest in rests]))

    def _line_by_line(self, lines, h0=None):
        """Reads @lines one at a time (a block the fast way cannot
        take: a name's line breaks); @h0: the first line's head, where
        it was already taken."""
        lrests = self.lrests
        for j, line in enumerate(lines):
            h = None
            if j == 0 and h0 is not None:
                h = h0
            elif line and line[0] not in " \t":
                h = self._starts(line, self.blank or self.head is None)
            self.blank = not line.strip()
            if h is not None:
                if self.head is not None:
                    self._done()
                self.head, self.rests, self.fast, self.tail = \
                    h, [], None, False
                continue
            if self.head is None:
                continue        # nothing perf.data knows of
            if self.tail:
                # A block read whole goes on: its rests as read line by
                # line, with the blank line after it.
                rests = self.rests = [lrests[x] for x in self.rests]
                self.fast, self.tail = None, False
                rests[-1] = (rests[-1][0], rests[-1][1] + "\n") \
                    if type(rests[-1]) is tuple else rests[-1] + "\n"
            else:
                rests = self.rests
                self.fast = None
            rest = lrests.get(line)
            if rest is None:
                rest = self._line_rest(line)
            if rest is not None:
                rests.append(rest)
            elif rests:
                if type(rests[-1]) is tuple:
                    rests[-1] = (rests[-1][0], rests[-1][1] + "\n" + line)
                else:
                    rests[-1] += "\n" + line     # a name's next line

    def _block(self, text):
        """A block of lines perf script printed between blank lines,
        with the blank line after it: a sample read whole where its
        first line starts one and every other is a frame's, else line
        by line."""
        lines = text.split("\n")
        first = lines[0]
        h = None
        if first and first[0] not in " \t":
            h = self._starts(first, self.blank or self.head is None)
            if h is not None and len(lines) > 1:
                rest = lines[1:]
                lframes = self.lframes
                fr = list(map(lframes.get, rest))
                if None in fr:
                    lrests, frames = self.lrests, self.frames
                    for j, x in enumerate(rest):
                        if fr[j] is None:
                            r = lrests.get(x)
                            if r is None:
                                r = self._line_rest(x)
                            if r is None:
                                break
                            fr[j] = lframes[x] = frames.get(r) or \
                                self._frame(r)
                if None not in fr:
                    if self.head is not None:
                        self._done()
                    self.head, self.rests, self.tail, self.blank = \
                        h, rest, True, True
                    self.fast = tuple(fr)
                    return
        self._line_by_line(lines + [""], h)

    def feed(self, source):
        """Reads @source, perf script's output (a slice of it) whole: a
        text file (read READ_CHUNK characters at a time) or an iterable
        of chunks of text, cut anywhere.  end() ends it."""
        if hasattr(source, "read"):
            source = iter(functools.partial(source.read, READ_CHUNK), "")
        block = self._block
        left = ""
        for chunk in source:
            text = left + chunk
            cut = text.rfind("\n\n")
            if cut < 0:
                left = text
                continue
            left = text[cut + 2:]
            for b in text[:cut].split("\n\n"):
                block(b)
        if left:
            lines = left.split("\n")
            self._line_by_line(lines[:-1] if left.endswith("\n")
                               else lines)

    def end(self):
        """Ends the text fed (a slice of perf script's output): emits the
        sample read last; what is fed next starts anew."""
        if self.head is not None:
            self._done()
        self.head, self.rests, self.fast, self.tail, self.blank = \
            None, [], None, False, True


def script(steps, perf, out, keep=False, inline=False, fp=False, elf=False,
           data=None, raw=False, pre=(), tag="", most=SCRIPT_SLICES):
    """perf script into perf.script.txt (kept if @keep); returns
    [Sample], frames (symbol, dso) from the leaf to the root (record
    --wait tells its two events apart by the event: jitring.wait), as
    ScriptReader reads perf script's text (its rules there).  Without
    @inline, native functions inlined into others are not listed (perf
    runs addr2line per address for them: 13.5 s instead of 1.3 s for
    10,000 functions' recording).  With @fp (a frame-pointer recording,
    not injected), perf.data is read and the trampolines' frames are
    named by jitring.perf.jitsyms.FPNames; with @elf (a dwarf recording
    whose trampolines were an ELF file perf unwinds through, not
    injected either), by jitring.perf.jitsyms.ELFNames.

    @data names the file read (in @out) where it is not perf.data (fp,
    elf) or perf.jit.data, @tag goes before the names of perf script's
    files and logs, and @most bounds its slices.  With @raw (the reading
    of a segment while the program runs: jitring.perf.live), the samples
    come back as (head, frames read) to be pickled: no frame named, no
    name escaped.  @pre: files of such samples, named and escaped here
    with the rest, as if read from @data's text."""
    direct = fp or elf
    data = os.path.join(out, data or ("perf.data" if direct
                                      else "perf.jit.data"))
    path = os.path.join(out, "perf.script.txt")
    keys = sample_keys(data)
    if keep:
        parts = run_script(steps, perf, out, os.path.basename(data), keys,
                           inline, most=most, tag=tag)
        procs = []
    else:
        # Each slice read from its pipe as perf writes it.
        procs, parts = run_script(steps, perf, out, os.path.basename(data),
                                  keys, inline, stream=True, most=most,
                                  tag=tag)
    if keep:
        with open(path, "wb") as f:
            for p in parts:
                with open(p, "rb") as g:
                    shutil.copyfileobj(g, f, 1 << 20)
    names = None
    if direct and not raw:
        from jitring.perf.data import PerfDataError
        from jitring.perf.jitsyms import DumpError, ELFNames, FPNames
        try:
            names = (FPNames if fp else ELFNames)(
                os.path.join(out, "perf.data"))
        except (PerfDataError, DumpError, OSError) as e:
            raise RecordError("cannot read %s/perf.data: %s" % (out, e))
    reader = ScriptReader(keys, names, elf, raw)
    _read_slices(reader, procs, parts, keep)
    if procs:
        check_script(steps, procs, out, tag)
    import pickle
    for p in pre:
        with open(p, "rb") as f:
            for h, stack in pickle.load(f):
                reader.emit(h, stack)
    return reader.samples


def _read_slices(reader, procs, parts, keep):
    """@reader reads run_script()'s slices @parts, in order: files, or
    where None the pipes of @procs (perf script's processes), the
    slices after the first each in a process of its own."""
    kids = []
    try:
        if len(parts) > 1 and not keep:
            # The slices after the first each read in a process of its
            # own, forked now with the reader's state: the text's reading
            # is as much CPU as perf script's unwinding, and it is
            # Python's, one CPU a process.
            for i in range(1, len(parts)):
                kids.append(_fork_reader(functools.partial(
                    _child_read, reader, procs, parts, i)))
                procs[i].stdout.close()     # the child's now
            _read_slice(reader, procs, parts, 0)
            while kids:
                pid, fd = kids.pop(0)
                got = _reader_result(pid, fd)
                reader.samples.extend(got if reader.raw
                                      else map(_as_sample, got))
        else:
            for i in range(len(parts)):
                _read_slice(reader, procs, parts, i)
    except BaseException:
        _end_readers(kids)
        end_procs(procs)
        raise


def _read_slice(reader, procs, parts, i):
    """@reader reads slice @i: @parts[i], a file (deleted once open), or
    where None the pipe of @procs[i]."""
    p = parts[i]
    if p is None:
        with io.TextIOWrapper(procs[i].stdout, errors="replace",
                              newline="\n") as f:
            reader.feed(f)
    else:
        if procs:
            procs[i].wait()     # its file is whole
        with open(p, errors="replace", newline="\n") as f:
            os.unlink(p)    # read from the open file; nothing kept
            reader.feed(f)
    # A slice ends with its last sample (slices are cut between two
    # samples' times).
    reader.end()


def _child_read(reader, procs, parts, i):
    """_read_slice() in a forked reader: its samples, to return."""
    # The other slices' pipes closed here: a reader that fails leaves
    # its perf script none to block on.
    for j, p in enumerate(procs):
        if j != i and not p.stdout.closed:
            p.stdout.close()
    _read_slice(reader, procs, parts, i)
    if reader.raw:
        return reader.samples
    # As plain tuples: a Sample pickles through Python code, 3 to 6 times
    # a tuple's time (0.6-1.2 s for 300,000), and unpickles slower too.
    return list(map(tuple, reader.samples))


# A tuple of a Sample's fields, a forked reader's, made a Sample again
# (without Sample()'s Python code).
_as_sample = functools.partial(tuple.__new__, Sample)


def _fork_reader(read):
    """(pid, fd) of a child process that runs @read() and leaves what it
    returns, pickled, in a memfd (fd) for _reader_result(); it ends by
    itself, whatever happens, and a signal ends it as it would a
    program."""
    import pickle
    fd = os.memfd_create("jitring-script", os.MFD_CLOEXEC)
    pid = os.fork()
    if pid:
        return pid, fd
    code = 1
    try:
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        try:
            got = ("ok", read())
        except RecordError as e:
            got = ("error", str(e))
        with os.fdopen(fd, "wb", closefd=False) as f:
            pickle.dump(got, f, pickle.HIGHEST_PROTOCOL)
        code = 0
    finally:
        os._exit(code)


def _reader_result(pid, fd):
    """What _fork_reader()'s child @pid returned; RecordError where it
    failed."""
    import pickle
    _, status = os.waitpid(pid, 0)
    try:
        if os.waitstatus_to_exitcode(status) != 0:
            raise RecordError("reading perf script's output failed in "
                              "process %d (status %d)"
                              % (pid, os.waitstatus_to_exitcode(status)))
        os.lseek(fd, 0, os.SEEK_SET)
        with os.fdopen(fd, "rb", closefd=False) as f:
            what, got = pickle.load(f)
    finally:
        os.close(fd)
    if what != "ok":
        raise RecordError(got)
    return got


def _end_readers(kids):
    """Ends _fork_reader()'s children @kids [(pid, fd)] still there."""
    for pid, fd in kids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        os.close(fd)


def _inlined(stack):
    """perf lists a function inlined into another before it, at the same
    address, with "(inlined)" for its file: give it its host's file."""
    host = ""
    for i in range(len(stack) - 1, -1, -1):
        s, d = stack[i]
        if d == "inlined":
            stack[i] = (s, host)
        else:
            host = d
    return stack
