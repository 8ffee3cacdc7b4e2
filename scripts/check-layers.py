#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that src/ only includes and calls downward (docs/design.md, 16).

src/layers lists the layers bottom up, the one place their order is
written: one line per layer, its folders (paths under src/) separated by
spaces; the folders after "apart:" stand apart.  A file may include
headers of its own folder and of folders on earlier lines; folders that
share a line (the two engines) do not reach each other, and only the line
right after theirs reaches them.  A folder that stands apart (reader/) may
include the first layer only, and no layer includes it.  A header of
another folder is included by its path from src/ ("engines/rings/rings.h"),
so that an include names the layer it reaches; one of its own folder by
its name.  Public headers (include/) may be included from anywhere.

With --objects, the same rule holds for calls: every symbol an object of
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

# Set by read_layers(): {folder: rank, or None apart}, and the ranks that
# several folders share (the engines).
RANK = {}
SHARED = set()


def read_layers(path):
    """src/layers: the folders' ranks (line numbers), in order."""
    order = []
    with open(path, encoding='utf-8') as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            if line.startswith('apart:'):
                for d in line[len('apart:'):].split():
                    RANK[d] = None
                continue
            ds = line.split()
            for d in ds:
                RANK[d] = len(order)
            if len(ds) > 1:
                SHARED.add(len(order))
            order.append(ds)
    return order


def rank(folder):
    """The layer's rank, or None for a folder that stands apart."""
    return RANK.get(folder)


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
        up = ' '.join(d for d, r in RANK.items() if r == rank(dst) + 1)
        return f'an engine, reached only through src/{up}'
    return f'not below src/{src}'


def symbols(libs):
    """{object: (folder, defined, undefined)} of the static libraries.

    Meson names an object after its path under src/, '/' made '_'
    (engines_rings_flusher.c.o): the folder is the longest one of
    src/layers that prefixes the name so.
    """
    prefixes = sorted(RANK, key=len, reverse=True)

    def folder_of(obj):
        for d in prefixes:
            if obj.startswith(d.replace('/', '_') + '_'):
                return d
        return obj.split('_', 1)[0]

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
        o = objs.setdefault(obj, (folder_of(obj), set(), set()))
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
    problems = []
    order = read_layers(os.path.join(src, 'layers'))
    where = {}          # file name -> folder
    folders = set()
    for d, _, fs in os.walk(src):
        rel = os.path.relpath(d, src)
        code = [f for f in fs if f.endswith(('.c', '.h'))]
        if rel == '.':
            problems += [f'src/{f}: outside every layer' for f in code]
            continue
        if not code:
            continue
        folders.add(rel)
        if rel not in RANK:
            problems.append(f'src/{rel}: a folder src/layers does not list')
        for f in code:
            if f in where:
                problems.append(f'{f}: in src/{where[f]} and src/{rel}')
            where[f] = rel
    for d in RANK:
        if d not in folders:
            problems.append(f'src/layers: {d} holds no code')
    n_files = n_incl = 0
    for f, d in sorted(where.items(), key=lambda x: (x[1], x[0])):
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
                if '/' in name:
                    to, _, base = name.rpartition('/')
                    if where.get(base) != to:
                        problems.append(f'src/{d}/{f}:{no}: "{name}" is '
                                        'no header of src/')
                        continue
                    if to == d:
                        problems.append(f'src/{d}/{f}:{no}: "{name}": '
                                        'a header of its own folder, by '
                                        'its name')
                        continue
                else:
                    to = where.get(name)
                    if to is None:
                        problems.append(f'src/{d}/{f}:{no}: "{name}" is '
                                        'in no layer')
                        continue
                    if to != d:
                        problems.append(f'src/{d}/{f}:{no}: "{name}" of '
                                        f'src/{to}: by its path, '
                                        f'"{to}/{name}"')
                        continue
                if not allowed(d, to):
                    problems.append(f'src/{d}/{f}:{no}: includes '
                                    f'{name} of src/{to}, {why(d, to)}')
    n_calls = 0
    if libs:
        n_calls, more = calls(libs)
        problems += more
    for p in problems:
        print(p)
    if problems:
        print(f'{len(problems)} includes, calls or files break the layers')
        return 1
    shown = ' < '.join(' '.join(ds) for ds in order)
    apart = ' '.join(d for d, r in RANK.items() if r is None)
    engines = ''.join(f"; {' '.join(order[r])} only through "
                      f"{' '.join(order[r + 1])}"
                      for r in sorted(SHARED) if r + 1 < len(order))
    print(f'{len(folders)} folders, {n_files} files, {n_incl} includes, '
          f'{n_calls} calls between objects: every one goes down '
          f'({shown}; {apart} apart{engines})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
