"""A profiling session: torch.profiler on a wait/warmup/active schedule repeated `repeat` times (more
when those windows disagree), one analysed window per repeat, the sync watch recording during active
steps only, and the Chrome/Perfetto trace of the median window.

Nothing the user named is written until there is a result: each window's trace is exported (torch's C++,
nothing else at the window's end) to its own staging file beside the final path (`staging_path`); after
the run `ProfileSession.keep_median_trace` keeps the median window's (gzipped when large) and removes the
others, and `commit_trace` moves it into place once a report is made. The
profiler library's own messages (kineto writes lines to fd 2 at every start and stop) go to a log file,
not the terminal (`QuietProfiler`)."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

from ...errors import UserError
from ...io import check_writable_file
from ..assemble import Measured
from ..judge.host import step_parts
from ..measure.host import WindowStats, median_window, step_disagreements, summarize_windows
from ..report import ProfileReport, Stat
from .clock import StepClock
from .syncs import SyncWatch

GZIP_ABOVE_BYTES = 20 * 2**20


MAX_STEPS = 1000  # --wait, --warmup, --active: more would profile (or skip) for hours


MAX_REPEAT = 100


MAX_EXTRA_WINDOWS = 5


# torch warns at each window that it does not keep the last window's events (acc_events=False). That is
# what nanolm wants: each window is analysed on its own when it ends.
_CLEARS_EVENTS = r"(?s).*Profiler clears events at the end of each cycle"


@dataclass
class Window:
    """Which steps are measured. By default one recording: `wait` steps skipped, `warmup` profiled and dropped,
    then `repeat` groups of `active` steps recorded back to back, split into windows after the run, so no
    profiler start or stop (a device sync, CUPTI's flush, the trace's export) lands between two windows.
    `separate=True` is the older schedule: a start and a stop around each window (--windows separate)."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 3
    # False: never measure more windows than `repeat` (ranks of one distributed run must stop at the same
    # step, so none of them may decide on its own to go on)
    extend: bool = True
    separate: bool = False

    def __post_init__(self) -> None:
        for name in ("warmup", "active", "repeat"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.wait < 0:
            raise UserError(f"--wait must be >= 0, got {self.wait}")
        for name in ("wait", "warmup", "active"):
            if getattr(self, name) > MAX_STEPS:
                raise UserError(
                    f"--{name} {getattr(self, name)} is too many steps (at most {MAX_STEPS}); "
                    f"a few steps are enough, e.g. --{name} {getattr(Window, name)}"
                )
        if self.repeat > MAX_REPEAT:
            raise UserError(
                f"--repeat {self.repeat} is too many windows (at most {MAX_REPEAT}); 3 to 10 give a median and a spread"
            )

    @property
    def max_repeat(self) -> int:
        """Windows measured at most: when the first `repeat` disagree (the stability rule in analysis.py),
        up to twice as many, at most MAX_EXTRA_WINDOWS more. One window has nothing to disagree with."""
        if self.repeat < 2 or not self.extend:
            return self.repeat
        return self.repeat + min(self.repeat, MAX_EXTRA_WINDOWS)

    @property
    def groups(self) -> int:
        """Windows per recording."""
        return 1 if self.separate else self.repeat

    @property
    def recordings(self) -> int:
        """Recordings planned before any extension."""
        return self.repeat if self.separate else 1

    @property
    def max_recordings(self) -> int:
        """Recordings at most: one more recording of `repeat` windows when the first disagree (one recording)."""
        if self.separate:
            return self.max_repeat
        return 2 if self.max_repeat > self.repeat else 1

    @property
    def cycle(self) -> int:
        """Steps of one recording, its skipped and warm-up steps included."""
        return self.wait + self.warmup + self.active * self.groups

    @property
    def total_steps(self) -> int:
        return self.cycle * self.recordings

    @property
    def max_steps(self) -> int:
        """Steps the profiler may need, extensions included."""
        return self.cycle * self.max_recordings

    @property
    def first_active_step(self) -> int:
        """1-based: every earlier step is warm-up (allocator, autotuning, compilation)."""
        return self.wait + self.warmup + 1

    def is_active(self, step: int) -> bool:
        """Whether 1-based step `step` is measured."""
        return step <= self.total_steps and (step - 1) % self.cycle >= self.wait + self.warmup

    def to_dict(self) -> dict:
        return {
            "wait": self.wait,
            "warmup": self.warmup,
            "active": self.active,
            "repeat": self.repeat,
            "schedule": "separate" if self.separate else "one recording",
        }


def check_trace_path(path: str | Path | None) -> Path | None:
    """The trace path, after checking that it can be written (a UserError if not)."""
    return None if path is None else check_writable_file(path, "--trace", "trace.json")


def staging_path(final: Path, suffix: str = "partial") -> Path:
    """A hidden file beside `final` (same file system, so the move into place is a rename)."""
    return final.with_name(f".{final.name}.{os.getpid()}.{suffix}")


def log_path_for(trace: Path) -> Path:
    """Where the profiler library's messages go: beside the trace, profile-trace.json -> profile-trace.profiler.log."""
    return trace.with_name(trace.name.split(".")[0] + ".profiler.log")


def window_trace_path(trace: Path, index: int) -> Path:
    """The staging file of window `index`'s trace, beside the session's staged trace."""
    return trace.with_name(f"{trace.name}.window{index}")


def gzip_if_large(path: Path, final: Path | None = None) -> Path:
    """Move an exported trace to `final` (default: where it is), gzipped to final + ".gz" when larger than
    GZIP_ABOVE_BYTES (the other form, from an earlier run, is removed); the file it is now. Runs after the
    script's run, never inside its steps."""
    final = final or path
    gz = final.with_name(final.name + ".gz")
    if path.stat().st_size <= GZIP_ABOVE_BYTES:
        if path != final:
            os.replace(path, final)
        gz.unlink(missing_ok=True)
        return final
    with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    if final.exists() and final != path:
        final.unlink()
    return gz


def write_trace(prof, path: Path) -> Path:
    """Export a recording's Chrome trace to `path` and gzip it when large (gzip_if_large); the file written."""
    prof.export_chrome_trace(str(path))
    return gzip_if_large(path)


def commit_trace(written: str | Path | None, final: Path) -> tuple[str | None, list[str]]:
    """Move a staged trace into place: to `final`, or final + ".gz" when it was gzipped (an older plain
    `final` is then removed, so it is not mistaken for this one). (The path, the files it replaced.)"""
    if written is None:
        return None, []
    written = Path(written)
    target = final.with_name(final.name + ".gz") if written.name.endswith(".gz") else final
    replaced = [str(p) for p in dict.fromkeys([target, final]) if p.exists()]
    os.replace(written, target)
    if target != final and final.exists():
        final.unlink()
    return str(target), replaced


def commit_log(staged: Path | None, final: Path | None) -> str | None:
    """Move the profiler's staged log into place (when it holds anything); the path, or None."""
    if staged is None or not staged.exists():
        return None
    if final is None or staged.stat().st_size == 0:
        staged.unlink()
        return None
    os.replace(staged, final)
    return str(final)


def discard(*paths: str | Path | None) -> None:
    """Remove staged files (a trace in either form, a log) after a failure."""
    for p in paths:
        if p is not None:
            for candidate in (Path(p), Path(str(p) + ".gz")):
                candidate.unlink(missing_ok=True)


class QuietProfiler:
    """Keeps the profiler library's own output out of the user's terminal: around each profiler call,
    fd 2 (where kineto's C++ writes its `profiler_start` / `profiler_stop` lines) points at a log file
    (os.devnull without one), and torch's warning that it clears events at each cycle is filtered."""

    def __init__(self, log: Path | None = None) -> None:
        self.log = log
        self._fd: int | None = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        if self._fd is None:
            target = str(self.log) if self.log is not None else os.devnull
            self._fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(self._fd, 2)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_CLEARS_EVENTS)
                yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


_NANOLM_PROFILING_DIR = str(Path(__file__).resolve().parent)


def user_sync_warnings(caught: list) -> int:
    """torch.cuda's sync debug warnings raised from the script's own code: those whose call site (the warning's
    filename) is neither inside torch (an optimizer reading its step, the profiler's own stop) nor inside this
    profiler, the rule SyncWatch uses for the sync list."""
    return sum(
        "synchroniz" in str(w.message).lower()
        and not str(Path(w.filename).resolve()).startswith((_TORCH_DIR, _NANOLM_PROFILING_DIR))
        for w in caught
    )


def _offset(base: Callable[[int], object], steps_before: int) -> Callable[[int], object]:
    """The schedule of a profiler started after `steps_before` steps already ran (its step 0 is theirs + 1)."""
    return lambda step: base(step + steps_before)


class ProfileSession:
    """Call start(), then step() after every training step, then stop(); after the run, keep_median_trace().

    Never call these inside an open profiler range (torch's `Optimizer.step#...` one included): a range
    opened under one recording and closed under the next writes into the first one's freed events.
    trace_path: the staged trace (see commit_trace); each window's goes beside it (window_trace_path).
    steps_before: steps the script ran before start() (the schedule counts them as the first steps).
    clock: told whenever the profiler turns on (warming up or recording) or off (StepClock.profiler).
    After its recordings (Window) the session is finished, unless the windows' step times disagree
    (analysis.step_disagreements): then it records once more. Once finished, it stops profiling."""

    def __init__(
        self,
        window: Window,
        cuda: bool,
        trace_path: Path | None = None,
        with_stack: bool = False,
        quiet: QuietProfiler | None = None,
        steps_before: int = 0,
        clock: StepClock | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.window, self.cuda, self.trace_path, self.clock = window, cuda, trace_path, clock
        self._windows: list[WindowStats] = []  # filled after the run, from the windows' traces (analyze_windows)
        self._analysed = False
        self.window_traces: list[Path] = []  # each window's exported trace, in the order of self.windows
        self._window_stopping: list[bool] = []  # per exported window: cut short by stop() (its last step unfinished)
        self._window_steps_ms: list[float] = []  # per exported window: its mean step (host clock), for the extension
        self._stamps: list[int] = []  # perf_counter_ns at each step(), for the windows' step times
        # Without a trace path the windows' traces go to a scratch folder (the GPU analysis reads the median one):
        # `scratch` (a folder someone else removes) or a temporary one that cleanup() removes.
        self._own_scratch = trace_path is None and scratch is None
        self._scratch = scratch  # made on the first window's export when this session owns it
        self.median_trace: Path | None = None  # the median window's trace file, once keep_median_trace() ran
        self.steps_done = steps_before
        self.planned_recordings = window.recordings
        self.median_group: tuple[int, int] | None = None  # (first step, steps) of the median window in median_trace
        self._groups: list[tuple[Path, int, int]] = []  # per analysed window: (its recording's trace, first, count)
        self.extended_because: list[str] = []  # the disagreements that made it measure more windows
        self.trace_written: str | None = None
        self.sync_watch = SyncWatch()
        self.cuda_sync_warnings = 0
        self.quiet = quiet or QuietProfiler()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        base = schedule(
            wait=window.wait, warmup=window.warmup, active=window.active * window.groups, repeat=window.max_recordings
        )
        self.profiler = profile(
            activities=activities,
            schedule=_offset(base, steps_before),
            on_trace_ready=self._window_done,
            record_shapes=False,
            with_stack=with_stack,
            acc_events=False,  # each recording's trace is exported on its own as it ends
        )
        self._stopping = False  # a window flushed by stop() ends with an unfinished step
        self._stopped = False
        self._warnings: warnings.catch_warnings | None = None
        self._caught: list = []

    def _trace_base(self) -> Path:
        if self.trace_path is not None:
            return self.trace_path
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="nanolm-windows-"))
        return self._scratch / "trace.json"

    @property
    def planned_repeat(self) -> int:
        """Windows planned now (extensions included)."""
        return self.planned_recordings * self.window.groups

    def _window_done(self, prof: profile) -> None:
        """The end of a recording, inside the script's step: torch's C++ export of its trace and its windows' step
        times from this session's own clock, nothing else (no events() parse, no analysis, no gzip)."""
        if self.finished and not self._stopping:
            return
        path = window_trace_path(self._trace_base(), len(self.window_traces))
        prof.export_chrome_trace(str(path))
        self.window_traces.append(path)
        self._window_stopping.append(self._stopping)
        w = self.window
        recent = self._stamps[-(w.active * w.groups + 1) :]
        for g in range(0, len(recent) - 1, w.active):
            part = recent[g : g + w.active + 1]
            if len(part) > 1:
                self._window_steps_ms.append((part[-1] - part[0]) / 1e6 / (len(part) - 1))
        if len(self.window_traces) == w.recordings and not self._stopping and w.max_recordings > w.recordings:
            self.extended_because = step_disagreements(self._window_steps_ms)
            if self.extended_because:
                self.planned_recordings = w.max_recordings

    @property
    def windows(self) -> list[WindowStats]:
        """Each measured window's numbers (analysed from its trace when first read after the windows ended)."""
        if not self._analysed and self.window_traces and (self._stopped or self.finished):
            self.analyze_windows()
        return self._windows

    @windows.setter
    def windows(self, value: list[WindowStats]) -> None:  # a wall-clock window made elsewhere (the script runner)
        self._windows, self._analysed = value, True

    def analyze_windows(self) -> list[WindowStats]:
        """After the run: each window's numbers from its recording's trace (the same analysis a recorded trace
        gets, nanolm.profiling.measure.window.trace_window_stats), `active` consecutive steps each; a recording cut short by
        stop() loses its unfinished last step; recordings that measured no step are dropped with their files."""
        from ..measure.window import trace_window_stats
        from ..trace.load import load_trace, step_groups

        if self._analysed or not self.window_traces:
            return self._windows
        self._analysed = True
        kept = []
        for path, stopping in zip(self.window_traces, self._window_stopping, strict=True):
            try:
                trace = load_trace(path)
            except UserError:  # stopped during warm-up: no ProfilerStep range was recorded
                trace = None
            steps = [] if trace is None else trace.steps[:-1] if stopping else trace.steps
            groups = step_groups(len(steps), self.window.active, partial=True) if steps else []
            for first, count in groups:
                self._windows.append(trace_window_stats(trace, *trace.group_span(first, count)))
                self._groups.append((path, first, count))
            if groups:
                kept.append(path)
            else:
                path.unlink(missing_ok=True)
        self.window_traces = kept
        return self._windows

    def keep_median_trace(self) -> str | None:
        """After the run: analyse the windows (analyze_windows), keep the trace of the recording that holds the
        median window (the window the report's tables describe) as the staged trace, gzipped when large, and
        remove the other recordings' files; the file kept at the trace path, or None without one (then
        `median_trace` is the scratch file, which cleanup() removes). `median_group` says where in it the median
        window's steps are."""
        self.analyze_windows()
        if not self.window_traces:
            return self.trace_written
        middle = median_window(self._windows)
        path, first, count = self._groups[next(i for i, w in enumerate(self._windows) if w is middle)]
        for other in self.window_traces:
            if other != path:
                other.unlink(missing_ok=True)
        if self.trace_path is not None:
            self.trace_written = str(gzip_if_large(path, self.trace_path))
            self.median_trace = Path(self.trace_written)
        else:
            self.median_trace = path
        self.median_group = (first, count)
        self.window_traces = []
        return self.trace_written

    def cleanup(self) -> None:
        """Remove the scratch folder this session made (its windows' traces when no trace path was given)."""
        if self._own_scratch and self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def discard_traces(self) -> None:
        """Remove every window's staged trace (after a failure)."""
        for path in self.window_traces:
            path.unlink(missing_ok=True)
        self.window_traces = []
        self.cleanup()

    def _tell_clock(self) -> None:
        if self.clock is not None:
            self.clock.profiler(not self._stopped and self.profiler.current_action != ProfilerAction.NONE)

    def is_active(self, step: int) -> bool:
        """Whether 1-based step `step` is measured, with the windows planned now."""
        w = self.window
        return step <= w.cycle * self.planned_recordings and (step - 1) % w.cycle >= w.wait + w.warmup

    def _set_recording(self) -> None:
        active = not self._stopped and self.is_active(self.steps_done + 1)
        self.sync_watch.recording = active
        if self.cuda:
            torch.cuda.set_sync_debug_mode("warn" if active else "default")

    def start(self) -> ProfileSession:
        self.sync_watch.install()
        if self.cuda:
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
        with self.quiet():
            self.profiler.start()
        self._tell_clock()
        self._set_recording()
        return self

    def step(self) -> None:
        if self._stopped:
            return
        self._stamps.append(time.perf_counter_ns())
        with self.quiet():
            self.profiler.step()
        self.steps_done += 1
        if self.finished:
            self.stop()
        self._tell_clock()
        self._set_recording()

    @property
    def finished(self) -> bool:
        return self.steps_done >= self.window.cycle * self.planned_recordings

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.sync_watch.recording = False
        self.sync_watch.uninstall()
        self._stopping = not self.finished
        with contextlib.suppress(RuntimeError), self.quiet():  # already stopped by the end of its schedule
            self.profiler.stop()
        self._tell_clock()
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            if self._warnings is not None:
                self.cuda_sync_warnings = user_sync_warnings(self._caught)
                self._warnings.__exit__(None, None, None)


def measured_from_session(
    session: ProfileSession, target: str, device: str, settings: dict, tokens_per_step: int | None, notes: list[str]
) -> Measured:
    """The windows a live session recorded (the trace is analysed first); a UserError when none completed."""
    session.analyze_windows()
    if not session.windows:
        raise UserError(
            f"no measured steps: the run ended after {session.steps_done} steps, before the first "
            f"measured step {session.window.first_active_step}; lower --wait/--warmup or run longer"
        )
    s = summarize_windows(session.windows)
    syncs = session.sync_watch.sites(s.steps_measured)
    notes = [*notes, *s.notes, *_session_notes(session)]
    if not session.cuda and syncs:
        notes.append("the syncs listed cost nothing on a CPU; each would be a host-device sync on a GPU")
    return Measured(
        target=target,
        device=device,
        scope="CPU and CUDA" if session.cuda else "CPU only: no GPU here, so this profiles the CPU",
        window={**session.window.to_dict(), "windows": len(session.windows)},
        first_measured_step=session.window.first_active_step,
        summary=s,
        syncs=syncs,
        settings=settings,
        tokens_per_step=tokens_per_step,
        tokens_per_s=_profiled_tokens(session, tokens_per_step, s.step_ms),
        trace_path=session.trace_written,
        step_parts=step_parts(median_window(session.windows), session.cuda),
        notes=notes,
    )


def _session_notes(session: ProfileSession) -> list[str]:
    notes = []
    if session.extended_because:
        notes.append(
            f"the first {session.window.repeat} windows disagreed ({'; '.join(session.extended_because)}): "
            f"measured up to {session.planned_repeat}"
        )
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


def with_committed_trace(
    report: ProfileReport, staged_trace: str | None, final: Path | None, staged_log: Path | None
) -> ProfileReport:
    """The report once its staged trace and profiler log are moved to their final paths (final None: no trace was
    asked for, nothing moves), naming the files the trace replaced."""
    if final is None:
        return report
    trace_path, replaced = commit_trace(staged_trace, final)
    return replace(
        report, trace_path=trace_path, trace_replaced=replaced, profiler_log=commit_log(staged_log, log_path_for(final))
    )
