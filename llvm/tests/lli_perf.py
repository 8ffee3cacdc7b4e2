# SPDX-License-Identifier: MIT
"""Unmodified lli (Debian's lli-14, lli-15) with libjitring-llvm-perf.so
preloaded, on chain.ll (main -> chain_a -> chain_b -> chain_hot, the hot
loop), under perf record --call-graph dwarf.

Usage: lli_perf.py BUILD_DIR VERSIONS   (VERSIONS: the LLVM majors the
build made a listener for, comma-separated: 14,15)
For each of them whose lli-<major> is installed, -jit-kind=mcjit: the
dump passes jitring-dump --check --sorted; each of the four functions has
a CODE_LOAD with UNWINDING_INFO; and the samples in chain_hot have
chain_b, chain_a and main above them, in that order, and lli's frames in
libLLVM above main (MCJIT calls the
listener before it relocates the object, and lays its functions out back
to back: the preload's layout and the relocated FDEs are what make this
hold).  -jit-kind=orc-lazy: lli 14 and 15 never ask for a perf listener
there (their ORC layer registers only the GDB one), so the check is that
the program runs as without the preload and no dump appears.
"""
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llvmtest import guarded, run, perf_usable, dump_records, dump_loads, \
    perf_samples

FUNCS = ['chain_hot', 'chain_b', 'chain_a', 'main']
# chain.ll runs until lli has used this much CPU time (microseconds), so
# perf's cpu-clock at 999 Hz takes about 400 samples in chain_hot however
# slow or loaded the machine is; HOT_FLOOR, a quarter of that, leaves
# room for lli's own start and perf's rounding and still fails a run
# whose samples went elsewhere.
CPU_US = '400000'
HOT_FLOOR = 100


def mcjit(t, scratch, build, v, preload, dumptool, chain):
    tag = 'lli-%s mcjit' % v
    out = os.path.join(scratch, 'mcjit-' + v)
    os.mkdir(out)
    data = os.path.join(out, 'perf.data')
    env = dict(os.environ, LD_PRELOAD=preload, JITRING_DIR=out)
    r = run(['perf', 'record', '-q', '-k', '1', '-e', 'cpu-clock', '-F',
             '999', '--call-graph', 'dwarf', '-o', data, '--',
             'lli-' + v, '-jit-kind=mcjit', chain, CPU_US], env=env)
    t.check(r.returncode == 0 and 'jitring' not in r.stderr,
            '%s: exits 0, nothing from jitring on stderr (%d: %s)' %
            (tag, r.returncode, r.stderr.strip()[-300:]))
    dumps = glob.glob(os.path.join(out, 'jit-*.dump'))
    if not t.check(len(dumps) == 1, '%s: one dump (%d)' % (tag, len(dumps))):
        return
    ok, text = dump_records(dumptool, dumps[0])
    t.check(ok, '%s: jitring-dump --check --sorted: %s' %
            (tag, text.strip().splitlines()[-1:]))
    loads = {name: unwind for name, unwind, _ in
             dump_loads(dumptool, dumps[0])}
    for f in FUNCS:
        t.check(loads.get(f) is True,
                '%s: %s has a CODE_LOAD with UNWINDING_INFO (%s)' %
                (tag, f, loads.get(f)))
    jdata = os.path.join(out, 'perf.jit.data')
    i = run(['perf', 'inject', '--jit', '-i', data, '-o', jdata])
    if not t.check(i.returncode == 0, '%s: perf inject --jit' % tag):
        return
    hot = [s for s in perf_samples(jdata) if s[0][0] == 'chain_hot']
    full = [s for s in hot
            if [sym for sym, _ in s[1:4]] == ['chain_b', 'chain_a', 'main']]
    # Past main, lli's own frames (llvm::MCJIT::runFunction in libLLVM).
    native = [s for s in full if len(s) > 4 and 'jitted-' not in s[4][1]
              and 'libLLVM' in s[4][1]]
    t.check(len(hot) >= HOT_FLOOR, '%s: %d samples in chain_hot (%s us of '
            'CPU time; at least %d)' % (tag, len(hot), CPU_US, HOT_FLOOR))
    t.check(hot and len(full) >= 0.95 * len(hot),
            '%s: %d of %d samples in chain_hot have chain_b, chain_a, '
            'main above them' % (tag, len(full), len(hot)))
    t.check(hot and len(native) >= 0.95 * len(hot),
            '%s: %d of %d have libLLVM\'s frames above main' %
            (tag, len(native), len(hot)))


def orc_lazy(t, scratch, v, preload, chain):
    tag = 'lli-%s orc-lazy' % v
    out = os.path.join(scratch, 'orc-' + v)
    os.mkdir(out)
    env = dict(os.environ, LD_PRELOAD=preload, JITRING_DIR=out)
    r = run(['lli-' + v, '-jit-kind=orc-lazy', chain, '1000'], env=env)
    t.check(r.returncode == 0 and r.stderr == '',
            '%s: exits 0, stderr empty (%d: %s)' %
            (tag, r.returncode, r.stderr.strip()[-300:]))
    t.check(not os.listdir(out), '%s: no dump (lli asks for no perf '
            'listener under ORC)' % tag)


def main(t):
    if len(sys.argv) != 3:
        print('usage: lli_perf.py BUILD_DIR VERSIONS', file=sys.stderr)
        sys.exit(2)
    build = os.path.abspath(sys.argv[1])
    preload = os.path.join(build, 'llvm', 'libjitring-llvm-perf.so')
    dumptool = os.path.join(build, 'tools', 'jitring-dump')
    chain = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         'chain.ll')
    versions = [v for v in sys.argv[2].split(',')
                if v and shutil.which('lli-' + v)]
    if not versions:
        t.skip('no lli-%s installed (Debian: llvm-<major>)' %
               '/lli-'.join(sys.argv[2].split(',')))
    scratch = t.make_scratch()
    perf_usable(t, scratch)
    for v in versions:
        mcjit(t, scratch, build, v, preload, dumptool, chain)
        orc_lazy(t, scratch, v, preload, chain)


if __name__ == '__main__':
    guarded('lli_perf', main)
