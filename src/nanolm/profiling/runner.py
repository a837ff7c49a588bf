"""The child process of ``nanolm profile -- python script.py ARGS``: runs the script unchanged
under the profiler and writes the report as JSON.

    python -m nanolm.profiling.runner --report OUT.json [window options] -- script.py ARGS

Steps are found through torch's global optimizer step hook; phases through a global module
forward hook (the outermost module call is the forward phase), a wrapper around backward, and the
DataLoader's and optimizer's own profiler ranges. After the last measured step the script is
stopped (unless --run-to-end). A script that takes no optimizer step is profiled over a
wall-clock window instead (--wall-clock), and the report says so."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
from torch.profiler import record_function

from ..errors import UserError
from .analysis import ProfileReport, WindowStats, analyze_window
from .profile import build_report, mfu_from, peak_for
from .session import ProfileSession, Window


class WindowDone(BaseException):
    """Raised into the script to stop it after the measured window (not an Exception: the script's
    own `except Exception` does not swallow it)."""


class ScriptHooks:
    """Global hooks that turn an unmodified script's calls into steps, phases and settings."""

    def __init__(self, session: ProfileSession | None, stop_after_window: bool) -> None:
        self.session, self.stop_after_window = session, stop_after_window
        self.steps = 0
        self.n_params: int | None = None
        self.flops_per_step: float | None = None
        self.flop_counter = None
        self.settings: dict = {"num_workers": None, "pin_memory": None, "autocast": None, "compile": None}
        self._forward_depth = 0
        self._forward_range = None
        self._handles: list = []
        self._restore: list = []

    # -- steps --
    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        if self.n_params is None:
            self.n_params = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
        self._count_flops()
        if self.session is None:
            return
        if not self.session.finished:
            self.session.step()
        if self.session.finished and self.stop_after_window:
            raise WindowDone

    def _count_flops(self) -> None:
        """FLOPs of step 2, counted with FlopCounterMode from the end of step 1 to the end of step 2."""
        from torch.utils.flop_counter import FlopCounterMode

        if self.steps == 1:
            self.flop_counter = FlopCounterMode(display=False)
            self.flop_counter.__enter__()
        elif self.steps == 2 and self.flop_counter is not None:
            self.flop_counter.__exit__(None, None, None)
            self.flops_per_step = float(self.flop_counter.get_total_flops())
            self.flop_counter = None

    # -- phases --
    def _forward_pre(self, module, args) -> None:
        if self._forward_depth == 0:
            self._forward_range = record_function("forward")
            self._forward_range.__enter__()
            device = "cuda" if torch.cuda.is_available() else "cpu"
            if torch.is_autocast_enabled(device):
                self.settings["autocast"] = str(torch.get_autocast_dtype(device)).replace("torch.", "")
        self._forward_depth += 1

    def _forward_post(self, module, args, output) -> None:
        self._forward_depth -= 1
        if self._forward_depth == 0 and self._forward_range is not None:
            self._forward_range.__exit__(None, None, None)
            self._forward_range = None

    def _wrap(self, owner: object, name: str, make) -> None:
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        self._restore.append((owner, name, original))

    def install(self) -> ScriptHooks:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handles += [register_optimizer_step_post_hook(self._after_optimizer_step),
                          register_module_forward_pre_hook(self._forward_pre),
                          register_module_forward_hook(self._forward_post)]

        def backward(original):
            def wrapped(*args, **kwargs):
                with record_function("backward"):
                    return original(*args, **kwargs)
            return wrapped

        self._wrap(torch.Tensor, "backward", backward)
        self._wrap(torch.autograd, "backward", backward)
        hooks = self

        def dataloader_iter(original):
            def wrapped(loader):
                hooks.settings["num_workers"] = loader.num_workers
                hooks.settings["pin_memory"] = loader.pin_memory
                return original(loader)
            return wrapped

        self._wrap(torch.utils.data.DataLoader, "__iter__", dataloader_iter)

        def compiled(original):
            def wrapped(*args, **kwargs):
                hooks.settings["compile"] = True
                return original(*args, **kwargs)
            return wrapped

        self._wrap(torch, "compile", compiled)
        return self

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        if self.flop_counter is not None:
            self.flop_counter.__exit__(None, None, None)
            self.flop_counter = None


def run_script(argv: list[str]) -> tuple[str | None, int | None]:
    """Run the script as __main__ with argv; (its error's traceback or None, its exit code)."""
    script = Path(argv[0]).resolve()
    sys.argv = list(argv)
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except WindowDone:
        return None, None
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        return None, code
    except BaseException as e:  # noqa: BLE001 - the script's own error, reported as the script's
        return script_traceback(e, script), None
    return None, 0


def script_traceback(error: BaseException, script: Path) -> str:
    """The traceback from the script's own frames on (the runner's frames above it left out)."""
    tb = traceback.TracebackException.from_exception(error)
    frames = list(tb.stack)
    first = next((i for i, f in enumerate(frames) if Path(f.filename).resolve() == script), 0)
    tb.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(tb.format())


def show_script_error(tb: str) -> None:
    bar = "─" * 20
    sys.stderr.write(f"{bar} error raised by your script (its own traceback) {bar}\n{tb}{bar} end of your script's error {bar}\n")


def _wall_clock_window(argv: list[str], seconds: float, trace: str | None, with_stack: bool) -> tuple[WindowStats, str | None]:
    """Profile the first `seconds` of a script that takes no optimizer step, as one window."""
    from torch.profiler import ProfilerActivity, profile

    def alarm(signum, frame):
        raise WindowDone

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    with profile(activities=activities, with_stack=with_stack) as prof:
        error, _ = run_script(argv)
    signal.setitimer(signal.ITIMER_REAL, 0)
    wall_ms = (time.perf_counter() - start) * 1000
    if trace:
        prof.export_chrome_trace(trace)
    stats = analyze_window(list(prof.events()))
    stats.steps, stats.step_ms = 1, wall_ms
    return stats, error


def profile_here(args: argparse.Namespace) -> dict:
    """Run the script under the profiler in this process: {"report": ...} or {"no_steps": True}."""
    window = Window(args.wait, args.warmup, args.active, args.repeat)
    argv = args.command
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    notes: list[str] = []
    if args.wall_clock:
        session, hooks, error = _wall_clock_session(args, window, cuda, notes)
    else:
        measured = _step_session(args, window, cuda, notes)
        if measured is None:
            return {"no_steps": True}
        session, hooks, error = measured
    if error is not None:
        show_script_error(error)
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    report = build_report(session, " ".join(["python", *argv]), device_name, hooks.settings,
                          args.tokens_per_step, notes)
    report.script_error = error.strip().splitlines()[-1] if error else None
    _add_mfu(report, hooks, device, args)
    return {"report": report.to_dict()}


def _wall_clock_session(args: argparse.Namespace, window: Window, cuda: bool,
                        notes: list[str]) -> tuple[ProfileSession, ScriptHooks, str | None]:
    """A script that takes no optimizer step: one window of wall-clock time."""
    argv = args.command
    session = ProfileSession(window, cuda, None, args.with_stack)
    stats, error = _wall_clock_window(argv, args.wall_seconds, args.trace, args.with_stack)
    if not stats.ops:
        raise UserError(f"no steps taken: {argv[0]} called no optimizer step and ran no torch operator; "
                        "nothing to profile")
    session.windows = [stats]
    session.trace_written = args.trace
    session.window = Window(0, 1, 1, 1)
    notes.append(f"the script took no optimizer step: this profiles a wall-clock window of "
                 f"{stats.step_ms / 1000:.1f} s (phases are shares of that window, not of a step)")
    return session, ScriptHooks(None, False), error


def _step_session(args: argparse.Namespace, window: Window, cuda: bool,
                  notes: list[str]) -> tuple[ProfileSession, ScriptHooks, str | None] | None:
    """The script's own optimizer steps, windowed; None when it took none."""
    argv = args.command
    session = ProfileSession(window, cuda, Path(args.trace) if args.trace else None, args.with_stack)
    hooks = ScriptHooks(session, stop_after_window=not args.run_to_end).install()
    session.start()
    try:
        error, code = run_script(argv)
    finally:
        session.stop()
        hooks.uninstall()
    if hooks.steps == 0:
        if error is not None:
            show_script_error(error)
            raise UserError(f"{argv[0]} failed before its first step: {error.strip().splitlines()[-1]}")
        return None
    if code:
        notes.append(f"the script exited with code {code}")
    if hooks.steps < window.total_steps and error is None:
        notes.append(f"the script ended after {hooks.steps} steps, before the window's {window.total_steps}")
    if not session.windows:
        if error is not None:
            show_script_error(error)
        raise UserError(f"the window is longer than the run: {argv[0]} took {hooks.steps} steps but the first "
                        f"measured step is {window.first_active_step} and the window needs {window.total_steps}; "
                        "lower --wait/--warmup/--active/--repeat or let the script run longer")
    if 0 < window.wait + window.warmup < 2:
        notes.append("FLOPs were counted during step 2, which is inside the measured window")
    return session, hooks, error


def _add_mfu(report: ProfileReport, hooks: ScriptHooks, device: torch.device, args: argparse.Namespace) -> None:
    """MFU from the FLOPs of one real step over the measured step time (and 6N·tokens/s when tokens are known)."""
    step_s = report.step_ms.median / 1000
    peak = peak_for(device, args.measure_peak, torch.float32 if not hooks.settings.get("autocast") else torch.bfloat16)
    n = hooks.n_params or 0
    if not (hooks.flops_per_step and step_s > 0):
        return
    report.mfu = mfu_from(n, None, hooks.flops_per_step / step_s, None, peak,
                          "FlopCounterMode FLOPs of one real step / measured step time")
    if args.tokens_per_step and n:
        tokens_per_s = args.tokens_per_step / step_s
        report.notes.append(f"6N·tokens/s with N = {n:,} parameters the optimizer updates: "
                            f"MFU {6 * n * tokens_per_s / peak.flops_per_s:.1%}")
        report.mfu.tokens_per_s = tokens_per_s


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m nanolm.profiling.runner")
    parser.add_argument("--report", required=True)
    parser.add_argument("--wait", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--active", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trace")
    parser.add_argument("--run-to-end", action="store_true")
    parser.add_argument("--tokens-per-step", type=int)
    parser.add_argument("--measure-peak", action="store_true")
    parser.add_argument("--with-stack", action="store_true")
    parser.add_argument("--wall-clock", action="store_true")
    parser.add_argument("--wall-seconds", type=float, default=10.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    out = Path(args.report)
    try:
        result = profile_here(args)
    except UserError as e:
        result = {"error": str(e)}
    out.write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the script may have left threads (DataLoader workers, its own) that would block exit


if __name__ == "__main__":
    main()


__all__ = ["ProfileReport", "ScriptHooks", "WindowDone", "main"]
