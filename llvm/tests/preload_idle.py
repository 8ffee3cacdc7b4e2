# SPDX-License-Identifier: MIT
"""libjitring-llvm-perf.so preloaded into processes that never ask for
LLVM's perf listener costs them no LLVM: /proc/self/maps of `cat` has no
libLLVM, no C++ runtime and no jitring; the library's only DT_NEEDED is
libc.  And where the preload finds no listener built for the process's
LLVM (here: the library copied alone to a folder), an LLVM program runs on
LLVM's own listener and one line on stderr names both versions.

Usage: preload_idle.py BUILD_DIR VERSIONS
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llvmtest import guarded, run


def main(t):
    build = os.path.abspath(sys.argv[1])
    versions = [v for v in sys.argv[2].split(',') if v]
    preload = os.path.join(build, 'llvm', 'libjitring-llvm-perf.so')
    r = run(['cat', '/proc/self/maps'],
            env=dict(os.environ, LD_PRELOAD=preload))
    t.check(r.returncode == 0 and 'libjitring-llvm-perf.so' in r.stdout,
            'cat runs with the library preloaded (and maps it)')
    for lib in ('libLLVM', 'libstdc++', 'libjitring.so',
                'libjitring-llvm-perf-'):
        t.check(lib not in r.stdout, 'no %s in /proc/self/maps' % lib)
    if shutil.which('readelf'):
        d = run(['readelf', '-d', preload])
        needed = [line.split('[')[1].rstrip(']') for line in
                  d.stdout.splitlines() if '(NEEDED)' in line]
        t.check(needed == ['libc.so.6'], 'DT_NEEDED: %s' % needed)

    v = next((v for v in versions if shutil.which('lli-' + v)), None)
    if v is None:
        print('no lli-%s: the no-listener case is not run' % versions)
    else:
        scratch = t.make_scratch()
        alone = os.path.join(scratch, 'alone')
        os.mkdir(alone)
        shutil.copy(preload, alone)
        ll = os.path.join(scratch, 'ret.ll')
        with open(ll, 'w') as f:
            f.write('define i32 @main() {\n  ret i32 0\n}\n')
        r = run(['lli-' + v, '-jit-kind=mcjit', ll],
                env=dict(os.environ, JITRING_DIR=scratch, LD_PRELOAD=
                         os.path.join(alone, 'libjitring-llvm-perf.so')))
        lines = r.stderr.strip().splitlines()
        t.check(r.returncode == 0, 'lli-%s runs without a listener for '
                'its LLVM (%d)' % (v, r.returncode))
        t.check(len(lines) == 1 and ('uses LLVM %s' % v) in lines[0] and
                ('built for LLVM ' + ', '.join(versions)) in lines[0],
                'one line names both versions: %s' % lines)
        t.check(not any(n.endswith('.dump') for n in os.listdir(scratch)),
                'and no jitring dump')


if __name__ == '__main__':
    guarded('preload_idle', main)
