# SPDX-License-Identifier: MIT
"""The lines after the tables: the samples left out (jitring's own, cut
stacks, before the window), what perf lost, where the files are and the
perf report command that opens them, the program's exit status."""

import os
import sys

from jitring.output.writer import Writer
from jitring.perf.driver import perf_cmd
from jitring.perf.lost import lost_line
from jitring.profile.cuts import cut_note


class Notes(Writer):
    """The lines after the tables: the samples left out (jitring's own,
    cut stacks, before record --pid's window), what perf lost, where the
    files are and perf report's command, the program's exit status; then
    the flame graph in a web browser, where asked."""
    name = "notes"

    def write(self, profile):
        out, meta, c = profile.out, profile.meta, profile.cut
        print()
        for line in cut_note(meta, c.samples, c.cut, c.deep, c.own):
            print(line)
        early = profile.early
        if early:
            print("%d sample%s from before jitring started in process %d "
                  "(perf is on first, to see the start) left out"
                  % (early, "" if early == 1 else "s", meta.pid))
        lost = lost_line(out)
        if lost:
            print(lost)
        html = os.path.join(out, "flame.html")
        print("flame graph: %s" % html)
        if profile.waits:
            print("waits:       %s" % os.path.join(out, "flame-wait.html"))
        print("perf report: %s report -i %s --children --sort sym"
              % (" ".join(["perf"] + perf_cmd("perf", out,
                                              meta.keep_debug)[1:]),
                 os.path.join(out, "perf.jit.data" if os.path.exists(
                     os.path.join(out, "perf.jit.data")) else "perf.data")))
        if meta.perf_script:
            print("stacks:      %s (folded), %s (perf script)"
                  % (os.path.join(out, "stacks.folded"),
                     os.path.join(out, "perf.script.txt")))
        else:
            print("stacks:      %s (folded)" % os.path.join(out,
                                                            "stacks.folded"))
        status = meta.status
        if status:
            print("(the program exited with status %d)" % status)
        sys.stdout.flush()
        if profile.browser:
            import webbrowser
            if not webbrowser.open("file://" + html):
                sys.stderr.write("jitring %s: no web browser found; open "
                                 "%s\n" % (profile.prog, html))
