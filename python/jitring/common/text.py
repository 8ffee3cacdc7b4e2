# SPDX-License-Identifier: MIT
"""Names as data: escape() makes any symbol, command or file name
perf gives one printable line (control characters, line and paragraph
separators and backslashes escaped), so that no name can add a line to a
folded file or a table, or a field to a page."""

import re


# Characters a name may not carry into any output as they are: the C0
# controls (NUL, BEL, ESC, newline, ...), DEL, the C1 controls (U+0085 is
# one) and U+2028/U+2029, i.e. every line break str.splitlines() honours
# and every byte a terminal acts on.  jitring's extension escapes names
# the same way before they reach the dump (_jitring.c, name_escaped()).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


_ESCAPES = {c: "\\x%02x" % c for c in
            list(range(0x20)) + list(range(0x7f, 0xa0))}
_ESCAPES.update({0x09: "\\t", 0x0a: "\\n", 0x0d: "\\r",
                 0x2028: "\\u2028", 0x2029: "\\u2029"})


def escape(name):
    """@name with each control character or line separator written as
    a visible escape: \\t \\n \\r, \\xNN (other C0, DEL, C1),
    \\u2028 \\u2029.  A backslash of the name is kept as it is, so
    escaping an escaped name changes nothing (the extension escapes at
    the source and every output escapes again)."""
    if _CONTROL.search(name) is None:
        return name
    return name.translate(_ESCAPES)
