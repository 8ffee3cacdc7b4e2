# SPDX-License-Identifier: MIT
"""Profiling from interpreter start, in every process: $JITRING_PROFILE.

Imported by jitring-autostart.pth (installed into site-packages with the
package) when $JITRING_PROFILE is set to anything but "" or "0", so every
Python process that inherits the variable -- subprocesses, multiprocessing
spawn and forkserver children, gunicorn workers, pytest -- starts jitring
before its first line, as PYTHONPERFSUPPORT=1 does for -X perf.  The dump
goes to $JITRING_DIR, else /tmp; a fork child gets its own dump from the
library.  A process that cannot start it (another eval-frame tool, a
directory that does not exist) says why on stderr once and runs
unprofiled.  Unset, the .pth line costs one dictionary lookup.
"""

import os


def _autostart():
    if os.environ.get("JITRING_PROFILE", "") in ("", "0"):
        return
    import jitring
    if jitring.is_active():
        return
    try:
        jitring.start()
    except Exception as e:      # never stop the program itself
        import sys
        sys.stderr.write("jitring: JITRING_PROFILE is set but profiling "
                         "did not start: %s\n" % e)
        return
    import atexit
    atexit.register(jitring.stop)


_autostart()
