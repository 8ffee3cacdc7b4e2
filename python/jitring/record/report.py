# SPDX-License-Identifier: MIT
"""python -m jitring report DIR: finish (or show again) a recording."""

import os
import sys

from jitring.common.errors import RecordError
from jitring.common.folder import injected, read_meta
from jitring.record.finish import finish


def main(argv):
    """python -m jitring report [--top N] [--browser] DIR."""
    import argparse
    p = argparse.ArgumentParser(
        prog="python -m jitring report",
        description="Finish (or show again) a recording made by `python "
        "-m jitring record`: perf inject, the tables, the flame graph.")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--top", type=int, default=12, metavar="N")
    p.add_argument("--browser", action="store_true")
    p.add_argument("--inject", choices=("reduced", "full"),
                   help="perf inject the functions the samples reach "
                   "(reduced) or all (full); default: as recorded")
    opts = p.parse_args(argv)
    if opts.top <= 0:
        p.error("--top needs a positive number")
    out = os.path.abspath(opts.dir)
    try:
        meta = read_meta(out)
        if not (os.path.exists(os.path.join(out, "perf.data")) or
                injected(out)):
            raise RecordError("%s has no perf.data" % out)
    except RecordError as e:
        sys.stderr.write("jitring report: %s\n" % e)
        return 2
    if opts.inject:
        meta.inject = opts.inject
    try:
        return finish(out, meta, top=opts.top, browser=opts.browser,
                      prog="report")
    except Exception as e:
        # A recording's files are data: whatever a damaged or foreign one
        # makes a reader raise ends in one line, never a traceback.
        from jitring.common.text import escape
        sys.stdout.flush()
        sys.stderr.write("jitring report: cannot finish %s: %s (%s)\n"
                         % (escape(out), escape(str(e) or "-"),
                            type(e).__name__))
        return 2
