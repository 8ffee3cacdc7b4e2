# SPDX-License-Identifier: MIT
"""The recording's metadata (jitring-record.json) as a typed object: Meta,
a dict (a key this version does not know is kept as it was) with a
property per key record writes or the finishing reads."""


def _key(name, doc, default=None):
    """A property of Meta: the key @name, @default where absent."""
    def get(self):
        return self.get(name, default)

    def put(self, value):
        self[name] = value
    return property(get, put, doc=doc)


class Meta(dict):
    """The recording's metadata (META), as record wrote it and the
    finishing adds to it: a dict, so that a key this version does not
    know is written back as it was read, with a property for each key
    the finishing reads."""

    # How record ran.
    version = _key("version", "the layout of the file (1)")
    command = _key("command", "the program's argv after `record --` "
                   "(record --pid: the service's argv)")
    python = _key("python", "the interpreter record ran in")
    cwd = _key("cwd", "the folder record ran in")
    started = _key("started", "when record started (time.time())", 0)
    pid = _key("pid", "the program's first process (record --pid: the "
               "service's)")
    attached = _key("attached", "a recording of record --pid")
    route = _key("route", "how record --pid reached the service")
    answered = _key("answered", "record --pid: whether the service "
                    "answered the request to stop")
    window_on_ns = _key("window_on_ns", "record --pid: the service's "
                        "clock (perf's) when its jitring started")
    status = _key("status", "the program's exit status")
    seconds = _key("seconds", "how long the recording took")
    perf_status = _key("perf_status", "perf record's exit status")
    # What perf recorded.
    event = _key("event", "perf's event", "cpu-clock")
    freq = _key("freq", "samples a second", "?")
    call_graph = _key("call_graph", "how perf took the stacks: fp or "
                      "dwarf")
    max_stack = _key("max_stack", "the most frames perf recorded of a "
                     "stack (kernel.perf_event_max_stack then)")
    stack_size = _key("stack_size", "dwarf mode's copy of each sample's "
                      "stack, in bytes")
    trampoline_elf = _key("trampoline_elf", "dwarf mode's trampolines "
                          "were ELF files perf unwinds through (no "
                          "inject)")
    top_only = _key("top_only", "--no-children: the first process's "
                    "samples alone")
    wait = _key("wait", "record --wait or --wall: where threads waited "
                "off CPU too")
    wall = _key("wall", "record --wall: a line per thread of its CPU "
                "time and its waits")
    wait_freq = _key("wait_freq", "--wait: the switches' stacks a "
                     "second a thread at most while it switches often")
    wait_stack_size = _key("wait_stack_size", "--wait: the switches' "
                           "stack copy, in bytes")
    wait_budget = _key("wait_budget", "--wait: the most perf.data may "
                       "take, in bytes")
    # How to finish it.
    inject = _key("inject", "perf inject the functions the samples "
                  "reach (reduced) or all (full)", "reduced")
    keep_debug = _key("keep_debug", "perf keeps its build-id cache "
                      "(~/.debug)")
    keep_perf_data = _key("keep_perf_data", "perf.data is kept once "
                          "injected")
    inline = _key("inline", "perf script lists inlined native functions")
    perf_script = _key("perf_script", "perf.script.txt is kept")
    # What a finishing did (one may run again).
    exec_fixed = _key("exec_fixed", "perf.data's exec'd processes were "
                      "fixed (jitring.perf.execfix)")
    live_segments = _key("live_segments", "how many segments of "
                         "perf.data were read while the program ran", 0)
    live_failed = _key("live_failed", "why the live reading failed, or "
                       "None")
