"""From profiler events to numbers: per-step phase times, operator categories by self time (no
microsecond counted twice), the busy share of the GPU, and the report that carries them."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

from .categories import CATEGORIES, DATA, HOST, OPTIMIZER, categorize, is_annotation
from .syncs import SyncSite

PHASES = ["data", "forward", "backward", "optimizer", "sync"]


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
class Stat:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        return cls(statistics.median(values), min(values), max(values))


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


def _context_walk(events: list) -> list[tuple[Any, str | None, bool]]:
    """(event, enclosing phase, is this event itself an outermost phase range) in tree order."""
    out = []
    stack = [(e, None) for e in events if e.cpu_parent is None]
    while stack:
        event, context = stack.pop()
        phase = phase_of(event.name)
        outermost = phase is not None and context is None
        out.append((event, context, outermost))
        inner = context or phase
        stack.extend((child, inner) for child in event.cpu_children)
    return out


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total / 1000.0


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
    for event, context, outermost in _context_walk(cpu_events):
        if outermost:
            phase_ms[phase_of(event.name)] += event.time_range.elapsed_us() / 1000.0 / n
        self_ms = event.self_cpu_time_total / 1000.0 / n
        if is_annotation(event.name):
            where = context or phase_of(event.name)
            category = DATA if where == "data" else OPTIMIZER if where == "optimizer" else HOST
            category_ms[category] += self_ms
            continue
        category = categorize(event.name, context)
        category_ms[category] += self_ms
        category_calls[category] += 1 / n
        row = ops.setdefault((event.name, category), [0.0, 0.0])
        row[0] += 1 / n
        row[1] += self_ms
    device = [e for e in events if getattr(e.device_type, "name", "CPU") == "CUDA"]
    busy = device_cat = None
    if device:
        busy = _union_ms([(e.time_range.start, e.time_range.end) for e in device]) / n
        device_cat = defaultdict(float)
        for e in device:
            device_cat[categorize(e.name)] += e.time_range.elapsed_us() / 1000.0 / n
        device_cat = dict(device_cat)
    return WindowStats(len(steps), step_ms, dict(phase_ms), dict(category_ms), dict(category_calls),
                       {k: (v[0], v[1]) for k, v in ops.items()}, busy, device_cat)


# ---- the report ------------------------------------------------------------------------------

@dataclass
class PhaseRow:
    phase: str
    ms: Stat  # per step: median and min-max over the repeated windows
    share: float  # of the median step


@dataclass
class CategoryRow:
    category: str
    calls_per_step: float
    self_ms: float  # per step (median window)
    share: float  # of all self time


@dataclass
class OpRow:
    name: str
    category: str
    calls_per_step: float
    self_ms: float
    share: float


class Bottleneck(str, Enum):
    """What limits a training step (the rules are in nanolm.profiling.verdict); the value is the name
    reports show and store."""

    INPUT = "input-bound"
    HOST_SYNC = "host-sync-bound"
    LAUNCH_OVERHEAD = "launch/overhead-bound"
    MEMORY = "memory-bound"
    COMPUTE = "compute-bound"

    def __str__(self) -> str:  # the name, also in f-strings, on every Python version
        return self.value


@dataclass
class Verdict:
    bottleneck: Bottleneck
    headline: str  # one sentence in plain words
    evidence: list[str]
    fixes: list[str]  # cheapest first, those already in place left out
    also: list[str] = field(default_factory=list)  # lesser findings

    def __post_init__(self) -> None:
        self.bottleneck = Bottleneck(self.bottleneck)  # a report read back from JSON holds the name


@dataclass
class MFU:
    n_params: float
    tokens_per_s: float | None
    flops_per_s: float  # achieved model FLOP/s
    flops_per_s_with_attention: float | None
    peak_flops_per_s: float
    peak_source: str  # "datasheet: H100 SXM bf16 dense" or "measured: torch.mm float32 on cpu"
    mfu: float
    mfu_with_attention: float | None
    method: str  # "6N·tokens/s" or "FlopCounterMode FLOPs of one step / step time"


@dataclass
class ProfileReport:
    target: str  # "nanolm (preset tiny)" or the script's command line
    device: str
    scope: str  # what the profiler saw: "CPU only" or "CPU and CUDA"
    window: dict  # wait, warmup, active, repeat
    first_measured_step: int  # 1-based: steps before it were warm-up
    steps_measured: int
    step_ms: Stat
    phases: list[PhaseRow]
    categories: list[CategoryRow]
    top_ops: list[OpRow]
    ops_per_step: float
    syncs: list[SyncSite]
    device_busy: float | None  # share of the step the GPU was running a kernel
    settings: dict  # num_workers, pin_memory, autocast, compile, batch ... (None where unknown)
    tokens_per_step: int | None
    tokens_per_s: Stat | None
    mfu: MFU | None
    verdict: Verdict | None = None
    trace_path: str | None = None
    notes: list[str] = field(default_factory=list)
    script_error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ProfileReport:
        return _from_dict(cls, d)


_TYPES = {c.__name__: c for c in (Stat, PhaseRow, CategoryRow, OpRow, Verdict, MFU, SyncSite, ProfileReport)}


def _from_dict(cls: type, d: dict) -> Any:
    kwargs = {}
    for f in fields(cls):
        if f.name not in d:
            continue
        value, tp = d[f.name], str(f.type)
        inner = next((name for name in _TYPES if name in tp.replace("ProfileReport", "")), None)
        if inner and value is not None:
            sub = _TYPES[inner]
            value = [_from_dict(sub, v) for v in value] if tp.startswith("list[") else _from_dict(sub, value)
        kwargs[f.name] = value
    return cls(**kwargs)


def summarize_windows(windows: list[WindowStats], top: int = 12) -> dict:
    """Phase rows, category rows, top operators and step stats over repeated windows (median window
    for the tables, min-max over windows for the phases and the step). A phase's value is the median
    window's, not the median of each phase on its own: medians do not add, and the phases of one
    window tile its step exactly."""
    steps = [w.step_ms for w in windows]
    median_window = sorted(windows, key=lambda w: w.step_ms)[len(windows) // 2]
    step = Stat.of(steps)

    def row(phase: str, values: list[float], median: float) -> PhaseRow:
        return PhaseRow(phase, Stat(median, min(values), max(values)), median / step.median)

    phases = []
    for phase in PHASES:
        values = [w.phase_ms.get(phase, 0.0) for w in windows]
        if any(values):
            phases.append(row(phase, values, median_window.phase_ms.get(phase, 0.0)))
    rest = [w.step_ms - sum(w.phase_ms.values()) for w in windows]
    phases.append(row("unaccounted", rest, median_window.step_ms - sum(median_window.phase_ms.values())))
    total_self = sum(median_window.category_ms.values()) or 1.0
    categories = sorted((CategoryRow(c, median_window.category_calls.get(c, 0.0), median_window.category_ms.get(c, 0.0),
                                     median_window.category_ms.get(c, 0.0) / total_self)
                         for c in CATEGORIES if median_window.category_ms.get(c, 0.0) > 0),
                        key=lambda r: -r.self_ms)
    ops = sorted((OpRow(name, cat, calls, ms, ms / total_self) for (name, cat), (calls, ms) in median_window.ops.items()),
                 key=lambda r: -r.self_ms)[:top]
    busy = None
    if median_window.device_busy_ms is not None:
        busy = min(1.0, median_window.device_busy_ms / median_window.step_ms)
    return {"step_ms": step, "phases": phases, "categories": categories, "top_ops": ops,
            "ops_per_step": sum(median_window.category_calls.values()), "device_busy": busy,
            "steps_measured": sum(w.steps for w in windows)}
