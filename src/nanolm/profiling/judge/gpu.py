"""The verdict on a GPU run: is the GPU computing or waiting, on what, and what each fix would buy.

1. **The gate** (nanolm.profiling.measure.device): busy share of the step (the unprofiled step when measured).
2. **The bottleneck follows the gate**, never the ranking:

   =========  ==================================================================================
   computing  the largest device class group: matmul + attention -> compute-bound; elementwise,
              norms, optimizer, device copies -> memory-bound; host<->device copies -> input-bound;
              NCCL -> communication-bound ("other" never decides: the largest classified group does)
   waiting    the largest idle group: launching + kernel-to-kernel gaps -> launch/overhead-bound;
              between steps, data loader, batch making -> input-bound; sync waits -> host-sync-bound
   mixed      whichever of the two above is larger in ms
   =========  ==================================================================================

3. **Findings** are projected by replaying the recorded steps with the fix applied (nanolm.profiling.measure.replay),
   so shrinking kernels saves nothing while the GPU waits and removing a sync saves only the idle it
   exposes. They are ranked by time saved (judge.findings); within RANK_BUCKET of the step the cheaper applicable fix goes
   first, and a finding whose fixes are all in place cannot win a tie. A finding saving under LEAD_FLOOR
   cannot lead; when none saves HEADLINE_FLOOR the headline says the setup is near its limit. "All fixed
   together" is one replay with every change, not a sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..measure.device import (
    BETWEEN,
    COMPUTING,
    DATA_LOADER,
    DEVICE_WAITS,
    IDLE_BUCKETS,
    KERNEL_GAPS,
    LAUNCHING,
    MIXED,
    STEP_DATA,
    SYNC_WAIT,
    WAITING,
    DeviceStep,
    analyze_device,
    gate_of,
)
from ..measure.replay import Replayer, SyncItem, WhatIf, build_replayer
from ..report import Bottleneck, DeviceStepReport, Finding, GpuRow, Verdict
from ..trace.classify import (
    ATTENTION,
    COMMUNICATION,
    COPY_DTOD,
    COPY_DTOH,
    COPY_HTOD,
    ELEMENTWISE,
    MATMUL,
    OPTIMIZER,
    OTHER,
    short_name,
)
from ..trace.load import Trace
from .findings import FIX_ORDER, Candidate, fix_cost, ranked
from .host import DeviceFacts, Fixes

LEAD_FLOOR = 0.03  # a finding saving less than this share of the step cannot lead


HEADLINE_FLOOR = 0.05  # below this, the headline says the step is near this setup's limit


REPLAY_TOLERANCE = 0.05  # a baseline replay further than this from the recorded step: no projections


BALANCED_BLOCKED = 0.05  # computing, host blocked under this share of the step and no queue: host and GPU both saturated


PEAK_SLACK = 0.98  # matmul kernel time below FLOPs / peak by more than this: the classes are wrong, not the GPU fast


GROUPS_BUSY = {
    Bottleneck.COMPUTE: (MATMUL, ATTENTION),
    Bottleneck.MEMORY: (ELEMENTWISE, OPTIMIZER, COPY_DTOD),
    Bottleneck.INPUT: (COPY_HTOD, COPY_DTOH),
    Bottleneck.COMMUNICATION: (COMMUNICATION,),
}


GROUPS_IDLE = {
    Bottleneck.LAUNCH_OVERHEAD: (LAUNCHING, KERNEL_GAPS),
    Bottleneck.INPUT: (BETWEEN, DATA_LOADER, STEP_DATA),
    Bottleneck.HOST_SYNC: (SYNC_WAIT,),
}


_GPU_FIXES = {
    "cuda graphs": 'capture the step in CUDA graphs (torch.compile(mode="reduce-overhead")), so one launch replays every kernel'
}


@dataclass
class GpuInputs:
    """What the trace cannot hold, given by the live profiler or a truth file beside a recorded trace."""

    unprofiled_ms: float | None = None  # the step without the profiler (nanolm.profiling.measure.clock)
    settings: dict = field(default_factory=dict)  # autocast, compile, num_workers, pin_memory, cuda_graphs
    cores: int | None = None  # CPU cores the loop may use (producers for prefetching); None: this machine's
    matmul_flops: float | None = None  # matmul + attention FLOPs of one step (FlopCounterMode)
    peak_flops: float | None = None  # the measured bf16 matmul peak, FLOP/s (nanolm peak)


@dataclass
class GpuAnalysis:
    report: DeviceStepReport
    verdict: Verdict
    device: DeviceStep
    replayer: Replayer


def analyze_gpu(trace: Trace, inputs: GpuInputs | None = None, first: int = 0, count: int | None = None) -> GpuAnalysis:
    """The GPU report and verdict of steps [first, first + count) of a trace with a device lane."""
    inputs = inputs or GpuInputs()
    d = analyze_device(trace, first, count)
    r = build_replayer(trace, d)
    notes: list[str] = []
    error = r.self_check()
    replay_ok = abs(error) <= REPLAY_TOLERANCE
    if not replay_ok:
        notes.append(f"the replay disagrees with the trace by {error:+.0%}: projections are withheld")
    step, basis, cost = d.step_ms, "profiled", None
    if inputs.unprofiled_ms is not None:
        step, basis = inputs.unprofiled_ms, "unprofiled"
        cost = _calibrate(r, inputs.unprofiled_ms, d, notes) if replay_ok else None
    rows = _rows(d, step, cost)
    share = min(1.0, d.busy_ms / step) if step else 0.0
    ideal = _ideal_matmul_ms(d, inputs, notes)
    report = DeviceStepReport(
        gate=gate_of(share),
        gate_sentence=_gate_sentence(d, step, basis, rows),
        step_ms=step,
        basis=basis,
        profiled_step_ms=d.step_ms,
        busy_ms=d.busy_ms,
        busy_share=share,
        rows=rows,
        steps=d.steps,
        kernels_per_step=d.launch.kernels_per_step,
        median_kernel_us=d.launch.median_kernel_us,
        short_kernel_share=d.launch.short_kernel_share,
        median_launch_us=d.launch.median_launch_us,
        median_launch_delay_us=d.launch.median_launch_delay_us,
        max_queue_depth=d.launch.max_queue_depth,
        host_blocked_ms=d.launch.host_blocked_ms,
        queue_full_ms=d.launch.queue_full_ms,
        post_sync_ms=d.post_sync_ms,
        top_kernels=[list(k) for k in d.top_kernels],
        top_other=[list(k) for k in d.top_other],
        matmul_tflops=_matmul_tflops(d, inputs),
        replay_error=error,
        profiler_cost_us=cost,
        notes=notes,
        trace=trace.source or None,
    )
    verdict = _verdict(report, d, r if replay_ok else None, inputs, ideal)
    return GpuAnalysis(report, verdict, d, r)


def _calibrate(r: Replayer, unprofiled_ms: float, d: DeviceStep, notes: list[str]) -> float | None:
    """The profiler's cost per host event (us), solved so the replay gives the unprofiled step; 0 when the
    profiler added nothing that calibration could remove within REPLAY_TOLERANCE; None, with a note, when the
    per-event cost cannot explain the difference."""
    c = r.calibrate(unprofiled_ms)
    if c is not None:
        return c
    if r.floor_ms() > unprofiled_ms * (1 + REPLAY_TOLERANCE):
        notes.append(
            f"the unprofiled step ({unprofiled_ms:.1f} ms) is shorter than the recorded steps would be even "
            f"with the profiler's per-event cost removed ({r.floor_ms():.1f} ms): the two were measured under "
            "different conditions; projections are scaled to the unprofiled step"
        )
    return 0.0


def idle_row_name(bucket: str) -> str:
    """The GPU table's label of an idle bucket: 'launching' -> 'idle: launching'."""
    return f"idle: {bucket}"


def _rows(d: DeviceStep, step: float, cost: float | None) -> list[GpuRow]:
    """Device classes, then idle buckets, adding up to the step. The idle buckets of the unprofiled step have
    the profiler's cost taken out (cost per event × the events in each), then fill what busy leaves."""
    rows = [
        GpuRow(c, "busy", ms, ms / step, [k[0] for k in d.top_kernels if k[1] == c][:3])
        for c, ms in sorted(d.class_ms.items(), key=lambda kv: -kv[1])
    ]
    if d.overlap_ms > 0:
        rows.append(GpuRow("overlapping classes (counted once)", "overlap", -d.overlap_ms, -d.overlap_ms / step))
    raw = {b: max(0.0, ms - (cost or 0.0) * d.idle_events.get(b, 0) / 1000) for b, ms in d.idle_ms.items()}
    kept = {b: ms for b, ms in raw.items() if ms >= 0.0005 * sum(raw.values())}  # rows under 0.05% say nothing
    idle_total = max(0.0, step - d.busy_ms)
    scale = idle_total / sum(kept.values()) if sum(kept.values()) > 0 else 0.0
    for b in IDLE_BUCKETS:
        if b in kept:
            ms = kept[b] * scale
            rows.append(
                GpuRow(idle_row_name(b), "idle", ms, ms / step, [f"{name} {t:.1f} ms" for name, t in d.top_idle_ops.get(b, [])])
            )
    return rows


def _gate_sentence(d: DeviceStep, step: float, basis: str, rows: list[GpuRow]) -> str:
    share = min(1.0, d.busy_ms / step) if step else 0.0
    gate = gate_of(share)
    idle = {idle_row_name(b): b for b in IDLE_BUCKETS}
    top = max((r for r in rows if r.kind == "idle"), key=lambda r: r.ms, default=None)
    head = {COMPUTING: "GPU computing", WAITING: "GPU waiting", MIXED: "GPU mixed (computing and waiting)"}[gate]
    where = f"; most idle is {idle[top.name]} ({top.ms:.1f} ms)" if top is not None and top.ms > 0 else ""
    if gate == COMPUTING and d.launch.host_blocked_ms < BALANCED_BLOCKED * step and d.launch.max_queue_depth <= 1:
        where += (
            "; balanced: the host launches just in time and never waits on a full queue, so speeding up "
            "either side alone gains little"
        )
    return f"{head}: busy {d.busy_ms:.1f} ms of the {step:.1f} ms {basis} step ({share:.0%}){where}"


def _matmul_ms(d: DeviceStep) -> float:
    return d.class_ms.get(MATMUL, 0.0) + d.class_ms.get(ATTENTION, 0.0)


def _matmul_tflops(d: DeviceStep, inputs: GpuInputs) -> float | None:
    """Achieved matmul TFLOP/s: the step's matmul + attention FLOPs over their kernels' time; None when unknown."""
    if not inputs.matmul_flops or _matmul_ms(d) <= 0:
        return None
    return inputs.matmul_flops / (_matmul_ms(d) / 1000) / 1e12


def _ideal_matmul_ms(d: DeviceStep, inputs: GpuInputs, notes: list[str]) -> float | None:
    """The matmul time at the measured peak (ms); None when unknown, or, with a note, when the classes cannot be
    right (matmul time below what the FLOPs need at peak)."""
    matmul_ms = _matmul_ms(d)
    if not inputs.matmul_flops or matmul_ms <= 0 or not inputs.peak_flops:
        return None
    ideal = inputs.matmul_flops / inputs.peak_flops * 1000
    if matmul_ms < PEAK_SLACK * ideal:
        names = ", ".join(short_name(name) for name, _ in d.top_other[:3]) or "none"
        notes.append(
            f"matmul + attention kernels take {matmul_ms:.2f} ms, less than the {ideal:.2f} ms their FLOPs "
            f"need at the measured peak: kernels are misclassified (top unclassified: {names}); "
            "no compute projection"
        )
        return None
    return ideal


def _idle(report: DeviceStepReport, *buckets: str) -> float:
    names = {idle_row_name(b) for b in buckets}
    return sum(r.ms for r in report.rows if r.kind == "idle" and r.name in names)


def _busy(report: DeviceStepReport, *classes: str) -> float:
    return sum(r.ms for r in report.rows if r.kind == "busy" and r.name in classes)


def _workers(data_ms: float, busy_ms: float, cores: int) -> int:
    """Producers to keep up: enough that batch making per step fits in the GPU's time, at most the cores less one."""
    need = math.ceil(data_ms / max(busy_ms, 1e-3) - 0.01) + 1  # 50.01 ms over 25.0 is two batches' worth
    return max(1, min(max(1, cores - 1), need))


def _candidates(
    report: DeviceStepReport, d: DeviceStep, r: Replayer | None, inputs: GpuInputs, ideal_ms: float | None
) -> list[Candidate]:
    cores = inputs.cores or DeviceFacts.here("cuda").cores
    step = report.step_ms
    out = []
    between = _idle(report, BETWEEN, STEP_DATA)
    loader = _idle(report, DATA_LOADER)
    data_ms = sum(d.idle_ms.get(b, 0.0) for b in (BETWEEN, STEP_DATA, DATA_LOADER))
    w = _workers(data_ms, d.busy_ms, cores)
    if between > 0:
        out.append(
            Candidate(
                Bottleneck.INPUT,
                "the GPU idle while the loop makes the next batch, logs or waits between steps",
                between,
                change=WhatIf(prefetch_workers=w),
                fix_kinds=["prefetch"],
                evidence=[
                    f"GPU idle {between:.1f} ms of a {step:.1f} ms step between steps or in batch making",
                    f"projected with {w} producer{'s' if w > 1 else ''} ({cores} CPU cores)",
                ],
            )
        )
    if loader > 0:
        out.append(
            Candidate(
                Bottleneck.INPUT,
                "the GPU idle while the loop waits for the DataLoader",
                loader,
                change=WhatIf(prefetch_workers=w),
                fix_kinds=["data loader", "prefetch"],
                evidence=[
                    f"GPU idle {loader:.1f} ms waiting for the DataLoader; num_workers="
                    f"{inputs.settings.get('num_workers', 'unknown')}"
                ],
            )
        )
    blocked = _user_sync_ms(r, report.step_ms / d.step_ms if d.step_ms else 1.0)
    if blocked > 0:  # its size: the host's time blocked in the script's own syncs, which removing them frees
        out.append(
            Candidate(
                Bottleneck.HOST_SYNC,
                "the host blocked in the script's own syncs (a sync drains the "
                "queue, then the GPU idles while the host catches up)",
                blocked,
                change=WhatIf(drop_user_syncs=True),
                fix_kinds=["remove syncs"],
                evidence=[
                    f"host blocked {blocked:.1f} ms a step in the script's syncs",
                    f"{d.post_sync_ms:.1f} ms of GPU idle a step starts inside a sync",
                ],
            )
        )
    launching = _idle(report, LAUNCHING, KERNEL_GAPS)
    if launching > 0:
        out.append(
            Candidate(
                Bottleneck.LAUNCH_OVERHEAD,
                "the GPU idle while the host launches kernels (Python, dispatch, launch calls)",
                launching,
                change=WhatIf(launch_floor=True),
                fix_kinds=["torch.compile", "cuda graphs", "larger batch"],
                evidence=_launch_evidence(d),
                upper_bound=True,
            )
        )
    memory = _busy(report, ELEMENTWISE, OPTIMIZER, COPY_DTOD)
    if memory > 0:
        out.append(
            Candidate(
                Bottleneck.MEMORY,
                "memory-bound kernels (elementwise, norms, optimizer, copies)",
                memory,
                change=WhatIf(class_scale={ELEMENTWISE: 0.5, OPTIMIZER: 0.5, COPY_DTOD: 0.5}),
                fix_kinds=["bf16 autocast", "torch.compile"],
                evidence=[f"{memory:.1f} ms of kernels a step; the projection halves their time"],
            )
        )
    matmul = _busy(report, MATMUL, ATTENTION)
    if matmul > 0:
        factor = None if ideal_ms is None else min(1.0, ideal_ms / matmul)
        evidence = [f"matmul + attention kernels {matmul:.1f} ms a step"]
        if report.matmul_tflops is not None:
            evidence.append(
                f"achieved {report.matmul_tflops:.0f} TFLOP/s in them"
                + (f" (peak measured {inputs.peak_flops / 1e12:.0f})" if inputs.peak_flops else "")
            )
        out.append(
            Candidate(
                Bottleneck.COMPUTE,
                "matmuls and attention (the GPU computing)",
                matmul,
                change=None if factor is None else WhatIf(class_scale={MATMUL: factor, ATTENTION: factor}),
                fix_kinds=["larger batch", "bf16 autocast"],
                evidence=evidence,
            )
        )
    comm = _busy(report, COMMUNICATION)
    if comm > 0:
        out.append(
            Candidate(
                Bottleneck.COMMUNICATION,
                "collective communication kernels (NCCL)",
                comm,
                change=WhatIf(class_scale={COMMUNICATION: 0.0}),
                fix_kinds=["overlap communication"],
                evidence=[f"NCCL kernels {comm:.1f} ms a step"],
            )
        )
    return out


def _user_sync_ms(r: Replayer | None, scale: float) -> float:
    """The host's time (ms a step) in the script's own blocking syncs, scaled to the table's step."""
    if r is None:
        return 0.0
    return sum(i.call_us for i in r.items if isinstance(i, SyncItem) and i.user) / r.steps / 1000 * scale


def _launch_evidence(d: DeviceStep) -> list[str]:
    s = d.launch
    out = [
        f"{s.kernels_per_step:.0f} kernels a step"
        + (f", median {s.median_kernel_us:.0f} µs" if s.median_kernel_us is not None else "")
        + (f"; median launch call {s.median_launch_us:.0f} µs" if s.median_launch_us is not None else "")
    ]
    if s.short_kernel_share is not None:
        out.append(f"{s.short_kernel_share:.0%} of kernels are shorter than their launch call")
    return out


def _verdict(report: DeviceStepReport, d: DeviceStep, r: Replayer | None, inputs: GpuInputs, ideal_ms: float | None) -> Verdict:
    facts = DeviceFacts("cuda", inputs.cores or DeviceFacts.here("cuda").cores, bf16_faster=True)
    fixes = Fixes(inputs.settings, facts)
    fixes.text.update(_GPU_FIXES)
    step = report.step_ms
    base = r.step_ms() if r is not None else step
    findings: list[tuple[Finding, int, float]] = []  # (finding, fix cost, saving ms)
    all_changes = WhatIf()
    for c in _candidates(report, d, r, inputs, ideal_ms):
        kind = _first_fix(fixes, c.fix_kinds, inputs.settings)
        projected = saving = None
        if r is not None and c.change is not None:
            projected = r.step_ms(c.change) * step / base if base else None
            saving = step - projected if projected is not None else None
            if kind is not None:
                all_changes = all_changes.merged(c.change)
        no_fix = None if kind is not None else _why_no_fix(c.fix_kinds, inputs.settings)
        finding = Finding(
            c.bottleneck,
            c.what,
            c.ms,
            c.ms / step if step else 0.0,
            projected if kind is not None else None,
            fixes.text.get(kind) if kind else None,
            step / projected if projected and kind is not None else None,
            c.evidence,
            upper_bound=c.upper_bound,
            no_fix_left=no_fix,
        )
        if (
            saving is not None
            and saving < 0.01 * step
            and report.gate == WAITING
            and c.bottleneck in (Bottleneck.MEMORY, Bottleneck.COMPUTE)
        ):
            finding.evidence.append("GPU idle most of the step: faster kernels would not speed the step up")
        findings.append((finding, fix_cost([kind]) if kind else len(FIX_ORDER) + 1, saving if kind else None))
    # by saving; no fix left never wins a tie; savings under LEAD_FLOOR go after every finding that leads
    by_saving = ranked(findings, step, gain=lambda f: f[2], cost=lambda f: f[1], ms=lambda f: f[0].ms, lead_floor=LEAD_FLOOR)
    ordered = [f for f, _, _ in by_saving]
    bottleneck = _gate_bottleneck(report)
    together = (
        r.step_ms(all_changes) * step / base
        if r is not None and base and sum(1 for f in ordered if f.projected_step_ms is not None) >= 2
        else None
    )
    return Verdict(
        bottleneck,
        _headline(report, bottleneck, ordered, step),
        [report.gate_sentence] + next((f.evidence for f in ordered if f.bottleneck is bottleneck), []),
        list(dict.fromkeys(f.fix for f in ordered if f.fix)),
        [f"{f.bottleneck.value}: {f.what} ({f.ms:.1f} ms, {f.share:.0%})" for f in ordered[1:]],
        fixes.left_out,
        ordered,
        [],
        together,
        report.gate,
    )


def _first_fix(fixes: Fixes, kinds: list[str], settings: dict) -> str | None:
    for kind in kinds:
        if kind == "cuda graphs":
            if not settings.get("cuda_graphs"):
                return kind
            continue
        if fixes.first([kind]) is not None:
            return kind
    return None


def _why_no_fix(kinds: list[str], settings: dict) -> str:
    on = [
        k
        for k in kinds
        if settings.get({"bf16 autocast": "autocast", "torch.compile": "compile", "cuda graphs": "cuda_graphs"}.get(k, ""))
    ]
    return f"no fix left: {' and '.join(on)} already on" if on else "no fix known here"


def _gate_bottleneck(report: DeviceStepReport) -> Bottleneck:
    busy = {b: _busy(report, *classes) for b, classes in GROUPS_BUSY.items()}
    idle = {b: _idle(report, *buckets) for b, buckets in GROUPS_IDLE.items()}
    top_busy = max(busy, key=busy.get)
    top_idle = max(idle, key=idle.get)
    # device waits (another stream, work the trace does not show) are no host's doing: with nothing else idle,
    # what the GPU does is the answer
    if report.gate == COMPUTING or idle[top_idle] <= 0 or (report.gate == MIXED and busy[top_busy] >= idle[top_idle]):
        return top_busy
    return top_idle


def _headline(report: DeviceStepReport, bottleneck: Bottleneck, ordered: list[Finding], step: float) -> str:
    lead = next((f for f in ordered if f.bottleneck is bottleneck), None)
    head = (
        f"{lead.what}, {lead.ms:.1f} ms of a {step:.1f} ms step ({lead.share:.0%})"
        if lead is not None
        else f"GPU {report.gate}, busy {report.busy_share:.0%} of the step"
    )
    best = ordered[0] if ordered else None
    if best is None or best.projected_step_ms is None or step - best.projected_step_ms < HEADLINE_FLOOR * step:
        if best is not None and best.projected_step_ms is not None:
            return head + "; near this setup's limit: no fix found here saves 5% of the step"
        return head
    saving = step - best.projected_step_ms
    up_to = "up to " if best.upper_bound else ""
    return head + f"; first fix saves {up_to}{saving:.1f} ms ({_x(step / best.projected_step_ms)}): {best.fix}"


def _x(ratio: float) -> str:
    return f"{ratio:.2f}×" if ratio < 10 else f"{ratio:.0f}×"


__all__ = ["GpuAnalysis", "GpuInputs", "analyze_gpu", "DEVICE_WAITS", "OTHER"]
