"""A trace's training steps: the ``ProfilerStep#k`` ranges torch.profiler's schedule marks, their numbers, a range of
them chosen by number, and the windows (groups of steps) the analysis cuts them into."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from ...errors import UserError
from .events import STEP_PREFIX, Event

StepRange = tuple[int | None, int | None]  # ProfilerStep numbers [first, stop), as a Python range; None: open


def step_number(e: Event) -> int | None:
    """k of a ``ProfilerStep#k`` range (None: another event, or a name with no number)."""
    if e.cat != "user_annotation" or not e.name.startswith(STEP_PREFIX):
        return None
    digits = e.name[len(STEP_PREFIX) :]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def in_range(k: int | None, steps: StepRange) -> bool:
    return k is not None and (steps[0] is None or k >= steps[0]) and (steps[1] is None or k < steps[1])


def is_step(e: Event) -> bool:
    """Whether e is a ``ProfilerStep`` range (numbered or not)."""
    return e.cat == "user_annotation" and e.name.startswith(STEP_PREFIX)


def steps_by_lane(events: Iterable[Event]) -> dict[tuple, list[Event]]:
    """The ProfilerStep ranges among events, by (pid, tid) lane, each lane's by start."""
    by_lane: dict[tuple, list[Event]] = defaultdict(list)
    for e in events:
        if is_step(e):
            by_lane[(e.pid, e.tid)].append(e)
    return {lane: sorted(found, key=lambda e: e.ts) for lane, found in by_lane.items()}


def main_lane(by_lane: dict[tuple, list[Event]]) -> tuple | None:
    """The lane with the most ProfilerStep ranges: the training loop's (of two with as many, the one whose first step
    starts first, so the choice does not hang on the order lanes were read in)."""
    return max(by_lane, key=lambda k: (len(by_lane[k]), -by_lane[k][0].ts), default=None)


class StepSpan(NamedTuple):
    """The host time to read for a range of steps (us), and the main lane they were found on."""

    start: float
    end: float
    lane: tuple | None
    share: float = 1.0  # of the main lane's step time (its first step's start to its last one's end)


def span_of_steps(step_events: list[Event], steps: StepRange, where: str) -> StepSpan:
    """The host time to read for the ProfilerSteps numbered in `steps` on the main lane (main_lane, chosen over the
    whole trace's steps, as the whole trace's analysis chooses it): from the start of the step before the first (the
    kernels it queued still run in the range, and their launches are its host events) to the end of the last; a
    UserError naming the steps there are when none is in the range."""
    by_lane = steps_by_lane(e for e in step_events if e.ts is not None and e.dur is not None)
    lane = main_lane(by_lane)
    if lane is None:
        return NO_STEPS_SPAN
    ordered = by_lane[lane]
    chosen = [i for i, e in enumerate(ordered) if in_range(step_number(e), steps)]
    if not chosen:
        numbers = sorted(k for k in map(step_number, ordered) if k is not None) or [0]
        asked = f"{'' if steps[0] is None else steps[0]}:{'' if steps[1] is None else steps[1]}"
        raise UserError(
            f"{where} has ProfilerStep#{numbers[0]} to #{numbers[-1]}; --steps {asked} holds none of them; give a "
            f"range within them, such as --steps {numbers[0]}:{numbers[0] + min(3, len(numbers))}"
        )
    start, end = ordered[max(0, chosen[0] - 1)].ts, max(ordered[i].end for i in chosen)
    whole = max(e.end for e in ordered) - ordered[0].ts
    return StepSpan(start, end, lane, (end - start) / whole if whole > 0 else 1.0)


NO_STEPS_SPAN = StepSpan(math.inf, -math.inf, None, 0.0)  # no step at all: nothing kept, and _load says the trace has none


def step_groups(n_steps: int, size: int, partial: bool = False) -> list[tuple[int, int]]:
    """n_steps consecutive steps cut into windows of `size` (at most n_steps): (first index, count) per window.
    partial=True keeps a shorter last window (a live recording stopped mid-window still measured those steps);
    otherwise every window has the same count, so their medians compare like with like."""
    size = max(1, min(size, n_steps))
    last = n_steps if partial else n_steps - size + 1
    return [(i, min(size, n_steps - i)) for i in range(0, max(last, 0), size)]
