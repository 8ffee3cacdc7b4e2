#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that src/ only includes and calls downward (docs/design.md, 16).

src/ holds one folder per layer, named N-name: the number is the layer's
place, the only place the order is written.  A file may include headers of
its own folder and of folders with a lower number; folders with the same
number (the two engines) do not include each other, and are reached only
from the layer numbered right above them (4-engine, which hands out an
engine's operations): the layers above that one reach an engine only
through it.  A folder without a number (reader/) stands apart: it may
include layer 0 only, and no layer includes it.  Public headers
(include/) may be included from anywhere.

With --objects, the same rules hold for calls: every symbol an object of
the given static libraries needs and another of them defines (nm) must be
defined in its own folder or below.  An include check alone cannot see a
lower header declaring a function a higher layer defines.

Usage: check-layers.py [SRC_DIR] [--objects LIB.a ...]
(SRC_DIR defaults to the src/ beside this script.)
Exit 0 when every include and call goes down, 1 with one line per one
that does not.
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
LAYER = re.compile(r'^(\d+)-[a-z0-9-]+$')


def rank(folder):
    """The layer's number, or None for a folder that stands apart."""
    m = LAYER.match(folder)
    return int(m.group(1)) if m else None


# Layer numbers that several folders share (the engines): set by main().
SHARED = set()


def shared(folders):
    """The numbers of layers with more than one folder."""
    seen = {}
    for d in folders:
        r = rank(d)
        if r is not None:
            seen[r] = seen.get(r, 0) + 1
    return {r for r, n in seen.items() if n > 1}


def allowed(src, dst):
    """May a file of folder @src include a header of folder @dst?"""
    if src == dst:
        return True
    rs, rd = rank(src), rank(dst)
    if rd is None:
        return False
    if rs is None:
        return rd == 0
    if rd in SHARED:
        # An engine: only the layer right above picks between them.
        return rs == rd + 1
    return rd < rs


def why(src, dst):
    """Why @src may not reach @dst, for the message."""
    if rank(dst) in SHARED and rank(src) is not None and \
            rank(src) > rank(dst):
        up = rank(dst) + 1
        return f'an engine, reached only through the layer numbered {up}'
    return f'not below src/{src}'


def symbols(libs):
    """{object: (folder, defined, undefined)} of the static libraries.

    Meson names an object <folder>_<file>.o, a folder having no '_'.
    """
    objs = {}
    out = subprocess.run(['nm', '-A', '-g'] + libs, check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        where, _, rest = line.rpartition(': ')
        if not where:
            where, _, rest = line.rpartition(':')
        obj = os.path.basename(where.split(':')[-1])
        fields = rest.split()
        if len(fields) < 2:
            continue
        kind, name = fields[-2], fields[-1]
        o = objs.setdefault(obj, (obj.split('_', 1)[0], set(), set()))
        (o[2] if kind == 'U' else o[1]).add(name)
    return objs


def calls(libs):
    """Problems: calls from an object to a folder not below its own."""
    objs = symbols(libs)
    owner = {}
    for folder, defined, _ in objs.values():
        for name in defined:
            owner[name] = folder
    problems = []
    n = 0
    for obj, (folder, _, needed) in sorted(objs.items()):
        for name in sorted(needed):
            to = owner.get(name)
            if to is None:
                continue
            n += 1
            if not allowed(folder, to):
                problems.append(f'{obj}: calls {name} of src/{to}, '
                                f'{why(folder, to)}')
    return n, problems


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = sys.argv[1:]
    libs = []
    if '--objects' in args:
        i = args.index('--objects')
        libs = args[i + 1:]
        args = args[:i]
    src = args[0] if args else os.path.join(here, '..', 'src')
    public = os.path.join(src, '..', 'include')
    folders = sorted(d for d in os.listdir(src)
                     if os.path.isdir(os.path.join(src, d)))
    SHARED.update(shared(folders))
    where = {}
    problems = []
    for d in folders:
        if rank(d) is None and d != 'reader':
            problems.append(f'src/{d}: not a layer (N-name) nor reader/')
        for f in os.listdir(os.path.join(src, d)):
            if f in where:
                problems.append(f'{f}: in src/{where[f]} and src/{d}')
            where[f] = d
    for f in os.listdir(src):
        if f.endswith(('.c', '.h')):
            problems.append(f'src/{f}: outside every layer')
    n_files = n_incl = 0
    for d in folders:
        for f in sorted(os.listdir(os.path.join(src, d))):
            if not f.endswith(('.c', '.h')):
                continue
            n_files += 1
            path = os.path.join(src, d, f)
            with open(path, encoding='utf-8') as fh:
                for no, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    n_incl += 1
                    name = m.group(1)
                    if os.path.isfile(os.path.join(public, name)):
                        continue
                    to = where.get(name)
                    if to is None:
                        problems.append(f'src/{d}/{f}:{no}: "{name}" is '
                                        'in no layer')
                    elif not allowed(d, to):
                        problems.append(f'src/{d}/{f}:{no}: includes '
                                        f'{name} of src/{to}, '
                                        f'{why(d, to)}')
    n_calls = 0
    if libs:
        n_calls, more = calls(libs)
        problems += more
    for p in problems:
        print(p)
    if problems:
        print(f'{len(problems)} includes, calls or files break the layers')
        return 1
    ranks = sorted({rank(d) for d in folders if rank(d) is not None})
    order = ' < '.join(' '.join(d for d in folders if rank(d) == r)
                       for r in ranks)
    engines = ''.join(f'; above {r + 1}, {r} only through it'
                      for r in sorted(SHARED))
    print(f'{len(folders)} folders, {n_files} files, {n_incl} includes, '
          f'{n_calls} calls between objects: every one goes down '
          f'({order}; reader apart{engines})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
