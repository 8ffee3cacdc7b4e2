# SPDX-License-Identifier: MIT
"""The package's shape (scripts/check-pymodules.py), and that the check
can fail (no perf).

Cases:
 1. package: python/jitring passes: no import circle (imports inside
    functions counted), every module in its layer's bounds, none over 600
    lines, no function over 80;
 2. planted: a copy of the package with a circle planted behind an import
    inside a function, an import of a higher layer, one of the folders from
    a module that runs in the profiled program, and a long function: each
    is named, and the check exits 1;
 3. own: every module the check sees is one the own-work classification
    counts as jitring's (jitring.profile.classify.OWN): a module moved to a
    folder it does not know would count jitring's frames as the program's.
"""

import importlib.util
import os
import shutil
import subprocess
import sys

import jrtest
from jitring.profile.classify import OWN

HERE = os.path.dirname(os.path.realpath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "check-pymodules.py")
PKG = os.path.join(ROOT, "python", "jitring")


def run(pkg):
    p = subprocess.run([sys.executable, SCRIPT, pkg], capture_output=True,
                       text=True)
    return p.returncode, p.stdout + p.stderr


def load():
    spec = importlib.util.spec_from_file_location("check_pymodules", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_package(t):
    rc, out = run(PKG)
    t.check(rc == 0 and "no circle" in out, "package: the check passes on "
            "python/jitring", out)


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


def test_planted(t):
    pkg = os.path.join(t.scratch, "jitring")
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns(
        "__pycache__", "*.c", "*.h", "web", "meson.build"))
    # A circle hidden behind an import inside a function: text escaping
    # (common) calling up into the finishing, which imports it.
    append(os.path.join(pkg, "common", "text.py"),
           "\n\ndef _planted():\n    from jitring.record import finish\n"
           "    return finish\n")
    # A lower layer importing a higher one at the top.
    append(os.path.join(pkg, "profile", "cuts.py"),
           "\nfrom jitring.output import tables  # noqa\n")
    # The profiled program's side importing record's.
    append(os.path.join(pkg, "_target.py"),
           "\n\ndef _planted():\n    from jitring.perf import script\n"
           "    return script\n")
    append(os.path.join(pkg, "output", "tables.py"),
           "\n\ndef _long():\n" + "    x = 1\n" * 85)
    rc, out = run(pkg)
    lines = out.splitlines()
    t.check(rc == 1, "planted: the check exits 1", out)
    t.check(any(l.startswith("import circle: ") and "common.text" in l and
                "record.finish" in l for l in lines),
            "planted: the circle through the lazy import is named", out)
    t.check(any("profile/cuts.py" in l and "jitring.output.tables" in l and
                "higher layer" in l for l in lines),
            "planted: the import of a higher layer is named", out)
    t.check(any("_target.py" in l and "jitring.perf" in l for l in lines),
            "planted: the profiled program's side importing record's "
            "is named", out)
    t.check(any("output/tables.py" in l and "_long() is 86 lines" in l
                for l in lines), "planted: the long function is named", out)


def test_own(t):
    m = load()
    names = m.modules(PKG)
    bad = [n for n, p in names.items()
           if not OWN.search("/x/jitring/" + os.path.relpath(p, PKG))]
    t.check(names and not bad, "own: every module of the package is "
            "jitring's own to the classification", bad)
    t.check(sorted(m.LAYERS) == sorted(
        d for d in os.listdir(PKG) if os.path.isdir(os.path.join(PKG, d))
        and d not in ("web", "__pycache__")),
        "own: the check's layers are the package's folders")


if __name__ == "__main__":
    jrtest.main(globals())
