# mutant: Welch's t-test and the bootstrap alone, no seed-spread rule
# expect: seed spread swallows
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""seed_noise: is the difference between two groups of seeds a result, or seed noise?

The same three rules as nanolm.repro.stats.compare_groups (what `nanolm compare` runs)."""

import numpy as np
from scipy import stats

MIN_SEEDS = 3
ALPHA = 0.05


def welch_p(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided Welch's t-test; None when neither group varies (the test is undefined)."""
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return None
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def bootstrap_ci(a: np.ndarray, b: np.ndarray, n_boot: int = 10000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of mean(b) - mean(a), each group resampled on its own."""
    rng = np.random.default_rng(seed)
    ma = a[rng.integers(0, len(a), size=(n_boot, len(a)))].mean(axis=1)
    mb = b[rng.integers(0, len(b), size=(n_boot, len(b)))].mean(axis=1)
    lo, hi = np.quantile(mb - ma, [ALPHA / 2, 1 - ALPHA / 2])
    return float(lo), float(hi)


def decide(baseline: list[float], candidate: list[float]) -> str:
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if len(a) < MIN_SEEDS or len(b) < MIN_SEEDS:
        return "noise"  # the noise is not measured: never a result
    diff = b.mean() - a.mean()
    p = welch_p(a, b)
    lo, hi = bootstrap_ci(a, b)
    beyond_spread = abs(diff) > max(np.ptp(a), np.ptp(b))  # the spread of either group is noise
    return "result" if p is not None and p < ALPHA and (lo > 0 or hi < 0) else "noise"
