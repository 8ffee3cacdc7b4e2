# SPDX-License-Identifier: MIT
"""python -m jitring record: from a program to a profile in one command.

Runs the program under ``perf record -k 1 -e cpu-clock --call-graph
dwarf`` with jitring profiling on (``python -m jitring --dir OUT``), runs
``perf inject --jit`` where the dump is, and prints the hottest Python
functions.  Everything goes to the output directory:

  perf.data        what perf recorded
  jit-<pid>.dump   what jitring described (and jitted-<pid>-<n>.so, the
                   ELF images perf inject made from it)
  perf.jit.data    perf.data with the JIT code injected: ``perf report -i``
  perf.script.txt  ``perf script`` text of the samples with their stacks
                   (Firefox Profiler and speedscope load it)
  stacks.folded    one line per stack, root first, ``a;b;c COUNT``
                   (flamegraph.pl, inferno, speedscope)

perf's build-id cache goes to OUT/.debug (``perf --buildid-dir``), so the
jitted images do not pile up in ~/.debug, unless --keep-debug; perf report
then needs the same option (printed at the end).
"""

import os
import shutil
import subprocess
import sys
import time

USAGE = ("usage: python -m jitring record [-o DIR] [-F HZ] [--top N] "
         "[--keep-debug] [--engine rings|mutex] [--] "
         "(script.py | -m module) [args...]")


class RecordError(Exception):
    """A reason to stop with a message and exit status 2."""


def parse(argv):
    opts = {"out": None, "freq": 999, "top": 15, "keep_debug": False,
            "engine": "rings"}
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if a in ("-h", "--help"):
            print(USAGE)
            print(__doc__.split("\n\n", 1)[1].rstrip())
            sys.exit(0)
        if name in ("-o", "--output", "-F", "--freq", "--top", "--engine"):
            if not eq:
                if i + 1 >= len(argv):
                    sys.exit(USAGE)
                val = argv[i + 1]
                i += 1
            if name in ("-o", "--output"):
                opts["out"] = val
            elif name == "--engine":
                if val not in ("rings", "mutex"):
                    sys.exit("jitring record: --engine must be rings or "
                             "mutex")
                opts["engine"] = val
            else:
                try:
                    n = int(val)
                except ValueError:
                    n = 0
                if n <= 0:
                    sys.exit("jitring record: %s needs a positive number"
                             "\n%s" % (name, USAGE))
                opts["freq" if name in ("-F", "--freq") else "top"] = n
        elif a == "--keep-debug":
            opts["keep_debug"] = True
        elif a == "--":
            i += 1
            break
        elif a == "-m":
            break
        elif a.startswith("-"):
            sys.exit("jitring record: unknown option %s\n%s" % (a, USAGE))
        else:
            break
        i += 1
    target = argv[i:]
    if not target or (target[0] == "-m" and len(target) < 2):
        sys.exit(USAGE)
    return opts, target


def find_perf():
    perf = shutil.which("perf")
    if not perf:
        raise RecordError("perf not found on PATH (Debian: apt install "
                          "linux-perf)")
    # Debian's /usr/bin/perf is a wrapper that fails at run time when no
    # perf matches the running kernel: ask it once.
    p = subprocess.run([perf, "--version"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RecordError("perf does not run here: %s"
                          % (p.stderr.strip() or p.stdout.strip()))
    return perf


def check_paranoid():
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            level = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return
    if level > 2 and os.geteuid() != 0:
        raise RecordError(
            "kernel.perf_event_paranoid is %d, which forbids profiling to "
            "users; as root: sysctl kernel.perf_event_paranoid=2 (or run "
            "this as root)" % level)


def out_dir(path):
    if path is None:
        path = "jitring-record-" + time.strftime("%Y%m%d-%H%M%S")
    path = os.path.abspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise RecordError("cannot make the output directory %s: %s"
                          % (path, e.strerror))
    for name in os.listdir(path):
        if name in ("perf.data", "perf.jit.data") or \
                (name.startswith("jit-") and name.endswith(".dump")):
            raise RecordError("%s already holds a recording (%s): choose "
                              "another with -o" % (path, name))
    return path


def perf_env():
    env = dict(os.environ)
    env.pop("JITRING_PROFILE", None)    # the child starts jitring itself
    return env


def perf_cmd(perf, out, opts):
    """perf, with its build-id cache in OUT/.debug unless --keep-debug
    (perf inject copies every jitted image into it)."""
    if opts["keep_debug"]:
        return [perf]
    return [perf, "--buildid-dir", os.path.join(out, ".debug")]


def failed(what, p):
    tail = (p.stderr or "").strip().splitlines()[-5:]
    msg = "%s failed (exit %d)" % (what, p.returncode)
    if tail:
        msg += ":\n  " + "\n  ".join(tail)
    return RecordError(msg)


def record(perf, out, opts, target, env):
    cmd = perf + ["record", "-k", "1", "-e", "cpu-clock", "-F",
           str(opts["freq"]), "--call-graph", "dwarf", "-o",
           os.path.join(out, "perf.data"), "--", sys.executable, "-m",
           "jitring", "--dir", out, "--engine", opts["engine"]] + target
    # perf's own chatter goes to a log; the program keeps the terminal.
    with open(os.path.join(out, "perf-record.log"), "w") as log:
        p = subprocess.run(cmd, env=env, stderr=log)
    with open(os.path.join(out, "perf-record.log")) as log:
        text = log.read()
    if not os.path.exists(os.path.join(out, "perf.data")) or \
            "Permission denied" in text or "perf_event_open" in text:
        raise RecordError(
            "perf record could not profile (exit %d):\n  %s"
            % (p.returncode, "\n  ".join(text.strip().splitlines()[-6:])))
    return p.returncode


def inject(perf, out, env):
    p = subprocess.run(perf + ["inject", "--jit", "-i", "perf.data", "-o",
                               "perf.jit.data"], cwd=out, env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise failed("perf inject --jit", p)


def script(perf, out, env):
    """The samples, each a list of symbols from the leaf to the root."""
    path = os.path.join(out, "perf.script.txt")
    with open(path, "w") as f:
        p = subprocess.run(perf + ["script", "-i", "perf.jit.data",
                                   "-F",
                                   "comm,pid,tid,time,event,ip,sym,dso"],
                           cwd=out, env=env, stdout=f,
                           stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise failed("perf script", p)
    samples, comms = [], []
    with open(path, errors="replace") as f:
        stack, head = [], None
        for line in f:
            if not line.strip():
                if head is not None:
                    samples.append(stack)
                    comms.append(head)
                stack, head = [], None
            elif line[0] in " \t":
                parts = line.split(None, 1)
                # "\t<ip> <sym> (<dso>)": the symbol may hold spaces.
                sym = parts[1].rsplit(" (", 1)[0] if len(parts) > 1 else ""
                stack.append(sym.strip() or "[unknown]")
            else:
                head = line.split(None, 1)[0] if line.strip() else "?"
        if head is not None:
            samples.append(stack)
            comms.append(head)
    return samples, comms


def fold(out, samples, comms):
    counts = {}
    for stack, comm in zip(samples, comms):
        key = ";".join([comm] + [s.replace(";", ":") for s in
                                 reversed(stack)])
        counts[key] = counts.get(key, 0) + 1
    with open(os.path.join(out, "stacks.folded"), "w") as f:
        for key in sorted(counts):
            f.write("%s %d\n" % (key, counts[key]))


def python_table(samples, top):
    """(rows, samples): rows are (total, self, name), the most self
    samples first.  Self: samples whose innermost Python frame is the
    function (native code it called counts to it, as Python profilers
    count it); total: samples with the function anywhere on the stack."""
    total_n, self_n = {}, {}
    for stack in samples:
        py = [s for s in stack if s.startswith("py::")]
        if not py:
            continue
        self_n[py[0]] = self_n.get(py[0], 0) + 1
        for name in set(py):
            total_n[name] = total_n.get(name, 0) + 1
    rows = sorted(((t, self_n.get(n, 0), n) for n, t in total_n.items()),
                  key=lambda r: (-r[1], -r[0], r[2]))
    return rows[:top], len(samples)


def show(rows, n, out, rc, keep_debug):
    print()
    if not n:
        print("jitring record: no samples (did the program run long "
              "enough?)")
    elif not rows:
        print("jitring record: %d samples, none in a Python function" % n)
    else:
        print("%d samples; the hottest Python functions (share of all "
              "samples):" % n)
        print("%8s %8s  %s" % ("total", "self", "function"))
        for t, s, name in rows:
            print("%7.1f%% %7.1f%%  %s" % (100.0 * t / n, 100.0 * s / n,
                                           name[4:]))
    print()
    print("perf%s report -i %s --children --sort sym"
          % ("" if keep_debug else " --buildid-dir " +
             os.path.join(out, ".debug"),
             os.path.join(out, "perf.jit.data")))
    print("stacks for flame graphs: %s (folded), %s (perf script)"
          % (os.path.join(out, "stacks.folded"),
             os.path.join(out, "perf.script.txt")))
    if rc:
        print("(the program's recording ended with exit status %d)" % rc)


def main(argv):
    opts, target = parse(argv)
    try:
        perf = find_perf()
        check_paranoid()
        out = out_dir(opts["out"])
        env = perf_env()
        perf = perf_cmd(perf, out, opts)
        rc = record(perf, out, opts, target, env)
        inject(perf, out, env)
        samples, comms = script(perf, out, env)
        fold(out, samples, comms)
        rows, n = python_table(samples, opts["top"])
    except RecordError as e:
        sys.stderr.write("jitring record: %s\n" % e)
        return 2
    show(rows, n, out, rc, opts["keep_debug"])
    return rc
