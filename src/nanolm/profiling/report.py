"""Every result the profiler gives, as its JSON stores it: the ProfileReport and its parts (phases, categories,
operators, the verdict and its findings, MFU, the expectation, the isolation, communication), the GPU part
(DeviceStepReport: what ``nanolm profile`` prints first on a GPU), the data-parallel view (RanksReport) and the
before / after comparison (Comparison). Pure data, no torch: ``nanolm profile compare`` and the run's page read
these back with ``from_dict``.

GPU figures are per step, in ms, of the *unprofiled* step when it was measured (the idle rows then have the
profiler's own cost taken out by the calibrated replay, nanolm.profiling.measure.replay), else of the profiled
one; ``DeviceStepReport.basis`` says which."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from ..records import from_jsonable


@dataclass
class GpuRow:
    name: str  # a device class ("matmul/GEMM") or an idle bucket ("launching")
    kind: str  # "busy", "idle" or "overlap"
    ms: float  # per step
    share: float  # of the step
    top: list[str] = field(default_factory=list)  # the kernels of a class, or the host ops in an idle bucket


@dataclass
class DeviceStepReport:
    gate: str  # "computing", "waiting" or "mixed"
    gate_sentence: str  # the report's first line
    step_ms: float  # the step the rows divide: unprofiled when measured, else profiled
    basis: str  # "unprofiled" or "profiled"
    profiled_step_ms: float
    busy_ms: float
    busy_share: float
    rows: list[GpuRow]  # device classes, then idle buckets: adds up to 100% of the step
    steps: int  # steps in the analysed group
    kernels_per_step: float
    median_kernel_us: float | None
    short_kernel_share: float | None
    median_launch_us: float | None
    median_launch_delay_us: float | None
    max_queue_depth: int
    host_blocked_ms: float
    queue_full_ms: float
    post_sync_ms: float  # idle exposed after the script's syncs drained the queue
    top_kernels: list[list[Any]] = field(default_factory=list)  # [name, class, ms per step, calls per step]
    top_other: list[list[Any]] = field(default_factory=list)  # unclassified kernels [name, ms per step]
    matmul_tflops: float | None = None  # matmul FLOPs / matmul kernel time, TFLOP/s
    replay_error: float | None = None  # baseline replay / recorded step - 1
    profiler_cost_us: float | None = None  # calibrated cost per host event (us); None: not calibrated
    notes: list[str] = field(default_factory=list)
    trace: str | None = None  # the trace analysed

    @classmethod
    def from_dict(cls, d: dict) -> DeviceStepReport:
        return from_jsonable(cls, d)

    def row(self, name: str) -> GpuRow | None:
        return next((r for r in self.rows if r.name == name), None)


@dataclass
class Stat:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        return cls(statistics.median(values), min(values), max(values))


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
    """What limits a training step (the rules are in nanolm.profiling.judge.host); the value is the name
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
        named = (
            self.data_ms + self.between_ms + self.sync_ms + self.overhead_ms + self.elementwise_ms + self.matmul_ms + self.comm_ms
        )
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
    gate: str | None = None  # GPU runs: "computing", "waiting" or "mixed" (nanolm.profiling.measure.device); None: a CPU run

    def __post_init__(self) -> None:
        self.bottleneck = Bottleneck(self.bottleneck)  # a report read back from JSON holds the name


@dataclass
class MFU:
    """Model FLOPs utilization: the model's FLOP/s over the device's peak (``nanolm profile`` and ``nanolm profile
    mfu`` both give this; ``measure.mfu`` holds the one 6N formula). FLOP/s per second, fractions 0–1."""

    n_params: float  # N, non-embedding parameters
    tokens_per_s: float | None
    flops_per_s: float  # achieved model FLOP/s
    flops_per_s_with_attention: float | None
    peak_flops_per_s: float
    peak_source: str  # "datasheet: H100 SXM bf16" or "measured: torch.mm float32 on cpu"
    mfu: float
    mfu_with_attention: float | None
    method: str  # "6N·tokens/s" or "FlopCounterMode FLOPs of one step / step time"
    flops_per_token: float | None = None  # 6N, when the FLOPs came from the formula
    flops_per_token_with_attention: float | None = None  # 6N + 12·L·d·T
    n_layer: int | None = None  # the model's shape the attention term used
    d_model: int | None = None
    seq_len: int | None = None


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
    each measure is defined in nanolm.profiling.measure.comm."""

    in_flight_ms: float  # a collective in flight (any thread, or an NCCL kernel)
    share: float  # in flight, of the step
    exposed_ms: float  # the step waiting for collectives (nothing hides it): what perfect overlap would remove
    exposed_share: float
    overlap_ms: float  # in flight while backward's operators (CPU) or compute kernels (GPU) ran
    overlap: float  # overlap_ms / in_flight_ms: the share of communication hidden behind that work
    overlap_with: str  # "backward" or "compute kernels"
    backend: str | None  # "gloo", "nccl"; None when the names do not say
    collectives: list[CollectiveRow] = field(default_factory=list)


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
    # data-parallel profile are compared window by window (nanolm.profiling.record.ranks)
    window_step_ms: list[float] = field(default_factory=list)
    window_exposed_ms: list[float] = field(default_factory=list)
    # the step as the script runs it without the profiler: the median of the clocked reference steps outside the
    # recording (nanolm.profiling.measure.clock); None: not measured (a report from before the step clock, a short run)
    unprofiled_step_ms: Stat | None = None
    profiled_over_unprofiled: float | None = None  # profiled step / unprofiled step (1.63: the profiler added 63%)
    boundary_ms: float | None = None  # the extra time of the step in which the recording started or stopped
    gpu: DeviceStepReport | None = None  # the device timeline from the trace (nanolm.profiling.measure.device); None: no GPU

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ProfileReport:
        return from_jsonable(cls, d)

    def problems(self) -> list[str]:
        """What makes this not a readable report (empty when it is fine): the check `profile compare`
        makes on every file it reads, and that every report `nanolm profile` writes passes."""
        stats = [
            ("step_ms", self.step_ms),
            ("tokens_per_s", self.tokens_per_s),
            *((f"phase {p.phase}", p.ms) for p in self.phases),
        ]
        out = []
        for name, stat in stats:
            if stat is None and name != "step_ms":  # optional measures
                continue
            values = [stat.median, stat.min, stat.max] if isinstance(stat, Stat) else [stat]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values):
                out.append(f"{name} is {values}, not finite numbers >= 0")
        if not out and self.step_ms.min <= 0:
            out.append(f"a step time of {self.step_ms.min} ms is not a measurement")
        return out


@dataclass
class SyncSite:
    kind: str  # ".item()", "printing a tensor", "torch.cuda.synchronize()", ...
    location: str  # "path/to/train.py:42"
    function: str
    code: str  # the source line
    count: int  # calls during the measured steps
    per_step: float


@dataclass
class RankRow:
    """One rank's profile in a line (ms per step of its median window)."""

    rank: int
    step_ms: float
    work_ms: float  # step less exposed communication: this rank's own work (median over the windows)
    in_flight_ms: float  # a collective in flight
    exposed_ms: float  # waiting for collectives (on a faster rank: mostly waiting for the slowest)
    overlap: float  # share of in-flight communication hidden behind backward (or compute kernels)
    verdict: str  # this rank's own bottleneck
    headline: str
    trace_path: str | None = None
    gate: str | None = None  # GPU ranks: "computing", "waiting" or "mixed" (nanolm.profiling.measure.device); None on a CPU
    busy_share: float | None = None  # GPU ranks: the device's busy share of the step

    @property
    def comm_share(self) -> float:
        return self.in_flight_ms / self.step_ms if self.step_ms else 0.0

    @property
    def exposed_share(self) -> float:
        return self.exposed_ms / self.step_ms if self.step_ms else 0.0


@dataclass
class RanksReport:
    target: str  # the script's command line, or "nanolm (preset ...)"
    world_size: int
    backend: str | None  # "gloo", "nccl"; None when no collective was recorded
    rows: list[RankRow]
    step_ms: Stat  # over the ranks' median steps
    slowest_rank: int
    fastest_rank: int
    spread_ms: float  # the slowest rank's work less the fastest rank's (each the median over the windows)
    spread_share: float  # of the median step
    straggler: int | None  # the slowest rank, when it is the slowest in every window by STRAGGLER_SHARE of the step
    windows: int = 1  # windows compared
    slowest_in_windows: int = 1  # of them, those in which the slowest rank was the slowest
    window_spread_ms: list[float] = field(default_factory=list)  # the slowest rank's extra work in each window
    verdict: Verdict | None = None  # the merged verdict (the slowest rank's, with the ranks' evidence)
    reports: list[ProfileReport] = field(default_factory=list)  # each rank's whole profile, by rank
    notes: list[str] = field(default_factory=list)
    merged_trace: str | None = None  # every rank in one timeline
    script_exit_code: int | None = None

    @property
    def ranks(self) -> list[int]:
        """The ranks' numbers, in the order of rows and reports (0, 1, ... for a launched job; a folder's own)."""
        return [row.rank for row in self.rows]

    def position(self, rank: int) -> int:
        """Where rank's row and report are in rows and reports."""
        return self.ranks.index(rank)

    def to_dict(self) -> dict:
        out = asdict(self)
        for row, d in zip(self.rows, out["rows"], strict=True):
            d["comm_share"], d["exposed_share"] = row.comm_share, row.exposed_share
        return out


class Change(str, Enum):
    BETTER = "better"
    WORSE = "worse"
    NOISE = "within noise"
    TOO_SMALL = "too small to compare"
    MISSING = "in one report only"

    def __str__(self) -> str:
        return self.value


@dataclass
class ComparisonRow:
    metric: str
    before: Stat | None
    after: Stat | None
    change: float | None  # (after - before) / before, of the medians; None when either rounds to zero
    beyond_spread: bool | None  # ranges disjoint and the change larger than either spread
    better: bool | None  # beyond the spread and the good way (lower time, higher throughput); else None
    status: Change = Change.MISSING
    unit: str = "ms"  # "ms", "tokens/s" or "fraction" (MFU)


@dataclass
class Comparison:
    before: str
    after: str
    why: str | None
    rows: list[ComparisonRow]
    verdict_before: Bottleneck | str  # "-" when the report has no verdict
    verdict_after: Bottleneck | str
    warnings: list[str] = field(default_factory=list)  # unstable reports, values read leniently
