"""From host events to numbers: per-step phase times, operator categories by self time (no microsecond counted
twice), whether the repeated windows agree, and the summary of the median window. ``host_events`` is the one
adapter from a trace to the window analysis: a view of the trace's events with the FunctionEvent fields it reads,
so a recorded trace and a live profile (which exports each window's trace and reads it back) give the same
numbers."""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..report import CategoryRow, CollectiveRow, Communication, OpRow, PhaseRow, Stat
from ..trace.classify import BETWEEN, CATEGORIES, COMMUNICATION, DATA, HOST, OPTIMIZER, SYNC, categorize, is_annotation
from ..trace.intervals import length, union
from ..trace.load import DEVICE_CATS, LAUNCH_CATS, Event, Trace
from .comm import CommStats, comm_window

PHASES = ["data", "forward", "backward", "optimizer", "sync", "between"]


# "between": the host's time from one optimizer step to the next forward (a profiled script's own data
# loading without a DataLoader, logging, zero_grad). A data or sync range inside it is its own phase and
# is taken out of it, so phases never overlap.
CONTAINER = "between"


PHASE_LABELS = {"between": "between steps"}  # how tables name a phase whose key is terse


# The stability rule: the windows of one profile disagree when, for the step time or for a phase that
# takes at least SHARE_FLOOR of the median step in some window, the spread over windows (max - min;
# from 5 windows on, leaving out the highest and the lowest) is more than SPREAD_LIMIT times the median.
# The profiler then measures more windows (Window.max_repeat) and the report carries a stability
# warning if they still disagree.
SPREAD_LIMIT = 0.5


SHARE_FLOOR = 0.10


# A negative unaccounted time (phase ranges overrunning the step marker) is shown as 0, with a note
# when it is more than this share of the step.
MATERIAL_SKEW = 0.01


def phase_of(name: str) -> str | None:
    """The phase a range marks: nanolm's record_function names, the DataLoader's and the optimizer's own."""
    if name in PHASES:
        return name
    if name.startswith("enumerate(DataLoader)"):
        return "data"
    if name.startswith("Optimizer."):
        return "optimizer"
    return None


@dataclass
class WindowStats:
    """One active window of the profiler schedule."""

    steps: int
    step_ms: float  # mean wall time of a step
    phase_ms: dict[str, float]  # mean per step, outermost phase ranges only
    category_ms: dict[str, float]  # self time per step
    category_calls: dict[str, float]  # operator calls per step
    ops: dict[tuple[str, str], tuple[float, float]]  # (name, category) -> (calls per step, self ms per step)
    device_busy_ms: float | None = None  # CUDA: union of kernel intervals per step
    device_category_ms: dict[str, float] | None = None
    comm: CommStats | None = None  # collectives (torch.distributed) in this window; None: none recorded


def _context_walk(events: list) -> list[tuple[Any, str | None, bool, bool]]:
    """(event, enclosing phase, does this event's range count as a phase of its own, is it inside a sync
    range) in tree order. A phase range counts when no phase encloses it, or only the CONTAINER does."""
    out = []
    stack = [(e, None, False) for e in events if e.cpu_parent is None]
    while stack:
        event, context, in_sync = stack.pop()
        phase = phase_of(event.name)
        counted = phase is not None and context in (None, CONTAINER) and phase != context
        out.append((event, context, counted, in_sync))
        inner = phase if counted else context
        stack.extend((child, inner, in_sync or event.name == "sync") for child in event.cpu_children)
    return out


def annotation_category(name: str, context: str | None, in_sync: bool) -> str:
    """Where the self time of a marking range goes: the host's time between the ops it holds."""
    if in_sync or name == "sync":
        return SYNC
    own = phase_of(name)
    where = own if own and context == CONTAINER else context or own
    return {"data": DATA, "optimizer": OPTIMIZER, CONTAINER: BETWEEN}.get(where, HOST)


def analyze_window(events: list, drop_last_step: bool = False) -> WindowStats:
    """Numbers of one active window from the profiler's FunctionEvents (times in microseconds).

    drop_last_step: the window was cut short by the profiler's stop, so its last step is unfinished;
    leave that step and everything after its start out."""
    if drop_last_step:
        starts = sorted(e.time_range.start for e in events if e.name.startswith("ProfilerStep"))
        if starts:
            events = [e for e in events if e.time_range.start < starts[-1]]
    cpu_events = [e for e in events if getattr(e.device_type, "name", "CPU") == "CPU"]
    steps = [e for e in cpu_events if e.name.startswith("ProfilerStep")]
    n = max(len(steps), 1)
    step_ms = sum(e.time_range.elapsed_us() for e in steps) / 1000.0 / n
    phase_ms: dict[str, float] = defaultdict(float)
    category_ms: dict[str, float] = defaultdict(float)
    category_calls: dict[str, float] = defaultdict(float)
    ops: dict[tuple[str, str], list[float]] = {}
    annotations: list[tuple[Any, str]] = []  # marking ranges and where their self time is counted
    for event, context, counted, in_sync in _context_walk(cpu_events):
        if counted:
            ms = event.time_range.elapsed_us() / 1000.0 / n
            phase_ms[phase_of(event.name)] += ms
            if context == CONTAINER:  # a phase inside the time between steps is taken out of it
                phase_ms[CONTAINER] -= ms
        self_ms = event.self_cpu_time_total / 1000.0 / n
        if event.name == "sync" and not in_sync:  # one host-device sync call (see categories.py)
            category_calls[SYNC] += 1 / n
        if is_annotation(event.name):
            annotations.append((event, annotation_category(event.name, context, in_sync)))
            category_ms[annotations[-1][1]] += self_ms
            continue
        category = categorize(event.name, context, in_sync)
        category_ms[category] += self_ms
        if category != SYNC:  # a sync's calls are the sync calls, counted above
            category_calls[category] += 1 / n
        row = ops.setdefault((event.name, category), [0.0, 0.0])
        row[0] += 1 / n
        row[1] += self_ms
    device = [e for e in events if getattr(e.device_type, "name", "CPU") == "CUDA"]
    busy = device_cat = None
    if device:
        busy = length(union([(e.time_range.start, e.time_range.end) for e in device])) / 1000.0 / n
        device_cat = defaultdict(float)
        for e in device:
            device_cat[categorize(e.name)] += e.time_range.elapsed_us() / 1000.0 / n
        device_cat = dict(device_cat)
    comm = comm_window(cpu_events, device, annotations, n)
    if comm is not None:  # the main thread's waits for collectives: communication, not the host's overhead
        for category, ms in comm.wait_by_category.items():
            category_ms[category] -= ms
            category_ms[COMMUNICATION] += ms
    return WindowStats(
        len(steps),
        step_ms,
        dict(phase_ms),
        dict(category_ms),
        dict(category_calls),
        {k: (v[0], v[1]) for k, v in ops.items()},
        busy,
        device_cat,
        comm,
    )


def disagreements(windows: list[WindowStats]) -> list[str]:
    """The measures on which the windows of one profile disagree, by the stability rule (SPREAD_LIMIT,
    SHARE_FLOOR above), each as "name min–max ms (median m)"; empty with fewer than two windows."""
    if len(windows) < 2:
        return []
    step_median = statistics.median(w.step_ms for w in windows)
    measures = [("step", [w.step_ms for w in windows])]
    measures += [(phase, [w.phase_ms.get(phase, 0.0) for w in windows]) for phase in PHASES]
    out = []
    for name, values in measures:
        kept = sorted(values)[1:-1] if len(values) >= 5 else values  # one odd window is not disagreement
        median, spread = statistics.median(values), max(kept) - min(kept)
        if max(values) >= SHARE_FLOOR * step_median and spread > SPREAD_LIMIT * median:
            out.append(f"{name} {min(kept):.2f}–{max(kept):.2f} ms (median {median:.2f})")
    return out


def step_disagreements(window_step_ms: list[float]) -> list[str]:
    """The stability rule on the windows' step times alone (what is known while the run goes on, before any
    window is analysed): "step min–max ms (median m)" when they disagree, else empty."""
    if len(window_step_ms) < 2:
        return []
    kept = sorted(window_step_ms)[1:-1] if len(window_step_ms) >= 5 else window_step_ms
    median = statistics.median(window_step_ms)
    if max(kept) - min(kept) > SPREAD_LIMIT * median:
        return [f"step {min(kept):.2f}–{max(kept):.2f} ms (median {median:.2f})"]
    return []


def _unaccounted(windows: list[WindowStats], middle: WindowStats) -> tuple[list[float], float, str | None]:
    """Each window's step time not inside a phase, clamped at 0, the median window's, and a note when a
    window's phases overran its step by more than MATERIAL_SKEW of it (clock skew between the step
    marker and the phase ranges, or a phase range crossing a step boundary)."""
    raw = {id(w): w.step_ms - sum(w.phase_ms.values()) for w in windows}
    worst = min(windows, key=lambda w: raw[id(w)] / max(w.step_ms, 1e-9))
    note = None
    if raw[id(worst)] < -MATERIAL_SKEW * worst.step_ms:
        note = (
            f"the phase ranges overran the step by up to {-raw[id(worst)]:.2f} ms "
            f"({-raw[id(worst)] / worst.step_ms:.1%} of a {worst.step_ms:.2f} ms step: clock skew between the step "
            "marker and the phase ranges); unaccounted time is shown as 0 there"
        )
    return [max(0.0, raw[id(w)]) for w in windows], max(0.0, raw[id(middle)]), note


def median_window(windows: list[WindowStats]) -> WindowStats:
    """The window whose step time is the median (with an even count, the upper of the two middle ones)."""
    return sorted(windows, key=lambda w: w.step_ms)[len(windows) // 2]


def communication(window: WindowStats) -> Communication | None:
    """The window's collectives as the report states them: ms per step, shares of the step, hidden share."""
    c = window.comm
    if c is None:
        return None
    step = window.step_ms or 1.0
    rows = [
        CollectiveRow(kind, c.calls.get(kind, 0.0), c.kind_ms.get(kind, 0.0))
        for kind in sorted(set(c.calls) | set(c.kind_ms), key=lambda k: -c.kind_ms.get(k, 0.0))
    ]
    return Communication(
        c.in_flight_ms,
        c.in_flight_ms / step,
        c.exposed_ms,
        c.exposed_ms / step,
        c.overlap_ms,
        c.overlap_ms / c.in_flight_ms if c.in_flight_ms else 0.0,
        c.overlap_with,
        c.backend,
        rows,
    )


@dataclass
class WindowSummary:
    """The profiled windows summed up (summarize_windows): the median window's tables, the spread over windows."""

    step_ms: Stat  # the median window's step, min-max over windows, ms
    phases: list[PhaseRow]  # the median window's phases (they tile its step), min-max over windows
    categories: list[CategoryRow]
    top_ops: list[OpRow]
    communication: Communication | None  # None: no collective in the windows
    window_step_ms: list[float]  # each window's step, ms
    window_exposed_ms: list[float]  # each window's exposed communication, ms per step
    ops_per_step: float
    device_busy: float | None  # the device's busy share of the median window's step; None: no device lane
    steps_measured: int
    notes: list[str] = field(default_factory=list)
    unstable: list[str] = field(default_factory=list)  # the stability rule's findings (disagreements)


def summarize_windows(windows: list[WindowStats], top: int = 12) -> WindowSummary:
    """Phase rows, category rows, top operators and step stats over repeated windows (median window
    for the tables, min-max over windows for the phases and the step). A phase's value is the median
    window's, not the median of each phase on its own: medians do not add, and the phases of one
    window tile its step exactly. Also the notes the numbers need, and the stability rule's findings."""
    steps = [w.step_ms for w in windows]
    middle = median_window(windows)
    # The median window's step, so that the phases of that window tile it and their shares add up to 100%.
    step = Stat(middle.step_ms, min(steps), max(steps))

    def row(phase: str, values: list[float], median: float) -> PhaseRow:
        return PhaseRow(phase, Stat(median, min(values), max(values)), median / step.median)

    phases = []
    for phase in PHASES:
        values = [w.phase_ms.get(phase, 0.0) for w in windows]
        if any(values):
            phases.append(row(phase, values, middle.phase_ms.get(phase, 0.0)))
    rest, rest_median, skew_note = _unaccounted(windows, middle)
    phases.append(row("unaccounted", rest, rest_median))
    total_self = sum(middle.category_ms.values()) or 1.0
    categories = sorted(
        (
            CategoryRow(
                c, middle.category_calls.get(c, 0.0), middle.category_ms.get(c, 0.0), middle.category_ms.get(c, 0.0) / total_self
            )
            for c in CATEGORIES
            if middle.category_ms.get(c, 0.0) > 0
        ),
        key=lambda r: -r.self_ms,
    )
    ops = sorted(
        (OpRow(name, cat, calls, ms, ms / total_self) for (name, cat), (calls, ms) in middle.ops.items()),
        key=lambda r: -r.self_ms,
    )[:top]
    busy = None
    if middle.device_busy_ms is not None:
        busy = min(1.0, middle.device_busy_ms / middle.step_ms)
    return WindowSummary(
        step_ms=step,
        phases=phases,
        categories=categories,
        top_ops=ops,
        communication=communication(middle),
        window_step_ms=steps,
        window_exposed_ms=[w.comm.exposed_ms if w.comm is not None else 0.0 for w in windows],
        ops_per_step=sum(middle.category_calls.values()),
        device_busy=busy,
        steps_measured=sum(w.steps for w in windows),
        notes=[skew_note] if skew_note else [],
        unstable=disagreements(windows),
    )


VIEW_CATS = {"cpu_op", "user_annotation", *LAUNCH_CATS}  # what torch's events() holds on the host


class _Range:
    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end

    def elapsed_us(self) -> float:
        return self.end - self.start


class _Type:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_CPU, _CUDA = _Type("CPU"), _Type("CUDA")


class EventView:
    """A trace event with the fields of torch's FunctionEvent that nanolm's window analysis reads."""

    __slots__ = ("name", "time_range", "cpu_parent", "cpu_children", "self_cpu_time_total", "device_type", "thread", "is_async")

    def __init__(self, e: Event, device: bool = False) -> None:
        self.name = e.name
        self.time_range = _Range(e.ts, e.end)
        self.cpu_parent: EventView | None = None
        self.cpu_children: list[EventView] = []
        self.self_cpu_time_total = 0.0 if device else e.dur
        self.device_type = _CUDA if device else _CPU
        self.thread = e.tid
        self.is_async = False


def _starting_in(events: list[Event], t0: float | None, t1: float | None) -> list[Event]:
    """The events of a list sorted by start that start in [t0, t1) (all of them when t0 is None)."""
    if t0 is None:
        return events
    return events[bisect_left(events, t0, key=_start) : bisect_left(events, t1, key=_start)]


def _start(e: Event) -> float:
    return e.ts


def host_events(trace: Trace, t0: float | None = None, t1: float | None = None) -> list[EventView]:
    """The trace's host ops, ranges and runtime calls (those starting in [t0, t1)) and device activities, as
    FunctionEvent-shaped views with parents, children and self times. Kineto's gpu_user_annotation spans are
    left out: they are not work."""
    # Each lane and the device list are sorted by start: the window is a slice of each, found by bisection, so a
    # trace of many windows is read once in all, not once per window.
    lanes = [_starting_in(events, t0, t1) for events in trace.host.values()]
    views: dict[int, EventView] = {id(e): EventView(e) for events in lanes for e in events if e.cat in VIEW_CATS}
    out: list[EventView] = []
    for events in lanes:
        for e in events:
            view = views.get(id(e))
            if view is None:
                continue
            parent = e.parent
            while parent is not None and id(parent) not in views:
                parent = parent.parent
            if parent is not None:
                view.cpu_parent = views[id(parent)]
                views[id(parent)].cpu_children.append(view)
                views[id(parent)].self_cpu_time_total -= e.dur
            out.append(view)
    out += [EventView(k, device=True) for k in _starting_in(trace.device, t0, t1) if k.cat in DEVICE_CATS]
    return out
