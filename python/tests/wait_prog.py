# SPDX-License-Identifier: MIT
"""Contended programs for record --wait's cost (bench/python/bench_wait.py)
and its bounds (test_wait.py): THREADS threads (default 8) start
together and do N operations each of one kind:

  dict     update one shared dict (free-threaded: its per-object lock)
  list     append to and pop from one shared list
  counter  a collections.Counter behind one threading.Lock
  queue    a queue.Queue pipeline: half the threads put, half get
  yield    os.sched_yield() in a loop: a context switch per call where
           more threads than CPUs are runnable (hundreds of thousands a
           second), the fastest switching a Python program does

Prints on stderr "KIND: T s, S switches/s" (T the contended phase's wall
time, from the barrier to the last thread's end; S the context switches
of the worker threads in it, each from its /proc/thread-self/status).

Usage: wait_prog.py KIND [N [THREADS]]
"""

import collections
import os
import queue
import sys
import threading
import time

KIND = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200000
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 8


def switches():
    """The calling thread's context switches so far."""
    n = 0
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt", "nonvoluntary")):
                n += int(line.split()[1])
    return n


shared = {}
items = []
counter = collections.Counter()
lock = threading.Lock()
q = queue.Queue(maxsize=64)


def work(i):
    if KIND == "dict":
        for j in range(N):
            shared[j & 1023] = j
    elif KIND == "list":
        for j in range(N):
            items.append(j)
            try:
                items.pop()
            except IndexError:
                pass
    elif KIND == "counter":
        for j in range(N):
            with lock:
                counter[j & 63] += 1
    elif KIND == "queue":
        if i % 2 == 0:
            for j in range(N):
                q.put(j)
        else:
            for j in range(N):
                q.get()
    elif KIND == "yield":
        for j in range(N):
            os.sched_yield()
    else:
        raise SystemExit("unknown kind %r" % KIND)


def main():
    go = threading.Barrier(THREADS + 1)
    got = []

    def run(i):
        go.wait()
        n0 = switches()
        work(i)
        got.append(switches() - n0)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in ts:
        t.start()
    go.wait()
    t0 = time.monotonic()
    for t in ts:
        t.join()
    dt = time.monotonic() - t0
    sys.stderr.write("%s: %.3f s, %.0f switches/s\n"
                     % (KIND, dt, sum(got) / dt))


main()
