"""One candidate type and one ranker for both verdicts (host: judge.host, GPU: judge.gpu).

A candidate is a part of the step that costs time, with the fixes that would shrink it. The ranker puts the
largest gain first ("speed up what takes the time, not what is easiest to speed up"); gains within
RANK_BUCKET of the step of each other count as equal, and among them the cheaper fix (FIX_ORDER) goes
first. The order is found by a bubble pass until nothing moves, so it is the same whatever the input order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..report import Bottleneck

if TYPE_CHECKING:
    from ..measure.replay import WhatIf

# Fixes from cheapest to dearest to try: a line removed, a loop reordered, a flag, a rewrite of the training.
FIX_ORDER = ["remove syncs", "prefetch", "data loader", "torch.compile", "bf16 autocast", "larger batch", "overlap communication"]

# CUDA graphs cost what torch.compile costs: one flag (mode="reduce-overhead") on the same call.
_SAME_COST = {"cuda graphs": "torch.compile"}

RANK_BUCKET = 0.05  # gains within this share of the step rank as equal: the cheaper fix first


@dataclass
class Candidate:
    """A part of the step (ms per step) that a fix could shrink, before it is judged into a report.Finding."""

    bottleneck: Bottleneck
    what: str
    ms: float
    fix_kinds: list[str]  # the fixes that apply, cheapest first (FIX_ORDER's names, or "cuda graphs")
    evidence: list[str]
    projected_ms: float | None = None  # host: the step with the part fixed (Amdahl); None: no projection
    change: WhatIf | None = None  # GPU: what the replay changes to project the fix; None: no projection
    upper_bound: bool = False  # the projection is a bound, not an estimate


def fix_cost(kinds: Iterable[str]) -> int:
    """The rank in FIX_ORDER of the cheapest of `kinds`; len(FIX_ORDER) when none is known."""
    ranks = [FIX_ORDER.index(_SAME_COST.get(k, k)) for k in kinds if _SAME_COST.get(k, k) in FIX_ORDER]
    return min(ranks, default=len(FIX_ORDER))


T = TypeVar("T")


def ranked(
    items: list[T],
    step_ms: float,
    gain: Callable[[T], float | None],
    cost: Callable[[T], int],
    ms: Callable[[T], float] | None = None,
    lead_floor: float = 0.0,
) -> list[T]:
    """items, largest gain (ms per step) first. A gain of None (no projection) or under lead_floor of the step
    goes after every item that leads; ties in gain go to the larger ms (the part's own time), then the cheaper
    fix. Two neighbours that both lead, with gains within RANK_BUCKET of the step, swap when the second's fix is
    cheaper."""
    floor = lead_floor * step_ms
    size = ms or (lambda item: 0.0)

    def key(item: T) -> tuple[bool, float, float, int]:
        g = gain(item)
        leads = g is not None and g >= floor
        return (not leads, -(g if g is not None else -1.0), -size(item), cost(item))

    out = sorted(items, key=key)
    moved = True
    while moved:
        moved = False
        for i in range(len(out) - 1):
            ga, gb = gain(out[i]), gain(out[i + 1])
            if ga is None or gb is None or gb < floor:
                continue
            if ga - gb < RANK_BUCKET * step_ms and cost(out[i + 1]) < cost(out[i]):
                out[i], out[i + 1], moved = out[i + 1], out[i], True
    return out
