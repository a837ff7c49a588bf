"""Noise-aware comparison of two groups of runs, one final metric value per seed: the statistics
behind `nanolm compare`. Pure functions returning dataclasses; nothing here prints.

A difference counts as a result ("better/worse beyond noise") only when three independent checks
agree: Welch's t-test p < alpha, the percentile-bootstrap CI of the mean difference excludes 0, and
the difference is larger than the spread (max - min) across seeds of either group. Fewer than
MIN_SEEDS values on either side is never a result."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import Enum

import numpy as np
from scipy import stats as _st

from ..errors import UserError

MIN_SEEDS = 3
POWER = 0.8


class Verdict(str, Enum):
    """What a comparison of two seed groups concludes; its value is the text every output shows."""

    BETTER = "better beyond noise"
    WORSE = "worse beyond noise"
    WITHIN_NOISE = "within noise: not a result"
    TOO_FEW = f"too few seeds (at least {MIN_SEEDS} a side)"
    # An experiment's candidate that diverged on some seed: there are no values to compare, and a config
    # that blows up has no effect worth keeping. compare_groups never says it.
    WORSE_DIVERGED = "worse: diverged"

    def __str__(self) -> str:  # the text, also in f-strings, on every Python version
        return self.value


BETTER = Verdict.BETTER
WORSE = Verdict.WORSE
WITHIN_NOISE = Verdict.WITHIN_NOISE
TOO_FEW = Verdict.TOO_FEW
VERDICTS = (BETTER, WORSE, WITHIN_NOISE, TOO_FEW)  # what compare_groups can say


@dataclass(frozen=True)
class Comparison:
    """Everything `compare_groups` found; diff and the CI are mean(B) - mean(A)."""

    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    std_a: float | None  # sample std (ddof=1); None with fewer than 2 values
    std_b: float | None
    spread_a: float  # max - min across seeds
    spread_b: float
    diff: float  # mean_b - mean_a
    ci_low: float  # percentile bootstrap CI of diff at level 1 - alpha
    ci_high: float
    ci_excludes_zero: bool
    prob_improvement: float  # P(B better than A): mean over pairs of [y better than x] + 0.5 [tie]
    welch_p: float | None  # two-sided; None with < 2 values a side or zero variance in both
    seed_spread_rule: bool  # |diff| > max(spread_a, spread_b)
    pooled_std: float | None
    effect_size: float | None  # Cohen's d = |diff| / pooled_std
    seeds_needed: int | None  # seeds per side for power POWER at alpha (normal approximation), >= MIN_SEEDS
    verdict: Verdict  # one of VERDICTS
    reason: str  # one line, with the numbers
    higher_is_better: bool
    alpha: float
    n_boot: int
    seed: int

    def to_dict(self) -> dict:
        return asdict(self)


def _validate(values: Sequence[float], name: str) -> np.ndarray:
    if isinstance(values, (str, bytes)):
        raise UserError(
            f"group {name} must be a list of numbers, got the string {values!r}: pass one final metric value per seed"
        )
    try:
        items = list(values)
    except TypeError:
        raise UserError(f"group {name} must be a list of numbers, got {values!r}: pass one final metric value per seed") from None
    if not items:
        raise UserError(f"group {name} has no values: give it at least one run (at least {MIN_SEEDS} seeds for a verdict)")
    out = []
    for i, v in enumerate(items):
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise UserError(
                f"group {name} value #{i + 1} ({v!r}) is not a number: every seed's final metric must be a number"
            ) from None
        if not math.isfinite(x):
            raise UserError(
                f"group {name} value #{i + 1} is {x} (not finite): that run diverged or never logged the metric; "
                "drop or rerun that seed"
            )
        out.append(x)
    return np.asarray(out, dtype=np.float64)


def prob_improvement(a: Sequence[float], b: Sequence[float], higher_is_better: bool = False) -> float:
    """P(B better than A) as rliable computes it (Mann-Whitney U / (n_a n_b)): the mean over all pairs
    (x in A, y in B) of [y better than x] + 0.5 [y == x]; "better" is lower unless higher_is_better."""
    x = np.asarray(a, dtype=np.float64)[:, None]
    y = np.asarray(b, dtype=np.float64)[None, :]
    wins = (y > x) if higher_is_better else (y < x)
    return float(np.mean(wins + 0.5 * (y == x)))


def bootstrap_diff_ci(
    a: Sequence[float], b: Sequence[float], n_boot: int = 10000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(B) - mean(A), resampling each group independently with
    replacement; deterministic for a given seed."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    diffs = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(len(a), len(b)))  # bound memory on big groups
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        ma = a[rng.integers(0, len(a), size=(k, len(a)))].mean(axis=1)
        mb = b[rng.integers(0, len(b), size=(k, len(b)))].mean(axis=1)
        diffs[start : start + k] = mb - ma
    lo, hi = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Welch's t-test p-value; None when a group has < 2 values or neither group varies."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) < 2 or len(b) < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return None
    with warnings.catch_warnings():  # a constant group makes scipy warn about precision loss; its variance is exactly 0
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(_st.ttest_ind(a, b, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


def seeds_needed(d: float | None, alpha: float = 0.05, power: float = POWER) -> int | None:
    """Seeds per side for a two-sample t-test to detect effect size d with the given power, by the
    normal approximation n = 2 ((z_{1-alpha/2} + z_power) / d)^2, rounded up, at least MIN_SEEDS.
    None when d is 0 or undefined (None, nan, inf)."""
    if d is None or not math.isfinite(d) or d <= 0:
        return None
    z = _st.norm.ppf(1 - alpha / 2) + _st.norm.ppf(power)
    return max(MIN_SEEDS, math.ceil(2 * (z / d) ** 2))


def _pooled_std(a: np.ndarray, b: np.ndarray) -> float | None:
    dof = len(a) + len(b) - 2
    if dof <= 0:
        return None
    ss = (((a - a.mean()) ** 2).sum() if len(a) > 1 else 0.0) + (((b - b.mean()) ** 2).sum() if len(b) > 1 else 0.0)
    return float(math.sqrt(ss / dof))


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _failed_checks(p: float | None, alpha: float, ci_excludes_zero: bool, spread_ok: bool, diff: float, spread: float) -> str:
    """Which of the three checks failed, '; '-separated."""
    failed = []
    if p is None:
        failed.append("Welch test undefined (no variation across seeds in either group: check that the seeds differ)")
    elif p >= alpha:
        failed.append(f"Welch p {p:.3g} >= {alpha:g}")
    if not ci_excludes_zero:
        failed.append("CI includes 0")
    if not spread_ok:
        failed.append(f"|diff| {abs(diff):.4g} <= seed spread {spread:.4g}")
    return "; ".join(failed)


def _more_seeds(verdict: Verdict, need: int | None, d: float | None, tests_pass: bool, n_min: int) -> tuple[int | None, str]:
    """The seeds needed (None when more seeds settle nothing) and what the reason adds about them;
    tests_pass: the Welch test and the CI both found a difference."""
    if verdict == WITHIN_NOISE and tests_pass:
        # The range across seeds grows with their number: more seeds cannot make this difference count.
        return None, "; more seeds will not help: the spread across seeds only grows with their number"
    if verdict in (WITHIN_NOISE, TOO_FEW):
        if need is not None and need > n_min:
            return need, f"; a t-test would need ~{need} seeds a side to detect d={d:.2f} (power {POWER:g})"
        return None, ""  # the power estimate asks for no more seeds than there are: it settles nothing
    return need, ""


def compare_groups(
    a: Sequence[float],
    b: Sequence[float],
    higher_is_better: bool = False,
    n_boot: int = 10000,
    seed: int = 0,
    alpha: float = 0.05,
) -> Comparison:
    """Compare group B (the new thing) against group A (the baseline), one final metric value per seed."""
    if not 0 < alpha < 1:
        raise UserError(f"alpha must be between 0 and 1, got {alpha}: use e.g. 0.05")
    if int(n_boot) != n_boot or n_boot < 1:
        raise UserError(f"n_boot must be a positive whole number, got {n_boot}: use e.g. 10000")
    n_boot = int(n_boot)
    xa, xb = _validate(a, "A"), _validate(b, "B")
    n_a, n_b = len(xa), len(xb)
    mean_a, mean_b = float(xa.mean()), float(xb.mean())
    std_a = float(xa.std(ddof=1)) if n_a > 1 else None
    std_b = float(xb.std(ddof=1)) if n_b > 1 else None
    spread_a, spread_b = float(np.ptp(xa)), float(np.ptp(xb))
    diff = mean_b - mean_a
    ci_low, ci_high = bootstrap_diff_ci(xa, xb, n_boot=n_boot, seed=seed, alpha=alpha)
    ci_excludes_zero = ci_low > 0 or ci_high < 0
    pi = prob_improvement(xa, xb, higher_is_better)
    p = welch_p(xa, xb)
    spread = max(spread_a, spread_b)
    spread_ok = abs(diff) > spread
    pooled = _pooled_std(xa, xb)
    d = abs(diff) / pooled if pooled else None  # pooled 0 or None: effect size undefined
    need = seeds_needed(d, alpha)

    direction = "lower" if not higher_is_better else "higher"
    level = f"{100 * (1 - alpha):g}%"
    numbers = (
        f"diff {diff:+.4g} (B - A, {direction} is better), {level} CI [{ci_low:.4g}, {ci_high:.4g}], "
        f"Welch p={_g(p)}, |diff| {abs(diff):.4g} vs seed spread {spread:.4g}, P(B better)={pi:.2f}"
    )
    if n_a < MIN_SEEDS or n_b < MIN_SEEDS:
        verdict = TOO_FEW
        reason = f"A has {n_a} seed(s) and B has {n_b}; run at least {MIN_SEEDS} seeds a side: {numbers}"
    elif p is not None and p < alpha and ci_excludes_zero and spread_ok:
        improved = diff > 0 if higher_is_better else diff < 0
        verdict = BETTER if improved else WORSE
        reason = f"all three checks pass: {numbers}"
    else:
        verdict = WITHIN_NOISE
        reason = _failed_checks(p, alpha, ci_excludes_zero, spread_ok, diff, spread) + f": {numbers}"
    need, advice = _more_seeds(verdict, need, d, p is not None and p < alpha and ci_excludes_zero, min(n_a, n_b))
    reason += advice
    return Comparison(
        n_a=n_a,
        n_b=n_b,
        mean_a=mean_a,
        mean_b=mean_b,
        std_a=std_a,
        std_b=std_b,
        spread_a=spread_a,
        spread_b=spread_b,
        diff=diff,
        ci_low=ci_low,
        ci_high=ci_high,
        ci_excludes_zero=ci_excludes_zero,
        prob_improvement=pi,
        welch_p=p,
        seed_spread_rule=spread_ok,
        pooled_std=pooled,
        effect_size=d,
        seeds_needed=need,
        verdict=verdict,
        reason=reason,
        higher_is_better=higher_is_better,
        alpha=alpha,
        n_boot=n_boot,
        seed=seed,
    )
