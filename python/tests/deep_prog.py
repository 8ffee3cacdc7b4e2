# SPDX-License-Identifier: MIT
"""A recursive-descent parser of nested sums: each nesting level is three
Python frames (expr, term, factor), so DEPTH levels are 3 * DEPTH frames
under main and <module> (20: 60 frames, as deep as docutils' parser
gets).  Usage: deep_prog.py DEPTH ROUNDS.  The standard library only
(test_record.py's deep case, make bench-record)."""
import sys


class Parser:
    def __init__(self, text):
        self.text, self.i = text, 0

    def expr(self):
        v = self.term()
        while self.i < len(self.text) and self.text[self.i] == "+":
            self.i += 1
            v += self.term()
        return v

    def term(self):
        v = self.factor()
        while self.i < len(self.text) and self.text[self.i] == "*":
            self.i += 1
            v *= self.factor()
        return v

    def factor(self):
        if self.text[self.i] == "(":
            self.i += 1
            v = self.expr()
            self.i += 1
            return v
        j = self.i
        while self.i < len(self.text) and self.text[self.i].isdigit():
            self.i += 1
        return int(self.text[j:self.i])


def main(depth, rounds):
    text = "1"
    for _ in range(depth):
        text = "(" + text + "+1*1+" + "+".join(["1"] * 40) + ")"
    t = 0
    for _ in range(rounds):
        t += Parser(text).expr()
    print(t)


main(int(sys.argv[1]), int(sys.argv[2]))
