"""A profile report, built once from its parts.

Every way nanolm profiles (its own training, someone else's script, a recorded trace) runs the same stages, each
a function that returns its part:

  measured  what the profiler's windows saw: the step, its phases, categories, operators, syncs   (Measured)
  clock     the step as it runs without the profiler, from the steps around the recording      (clock.ClockPart)
  rates     tokens/s and MFU, of the unprofiled step when the clock measured it                 (Rates)
  answer    the verdict: from the GPU's device timeline on CUDA, else from the host's step parts (Answer)

and ``assemble`` makes the ProfileReport from them in one call, so each field of a report is set in one place
and a reader finds here where it comes from. What is added later (the expectation, the isolation, the committed
trace) is added with ``dataclasses.replace``: a report is never changed in place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import UserError
from .analysis import MFU, ProfileReport, Stat, StepParts, Verdict, median_window, summarize_windows
from .clock import ClockPart, ClockResult, clock_part
from .gpu_report import DeviceStepReport
from .session import ProfileSession, commit_log, commit_trace, log_path_for
from .syncs import SyncSite
from .verdict import DeviceFacts, decide, step_parts

# Given tokens/s (None: unknown) and the step (ms) rates are of: the MFU (None: no FLOP count) and notes on it.
MfuOf = Callable[[Stat | None, float], tuple[MFU | None, list[str]]]


@dataclass
class Measured:
    """What the profiler's windows measured, before any rate or verdict. `summary` is summarize_windows' dict
    (step_ms, phases, categories, top_ops, ops_per_step, device_busy, communication, window_step_ms, ...)."""

    target: str
    device: str
    scope: str
    window: dict
    first_measured_step: int
    summary: dict
    syncs: list[SyncSite]
    settings: dict
    tokens_per_step: int | None
    tokens_per_s: Stat | None  # of the profiled steps (the windows' median, slowest and fastest)
    trace_path: str | None
    step_parts: StepParts | None
    notes: list[str] = field(default_factory=list)

    @property
    def step_ms(self) -> Stat:
        return self.summary["step_ms"]


@dataclass
class Rates:
    """Tokens/s and MFU, of the step they are measured against (rate_step), with their notes."""

    tokens_per_s: Stat | None
    mfu: MFU | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Answer:
    """The verdict and what it was read from: the step parts (with the FLOPs' time at the peak), and on CUDA the
    device timeline's report and busy share (None: the host's measured busy share stands)."""

    verdict: Verdict | None
    step_parts: StepParts | None
    gpu: DeviceStepReport | None = None
    device_busy: float | None = None
    notes: list[str] = field(default_factory=list)


# ---- the stages ---------------------------------------------------------------------------------------

def measured_from_session(session: ProfileSession, target: str, device: str, settings: dict,
                          tokens_per_step: int | None, notes: list[str]) -> Measured:
    """The windows a live session recorded (the trace is analysed first); a UserError when none completed."""
    session.analyze_windows()
    if not session.windows:
        raise UserError(f"no measured steps: the run ended after {session.steps_done} steps, before the first "
                        f"measured step {session.window.first_active_step}; lower --wait/--warmup or run longer")
    s = summarize_windows(session.windows)
    syncs = session.sync_watch.sites(s["steps_measured"])
    notes = [*notes, *s["notes"], *_session_notes(session)]
    if not session.cuda and syncs:
        notes.append("the syncs listed cost nothing on a CPU; each would be a host-device sync on a GPU")
    return Measured(
        target=target, device=device,
        scope="CPU and CUDA" if session.cuda else "CPU only: no GPU here, so this profiles the CPU",
        window={**session.window.to_dict(), "windows": len(session.windows)},
        first_measured_step=session.window.first_active_step, summary=s, syncs=syncs, settings=settings,
        tokens_per_step=tokens_per_step, tokens_per_s=_profiled_tokens(session, tokens_per_step, s["step_ms"]),
        trace_path=session.trace_written, step_parts=step_parts(median_window(session.windows), session.cuda),
        notes=notes)


def _session_notes(session: ProfileSession) -> list[str]:
    notes = []
    if session.extended_because:
        notes.append(f"the first {session.window.repeat} windows disagreed ({'; '.join(session.extended_because)}): "
                     f"measured up to {session.planned_repeat}")
    if len(session.windows) < session.planned_repeat:
        notes.append(f"only {len(session.windows)} of {session.planned_repeat} windows completed before the run ended")
    if session.cuda_sync_warnings:
        notes.append(f"torch.cuda sync debug mode reported {session.cuda_sync_warnings} synchronizing calls")
    return notes


def _profiled_tokens(session: ProfileSession, tokens_per_step: int | None, step: Stat) -> Stat | None:
    if not tokens_per_step:
        return None
    per_window = [tokens_per_step / (w.step_ms / 1000) for w in session.windows]
    return Stat(tokens_per_step / (step.median / 1000), min(per_window), max(per_window))


def rate_step(m: Measured, clock: ClockPart) -> float:
    """The step (ms) throughput and MFU are measured against: U when the clock measured it, else the profiled
    step (clock.rate_step_ms says the same of a finished report)."""
    return clock.unprofiled_step_ms.median if clock.unprofiled_step_ms is not None else m.step_ms.median


def tokens_stat(tokens_per_step: int, step_ms: Stat) -> Stat:
    """Tokens/s of a step time (ms): the median step's, and the range from the slowest to the fastest step."""
    return Stat(tokens_per_step / (step_ms.median / 1000), tokens_per_step / (step_ms.max / 1000),
                tokens_per_step / (step_ms.min / 1000))


def rates(m: Measured, clock: ClockPart, mfu_of: MfuOf | None = None) -> Rates:
    """Tokens/s of the unprofiled step when the clock measured it (else the profiled windows'), and the MFU
    mfu_of gives at the rate step; with U measured, a note says both rates of the profiled step as well."""
    tokens = m.tokens_per_s
    if clock.unprofiled_step_ms is not None and m.tokens_per_step:
        tokens = tokens_stat(m.tokens_per_step, clock.unprofiled_step_ms)
    mfu, notes = mfu_of(tokens, rate_step(m, clock)) if mfu_of is not None else (None, [])
    note = unprofiled_rates_note(clock.unprofiled_step_ms, m.step_ms, mfu, tokens)
    return Rates(tokens, mfu, [*notes, *([note] if note else [])])


def _percent(share: float) -> str:
    """A share as a percentage, with two significant digits below 1% (a CPU's MFU of a tiny model)."""
    return f"{share:.1%}" if share >= 0.01 else f"{100 * share:.2g}%"


def unprofiled_rates_note(unprofiled: Stat | None, step_ms: Stat, mfu: MFU | None, tokens_per_s: Stat | None) -> str | None:
    """With the unprofiled step measured, MFU and tokens/s are of it: the profiled step's in words (a rate on
    the profiled step is the rate on the unprofiled one × unprofiled / profiled); None without."""
    if unprofiled is None or (mfu is None and tokens_per_s is None):
        return None
    scale = unprofiled.median / step_ms.median
    said = ([f"MFU {_percent(mfu.mfu * scale)}"] if mfu is not None else []) + \
        ([f"{tokens_per_s.median * scale:,.0f} tokens/s"] if tokens_per_s is not None else [])
    return (f"MFU and tokens/s are of the unprofiled {unprofiled.median:.1f} ms step; of the profiled "
            f"{step_ms.median:.1f} ms step they would be {' and '.join(said)}")


def answer(m: Measured, clock: ClockPart, r: Rates, device_type: str, facts: DeviceFacts | None = None,
           trace_file: str | Path | None = None, group: tuple[int, int] | None = None) -> Answer:
    """The verdict, once the MFU is known: the step's FLOPs at the peak bound what faster matmuls can buy.
    On CUDA with the median window's trace (`trace_file`, its steps `group`: first, count), the verdict is the
    GPU's, from its device timeline; when that trace cannot be read, the host-side verdict, saying why."""
    notes: list[str] = []
    if device_type == "cuda" and trace_file is not None:
        try:
            return gpu_answer(m, clock, r, trace_file, group)
        except UserError as e:
            notes.append(f"no GPU answer: the median window's trace could not be analysed ({e})")
    parts = replace(m.step_parts) if m.step_parts is not None else None
    if r.mfu is not None and parts is not None:
        mfu = r.mfu.mfu_with_attention if r.mfu.mfu_with_attention is not None else r.mfu.mfu
        parts.ideal_matmul_ms = min(mfu, 1.0) * rate_step(m, clock)  # the FLOPs at the peak (MFU of that step)
        if mfu > 1:  # a measured peak on a busy machine can come out low; the numbers above still hold
            notes.append(f"MFU {mfu:.0%} is over 100% of the peak ({r.mfu.peak_source}): the peak was "
                         "measured low (a busy machine) or the FLOP count is too high; measure the peak again "
                         "with nanolm peak on a quiet machine")
    verdict = decide(parts, m.syncs, m.settings, facts or DeviceFacts.here(device_type),
                     m.summary["ops_per_step"], m.summary.get("communication")) if parts is not None else None
    return Answer(verdict, parts, notes=notes)


def gpu_answer(m: Measured, clock: ClockPart, r: Rates, trace_file: str | Path,
               group: tuple[int, int] | None = None) -> Answer:
    """Is the GPU computing or waiting: the device timeline of the median window's trace (its steps `group`),
    read after the run, with the step's FLOPs and the measured bf16 matmul peak (for the compute projection).
    A UserError when the trace has no device lane or cannot be read."""
    from .gpu_verdict import GpuInputs, analyze_gpu
    from .mfu import cached_peak
    from .trace import load_trace
    from .verdict import usable_cores

    trace = load_trace(trace_file)
    if not trace.has_device:
        raise UserError("the trace has no device lane: the GPU verdict needs CUDA activities in the trace")
    flops = None
    if r.mfu is not None:
        per_s = r.mfu.flops_per_s_with_attention or r.mfu.flops_per_s
        flops = per_s * rate_step(m, clock) / 1000
    try:
        peak = cached_peak("cuda", "bfloat16").flops_per_s
    except Exception:  # noqa: BLE001 - no peak (a GPU without bf16, out of memory): the rest of the answer stands
        peak = None
    u = clock.unprofiled_step_ms.median if clock.unprofiled_step_ms is not None else None
    first, count = group if group is not None else (0, None)
    gpu = analyze_gpu(trace, GpuInputs(u, dict(m.settings or {}), usable_cores(), flops, peak), first, count)
    return Answer(gpu.verdict, m.step_parts, gpu.report, gpu.report.busy_share)


# ---- the report ---------------------------------------------------------------------------------------

def assemble(m: Measured, clock: ClockPart, r: Rates, a: Answer, script_error: str | None = None,
             script_exit_code: int | None = None) -> ProfileReport:
    """The report, from its parts: each field set here once."""
    s = m.summary
    return ProfileReport(
        target=m.target, device=m.device, scope=m.scope, window=m.window, first_measured_step=m.first_measured_step,
        steps_measured=s["steps_measured"], step_ms=s["step_ms"], phases=s["phases"], categories=s["categories"],
        top_ops=s["top_ops"], ops_per_step=s["ops_per_step"], syncs=m.syncs,
        device_busy=a.device_busy if a.device_busy is not None else s["device_busy"], settings=m.settings,
        tokens_per_step=m.tokens_per_step, tokens_per_s=r.tokens_per_s, mfu=r.mfu, verdict=a.verdict,
        trace_path=m.trace_path, notes=[*m.notes, *clock.notes, *r.notes, *a.notes], script_error=script_error,
        script_exit_code=script_exit_code, unstable=s["unstable"], step_parts=a.step_parts,
        communication=s.get("communication"), window_step_ms=s["window_step_ms"],
        window_exposed_ms=s.get("window_exposed_ms", []), unprofiled_step_ms=clock.unprofiled_step_ms,
        profiled_over_unprofiled=clock.profiled_over_unprofiled, boundary_ms=clock.boundary_ms, gpu=a.gpu)


def profile_report(m: Measured, clock: ClockResult | None, mfu_of: MfuOf | None, device_type: str,
                   trace_file: str | Path | None = None, group: tuple[int, int] | None = None,
                   script_error: str | None = None,
                   script_exit_code: int | None = None) -> ProfileReport:
    """The stages in order, then the report: what nanolm's training and the script runner both run once their
    windows are recorded. clock: the session's step clock (None: not used); mfu_of: the MFU at a step."""
    c = clock_part(m.step_ms, clock)
    r = rates(m, c, mfu_of)
    return assemble(m, c, r, answer(m, c, r, device_type, None, trace_file, group), script_error, script_exit_code)


def with_notes(report: ProfileReport, *notes: str) -> ProfileReport:
    return replace(report, notes=[*report.notes, *notes])


def with_committed_trace(report: ProfileReport, staged_trace: str | None, final: Path | None,
                         staged_log: Path | None) -> ProfileReport:
    """The report once its staged trace and profiler log are moved to their final paths (final None: no trace was
    asked for, nothing moves), naming the files the trace replaced."""
    if final is None:
        return report
    trace_path, replaced = commit_trace(staged_trace, final)
    return replace(report, trace_path=trace_path, trace_replaced=replaced,
                   profiler_log=commit_log(staged_log, log_path_for(final)))
