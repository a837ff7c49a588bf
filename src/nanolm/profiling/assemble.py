"""A profile report, built once from its parts, the same way for a live run and for a recorded trace.

Every way nanolm profiles (its own training, someone else's script, a recorded trace) runs the same stages, each
a function that returns its part:

  measured  what the profiler's windows saw: the step, its phases, categories, operators, syncs   (Measured)
  clock     the step as it runs without the profiler, from the steps around the recording      (ClockPart)
  rates     tokens/s and MFU, of the unprofiled step when the clock measured it                 (Rates)
  answer    the verdict: from the GPU's device timeline on CUDA, else from the host's step parts (Answer)

and ``assemble`` makes the ProfileReport from them in one call, so each field of a report is set in one place.
A live run's stages come from nanolm.profiling.record (``profile_report``); ``analyze_trace`` (``nanolm
profile analyze TRACE``) runs them on a recorded trace, on any machine: its steps split into groups of
``group`` consecutive ``ProfilerStep`` ranges (each plays a profiler window's role: the median group for the
tables, min–max over groups), the host tables from the same window analysis a live profile runs, and with a
device lane the GPU report and verdict from the device timeline (nanolm.profiling.judge.gpu)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import UserError
from .judge.gpu import GpuInputs, analyze_gpu
from .judge.host import DeviceFacts, decide, step_parts, usable_cores
from .measure.clock import ClockPart, ClockResult, clock_part
from .measure.host import WindowStats, WindowSummary, median_window, summarize_windows
from .measure.window import trace_window_stats
from .report import MFU, DeviceStepReport, ProfileReport, Stat, StepParts, SyncSite, Verdict
from .trace.load import Trace, load_trace, out_of_collection
from .trace.steps import StepRange


@dataclass
class AnalyzeOptions:
    group: int = 3  # steps per group (a window)
    unprofiled_ms: float | None = None
    cores: int | None = None
    matmul_flops: float | None = None
    peak_tflops: float | None = None
    settings: dict | None = None
    tokens_per_step: int | None = None
    # the GPU-only values were asked for (on the command line): a CPU trace is then an error; None: when set
    gpu_only_given: bool | None = None
    steps: StepRange | None = None  # only these ProfilerStep numbers (load_trace); None: every step
    # the windows' communication kept in the report (a rank of a folder: the ranks' table reads it); a single
    # trace's report leaves it to the GPU table's communication row
    keep_communication: bool = False


def read_truth(path: Path) -> dict:
    """A truth/sidecar file beside a recorded trace: the unprofiled step, settings, FLOPs, peak, cores."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"--truth {path} does not exist; give the .truth.json written beside the trace") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"--truth {path} is not JSON ({e.__class__.__name__}); give the .truth.json file") from None
    if not isinstance(data, dict):
        raise UserError(f"--truth {path} is not a JSON object; give the .truth.json file")
    return data


def options_from_truth(truth: dict, base: AnalyzeOptions) -> AnalyzeOptions:
    """Options filled from a truth file where the command line left them unset."""

    def pick(given, key):
        return given if given is not None else truth.get(key)

    return AnalyzeOptions(
        base.group,
        pick(base.unprofiled_ms, "unprofiled_ms"),
        pick(base.cores, "cores"),
        pick(base.matmul_flops, "matmul_flops"),
        pick(base.peak_tflops, "peak_tflops"),
        base.settings if base.settings is not None else truth.get("settings"),
        pick(base.tokens_per_step, "tokens_per_step"),
        bool(base.matmul_flops or base.peak_tflops),
    )


def analyze_trace(source: str | Path | dict, options: AnalyzeOptions | None = None) -> ProfileReport:
    """The profile report of a recorded trace (module docstring)."""
    options = options or AnalyzeOptions()
    trace = load_trace(source, options.steps)
    try:
        with out_of_collection():
            return _report_of(trace, options)
    finally:
        trace.release()  # this trace is this call's own: freed now, not by the collector


def _report_of(trace: Trace, options: AnalyzeOptions) -> ProfileReport:
    asked = options.gpu_only_given
    if asked is None:
        asked = bool(options.matmul_flops or options.peak_tflops)
    if not trace.has_device and asked:
        raise UserError(
            "--matmul-flops and --peak-tflops are for GPU traces, and this trace has no device lane "
            "(it was recorded on a CPU); leave them out"
        )
    groups = trace.step_groups(options.group)
    windows = [_window(trace, first, count) for first, count in groups]
    s = summarize_windows(windows)
    middle = median_window(windows)
    first, count = groups[windows.index(middle)]
    settings = dict(options.settings or {})
    device = trace.device_properties[0].get("name", "GPU") if trace.device_properties else ("GPU" if trace.has_device else "cpu")
    measured = Measured(
        target=f"recorded trace {trace.source or '(object)'}",
        device=device,
        scope="CPU and CUDA" if trace.has_device else "CPU only (a trace with no device lane)",
        window={"wait": 0, "warmup": 0, "active": count, "repeat": len(groups), "windows": len(groups)},
        first_measured_step=1,
        summary=replace(s, device_busy=None)
        if options.keep_communication
        else replace(s, device_busy=None, communication=None, window_exposed_ms=[]),
        syncs=[],
        settings=settings,
        tokens_per_step=options.tokens_per_step,
        tokens_per_s=None,
        trace_path=None,
        step_parts=step_parts(middle, False),
        notes=s.notes,
    )
    clock = (
        ClockPart()
        if options.unprofiled_ms is None
        else ClockPart(
            Stat(options.unprofiled_ms, options.unprofiled_ms, options.unprofiled_ms), middle.step_ms / options.unprofiled_ms
        )
    )
    return assemble(
        measured,
        clock,
        Rates(_tokens_per_s(options, s.step_ms, s.window_step_ms)),
        _trace_answer(trace, options, measured, first, count),
    )


def _tokens_per_s(options: AnalyzeOptions, step_ms: Stat, window_step_ms: list[float]) -> Stat | None:
    """Tokens/s of the unprofiled step when given (else the profiled step's), from the slowest to the fastest group."""
    if not options.tokens_per_step:
        return None
    step = options.unprofiled_ms or step_ms.median
    return Stat(
        options.tokens_per_step / (step / 1000),
        *(options.tokens_per_step / (w / 1000) for w in (max(window_step_ms), min(window_step_ms))),
    )


def _trace_answer(trace: Trace, options: AnalyzeOptions, m: Measured, first: int, count: int) -> Answer:
    """The GPU's answer from the device lane; without one, the host's, with bf16 left unjudged (it depends on
    the machine that recorded the trace)."""
    if trace.has_device:
        gpu = analyze_gpu(
            trace,
            GpuInputs(
                options.unprofiled_ms,
                m.settings,
                options.cores,
                options.matmul_flops,
                options.peak_tflops * 1e12 if options.peak_tflops else None,
            ),
            first,
            count,
        )
        return Answer(gpu.verdict, None, gpu.report, gpu.report.busy_share)
    facts = DeviceFacts("cpu", options.cores or DeviceFacts.here("cpu").cores, bf16_faster=False)
    verdict = decide(m.step_parts, [], m.settings, facts, m.summary.ops_per_step)
    verdict.left_out = [line for line in verdict.left_out if not line.startswith("bf16")] + [
        "bf16 autocast: not judged (whether it is faster depends on the machine that recorded the trace; "
        "nanolm peak there measures it)"
    ]
    return Answer(verdict, m.step_parts)


def _window(trace: Trace, first: int, count: int) -> WindowStats:
    return trace_window_stats(trace, *trace.group_span(first, count))


# Given tokens/s (None: unknown) and the step (ms) rates are of: the MFU (None: no FLOP count) and notes on it.
MfuOf = Callable[[Stat | None, float], tuple[MFU | None, list[str]]]


@dataclass
class Measured:
    """What the profiler's windows measured, before any rate or verdict (the windows' numbers in `summary`)."""

    target: str
    device: str
    scope: str
    window: dict
    first_measured_step: int
    summary: WindowSummary
    syncs: list[SyncSite]
    settings: dict
    tokens_per_step: int | None
    tokens_per_s: Stat | None  # of the profiled steps (the windows' median, slowest and fastest)
    trace_path: str | None
    step_parts: StepParts | None
    notes: list[str] = field(default_factory=list)

    @property
    def step_ms(self) -> Stat:
        return self.summary.step_ms


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


def rate_step(m: Measured, clock: ClockPart) -> float:
    """The step (ms) throughput and MFU are measured against: U when the clock measured it, else the profiled
    step (clock.rate_step_ms says the same of a finished report)."""
    return clock.unprofiled_step_ms.median if clock.unprofiled_step_ms is not None else m.step_ms.median


def tokens_stat(tokens_per_step: int, step_ms: Stat) -> Stat:
    """Tokens/s of a step time (ms): the median step's, and the range from the slowest to the fastest step."""
    return Stat(
        tokens_per_step / (step_ms.median / 1000), tokens_per_step / (step_ms.max / 1000), tokens_per_step / (step_ms.min / 1000)
    )


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
    said = ([f"MFU {_percent(mfu.mfu * scale)}"] if mfu is not None else []) + (
        [f"{tokens_per_s.median * scale:,.0f} tokens/s"] if tokens_per_s is not None else []
    )
    return (
        f"MFU and tokens/s are of the unprofiled {unprofiled.median:.1f} ms step; of the profiled "
        f"{step_ms.median:.1f} ms step they would be {' and '.join(said)}"
    )


def answer(
    m: Measured,
    clock: ClockPart,
    r: Rates,
    device_type: str,
    facts: DeviceFacts | None = None,
    trace_file: str | Path | None = None,
    group: tuple[int, int] | None = None,
    gpu_peak: Callable[[], float | None] | None = None,
) -> Answer:
    """The verdict, once the MFU is known: the step's FLOPs at the peak bound what faster matmuls can buy.
    On CUDA with the median window's trace (`trace_file`, its steps `group`: first, count), the verdict is the
    GPU's, from its device timeline; when that trace cannot be read, the host-side verdict, saying why."""
    notes: list[str] = []
    if device_type == "cuda" and trace_file is not None:
        try:
            return gpu_answer(m, clock, r, trace_file, group, gpu_peak)
        except UserError as e:
            notes.append(f"no GPU answer: the median window's trace could not be analysed ({e})")
    parts = replace(m.step_parts) if m.step_parts is not None else None
    if r.mfu is not None and parts is not None:
        mfu = r.mfu.mfu_with_attention if r.mfu.mfu_with_attention is not None else r.mfu.mfu
        parts.ideal_matmul_ms = min(mfu, 1.0) * rate_step(m, clock)  # the FLOPs at the peak (MFU of that step)
        if mfu > 1:  # a measured peak on a busy machine can come out low; the numbers above still hold
            notes.append(
                f"MFU {mfu:.0%} is over 100% of the peak ({r.mfu.peak_source}): the peak was "
                "measured low (a busy machine) or the FLOP count is too high; measure the peak again "
                "with nanolm peak on a quiet machine"
            )
    verdict = (
        decide(
            parts,
            m.syncs,
            m.settings,
            facts or DeviceFacts.here(device_type),
            m.summary.ops_per_step,
            m.summary.communication,
        )
        if parts is not None
        else None
    )
    return Answer(verdict, parts, notes=notes)


def gpu_answer(
    m: Measured,
    clock: ClockPart,
    r: Rates,
    trace_file: str | Path,
    group: tuple[int, int] | None = None,
    gpu_peak: Callable[[], float | None] | None = None,
) -> Answer:
    """Is the GPU computing or waiting: the device timeline of the median window's trace (its steps `group`),
    read after the run, with the step's FLOPs and the bf16 matmul peak gpu_peak() measures (FLOP/s, for the
    compute projection; None: none). A UserError when the trace has no device lane or cannot be read."""
    trace = load_trace(trace_file)
    if not trace.has_device:
        raise UserError("the trace has no device lane: the GPU verdict needs CUDA activities in the trace")
    flops = None
    if r.mfu is not None:
        per_s = r.mfu.flops_per_s_with_attention or r.mfu.flops_per_s
        flops = per_s * rate_step(m, clock) / 1000
    peak = gpu_peak() if gpu_peak is not None else None
    u = clock.unprofiled_step_ms.median if clock.unprofiled_step_ms is not None else None
    first, count = group if group is not None else (0, None)
    gpu = analyze_gpu(trace, GpuInputs(u, dict(m.settings or {}), usable_cores(), flops, peak), first, count)
    return Answer(gpu.verdict, m.step_parts, gpu.report, gpu.report.busy_share)


def assemble(
    m: Measured, clock: ClockPart, r: Rates, a: Answer, script_error: str | None = None, script_exit_code: int | None = None
) -> ProfileReport:
    """The report, from its parts: each field set here once."""
    s = m.summary
    return ProfileReport(
        target=m.target,
        device=m.device,
        scope=m.scope,
        window=m.window,
        first_measured_step=m.first_measured_step,
        steps_measured=s.steps_measured,
        step_ms=s.step_ms,
        phases=s.phases,
        categories=s.categories,
        top_ops=s.top_ops,
        ops_per_step=s.ops_per_step,
        syncs=m.syncs,
        device_busy=a.device_busy if a.device_busy is not None else s.device_busy,
        settings=m.settings,
        tokens_per_step=m.tokens_per_step,
        tokens_per_s=r.tokens_per_s,
        mfu=r.mfu,
        verdict=a.verdict,
        trace_path=m.trace_path,
        notes=[*m.notes, *clock.notes, *r.notes, *a.notes],
        script_error=script_error,
        script_exit_code=script_exit_code,
        unstable=s.unstable,
        step_parts=a.step_parts,
        communication=s.communication,
        window_step_ms=s.window_step_ms,
        window_exposed_ms=s.window_exposed_ms,
        unprofiled_step_ms=clock.unprofiled_step_ms,
        profiled_over_unprofiled=clock.profiled_over_unprofiled,
        boundary_ms=clock.boundary_ms,
        gpu=a.gpu,
    )


def profile_report(
    m: Measured,
    clock: ClockResult | None,
    mfu_of: MfuOf | None,
    device_type: str,
    trace_file: str | Path | None = None,
    group: tuple[int, int] | None = None,
    script_error: str | None = None,
    script_exit_code: int | None = None,
    facts: DeviceFacts | None = None,
    gpu_peak: Callable[[], float | None] | None = None,
) -> ProfileReport:
    """The stages in order, then the report: what nanolm's training and the script runner both run once their
    windows are recorded. clock: the session's step clock (None: not used); mfu_of: the MFU at a step; facts and
    gpu_peak: what the device that ran the steps measures (record.peak), which a recorded trace cannot tell."""
    c = clock_part(m.step_ms, clock)
    r = rates(m, c, mfu_of)
    return assemble(m, c, r, answer(m, c, r, device_type, facts, trace_file, group, gpu_peak), script_error, script_exit_code)


def with_notes(report: ProfileReport, *notes: str) -> ProfileReport:
    return replace(report, notes=[*report.notes, *notes])
