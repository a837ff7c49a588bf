"""``nanolm profile``: profile nanolm's own training steps, or someone else's unmodified script,
and return a ProfileReport (phases, categories, syncs, verdict, MFU).

Nothing the caller named is touched until a report is made: the trace and the profiler's log are
staged beside their final paths and moved into place at the end (the report says which files the new
trace replaced)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from ..errors import UserError
from .analysis import MFU, ProfileReport, Stat, median_window, summarize_windows
from .clock import TAIL_STEPS, ClockResult, StepClock, fill_report, rate_step_ms
from .expect import Expected, expectation
from .session import (
    ProfileSession,
    QuietProfiler,
    Window,
    check_trace_path,
    commit_log,
    commit_trace,
    discard,
    log_path_for,
    staging_path,
)
from .verdict import DeviceFacts, decide, step_parts


def peak_for(device: torch.device, measure: bool, dtype: torch.dtype):
    """The device's peak FLOP/s: the datasheet by device name on CUDA, else measured on this device
    (once per process: the same measurement the fixes' bf16 check uses)."""
    from .mfu import cached_peak, lookup_peak

    if device.type == "cuda" and not measure:
        try:
            return lookup_peak(torch.cuda.get_device_name(device))
        except UserError:
            pass  # not in the table: measure it
    return cached_peak(device.type, str(dtype).replace("torch.", ""))


def mfu_from(n_params: float, tokens_per_s: float | None, flops_per_s: float, flops_with_attention: float | None,
             peak, method: str) -> MFU:
    source = f"{peak.source}: {peak.name} {str(peak.dtype).replace('torch.', '')}"
    return MFU(n_params, tokens_per_s, flops_per_s, flops_with_attention, peak.flops_per_s, source,
               flops_per_s / peak.flops_per_s,
               None if flops_with_attention is None else flops_with_attention / peak.flops_per_s, method)


def build_report(session: ProfileSession, target: str, device: str, settings: dict, tokens_per_step: int | None,
                 notes: list[str]) -> ProfileReport:
    """Everything but the verdict, which waits for the MFU (conclude)."""
    session.analyze_windows()
    if not session.windows:
        raise UserError(f"no measured steps: the run ended after {session.steps_done} steps, before the first "
                        f"measured step {session.window.first_active_step}; lower --wait/--warmup or run longer")
    s = summarize_windows(session.windows)
    syncs = session.sync_watch.sites(s["steps_measured"])
    step: Stat = s["step_ms"]
    tokens = None
    if tokens_per_step:
        per_window = [tokens_per_step / (w.step_ms / 1000) for w in session.windows]
        tokens = Stat(tokens_per_step / (step.median / 1000), min(per_window), max(per_window))
    notes += s["notes"]
    if session.extended_because:
        notes.append(f"the first {session.window.repeat} windows disagreed ({'; '.join(session.extended_because)}): "
                     f"measured up to {session.planned_repeat}")
    if len(session.windows) < session.planned_repeat:
        notes.append(f"only {len(session.windows)} of {session.planned_repeat} windows completed before the run ended")
    if session.cuda_sync_warnings:
        notes.append(f"torch.cuda sync debug mode reported {session.cuda_sync_warnings} synchronizing calls")
    report = ProfileReport(
        target=target, device=device,
        scope="CPU and CUDA" if session.cuda else "CPU only: no GPU here, so this profiles the CPU",
        window={**session.window.to_dict(), "windows": len(session.windows)},
        first_measured_step=session.window.first_active_step,
        steps_measured=s["steps_measured"], step_ms=step, phases=s["phases"], categories=s["categories"],
        top_ops=s["top_ops"], ops_per_step=s["ops_per_step"], syncs=syncs, device_busy=s["device_busy"],
        settings=settings, tokens_per_step=tokens_per_step, tokens_per_s=tokens, mfu=None,
        trace_path=session.trace_written, notes=notes, unstable=s["unstable"],
        step_parts=step_parts(median_window(session.windows), session.cuda), communication=s["communication"],
        window_step_ms=s["window_step_ms"], window_exposed_ms=s["window_exposed_ms"])
    if not session.cuda and syncs:
        report.notes.append("the syncs listed cost nothing on a CPU; each would be a host-device sync on a GPU")
    return report


def tokens_stat(tokens_per_step: int, step_ms: Stat) -> Stat:
    """Tokens/s of a step time (ms): the median step's, and the range from the slowest to the fastest step."""
    return Stat(tokens_per_step / (step_ms.median / 1000), tokens_per_step / (step_ms.max / 1000),
                tokens_per_step / (step_ms.min / 1000))


def use_unprofiled_step(report: ProfileReport, clock: ClockResult) -> None:
    """The clock's unprofiled step into the report (clock.fill_report); tokens/s then of that step."""
    fill_report(report, clock)
    if report.unprofiled_step_ms is not None and report.tokens_per_step:
        report.tokens_per_s = tokens_stat(report.tokens_per_step, report.unprofiled_step_ms)


def _percent(share: float) -> str:
    """A share as a percentage, with two significant digits below 1% (a CPU's MFU of a tiny model)."""
    return f"{share:.1%}" if share >= 0.01 else f"{100 * share:.2g}%"


def unprofiled_rates_note(report: ProfileReport) -> str | None:
    """With the unprofiled step measured, MFU and tokens/s are of it: the profiled step's in words (a rate on
    the profiled step is the rate on the unprofiled one × unprofiled / profiled); None without."""
    u = report.unprofiled_step_ms
    if u is None or (report.mfu is None and report.tokens_per_s is None):
        return None
    scale = u.median / report.step_ms.median
    rates = ([f"MFU {_percent(report.mfu.mfu * scale)}"] if report.mfu is not None else []) + \
        ([f"{report.tokens_per_s.median * scale:,.0f} tokens/s"] if report.tokens_per_s is not None else [])
    return (f"MFU and tokens/s are of the unprofiled {u.median:.1f} ms step; of the profiled "
            f"{report.step_ms.median:.1f} ms step they would be {' and '.join(rates)}")


def conclude(report: ProfileReport, device_type: str, facts: DeviceFacts | None = None,
             trace_file: Path | None = None, group: tuple[int, int] | None = None) -> ProfileReport:
    """The verdict, once the MFU is known: the step's FLOPs at the peak bound what faster matmuls can buy.
    On CUDA with the median window's trace (`trace_file`), the verdict is the GPU's, from its device timeline
    (gpu_answer)."""
    if device_type == "cuda" and trace_file is not None:
        try:
            return gpu_answer(report, trace_file, group)
        except UserError as e:  # the trace cannot be read back: the host-side verdict, saying why
            report.notes.append(f"no GPU answer: the median window's trace could not be analysed ({e})")
    parts = report.step_parts
    if report.mfu is not None:
        mfu = report.mfu.mfu_with_attention if report.mfu.mfu_with_attention is not None else report.mfu.mfu
        parts.ideal_matmul_ms = min(mfu, 1.0) * rate_step_ms(report)  # the FLOPs at the peak (MFU of that step)
        if mfu > 1:  # a measured peak on a busy machine can come out low; the numbers above still hold
            report.notes.append(f"MFU {mfu:.0%} is over 100% of the peak ({report.mfu.peak_source}): the peak was "
                                "measured low (a busy machine) or the FLOP count is too high; measure the peak again "
                                "with nanolm peak on a quiet machine")
    report.verdict = decide(parts, report.syncs, report.settings, facts or DeviceFacts.here(device_type),
                            report.ops_per_step, report.communication)
    return report


def gpu_answer(report: ProfileReport, trace_file: Path, group: tuple[int, int] | None = None) -> ProfileReport:
    """Is the GPU computing or waiting: the device timeline of the median window's trace (analyze.attach_gpu),
    read after the run, with the step's FLOPs and the measured bf16 matmul peak (for the compute projection)."""
    from .analyze import attach_gpu
    from .mfu import cached_peak
    from .verdict import usable_cores

    flops = None
    if report.mfu is not None:
        per_s = report.mfu.flops_per_s_with_attention or report.mfu.flops_per_s
        flops = per_s * rate_step_ms(report) / 1000
    try:
        peak = cached_peak("cuda", "bfloat16").flops_per_s
    except Exception:  # noqa: BLE001 - no peak (a GPU without bf16, out of memory): the rest of the answer stands
        peak = None
    return attach_gpu(report, trace_file, flops, peak, usable_cores(), group)


# ---- nanolm's own training ------------------------------------------------------------------

class _WindowsDone(Exception):
    """Raised from train()'s step hook once the measured windows are done: the throwaway run stops there."""


def _train_under(session: ProfileSession, cfg, runs_dir: Path | None = None) -> object:
    """Train under the session until its windows are done and TAIL_STEPS more steps ran with the profiler off
    (reference steps for the unprofiled step, clocked by session.clock); the run's manifest (N, the model's
    shape).

    runs_dir: where the throwaway run goes (default: a temporary folder); the ranks of a data-parallel
    profile share one, in which rank 0 writes the run."""
    from ..runs import is_run, read_manifest
    from ..training.driver import train
    from ..training.record import TrainingInterrupted

    finished_at: list[int] = []  # the clock's step count when the session finished

    def on_step(step: int) -> None:
        session.clock.tick()
        if not session.finished:
            session.step()
        if session.finished:
            finished_at[:] = finished_at or [session.clock.steps]
            if session.clock.steps - finished_at[0] > TAIL_STEPS:
                raise _WindowsDone

    with contextlib.ExitStack() as stack:
        tmp = str(runs_dir) if runs_dir is not None else stack.enter_context(
            tempfile.TemporaryDirectory(prefix="nanolm-profile-"))
        cfg.runs_dir = tmp
        session.start()
        try:
            train(cfg, progress=False, on_step=on_step)
        except _WindowsDone:
            pass
        except TrainingInterrupted:  # Ctrl-C: the throwaway run's "resume with ..." would name a deleted folder
            raise KeyboardInterrupt from None
        finally:
            session.stop()
        run_dir = next(p for p in Path(tmp).iterdir() if is_run(p))
        return read_manifest(run_dir)


def profile_training(overrides: list[str] | None = None, window: Window | None = None, trace: str | Path | None = None,
                     measure_peak: bool = False, with_stack: bool = False, expected: Expected | None = None,
                     isolate: bool = False, runs_dir: Path | None = None) -> ProfileReport:
    """Profile nanolm training steps (the config from `overrides`); MFU from 6N and the measured step.

    expected: the throughput or MFU the user expected (report.expectation sets the measurement beside it);
    isolate: also time the input pipeline alone and the model alone (report.isolation); runs_dir: where the
    throwaway run goes (default: a temporary folder, removed after). Started as a rank of a data-parallel run
    (nanolm.profiling.ranks), this profiles that rank's steps."""
    from ..config import make_config
    from ..device import resolve_device

    window = window or Window()
    trace_path = check_trace_path(trace)
    # Room for the extra windows measured when the first ones disagree, and the reference steps after them;
    # the run stops when they are done.
    cfg = make_config(overrides=[*(overrides or []), f"steps={window.max_steps + TAIL_STEPS + 1}"])
    big = 10**9  # no eval, log or checkpoint inside the measured steps
    cfg.eval_every = cfg.log_every = cfg.ckpt_every = big
    cfg.ckpt_seconds = float(big)
    device = resolve_device(cfg.device)
    staged = staging_path(trace_path) if trace_path is not None else None
    staged_log = staging_path(trace_path, "log") if trace_path is not None else None
    quiet = QuietProfiler(staged_log)
    session = ProfileSession(window, device.type == "cuda", staged, with_stack, quiet,
                             clock=StepClock(device.type == "cuda"))
    try:
        manifest = _train_under(session, cfg, runs_dir)
        session.keep_median_trace()
        report = _training_report(session, cfg, device, manifest, measure_peak)
        if expected is not None:  # may refuse (an impossible expectation): before anything is committed
            report.expectation = expectation(report, expected)
        if isolate:  # after the profiled run: the profiler is stopped, so none of this lands in its windows
            from .isolate import isolate_training

            report.isolation = isolate_training(cfg, device, rate_step_ms(report), window,
                                                unprofiled=report.unprofiled_step_ms is not None)
    except BaseException:
        session.discard_traces()
        discard(staged, staged_log)
        raise
    finally:
        quiet.close()
        session.cleanup()
    if trace_path is not None:
        report.trace_path, report.trace_replaced = commit_trace(session.trace_written, trace_path)
        report.profiler_log = commit_log(staged_log, log_path_for(trace_path))
    return report


def _training_report(session: ProfileSession, cfg, device: torch.device, manifest, measure_peak: bool) -> ProfileReport:
    from ..device import autocast_dtype

    dtype = autocast_dtype(cfg.autocast, device)
    settings = {"num_workers": cfg.num_workers, "pin_memory": bool(cfg.pin_memory) or device.type == "cuda",
                "autocast": str(dtype).replace("torch.", "") if dtype else None, "compile": cfg.compile,
                "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum}
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    report = build_report(session, f"nanolm (preset {cfg.preset})", device_name, settings, cfg.tokens_per_step, [])
    use_unprofiled_step(report, session.clock.result())
    n = manifest.n_params_non_embedding
    shape = manifest.model_config
    attention = 12 * shape["n_layer"] * shape["d_model"] * shape["block_size"]  # per token (PaLM, nanoGPT)
    tokens_per_s = report.tokens_per_s.median
    world = int((manifest.distributed or {}).get("world_size", 1) or 1)
    peak = peak_for(device, measure_peak, dtype or torch.float32)
    rank_tokens = tokens_per_s / world  # data-parallel: each rank's device computes its share of the tokens
    report.mfu = mfu_from(n, tokens_per_s, 6 * n * rank_tokens, (6 * n + attention) * rank_tokens, peak,
                          "6N·tokens/s" if world == 1 else f"6N·tokens/s / {world} ranks")
    if world > 1:
        report.notes.append(f"tokens/s is the whole run's ({world} ranks); MFU is this rank's: its share of the tokens "
                            "over one device's peak")
    note = unprofiled_rates_note(report)
    if note:
        report.notes.append(note)
    return conclude(report, device.type, trace_file=session.median_trace, group=session.median_group)


# ---- someone else's script -------------------------------------------------------------------

def _script_argv(command: list[str]) -> list[str]:
    """The script and its arguments from `python script.py ARGS` (or just `script.py ARGS`)."""
    if not command:
        raise UserError("no command to profile; usage: nanolm profile -- python your_train.py ARGS")
    argv = list(command)
    if Path(argv[0]).name.startswith("python"):
        argv = argv[1:]
    if argv and argv[0] == "-m":
        raise UserError("profiling `python -m module` is not supported; give the script's path")
    if not argv:
        raise UserError("no script after `python`; usage: nanolm profile -- python your_train.py ARGS")
    script = Path(argv[0])
    if not script.is_file():
        raise UserError(f"script {script} does not exist; give the path of a Python training script")
    return argv


MAX_WALL_SECONDS = 600.0


def profile_script(command: list[str], window: Window | None = None, trace: str | Path | None = None,
                   run_to_end: bool = False, tokens_per_step: int | None = None, measure_peak: bool = False,
                   with_stack: bool = False, wall_seconds: float = 10.0, expected: Expected | None = None,
                   isolate: bool = False) -> ProfileReport:
    """Profile an unmodified training script, run once in a child Python process (its output passes through).

    Steps are the script's optimizer steps; if it takes none within wall_seconds, the report is of a
    wall-clock window of those seconds (see runner.ScriptRun). report.script_exit_code says how the
    script ended (None: nanolm stopped it after the window)."""
    window = window or Window()
    argv = _script_argv(command)
    trace_path = check_trace_path(trace)
    if not (isinstance(wall_seconds, (int, float)) and 0 < wall_seconds <= MAX_WALL_SECONDS):
        raise UserError(f"--wall-seconds must be a number of seconds in (0, {MAX_WALL_SECONDS:g}], got {wall_seconds!r}")
    with tempfile.TemporaryDirectory(prefix="nanolm-profile-") as tmp:
        out = Path(tmp) / "report.json"
        staged = staging_path(trace_path) if trace_path is not None else None
        staged_log = staging_path(trace_path, "log") if trace_path is not None else Path(tmp) / "profiler.log"
        runner = [sys.executable, "-m", "nanolm.profiling.runner", "--report", str(out),
                  "--wait", str(window.wait), "--warmup", str(window.warmup), "--active", str(window.active),
                  "--repeat", str(window.repeat), "--wall-seconds", str(wall_seconds), "--log", str(staged_log),
                  "--windows", "separate" if window.separate else "one"]
        if staged is not None:
            runner += ["--trace", str(staged)]
        runner += [flag for flag, on in (("--run-to-end", run_to_end), ("--measure-peak", measure_peak),
                                         ("--with-stack", with_stack), ("--isolate", isolate)) if on]
        if tokens_per_step:
            runner += ["--tokens-per-step", str(tokens_per_step)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                          os.environ.get("PYTHONPATH")]))}
        try:
            result = _run_child([*runner, "--", *argv], out, env, argv)
            if "error" in result:
                raise UserError(result["error"])
            report = ProfileReport.from_dict(result["report"])
            if expected is not None:
                report.expectation = expectation(report, expected)
        except BaseException:
            discard(staged, staged_log)
            raise
        if trace_path is not None:
            report.trace_path, report.trace_replaced = commit_trace(report.trace_path, trace_path)
            report.profiler_log = commit_log(staged_log, log_path_for(trace_path))
    return report


def _run_child(cmd: list[str], out: Path, env: dict, argv: list[str]) -> dict:
    """Run the runner and read its result. Ctrl-C reaches the child too (same process group): the child
    stops the script and still writes its report, so this process waits for it instead of giving up."""
    proc = subprocess.Popen(cmd, env=env)
    while True:
        try:
            proc.wait()
            break
        except KeyboardInterrupt:
            continue
    if not out.is_file():
        raise UserError(f"profiling {shlex.join(argv)} produced no report (exit code {proc.returncode})")
    return json.loads(out.read_text())
