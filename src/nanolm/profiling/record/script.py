"""The child process of ``nanolm profile -- python script.py ARGS``: runs the script unchanged
under the profiler and writes the report as JSON.

    python -m nanolm.profiling.record.script --report OUT.json [window options] -- script.py ARGS

Steps are found through torch's global optimizer step hook; phases through a global module
forward hook (the outermost module call is the forward phase), a wrapper around backward, the
DataLoader's and optimizer's own profiler ranges, and a "between" range from the end of one optimizer
step to the next forward (or backward, or optimizer step): the host's time between steps, where a
script without a DataLoader loads its data (nanoGPT's get_batch), logs, and zeroes its gradients.

The optimizer step hook runs inside torch's `Optimizer.step#...` range, so it only clocks the step
(StepClock); the profiler's step (a window's start or stop, the probe's stop) waits for the next point
outside that range (`ScriptHooks.settle`): a recording stopped and another started under an open range
make its end write into freed memory (SIGSEGV). After the last window the script runs TAIL_STEPS more
steps with the profiler off (reference steps for the unprofiled step), then is stopped (unless
--run-to-end). The script runs once: the profiler records from its start, and a script that takes no
optimizer step within --wall-seconds gets that recording as a wall-clock window (ScriptRun), and the
report says so. The trace and the profiler's log go to the staging paths the parent gives (--trace,
--log); the parent moves them into place.

--per-rank: one rank of a distributed run started by torch.distributed.run (nanolm.profiling.record.ranks); "{rank}" in the
file names of --report, --trace and --log becomes this rank (torchrun's RANK), the windows are never extended (every
rank stops at the same step), and a script that fails makes this process fail too, so that torchrun stops the other
ranks instead of leaving them waiting in a collective."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import signal
import sys
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.profiler import record_function

from ...errors import UserError
from ...flops import training_flops_per_token
from ..assemble import MfuOf, profile_report, with_notes
from ..measure.clock import TAIL_STEPS
from ..measure.host import WindowStats, analyze_window
from ..report import MFU, ProfileReport, Stat
from .clock import StepClock
from .isolate import ReplayCapture, isolate_script
from .peak import gpu_bf16_peak, live_facts
from .session import ProfileSession, QuietProfiler, Window, discard, gzip_if_large, measured_from_session
from .syncs import SyncWatch
from .training import mfu_from, peak_for
from .waiting import WaitingLine


class WindowDone(BaseException):
    """Raised into the script to stop it after the measured window (not an Exception: the script's
    own `except Exception` does not swallow it)."""


PROBING, WAITING, STEPPING = "probing", "waiting", "stepping"


@dataclass
class ScriptEnd:
    """How the script's run ended."""

    error: str | None = None  # its own traceback, when it raised
    code: int | None = None  # its exit status when it ended on its own (1 for an uncaught error); None: stopped
    interrupted: bool = False  # stopped with Ctrl-C


class ScriptHooks:
    """Global hooks that turn an unmodified script's calls into steps, phases and settings."""

    def __init__(self, run: ScriptRun | None = None) -> None:
        self.run = run
        self.steps = 0
        self.n_params: int | None = None
        self.flops_per_step: float | None = None
        self.flop_counter = None
        self.settings: dict = {"num_workers": None, "pin_memory": None, "autocast": None, "compile": None}
        self._forward_depth = 0
        self._forward_range = None
        self._between_range = None
        self._pending = False  # an optimizer step whose profiler step waits for a point outside its range
        self._handles: list = []
        self._restore: list = []

    # -- steps --
    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        """Inside torch's Optimizer.step range: clock the step and leave the profiler's step pending."""
        from torch.utils.flop_counter import FlopCounterMode

        self._end_between()
        self.steps += 1
        if self.run is not None:
            self.run.clock.tick()
        if self.n_params is None:
            self.n_params = sum(p.numel() for group in optimizer.param_groups for p in group["params"])
        # FLOPs of step 2, counted with FlopCounterMode from the end of step 1 to the end of step 2.
        if self.steps == 2 and self.flop_counter is not None:
            self.flop_counter.__exit__(None, None, None)
            self.flops_per_step = float(self.flop_counter.get_total_flops())
            self.flop_counter = None
        if self.steps == 1:
            self.flop_counter = FlopCounterMode(display=False)
            self.flop_counter.__enter__()
        self._pending = True
        self._begin_between()

    def settle(self, reopen_between: bool = False) -> None:
        """The profiler's step for the optimizer step that ended last, from a point outside its range (our
        own "between" range closed first, so no range of ours spans it); may raise WindowDone.
        reopen_between: the time between steps goes on after this point (zero_grad)."""
        if not self._pending:
            return
        self._pending = False
        self._end_between()
        if self.run is not None:
            self.run.on_step()  # may raise WindowDone
        if reopen_between:
            self._begin_between()

    def _before_optimizer_step(self, optimizer, args, kwargs) -> None:
        # Two optimizer steps with no zero_grad, forward or backward between them (several optimizers): the
        # pending one is settled here, inside this step's range; its start and stop are steps apart.
        self.settle()
        self._end_between()

    # -- the time between steps: opened after the profiler's step marker moved on, so it lies inside
    # the next step; closed by whatever starts the model's work (forward, backward, optimizer step) --
    def _begin_between(self) -> None:
        if self._between_range is None:
            self._between_range = record_function("between")
            self._between_range.__enter__()

    def _end_between(self) -> None:
        if self._between_range is not None:
            between, self._between_range = self._between_range, None
            with contextlib.suppress(Exception):  # the profiler may have stopped in between: nothing to close
                between.__exit__(None, None, None)

    # -- phases --
    def _forward_pre(self, module, args) -> None:
        if self._forward_depth == 0:
            self.settle()
            self._end_between()
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
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles += [
            register_optimizer_step_post_hook(self._after_optimizer_step),
            register_optimizer_step_pre_hook(self._before_optimizer_step),
            register_module_forward_pre_hook(self._forward_pre),
            register_module_forward_hook(self._forward_post),
        ]
        hooks = self

        def backward(original):
            def wrapped(*args, **kwargs):
                hooks.settle()
                hooks._end_between()
                with record_function("backward"):
                    return original(*args, **kwargs)

            return wrapped

        self._wrap(torch.Tensor, "backward", backward)
        self._wrap(torch.autograd, "backward", backward)

        def zero_grad(original):
            def wrapped(*args, **kwargs):
                hooks.settle(reopen_between=True)  # before its own Optimizer.zero_grad range opens
                return original(*args, **kwargs)

            return wrapped

        self._wrap(torch.optim.Optimizer, "zero_grad", zero_grad)

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
        self._end_between()
        for handle in self._handles:
            handle.remove()
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        if self.flop_counter is not None:
            self.flop_counter.__exit__(None, None, None)
            self.flop_counter = None


class ScriptRun:
    """The one run of the script, and which window it gets, decided while it runs.

    The profiler records from the start (the probe). At the first optimizer step, the probe is dropped and
    the scheduled session takes over (that step counts as the schedule's first). If `wall_seconds` pass
    without a step, the probe's recording becomes a wall-clock window; the script keeps running, and a
    later first step still gets the scheduled session instead. A script that ends, or is stopped with
    Ctrl-C, without any step gets the wall-clock window."""

    def __init__(self, args: argparse.Namespace, window: Window, cuda: bool, quiet: QuietProfiler) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.args, self.window, self.cuda, self.quiet = args, window, cuda, quiet
        self.trace = Path(args.trace) if args.trace else None
        self.state = PROBING
        self.session: ProfileSession | None = None
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.probe = profile(activities=activities, with_stack=args.with_stack)
        self.probe_syncs = SyncWatch()
        self.clock = StepClock(cuda, profiler_on=True)  # the probe records from the start
        self.finished_at: int | None = None  # the clock's step count when the session finished
        self.wall: WindowStats | None = None
        self.wall_trace: str | None = None
        self.first_step_s: float | None = None
        self.waiting = WaitingLine(args.wall_seconds)
        self._busy = False
        self._t0 = time.perf_counter()
        self._previous_alarm = None

    def start(self) -> ScriptRun:
        self.probe_syncs.install().recording = True
        with self.quiet():
            self.probe.start()
        self._t0 = time.perf_counter()
        self._previous_alarm = signal.signal(signal.SIGALRM, self._deadline)
        signal.setitimer(signal.ITIMER_REAL, self.args.wall_seconds)
        self.waiting.start()
        return self

    def _deadline(self, signum, frame) -> None:
        if self.state == PROBING and not self._busy:
            self._end_probe()
            self.state = WAITING
            self.waiting.window_recorded()

    def _stop_probe(self) -> None:
        self.probe_syncs.recording = False
        self.probe_syncs.uninstall()
        with self.quiet():
            self.probe.stop()
        self.clock.profiler(False)

    def _end_probe(self) -> None:
        """Stop the probe; what it recorded becomes the wall-clock window (its trace gzipped after the run)."""
        wall_ms = (time.perf_counter() - self._t0) * 1000
        self._stop_probe()
        self.wall = analyze_window(list(self.probe.events()))
        self.wall.steps, self.wall.step_ms = 1, wall_ms
        if self.trace is not None:
            self.probe.export_chrome_trace(str(self.trace))
            self.wall_trace = str(self.trace)

    def on_step(self) -> None:
        """After each optimizer step of the script, from a point outside its Optimizer.step range
        (ScriptHooks.settle). Once the windows are measured and TAIL_STEPS more steps ran with the profiler
        off, raises WindowDone into the script."""
        if self.state != STEPPING:
            self._begin_steps()
            return
        if not self.session.finished:
            self.session.step()
        if self.session.finished and not self.args.run_to_end and self._tail_done():
            raise WindowDone

    def _tail_done(self) -> bool:
        """Whether TAIL_STEPS steps ran after the one in which the session stopped (reference steps for U)."""
        if self.finished_at is None:
            self.finished_at = self.clock.steps
        return self.clock.steps - self.finished_at > TAIL_STEPS

    def _begin_steps(self) -> None:
        self._busy = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        self.waiting.stop()
        if self.state == PROBING:
            self._stop_probe()
        else:  # the first step came after the wall-clock window was recorded: steps win
            self.first_step_s = time.perf_counter() - self._t0
            self.wall, self.wall_trace = None, None
            discard(self.trace)
        self.state = STEPPING
        # without --trace, the windows' traces go beside the report, in the parent's temporary folder
        report = getattr(self.args, "report", None)
        self.session = ProfileSession(
            self.window,
            self.cuda,
            self.trace,
            self.args.with_stack,
            self.quiet,
            steps_before=1,
            clock=self.clock,
            scratch=Path(report).parent if report else None,
        )
        self.session.start()

    def finish(self) -> None:
        """After the script ended: stop whatever still records."""
        self._busy = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self._previous_alarm is not None:
            signal.signal(signal.SIGALRM, self._previous_alarm)
        self.waiting.close()
        if self.state == PROBING:
            self._end_probe()
        elif self.state == STEPPING:
            self.session.stop()


def run_script(argv: list[str]) -> ScriptEnd:
    """Run the script as __main__ with argv, and say how it ended."""
    script = Path(argv[0]).resolve()
    sys.argv = list(argv)
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except WindowDone:
        return ScriptEnd()
    except SystemExit as e:
        return ScriptEnd(code=e.code if isinstance(e.code, int) else (0 if e.code is None else 1))
    except KeyboardInterrupt:
        return ScriptEnd(interrupted=True)
    except BaseException as e:  # noqa: BLE001 - the script's own error, reported as the script's
        return ScriptEnd(error=script_traceback(e, script), code=1)
    return ScriptEnd(code=0)


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


def profile_here(args: argparse.Namespace) -> dict:
    """Run the script once under the profiler in this process: {"report": ...}."""
    window = Window(
        args.wait,
        args.warmup,
        args.active,
        args.repeat,
        extend=not getattr(args, "per_rank", False),
        separate=getattr(args, "windows", "one") == "separate",
    )
    argv = args.command
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    quiet = QuietProfiler(Path(args.log) if args.log else None)
    run = ScriptRun(args, window, cuda, quiet)
    capture = ReplayCapture() if args.isolate else None
    hooks = ScriptHooks(run).install()
    if capture is not None:
        capture.install()  # after the hooks, removed before them: its DataLoader wrapper wraps theirs
    run.start()
    try:
        end = run_script(argv)
    finally:
        with contextlib.suppress(WindowDone):  # the script ended right after an optimizer step
            hooks.settle()
        run.finish()
        if capture is not None:
            capture.uninstall()
        hooks.uninstall()
    notes = _end_notes(end)
    session = _step_session(run, hooks, end, notes) if hooks.steps else _wall_clock_session(run, end, notes)
    if end.error is not None:
        show_script_error(end.error)
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    measured = measured_from_session(
        session, " ".join(["python", *argv]), device_name, hooks.settings, args.tokens_per_step, notes
    )
    report = profile_report(
        measured,
        run.clock.result() if hooks.steps else None,
        _script_mfu(hooks, device, args),
        device.type,
        trace_file=session.median_trace,
        group=session.median_group,
        script_error=end.error.strip().splitlines()[-1] if end.error else None,
        script_exit_code=end.code,
        facts=live_facts(device.type),
        gpu_peak=gpu_bf16_peak,
    )
    if capture is not None:
        report = _with_isolation(report, capture, end, window, cuda)
    session.cleanup()  # a scratch folder of its own (none when the parent gave one)
    return {"report": report.to_dict()}


def per_rank_path(path: str | None) -> str | None:
    """`path` with "{rank}" in its file name replaced by this process's rank (torchrun's RANK)."""
    if path is None:
        return None
    p = Path(path)
    return str(p.with_name(p.name.replace("{rank}", os.environ.get("RANK", "0"))))


def _with_isolation(report: ProfileReport, capture: ReplayCapture, end: ScriptEnd, window: Window, cuda: bool) -> ProfileReport:
    """--isolate, once the script's run is over: the profiler is stopped and every hook removed, so neither the
    trace, the windows nor the sync watch see it. With --run-to-end that is after the script's own end, so
    the replay's weight updates never reach the script; otherwise after WindowDone stopped it."""
    if end.interrupted or end.error is not None:
        why = "the script was stopped with Ctrl-C" if end.interrupted else "the script raised an error"
        return with_notes(report, f"--isolate was skipped: {why}")
    try:
        return replace(report, isolation=isolate_script(capture, report, window, cuda))
    except KeyboardInterrupt:  # the profile is made: keep it, without the isolation
        return with_notes(report, "--isolate was cut short with Ctrl-C")


def _end_notes(end: ScriptEnd) -> list[str]:
    if end.interrupted:
        return ["the script was stopped with Ctrl-C"]
    if end.error is not None:
        return ["the script raised an uncaught error (exit code 1)"]
    return [f"the script exited with code {end.code}"] if end.code else []


def _exited(end: ScriptEnd) -> str:
    return f" (it exited with code {end.code})" if end.code else " (stopped with Ctrl-C)" if end.interrupted else ""


def _wall_clock_session(run: ScriptRun, end: ScriptEnd, notes: list[str]) -> ProfileSession:
    """A script that took no optimizer step: one window of wall-clock time."""
    argv = run.args.command
    if end.error is not None:
        show_script_error(end.error)
        raise UserError(f"{argv[0]} failed before its first step: {end.error.strip().splitlines()[-1]}")
    if run.wall is None or not run.wall.ops:
        raise UserError(
            f"no steps taken: {argv[0]} called no optimizer step and ran no torch operator{_exited(end)}; nothing to profile"
        )
    session = ProfileSession(Window(0, 1, 1, 1), run.cuda, None, run.args.with_stack)
    session.windows = [run.wall]
    session.trace_written = str(gzip_if_large(Path(run.wall_trace))) if run.wall_trace else None
    session.sync_watch = run.probe_syncs
    ms = run.wall.step_ms
    span = f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms"
    whole = ms / 1000 < run.args.wall_seconds
    notes.append(
        f"the script took no optimizer step: this profiles {'its whole run' if whole else 'its first'} "
        f"{span} as one wall-clock window (phases are shares of that window, not of a step)"
    )
    return session


def _step_session(run: ScriptRun, hooks: ScriptHooks, end: ScriptEnd, notes: list[str]) -> ProfileSession:
    """The script's own optimizer steps, windowed."""
    argv, window, session = run.args.command, run.window, run.session
    if run.first_step_s is not None:
        notes.append(
            f"the script's first optimizer step came {run.first_step_s:.1f} s in, after the wall-clock "
            f"window of its first {run.args.wall_seconds:g} s was recorded; its steps are profiled instead"
        )
    if hooks.steps < window.total_steps and end.error is None and not end.interrupted:
        notes.append(f"the script ended after {hooks.steps} steps, before the window's {window.total_steps}")
    session.keep_median_trace()
    if not session.windows:
        if end.error is not None:
            show_script_error(end.error)
        raise UserError(
            f"the window is longer than the run: {argv[0]} took {hooks.steps} steps but the first "
            f"measured step is {window.first_active_step} and the window needs {window.total_steps}; "
            "lower --wait/--warmup/--active/--repeat or let the script run longer"
        )
    if 0 < window.wait + window.warmup < 2:
        notes.append("FLOPs were counted during step 2, which is inside the measured window")
    return session


def _script_mfu(hooks: ScriptHooks, device: torch.device, args: argparse.Namespace) -> MfuOf:
    """MFU from the FLOPs of one real step over the step time (the unprofiled step when the clock measured it),
    and 6N·tokens/s in a note when tokens are known; None when the FLOPs were not counted."""

    def mfu_of(tokens_per_s: Stat | None, step_ms: float) -> tuple[MFU | None, list[str]]:
        step_s, n = step_ms / 1000, hooks.n_params or 0
        if not (hooks.flops_per_step and step_s > 0):
            return None, []
        autocast = hooks.settings.get("autocast")
        peak = peak_for(device, args.measure_peak, torch.bfloat16 if autocast else torch.float32)
        mfu = mfu_from(
            n, None, hooks.flops_per_step / step_s, None, peak, "FlopCounterMode FLOPs of one real step / measured step time"
        )
        if not (args.tokens_per_step and n):
            return mfu, []
        tokens = args.tokens_per_step / step_s
        return replace(mfu, tokens_per_s=tokens), [
            f"6N·tokens/s with N = {n:,} parameters the optimizer updates: "
            f"MFU {training_flops_per_token(n) * tokens / peak.flops_per_s:.1%}"
        ]

    return mfu_of


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m nanolm.profiling.record.script")
    parser.add_argument("--report", required=True)
    parser.add_argument("--wait", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--active", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--windows", choices=["one", "separate"], default="one")
    parser.add_argument("--trace", help="where each window's trace is staged")
    parser.add_argument("--log", help="where the profiler library's own messages go")
    parser.add_argument("--run-to-end", action="store_true")
    parser.add_argument("--tokens-per-step", type=int)
    parser.add_argument("--measure-peak", action="store_true")
    parser.add_argument("--with-stack", action="store_true")
    parser.add_argument("--isolate", action="store_true")
    parser.add_argument("--wall-seconds", type=float, default=10.0)
    parser.add_argument("--per-rank", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:  # torchrun passes its own "--" on when the Python it runs does (3.12+)
        argv = argv[1:]
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.per_rank:
        args.report, args.trace, args.log = (per_rank_path(p) for p in (args.report, args.trace, args.log))
        if "OMP_NUM_THREADS" not in os.environ:  # ranks share the machine's cores: one operator thread each
            torch.set_num_threads(1)
    out = Path(args.report)
    try:
        result = profile_here(args)
    except UserError as e:
        result = {"error": str(e)}
    out.write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    failed = "error" in result or bool(result["report"].get("script_exit_code"))
    # the script may have left threads (DataLoader workers, its own) that would block exit
    os._exit(1 if args.per_rank and failed else 0)


if __name__ == "__main__":
    main()


__all__ = ["ProfileReport", "ScriptHooks", "WindowDone", "main"]
