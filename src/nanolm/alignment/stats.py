"""The statistics a sycophancy report needs, each with its denominator written down.

- ``Rate``: k of n, with a Wilson 95% interval (n = 0 gives NaN and the interval [0, 1]: a rate of
  nothing is unknown, not zero).
- ``McNemar``: the paired exact test of two answers to the same questions: only the discordant pairs
  count (b: right before, wrong after; c: wrong before, right after); under "the condition changes
  nothing" each discordant pair goes either way with probability 1/2, so the two-sided p-value is
  P(Binomial(b + c, 1/2) ≤ min(b, c)) doubled, capped at 1.
- ``MeanEstimate``: the mean of per-question probabilities with a normal-approximation 95% interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..stats import Z95, wilson_interval


@dataclass(frozen=True)
class Rate:
    """k of n; value = k / n (NaN when n = 0); ci: the Wilson 95% interval."""

    k: int
    n: int
    value: float
    ci: tuple[float, float]

    def __str__(self) -> str:
        if self.n == 0:
            return f"{self.k}/0 (undefined)"
        return f"{self.k}/{self.n} = {self.value:.1%} (95% CI {self.ci[0]:.1%}–{self.ci[1]:.1%})"


def rate(k: int, n: int) -> Rate:
    """k successes of n trials as a Rate."""
    if not 0 <= k <= n:
        raise ValueError(f"a rate needs 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Rate(0, 0, math.nan, (0.0, 1.0))
    return Rate(k, n, k / n, wilson_interval(k, n))


@dataclass(frozen=True)
class McNemar:
    """The exact McNemar test of a condition's answers against the no-opinion answers, paired by question."""

    b: int  # right without the condition, wrong with it
    c: int  # wrong without, right with
    p_value: float  # two-sided, exact (binomial on the b + c discordant pairs)


def mcnemar_exact(b: int, c: int) -> McNemar:
    """Two-sided exact McNemar p-value from the discordant counts b and c (1.0 when there are none)."""
    n = b + c
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    if n == 0:
        return McNemar(b, c, 1.0)
    # Integer arithmetic up to the last division: exact for any n, no underflow of 0.5**n.
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return McNemar(b, c, min(1.0, 2 * tail / 2**n))


@dataclass(frozen=True)
class MeanEstimate:
    """The mean of n values in [0, 1], with mean ± 1.96 standard errors as its 95% interval (clipped to [0, 1])."""

    mean: float
    n: int
    ci: tuple[float, float]


def mean_estimate(values: list[float]) -> MeanEstimate:
    n = len(values)
    if n == 0:
        return MeanEstimate(math.nan, 0, (0.0, 1.0))
    mean = sum(values) / n
    if n == 1:
        return MeanEstimate(mean, 1, (0.0, 1.0))
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = Z95 * sd / math.sqrt(n)
    return MeanEstimate(mean, n, (max(0.0, mean - half), min(1.0, mean + half)))
