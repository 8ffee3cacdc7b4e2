#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the Python package's shape (python/jitring/): imports point one
way, modules and functions stay small.

  - no import circle between the package's modules, counting every import
    (those inside functions too: a circle hidden behind a lazy import is
    still a circle);
  - the folders are layers, lowest first (LAYERS): a module imports only
    from its own folder or a lower one; the top-level modules that run
    inside the profiled program (IN_PROGRAM) import only from common/;
    __main__ may import the command lines (its subcommands' entry points);
  - no module over MODULE_MAX lines, no function over FUNCTION_MAX lines
    (from its `def` or first decorator to its last line).

Usage: check-pymodules.py [PACKAGE_DIR]  (default: python/jitring beside
this script's folder).  Prints each violation and exits 1, or prints one
line and exits 0.  make test runs it (the 'pymodules' test), and on a
planted circle (its case 'planted').
"""
import ast
import os
import sys

LAYERS = ["common", "profile", "perf", "wait", "output", "attach", "record"]
IN_PROGRAM = {"__init__", "_autostart", "_target", "_running"}
ENTRY = "__main__"
MODULE_MAX = 600
FUNCTION_MAX = 80


def modules(pkg):
    """{dotted name under the package: path}."""
    out = {}
    for root, dirs, files in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs
                         if not d.startswith((".", "__pycache__")))
        for f in sorted(files):
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), pkg)[:-3]
                name = rel.replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[:-9]
                out[name] = os.path.join(root, f)
    return out


def imports(tree, name, mods):
    """The package modules @tree imports, with the line of each."""
    pkgpath = name.split(".")
    found = []
    for n in ast.walk(tree):
        targets = []
        if isinstance(n, ast.Import):
            targets = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = pkgpath[:len(pkgpath) - n.level]
                if os.path.basename(mods.get(name, "")) == "__init__.py":
                    base = pkgpath[:len(pkgpath) - n.level + 1]
                mod = ".".join(["jitring"] + base +
                               ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            targets = [mod] + [mod + "." + a.name for a in n.names]
        for t in targets:
            if not t.startswith("jitring.") and t != "jitring":
                continue
            t = t[8:]
            while t and t not in mods:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.append((t, n.lineno))
    return found


def layer(name):
    head = name.split(".")[0]
    return LAYERS.index(head) if head in LAYERS else None


def cycles(graph):
    res, state, stack = [], {}, []

    def go(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                res.append(stack[stack.index(v):] + [v])
            elif v not in state:
                go(v)
        stack.pop()
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            go(u)
    return res


def check(pkg):
    mods = modules(pkg)
    errors, graph = [], {}
    for name, path in mods.items():
        with open(path) as f:
            text = f.read()
        tree = ast.parse(text, path)
        rel = os.path.relpath(path, os.path.dirname(pkg))
        lines = text.count("\n")
        if lines > MODULE_MAX:
            errors.append("%s: %d lines (at most %d)"
                          % (rel, lines, MODULE_MAX))
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([n.lineno] + [d.lineno for d in n.decorator_list])
                size = n.end_lineno - first + 1
                if size > FUNCTION_MAX:
                    errors.append("%s:%d: %s() is %d lines (at most %d)"
                                  % (rel, first, n.name, size, FUNCTION_MAX))
        deps = imports(tree, name, mods)
        graph[name] = {t for t, _ in deps}
        mine = layer(name)
        for t, line in deps:
            theirs = layer(t)
            if name == ENTRY or t.split(".")[0] == name.split(".")[0]:
                continue
            if name in IN_PROGRAM or name.split(".")[0] in IN_PROGRAM:
                bad = theirs != 0 and t not in IN_PROGRAM
            elif mine is None:
                bad = False
            else:
                bad = t == ENTRY or (theirs is not None and theirs > mine)
            if bad:
                errors.append("%s:%d: imports jitring.%s, a higher layer"
                              % (rel, line, t))
    for c in cycles(graph):
        errors.append("import circle: " + " -> ".join(c))
    return list(dict.fromkeys(errors)), len(mods)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = sys.argv[1] if len(sys.argv) > 1 else \
        os.path.join(here, "..", "python", "jitring")
    errors, n = check(os.path.normpath(pkg))
    for e in errors:
        print(e)
    if errors:
        print("check-pymodules: %d problem%s"
              % (len(errors), "" if len(errors) == 1 else "s"))
        return 1
    print("check-pymodules: %d modules, no circle, layers kept, none over "
          "%d lines, no function over %d" % (n, MODULE_MAX, FUNCTION_MAX))
    return 0


if __name__ == "__main__":
    sys.exit(main())
