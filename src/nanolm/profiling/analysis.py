"""From profiler events to numbers: per-step phase times, operator categories by self time (no
microsecond counted twice), the busy share of the GPU, whether the repeated windows agree, and the
report that carries them."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from ..records import from_jsonable
from .categories import BETWEEN, CATEGORIES, COMMUNICATION, DATA, HOST, OPTIMIZER, SYNC, categorize, is_annotation
from .comm import CommStats, comm_window
from .gpu_report import DeviceStepReport
from .syncs import SyncSite

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


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total / 1000.0


def _annotation_category(name: str, context: str | None, in_sync: bool) -> str:
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
            annotations.append((event, _annotation_category(event.name, context, in_sync)))
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
        busy = _union_ms([(e.time_range.start, e.time_range.end) for e in device]) / n
        device_cat = defaultdict(float)
        for e in device:
            device_cat[categorize(e.name)] += e.time_range.elapsed_us() / 1000.0 / n
        device_cat = dict(device_cat)
    comm = comm_window(cpu_events, device, annotations, n)
    if comm is not None:  # the main thread's waits for collectives: communication, not the host's overhead
        for category, ms in comm.wait_by_category.items():
            category_ms[category] -= ms
            category_ms[COMMUNICATION] += ms
    return WindowStats(len(steps), step_ms, dict(phase_ms), dict(category_ms), dict(category_calls),
                       {k: (v[0], v[1]) for k, v in ops.items()}, busy, device_cat, comm)


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
    COMMUNICATION = "communication-bound"

    def __str__(self) -> str:  # the name, also in f-strings, on every Python version
        return self.value


@dataclass
class StepParts:
    """A measured step split into disjoint parts, ms per step (the median window), which the verdict's
    findings rank. On a CPU they are the host's self times by category; on a GPU the matmul and elementwise
    parts are the device's kernel times and the overhead is the time the device sits idle for no other
    part's reason."""

    step_ms: float
    data_ms: float = 0.0  # waiting for the DataLoader (its __next__)
    between_ms: float = 0.0  # from an optimizer step to the next forward: hand-written loading, logging, zero_grad
    sync_ms: float = 0.0  # the host blocked in the script's own syncs (.item(), ...)
    overhead_ms: float = 0.0  # CPU: Python between ops + calls under 20 us; GPU: device idle for no other part
    elementwise_ms: float = 0.0  # elementwise & normalization (calls of 20 us and more)
    matmul_ms: float = 0.0  # matmul and attention (calls of 20 us and more)
    comm_ms: float = 0.0  # exposed collective communication (torch.distributed): waiting for it, not hidden behind work
    ideal_matmul_ms: float | None = None  # the step's model FLOPs at the device's peak (MFU × step); None: unknown
    on_gpu: bool = False
    floor_ms: float = 0.0  # GPU: the device's busy time, which removing host-side parts cannot go below

    @property
    def rest_ms(self) -> float:
        """The step's time in no part: the optimizer, copies, other operators, unaccounted."""
        named = (self.data_ms + self.between_ms + self.sync_ms + self.overhead_ms + self.elementwise_ms
                 + self.matmul_ms + self.comm_ms)
        return max(0.0, self.step_ms - named)


@dataclass
class Finding:
    """One thing that takes time in the step, with what fixing it would buy (Amdahl: the step less the
    time the fix removes, never more than the part's own time)."""

    bottleneck: Bottleneck
    what: str  # plain words
    ms: float  # its time per step
    share: float  # of the step
    projected_step_ms: float | None  # the step were it fixed; None when the gain cannot be worked out
    fix: str | None  # cheapest fix; None when none is known here
    speedup: float | None = None  # step now / projected step (1.25: 25% more steps per second)
    evidence: list[str] = field(default_factory=list)
    hazard: bool = False  # free on this device, costly on a GPU: listed, never ranked
    upper_bound: bool = False  # the projection is an "up to" (launch overhead fused away entirely)
    no_fix_left: str | None = None  # why no fix is offered: "bf16 autocast and torch.compile already on"

    def __post_init__(self) -> None:
        self.bottleneck = Bottleneck(self.bottleneck)


@dataclass
class Verdict:
    bottleneck: Bottleneck
    headline: str  # one sentence in plain words
    evidence: list[str]
    fixes: list[str]  # the ranked findings' fixes in rank order, those already in place left out
    also: list[str] = field(default_factory=list)  # lesser findings
    left_out: list[str] = field(default_factory=list)  # fixes this device would not gain from, with the measurement
    findings: list[Finding] = field(default_factory=list)  # by the time they take, cheapest fix first among equals
    hazards: list[Finding] = field(default_factory=list)  # free here, costly on a GPU (host-device syncs on a CPU)
    together_ms: float | None = None  # the step with every ranked finding fixed at once (disjoint parts)
    gate: str | None = None  # GPU runs: "computing", "waiting" or "mixed" (nanolm.profiling.gpu); None: a CPU run

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
class Expectation:
    """``--expect`` / ``--expect-mfu`` beside the measurement: how far off the run is, and where the time goes."""

    given: str  # what the user gave: "--expect 5000 tokens/s" or "--expect-mfu 0.40"
    formula: str  # the expectation worked out: "peak 2.1e11 FLOP/s × MFU 0.40 / (6 × 1.2e7) = 1,167 tokens/s"
    expected_step_ms: float
    measured_step_ms: float
    expected_tokens_per_s: float | None
    measured_tokens_per_s: float | None
    expected_mfu: float | None  # the MFU the expectation means on this peak
    measured_mfu: float | None
    slower: float  # measured step / expected step (2.9 = "2.9× slower than expected"; < 1: faster)
    missing_ms: float  # measured - expected step, per step (<= 0: nothing missing)
    explained: list[tuple[str, float]] = field(default_factory=list)  # (finding, ms of the missing time it covers)
    unexplained_ms: float = 0.0  # missing time no finding covers


@dataclass
class Isolation:
    """``--isolate``: the input pipeline alone and the model alone, each measured, beside the profiled step,
    so that "input-bound" or "model-bound" rests on two measurements rather than on an inference."""

    step_ms: float  # the profiled step (median), ms
    # one step's batches (grad_accum of them) from the input pipeline alone (no model), ms; None: no DataLoader
    loader_ms: Stat | None
    model_ms: Stat | None  # one training step of the model alone on replayed batches (no loader), ms
    loader_what: str  # what was iterated ("DataLoader(num_workers=0), 20 batches"), or why nothing was
    model_what: str  # what was replayed ("the first real batch, 10 steps"), or why nothing was
    bound: str  # "input-bound", "model-bound", or "neither alone" (the two overlap or both are small)
    explanation: str  # one sentence with the numbers


@dataclass
class CollectiveRow:
    kind: str  # "all_reduce", "broadcast", "barrier", "all_gather" ...
    calls_per_step: float
    in_flight_ms: float  # per step


@dataclass
class Communication:
    """Collective communication (torch.distributed) in the measured steps, ms per step of the median window;
    each measure is defined in nanolm.profiling.comm."""

    in_flight_ms: float  # a collective in flight (any thread, or an NCCL kernel)
    share: float  # in flight, of the step
    exposed_ms: float  # the step waiting for collectives (nothing hides it): what perfect overlap would remove
    exposed_share: float
    overlap_ms: float  # in flight while backward's operators (CPU) or compute kernels (GPU) ran
    overlap: float  # overlap_ms / in_flight_ms: the share of communication hidden behind that work
    overlap_with: str  # "backward" or "compute kernels"
    backend: str | None  # "gloo", "nccl"; None when the names do not say
    collectives: list[CollectiveRow] = field(default_factory=list)

    @classmethod
    def of(cls, window: WindowStats) -> Communication | None:
        c = window.comm
        if c is None:
            return None
        step = window.step_ms or 1.0
        rows = [CollectiveRow(kind, c.calls.get(kind, 0.0), c.kind_ms.get(kind, 0.0))
                for kind in sorted(set(c.calls) | set(c.kind_ms), key=lambda k: -c.kind_ms.get(k, 0.0))]
        return cls(c.in_flight_ms, c.in_flight_ms / step, c.exposed_ms, c.exposed_ms / step, c.overlap_ms,
                   c.overlap_ms / c.in_flight_ms if c.in_flight_ms else 0.0, c.overlap_with, c.backend, rows)


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
    script_exit_code: int | None = None  # how the script ended on its own (1: an uncaught error); None: stopped by nanolm
    unstable: list[str] = field(default_factory=list)  # measures on which the windows disagree (the stability rule)
    trace_replaced: list[str] = field(default_factory=list)  # files the new trace replaced
    profiler_log: str | None = None  # the profiler library's own messages, kept out of the terminal
    step_parts: StepParts | None = None  # the step split into disjoint parts the findings rank (verdict.py)
    expectation: Expectation | None = None  # --expect / --expect-mfu: the expected step and where the rest goes
    isolation: Isolation | None = None  # --isolate: loader alone and model alone, measured
    communication: Communication | None = None  # collectives (torch.distributed), when the steps ran any
    # each measured window's step and exposed communication (ms, in the order measured): the ranks of a
    # data-parallel profile are compared window by window (nanolm.profiling.ranks)
    window_step_ms: list[float] = field(default_factory=list)
    window_exposed_ms: list[float] = field(default_factory=list)
    # the step as the script runs it without the profiler: the median of the clocked reference steps outside the
    # recording (nanolm.profiling.clock); None: not measured (a report from before the step clock, a short run)
    unprofiled_step_ms: Stat | None = None
    profiled_over_unprofiled: float | None = None  # profiled step / unprofiled step (1.63: the profiler added 63%)
    boundary_ms: float | None = None  # the extra time of the step in which the recording started or stopped
    gpu: DeviceStepReport | None = None  # the device timeline from the trace (nanolm.profiling.gpu); None: no GPU

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ProfileReport:
        return from_jsonable(cls, d)

    def problems(self) -> list[str]:
        """What makes this not a readable report (empty when it is fine): the check `profile compare`
        makes on every file it reads, and that every report `nanolm profile` writes passes."""
        stats = [("step_ms", self.step_ms), ("tokens_per_s", self.tokens_per_s),
                 *((f"phase {p.phase}", p.ms) for p in self.phases)]
        out = []
        for name, stat in stats:
            if stat is None and name != "step_ms":  # optional measures
                continue
            values = [stat.median, stat.min, stat.max] if isinstance(stat, Stat) else [stat]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                       for v in values):
                out.append(f"{name} is {values}, not finite numbers >= 0")
        if not out and self.step_ms.min <= 0:
            out.append(f"a step time of {self.step_ms.min} ms is not a measurement")
        return out


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
        note = (f"the phase ranges overran the step by up to {-raw[id(worst)]:.2f} ms "
                f"({-raw[id(worst)] / worst.step_ms:.1%} of a {worst.step_ms:.2f} ms step: clock skew between the step "
                "marker and the phase ranges); unaccounted time is shown as 0 there")
    return [max(0.0, raw[id(w)]) for w in windows], max(0.0, raw[id(middle)]), note


def median_window(windows: list[WindowStats]) -> WindowStats:
    """The window whose step time is the median (with an even count, the upper of the two middle ones)."""
    return sorted(windows, key=lambda w: w.step_ms)[len(windows) // 2]


def summarize_windows(windows: list[WindowStats], top: int = 12) -> dict:
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
    categories = sorted((CategoryRow(c, middle.category_calls.get(c, 0.0), middle.category_ms.get(c, 0.0),
                                     middle.category_ms.get(c, 0.0) / total_self)
                         for c in CATEGORIES if middle.category_ms.get(c, 0.0) > 0),
                        key=lambda r: -r.self_ms)
    ops = sorted((OpRow(name, cat, calls, ms, ms / total_self) for (name, cat), (calls, ms) in middle.ops.items()),
                 key=lambda r: -r.self_ms)[:top]
    busy = None
    if middle.device_busy_ms is not None:
        busy = min(1.0, middle.device_busy_ms / middle.step_ms)
    return {"step_ms": step, "phases": phases, "categories": categories, "top_ops": ops,
            "communication": Communication.of(middle), "window_step_ms": steps,
            "window_exposed_ms": [w.comm.exposed_ms if w.comm is not None else 0.0 for w in windows],
            "ops_per_step": sum(middle.category_calls.values()), "device_busy": busy,
            "steps_measured": sum(w.steps for w in windows), "notes": [skew_note] if skew_note else [],
            "unstable": disagreements(windows)}
