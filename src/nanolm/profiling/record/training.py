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
from dataclasses import replace
from pathlib import Path

import torch

from ...errors import UserError
from ...flops import training_flops_per_token
from ..assemble import MfuOf, profile_report
from ..judge.expect import Expected, expectation
from ..measure.clock import TAIL_STEPS, rate_step_ms
from ..report import MFU, ProfileReport, Stat
from . import pythonpath_with_nanolm
from .clock import StepClock
from .peak import gpu_bf16_peak, live_facts
from .session import (
    ProfileSession,
    QuietProfiler,
    Window,
    check_trace_path,
    discard,
    measured_from_session,
    staging_path,
    with_committed_trace,
)


def peak_for(device: torch.device, measure: bool, dtype: torch.dtype):
    """The device's peak FLOP/s: the datasheet by device name on CUDA, else measured on this device
    (once per process: the same measurement the fixes' bf16 check uses)."""
    from ..measure.mfu import lookup_peak
    from .peak import cached_peak

    if device.type == "cuda" and not measure:
        try:
            return lookup_peak(torch.cuda.get_device_name(device))
        except UserError:
            pass  # not in the table: measure it
    return cached_peak(device.type, str(dtype).replace("torch.", ""))


def mfu_from(
    n_params: float, tokens_per_s: float | None, flops_per_s: float, flops_with_attention: float | None, peak, method: str
) -> MFU:
    from ..measure.mfu import peak_source

    source = peak_source(peak)
    return MFU(
        n_params,
        tokens_per_s,
        flops_per_s,
        flops_with_attention,
        peak.flops_per_s,
        source,
        flops_per_s / peak.flops_per_s,
        None if flops_with_attention is None else flops_with_attention / peak.flops_per_s,
        method,
    )


class _WindowsDone(Exception):
    """Raised from train()'s step hook once the measured windows are done: the throwaway run stops there."""


def _train_under(session: ProfileSession, cfg, runs_dir: Path | None = None) -> object:
    """Train under the session until its windows are done and TAIL_STEPS more steps ran with the profiler off
    (reference steps for the unprofiled step, clocked by session.clock); the run's manifest (N, the model's
    shape).

    runs_dir: where the throwaway run goes (default: a temporary folder); the ranks of a data-parallel
    profile share one, in which rank 0 writes the run."""
    from ...runs import is_run, read_manifest
    from ...training.driver import train
    from ...training.record import TrainingInterrupted

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
        tmp = (
            str(runs_dir) if runs_dir is not None else stack.enter_context(tempfile.TemporaryDirectory(prefix="nanolm-profile-"))
        )
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


def profile_training(
    overrides: list[str] | None = None,
    window: Window | None = None,
    trace: str | Path | None = None,
    measure_peak: bool = False,
    with_stack: bool = False,
    expected: Expected | None = None,
    isolate: bool = False,
    runs_dir: Path | None = None,
) -> ProfileReport:
    """Profile nanolm training steps (the config from `overrides`); MFU from 6N and the measured step.

    expected: the throughput or MFU the user expected (report.expectation sets the measurement beside it);
    isolate: also time the input pipeline alone and the model alone (report.isolation); runs_dir: where the
    throwaway run goes (default: a temporary folder, removed after). Started as a rank of a data-parallel run
    (nanolm.profiling.record.ranks), this profiles that rank's steps."""
    from ...config import make_config
    from ...device import resolve_device

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
    session = ProfileSession(window, device.type == "cuda", staged, with_stack, quiet, clock=StepClock(device.type == "cuda"))
    try:
        manifest = _train_under(session, cfg, runs_dir)
        session.keep_median_trace()
        report = _training_report(session, cfg, device, manifest, measure_peak)
        if expected is not None:  # may refuse (an impossible expectation): before anything is committed
            report = replace(report, expectation=expectation(report, expected))
        if isolate:  # after the profiled run: the profiler is stopped, so none of this lands in its windows
            from .isolate import isolate_training

            report = replace(
                report,
                isolation=isolate_training(
                    cfg, device, rate_step_ms(report), window, unprofiled=report.unprofiled_step_ms is not None
                ),
            )
    except BaseException:
        session.discard_traces()
        discard(staged, staged_log)
        raise
    finally:
        quiet.close()
        session.cleanup()
    return with_committed_trace(report, session.trace_written, trace_path, staged_log)


def _training_report(session: ProfileSession, cfg, device: torch.device, manifest, measure_peak: bool) -> ProfileReport:
    from ...device import autocast_dtype

    dtype = autocast_dtype(cfg.autocast, device)
    settings = {
        "num_workers": cfg.num_workers,
        "pin_memory": bool(cfg.pin_memory) or device.type == "cuda",
        "autocast": str(dtype).replace("torch.", "") if dtype else None,
        "compile": cfg.compile,
        "batch_size": cfg.batch_size,
        "grad_accum": cfg.grad_accum,
    }
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    measured = measured_from_session(session, f"nanolm (preset {cfg.preset})", device_name, settings, cfg.tokens_per_step, [])
    mfu_of = _training_mfu(manifest, peak_for(device, measure_peak, dtype or torch.float32))
    return profile_report(
        measured,
        session.clock.result(),
        mfu_of,
        device.type,
        trace_file=session.median_trace,
        group=session.median_group,
        facts=live_facts(device.type),
        gpu_peak=gpu_bf16_peak,
    )


def _training_mfu(manifest, peak) -> MfuOf:
    """MFU of nanolm's training from 6N (and 6N plus the attention term, from the model's shape) at tokens/s;
    data-parallel, each rank's device computes its share of the tokens."""
    n = manifest.n_params_non_embedding
    shape = manifest.model_config
    per_token = training_flops_per_token(n)
    with_attention = training_flops_per_token(n, shape["n_layer"], shape["d_model"], shape["block_size"])
    world = int((manifest.distributed or {}).get("world_size", 1) or 1)

    def mfu_of(tokens_per_s: Stat | None, step_ms: float) -> tuple[MFU | None, list[str]]:
        if tokens_per_s is None:  # no tokens counted: no 6N rate
            return None, []
        rank_tokens = tokens_per_s.median / world
        mfu = mfu_from(
            n,
            tokens_per_s.median,
            per_token * rank_tokens,
            with_attention * rank_tokens,
            peak,
            "6N·tokens/s" if world == 1 else f"6N·tokens/s / {world} ranks",
        )
        return mfu, (
            []
            if world == 1
            else [
                f"tokens/s is the whole run's ({world} ranks); MFU is this rank's: its share of the tokens over one device's peak"
            ]
        )

    return mfu_of


def script_argv(command: list[str]) -> list[str]:
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


def profile_script(
    command: list[str],
    window: Window | None = None,
    trace: str | Path | None = None,
    run_to_end: bool = False,
    tokens_per_step: int | None = None,
    measure_peak: bool = False,
    with_stack: bool = False,
    wall_seconds: float = 10.0,
    expected: Expected | None = None,
    isolate: bool = False,
) -> ProfileReport:
    """Profile an unmodified training script, run once in a child Python process (its output passes through).

    Steps are the script's optimizer steps; if it takes none within wall_seconds, the report is of a
    wall-clock window of those seconds (see runner.ScriptRun). report.script_exit_code says how the
    script ended (None: nanolm stopped it after the window)."""
    window = window or Window()
    argv = script_argv(command)
    trace_path = check_trace_path(trace)
    if not (isinstance(wall_seconds, (int, float)) and 0 < wall_seconds <= MAX_WALL_SECONDS):
        raise UserError(f"--wall-seconds must be a number of seconds in (0, {MAX_WALL_SECONDS:g}], got {wall_seconds!r}")
    with tempfile.TemporaryDirectory(prefix="nanolm-profile-") as tmp:
        out = Path(tmp) / "report.json"
        staged = staging_path(trace_path) if trace_path is not None else None
        staged_log = staging_path(trace_path, "log") if trace_path is not None else Path(tmp) / "profiler.log"
        runner = [
            sys.executable,
            "-m",
            "nanolm.profiling.record.script",
            "--report",
            str(out),
            "--wait",
            str(window.wait),
            "--warmup",
            str(window.warmup),
            "--active",
            str(window.active),
            "--repeat",
            str(window.repeat),
            "--wall-seconds",
            str(wall_seconds),
            "--log",
            str(staged_log),
            "--windows",
            "separate" if window.separate else "one",
        ]
        if staged is not None:
            runner += ["--trace", str(staged)]
        runner += [
            flag
            for flag, on in (
                ("--run-to-end", run_to_end),
                ("--measure-peak", measure_peak),
                ("--with-stack", with_stack),
                ("--isolate", isolate),
            )
            if on
        ]
        if tokens_per_step:
            runner += ["--tokens-per-step", str(tokens_per_step)]
        env = {
            **os.environ,
            "PYTHONPATH": pythonpath_with_nanolm(os.environ.get("PYTHONPATH")),
        }
        try:
            result = _run_child([*runner, "--", *argv], out, env, argv)
            if "error" in result:
                raise UserError(result["error"])
            report = ProfileReport.from_dict(result["report"])
            if expected is not None:
                report = replace(report, expectation=expectation(report, expected))
        except BaseException:
            discard(staged, staged_log)
            raise
        return with_committed_trace(report, report.trace_path, trace_path, staged_log)


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
