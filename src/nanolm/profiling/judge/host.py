"""The verdict: what takes the time in a step, ranked, each with what its fix would buy.

"Speed up what takes the time, not what is easiest to speed up." The step is split into disjoint parts
(StepParts, ms per step), and each part that costs time becomes a finding:

    part             finding                  projected step if fixed (Amdahl)          fix (cost rank)
    between steps    input-bound              step - between (loading prefetched, logs   prefetch / log every N (1)
                                              every N steps)
    data loader      input-bound              step - data (loading hidden behind compute) DataLoader workers (2)
    syncs (GPU)      host-sync-bound          step - sync                               remove the syncs (0)
    overhead         launch/overhead-bound    step - overhead (fused away)              torch.compile (3)
    elementwise      memory-bound             step - elementwise / 2 (half the bytes)   bf16 / torch.compile (4)
    matmul+attention compute-bound            step - (matmul - FLOPs at the peak)       bf16 / larger batch (5)
    communication    communication-bound      step - exposed collectives (all hidden    overlap / no_sync (6)
                                              behind backward; nanolm.profiling.measure.comm)

Findings are ranked by their time per step, by the one ranker both verdicts share (judge.findings: within 5%
of the step of each other, the cheaper fix first). A projection never promises more than the
part's own time. On a CPU (or MPS) a host-device sync costs nothing: syncs are listed as hazards ("on
a GPU this would ..."), with their file:line, and never ranked. The reference example, as numbers:
100 ms = 50 data + 30 sync + 20 compute: removing the sync and hiding loading gives 20 ms (5×); 2×
faster matmuls give `amdahl(100, [(20, 2)])` = 90 ms (10%).

The fixes follow the device the steps ran on (DeviceFacts): bf16 autocast only where bf16 is faster
than float32 there (a CUDA GPU that supports bf16; elsewhere the measured matmul peaks of both dtypes,
measured once per process), pin_memory only with a GPU, and num_workers no more than the CPU cores this
process may use, less one for the training loop (at most 8).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..measure.host import WindowStats
from ..report import Bottleneck, Communication, Finding, StepParts, SyncSite, Verdict
from ..trace.classify import ATTENTION, BETWEEN, COMMUNICATION, COPY, DATA, ELEMENTWISE, HOST, MATMUL, OTHER, SYNC
from .findings import Candidate, fix_cost, ranked

MAX_WORKERS = 8


TINY_CALL_US = 20.0  # an operator call shorter than this is dispatch (and launch), not work


_MODEL_CATEGORIES = (MATMUL, ATTENTION, ELEMENTWISE, COPY, OTHER)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class DeviceFacts:
    """What the advice depends on, from the device that ran the steps."""

    type: str = "cpu"  # "cpu", "cuda", "mps"
    cores: int = 1
    bf16_faster: bool | None = None  # None: asked of bf16_probe when a bf16 fix is first considered
    bf16_evidence: str = ""
    # Times bf16 against float32 matmuls on this device (record.peak.bf16_vs_float32: a live run's, the only part
    # of the profiler that runs torch); None: nothing to time it on, so a bf16 fix is not judged.
    bf16_probe: Callable[[str], tuple[bool, str]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def here(cls, device_type: str, bf16_probe: Callable[[str], tuple[bool, str]] | None = None) -> DeviceFacts:
        return cls(device_type, usable_cores(), bf16_probe=bf16_probe)

    @property
    def gpu(self) -> bool:
        return self.type == "cuda"

    def bf16_helps(self) -> bool:
        if self.bf16_faster is None:
            if self.bf16_probe is None:
                self.bf16_faster, self.bf16_evidence = False, "not judged: bf16 was not timed against float32 here"
            else:
                self.bf16_faster, self.bf16_evidence = self.bf16_probe(self.type)
        return self.bf16_faster

    def workers(self) -> tuple[int, int]:
        """The num_workers range worth trying: 2 (or fewer) up to the cores less one, at most MAX_WORKERS."""
        high = max(1, min(MAX_WORKERS, self.cores - 1))
        return min(2, high), high


def amdahl(step_ms: float, changes: Iterable[tuple[float, float]]) -> float:
    """The step time after speeding up parts of it: each change is (the part's ms, its speed-up factor;
    math.inf removes it). Parts must be disjoint; the result is never below 0."""
    saved = sum(ms * (1 - 1 / factor) for ms, factor in changes)
    return max(0.0, step_ms - saved)


def step_parts(window: WindowStats, on_gpu: bool) -> StepParts:
    """The disjoint parts of one window's step (ms per step). On a CPU: self times by category, with the
    calls under TINY_CALL_US counted as overhead. On a GPU: kernel times for matmul and elementwise, and as
    overhead the step's time with the device idle that no data, between-steps or sync time explains."""
    host = window.category_ms
    data, between, sync = host.get(DATA, 0.0), host.get(BETWEEN, 0.0), host.get(SYNC, 0.0)
    if on_gpu and window.device_category_ms is not None and window.device_busy_ms is not None:
        device = window.device_category_ms
        idle = max(0.0, window.step_ms - window.device_busy_ms - data - between - sync)
        comm = window.comm.exposed_ms if window.comm is not None else 0.0  # NCCL kernels with no compute beside them
        return StepParts(
            window.step_ms,
            data,
            between,
            sync,
            idle,
            device.get(ELEMENTWISE, 0.0),
            device.get(MATMUL, 0.0) + device.get(ATTENTION, 0.0),
            comm_ms=comm,
            on_gpu=True,
            floor_ms=min(window.device_busy_ms - comm, window.step_ms),
        )
    tiny: dict[str, float] = {}
    for (_, category), (calls, ms) in window.ops.items():
        if category in _MODEL_CATEGORIES and calls and ms / calls * 1000 < TINY_CALL_US:
            tiny[category] = tiny.get(category, 0.0) + ms
    overhead = host.get(HOST, 0.0) + sum(tiny.values())
    elementwise = host.get(ELEMENTWISE, 0.0) - tiny.get(ELEMENTWISE, 0.0)
    matmul = sum(host.get(c, 0.0) - tiny.get(c, 0.0) for c in (MATMUL, ATTENTION))
    return StepParts(
        window.step_ms,
        data,
        between,
        sync,
        overhead,
        max(0.0, elementwise),
        max(0.0, matmul),
        comm_ms=host.get(COMMUNICATION, 0.0),
    )


def _fix_texts(settings: dict, facts: DeviceFacts) -> dict[str, str]:
    low, high = facts.workers()
    workers = f"num_workers={low}..{high}" if low < high else f"num_workers={high}"
    return {
        "remove syncs": "remove the per-step syncs: keep the loss on the device (loss.detach()) and read it every N steps",
        "prefetch": (
            "take the loading out of the loop's critical path: prefetch the next batch in a background "
            "thread or a DataLoader with workers, and log every N steps instead of every step"
        ),
        "data loader": (
            f"load data in parallel: DataLoader({workers}"
            + (", pin_memory=True" if facts.gpu and not settings.get("pin_memory") else "")
            + f"; {facts.cores} CPU core{'s' if facts.cores != 1 else ''} here), and move heavy "
            "per-item work out of __getitem__ (precompute or cache it)"
        ),
        "bf16 autocast": "run forward and backward under torch.autocast(dtype=torch.bfloat16)",
        "torch.compile": "torch.compile the model, which fuses small elementwise ops into fewer kernels",
        "larger batch": "use a larger batch (or fewer, larger ops) so each launch does more work",
        "overlap communication": (
            "hide the gradient all-reduce behind backward: keep DDP's bucketing (bucket_cap_mb, "
            "gradient_as_bucket_view=True, find_unused_parameters only when needed), all-reduce "
            "once per several micro-batches (model.no_sync() during gradient accumulation), or a "
            "larger per-rank batch; when another rank is slower, this rank is waiting for it: "
            "balance the ranks (nanolm profile --nproc names the slowest)"
        ),
    }


def _in_place(kind: str, settings: dict, facts: DeviceFacts) -> bool:
    if kind == "data loader":
        return bool(settings.get("num_workers")) and (not facts.gpu or bool(settings.get("pin_memory")))
    return bool(settings.get({"bf16 autocast": "autocast", "torch.compile": "compile"}.get(kind, "")))


class Fixes:
    """The first fix of a list of kinds that is not in place and helps on this device; remembers what it
    left out because this device would not gain from it (with the measurement)."""

    def __init__(self, settings: dict, facts: DeviceFacts) -> None:
        self.settings, self.facts = settings, facts
        self.text = _fix_texts(settings, facts)
        self.left_out: list[str] = []

    def first(self, kinds: list[str]) -> str | None:
        for kind in kinds:
            if _in_place(kind, self.settings, self.facts):
                continue
            if kind == "bf16 autocast" and not self.facts.bf16_helps():
                evidence = self.facts.bf16_evidence
                note = (
                    f"bf16 autocast: {evidence}"
                    if evidence.startswith("not judged")
                    else f"bf16 autocast: it would be slower here ({evidence})"
                )
                if note not in self.left_out:
                    self.left_out.append(note)
                continue
            return kind
        return None


def _candidates(
    p: StepParts, syncs: list[SyncSite], settings: dict, ops_per_step: float | None, communication: Communication | None = None
) -> list[Candidate]:
    step = p.step_ms
    share = lambda ms: ms / step if step else 0.0  # noqa: E731
    out = [
        Candidate(
            Bottleneck.INPUT,
            "time between steps, from one optimizer step to the next forward (loading batches by hand, logging, zero_grad)",
            p.between_ms,
            projected_ms=step - p.between_ms,
            fix_kinds=["prefetch"],
            evidence=[
                f"between steps {p.between_ms:.1f} ms of a {step:.1f} ms step ({share(p.between_ms):.0%}), no DataLoader in it"
            ],
        ),
        Candidate(
            Bottleneck.INPUT,
            "waiting for the DataLoader",
            p.data_ms,
            projected_ms=step - p.data_ms,
            fix_kinds=["data loader", "prefetch"],
            evidence=[
                f"data phase {p.data_ms:.1f} ms of a {step:.1f} ms step ({share(p.data_ms):.0%})",
                f"DataLoader num_workers={settings.get('num_workers', 'unknown')}",
            ],
        ),
        Candidate(
            Bottleneck.LAUNCH_OVERHEAD,
            "per-operator overhead, not math (Python between ops, calls too "
            "short to do real work" + (", the GPU idle meanwhile)" if p.on_gpu else ")"),
            p.overhead_ms,
            projected_ms=step - p.overhead_ms,
            fix_kinds=["torch.compile", "larger batch"],
            evidence=[
                f"overhead {p.overhead_ms:.1f} ms ({share(p.overhead_ms):.0%})"
                + (f"; {ops_per_step:.0f} operators per step" if ops_per_step else "")
            ],
        ),
        Candidate(
            Bottleneck.MEMORY,
            "memory-bound kernels (elementwise, normalization)",
            p.elementwise_ms,
            projected_ms=step - p.elementwise_ms / 2,
            fix_kinds=["bf16 autocast", "torch.compile"],
            evidence=[
                f"elementwise & normalization {p.elementwise_ms:.1f} ms ({share(p.elementwise_ms):.0%}); "
                "the projection halves the bytes they move"
            ],
        ),
    ]
    compute_evidence = [f"matmul + attention {p.matmul_ms:.1f} ms ({share(p.matmul_ms):.0%})"]
    projected = None
    if p.ideal_matmul_ms is not None:
        projected = step - max(0.0, p.matmul_ms - p.ideal_matmul_ms)
        compute_evidence.append(f"at the device's peak the step's FLOPs take {p.ideal_matmul_ms:.1f} ms")
    out.append(
        Candidate(
            Bottleneck.COMPUTE,
            "matmuls and attention (the hardware computing)",
            p.matmul_ms,
            projected_ms=projected,
            fix_kinds=["bf16 autocast", "larger batch"],
            evidence=compute_evidence,
        )
    )
    if p.comm_ms > 0:
        out.append(
            Candidate(
                Bottleneck.COMMUNICATION,
                "waiting for collective communication (gradient all-reduce, broadcast, barrier), not hidden behind computation",
                p.comm_ms,
                projected_ms=step - p.comm_ms,
                fix_kinds=["overlap communication"],
                evidence=_comm_evidence(p, communication),
            )
        )
    if p.on_gpu and syncs:
        out.append(
            Candidate(
                Bottleneck.HOST_SYNC,
                f"the host waiting for the GPU {_per_step(syncs)} per step",
                p.sync_ms,
                projected_ms=step - p.sync_ms,
                fix_kinds=["remove syncs"],
                evidence=_sync_evidence(syncs),
            )
        )
    return out


def _comm_evidence(p: StepParts, c: Communication | None) -> list[str]:
    share = p.comm_ms / p.step_ms if p.step_ms else 0.0
    out = [f"communication exposed {p.comm_ms:.1f} ms of a {p.step_ms:.1f} ms step ({share:.0%})"]
    if c is not None:
        kinds = ", ".join(f"{r.kind} {r.calls_per_step:.0f}/step" for r in c.collectives if r.calls_per_step)
        out.append(
            f"collectives in flight {c.in_flight_ms:.1f} ms a step, {c.overlap:.0%} of it behind {c.overlap_with}"
            + (f" ({kinds}; {c.backend})" if kinds and c.backend else f" ({kinds})" if kinds else "")
        )
    return out


def _per_step(syncs: list[SyncSite]) -> str:
    n = sum(s.per_step for s in syncs)
    return f"{n:.0f} time{'s' if round(n) != 1 else ''}"


def _sync_evidence(syncs: list[SyncSite]) -> list[str]:
    return [f"{s.kind} at {s.location} ({s.per_step:.1f}/step): {s.code}" for s in syncs[:3]]


def _hazards(p: StepParts, syncs: list[SyncSite], fixes: Fixes) -> list[Finding]:
    """Syncs on a device where they cost nothing: what each would do on a GPU."""
    if p.on_gpu or not syncs:
        return []
    what = (
        f"on a GPU this would cost a stall {_per_step(syncs)} per step: the host waits until every queued "
        "kernel has finished, so the CPU cannot run ahead of the GPU (here, on a CPU, it costs nothing)"
    )
    return [
        Finding(
            Bottleneck.HOST_SYNC,
            what,
            p.sync_ms,
            p.sync_ms / p.step_ms if p.step_ms else 0.0,
            None,
            fixes.text["remove syncs"],
            None,
            _sync_evidence(syncs),
            hazard=True,
        )
    ]


def decide(
    parts: StepParts,
    syncs: list[SyncSite],
    settings: dict,
    facts: DeviceFacts | None = None,
    ops_per_step: float | None = None,
    communication: Communication | None = None,
) -> Verdict:
    """The ranked findings of a step and the verdict they give (the first finding's bottleneck)."""
    facts = facts or DeviceFacts.here("cuda" if parts.on_gpu else "cpu")
    fixes = Fixes(settings, facts)
    step = parts.step_ms
    candidates = [
        c
        for c in _candidates(parts, syncs, settings, ops_per_step, communication)
        if c.ms > 0 or c.bottleneck is Bottleneck.COMPUTE
    ]
    findings = []
    for c in ranked(candidates, step, gain=lambda c: c.ms, cost=lambda c: fix_cost(c.fix_kinds), ms=lambda c: c.ms):
        kind = fixes.first(c.fix_kinds)
        projected = None if kind is None or c.projected_ms is None else max(c.projected_ms, step - c.ms)
        if projected is not None and c.bottleneck is not Bottleneck.COMPUTE:  # the device's own work stays
            projected = max(projected, min(parts.floor_ms, step))
        findings.append(
            Finding(
                c.bottleneck,
                c.what,
                c.ms,
                c.ms / step if step else 0.0,
                projected,
                None if kind is None else fixes.text[kind],
                step / projected if projected else None,
                c.evidence,
            )
        )
    top = findings[0]
    hazards = _hazards(parts, syncs, fixes)
    headline = f"{top.what}: {top.ms:.1f} ms of a {step:.1f} ms step ({top.share:.0%})"
    evidence = top.evidence + [f"{s.kind} at {s.location}: a GPU hazard, free here" for s in syncs[:1] if hazards]
    fix_list = list(dict.fromkeys(f.fix for f in findings if f.fix))
    also = [f"{f.bottleneck.value}: {f.what} ({f.ms:.1f} ms, {f.share:.0%})" for f in findings[1:] if f.ms > 0]
    return Verdict(
        top.bottleneck, headline, evidence, fix_list, also, fixes.left_out, findings, hazards, _together(parts, findings)
    )


def _together(parts: StepParts, findings: list[Finding]) -> float | None:
    """The step with every finding that has a projection fixed at once (the parts are disjoint, so the
    savings add); None when fewer than two findings have one."""
    gains = [parts.step_ms - f.projected_step_ms for f in findings if f.projected_step_ms is not None]
    if len(gains) < 2:
        return None
    floor = parts.floor_ms - next(
        (
            parts.step_ms - f.projected_step_ms
            for f in findings
            if f.bottleneck is Bottleneck.COMPUTE and f.projected_step_ms is not None
        ),
        0.0,
    )
    return max(amdahl(parts.step_ms, [(gain, math.inf) for gain in gains]), floor)
