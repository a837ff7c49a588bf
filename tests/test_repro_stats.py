"""nanolm.repro.stats against independent references: scipy's Welch test and Mann-Whitney U, a
hand-worked pair count, a hand-computed power estimate, and the reference document's examples."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as st

from nanolm.errors import UserError
from nanolm.repro.stats import (
    BETTER,
    TOO_FEW,
    VERDICTS,
    WITHIN_NOISE,
    WORSE,
    bootstrap_diff_ci,
    compare_groups,
    prob_improvement,
    seeds_needed,
)

BASELINE = [3.21, 3.25, 3.23]  # the reference document's baseline A (val loss, lower is better)
A5 = [3.21, 3.25, 3.23, 3.22, 3.24]
B5 = [3.01, 3.03, 3.02, 3.00, 3.04]


def test_verdict_strings_are_exact():
    assert VERDICTS == (
        "better beyond noise",
        "worse beyond noise",
        "within noise: not a result",
        "too few seeds (at least 3 a side)",
    )


def test_reference_single_new_run_is_too_few_seeds():
    c = compare_groups(BASELINE, [3.22], n_boot=2000)
    assert c.verdict == TOO_FEW == "too few seeds (at least 3 a side)"
    assert (c.n_a, c.n_b) == (3, 1)
    assert c.std_b is None and c.welch_p is None and c.spread_b == 0.0
    assert c.diff == pytest.approx(-0.01)
    assert "\n" not in c.reason and "at least 3" in c.reason


def test_reference_three_seeds_is_within_noise():
    c = compare_groups(BASELINE, [3.22, 3.24, 3.20], n_boot=2000)
    assert c.verdict == WITHIN_NOISE == "within noise: not a result"
    assert c.mean_a == pytest.approx(3.23) and c.mean_b == pytest.approx(3.22)
    assert c.std_a == pytest.approx(0.02) and c.std_b == pytest.approx(0.02)
    assert c.spread_a == pytest.approx(0.04) and c.spread_b == pytest.approx(0.04)
    assert c.diff == pytest.approx(-0.01)
    assert not c.seed_spread_rule and not c.ci_excludes_zero and c.welch_p > 0.05
    assert c.ci_low < 0 < c.ci_high
    assert "\n" not in c.reason and "seed spread" in c.reason


def test_clear_cut_better_and_its_mirror_worse():
    better = compare_groups(A5, B5, n_boot=2000)
    assert better.verdict == BETTER
    assert better.diff == pytest.approx(-0.21)
    assert better.welch_p < 0.05 and better.ci_high < 0 and better.seed_spread_rule
    assert better.prob_improvement == 1.0
    assert better.seeds_needed == 3  # huge effect: the floor
    worse = compare_groups(B5, A5, n_boot=2000)
    assert worse.verdict == WORSE and worse.prob_improvement == 0.0 and worse.ci_low > 0


def test_higher_is_better_flips_the_direction():
    assert compare_groups(A5, B5, higher_is_better=True, n_boot=2000).verdict == WORSE
    assert compare_groups(B5, A5, higher_is_better=True, n_boot=2000).verdict == BETTER
    c = compare_groups(A5, B5, higher_is_better=True, n_boot=2000)
    assert c.diff == pytest.approx(-0.21)  # diff is always mean_b - mean_a
    assert c.prob_improvement == 0.0


def test_spread_rule_alone_blocks_a_significant_difference():
    # tight groups, one outlier seed in A makes the spread bigger than the (significant) difference
    a = [1.0, 1.001, 1.002, 1.0, 1.001, 1.002, 1.0, 1.001, 1.002, 1.06]
    b = [0.97, 0.971, 0.972, 0.97, 0.971, 0.972, 0.97, 0.971, 0.972, 0.971]
    c = compare_groups(a, b, n_boot=2000)
    assert c.welch_p < 0.05 and c.ci_excludes_zero
    assert not c.seed_spread_rule and c.verdict == WITHIN_NOISE
    # More seeds only widen the range across seeds: no power advice, and the reason says why.
    assert c.seeds_needed is None and "more seeds will not help" in c.reason and "would need" not in c.reason


def test_welch_p_matches_scipy():
    a, b = [3.21, 3.25, 3.23, 3.30], [3.12, 3.18, 3.19]
    c = compare_groups(a, b, n_boot=100)
    assert c.welch_p == pytest.approx(st.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-12)


def test_welch_p_is_none_without_variation():
    assert compare_groups([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], n_boot=100).welch_p is None
    assert compare_groups([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], n_boot=100).verdict == WITHIN_NOISE
    assert compare_groups([1.0], [2.0, 2.1, 2.2], n_boot=100).welch_p is None
    assert compare_groups([1.0, 1.0, 1.0], [2.0, 2.1, 2.2], n_boot=100).welch_p is not None  # one side varies


def test_prob_improvement_hand_count():
    a, b = [1.0, 2.0, 3.0], [2.0, 0.5]
    # lower is better; pairs (x, y): (1,2) 0, (1,.5) 1, (2,2) tie .5, (2,.5) 1, (3,2) 1, (3,.5) 1 -> 4.5 / 6
    assert prob_improvement(a, b) == pytest.approx(4.5 / 6)
    # higher is better: (1,2) 1, (2,2) .5, others 0 -> 1.5 / 6
    assert prob_improvement(a, b, higher_is_better=True) == pytest.approx(1.5 / 6)
    assert compare_groups(a, b, n_boot=100).prob_improvement == pytest.approx(4.5 / 6)


def test_prob_improvement_matches_mann_whitney_u():
    rng = np.random.default_rng(1)
    a = np.round(rng.normal(3.2, 0.05, 7), 2).tolist()  # rounding makes ties
    b = np.round(rng.normal(3.18, 0.05, 9), 2).tolist()
    n = len(a) * len(b)
    # U of the first sample counts pairs where it is larger, ties 0.5
    assert prob_improvement(a, b, higher_is_better=True) == pytest.approx(st.mannwhitneyu(b, a).statistic / n)
    assert prob_improvement(a, b) == pytest.approx(st.mannwhitneyu(a, b).statistic / n)


def test_bootstrap_ci_contains_true_diff_and_is_deterministic():
    rng = np.random.default_rng(123)
    a, b = rng.normal(0.0, 1.0, 2000), rng.normal(0.5, 1.0, 2000)
    lo, hi = bootstrap_diff_ci(a, b, n_boot=2000, seed=7)
    assert lo < 0.5 < hi
    # width close to the normal-theory interval 2 * 1.96 * sqrt(2 / 2000)
    assert hi - lo == pytest.approx(2 * 1.96 * math.sqrt(2 / 2000), rel=0.1)
    assert bootstrap_diff_ci(a, b, n_boot=2000, seed=7) == (lo, hi)
    assert bootstrap_diff_ci(a, b, n_boot=2000, seed=8) != (lo, hi)
    c1 = compare_groups(BASELINE, [3.22, 3.24, 3.20], n_boot=500, seed=3)
    c2 = compare_groups(BASELINE, [3.22, 3.24, 3.20], n_boot=500, seed=3)
    assert (c1.ci_low, c1.ci_high) == (c2.ci_low, c2.ci_high)


def test_bootstrap_ci_matches_the_exact_bootstrap_distribution_at_three_seeds():
    """With 3 seeds a side the bootstrap distribution is finite: 3^3 equally likely ordered resamples
    per group, 729 pairs. Its exact 2.5% and 97.5% quantiles are the reference for the Monte Carlo CI."""
    a, b = [3.21, 3.25, 3.23], [3.22, 3.24, 3.20]
    means = lambda x: [sum(r) / 3 for r in itertools.product(x, repeat=3)]  # noqa: E731
    exact = np.sort([mb - ma for ma in means(a) for mb in means(b)])
    lo, hi = np.quantile(exact, [0.025, 0.975])
    got = bootstrap_diff_ci(a, b, n_boot=200_000, seed=0)
    assert got == pytest.approx((lo, hi), abs=2e-3)  # the distribution's steps are 0.0067 apart


def test_seeds_needed_hand_computation():
    # BASELINE vs [3.22, 3.24, 3.20]: diff 0.01, both stds 0.02, pooled 0.02, d = 0.5
    # n = 2 * ((1.959964 + 0.841621) / 0.5)^2 = 8 * 2.801585^2 = 62.79 -> 63
    c = compare_groups(BASELINE, [3.22, 3.24, 3.20], n_boot=100)
    assert c.pooled_std == pytest.approx(0.02) and c.effect_size == pytest.approx(0.5)
    assert c.seeds_needed == 63
    assert seeds_needed(0.5) == 63
    assert seeds_needed(1.0) == 16  # 2 * 2.801585^2 = 15.70 -> 16
    assert seeds_needed(10.0) == 3  # floor
    assert seeds_needed(0.0) is None and seeds_needed(None) is None
    assert compare_groups([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], n_boot=100).seeds_needed is None  # d undefined
    assert compare_groups([1.0], [2.0], n_boot=100).seeds_needed is None  # no std at all


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_value_is_a_user_error(bad):
    with pytest.raises(UserError, match=r"group B value #2 is (nan|inf|-inf)"):
        compare_groups(BASELINE, [3.22, bad, 3.20])
    with pytest.raises(UserError, match="group A"):
        compare_groups([bad], [3.22])


def test_other_bad_input_is_a_user_error():
    for a, b in [([], [1.0]), ([1.0], []), (["x"], [1.0]), ("3.2", [1.0])]:
        with pytest.raises(UserError) as e:
            compare_groups(a, b)
        assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="alpha"):
        compare_groups(BASELINE, BASELINE, alpha=1.5)
    with pytest.raises(UserError, match="n_boot"):
        compare_groups(BASELINE, BASELINE, n_boot=0)


def test_to_dict_round_trips_fields():
    d = compare_groups(A5, B5, n_boot=200).to_dict()
    assert d["verdict"] == BETTER and d["n_a"] == 5 and isinstance(d["reason"], str)
