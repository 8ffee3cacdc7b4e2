# SPDX-License-Identifier: MIT
"""record --wait's reasons as a Python user reads them, without perf:
jitring.wait.reasons.reason() on stacks that record --wait recorded (each
written as stacks-wait.folded gives it, root first, and cut to the
frames that matter) on this project's 3.13t and on Debian sid's stripped
3.15 (GIL):

 1. pools: an idle ThreadPoolExecutor worker (also asyncio's default
    executor) is "executor idle"; multiprocessing.pool's worker and task
    handler "pool idle"; with _queue's symbols stripped (sid's 3.15)
    too, by its module's file, or with only the parking lot named; the
    stripped GIL build retaking the GIL as the wait ends, "GIL";
 2. queues: a consumer in SimpleQueue.get is "queue.SimpleQueue.get"
    (also from a task that an executor's worker runs, and from the pool's
    result handler); Queue.get and Queue.put, through Condition.wait's
    lock, "queue.Queue.get" and "queue.Queue.put"; a wait on the work
    queue's per-object lock stays "per-object lock";
 3. interpreter: a new thread waiting for its handle, the biased-refcount
    merge, the runtime's thread list, the type lock (a critical section
    on the interpreter's types mutex) are "interpreter (...)"; a
    critical section on an object stays "per-object lock", a PyMutex of
    another caller "PyMutex (in CALLER)".
"""

import jrtest

LIB = "/root/.cache/jitring/cpython-3.13.5-nogil/lib/python3.13t/"
SID = "/usr/lib/python3.15/"
DSOS = {"python3.13t": "/root/.cache/jitring/cpython-3.13.5-nogil/bin/"
                       "python3.13t",
        "python3.15": "/usr/bin/python3.15",
        "libc.so.6": "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "kernel": "[kernel.kallsyms]"}
# The kernel's and libc's part of a wait on a futex, root first.
FUTEX = ("__futex_abstimed_wait_common [libc.so.6];"
         "entry_SYSCALL_64_after_hwframe [kernel];do_syscall_64 [kernel];"
         "__x64_sys_futex [kernel];do_futex [kernel];futex_wait [kernel];"
         "__futex_wait [kernel];futex_do_wait [kernel];schedule [kernel]")
SEM = ("_PyParkingLot_Park [python3.13t];_PySemaphore_Wait [python3.13t];"
       "__new_sem_wait_slow64.constprop.0 [libc.so.6];" + FUTEX)
STRIPPED_FUTEX = ("[unknown] [libc.so.6];" * 4 +
                  FUTEX.split(";", 1)[1])
SQ_GET = ("_queue_SimpleQueue_get "
          "[_queue.cpython-313t-x86_64-linux-gnu.so];" + SEM)
SQ_315 = "[unknown] [_queue.cpython-315-x86_64-linux-gnu.so]"


def frames(folded):
    """A folded stack (root first, "sym [dso]" or "py::fn:file") as
    reason() takes it: (sym, dso) pairs, leaf first."""
    out = []
    for part in folded.split(";"):
        if part.startswith("py::"):
            out.append((part, ""))
            continue
        sym, _, dso = part.rpartition(" [")
        dso = dso.rstrip("]")
        out.append((sym, DSOS.get(dso, "/usr/lib/" + dso)))
    return out[::-1]


def check(t, what, folded, want, preempt=False):
    from jitring.wait.reasons import reason
    got = reason(frames(folded), preempt)
    t.check(got == want, "%s: %s" % (what, want), got)


def test_pools(t):
    check(t, "an idle ThreadPoolExecutor worker",
          "py::_worker:" + LIB + "concurrent/futures/thread.py;"
          "PyObject_Vectorcall [python3.13t];"
          "method_vectorcall_FASTCALL_KEYWORDS_METHOD [python3.13t];" +
          SQ_GET, "executor idle")
    check(t, "an idle multiprocessing.pool worker",
          "py::worker:" + LIB + "multiprocessing/pool.py;"
          "PyObject_Vectorcall [python3.13t];"
          "cfunction_vectorcall_FASTCALL_KEYWORDS_METHOD [python3.13t];" +
          SQ_GET, "pool idle")
    check(t, "the pool's task handler (iter(taskqueue.get, None))",
          "py::Pool._handle_tasks:" + LIB + "multiprocessing/pool.py;"
          "calliter_iternext [python3.13t];"
          "cfunction_vectorcall_FASTCALL_KEYWORDS_METHOD [python3.13t];" +
          SQ_GET, "pool idle")
    check(t, "an idle worker of a stripped 3.15 (_queue by its file)",
          "py::_worker:" + SID + "concurrent/futures/thread.py;"
          "[unknown] [python3.15];_Py_VectorCall_StackRefSteal "
          "[python3.15];" + SQ_315 + ";_PyParkingLot_Park [python3.15];"
          "_PySemaphore_Wait [python3.15];" + STRIPPED_FUTEX,
          "executor idle")
    check(t, "an idle worker where _queue is built into a stripped "
          "interpreter (the machinery alone, unnamed)",
          "py::_worker:" + SID + "concurrent/futures/thread.py;"
          "[unknown] [python3.15];[unknown] [python3.15];"
          "_PyParkingLot_Park [python3.15];_PySemaphore_Wait "
          "[python3.15];" + STRIPPED_FUTEX, "executor idle")
    check(t, "a stripped 3.15 pool worker",
          "py::worker:" + SID + "multiprocessing/pool.py;"
          "[unknown] [python3.15];" + SQ_315 + ";_PyParkingLot_Park "
          "[python3.15];_PySemaphore_Wait [python3.15];" + STRIPPED_FUTEX,
          "pool idle")
    check(t, "the GIL retaken as a stripped 3.15's get wakes",
          "py::Pool._handle_tasks:" + SID + "multiprocessing/pool.py;"
          "[unknown] [python3.15];_PyForIter_VirtualIteratorNext "
          "[python3.15];[unknown] [python3.15];" + SQ_315 +
          ";_PyParkingLot_Park [python3.15];[unknown] [python3.15];"
          "[unknown] [python3.15];pthread_cond_timedwait [libc.so.6];" +
          STRIPPED_FUTEX, "GIL")


def test_queues(t):
    check(t, "a SimpleQueue consumer",
          "py::Thread.run:" + LIB + "threading.py;"
          "py::consumer:/srv/app.py;PyObject_Vectorcall [python3.13t];"
          "method_vectorcall_FASTCALL_KEYWORDS_METHOD [python3.13t];" +
          SQ_GET, "queue.SimpleQueue.get")
    check(t, "a task an executor runs, in its own SimpleQueue.get",
          "py::_worker:" + LIB + "concurrent/futures/thread.py;"
          "py::_WorkItem.run:" + LIB + "concurrent/futures/thread.py;"
          "py::task:/srv/app.py;PyObject_Vectorcall [python3.13t];" +
          SQ_GET, "queue.SimpleQueue.get")
    check(t, "the pool's result handler",
          "py::Pool._handle_results:" + LIB + "multiprocessing/pool.py;"
          "PyObject_Vectorcall [python3.13t];" + SQ_GET,
          "queue.SimpleQueue.get")
    check(t, "a stripped 3.15 SimpleQueue consumer",
          "py::consumer:/srv/app.py;[unknown] [python3.15];" + SQ_315 +
          ";_PyParkingLot_Park [python3.15];_PySemaphore_Wait "
          "[python3.15];" + STRIPPED_FUTEX, "queue.SimpleQueue.get")
    lock = ("lock_PyThread_acquire_lock [python3.13t];"
            "_PyMutex_LockTimed [python3.13t];" + SEM)
    for op in ("get", "put"):
        check(t, "Queue.%s through Condition.wait" % op,
              "py::consumer:/srv/app.py;py::Queue.%s:%squeue.py;"
              "py::Condition.wait:%sthreading.py;"
              "PyObject_Vectorcall [python3.13t];" % (op, LIB, LIB) + lock,
              "queue.Queue." + op)
    check(t, "the work queue's per-object lock in _worker",
          "py::_worker:" + LIB + "concurrent/futures/thread.py;"
          "_queue_SimpleQueue_get_nowait "
          "[_queue.cpython-313t-x86_64-linux-gnu.so];"
          "_PyCriticalSection_BeginSlow [python3.13t];"
          "PyMutex_Lock [python3.13t];" + SEM, "per-object lock")


def test_interpreter(t):
    start = ("clone3 [libc.so.6];start_thread [libc.so.6];"
             "pythread_wrapper [python3.13t];thread_run [python3.13t];"
             "PyEvent_Wait [python3.13t];")
    check(t, "a new thread waiting for its handle", start + SEM,
          "interpreter (thread start)")
    check(t, "the biased-refcount merge",
          "py::update:/srv/app.py;_PyEval_EvalFrameDefault [python3.13t];"
          "_Py_HandlePending [python3.13t];_Py_brc_merge_refcounts "
          "[python3.13t];_PyMutex_LockTimed [python3.13t];" + SEM,
          "interpreter (refcount merge)")
    check(t, "a thread queueing an object to its owner's merge",
          "py::update:/srv/app.py;_PyEval_EvalFrameDefault [python3.13t];"
          "_Py_DecRefSharedIsDead [python3.13t];_Py_brc_queue_object "
          "[python3.13t];PyMutex_Lock [python3.13t];" + SEM,
          "interpreter (refcount merge)")
    check(t, "the runtime's thread list (HEAD_LOCK)",
          "py::Thread.start:" + LIB + "threading.py;"
          "new_threadstate [python3.13t];_PyMutex_LockTimed "
          "[python3.13t];" + SEM, "interpreter (thread list)")
    yield_ = ("__sched_yield [libc.so.6];"
              "entry_SYSCALL_64_after_hwframe [kernel];"
              "do_syscall_64 [kernel];__x64_sys_sched_yield [kernel];"
              "schedule [kernel]")
    check(t, "the type lock (a class made while others look types up)",
          "py::ABCMeta.__new__:<frozen abc>;type_new [python3.13t];"
          "PyType_Ready [python3.13t];type_ready [python3.13t];"
          "mro_internal_unlocked.constprop.0 [python3.13t];"
          "lookup_maybe_method [python3.13t];_PyType_LookupRef "
          "[python3.13t];_PyCriticalSection_BeginSlow [python3.13t];"
          "PyMutex_Lock [python3.13t];" + yield_,
          "interpreter (type lock)", preempt=True)
    check(t, "the type lock from type.mro()",
          "py::ABCMeta.__new__:<frozen abc>;"
          "method_vectorcall_NOARGS [python3.13t];type_mro [python3.13t];"
          "_PyCriticalSection_BeginSlow [python3.13t];"
          "PyMutex_Lock [python3.13t];" + yield_,
          "interpreter (type lock)", preempt=True)
    check(t, "a list's critical section",
          "py::append_shared:/srv/app.py;list_append [python3.13t];"
          "_PyCriticalSection_BeginSlow [python3.13t];"
          "PyMutex_Lock [python3.13t];" + SEM, "per-object lock")
    check(t, "a PyMutex of another caller",
          "py::f:/srv/app.py;some_extension_call [libfoo.so];"
          "_PyMutex_LockTimed [python3.13t];" + SEM,
          "PyMutex (in some_extension_call)")


if __name__ == "__main__":
    jrtest.main(globals())
