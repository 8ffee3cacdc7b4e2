# SPDX-License-Identifier: MIT
"""stacks.folded: one line per stack, root first, ``a;b;c COUNT``
(Brendan Gregg's folded format, which flamegraph.pl, speedscope and
inferno read)."""

import functools
import os

from jitring.common.text import escape
from jitring.output.flame import _checked
from jitring.output.writer import Writer
from jitring.profile.aggregate import folded_stack


def _folded_frame(name):
    # ';' separates frames and a line break ends the line: neither may
    # remain.
    return escape(name).replace(";", ":")


def write_folded(path, stacks):
    """Writes the classic folded stacks to path: one ``a;b;c COUNT`` line
    per distinct stack, root first, sorted (flamegraph.pl, inferno,
    speedscope read them).  ';' in a frame name is written as ':', a
    control character or line separator as escape() writes it.  Returns
    the number of lines."""
    counts = {}
    # A profile repeats a few thousand names in hundreds of thousands of
    # frames: each is escaped once.
    fold = functools.lru_cache(maxsize=None)(_folded_frame)
    for frames, count in _checked(stacks):
        key = ";".join(map(fold, frames))
        counts[key] = counts.get(key, 0) + count
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
        for key in sorted(counts):
            f.write("%s %d\n" % (key, counts[key]))
    return len(counts)


class FoldedFile(Writer):
    """stacks.folded: a line per stack, root first (folded_stack())."""
    name = "folded"
    files = ("stacks.folded",)

    def write(self, profile):
        from jitring.output.folded import write_folded
        write_folded(os.path.join(profile.out, "stacks.folded"),
                            [(folded_stack(f), n)
                             for f, n in profile.stacks()])
