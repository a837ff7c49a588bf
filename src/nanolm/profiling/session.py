"""A profiling session: torch.profiler on a wait/warmup/active schedule repeated `repeat` times,
one analysed window per repeat, the sync watch recording during active steps only, and the
Chrome/Perfetto trace of the last window."""

from __future__ import annotations

import contextlib
import gzip
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from ..errors import UserError
from ..io import check_writable_file
from .analysis import WindowStats, analyze_window
from .syncs import SyncWatch

GZIP_ABOVE_BYTES = 20 * 2**20


@dataclass
class Window:
    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 3

    def __post_init__(self) -> None:
        for name in ("warmup", "active", "repeat"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.wait < 0:
            raise UserError(f"--wait must be >= 0, got {self.wait}")

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    @property
    def total_steps(self) -> int:
        return self.cycle * self.repeat

    @property
    def first_active_step(self) -> int:
        """1-based: every earlier step is warm-up (allocator, autotuning, compilation)."""
        return self.wait + self.warmup + 1

    def is_active(self, step: int) -> bool:
        """Whether 1-based step `step` is measured."""
        return step <= self.total_steps and (step - 1) % self.cycle >= self.wait + self.warmup

    def to_dict(self) -> dict:
        return {"wait": self.wait, "warmup": self.warmup, "active": self.active, "repeat": self.repeat}


def check_trace_path(path: str | Path | None) -> Path | None:
    """The trace path, after checking that it can be written (a UserError if not)."""
    return None if path is None else check_writable_file(path, "--trace", "trace.json")


class ProfileSession:
    """Call start(), then step() after every training step, then stop()."""

    def __init__(self, window: Window, cuda: bool, trace_path: Path | None = None, with_stack: bool = False) -> None:
        self.window, self.cuda, self.trace_path = window, cuda, trace_path
        self.windows: list[WindowStats] = []
        self.steps_done = 0
        self.trace_written: str | None = None
        self.sync_watch = SyncWatch()
        self.cuda_sync_warnings = 0
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.profiler = profile(
            activities=activities,
            schedule=schedule(wait=window.wait, warmup=window.warmup, active=window.active, repeat=window.repeat),
            on_trace_ready=self._window_done, record_shapes=False, with_stack=with_stack,
            acc_events=False,
        )
        self._stopping = False  # a window flushed by stop() ends with an unfinished step
        self._warnings: warnings.catch_warnings | None = None
        self._caught: list = []

    def _window_done(self, prof: profile) -> None:
        stats = analyze_window(list(prof.events()), drop_last_step=self._stopping)
        if stats.steps == 0:  # stopped during warm-up: nothing was measured
            return
        self.windows.append(stats)
        if self.trace_path is not None:  # each window overwrites the last: the trace is of the newest
            prof.export_chrome_trace(str(self.trace_path))
            self.trace_written = str(self.trace_path)
            if self.trace_path.stat().st_size > GZIP_ABOVE_BYTES:
                gz = self.trace_path.with_name(self.trace_path.name + ".gz")
                with open(self.trace_path, "rb") as src, gzip.open(gz, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                self.trace_path.unlink()
                self.trace_written = str(gz)

    def _set_recording(self) -> None:
        active = self.window.is_active(self.steps_done + 1)
        self.sync_watch.recording = active
        if self.cuda:
            torch.cuda.set_sync_debug_mode("warn" if active else "default")

    def start(self) -> ProfileSession:
        self.sync_watch.install()
        if self.cuda:
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
        self.profiler.start()
        self._set_recording()
        return self

    def step(self) -> None:
        self.profiler.step()
        self.steps_done += 1
        self._set_recording()

    @property
    def finished(self) -> bool:
        return self.steps_done >= self.window.total_steps

    def stop(self) -> None:
        self.sync_watch.recording = False
        self.sync_watch.uninstall()
        self._stopping = True
        with contextlib.suppress(RuntimeError):  # already stopped by the end of its schedule
            self.profiler.stop()
        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            if self._warnings is not None:
                self.cuda_sync_warnings = sum("synchroniz" in str(w.message).lower() for w in self._caught)
                self._warnings.__exit__(None, None, None)
