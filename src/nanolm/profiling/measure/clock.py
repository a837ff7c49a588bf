"""The step clock: every step of a profiled run timed, recorded or not, so that the report can give the
step as the script runs it without the profiler (the unprofiled step U) beside the profiled one.

`StepClock.tick()` runs once a step (the script runner's optimizer-step hook, train()'s on_step): it
appends `time.perf_counter_ns()` and, on CUDA, records a `torch.cuda.Event(enable_timing=True)` on the
current stream (asynchronous, never a sync). `StepClock.profiler(on)` is told whenever the profiler turns
on or off. Step s (1-based) is the time from tick s-1 to tick s; step 1 has no start and no time.

Each step gets a label (`labels`):
- `warm`: the first `skip` steps (allocation, compilation, autotuning);
- `boundary`: the profiler turned on or off during it (its start, its stop, the trace written);
- `recorded`: the profiler was on all through it (its warm-up steps included: on CUDA, CUPTI runs then);
- `reference`: the profiler was off all through it.

U is the median time over the reference steps, given only with at least MIN_REFERENCE of them: on CUDA the
device's clock (the time between the events the GPU reached), else the host's. On a GPU the host runs ahead of
the device by up to a queue of launches, or blocks on a full queue, so its tick-to-tick times are not the
step's: on an H200, a compiled gpt2-124m's 4 reference steps read 24.9-67.6 ms (median 41.0) on the host and
68.0 ms on the device, whose steps the profiled trace also gave (68.1 ms).
Everything after the run is a pure function of the tick times and the on/off changes, so it is tested on
hand-made lists."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..report import ProfileReport, Stat

WARM, REFERENCE, BOUNDARY, RECORDED = "warm", "reference", "boundary", "recorded"


HOST_CLOCK, DEVICE_CLOCK = "the host's clock", "the device's clock"


SKIP = 2  # warm steps at the start: their times are never a reference


MIN_REFERENCE = 3  # reference steps needed for U


TAIL_STEPS = 3  # steps a run goes on for after the profiler's last stop: reference steps for U


def step_times_ms(stamps_ns: list[int]) -> list[float | None]:
    """Each step's host time in ms, index s-1 for step s (1-based), from the tick times in ns; step 1's
    is None (the clock has no time for its start)."""
    return [None] + [(b - a) / 1e6 for a, b in zip(stamps_ns, stamps_ns[1:])]


def labels(n_steps: int, changes: list[tuple[int, bool]], on_at_start: bool, skip: int = SKIP) -> list[str]:
    """The label of each of steps 1..n_steps (index s-1 for step s).

    changes: (step during which the profiler turned on or off, on), in the order they happened;
    on_at_start: whether it was on when step 1 began."""
    changed = {step for step, _ in changes}
    out, on, i = [], on_at_start, 0
    for step in range(1, n_steps + 1):
        while i < len(changes) and changes[i][0] < step:
            on, i = changes[i][1], i + 1
        if step <= skip:
            out.append(WARM)
        elif step in changed:
            out.append(BOUNDARY)
        else:
            out.append(RECORDED if on else REFERENCE)
    return out


def times_labelled(times: list[float | None], step_labels: list[str], label: str) -> list[float]:
    """The times (ms) of the steps with `label` (steps without a time left out)."""
    return [t for t, lab in zip(times, step_labels) if lab == label and t is not None]


def unprofiled_step(times: list[float | None], step_labels: list[str]) -> Stat | None:
    """U: median, min and max of the reference steps' times (ms); None with fewer than MIN_REFERENCE."""
    reference = times_labelled(times, step_labels, REFERENCE)
    return Stat.of(reference) if len(reference) >= MIN_REFERENCE else None


def boundary_extra_ms(times: list[float | None], step_labels: list[str], u_ms: float | None) -> float | None:
    """How much longer than U the slowest boundary step took (ms; the stall of a profiler start or stop,
    the trace written); None without U or without a timed boundary step."""
    boundary = times_labelled(times, step_labels, BOUNDARY)
    if u_ms is None or not boundary:
        return None
    return max(boundary) - u_ms


def overhead_note(u: Stat, reference_steps: int, profiled_ms: float) -> str:
    """The unprofiled and the profiled step in words, e.g. "unprofiled 21.0 ms (5 steps); profiled 34.3 ms:
    the profiler added 63%"."""
    head = f"unprofiled {u.median:.1f} ms ({reference_steps} steps); profiled {profiled_ms:.1f} ms"
    ratio = profiled_ms / u.median
    if ratio >= 1:
        return f"{head}: the profiler added {ratio - 1:.0%}"
    return f"{head}: the profiled step was {1 - ratio:.0%} shorter (the two differ by the machine's noise)"


@dataclass
class ClockResult:
    """What the clock measured, after the run (ms)."""

    labels: list[str]
    host_ms: list[float | None]
    device_ms: list[float | None] | None = None  # CUDA: each step's time between its two events
    unprofiled: Stat | None = None  # U, by the device's clock where it measured one, else by the host's
    reference_steps: int = 0
    boundary_extra_ms: float | None = None
    host_unprofiled: Stat | None = field(default=None)  # the host's U, when U is the device's
    source: str = HOST_CLOCK  # which clock U is from, in words

    @classmethod
    def of(cls, host_ms: list[float | None], step_labels: list[str], device_ms: list[float | None] | None = None) -> ClockResult:
        host_u = unprofiled_step(host_ms, step_labels)
        device_u = unprofiled_step(device_ms, step_labels) if device_ms is not None else None
        u, times = (device_u, device_ms) if device_u is not None else (host_u, host_ms)
        return cls(
            step_labels,
            host_ms,
            device_ms,
            u,
            len(times_labelled(times, step_labels, REFERENCE)),
            boundary_extra_ms(times, step_labels, u.median if u else None),
            host_u if device_u is not None else None,
            DEVICE_CLOCK if device_u is not None else HOST_CLOCK,
        )


def rate_step_ms(report: ProfileReport) -> float:
    """The step (ms) throughput and MFU are measured against: U when the clock measured it, else the
    profiled step."""
    return report.unprofiled_step_ms.median if report.unprofiled_step_ms is not None else report.step_ms.median


@dataclass
class ClockPart:
    """A report's part from the step clock: the unprofiled step (None: not measured), the profiled step over it, the
    extra time of the step in which the recording started or stopped, and the notes saying them in words."""

    unprofiled_step_ms: Stat | None = None
    profiled_over_unprofiled: float | None = None
    boundary_ms: float | None = None
    notes: list[str] = field(default_factory=list)


def clock_part(step_ms: Stat, clock: ClockResult | None) -> ClockPart:
    """The clock's part of a report whose profiled step is step_ms; empty without a clock (a script that took no
    optimizer step), with a note saying why U is missing when too few steps ran with the profiler off."""
    if clock is None:
        return ClockPart()
    u = clock.unprofiled
    if u is None:
        return ClockPart(
            notes=[
                f"the unprofiled step was not measured: {clock.reference_steps} steps ran with the "
                f"profiler off (at least {MIN_REFERENCE} are needed)"
            ]
        )
    note = overhead_note(u, clock.reference_steps, step_ms.median)
    if clock.host_unprofiled is not None:
        note += (
            f"; by {clock.source} (the host's gives {clock.host_unprofiled.median:.1f} ms: it runs ahead of the "
            "GPU or waits on its queue)"
        )
    elif clock.device_ms is not None:  # on CUDA, but the events timed too few reference steps
        note += f"; by {clock.source}, which a GPU's queue can put ahead of or behind the step (too few device times)"
    notes = [note]
    if clock.boundary_extra_ms is not None and clock.boundary_extra_ms > 0:
        notes.append(
            f"the slowest step in which the profiler started or stopped took "
            f"{clock.boundary_extra_ms:.1f} ms more than the unprofiled step"
        )
    return ClockPart(u, step_ms.median / u.median, clock.boundary_extra_ms, notes)
