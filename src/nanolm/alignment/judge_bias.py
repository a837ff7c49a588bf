"""The biases of a judge, measured on its own labels: every labelling run reports them.

Notation, per verdict (a pair (a, b) under a principle, judged in both orders; see ``labelling``): p_ab =
P(first better) with a first, p_ba = the same with b first, P(a) = (p_ab + 1 - p_ba) / 2 the averaged verdict.
Logits are clipped at 1e-6 (a certain verdict is ±13.8 logits). "Equal by the ground truth": the
principle's rule calls the pair a tie (``judges.rule_verdict``; for a principle without a rule, the answers
are equally correct), so a preference between them is the judge's own, not the principle's.

Counting: the two rates the issue defines per verdict (position consistency, agreement with the ground
truth) count verdicts, pair x principle. Everything else is taken over PAIRS, a pair's value being its mean
over its principles (for the equal-truth measures, over the principles under which the truth calls it
equal): the verdicts of one pair are not independent (a model judge that cannot read the principle gives
the same verdict under each), and counting them as independent would narrow the intervals by up to the
square root of the number of principles. (The Wilson intervals of the two verdict rates carry that caveat.)

- position: consistency = verdicts whose winner survives the swap / all verdicts (Wilson 95% CI); among the
  inconsistent ones, the share where the FIRST shown won in both orders (a primacy bias) and where the
  second did; the mean P(first shown better) = mean of (p_ab + p_ba) / 2 (0.5: no position effect); and the
  offset in logits = the mean of (logit p_ab + logit p_ba) / 2, with a t 95% CI. For a judge whose logit is
  "merit of first − merit of second + offset" the merits cancel in that sum: it recovers the offset.
- length, over the pairs equal by the ground truth: the longer answer's win rate (ties count half; 0.5 is
  no bias) over those with answers of different length; Pearson's and Spearman's correlation of the word
  difference words(a) − words(b) with P(a) (95% CIs: Fisher's z, Spearman's with Fieller et al.'s variance
  1.06 / (n − 3)); and the bonus in logits per word: the least-squares slope, through the origin, of
  (logit p_ab − logit p_ba) / 2 on the word difference, with the agreement difference agrees(a) − agrees(b)
  as a second regressor where it varies (its slope is the agreement bonus), t 95% CIs. Through the origin:
  swapping a and b negates both sides, so a pair's order in the file cannot add an intercept.
- self-preference, over the pairs equal by the ground truth whose answers were sampled by two different
  models, one of them the judge's own: the own answer's win rate (ties half). It mixes self-preference
  with quality the ground truth does not see (one model's answers may simply read better to every judge):
  judge the same pairs with the other model too, and compare.
- ground truth: the verdicts that pick the winner the rule picks / verdicts where the rule is not a tie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..records import Record
from ..stats import fisher_interval
from .constitution import Principle
from .judges import logit, rule_verdict
from .labelling import Labelling, Verdict
from .pairs import CORPUS_SOURCE, Pair
from .stats import MeanEstimate, Rate, mean_estimate, rate

NAN_CI = (math.nan, math.nan)


@dataclass(frozen=True)
class Estimate:
    """A number with its 95% interval, from n values (NaN where n is too small)."""

    value: float
    ci: tuple[float, float]
    n: int


@dataclass(frozen=True)
class Correlation:
    r: float  # NaN when either variable is constant
    ci: tuple[float, float]
    p_value: float
    n: int


@dataclass(frozen=True)
class WinRate:
    """Pairs won, tied and lost by one side; score: the mean over pairs of 1 / 0.5 / 0 (0.5: no preference), normal
    95% CI."""

    wins: int
    ties: int
    losses: int
    score: MeanEstimate


@dataclass(frozen=True)
class PositionBias:
    n: int  # verdicts
    consistency: Rate  # winner survives the swap
    first_both: Rate  # of the inconsistent verdicts: the first shown won both orders
    second_both: Rate  # ... the second shown won both orders
    first_shown_prob: MeanEstimate  # mean of (p_ab + p_ba) / 2
    offset: Estimate  # logits for being shown first
    offset_method: str = "mean of (logit p_ab + logit p_ba) / 2"


@dataclass(frozen=True)
class LengthBias:
    n_equal: int  # pairs equal by the ground truth under at least one principle
    longer: WinRate  # the longer answer, among those with answers of different length
    pearson: Correlation  # words(a) - words(b) against P(a better)
    spearman: Correlation
    bonus: Estimate  # logits per word longer
    agreement: Estimate | None  # logits for agreeing with the user (None: agreement never differs)
    method: str = "equal truth"  # which pairs the bonus is measured on, and how (judgment_bias: also a logistic model)
    model: ChoiceModel | None = None  # judgment_bias's logistic model of the choice, when it measured the bonus


@dataclass(frozen=True)
class SelfPreference:
    model: str  # the judge's own model
    others: tuple[str, ...]  # the other models whose answers it was compared with
    own: WinRate
    bonus: Estimate | None = None  # logits for the judge's own model's answer (judgment_bias's logistic model)


@dataclass(frozen=True)
class ChoiceModel:
    """A logistic model of the judge's choice (``judgment_bias``): logit P(a better) = position · (+1 a shown first,
    −1 b first, 0 orders averaged or unknown) + the slopes · (a's value − b's), each term a logit with a 95%
    interval (pair-clustered sandwich, t with pairs − 1 degrees of freedom)."""

    method: str  # "equal truth" (the pairs equally correct) or "length-controlled" (all pairs, correctness a term)
    n: int  # judgments fitted
    pairs: int  # clusters
    terms: dict[str, Estimate]  # position, words, correct, agrees, own: those present and varying
    separated: tuple[str, ...] = ()  # terms the choices follow without exception: no finite estimate


@dataclass(frozen=True)
class Coverage:
    """What a measure could be taken on: k of n units ("0 of 812 pairs judged in both orders")."""

    measure: str
    measured: bool
    k: int
    n: int
    unit: str
    why: str = ""

    def __str__(self) -> str:
        said = "measured on" if self.measured else "not measurable:"
        return f"{self.measure}: {said} {self.k} of {self.n} {self.unit}" + (f" ({self.why})" if self.why else "")


@dataclass(frozen=True)
class PrincipleBias:
    principle: str
    rule: str | None
    n: int
    consistency: Rate
    ground_truth: Rate  # verdicts picking the rule's winner / verdicts where the rule is decisive
    ties: int  # verdicts with P(a) exactly 0.5


@dataclass
class BiasReport(Record):
    judge: str
    n_pairs: int
    n_verdicts: int
    position: PositionBias
    length: LengthBias
    self_preference: SelfPreference | None
    ground_truth: Rate
    principles: list[PrincipleBias]
    planted: dict[str, float] = field(default_factory=dict)  # a planted judge's sizes, to set beside the measured
    notes: list[str] = field(default_factory=list)
    source: str = ""  # judgment_bias: the judgments' file and format
    n_judgments: int = 0  # judgment_bias: the lines (one order, or both averaged) read
    coverage: list[Coverage] = field(default_factory=list)  # judgment_bias: what each measure was taken on


# ---- statistics -------------------------------------------------------------------------------------


def mean_ci(values: list[float]) -> Estimate:
    """The mean with a t 95% interval (NaN interval for fewer than 2 values)."""
    from scipy import stats

    n = len(values)
    if n == 0:
        return Estimate(math.nan, NAN_CI, 0)
    m = float(np.mean(values))
    if n < 2:
        return Estimate(m, NAN_CI, n)
    half = float(stats.t.ppf(0.975, n - 1) * np.std(values, ddof=1) / math.sqrt(n))
    return Estimate(m, (m - half, m + half), n)


def through_origin(x: np.ndarray, y: np.ndarray) -> list[Estimate]:
    """Least-squares slopes of y [n] on the columns of x [n, k] with no intercept, each with a t 95% interval
    (NaN when there are no more rows than columns, or a column is all zero)."""
    from scipy import stats

    n, k = x.shape
    if n <= k or np.linalg.matrix_rank(x) < k:
        return [Estimate(math.nan, NAN_CI, n) for _ in range(k)]
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    s2 = float(resid @ resid) / (n - k)
    se = np.sqrt(np.maximum(np.diag(np.linalg.inv(x.T @ x)) * s2, 0.0))
    t = float(stats.t.ppf(0.975, n - k))
    return [Estimate(float(b), (float(b - t * s), float(b + t * s)), n) for b, s in zip(beta, se)]


def correlations(x: list[float], y: list[float]) -> tuple[Correlation, Correlation]:
    """(Pearson, Spearman) of x and y with 95% intervals; r NaN when either is constant or n < 3."""
    from scipy import stats

    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        none = Correlation(math.nan, NAN_CI, math.nan, n)
        return none, none
    pr = stats.pearsonr(x, y)
    ci = pr.confidence_interval(0.95) if n > 3 else NAN_CI
    pearson = Correlation(float(pr.statistic), (float(ci[0]), float(ci[1])), float(pr.pvalue), n)
    sr = stats.spearmanr(x, y)
    rho = float(sr.statistic)
    return pearson, Correlation(rho, _fisher_ci(rho, math.sqrt(1.06 / (n - 3))) if n > 3 else NAN_CI, float(sr.pvalue), n)


def _fisher_ci(r: float, se: float) -> tuple[float, float]:
    """A correlation's 95% interval: tanh(atanh(r) ± 1.96 se)."""
    return fisher_interval(max(min(r, 1 - 1e-12), -1 + 1e-12), se)


def win_rate(scores: list[float]) -> WinRate:
    """scores in [0, 1], one per pair: the side's mean of 1 (won) / 0.5 (tie) / 0 (lost) over the pair's verdicts;
    a pair above 0.5 counts as a win, at 0.5 as a tie, below as a loss."""
    return WinRate(
        sum(s > 0.5 for s in scores), sum(s == 0.5 for s in scores), sum(s < 0.5 for s in scores), mean_estimate(scores)
    )


def _score(p: float) -> float:
    """A side's win (1), tie (0.5) or loss (0) from its probability of being better."""
    return 1.0 if p > 0.5 else 0.0 if p < 0.5 else 0.5


# ---- the report ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Item:
    """A verdict with what the report reads beside it."""

    v: Verdict
    pair: Pair
    principle: Principle
    truth: float | None  # the ground truth's P(a better): 1, 0, 0.5, or None (unknown)


def labelling_biases(labelling: Labelling) -> BiasReport:
    """Position, length, self-preference and ground-truth measures of a labelling run's judge (both orders of
    every verdict and the principles' ground truth known); ``judgment_bias.bias_report`` is the entry point."""
    pairs = {p.id: p for p in labelling.pairs}
    items = []
    for v in labelling.verdicts:
        pair, principle = pairs[v.pair_id], labelling.constitution.get(v.principle)
        items.append(_Item(v, pair, principle, rule_verdict(principle, pair.a, pair.b)))
    notes: list[str] = []
    # Equal by the ground truth: the principle's verdict is a tie AND both answers are equally correct. A rule
    # such as "the shorter of two equally correct answers" ties a right and a wrong answer too; a model judge's
    # verdict on such a pair mostly reads correctness, which would then pass for a length or agreement effect.
    equal = [it for it in items if it.truth == 0.5 and it.pair.a.correct is not None and it.pair.a.correct == it.pair.b.correct]
    report = BiasReport(
        labelling.judge,
        len(labelling.pairs),
        len(items),
        position_bias(items),
        length_bias(equal, notes),
        self_preference(equal, labelling.judge_model, notes),
        ground_truth(items),
        principle_rows(items, labelling),
        dict(labelling.planted),
        notes,
    )
    unknown = sum(it.truth is None for it in items)
    if unknown:
        notes.append(
            f"{unknown} of {len(items)} verdicts have no known ground truth (a principle without a rule and "
            "answers of unequal correctness, or truth missing from the pairs): left out of the truth measures"
        )
    return report


def by_pair(items: list[_Item]) -> list[list[_Item]]:
    """Items grouped by pair, in order of first appearance."""
    groups: dict[str, list[_Item]] = {}
    for it in items:
        groups.setdefault(it.pair.id, []).append(it)
    return list(groups.values())


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def position_bias(items: list[_Item]) -> PositionBias:
    """Consistency over verdicts; the mean P(first) and the offset over pairs (each pair's mean over its principles)."""
    verdicts = [it.v for it in items]
    inconsistent = [v for v in verdicts if not v.consistent]
    groups = by_pair(items)
    return PositionBias(
        len(verdicts),
        rate(len(verdicts) - len(inconsistent), len(verdicts)),
        rate(sum(v.first_both for v in inconsistent), len(inconsistent)),
        rate(sum(v.second_both for v in inconsistent), len(inconsistent)),
        mean_estimate([_mean([(it.v.p_ab + it.v.p_ba) / 2 for it in g]) for g in groups]),
        mean_ci([_mean([(logit(it.v.p_ab) + logit(it.v.p_ba)) / 2 for it in g]) for g in groups]),
    )


def _agrees(pair: Pair) -> float | None:
    """agrees(a) − agrees(b), or None when either is unknown."""
    a, b = pair.a.agrees_with_user, pair.b.agrees_with_user
    return None if a is None or b is None else float(a) - float(b)


def length_bias(equal: list[_Item], notes: list[str]) -> LengthBias:
    """The length measures over the pairs equal by the ground truth (under at least one principle; a pair's
    verdict is its mean over those principles)."""
    groups = by_pair(equal)
    diff = [float(g[0].pair.a.length - g[0].pair.b.length) for g in groups]
    p_a = [_mean([it.v.p_a for it in g]) for g in groups]
    longer = [_mean([_score(it.v.p_a if d > 0 else 1 - it.v.p_a) for it in g]) for d, g in zip(diff, groups) if d != 0]
    pearson, spearman = correlations(diff, p_a)
    y = [_mean([(logit(it.v.p_ab) - logit(it.v.p_ba)) / 2 for it in g]) for g in groups]
    agree = [_agrees(g[0].pair) for g in groups]
    known = [i for i, g in enumerate(agree) if g is not None]
    agreement = None
    if any(agree[i] for i in known):  # the agreement difference varies: fit it beside the length
        x = np.array([[diff[i], agree[i]] for i in known])
        bonus, agreement = through_origin(x, np.array([y[i] for i in known]))
    else:
        bonus = through_origin(np.array(diff)[:, None], np.array(y))[0]
    if not longer:
        notes.append(
            "length bias: no pairs equal by the ground truth with answers of different length (short_long pairs give them)"
        )
    return LengthBias(len(groups), win_rate(longer), pearson, spearman, bonus, agreement)


def self_preference(equal: list[_Item], model: str | None, notes: list[str]) -> SelfPreference | None:
    """The judge's own model's answers against another model's, over the pairs equal by the ground truth."""
    if model is None:
        notes.append("self-preference: not measured: the judge is not a model")
        return None
    scores, others = [], set()
    for g in by_pair(equal):
        a, b = g[0].pair.a.source, g[0].pair.b.source
        if a == b or CORPUS_SOURCE in (a, b) or model not in (a, b):
            continue
        others.add(b if a == model else a)
        scores.append(_mean([_score(it.v.p_a if a == model else 1 - it.v.p_a) for it in g]))
    if not scores:
        notes.append(
            f"self-preference: not measured: no pairs of {model}'s answers against another model's at equal "
            "ground truth (build pairs with --versus OTHER_RUN)"
        )
        return None
    return SelfPreference(model, tuple(sorted(others)), win_rate(scores))


def _picks_truth(it: _Item) -> bool:
    return (it.truth == 1.0 and it.v.p_a > 0.5) or (it.truth == 0.0 and it.v.p_a < 0.5)


def ground_truth(items: list[_Item]) -> Rate:
    decisive = [it for it in items if it.truth in (0.0, 1.0)]
    return rate(sum(map(_picks_truth, decisive)), len(decisive))


def principle_rows(items: list[_Item], labelling: Labelling) -> list[PrincipleBias]:
    rows = []
    for p in labelling.constitution.principles:
        mine = [it for it in items if it.principle.name == p.name]
        rows.append(
            PrincipleBias(
                p.name,
                p.rule,
                len(mine),
                rate(sum(it.v.consistent for it in mine), len(mine)),
                ground_truth(mine),
                sum(it.v.p_a == 0.5 for it in mine),
            )
        )
    return rows
