# SPDX-License-Identifier: MIT
"""The profile's named types: Sample (one sample as perf script gave it)
and Profile (what every writer is handed)."""

import time
from typing import NamedTuple

from jitring.common.meta import Meta


class Sample(NamedTuple):
    """One sample as script() read it (the CPU event's, or with record
    --wait a switch event's: jitring.wait.waits tells them apart by event)."""
    pid: int
    comm: str           # the thread's command, escaped
    frames: tuple       # ((symbol, dso), ...) leaf first, escaped; one
                        # tuple shared by the samples of a stack
    tid: int
    time: int           # ns since boot (perf's clock); 0 where unknown
    event: str


class Running(NamedTuple):
    """record --pid's service: its pid, and the Python frames that ran
    throughout the window in each of its threads ({native thread id:
    [frame names, root first]}, jitring.common.folder.running())."""
    pid: int
    threads: dict


class ProcessRow(NamedTuple):
    """A process of the profile: the tables' line of it."""
    samples: int
    pid: int
    command: str        # command_of()'s


class FunctionRow(NamedTuple):
    """A Python function of the profile: its samples."""
    total: int          # those with it on the stack
    self: int           # those with it the innermost Python frame
    name: str           # "py::qualname:/path/file.py"


class CutStats(NamedTuple):
    """The samples summarize() counted, for cut_note()."""
    samples: int        # the program's
    cut: int            # those whose stack was cut (is_cut())
    deep: int           # ... at perf's depth limit
    own: int            # jitring's own work, left out (own_work())


class Summary(NamedTuple):
    """What summarize() makes of the samples."""
    folded: dict        # stack (root first, the process first) -> samples
    processes: list     # ProcessRow, most samples first
    total: int          # the program's samples
    functions: list     # FunctionRow, in no order
    cut: CutStats


class Profile:
    """What every writer is handed: the recording folder's profile, built
    once by finish() from perf's output (summarize()'s @summary), and
    how the user asked to see it (@top lines a table, @browser opens the
    flame graph, @prog names the command in messages)."""

    def __init__(self, out, meta, summary, top=12, browser=False,
                 prog="record"):
        self.out = out          # the recording's folder
        # The recording's metadata (META): a Meta, made of a plain dict.
        self.meta = meta if isinstance(meta, Meta) else Meta(meta)
        self.folded = summary.folded
        self.processes = summary.processes
        self.functions = summary.functions
        self.total = summary.total
        self.cut = summary.cut
        self.no_python = no_python(summary.folded)
        self.early = 0          # samples before record --pid's window
        self.waits = None       # record --wait's jitring.wait.waits.Waits
        self.top = top
        self.browser = browser
        self.prog = prog
        self._sorted = None

    def stacks(self):
        """The folded stacks as [(list of frames, samples)], in order."""
        if self._sorted is None:
            self._sorted = sorted(((list(k), n) for k, n in
                                   self.folded.items()),
                                  key=lambda r: r[0])
        return self._sorted


def no_python(folded):
    """The samples of @folded (summarize()'s) with no Python frame."""
    return sum(n for k, n in folded.items()
               if not any(f.startswith("py::") for f in k[1:]))
