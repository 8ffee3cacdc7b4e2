# SPDX-License-Identifier: MIT
"""The errors the steps of record and report raise to end in one line:
RecordError (a message, exit status 2), Interrupted (a signal while
finishing; the recording is kept) and AttachError (record --pid refused,
the target untouched)."""


# ---- record's side ------------------------------------------------------
class AttachError(Exception):
    """A refusal: one line, exit 2, the target untouched."""


class RecordError(Exception):
    """A reason to stop with a message and exit status 2."""


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum
