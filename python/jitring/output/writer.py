# SPDX-License-Identifier: MIT
"""The interface every output implements: a Writer is handed the
Profile (jitring.profile.model) once built, and writes one file in the
recording's folder or text on stdout.  jitring.output.WRITERS lists them in
the order finish() runs them."""


class Writer:
    """One output of a profile: a file in the folder or text on stdout.
    Each output is one subclass; finish() (record's and report's) runs
    the table of them (WRITERS) in order: those with files under the
    folder's lock, then those that print."""
    name = ""           # what the user selects it by
    files = ()          # the files it writes in the folder

    def wanted(self, profile):
        """Whether @profile has what this output shows (record --wait's
        outputs: its waits)."""
        return True

    def write(self, profile):
        raise NotImplementedError
