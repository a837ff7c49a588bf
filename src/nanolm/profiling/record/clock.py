"""The step clock a live run ticks once a step (host time, and on CUDA one timing event a step), told when the
profiler turns on or off; its maths (the unprofiled step U and what the recording cost) is
nanolm.profiling.measure.clock."""

from __future__ import annotations

import time

from ..measure.clock import SKIP, ClockResult, labels, step_times_ms


class StepClock:
    """Ticks once a step; told when the profiler turns on or off. `result()` after the run."""

    def __init__(self, cuda: bool = False, skip: int = SKIP, profiler_on: bool = False) -> None:
        self.cuda, self.skip = cuda, skip
        self.stamps_ns: list[int] = []
        self.events: list = []  # CUDA: one timing event a step
        self.changes: list[tuple[int, bool]] = []  # (step during which the profiler turned on or off, on)
        self.on_at_start = self._on = profiler_on

    def tick(self) -> None:
        """The end of a step: its host time (ns); on CUDA, an event on the current stream (no sync)."""
        self.stamps_ns.append(time.perf_counter_ns())
        if self.cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)

    @property
    def steps(self) -> int:
        return len(self.stamps_ns)

    def profiler(self, on: bool) -> None:
        """The profiler turned on (recording or warming up) or off now, during the step after the last tick."""
        if on != self._on:
            self.changes.append((self.steps + 1, on))
            self._on = on

    def device_times_ms(self) -> list[float | None] | None:
        """Each step's device time (ms) from its events: one synchronize, after the run. None off CUDA."""
        if not self.cuda or not self.events:
            return None
        import torch

        torch.cuda.synchronize()
        return [None] + [a.elapsed_time(b) for a, b in zip(self.events, self.events[1:])]

    def result(self) -> ClockResult:
        step_labels = labels(self.steps, self.changes, self.on_at_start, self.skip)
        return ClockResult.of(step_times_ms(self.stamps_ns), step_labels, self.device_times_ms())
