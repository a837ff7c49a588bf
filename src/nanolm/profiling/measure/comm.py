"""Collective communication in one profiled window: how long collectives were in flight, how much of that
the step waited for, and how much of it ran behind backward.

What torch 2.13's profiler records (checked on a 2-process gloo DDP run):

- the main thread enqueues each collective in a short ``c10d::allreduce_`` (``c10d::broadcast_``,
  ``c10d::barrier``, ``c10d::allgather_`` ...) operator, inside backward for DDP's gradient buckets;
- gloo runs it on a thread of its own as an async range ``gloo:all_reduce`` (``gloo:broadcast``,
  ``gloo:barrier``, ``gloo:all_gather``), from the enqueue until it completes: that range includes the time
  spent waiting for the other ranks to arrive;
- the main thread's wait for it (DDP's end of backward, ``work.wait()``) is no operator: it is the self time
  of the range around it (``backward``, an autograd node), which the category table would otherwise count as
  host overhead;
- with NCCL, the transfer is a device kernel (``ncclDevKernel_AllReduce_...``), and the host records
  ``nccl:all_reduce`` / ``record_param_comms`` ranges.

From these, per step (ms):

- in flight: the union of all communication ranges (any thread, or the device's NCCL kernels);
- exposed: on a CPU, the time the main thread spends in collective operators or waiting while a
  collective is in flight (a stretch of at least WAIT_GAP_US without any operator; shorter stretches are
  Python between operators); on a GPU, the time an NCCL kernel runs and no compute kernel does. That is
  the time perfect overlap would remove from the step; on a rank that waits for a slower one, it also
  holds the waiting;
- overlapped: in flight while backward's operators run (CPU; main thread), or while compute kernels run
  (GPU)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

from ..trace.classify import COMMUNICATION, categorize, is_annotation
from ..trace.intervals import Interval, intersect, length, subtract, union

WAIT_GAP_US = 50.0  # a stretch of the main thread without operators shorter than this is Python, not a wait


_KINDS = [
    ("all_reduce", re.compile(r"all_?reduce", re.I)),
    ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
    ("all_gather", re.compile(r"all_?gather", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
    ("barrier", re.compile(r"barrier", re.I)),
    ("all_to_all", re.compile(r"all_?to_?all", re.I)),
    ("send/recv", re.compile(r"(^|[:_])(send|recv)", re.I)),
    ("reduce", re.compile(r"(^|[:_])reduce", re.I)),
    ("gather", re.compile(r"(^|[:_])gather", re.I)),
    ("scatter", re.compile(r"(^|[:_])scatter", re.I)),
]


@lru_cache(maxsize=4096)
def collective_kind(name: str) -> str | None:
    """ "all_reduce", "broadcast", "barrier" ... for a communication range or kernel; None when the name does
    not say (``record_param_comms``)."""
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return None


def is_communication(name: str) -> bool:
    return categorize(name) == COMMUNICATION


def backend_of(names: list[str]) -> str | None:
    """ "gloo" or "nccl" from the names the profiler recorded; None when neither appears."""
    lowered = [n.lower() for n in names]
    for backend in ("nccl", "gloo"):
        if any(backend in n for n in lowered):
            return backend
    return None


def _span(event) -> Interval:
    return (event.time_range.start, event.time_range.end)


@dataclass
class CommStats:
    """Communication in one window, ms per step (see the module's docstring for each measure)."""

    in_flight_ms: float
    exposed_ms: float
    overlap_ms: float
    overlap_with: str  # "backward" (CPU: the main thread's backward operators) or "compute kernels" (GPU)
    calls: dict[str, float] = field(default_factory=dict)  # kind -> collectives per step
    kind_ms: dict[str, float] = field(default_factory=dict)  # kind -> in flight, ms per step
    backend: str | None = None
    # exposed waits found in the self time of marking ranges, by the category that time was in (moved to
    # the communication category by analyze_window)
    wait_by_category: dict[str, float] = field(default_factory=dict)


def main_thread(cpu_events: list):
    """The thread that ran the training loop: the one with the profiler's step markers (else the one whose
    top-level ranges take the most time)."""
    steps = [e.thread for e in cpu_events if e.name.startswith("ProfilerStep")]
    if steps:
        return max(set(steps), key=steps.count)
    busy: dict = defaultdict(float)
    for e in cpu_events:
        if e.cpu_parent is None and not getattr(e, "is_async", False):
            busy[e.thread] += e.time_range.elapsed_us()
    return max(busy, key=busy.get) if busy else None


def comm_window(
    cpu_events: list,
    device_events: list,
    annotations: list[tuple[object, str]],
    n_steps: int,
    compute: list[Interval] | None = None,
) -> CommStats | None:
    """Communication in one window; None when it recorded none.

    annotations: the marking ranges (their self time is the host's time between operators) with the
    category that self time is counted in. compute: the union of the window's device activities that are not
    communication, where the caller has it already (then device_events need only hold the collectives)."""
    comm_cpu = [e for e in cpu_events if is_communication(e.name)]
    comm_device = [e for e in device_events if is_communication(e.name)]
    if not comm_cpu and not comm_device:
        return None
    main = main_thread(cpu_events)
    on_main = [e for e in cpu_events if e.thread == main]
    steps = union([_span(e) for e in on_main if e.name.startswith("ProfilerStep")]) or union(
        [_span(e) for e in on_main if e.cpu_parent is None]
    )
    per_ms = 1 / (1000.0 * max(n_steps, 1))
    backend = backend_of([e.name for e in comm_cpu + comm_device])
    calls, kind_ms = _by_kind(comm_cpu, comm_device, main, steps, n_steps)
    if comm_device:
        if compute is None:
            compute = union([_span(e) for e in device_events if not is_communication(e.name)])
        return device_comm(union([_span(e) for e in comm_device]), compute, steps, per_ms, calls, kind_ms, backend)
    flight = intersect(union([_span(e) for e in comm_cpu]), steps)
    ops = [e for e in on_main if not is_annotation(e.name)]
    busy = union([_span(e) for e in ops if not is_communication(e.name)])
    comm_ops = [e for e in ops if is_communication(e.name)]
    gaps = [g for g in subtract(steps, busy) if g[1] - g[0] >= WAIT_GAP_US]
    waits = subtract(intersect(flight, gaps), union([_span(e) for e in comm_ops]))
    exposed_us = length(waits) + sum(e.self_cpu_time_total for e in comm_ops)
    backward = union([_span(e) for e in on_main if e.name == "backward"])
    overlap = intersect(intersect(flight, busy), backward)
    moved: dict[str, float] = defaultdict(float)
    if waits:
        for event, category in annotations:
            if event.thread != main:
                continue
            own = subtract([_span(event)], union([_span(c) for c in event.cpu_children]))
            us = length(intersect(own, waits))
            if us:
                moved[category] += us * per_ms
    return CommStats(
        length(flight) * per_ms, exposed_us * per_ms, length(overlap) * per_ms, "backward", calls, kind_ms, backend, dict(moved)
    )


def device_comm(
    comm: list[Interval], compute: list[Interval], steps: list[Interval], per_ms: float, calls: dict, kind_ms: dict, backend
) -> CommStats:
    """A GPU window's communication: NCCL kernels (`comm`: the union of their spans) in flight within the steps,
    exposed where no compute kernel runs (`compute`: the union of the other kernels), hidden where one does."""
    flight = intersect(comm, steps)
    exposed = subtract(flight, compute)
    return CommStats(
        length(flight) * per_ms,
        length(exposed) * per_ms,
        length(intersect(flight, compute)) * per_ms,
        "compute kernels",
        calls,
        kind_ms,
        backend,
    )


def _by_kind(comm_cpu: list, comm_device: list, main, steps: list[Interval], n_steps: int) -> tuple[dict, dict]:
    """Collectives per step and ms in flight per step, by kind. A collective is counted once: by the operator
    the main thread called (c10d::...), else by the ranges or kernels that ran it."""
    per_step = 1 / max(n_steps, 1)
    called = [e for e in comm_cpu if e.thread == main and e.name.startswith("c10d::")]
    counted = called or comm_device or comm_cpu
    spans: dict[str, list[Interval]] = defaultdict(list)
    for e in comm_cpu + comm_device:
        kind = collective_kind(e.name)
        if kind is not None:
            spans[kind].append(_span(e))
    return calls_by_kind([e.name for e in counted], per_step), kind_ms_in(
        {kind: union(s) for kind, s in spans.items()}, steps, per_step
    )


def calls_by_kind(names: list[str], per_step: float) -> dict[str, float]:
    """Collectives per step by kind, of the collectives counted (their names, in order): per_step added once for
    each, kinds in the order they first come."""
    calls: dict[str, float] = defaultdict(float)
    for name in names:
        kind = collective_kind(name)
        if kind is not None:
            calls[kind] += per_step
    return dict(calls)


def kind_ms_in(flight: dict[str, list[Interval]], steps: list[Interval], per_step: float) -> dict[str, float]:
    """ms in flight within the steps, per step, by kind (`flight`: each kind's union of spans, us)."""
    return {kind: length(intersect(spans, steps)) * per_step / 1000 for kind, spans in flight.items()}
