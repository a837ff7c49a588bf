"""The GPU part of a profile report, as stored in its JSON: what ``nanolm profile`` prints first on a GPU.

Every figure is per step, in ms, of the *unprofiled* step when it was measured (the idle rows then have
the profiler's own cost taken out by the calibrated replay, nanolm.profiling.replay), else of the
profiled one; ``basis`` says which."""

from __future__ import annotations

from dataclasses import dataclass, field
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
