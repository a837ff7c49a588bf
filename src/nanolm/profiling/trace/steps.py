"""A trace's training steps: the ``ProfilerStep#k`` ranges torch.profiler's schedule marks, their numbers, a range of
them chosen by number, and the windows (groups of steps) the analysis cuts them into."""

from __future__ import annotations

import math
from collections import defaultdict

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


def span_of_steps(step_events: list[Event], steps: StepRange, where: str) -> tuple[float, float]:
    """(start, end) us of the host time to read for the ProfilerSteps numbered in `steps` on the lane with the most
    steps: from the start of the step before the first (the kernels it queued still run in the range, and their
    launches are its host events) to the end of the last; a UserError naming the steps there are when none is in
    the range."""
    by_lane: dict[tuple, list[Event]] = defaultdict(list)
    for e in step_events:
        if step_number(e) is not None and e.ts is not None and e.dur is not None:
            by_lane[(e.pid, e.tid)].append(e)
    if not by_lane:
        return NO_STEPS_SPAN
    lane = max(by_lane, key=lambda k: len(by_lane[k]))
    chosen = [e for e in by_lane[lane] if in_range(step_number(e), steps)]
    if not chosen:
        numbers = sorted(step_number(e) for e in by_lane[lane])
        asked = f"{'' if steps[0] is None else steps[0]}:{'' if steps[1] is None else steps[1]}"
        raise UserError(
            f"{where} has ProfilerStep#{numbers[0]} to #{numbers[-1]}; --steps {asked} holds none of them; give a "
            f"range within them, such as --steps {numbers[0]}:{numbers[0] + min(3, len(numbers))}"
        )
    ordered = sorted(by_lane[lane], key=lambda e: e.ts)
    first = ordered.index(min(chosen, key=lambda e: e.ts))
    return ordered[max(0, first - 1)].ts, max(e.end for e in chosen)


NO_STEPS_SPAN = (math.inf, -math.inf)  # no step at all: nothing kept, and _load says the trace has none


def step_groups(n_steps: int, size: int, partial: bool = False) -> list[tuple[int, int]]:
    """n_steps consecutive steps cut into windows of `size` (at most n_steps): (first index, count) per window.
    partial=True keeps a shorter last window (a live recording stopped mid-window still measured those steps);
    otherwise every window has the same count, so their medians compare like with like."""
    size = max(1, min(size, n_steps))
    last = n_steps if partial else n_steps - size + 1
    return [(i, min(size, n_steps - i)) for i in range(0, max(last, 0), size)]
