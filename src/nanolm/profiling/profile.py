"""``nanolm profile``: profile nanolm's own training steps, or someone else's unmodified script,
and return a ProfileReport (phases, categories, syncs, verdict, MFU)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from ..errors import UserError
from .analysis import MFU, ProfileReport, Stat, summarize_windows
from .session import ProfileSession, Window, check_trace_path
from .verdict import decide


def tiny_op_share(session: ProfileSession, below_us: float = 20.0) -> float:
    """Share of all self time spent in operators whose calls average under `below_us`: time that is
    per-call overhead (dispatch, launch) rather than work."""
    window = session.windows[len(session.windows) // 2]
    total = sum(window.category_ms.values()) or 1.0
    tiny = sum(ms for calls, ms in window.ops.values() if calls and ms / calls * 1000 < below_us)
    return tiny / total


def peak_for(device: torch.device, measure: bool, dtype: torch.dtype):
    """The device's peak FLOP/s: the datasheet by device name on CUDA, else measured on this device."""
    from .mfu import lookup_peak, measure_peak

    if device.type == "cuda" and not measure:
        try:
            return lookup_peak(torch.cuda.get_device_name(device))
        except UserError:
            pass  # not in the table: measure it
    return measure_peak(device.type, dtype)


def mfu_from(n_params: float, tokens_per_s: float | None, flops_per_s: float, flops_with_attention: float | None,
             peak, method: str) -> MFU:
    source = f"{peak.source}: {peak.name} {str(peak.dtype).replace('torch.', '')}"
    return MFU(n_params, tokens_per_s, flops_per_s, flops_with_attention, peak.flops_per_s, source,
               flops_per_s / peak.flops_per_s,
               None if flops_with_attention is None else flops_with_attention / peak.flops_per_s, method)


def build_report(session: ProfileSession, target: str, device: str, settings: dict, tokens_per_step: int | None,
                 notes: list[str]) -> ProfileReport:
    if not session.windows:
        raise UserError(f"no measured steps: the run ended after {session.steps_done} steps, before the first "
                        f"measured step {session.window.first_active_step}; lower --wait/--warmup or run longer")
    s = summarize_windows(session.windows)
    syncs = session.sync_watch.sites(s["steps_measured"])
    step: Stat = s["step_ms"]
    tokens = None
    if tokens_per_step:
        per_window = [tokens_per_step / (w.step_ms / 1000) for w in session.windows]
        tokens = Stat.of(per_window)
    if len(session.windows) < session.window.repeat:
        notes.append(f"only {len(session.windows)} of {session.window.repeat} windows completed before the run ended")
    if session.cuda_sync_warnings:
        notes.append(f"torch.cuda sync debug mode reported {session.cuda_sync_warnings} synchronizing calls")
    report = ProfileReport(
        target=target, device=device,
        scope="CPU and CUDA" if session.cuda else "CPU only: no GPU here, so this profiles the CPU",
        window=session.window.to_dict(), first_measured_step=session.window.first_active_step,
        steps_measured=s["steps_measured"], step_ms=step, phases=s["phases"], categories=s["categories"],
        top_ops=s["top_ops"], ops_per_step=s["ops_per_step"], syncs=syncs, device_busy=s["device_busy"],
        settings=settings, tokens_per_step=tokens_per_step, tokens_per_s=tokens, mfu=None,
        trace_path=session.trace_written, notes=notes)
    report.verdict = decide(report.phases, report.categories, syncs, report.ops_per_step,
                            tiny_op_share(session), step.median, report.device_busy, settings)
    if not session.cuda and syncs:
        report.notes.append("the syncs listed cost nothing on a CPU; each would be a host-device sync on a GPU")
    return report


# ---- nanolm's own training ------------------------------------------------------------------

def profile_training(overrides: list[str] | None = None, window: Window | None = None, trace: str | Path | None = None,
                     measure_peak: bool = False, with_stack: bool = False) -> ProfileReport:
    """Profile nanolm training steps (the config from `overrides`); MFU from 6N and the measured step."""
    from ..config import make_config
    from ..runs import read_manifest
    from ..train import autocast_dtype, resolve_device, train

    window = window or Window()
    trace_path = check_trace_path(trace)
    cfg = make_config(overrides=[*(overrides or []), f"steps={window.total_steps}"])
    big = 10**9  # no eval, log or checkpoint inside the measured steps
    cfg.eval_every = cfg.log_every = cfg.ckpt_every = big
    device = resolve_device(cfg.device)
    with tempfile.TemporaryDirectory(prefix="nanolm-profile-") as tmp:
        cfg.runs_dir = tmp
        session = ProfileSession(window, device.type == "cuda", trace_path, with_stack)
        session.start()
        try:
            result = train(cfg, progress=False, on_step=lambda step: session.step())
        finally:
            session.stop()
        manifest = read_manifest(result.run_dir)
    dtype = autocast_dtype(cfg.autocast, device)
    settings = {"num_workers": cfg.num_workers, "pin_memory": bool(cfg.pin_memory) or device.type == "cuda",
                "autocast": str(dtype).replace("torch.", "") if dtype else None, "compile": cfg.compile,
                "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum}
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    report = build_report(session, f"nanolm (preset {cfg.preset})", device_name, settings, cfg.tokens_per_step, [])
    n = manifest.n_params_non_embedding
    shape = manifest.model_config
    attention = 12 * shape["n_layer"] * shape["d_model"] * shape["block_size"]  # per token (PaLM, nanoGPT)
    tokens_per_s = report.tokens_per_s.median
    peak = peak_for(device, measure_peak, dtype or torch.float32)
    report.mfu = mfu_from(n, tokens_per_s, 6 * n * tokens_per_s, (6 * n + attention) * tokens_per_s, peak, "6N·tokens/s")
    return report


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


def profile_script(command: list[str], window: Window | None = None, trace: str | Path | None = None,
                   run_to_end: bool = False, tokens_per_step: int | None = None, measure_peak: bool = False,
                   with_stack: bool = False, wall_seconds: float = 10.0) -> ProfileReport:
    """Profile an unmodified training script in a child Python process (its output passes through).

    Steps are the script's optimizer steps; if it takes none, a wall-clock window of wall_seconds."""
    window = window or Window()
    argv = _script_argv(command)
    trace_path = check_trace_path(trace)
    with tempfile.TemporaryDirectory(prefix="nanolm-profile-") as tmp:
        out = Path(tmp) / "report.json"
        runner = [sys.executable, "-m", "nanolm.profiling.runner", "--report", str(out),
                  "--wait", str(window.wait), "--warmup", str(window.warmup), "--active", str(window.active),
                  "--repeat", str(window.repeat), "--wall-seconds", str(wall_seconds)]
        if trace_path is not None:
            runner += ["--trace", str(trace_path)]
        if run_to_end:
            runner.append("--run-to-end")
        if tokens_per_step:
            runner += ["--tokens-per-step", str(tokens_per_step)]
        if measure_peak:
            runner.append("--measure-peak")
        if with_stack:
            runner.append("--with-stack")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                          os.environ.get("PYTHONPATH")]))}
        result = _run_child([*runner, "--", *argv], out, env, argv)
        if result.get("no_steps"):  # no optimizer step at all: profile a wall-clock window instead
            result = _run_child([*runner, "--wall-clock", "--", *argv], out, env, argv)
    if "error" in result:
        raise UserError(result["error"])
    return ProfileReport.from_dict(result["report"])


def _run_child(cmd: list[str], out: Path, env: dict, argv: list[str]) -> dict:
    out.unlink(missing_ok=True)
    proc = subprocess.run(cmd, env=env)
    if not out.is_file():
        raise UserError(f"profiling {shlex.join(argv)} produced no report (exit code {proc.returncode})")
    return json.loads(out.read_text())
