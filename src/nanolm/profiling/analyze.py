"""``nanolm profile analyze TRACE``: the full report from a recorded trace, on any machine.

The trace's steps are split into groups of ``group`` consecutive ``ProfilerStep`` ranges (each group plays
a profiler window's role: the median group for the tables, min–max over groups). The host tables come
from the same analysis a live CPU profile runs (``analyze_window``), fed the trace's host events through
``host_events``, a view with the FunctionEvent fields it reads, so a recorded trace and a live profile give
the same numbers. With a device lane, the GPU report and verdict come from the device timeline
(nanolm.profiling.gpu_verdict); without one, the CPU verdict is today's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .analysis import ProfileReport, Stat, WindowStats, analyze_window, median_window, summarize_windows
from .assemble import Answer, Measured, Rates, assemble
from .clock import ClockPart
from .gpu_verdict import GpuInputs, analyze_gpu
from .trace import DEVICE_CATS, LAUNCH_CATS, Event, Trace, load_trace
from .verdict import DeviceFacts, decide, step_parts

_VIEW_CATS = {"cpu_op", "user_annotation", *LAUNCH_CATS}  # what torch's events() holds on the host


class _Range:
    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end

    def elapsed_us(self) -> float:
        return self.end - self.start


class _Type:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_CPU, _CUDA = _Type("CPU"), _Type("CUDA")


class EventView:
    """A trace event with the fields of torch's FunctionEvent that nanolm's window analysis reads."""

    __slots__ = ("name", "time_range", "cpu_parent", "cpu_children", "self_cpu_time_total", "device_type", "thread",
                 "is_async")

    def __init__(self, e: Event, device: bool = False) -> None:
        self.name = e.name
        self.time_range = _Range(e.ts, e.end)
        self.cpu_parent: EventView | None = None
        self.cpu_children: list[EventView] = []
        self.self_cpu_time_total = 0.0 if device else e.dur
        self.device_type = _CUDA if device else _CPU
        self.thread = e.tid
        self.is_async = False


def host_events(trace: Trace, t0: float | None = None, t1: float | None = None) -> list[EventView]:
    """The trace's host ops, ranges and runtime calls (those starting in [t0, t1)) and device activities, as
    FunctionEvent-shaped views with parents, children and self times. Kineto's gpu_user_annotation spans are
    left out: they are not work."""
    views: dict[int, EventView] = {}
    out: list[EventView] = []
    for events in trace.host.values():
        for e in events:
            if e.cat in _VIEW_CATS and (t0 is None or t0 <= e.ts < t1):
                views[id(e)] = EventView(e)
    for events in trace.host.values():
        for e in events:
            view = views.get(id(e))
            if view is None:
                continue
            parent = e.parent
            while parent is not None and id(parent) not in views:
                parent = parent.parent
            if parent is not None:
                view.cpu_parent = views[id(parent)]
                views[id(parent)].cpu_children.append(view)
                views[id(parent)].self_cpu_time_total -= e.dur
            out.append(view)
    out += [EventView(k, device=True) for k in trace.device if k.cat in DEVICE_CATS
            and (t0 is None or t0 <= k.ts < t1)]
    return out


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
    return AnalyzeOptions(base.group, pick(base.unprofiled_ms, "unprofiled_ms"), pick(base.cores, "cores"),
                          pick(base.matmul_flops, "matmul_flops"), pick(base.peak_tflops, "peak_tflops"),
                          base.settings if base.settings is not None else truth.get("settings"),
                          pick(base.tokens_per_step, "tokens_per_step"),
                          bool(base.matmul_flops or base.peak_tflops))


def analyze_trace(source: str | Path | dict, options: AnalyzeOptions | None = None) -> ProfileReport:
    """The profile report of a recorded trace (module docstring)."""
    options = options or AnalyzeOptions()
    trace = load_trace(source)
    asked = options.gpu_only_given
    if asked is None:
        asked = bool(options.matmul_flops or options.peak_tflops)
    if not trace.has_device and asked:
        raise UserError("--matmul-flops and --peak-tflops are for GPU traces, and this trace has no device lane "
                        "(it was recorded on a CPU); leave them out")
    groups = trace.step_groups(options.group)
    windows = [_window(trace, first, count) for first, count in groups]
    s = summarize_windows(windows)
    middle = median_window(windows)
    first, count = groups[windows.index(middle)]
    settings = dict(options.settings or {})
    device = trace.device_properties[0].get("name", "GPU") if trace.device_properties else (
        "GPU" if trace.has_device else "cpu")
    measured = Measured(
        target=f"recorded trace {trace.source or '(object)'}", device=device,
        scope="CPU and CUDA" if trace.has_device else "CPU only (a trace with no device lane)",
        window={"wait": 0, "warmup": 0, "active": count, "repeat": len(groups), "windows": len(groups)},
        first_measured_step=1, summary={**s, "device_busy": None, "communication": None, "window_exposed_ms": []},
        syncs=[], settings=settings, tokens_per_step=options.tokens_per_step, tokens_per_s=None, trace_path=None,
        step_parts=step_parts(middle, False), notes=s["notes"])
    clock = ClockPart() if options.unprofiled_ms is None else ClockPart(
        Stat(options.unprofiled_ms, options.unprofiled_ms, options.unprofiled_ms), middle.step_ms / options.unprofiled_ms)
    return assemble(measured, clock, Rates(_tokens_per_s(options, s["step_ms"], s["window_step_ms"])),
                    _trace_answer(trace, options, measured, first, count))


def _tokens_per_s(options: AnalyzeOptions, step_ms: Stat, window_step_ms: list[float]) -> Stat | None:
    """Tokens/s of the unprofiled step when given (else the profiled step's), from the slowest to the fastest group."""
    if not options.tokens_per_step:
        return None
    step = options.unprofiled_ms or step_ms.median
    return Stat(options.tokens_per_step / (step / 1000), *(
        options.tokens_per_step / (w / 1000) for w in (max(window_step_ms), min(window_step_ms))))


def _trace_answer(trace: Trace, options: AnalyzeOptions, m: Measured, first: int, count: int) -> Answer:
    """The GPU's answer from the device lane; without one, the host's, with bf16 left unjudged (it depends on
    the machine that recorded the trace)."""
    if trace.has_device:
        gpu = analyze_gpu(trace, GpuInputs(options.unprofiled_ms, m.settings, options.cores, options.matmul_flops,
                                           options.peak_tflops * 1e12 if options.peak_tflops else None), first, count)
        return Answer(gpu.verdict, None, gpu.report, gpu.report.busy_share)
    facts = DeviceFacts("cpu", options.cores or DeviceFacts.here("cpu").cores, bf16_faster=False)
    verdict = decide(m.step_parts, [], m.settings, facts, m.summary["ops_per_step"])
    verdict.left_out = [line for line in verdict.left_out if not line.startswith("bf16")] + [
        "bf16 autocast: not judged (whether it is faster depends on the machine that recorded the trace; "
        "nanolm peak there measures it)"]
    return Answer(verdict, m.step_parts)


def _window(trace: Trace, first: int, count: int) -> WindowStats:
    return analyze_window(host_events(trace, *trace.group_span(first, count)))
