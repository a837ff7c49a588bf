"""The GPU side of a step, from the device timeline: is the GPU computing or waiting, and on what?

For a group of N consecutive ``ProfilerStep`` ranges on the main lane, the analysis interval is
[T0, T1] = start of the first to end of the last. Device activities (kernels, copies, memsets, every
stream) are clipped to it; Kineto's ``gpu_user_annotation`` spans never count (they run from a range's
first kernel to its last, idle gaps included: counting them made a 25%-busy GPU look 98% busy).

- **busy** = |union of device intervals ∩ [T0, T1]| / N, ms per step; overlap between streams counted once.
- **classes**: each activity's class (nanolm.profiling.trace.classify), time per class as the union of its
  intervals; what two classes share is its own "overlapping classes" row.
- **idle gaps**: the complement of busy, each cut by what the host's main lane was doing meanwhile.
  A gap [a, b] ends with activity k launched by call r. It is *host-starved* when r ended after a (the work
  that ends the gap was not yet submitted when the GPU went idle; stricter than HTA's "r started after a",
  since a kernel cannot start before its launch returns): its time goes to the host labels below. Else it
  is *queued*: up to KERNEL_GAP_US it is a kernel-to-kernel gap (launch latency, dependencies), longer a
  device wait (another stream, work the trace does not show).
- **host labels**, innermost range first: sync wait (a ``sync`` range, a synchronize call, ``.item()``'s
  ``_local_scalar_dense``), data loader (``enumerate(DataLoader)``, ``data``), between steps (nanolm's
  ``between``), launching (``forward``, ``backward``, ``optimizer``), and step code in no phase, which is
  batch making when it holds batch-making ops (``stack``, ``from_numpy``, ``pin_memory``, ``randint``...),
  else launching.
- **post-sync**: a gap that starts while the host waits in a sync: the sync drained the queue, so what the
  host does next is exposed. Removing the sync can hide at most that.

The gate (``gate_of``): GPU computing when busy ≥ 85% of the step, waiting below 60%, mixed between.
"""

from __future__ import annotations

import re
import statistics
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..trace.classify import DEVICE_CLASSES, classify
from ..trace.intervals import length, union
from ..trace.load import LAUNCH_CATS, Event, Trace
from .cuts import Names, cut_many
from .window import device_columns

KERNEL_GAP_US = 10.0  # a queued gap up to this long is launch latency between back-to-back kernels


WORK_WITHOUT_EVENTS_US = 200.0  # a host stretch with no event this long is work (sleep, NumPy), not profiler cost


COMPUTING_AT = 0.85  # busy share at or above: the GPU is computing (all idle removed gains <= 1.18x)


WAITING_BELOW = 0.60  # busy share below: the GPU is waiting (>= 40% idle: the host limits the step)


COMPUTING, WAITING, MIXED = "computing", "waiting", "mixed"


# idle buckets
LAUNCHING = "launching"


BETWEEN = "between steps"


DATA_LOADER = "data loader"


STEP_DATA = "batch making in the step"


SYNC_WAIT = "sync wait"


QUEUE_FULL = "queue full"  # a host label only: a launch blocked on the GPU's full queue (CUPTI "Command Buffer Full")


KERNEL_GAPS = "kernel-to-kernel gaps"


DEVICE_WAITS = "device waits"


IDLE_BUCKETS = [LAUNCHING, BETWEEN, DATA_LOADER, STEP_DATA, SYNC_WAIT, KERNEL_GAPS, DEVICE_WAITS]


INPUT_BUCKETS = {BETWEEN, DATA_LOADER, STEP_DATA}


OVERLAP = "overlapping classes"


_OTHER_STEP = "other step code"
_NAMES = Names(_OTHER_STEP, BETWEEN, STEP_DATA, LAUNCHING, WORK_WITHOUT_EVENTS_US)  # what cut_many resolves to


SYNC_CALLS = re.compile(
    r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaMemcpy|cuStreamSynchronize"
    r"|cuCtxSynchronize|cuEventSynchronize|cuMemcpyDtoH_v2|aten::_local_scalar_dense|aten::item)$"
)


_BATCH_OPS = re.compile(
    r"^aten::(stack|cat|from_numpy|pin_memory|_pin_memory|randint|randperm|as_tensor|tensor"
    r"|lift_fresh)$|get_batch|collate"
)


def label_of(e: Event) -> str | None:
    """The host label a range or call gives the time inside it (None: it gives none; ask its parent)."""
    name = e.name
    if e.cat == "overhead" and "Command Buffer Full" in name:
        return QUEUE_FULL
    if name == "sync" or SYNC_CALLS.match(name):
        return SYNC_WAIT
    if name == "data" or name.startswith("enumerate(DataLoader)"):
        return DATA_LOADER
    if name == "between":
        return BETWEEN
    if name in ("forward", "backward", "optimizer") or name.startswith("Optimizer.step"):
        return LAUNCHING
    if name.startswith("ProfilerStep#"):
        return _OTHER_STEP
    return None


def gate_of(busy_share: float) -> str:
    """The gate from the busy share of the step: computing, waiting or mixed (COMPUTING_AT, WAITING_BELOW)."""
    if busy_share >= COMPUTING_AT:
        return COMPUTING
    return WAITING if busy_share < WAITING_BELOW else MIXED


@dataclass
class Row:
    name: str
    ms: float  # per step
    share: float  # of the step


@dataclass
class LaunchStats:
    """HTA's kernel launch statistics over every correlated launch call of the interval."""

    kernels_per_step: float
    median_kernel_us: float | None
    short_kernel_share: float | None  # kernels shorter than their launch call
    median_launch_us: float | None
    median_launch_delay_us: float | None  # kernel start - launch end, >= 0: ~0 an empty queue, large a deep one
    max_queue_depth: int  # launched, not yet started
    host_blocked_ms: float  # per step: sync waits + "Command Buffer Full"
    queue_full_ms: float  # per step: "Command Buffer Full" alone (the GPU's queue was full: GPU-bound evidence)


@dataclass
class Gap:
    start: float  # us
    end: float
    starved: bool
    post_sync: bool
    labels: dict[str, float]  # bucket -> us of this gap
    events: dict[str, int]  # bucket -> host events that started in it (the profiler's per-event cost lands there)


@dataclass
class DeviceStep:
    """The device timeline of N steps, per step (ms)."""

    steps: int
    t0: float
    t1: float
    step_ms: float  # profiled: (T1 - T0) / N
    busy_ms: float
    class_ms: dict[str, float]
    overlap_ms: float
    idle_ms: dict[str, float]  # bucket -> ms per step
    idle_events: dict[str, float]  # bucket -> host events per step in it
    post_sync_ms: float  # idle in gaps that start inside a sync wait, past the wait itself
    launch: LaunchStats
    top_kernels: list[tuple[str, str, float, float]]  # (name, class, ms per step, calls per step)
    top_other: list[tuple[str, float]]  # unclassified kernels (name, ms per step)
    top_idle_ops: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # bucket -> host ops in its gaps
    gaps: list[Gap] = field(default_factory=list, repr=False)
    labeler: Labeler | None = field(default=None, repr=False)  # the host labels it used (the replay reuses them)

    @property
    def busy_share(self) -> float:
        return self.busy_ms / self.step_ms if self.step_ms else 0.0


def clipped(events: list[Event], t0: float, t1: float) -> list[tuple[float, float, Event]]:
    """(start, end, event) of each event with time inside [t0, t1], its interval cut to it (us)."""
    return [(max(e.ts, t0), min(e.end, t1), e) for e in events if e.end > t0 and e.ts < t1 and e.dur > 0]


def device_in(trace: Trace, t0: float, t1: float) -> list[tuple[float, float, Event]]:
    """clipped(trace.device, t0, t1), reading only the activities that can reach into [t0, t1]: those starting
    before t1 and no more than the longest activity's duration (and a microsecond to spare) before t0."""
    d = device_columns(trace)
    if not len(d.ts):
        return []
    reach = d.longest + 1.0
    lo, hi = int(np.searchsorted(d.ts, t0 - reach)), int(np.searchsorted(d.ts, t1))
    return clipped(d.events[lo:hi], t0, t1)


def analyze_device(trace: Trace, first: int = 0, count: int | None = None) -> DeviceStep:
    """The device timeline of steps [first, first + count) of the trace (all steps by default)."""
    n = len(trace.steps[first : None if count is None else first + count])
    t0, t1 = trace.group_span(first, n)
    spans = device_in(trace, t0, t1)
    merged = union([(s, e) for s, e, _ in spans])
    busy_us = length(merged)
    classes = {id(k): classify(trace, k) for _, _, k in spans}
    per_class: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s, e, k in spans:
        per_class[classes[id(k)]].append((s, e))
    class_us = {c: length(union(v)) for c, v in per_class.items()}
    lanes = Labeler(trace)
    gaps = _gaps(trace, merged, t0, t1, lanes)
    idle, events = defaultdict(float), defaultdict(int)
    for g in gaps:
        for bucket, us in g.labels.items():
            idle[bucket] += us
        for bucket, count_ in g.events.items():
            events[bucket] += count_
    post_sync = sum(us for g in gaps if g.post_sync for b, us in g.labels.items() if b != SYNC_WAIT)
    top, other = _top_kernels(spans, classes, n)
    return DeviceStep(
        steps=n,
        t0=t0,
        t1=t1,
        step_ms=(t1 - t0) / 1000 / n,
        busy_ms=busy_us / 1000 / n,
        class_ms={c: class_us[c] / 1000 / n for c in DEVICE_CLASSES if c in class_us},
        overlap_ms=max(0.0, sum(class_us.values()) - busy_us) / 1000 / n,
        idle_ms={b: idle[b] / 1000 / n for b in IDLE_BUCKETS if idle.get(b)},
        idle_events={b: events[b] / n for b in IDLE_BUCKETS if idle.get(b)},
        post_sync_ms=post_sync / 1000 / n,
        launch=_launch_stats(trace, spans, t0, t1, n),
        top_kernels=top,
        top_other=other,
        top_idle_ops=_top_idle_ops(lanes.ops, n),
        gaps=gaps,
        labeler=lanes,
    )


class Labeler:
    """The host label at any instant, and its boundaries, for cutting gaps by label. The main lane decides,
    except inside its ``backward`` range, where torch's autograd thread launches the kernels and its lane
    decides (a sync or a full queue there; launching otherwise)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.lane = trace.main_lane
        self.others = [
            lane for lane, events in trace.host.items() if lane != self.lane and any(e.cat in LAUNCH_CATS for e in events)
        ]
        lanes = [self.lane, *self.others]
        events = [e for lane in lanes for e in trace.host.get(lane, [])]
        ts = np.fromiter((e.ts for e in events), np.float64, len(events))
        ends = np.fromiter((e.end for e in events), np.float64, len(events))
        # arrays, not lists: a list would hold a float object per time (a hundred MB on a 600 MB trace)
        self.bounds = np.unique(np.concatenate([ts, ends]))  # sorted, each time once
        counted = np.fromiter((e.cat == "cpu_op" or e.cat in LAUNCH_CATS for e in events), bool, len(events))
        self.starts = np.sort(ts[counted])
        self._runs = _other_step_runs(trace)
        self._chain: dict[int, str] = {}
        # phase ranges of the main lane by start, also those not nested in a step (a `between` opened in one step
        # and closed in the next): the label of time the tree alone leaves to the step
        phases = sorted(
            (e.ts, e.end, e)
            for e in trace.host.get(self.lane, [])
            if e.cat == "user_annotation" and label_of(e) not in (None, _OTHER_STEP)
        )
        self._phase_starts = [p[0] for p in phases]
        self._phases = phases
        self.ops: dict[str, dict[str, float]] | None = None  # set to collect op names per label in cut()

    def label_at(self, t: float) -> str:
        return self._resolve(self._chain_label(self.trace.innermost(self.lane, t)), t)

    def _resolve(self, label: str, t: float) -> str:
        """A chain label made final at time t: a phase range around t that the tree did not nest (it crosses a
        step boundary) decides step code; batch making or launching otherwise; backward asks the autograd lane."""
        if label in (_OTHER_STEP, BETWEEN):
            phase = self._phase_at(t)
            if phase is not None:
                label = phase
        if label == _OTHER_STEP:
            return STEP_DATA if self._data_like_at(t) else LAUNCHING
        if label == "backward":
            return self._autograd_label(t)
        return label

    def _phase_at(self, t: float) -> str | None:
        """The label of the latest-starting phase range around t (None: no phase range holds t)."""
        i = bisect_right(self._phase_starts, t) - 1
        for j in range(i, max(-1, i - 8), -1):  # phase ranges barely overlap: a few back is enough
            start, end, e = self._phases[j]
            if start <= t < end:
                return self.phase_label(e)
        return None

    def phase_label(self, e: Event) -> str:
        """The label a phase range gives the time inside it ("backward": the autograd lane decides)."""
        return "backward" if e.name == "backward" and self.others else label_of(e)

    def cut_many(self, stretches: list[tuple[float, float]]) -> list[tuple[dict, dict, dict]]:
        """[cut(a, b) for a, b in stretches], all at once over arrays, the same to the last bit (measure/cuts.py)."""
        return cut_many(self, stretches, _NAMES)

    def _chain_label(self, e: Event | None) -> str:
        """The label the innermost event's ranges give, innermost first (cached per event): a host label,
        _OTHER_STEP, or "backward" (the autograd lane decides)."""
        if e is None:
            return BETWEEN  # between two ProfilerStep ranges: the loop's own code
        key = id(e)
        if key not in self._chain:
            found = BETWEEN
            for a in e.ancestors():
                label = label_of(a)
                if label == _OTHER_STEP or label is not None and not (a.name == "backward" and self.others):
                    found = label
                    break
                if a.name == "backward" and self.others:
                    found = "backward"
                    break
            self._chain[key] = found
        return self._chain[key]

    def _autograd_label(self, t: float) -> str:
        for lane in self.others:
            e = self.trace.innermost(lane, t)
            for a in e.ancestors() if e is not None else []:
                if label_of(a) in (SYNC_WAIT, QUEUE_FULL):
                    return label_of(a)
        return LAUNCHING

    def _data_like_at(self, t: float) -> bool:
        i = bisect_right(self._runs, t, key=lambda r: r[0]) - 1
        return i >= 0 and self._runs[i][0] <= t < self._runs[i][1] and self._runs[i][2]

    def cut(self, a: float, b: float) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
        """Time of [a, b] per host label (us), the host events that started in each label's part, and the part
        of each label's time in stretches of WORK_WITHOUT_EVENTS_US or more in which no host event started (a
        sleep, NumPy: the profiler's per-event cost is not there). Also adds to `self.ops` the innermost main-lane
        event's name per label (us), for naming what the host did in each idle bucket."""
        inside = self.bounds[np.searchsorted(self.bounds, a, "right") : np.searchsorted(self.bounds, b, "left")]
        points = [a, *inside.tolist(), b]
        # host events started before each point: those started in a piece are the difference of its two ends'
        before = np.searchsorted(self.starts, points, "left").tolist()
        labels: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        eventless: dict[str, float] = defaultdict(float)
        for i, (s, e) in enumerate(zip(points, points[1:], strict=False)):
            if e <= s:
                continue
            mid = (s + e) / 2
            inner = self.trace.innermost(self.lane, mid)
            label = self._resolve(self._chain_label(inner), mid)
            labels[label] += e - s
            if self.ops is not None and inner is not None:
                self.ops[label][inner.name] += e - s
            started = before[i + 1] - before[i]
            counts[label] += started
            if not started and e - s >= WORK_WITHOUT_EVENTS_US:
                eventless[label] += e - s
        return labels, counts, eventless


def _other_step_runs(trace: Trace) -> list[tuple[float, float, bool]]:
    """Where step code outside every phase range makes batches: (start, end, batch making), sorted.

    A step with phase ranges (nanolm's runner, or a script's own record_function ranges): each stretch between
    them is batch making when it holds a batch-making op (stack, from_numpy, pin_memory, randint, a get_batch or
    collate function with --with-stack) *and* a host-to-device copy: nanoGPT's get_batch between forward and
    backward is, clip_grad_norm_'s stack between backward and the optimizer is not. A step with no phase range (a
    plain torch.profiler trace) has no stretch to judge: only the time inside such ops is batch making."""
    htod = _htod_launches(trace)
    runs = []
    for step in trace.steps:
        phases = [c for c in step.children if label_of(c) is not None]
        if not phases:
            runs += [(e.ts, e.end, True) for c in step.children for e in _outermost_batch_ops(c, htod)]
            continue
        cursor, ops = step.ts, []
        for child in step.children:
            if label_of(child) is not None:  # a phase: it closes the stretch before it
                if child.ts > cursor:
                    runs.append((cursor, child.ts, _makes_batches(ops, htod)))
                cursor, ops = child.end, []
            else:
                ops += list(_walk(child))
        if step.end > cursor:
            runs.append((cursor, step.end, _makes_batches(ops, htod)))
    return sorted(runs)


def _host_batch_op(e: Event, htod: set[int]) -> bool:
    """A batch-making op on host tensors: its name says so and it launches nothing but host-to-device copies (a
    torch.cat inside the model launches a kernel and is the model's work)."""
    if not _BATCH_OPS.search(e.name):
        return False
    return all(id(c) in htod for c in _walk(e) if c.cat in LAUNCH_CATS)


def _outermost_batch_ops(e: Event, htod: set[int]) -> list[Event]:
    """The host batch-making ops and host-to-device copies at or under `e` that no other one holds."""
    if _host_batch_op(e, htod) or id(e) in htod:
        return [e]
    return [found for c in e.children for found in _outermost_batch_ops(c, htod)]


def _makes_batches(events: list[Event], htod: set[int]) -> bool:
    named = any(e.cat == "python_function" and re.search(r"get_batch|collate", e.name) for e in events)
    return named or (any(_host_batch_op(e, htod) for e in events) and any(id(e) in htod for e in events))


def _htod_launches(trace: Trace) -> set[int]:
    """The launch calls (ids) whose device activity copies host memory to the device."""
    return {
        id(trace.launch(k)) for k in trace.device if k.cat == "gpu_memcpy" and "HtoD" in k.name and trace.launch(k) is not None
    }


def _walk(e: Event):
    yield e
    for c in e.children:
        yield from _walk(c)


def _gaps(trace: Trace, merged: list[tuple[float, float]], t0: float, t1: float, lanes: Labeler) -> list[Gap]:
    """The idle gaps of [t0, t1] between merged busy intervals, each attributed (module docstring)."""
    out = []
    starts = device_columns(trace).ts
    edges = [t0] + [x for iv in merged for x in iv] + [t1]
    lanes.ops = defaultdict(lambda: defaultdict(float))
    gaps = []  # (a, b, starved)
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        if b - a <= 0:
            continue
        k = _next_activity(trace, starts, b)
        call = trace.launch(k) if k is not None else None
        # an activity whose launch the trace lacks, in a trace that links launches, was launched before the
        # recording began: it was queued (without any links, the host is all there is to go on)
        outside = call is None and k is not None and bool(trace.launch_links)
        gaps.append((a, b, not outside and (k is None or call is None or call.end > a)))
    cuts = iter(lanes.cut_many([(a, b) for a, b, starved in gaps if starved]))
    for a, b, starved in gaps:
        if starved:
            labels, counts, _ = next(cuts)
            if QUEUE_FULL in labels:  # cannot really coincide with idle; a launch blocked is launching
                labels[LAUNCHING] = labels.get(LAUNCHING, 0.0) + labels.pop(QUEUE_FULL)
                counts[LAUNCHING] = counts.get(LAUNCHING, 0) + counts.pop(QUEUE_FULL, 0)
        else:
            labels, counts = {KERNEL_GAPS if b - a <= KERNEL_GAP_US else DEVICE_WAITS: b - a}, {}
        post_sync = lanes.label_at(a) == SYNC_WAIT
        out.append(Gap(a, b, starved, post_sync, dict(labels), dict(counts)))
    if QUEUE_FULL in lanes.ops:
        for name, us in lanes.ops.pop(QUEUE_FULL).items():
            lanes.ops[LAUNCHING][name] += us
    return out


def _next_activity(trace: Trace, starts: np.ndarray, t: float) -> Event | None:
    """The device activity that starts at t, or the first after it (a gap at the interval's end); starts: every
    activity's start, sorted."""
    i = int(np.searchsorted(starts, t - 1e-6, "left"))
    return trace.device[i] if i < len(trace.device) else None


def _first_per_launch(trace: Trace, activities: list[Event]) -> list[tuple[Event, Event]]:
    """(activity, its launch call) for the first activity of each launch call: a CUDA graph's one
    cudaGraphLaunch starts all its kernels, and only the first of them waited on the launch."""
    first: dict[int, tuple[Event, Event]] = {}
    for k in activities:
        r = trace.launch(k)
        if r is not None and (id(r) not in first or k.ts < first[id(r)][0].ts):
            first[id(r)] = (k, r)
    return list(first.values())


def _launch_stats(trace: Trace, spans: list, t0: float, t1: float, n: int) -> LaunchStats:
    """HTA's kernel launch statistics over the interval's activities (module docstring), per step."""
    kernels = [k for _, _, k in spans if k.cat == "kernel"]
    pairs = _first_per_launch(trace, kernels)
    short = [k.dur < r.dur for k, r in pairs]
    delays = [max(0.0, k.ts - r.end) for k, r in pairs]
    blocked = sum(
        min(e.end, t1) - max(e.ts, t0)
        for e in trace.host.get(trace.main_lane, [])
        if e.end > t0 and e.ts < t1 and label_of(e) == SYNC_WAIT and not (e.parent is not None and _inside_sync(e.parent))
    )
    queue_full = sum(
        min(e.end, t1) - max(e.ts, t0)
        for events in trace.host.values()
        for e in events
        if e.cat == "overhead" and "Command Buffer Full" in e.name and e.end > t0 and e.ts < t1
    )
    return LaunchStats(
        kernels_per_step=len(kernels) / n,
        median_kernel_us=statistics.median(k.dur for k in kernels) if kernels else None,
        short_kernel_share=sum(short) / len(short) if short else None,
        median_launch_us=statistics.median(r.dur for _, r in pairs) if pairs else None,
        median_launch_delay_us=statistics.median(delays) if delays else None,
        max_queue_depth=_max_queue_depth(_first_per_launch(trace, [k for _, _, k in spans])),
        host_blocked_ms=(blocked + queue_full) / 1000 / n,
        queue_full_ms=queue_full / 1000 / n,
    )


def _inside_sync(e: Event | None) -> bool:
    while e is not None:
        if label_of(e) == SYNC_WAIT:
            return True
        e = e.parent
    return False


def _max_queue_depth(launched: list[tuple[Event, Event]]) -> int:
    """The most launches (their call returned) whose first activity has not yet started, at any instant."""
    changes = []
    for k, r in launched:
        if r.end < k.ts:
            changes += [(r.end, 1), (k.ts, -1)]
    depth = best = 0
    for _, d in sorted(changes, key=lambda c: (c[0], c[1])):
        depth += d
        best = max(best, depth)
    return best


def _top_kernels(
    spans: list, classes: dict, n: int, top: int = 10
) -> tuple[list[tuple[str, str, float, float]], list[tuple[str, float]]]:
    """The `top` kernels by time ((name, class, ms a step, calls a step)), and the unclassified ones' names and ms."""
    by_name: dict[tuple[str, str], list[float]] = {}
    for s, e, k in spans:
        row = by_name.setdefault((k.name, classes[id(k)]), [0.0, 0.0])
        row[0] += (e - s) / 1000 / n
        row[1] += 1 / n
    rows = sorted(((name, cls, ms, calls) for (name, cls), (ms, calls) in by_name.items()), key=lambda r: -r[2])
    other = [(name, ms) for name, cls, ms, _ in rows if cls == "other"][:5]
    return rows[:top], other


def _top_idle_ops(ops: dict[str, dict[str, float]] | None, n: int, top: int = 3) -> dict[str, list[tuple[str, float]]]:
    """For each host-starved bucket, the host ops (innermost cpu_op or range) the main lane sat in, ms per step."""
    out = {}
    for bucket, by_name in (ops or {}).items():
        total = sum(by_name.values())
        rows = sorted(by_name.items(), key=lambda r: -r[1])[:top]
        out[bucket] = [(name, us / 1000 / n) for name, us in rows if us >= 0.01 * total]
    return out
