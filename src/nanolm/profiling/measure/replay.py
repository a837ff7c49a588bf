"""A replay of recorded steps: what the step would take with one thing changed.

Holistic Trace Analysis's critical-path idea reduced to what a training loop needs: one host program
(the main lane's time between launch calls, cut by host label, with the autograd thread's launches in
time order) driving the device's streams, each running its activities in launch order:

- an activity starts at max(its launch call's end + λ, its stream's last end), where λ is the median launch
  delay seen when the stream was empty;
- a sync call returns when every activity launched before it has finished (plus its own few µs);
- with "Command Buffer Full" in the trace, a launch returns only once the activity launched Q launches
  earlier has started (Q: the deepest queue seen); that blocked time is not host work.

The recorded group of N steps is replayed REPEATS times back to back and the last repetition's period
(the later of the host's and the device's) is the step: a steady state, as in a long run.

``calibrate`` solves the profiler's cost per recorded host event c (bisection) so that the baseline replay
equals the unprofiled step U; host time with no events in it (``time.sleep``, NumPy) is never shrunk.
What-ifs (``WhatIf``) are applied before a replay, all together in one replay for "all fixed", never as a
sum of savings. ``self_check`` says how far the baseline is from the recorded group: projections from a
replay that cannot reproduce its own input are withheld by the caller.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from dataclasses import dataclass, field

from ..trace.classify import classify
from ..trace.load import LAUNCH_CATS, Event, Trace
from .device import INPUT_BUCKETS, LAUNCHING, QUEUE_FULL, DeviceStep, Labeler

REPEATS = 4


LAUNCH_FLOOR_US = 5.0  # what a launch costs the host once Python and dispatch are gone (compiled, CUDA graphs)


SYNC_TAIL_US = 5.0  # a sync call's own time once the device is done


_BLOCKING = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
)


@dataclass
class _Host:
    step: int
    parts: dict[str, float]  # host label -> us
    events: dict[str, int]  # host label -> recorded host events in that part
    fixed: dict[str, float] = field(default_factory=dict)  # host label -> us in which no event started


@dataclass
class _Launch:
    step: int
    call_us: float
    ops: list[tuple[object, float, str]]  # (stream, us, class)
    events: int = 1


@dataclass
class SyncItem:
    step: int
    call_us: float
    user: bool  # the script's own sync (inside a `sync` range, or .item()); False: torch's or a library's


@dataclass
class WhatIf:
    """What a fix changes, for one replay. Defaults: nothing."""

    drop_user_syncs: bool = False  # the script's own syncs stop blocking (the DtoH copy stays)
    prefetch_workers: int = 0  # > 0: batch making leaves the loop, made by this many producers ahead of time
    launch_floor: bool = False  # launching time shrinks to LAUNCH_FLOOR_US per launch
    class_scale: dict[str, float] = field(default_factory=dict)  # device class -> duration factor

    def merged(self, other: WhatIf) -> WhatIf:
        return WhatIf(
            self.drop_user_syncs or other.drop_user_syncs,
            max(self.prefetch_workers, other.prefetch_workers),
            self.launch_floor or other.launch_floor,
            {**self.class_scale, **other.class_scale},
        )


@dataclass
class Replayer:
    """The host program of a recorded group of steps, ready to replay under changes."""

    items: list
    steps: int
    measured_step_us: float
    delay_us: float
    queue_limit: int | None
    c_us: float = 0.0  # the profiler's cost per host event, removed in every replay (calibrate)
    _split_cache: dict = field(default_factory=dict, repr=False)

    def step_ms(self, change: WhatIf | None = None) -> float:
        """The replayed step, ms (steady state: the last repetition's period / steps)."""
        return _run(self, change or WhatIf()) / self.steps / 1000

    def self_check(self) -> float:
        """Baseline replay (no calibration) over the recorded step, minus 1: 0.03 is 3% slow."""
        c, self.c_us = self.c_us, 0.0
        try:
            return self.step_ms() * 1000 / self.measured_step_us - 1
        finally:
            self.c_us = c

    def floor_ms(self) -> float:
        """The replayed step with every host event's time removed (the most calibration can take away)."""
        c, self.c_us = self.c_us, float("inf")
        try:
            return self.step_ms()
        finally:
            self.c_us = c

    def calibrate(self, unprofiled_ms: float) -> float | None:
        """Set c so that the baseline replay gives the unprofiled step: 0 when U >= the replayed step, None (and
        c = 0) when even removing all event time cannot reach U (the profiler's per-event cost does not explain
        the difference)."""
        self.c_us = 0.0
        if self.step_ms() <= unprofiled_ms:
            return 0.0
        if self.floor_ms() > unprofiled_ms:
            return None
        lo, hi = 0.0, 1.0
        while True:
            self.c_us = hi
            if self.step_ms() <= unprofiled_ms:
                break
            lo, hi = hi, hi * 2
        for _ in range(40):
            self.c_us = (lo + hi) / 2
            lo, hi = (self.c_us, hi) if self.step_ms() > unprofiled_ms else (lo, self.c_us)
        self.c_us = hi
        return hi


def build_replayer(trace: Trace, device: DeviceStep) -> Replayer:
    """The host program of the steps `device` analysed: launches, syncs and host time by label, in order."""
    t0, t1 = device.t0, device.t1
    starts = group_starts(trace, device)
    labeler = device.labeler or Labeler(trace)
    labeler.ops = None  # the gaps' op names are collected; these cuts need none
    calls = [
        e for events in trace.host.values() for e in events if e.cat in LAUNCH_CATS and t0 <= e.ts < t1 and not _nested_call(e)
    ]
    by_call: dict[int, list[Event]] = {}
    for k in trace.device:
        r = trace.launch(k)
        if r is not None:
            by_call.setdefault(id(r), []).append(k)
    items: list = []
    stretches: list[tuple[int, int, float, float]] = []  # (item index, step, a, b): host time cut by label below
    cursor = t0
    for call in sorted(calls, key=lambda e: e.ts):
        step = max(0, bisect_left(starts, call.ts + 1e-9) - 1)
        if call.ts > cursor:
            stretches.append((len(items), step, cursor, call.ts))
            items.append(None)
        activities = by_call.get(id(call), [])
        if activities:
            items.append(_Launch(step, call.dur, [(k.tid, k.dur, classify(trace, k)) for k in activities]))
        elif call.name in _BLOCKING:
            items.append(SyncItem(step, call.dur, _user_sync(call)))
        else:
            items.append(_Host(step, {LAUNCHING: call.dur}, {LAUNCHING: 1}))
        cursor = max(cursor, call.end)
    if t1 > cursor:
        stretches.append((len(items), len(starts) - 1, cursor, t1))
        items.append(None)
    cuts = labeler.cut_many([(a, b) for _, _, a, b in stretches])  # = labeler.cut(a, b) each, all at once
    for (i, step, _, _), parts in zip(stretches, cuts, strict=True):
        items[i] = _Host(step, *parts)
    queue = device.launch.max_queue_depth if device.launch.queue_full_ms > 0 else None
    return Replayer(
        items,
        device.steps,
        (t1 - t0) / device.steps,
        _empty_queue_delay(trace, t0, t1),
        max(1, queue) if queue is not None else None,
    )


def group_starts(trace: Trace, device: DeviceStep) -> list[float]:
    """The start (us) of each of the `device.steps` steps the device timeline analysed, chosen by position from the
    group's first step, not by time: a step's end is ts + dur in floats, so the next group's first step, which
    starts where this group's last one ends, can start a rounding error before t1 and would count as one more."""
    first = bisect_left([s.ts for s in trace.steps], device.t0)
    return [s.ts for s in trace.steps[first : first + device.steps]]


def _nested_call(e: Event) -> bool:
    """A runtime call inside another one (a driver call under a runtime call): the outer one stands for it."""
    p = e.parent
    while p is not None:
        if p.cat in LAUNCH_CATS:
            return True
        p = p.parent
    return False


_USER_SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::to", "aten::_to_copy", "aten::copy_", "aten::tolist"}


def _user_sync(call: Event) -> bool:
    """Whether a blocking call is the script's own sync, which it could remove: inside nanolm's `sync` range (its
    SyncWatch saw the script's own call), or under a read of a tensor's value (`.item()`, `.cpu()`, `.tolist()`)
    outside the optimizer, or a synchronize called from Python itself (no op around it). A sync inside another op
    (`nonzero`, a masked index, GradScaler's inf check) is that op's semantics, not the script's to remove."""
    ops = [p for p in call.ancestors()[1:] if p.cat == "cpu_op"]
    ranges = [p.name for p in call.ancestors()[1:] if p.cat == "user_annotation"]
    if "sync" in ranges:
        return True
    if any(name.startswith("Optimizer.") for name in ranges):
        return False
    return not ops or ops[-1].name in _USER_SYNC_OPS or ops[0].name in _USER_SYNC_OPS


def _empty_queue_delay(trace: Trace, t0: float, t1: float) -> float:
    """Median launch-to-start delay (us) of activities whose stream was empty when their launch returned."""
    last_end: dict = {}
    delays = []
    for k in trace.device:
        r = trace.launch(k)
        if r is not None and t0 <= r.ts < t1 and last_end.get(k.tid, float("-inf")) <= r.end:
            delays.append(max(0.0, k.ts - r.end))
        last_end[k.tid] = max(last_end.get(k.tid, float("-inf")), k.end)
    return statistics.median(delays) if delays else 0.0


def _host_split(item: _Host, c: float) -> tuple[float, float, float]:
    """(the loop's own time, its launching time, its batch making) of a host segment, us, with the profiler's
    cost c per event taken out; time blocked on a full queue is left to the replay's queue limit."""
    loop = launching = data = 0.0
    for label, us in item.parts.items():
        if label == QUEUE_FULL:
            continue
        fixed = item.fixed.get(label, 0.0)
        events = item.events.get(label, 0)
        us = fixed + (max(0.0, us - fixed - c * events) if events else us - fixed)
        if label in INPUT_BUCKETS:
            data += us
        elif label == LAUNCHING:
            launching += us
        else:
            loop += us
    return loop, launching, data


def _splits(r: Replayer) -> list[tuple[float, float, float] | None]:
    """Each item's host split for the replayer's current c (cached per c: a replay reads it, never a change)."""
    cached = r._split_cache.get(r.c_us)
    if cached is None:
        cached = [_host_split(item, r.c_us) if isinstance(item, _Host) else None for item in r.items]
        r._split_cache.clear()
        r._split_cache[r.c_us] = cached
    return cached


def _run(r: Replayer, change: WhatIf) -> float:
    """One replay: REPEATS back-to-back copies of the group; the last copy's period, us."""
    t = 0.0
    stream_free: dict = {}
    done = 0.0  # when everything launched so far has finished
    op_starts: list[float] = []
    host_end, device_end = [], []
    splits = _splits(r)
    batch_us = [0.0] * r.steps
    for item, split in zip(r.items, splits, strict=True):
        if split is not None:
            batch_us[item.step] += split[2]
    producer = _Producer(change.prefetch_workers, batch_us) if change.prefetch_workers else None
    floor, scale, c, limit = change.launch_floor, change.class_scale, r.c_us, r.queue_limit
    for rep in range(REPEATS):
        consumed = set()
        for item, split in zip(r.items, splits, strict=True):
            if split is not None:
                loop, launching, data = split
                loop += 0.0 if floor else launching
                if producer is None:
                    t += loop + data
                else:
                    g = rep * r.steps + item.step
                    if data > 0 and g not in consumed:
                        consumed.add(g)
                        t = producer.take(g, t)
                    t += loop
            elif isinstance(item, _Launch):
                call = max(0.0, item.call_us - c * item.events) if c < float("inf") else 0.0
                t += min(call, LAUNCH_FLOOR_US) if floor else call
                if limit and len(op_starts) >= limit:
                    t = max(t, op_starts[-limit])
                for stream, us, cls in item.ops:
                    start = max(t + r.delay_us, stream_free.get(stream, 0.0))
                    end = start + us * scale.get(cls, 1.0)
                    stream_free[stream] = end
                    done = max(done, end)
                    op_starts.append(start)
            else:
                tail = min(item.call_us, SYNC_TAIL_US)
                t = t + tail if item.user and change.drop_user_syncs else max(t, done) + tail
        host_end.append(t)
        device_end.append(done)
    return max(host_end[-1] - host_end[-2], device_end[-1] - device_end[-2])


class _Producer:
    """`workers` producers making batches ahead, at most `workers` batches made and not yet taken."""

    def __init__(self, workers: int, batch_us: list[float]) -> None:
        self.workers, self.batch_us = workers, batch_us
        self.ready: dict[int, float] = {}
        self.taken: dict[int, float] = {}

    def _ready(self, g: int) -> float:
        if g not in self.ready:
            start = 0.0
            if g >= self.workers:
                start = max(self._ready(g - self.workers), self.taken.get(g - self.workers, 0.0))
            self.ready[g] = start + self.batch_us[g % len(self.batch_us)]
        return self.ready[g]

    def take(self, g: int, t: float) -> float:
        """When the loop, arriving at time t, has batch g."""
        self.taken[g] = max(t, self._ready(g))
        return self.taken[g]
