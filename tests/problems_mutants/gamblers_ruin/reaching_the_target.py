# mutant: returns the probability of reaching the target, not of ruin
# expect: reaching the target instead
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""gamblers_ruin: the probability of ruin, from the recurrence's closed form and by simulation."""

import math

import numpy as np


def ruin_probability(p: float, start: int, target: int) -> float:
    """P(reach 0 before target), starting at `start`, winning each unit bet with probability p.

    P(a) = p·P(a+1) + q·P(a-1), P(0) = 1, P(target) = 0. With r = q/p ≠ 1:
    P(a) = (r^a - r^N) / (1 - r^N); with r = 1: P(a) = 1 - a/N. For r > 1 the same is written with
    s = 1/r, (1 - s^(N-a)) / (1 - s^N), so that nothing overflows for large N."""
    if start <= 0:
        return 1.0
    if start >= target:
        return 0.0
    if p == 0.5:
        return start / target
    r = (1.0 - p) / p
    if r < 1.0:
        return 1 - (r**start - r**target) / (1.0 - r**target)
    s = 1.0 / r
    return 1 - (1.0 - s ** (target - start)) / (1.0 - s**target)


def simulate_ruin(p: float, start: int, target: int, n_walks: int, seed: int) -> tuple[float, float, float]:
    """(estimate, low, high): the share of n_walks simulated walks ruined, with a 95% Wald interval."""
    rng = np.random.default_rng(seed)
    pos = np.full(n_walks, start)
    alive = (pos > 0) & (pos < target)
    while alive.any():
        steps = np.where(rng.random(alive.sum()) < p, 1, -1)
        pos[alive] += steps
        alive = (pos > 0) & (pos < target)
    est = float((pos <= 0).mean())
    half = 1.96 * math.sqrt(est * (1 - est) / n_walks)
    return est, est - half, est + half
