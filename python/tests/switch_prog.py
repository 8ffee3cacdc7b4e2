# SPDX-License-Identifier: MIT
"""A program that switches often, for record --wait's cost
(python/README.md): two threads pass a byte back and forth through two
pipes, with a fixed loop of K additions between round trips; about
20,000 context switches a second at K=450 on the 2-CPU test machine.
Prints the round trips' time and rate on stderr.

Usage: switch_prog.py [ROUND_TRIPS [K]]   (default 30000 450)
"""

import os
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30000
K = int(sys.argv[2]) if len(sys.argv) > 2 else 450
r1, w1 = os.pipe()
r2, w2 = os.pipe()


def echo():
    for _ in range(N):
        os.write(w2, os.read(r1, 1))


def main():
    t = threading.Thread(target=echo)
    t.start()
    t0 = time.monotonic()
    for _ in range(N):
        s = 0
        for i in range(K):
            s += i
        os.write(w1, b"x")
        os.read(r2, 1)
    t.join()
    dt = time.monotonic() - t0
    sys.stderr.write("%d round trips in %.3f s: %.0f switches/s\n"
                     % (N, dt, 2 * N / dt))


main()
