# SPDX-License-Identifier: MIT
"""The outputs of a profile: one Writer (jitring.output.writer) each, in
WRITERS, the table finish() runs in order (those that write files under
the folder's lock, then those that print).  Adding an output is one new
module here and one entry in WRITERS."""

from jitring.output.flame import FlamePage
from jitring.output.folded import FoldedFile
from jitring.output.notes import Notes
from jitring.output.tables import Tables
from jitring.output.waits import WaitFlame, WaitFolded, WaitTables


# In order: the files (record --wait's only where it waited), then what
# is printed, the wait tables right after the CPU's.
WRITERS = (FoldedFile(), FlamePage(), WaitFolded(), WaitFlame(), Tables(),
           WaitTables(), Notes())
