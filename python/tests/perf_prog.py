# SPDX-License-Identifier: MIT
"""A multithreaded Python program for perf_python.sh: THREADS threads call
hot_a or hot_b from worker for SECONDS seconds, or each CALLS times (the
same work whatever the scheduler did, so two runs share their CPU alike
between hot_a and hot_b).  Usage: perf_prog.py [THREADS [SECONDS
[CALLS]]]."""

import sys
import threading
import time


def hot_a(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def hot_b(n):
    s = 0
    for i in range(n):
        s ^= i + 7
    return s


def worker(k, deadline, most):
    f = hot_a if k % 2 == 0 else hot_b
    calls = 0
    while calls != most and time.monotonic() < deadline:
        f(5000)
        calls += 1
    return calls


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    most = int(sys.argv[3]) if len(sys.argv) > 3 else -1
    deadline = time.monotonic() + seconds
    ts = [threading.Thread(target=worker, args=(k, deadline, most))
          for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("done", threads, "threads")


if __name__ == "__main__":
    main()
