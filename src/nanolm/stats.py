"""The few statistics every part of nanolm shares: the normal quantile of a 95% interval, the Wilson interval of
a rate and the Fisher interval of a correlation. One definition each; the reports built on them (a probe's
accuracy, a sycophancy rate, a reward model's correlation) import them from here."""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile: a 95% interval is ± Z95 standard errors


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of the rate correct / n at `confidence` (scipy's binomtest)."""
    from scipy.stats import binomtest

    ci = binomtest(correct, n).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


def fisher_interval(r: float, se: float) -> tuple[float, float]:
    """A correlation's 95% interval: tanh(atanh(r) ± Z95 · se), se the standard error of atanh(r); |r| < 1."""
    z = math.atanh(r)
    return math.tanh(z - Z95 * se), math.tanh(z + Z95 * se)
