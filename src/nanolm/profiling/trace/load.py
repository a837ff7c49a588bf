"""A Kineto / Chrome trace as one object: host lanes, device lanes, and the links between them.

The input is what ``torch.profiler`` writes (``export_chrome_trace``, the TensorBoard plugin's
``*.pt.trace.json[.gz]``, nanolm's own traces), plain or gzipped. Pure Python: no torch import, so a
recorded GPU trace is analysed on any machine.

What is read, all in microseconds as the file has them (``ts``, ``dur``, ns fractions kept):

- host events (``ph: "X"`` with ``cat`` ``cpu_op``, ``user_annotation``, ``python_function``,
  ``cuda_runtime``, ``cuda_driver``, ``overhead``) on lanes keyed (pid, tid), nested by containment;
- device activities (``kernel``, ``gpu_memcpy``, ``gpu_memset``) on lanes (device, stream). Kineto's
  ``gpu_user_annotation`` spans (a ``record_function`` range projected onto the GPU, from its first
  kernel to its last, idle gaps included) are kept apart and never count as work;
- links: a device activity to the runtime/driver call that launched it by ``args.correlation`` (the
  ``ac2g`` flow pairs when a trace has no correlation fields), and a launch call to the ``cpu_op`` that
  made it by ``args["External id"]`` (else the innermost ``cpu_op`` around it on its lane);
- steps: the ``ProfilerStep#k`` ranges; their lane is the main lane.
"""

from __future__ import annotations

import gc
import gzip
import json
import math
import sys
import zlib
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ...errors import UserError
from .events import (
    DEVICE_ANNOTATION,
    DEVICE_CATS,
    HOST_CATS,
    LAUNCH_CATS,
    NO_ARGS,
    STEP_PREFIX,
    Args,
    Event,
    Id,
    TraceFile,
)
from .steps import StepRange, StepSpan, in_range, is_step, main_lane, span_of_steps, step_groups, step_number, steps_by_lane
from .stream import decode_by_pieces

__all__ = [
    "StepRange",
    "step_groups",
    "DEVICE_ANNOTATION",
    "DEVICE_CATS",
    "HOST_CATS",
    "LAUNCH_CATS",
    "STEP_PREFIX",
    "Event",
    "Id",
    "Trace",
    "load_trace",
]

# Peak memory of `nanolm profile analyze`, bytes: the interpreter's own, and per byte of unpacked trace, with room
# to spare. bench/trace_scale.py measured 0.24, 0.38 and 0.93 GB for 42, 169 and 509 MB of a real trace (1.8x the
# file at 509 MB), and 0.34 GB for 5 of the 509 MB trace's 60 steps (--steps: their host events, every device one).
# A range of steps keeps every device activity whatever its size, and the host events of its share of the steps.
PEAK_BASE_BYTES = 200_000_000
PEAK_BYTES_PER_TRACE_BYTE = 2.0  # every step
PEAK_BYTES_PER_TRACE_BYTE_OF_NO_STEP = 0.5  # the device activities alone: what any range of steps keeps


def expected_peak_bytes(size: int, share_of_steps: float = 1.0) -> int:
    """The memory analysing an unpacked trace of `size` bytes is expected to need at most, bytes; share_of_steps:
    the share of the trace's step time analysed (--steps; StepSpan.share), 1 for the whole trace."""
    device = PEAK_BYTES_PER_TRACE_BYTE_OF_NO_STEP
    per_byte = device + (PEAK_BYTES_PER_TRACE_BYTE - device) * min(max(share_of_steps, 0.0), 1.0)
    return int(PEAK_BASE_BYTES + per_byte * size)


_decode_typed = msgspec.json.Decoder(TraceFile).decode
_decode_any = msgspec.json.Decoder().decode


@dataclass
class Trace:
    """A loaded trace. Host lanes and device lanes each hold their events sorted by start time."""

    host: dict[tuple, list[Event]]  # (pid, tid) -> host events
    device: list[Event]  # kernels, memcpys, memsets, all streams, by start time
    device_annotations: list[Event]  # gpu_user_annotation spans: shown, never counted as busy
    steps: list[Event]  # ProfilerStep#k ranges on the main lane, by start
    main_lane: tuple | None
    launch_links: int = 0  # device activities linked to the call that launched them (Event.launched_by)
    op_links: int = 0  # device activities and launch calls linked to the cpu_op behind them (Event.made_by)
    device_properties: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)  # top-level fields other than the events (schemaVersion, ...)
    source: str = ""
    _timelines: dict = field(default_factory=dict, repr=False)  # lane -> innermost_timeline
    derived: dict = field(default_factory=dict, repr=False, compare=False)  # what later stages build once (columns)
    # the start of the main lane's step after the last one kept (a trace loaded with steps=), which ends that one
    after_last_step: float | None = None

    @property
    def has_device(self) -> bool:
        return bool(self.device)

    def launch(self, device_event: Event) -> Event | None:
        """The runtime/driver call that launched a device activity (None: the trace does not say)."""
        return device_event.launched_by

    def op(self, event: Event) -> Event | None:
        """The cpu_op that launched a device event (through its launch call) or made a launch call."""
        found = event.made_by
        if found is None and event.cat in DEVICE_CATS:
            launch = event.launched_by
            found = launch.made_by if launch is not None else None
        return found

    def step_groups(self, size: int) -> list[tuple[int, int]]:
        """The trace's ProfilerStep ranges cut into windows of `size` steps: (first step index, count) per
        window, an incomplete last window left out (see step_groups)."""
        return step_groups(len(self.steps), size)

    def group_span(self, first: int, count: int) -> tuple[float, float]:
        """(t0, t1) of steps [first, first + count), us: from the first one's start to the last one's end, or to the
        next step's start where that comes first. Steps that touch overlap by a float rounding (ts + dur), and
        steps closed late overlap for real: either way an event of the next step is never one of this group's."""
        last = first + count - 1
        t1 = self.steps[last].end
        if last + 1 < len(self.steps):
            t1 = min(t1, self.steps[last + 1].ts)
        elif self.after_last_step is not None:
            t1 = min(t1, self.after_last_step)
        return self.steps[first].ts, t1

    def release(self) -> None:
        """Drop the links between the host events (parent and children) so that the events are freed as soon as
        the trace is, each by its reference count, not by the cyclic collector's pass over millions of them (at
        exit, seconds). The trace is not to be used after."""
        for events in self.host.values():
            for e in events:
                e.parent = None
                e.children = ()
        self._timelines.clear()
        self.derived.clear()

    def lane_events(self, lane: tuple) -> list[Event]:
        return self.host.get(lane, [])

    def innermost(self, lane: tuple, t: float) -> Event | None:
        """The innermost host event on `lane` whose range holds time t (None: the lane is idle then).

        At each level, from the lane's top events down through children, the event in effect at t is the latest
        one to start at or before t, if t is still inside it; an event that starts inside an earlier one and
        outlasts it (not its child) takes over from its start. Answered by one bisection of the lane's
        innermost-event timeline (innermost_timeline), built once per lane."""
        if lane not in self._timelines:
            self._timelines[lane] = innermost_timeline(self.host.get(lane, []))
        times, events = self._timelines[lane]
        i = bisect_right(times, t) - 1
        return events[i] if i >= 0 else None


def innermost_timeline(lane: list[Event]) -> tuple[list[float], list[Event | None]]:
    """(times, events): from times[i] until times[i + 1] the innermost event of the lane is events[i] (None: idle);
    times are nondecreasing and, of equal times, the last entry holds. `lane` is nested (_nest)."""
    times: list[float] = []
    events: list[Event | None] = []
    # Each sibling is in effect from its start until it ends, the next sibling starts, or its owner's time is up;
    # then its owner is again. A stack, not recursion: a trace's nesting can be deeper than Python's call stack.
    todo: list[tuple] = [([e for e in lane if e.parent is None], 0, None, math.inf)]
    while todo:
        item = todo.pop()
        if len(item) == 2:  # an event's time is up: its owner's again
            times.append(item[0])
            events.append(item[1])
            continue
        siblings, i, owner, limit = item
        if i >= len(siblings) or siblings[i].ts >= limit:
            continue
        e = siblings[i]
        until = min(e.end, siblings[i + 1].ts if i + 1 < len(siblings) else math.inf, limit)
        times.append(e.ts)
        events.append(e)
        todo.append((siblings, i + 1, owner, limit))
        todo.append((until, owner))
        if e.children:
            todo.append((e.children, 0, e, until))
    return times, events


def read_trace_bytes(path: str | Path) -> bytes:
    """The trace file's JSON text, gunzipped where it is gzipped; a UserError naming the problem otherwise."""
    p = Path(path)
    check_trace_file(p)
    return _file_bytes(p)


def check_trace_file(p: Path, share_of_steps: float | None = None) -> None:
    """Nothing, for a file that can be a trace and fits in the free memory (analysing a --steps range of
    `share_of_steps` of its step time, expected_peak_bytes; None: the whole trace); a UserError naming the problem
    otherwise (a folder, no such file, a pipe, an empty file, too big), before any of it is read."""
    expected = "give the path of a trace file torch.profiler wrote (export_chrome_trace, or nanolm profile --trace)"
    if p.is_dir():
        found = sorted(q.name for q in p.iterdir() if q.name.endswith((".json", ".json.gz")))
        example = f" such as {p / found[0]}" if found else ""
        raise UserError(
            f"trace {p} is a folder ({len(found)} trace-like files in it); load_trace reads one trace file (a folder "
            f"of rank traces is nanolm profile analyze DIR's, profiling.folder.analyze_folder): give one{example}"
        )
    if not p.exists():
        raise UserError(f"trace {p} does not exist; {expected}")
    if not p.is_file():
        raise UserError(f"trace {p} is not a regular file (a pipe or a device); {expected}")
    if p.stat().st_size == 0:
        raise UserError(f"trace {p} is empty (0 bytes): the profiler did not finish writing it; {expected}")
    _check_memory(p, share_of_steps)


def _file_bytes(p: Path) -> bytes:
    """The whole file's bytes, gunzipped where it is gzipped; a UserError for an unreadable or damaged file."""
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read trace {p}: {e.strerror}; make it readable") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise UserError(f"trace {p} is a truncated or damaged gzip file ({e}); copy it again in full") from None
    return raw


def unpacked_size(p: Path) -> int:
    """The trace's size once gunzipped, bytes, read without unpacking: gzip's trailer keeps it (mod 4 GiB); a plain
    file's own size. A trailer smaller than the file (a damaged file, or more than 4 GiB unpacked) gives the packed
    size, the least it can be."""
    size = p.stat().st_size
    with open(p, "rb") as f:
        if f.read(2) != b"\x1f\x8b" or size < 18:
            return size
        f.seek(-4, 2)
        isize = int.from_bytes(f.read(4), "little")
    return isize if isize >= size else size


def available_memory() -> int | None:
    """Memory the machine can give a new process without swapping, bytes (Linux's MemAvailable); None where it
    cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_memory(p: Path, share_of_steps: float | None = None) -> None:
    """Refuse, before reading it, a trace whose analysis would need more memory than the machine has free: one line
    instead of the kernel's OOM killer ending the user's session. share_of_steps: a --steps range's (None: all)."""
    free = available_memory()
    size = unpacked_size(p)
    ranged = share_of_steps is not None
    need = expected_peak_bytes(size, share_of_steps if ranged else 1.0)
    if free is not None and need > free:
        way_out = (
            "analyse fewer of its steps (a smaller --steps range; every device activity is kept whatever the range) "
            "or analyse it on a machine with more memory"
            if ranged
            else "analyse a few of its steps with --steps A:B (ProfilerStep#A up to #B: only their host events are "
            "kept), or analyse it on a machine with more memory"
        )
        raise UserError(
            f"trace {p} is {size / 1e9:.2f} GB of JSON; analysing {'those steps of ' if ranged else ''}"
            f"it needs about {need / 1e9:.1f} GB of memory and this machine has {free / 1e9:.1f} GB free; {way_out}"
        )


def _decode_plain(p: Path, raw: bytes) -> Any:
    """The file's JSON as plain values. Python's own reader is the last resort, for what only it accepts (NaN and
    Infinity as numbers); where neither reads it, the error names the byte it stops at."""
    try:
        return _decode_any(raw)
    except msgspec.DecodeError:
        pass
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f"at byte {e.pos}" if isinstance(e, json.JSONDecodeError) else f"at byte {e.start}"
        raise UserError(
            f"trace {p} is not JSON ({e.__class__.__name__} {where}); give a Chrome/Kineto trace file (.json or "
            ".json.gz) written by torch.profiler"
        ) from None


def _no_events(p: Path) -> UserError:
    return UserError(
        f"trace {p} has no traceEvents list: not a Chrome/Kineto trace; give a file written by "
        "torch.profiler's export_chrome_trace"
    )


def read_trace_json(path: str | Path) -> dict:
    """The trace file's JSON object, plain or gzipped, as plain Python values; a UserError naming the problem
    otherwise. (load_trace does not need it: it decodes a file's bytes straight into events.)"""
    p = Path(path)
    return _trace_object(p, _decode_plain(p, read_trace_bytes(p)))


def _trace_object(p: Path, data: Any) -> dict:
    """Decoded JSON as a trace object with a traceEvents list, else the UserError that says it is not one."""
    if isinstance(data, list):  # the Chrome format also allows a bare list of events
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise _no_events(p)
    return data


def _plain_parts(data: dict) -> tuple[list, dict, list[dict]]:
    """(events, top-level fields, deviceProperties) of a trace object of plain values, read leniently."""
    props = data.get("deviceProperties")
    meta = {k: v for k, v in data.items() if k not in ("traceEvents", "deviceProperties")}
    return _lenient_events(data["traceEvents"]), meta, list(props) if isinstance(props, list) else []


def _read_file(p: Path, steps: StepRange | None = None, where: str = "") -> tuple[_Sorted, dict, list[dict]]:
    """(the file's events sorted, its top-level fields, its deviceProperties). The bytes are decoded straight into
    Events, reading only their fields the analysis uses, a piece at a time (stream.decode_by_pieces); a file that
    cannot be read by pieces is decoded whole, and one whose fields are not what Kineto writes (a string time, a list
    for a tid, an object for an event) is decoded as plain values and read leniently instead. With `steps`, a first
    pass finds the ProfilerSteps (decoding only the pieces that name one), and the host events outside the chosen
    steps' time are not kept (load_trace)."""
    check_trace_file(p, 0.0 if steps is not None else None)  # a range: the least it can need, until its steps are known
    span = None
    if steps is not None:
        scan = _Sorted()
        if decode_by_pieces(p, Event, TraceFile, scan.take, only=STEP_PREFIX.encode()) is not None:
            span = span_of_steps(scan.step_events(), steps, where)
            _check_memory(p, span.share)
        del scan
    sorted_events = _Sorted(span)
    tops = decode_by_pieces(p, Event, TraceFile, sorted_events.take)
    if tops is not None:
        head, tail = tops
        meta = {k: _first(getattr(head, k), getattr(tail, k)) for k in ("schemaVersion", "distributedInfo")}
        found, props = sorted_events, list(_first(head.deviceProperties, tail.deviceProperties) or [])
    else:
        del sorted_events  # what it took before the pieces failed
        found, meta, props = _read_whole(p)
    if steps is not None and found.span is None:  # read the whole way, unfiltered: the steps' span filters it now
        found.keep_host_within(span if span is not None else span_of_steps(found.step_events(), steps, where))
    return found, meta, props


def _read_whole(p: Path) -> tuple[_Sorted, dict, list[dict]]:
    """_read_file's result for a file that cannot be read by pieces (_read_file)."""
    sorted_events = _Sorted()
    raw = _file_bytes(p)
    try:
        top = _decode_typed(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        top = None  # not Kineto's types everywhere (or JSON only Python reads): read it the lenient way
    if top is not None:
        del raw
        sorted_events.take(top.traceEvents)
        meta = {"schemaVersion": top.schemaVersion, "distributedInfo": top.distributedInfo}
        return sorted_events, meta, list(top.deviceProperties or [])
    data = _decode_plain(p, raw)
    del raw
    events, meta, props = _plain_parts(_trace_object(p, data))
    sorted_events.take(events)
    return sorted_events, meta, props


def _first(a: Any, b: Any) -> Any:
    return a if a is not None else b


class _Sorted:
    """A trace's events as they are read, sorted into what the Trace keeps: host events by lane, device activities,
    device annotations, and the ac2g flows' two ends; the rest (metadata, counters, instants) dropped."""

    def __init__(self, span: StepSpan | None = None) -> None:
        self.span = span  # only the host events that overlap span.start..span.end (us) are kept; None: all
        self.host: dict[tuple, list[Event]] = defaultdict(list)
        self.device: list[Event] = []
        self.annotations: list[Event] = []
        # ac2g flows' host ends and device ends, as (ids, lanes, times): most traces never need them (their events
        # carry correlation ids), so no object is made per flow until _link does
        self.flow_starts: tuple[list, list, list] = ([], [], [])
        self.flow_ends: tuple[list, list, list] = ([], [], [])
        self.bad = 0  # events skipped: not an object, or no finite time and duration
        self.lanes: dict[tuple, tuple] = {}  # (pid, tid) -> the one tuple of it kept

    def take(self, events: list) -> None:
        intern = sys.intern  # a name or category repeated a hundred thousand times is kept once
        host, device, annotations, lanes, span = self.host, self.device, self.annotations, self.lanes, self.span
        for event in events:
            if event is None:
                self.bad += 1
                continue
            ph, cat = event.ph, event.cat
            if ph in ("s", "f") and cat == "ac2g":
                ids, flow_lanes, times = self.flow_starts if ph == "s" else self.flow_ends
                ids.append(event.id)
                flow_lanes.append(lanes.setdefault((event.pid, event.tid), (event.pid, event.tid)))
                times.append(event.ts)
                continue
            if ph != "X":
                continue
            ts, dur = event.ts, event.dur
            if ts is None or dur is None or not (dur >= 0 and math.isfinite(ts) and math.isfinite(dur)):
                self.bad += 1
                continue
            event.name = intern(event.name)
            event.cat = cat = intern(cat)
            # pids, tids and empty args are decoded as objects of their own per event: one of each is kept
            lane = lanes.get((event.pid, event.tid))
            if lane is None:
                lane = lanes[lane] = (event.pid, event.tid)
            event.pid, event.tid = lane
            if event.args == NO_ARGS:
                event.args = NO_ARGS
            if cat in DEVICE_CATS:
                device.append(event)
            elif cat == DEVICE_ANNOTATION:
                annotations.append(event)
            elif (cat in HOST_CATS or cat == "") and (span is None or (ts <= span[1] and ts + dur >= span[0])):
                host[lane].append(event)

    def step_events(self) -> list[Event]:
        """The ProfilerStep ranges of every host lane, as read."""
        return [e for events in self.host.values() for e in events if is_step(e)]

    def keep_host_within(self, span: StepSpan) -> None:
        """Leave out the host events that do not overlap span (as take does with a span given)."""
        self.span = span
        t0, t1 = span.start, span.end
        for lane, events in self.host.items():
            self.host[lane] = [e for e in events if e.ts <= t1 and e.end >= t0]


def _lenient_events(raws: list) -> list:
    """Events from plain decoded values, each field checked: an event that is not an object stays a non-Event
    (counted as skipped), a field of the wrong type is read as missing."""
    out: list = []
    for raw in raws:
        if not isinstance(raw, dict):
            out.append(None)
            continue
        cat = raw.get("cat", "")
        args = raw.get("args")
        args = args if isinstance(args, dict) else {}
        ph = raw.get("ph")
        out.append(
            Event(
                str(raw.get("name", "")),
                cat if isinstance(cat, str) else str(cat),  # a key of set lookups: never a list from a damaged file
                _num(raw.get("ts")),
                _num(raw.get("dur")),
                _lane_id(raw.get("pid")),
                _lane_id(raw.get("tid")),
                ph if isinstance(ph, str) else None,
                _lane_id(raw.get("id")),
                Args(_id(args.get("correlation")), _id(args.get("External id"))),
            )
        )
    return out


def load_trace(source: str | Path | dict, steps: StepRange | None = None) -> Trace:
    """A Trace from a file path (plain or .gz) or an already parsed trace object.

    steps: only the ProfilerSteps numbered in this range (``ProfilerStep#k``, first <= k < stop) on the main lane;
    the host events that do not overlap their time are left out as the file is read (so a few steps of a long
    trace take the memory of those steps' host events), the device activities all kept. Raises UserError for input
    that is not a profiler trace, has no ``ProfilerStep`` ranges, or none in `steps`."""
    # Millions of small objects are made and none is garbage until the trace is: the collector's passes over them
    # would cost more than the decoding.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load(source, steps)
    finally:
        if collecting:
            gc.enable()


@contextmanager
def out_of_collection() -> Iterator[None]:
    """While the block runs, every object that exists now (a loaded trace's million events) is left out of the
    cyclic garbage collector's passes (gc.freeze), then given back to it. The events are tracked (parents and
    children refer to each other), and each full pass over them costs about 0.1 s per million, started over and
    over by whatever the analysis allocates."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _load(source: str | Path | dict, steps: StepRange | None) -> Trace:
    if isinstance(source, dict):
        where = "the trace"
        events, meta, props = _plain_parts(source)
        found = _Sorted()
        found.take(events)
        del events
        if steps is not None:
            found.keep_host_within(span_of_steps(found.step_events(), steps, where))
    else:
        where = f"trace {source}"
        found, meta, props = _read_file(Path(source), steps, where)
    host, device, annotations, bad = found.host, found.device, found.annotations, found.bad
    for lane_events in host.values():
        _nest(lane_events)
    device.sort(key=lambda e: (e.ts, e.end))
    annotations.sort(key=lambda e: e.ts)
    steps_kept, main, after_last = _steps(host, steps, found.span.lane if found.span is not None else None)
    if not steps_kept:
        raise UserError(
            f"{where} has no ProfilerStep ranges: it was not recorded with a profiler schedule stepped "
            "once per training step (prof.step()); record it with nanolm profile or torch.profiler's "
            "schedule"
        )
    trace = Trace(
        dict(host),
        device,
        annotations,
        steps_kept,
        main,
        0,
        0,
        props,
        meta,
        "" if isinstance(source, dict) else str(source),
    )
    _link(trace, found.flow_starts, found.flow_ends)
    if trace.device and not trace.launch_links and not trace.op_links:
        raise UserError(
            f"{where} has {len(trace.device)} device activities but nothing links them to the host (no "
            "correlation ids, ac2g flows or External ids: a profiler version this reader does not know); "
            "record it again with torch.profiler from torch 1.10 or later"
        )
    trace.after_last_step = after_last if steps is not None else None
    if bad:
        trace.meta["skipped_events"] = bad
    return trace


def _lane_id(value: Any) -> Any:
    """A pid or tid as a key: Kineto writes numbers or strings; anything else (a list, an object) as its text."""
    return value if value is None or isinstance(value, (int, float, str)) else str(value)


def _id(value: Any) -> Any:
    """A correlation or External id as Kineto writes it (a number or a string); None for anything else."""
    return value if isinstance(value, (int, float, str)) else None


def _num(value: Any) -> float | None:
    """A finite time in us, or None (a missing, non-numeric, NaN or infinite field)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _nest(events: list[Event]) -> None:
    """Sort a lane's events by start (outer first on ties) and set each one's parent: the innermost event that
    contains it whole, as torch builds its FunctionEvent tree. A range that starts inside one and ends after
    it (a record_function closed in the next step) is not its child, and has no children that outlast it."""
    n = len(events)
    ts = np.fromiter((e.ts for e in events), np.float64, n)
    dur = np.fromiter((e.dur for e in events), np.float64, n)
    order = np.lexsort((-dur, ts))  # by start, the longer first; stable, as list.sort is
    events[:] = [events[i] for i in order.tolist()]
    starts, ends = ts[order].tolist(), (ts + dur)[order].tolist()  # floats as e.ts and e.end are: the same bits
    stack: list[Event] = []
    stack_ends: list[float] = []
    for e, t, end in zip(events, starts, ends, strict=True):
        while stack_ends and (t >= stack_ends[-1] or end > stack_ends[-1]):
            stack.pop()
            stack_ends.pop()
        if stack:
            top = stack[-1]
            e.parent = top
            if top.children:
                top.children.append(e)
            else:  # most events have no children: the empty tuple is shared until one comes
                top.children = [e]
        stack.append(e)
        stack_ends.append(end)


def _steps(
    host: dict[tuple, list[Event]], steps: StepRange | None = None, lane: tuple | None = None
) -> tuple[list[Event], tuple | None, float | None]:
    """(the ProfilerStep ranges of the main lane by start, only those numbered in `steps` where given; the main lane:
    `lane` where the whole trace's steps chose it before the host events were filtered (span_of_steps), else
    main_lane; the start of the main lane's next step after the last one kept, where it has one, us)."""
    by_lane = steps_by_lane(e for events in host.values() for e in events)
    lane = lane if lane is not None else main_lane(by_lane)
    found = by_lane.get(lane, [])
    chosen = [i for i, e in enumerate(found) if steps is None or in_range(step_number(e), steps)]
    if not chosen:
        return [], None, None
    after = chosen[-1] + 1
    return [found[i] for i in chosen], lane, found[after].ts if after < len(found) else None


def _link(trace: Trace, flow_starts: tuple[list, list, list], flow_ends: tuple[list, list, list]) -> None:
    """Device events to launch calls (correlation, else ac2g flows) and launches to their cpu_op. A flow's id
    given twice keeps its last ends (a dict by id, as the file is read)."""
    ops_by_ext, launches = _ops_and_launches(trace)
    if not launches and flow_starts[0]:  # correlation fields missing: the flows say which call launched what
        calls_by_lane = {lane: [e for e in events if e.cat in LAUNCH_CATS] for lane, events in trace.host.items()}
        for fid, (lane, ts) in _by_flow_id(flow_starts).items():
            calls = calls_by_lane.get(lane, [])
            i = bisect_right(calls, ts, key=lambda e: e.ts) - 1  # the latest call starting at or before the flow
            if i >= 0 and calls[i].ts <= ts <= calls[i].end:
                launches[fid] = calls[i]
    device_by_flow: dict[tuple, Any] | None = None  # (device lane, ts) -> flow id, made when a kernel needs it
    for k in trace.device:
        corr = k.correlation
        if corr is None:
            if device_by_flow is None:
                device_by_flow = {(lane, ts): fid for fid, (lane, ts) in _by_flow_id(flow_ends).items()}
            corr = device_by_flow.get(((k.pid, k.tid), k.ts))
        call = launches.get(corr) if corr is not None else None
        if call is not None:
            k.launched_by = call
            trace.launch_links += 1
        op = _op_for(call, k, ops_by_ext)
        if op is not None:
            k.made_by = op
            trace.op_links += 1
    for call in launches.values():
        op = _op_for(call, None, ops_by_ext)
        if op is not None:
            call.made_by = op
            trace.op_links += 1


def _ops_and_launches(trace: Trace) -> tuple[dict[Any, Event], dict[Any, Event]]:
    """({External id: the first cpu_op with it}, {correlation id: the last launch call with it}) of the host."""
    ops_by_ext: dict[Any, Event] = {}
    launches: dict[Any, Event] = {}
    for events in trace.host.values():
        for e in events:
            cat = e.cat
            if cat == "cpu_op":
                if e.args.external_id is not None:
                    ops_by_ext.setdefault(e.args.external_id, e)
            elif cat in LAUNCH_CATS and e.args.correlation is not None:
                launches[e.args.correlation] = e
    return ops_by_ext, launches


def _by_flow_id(flows: tuple[list, list, list]) -> dict[Any, tuple]:
    """flow id -> (lane, ts) of its end, the last given for an id."""
    ids, lanes, times = flows
    return dict(zip(ids, zip(lanes, times, strict=True), strict=True))


def _op_for(call: Event | None, kernel: Event | None, ops_by_ext: dict) -> Event | None:
    for ext in (call.external_id if call is not None else None, kernel.external_id if kernel is not None else None):
        if ext is not None and ext in ops_by_ext:
            return ops_by_ext[ext]
    e = call.parent if call is not None else None
    while e is not None:
        if e.cat == "cpu_op":
            return e
        e = e.parent
    return None
