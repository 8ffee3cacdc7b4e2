# SPDX-License-Identifier: MIT
"""An ORC JIT (8 compile threads, 1,023 generated functions) under
perf record --call-graph dwarf, described by jitring's listener and, side
by side, by LLVM's own perf listener.

Usage: orc_perf.py BUILD_DIR
Checks, for jitring's listener: every function has a CODE_LOAD with
UNWINDING_INFO and DEBUG_INFO and the dump passes jitring-dump --check
--sorted; every sample in JIT code is named; the sampled JIT frames have
their JIT caller (the tree's parent) and the native drive_jit() above
them; their source lines are the generated ones.  For LLVM's listener it
reports (and checks) what it loses: the callers.  With LLVM's default
layout (--packed) jitring names every function but unwinds only through
the last of each object, which the listener counts.  Last, an object is
freed and another JITted at the same address: perf names each one's
samples by its own name.

Every run is bounded by CPU time (orcjit --cpu-ms, --reuse), not by a
fixed amount of work: perf's cpu-clock samples count the task's CPU time,
so each profile holds about CPU_MS samples at 999 Hz however fast or
loaded the machine is, and the floors below are half of that.
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llvmtest import (guarded, run, perf_usable, dump_records, dump_loads,
                      perf_samples)

FUNCS = 1023
# CPU time the JIT code runs in each profile, in ms (about as many samples
# at -F 999), and in each of the reuse run's two functions.
CPU_MS = 500
REUSE_MS = 400
JIT_RE = re.compile(r'jf_(\d+)$')


def record(t, scratch, tag, prog_args, env_extra, call_graph=True):
    """perf record + inject of prog_args; returns (record's result, the
    injected data's path)."""
    data = os.path.join(scratch, tag + '.data')
    env = dict(os.environ, **env_extra)
    cmd = ['perf', 'record', '-q', '-k', '1', '-e', 'cpu-clock', '-F', '999',
           '-o', data]
    if call_graph:
        cmd += ['--call-graph', 'dwarf']
    r = run(cmd + ['--'] + prog_args, env=env)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        t.fatal('%s: perf record %s exited %d: %s' %
                (tag, ' '.join(prog_args), r.returncode, r.stderr[-2000:]))
    jdata = os.path.join(scratch, tag + '.jit.data')
    i = run(['perf', 'inject', '--jit', '-i', data, '-o', jdata])
    if i.returncode != 0:
        t.fatal('%s: perf inject --jit exited %d: %s' %
                (tag, i.returncode, i.stderr[-2000:]))
    return r, jdata


def chains(samples):
    """Stats over samples whose innermost frame is a JIT function."""
    st = dict(jit=0, unnamed=0, caller=0, parent=0, parent_of=0)
    for frames in samples:
        sym, dso = frames[0]
        m = JIT_RE.match(sym)
        if not m:
            if 'jitted-' in dso:
                st['unnamed'] += 1
            continue
        st['jit'] += 1
        names = [f[0] for f in frames]
        if 'drive_jit' in names:
            st['caller'] += 1
        k = int(m.group(1))
        if k:
            st['parent_of'] += 1
            if len(names) > 1 and names[1] == 'jf_%d' % ((k - 1) // 2):
                st['parent'] += 1
    return st


def main(t):
    if len(sys.argv) != 2:
        print('usage: orc_perf.py BUILD_DIR', file=sys.stderr)
        sys.exit(2)
    build = os.path.abspath(sys.argv[1])
    prog = os.path.join(build, 'llvm', 'tests', 'orcjit')
    dumptool = os.path.join(build, 'tools', 'jitring-dump')
    if not os.access(prog, os.X_OK) or not os.access(dumptool, os.X_OK):
        t.fatal('not built: %s, %s' % (prog, dumptool))
    scratch = t.make_scratch()
    perf_usable(t, scratch)
    work = ['--work', '200000', '--reps', '1', '--cpu-ms', str(CPU_MS)]
    min_jit = CPU_MS // 2

    # jitring's listener, jitring's layout, debug info.
    jdir = os.path.join(scratch, 'jitring')
    os.mkdir(jdir)
    src = os.path.join(scratch, 'orcgen.c')
    _, data = record(t, scratch, 'jitring',
                     [prog, '--listener', 'jitring', '--threads', '8',
                      '--funcs', str(FUNCS), '--debug', '--src', src] + work,
                     {'JITRING_DIR': jdir})
    dumps = glob.glob(os.path.join(jdir, 'jit-*.dump'))
    t.check(len(dumps) == 1, 'jitring: one dump (%d)' % len(dumps))
    ok, out = dump_records(dumptool, dumps[0])
    t.check(ok, 'jitring: jitring-dump --check --sorted passes' +
            ('' if ok else ':\n' + out))
    loads = dump_loads(dumptool, dumps[0])
    names = {n for n, _, _ in loads}
    t.check(names == {'jf_%d' % k for k in range(FUNCS)}
            and len(loads) == FUNCS,
            'jitring: one CODE_LOAD for each of the %d functions (%d loads, '
            '%d names)' % (FUNCS, len(loads), len(names)))
    t.check(all(u and d for _, u, d in loads),
            'jitring: each with UNWINDING_INFO and DEBUG_INFO (%d, %d)' %
            (sum(u for _, u, _ in loads), sum(d for _, _, d in loads)))
    st = chains(perf_samples(data))
    print('jitring: %(jit)d JIT samples, %(unnamed)d unnamed, %(caller)d '
          'with drive_jit above, %(parent)d of %(parent_of)d with their '
          'parent next' % st)
    t.check(st['jit'] >= min_jit, 'jitring: at least %d samples in JIT code '
            '(%d in %d ms of CPU time)' % (min_jit, st['jit'], CPU_MS))
    t.check(st['unnamed'] == 0, 'jitring: every JIT sample named (%d not)'
            % st['unnamed'])
    t.check(st['caller'] >= 0.95 * st['jit'],
            'jitring: drive_jit above the JIT frames in >= 95%% of JIT '
            'samples (%d of %d)' % (st['caller'], st['jit']))
    t.check(st['parent'] >= 0.95 * st['parent_of'],
            'jitring: the tree parent is the caller of >= 95%% (%d of %d)' %
            (st['parent'], st['parent_of']))

    # Source lines: leaf k's loop is line 10k+2 of orcgen.c.  perf script
    # on the JIT code's files alone, the sample's own frame (-G): perf
    # report's srcline sort runs addr2line on every address of the
    # profile first (libLLVM's: 115 s here, against 3 s).
    dsos = ','.join(sorted(os.path.basename(p) for p in
                           glob.glob(os.path.join(jdir, 'jitted-*.so'))))
    r = run(['perf', 'script', '-i', data, '-G', '-F', 'ip,sym,srcline',
             '--dsos', dsos])
    jit_rows = re.findall(r'^\s*[0-9a-f]+ (jf_\d+)\n(?:\s+(\S+))?', r.stdout,
                          re.M)
    lines = [(f, m.group(1)) for f, sl in jit_rows
             for m in [re.match(r'orcgen\.c:(\d+)$', sl or '')] if m]
    right = sum(1 for f, n in lines
                if 10 * int(f[3:]) + 1 <= int(n) <= 10 * int(f[3:]) + 3)
    t.check(lines and right == len(lines) and len(lines) >= 0.9 *
            len(jit_rows),
            'jitring: JIT samples carry their function\'s orcgen.c lines '
            '(%d of %d samples, %d right)' % (len(lines), len(jit_rows),
                                               right))

    # LLVM's own listener on the same program.
    ldir = os.path.join(scratch, 'llvm')
    os.mkdir(ldir)
    _, ldata = record(t, scratch, 'llvm',
                      [prog, '--listener', 'llvm', '--threads', '8',
                       '--funcs', str(FUNCS), '--debug', '--src', src] + work,
                      {'JITDUMPDIR': ldir})
    # LLVM writes $JITDUMPDIR/.debug/jit/llvm-IR-jit-<date>-<rnd>/.
    ldumps = [os.path.join(d, f) for d, _, fs in os.walk(ldir) for f in fs
              if re.match(r'jit-\d+\.dump$', f)]
    t.check(len(ldumps) == 1, 'llvm: one dump (%d)' % len(ldumps))
    if ldumps:
        ok, out = dump_records(dumptool, ldumps[0])
        t.check(ok, 'llvm: jitring-dump --check --sorted passes' +
                ('' if ok else ':\n' + out))
        lloads = dump_loads(dumptool, ldumps[0])
        t.check(len(lloads) == FUNCS and not any(u for _, u, _ in lloads),
                'llvm: %d CODE_LOADs, none with UNWINDING_INFO (%d)' %
                (len(lloads), sum(u for _, u, _ in lloads)))
    lst = chains(perf_samples(ldata))
    print('llvm: %(jit)d JIT samples, %(unnamed)d unnamed, %(caller)d with '
          'drive_jit above, %(parent)d of %(parent_of)d with their parent '
          'next' % lst)
    t.check(lst['jit'] >= min_jit and lst['unnamed'] == 0,
            'llvm: JIT samples named too (%d, at least %d; %d unnamed)' %
            (lst['jit'], min_jit, lst['unnamed']))
    t.check(lst['caller'] <= 0.05 * lst['jit'],
            'llvm: the callers are lost (drive_jit above %d of %d)' %
            (lst['caller'], lst['jit']))
    print('side by side: drive_jit above JIT frames: jitring %.1f%%, '
          'llvm %.1f%%' % (100.0 * st['caller'] / max(st['jit'], 1),
                           100.0 * lst['caller'] / max(lst['jit'], 1)))

    # jitring's listener on LLVM's default layout: named, but only the
    # last function of each object unwinds.
    pdir = os.path.join(scratch, 'packed')
    os.mkdir(pdir)
    r, pdata = record(t, scratch, 'packed',
                      [prog, '--listener', 'jitring', '--packed',
                       '--funcs', str(FUNCS)] + work, {'JITRING_DIR': pdir})
    ok, out = dump_records(dumptool,
                           glob.glob(os.path.join(pdir, 'jit-*.dump'))[0])
    t.check(ok, 'packed: dump passes --check --sorted')
    m = re.search(r'unwind_overlap (\d+)', r.stdout)
    t.check(m and int(m.group(1)) > 0,
            'packed: the listener counts the functions perf cannot unwind '
            '(unwind_overlap %s)' % (m.group(1) if m else '?'))
    pst = chains(perf_samples(pdata))
    print('packed: %(jit)d JIT samples, %(unnamed)d unnamed, %(caller)d with '
          'drive_jit above' % pst)
    t.check(pst['unnamed'] == 0 and pst['caller'] < 0.5 * pst['jit'],
            'packed layout: named (%d unnamed), callers mostly lost '
            '(%d of %d)' % (pst['unnamed'], pst['caller'], pst['jit']))

    # An object freed, another at the same address.
    rdir = os.path.join(scratch, 'reuse')
    os.mkdir(rdir)
    data = os.path.join(scratch, 'reuse.data')
    r = run(['perf', 'record', '-q', '-k', '1', '-e', 'cpu-clock', '-F',
             '999', '-o', data, '--', prog, '--reuse', str(REUSE_MS)],
            env=dict(os.environ, JITRING_DIR=rdir))
    sys.stdout.write(r.stdout)
    m = re.search(r'reuse_a (\S+) reuse_b (\S+) same (\d)', r.stdout)
    t.check(r.returncode == 0 and m and m.group(3) == '1',
            'reuse: reuse_b JITted at reuse_a\'s freed address (%s)' %
            (m.group(0) if m else r.stderr[-500:]))
    t.check('freed 2' in r.stdout, 'reuse: the listener saw both objects '
            'freed')
    jdata = os.path.join(scratch, 'reuse.jit.data')
    run(['perf', 'inject', '--jit', '-i', data, '-o', jdata])
    s = run(['perf', 'script', '-i', jdata, '-F', 'time,ip,sym,dso'])
    seq = re.findall(r'(reuse_[ab]|\S+ \(\S*jitted-\S+\))', s.stdout)
    a = seq.count('reuse_a')
    b = seq.count('reuse_b')
    order_ok = seq == ['reuse_a'] * a + ['reuse_b'] * b
    t.check(a >= REUSE_MS // 2 and b >= REUSE_MS // 2 and order_ok,
            'reuse: samples named reuse_a before the free, reuse_b after '
            '(%d, %d, at least %d each; in order: %s)' %
            (a, b, REUSE_MS // 2, order_ok))
    ok, out = dump_records(dumptool,
                           glob.glob(os.path.join(rdir, 'jit-*.dump'))[0])
    t.check(ok, 'reuse: dump passes --check --sorted')
    t.done()


if __name__ == '__main__':
    guarded('orc_perf', main)
