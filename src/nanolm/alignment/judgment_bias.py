"""The bias report on a judge's labels: ``bias_report(labels)``, for a nanolm labelling run or judgments made anywhere
(``judgments`` reads them).

The measures and their dataclasses are ``judge_bias``'s (the report ``nanolm feedback label`` prints); what
differs is where the numbers come from, since a file from elsewhere may hold choices rather than probabilities,
one order rather than two, and no ground truth.

- Verdicts: the judgments of one pair id (and criterion) shown a first are matched, in file order, with those
  shown b first: each match is a verdict in both orders (p_ab, p_ba as ``labelling``); what is left, and a
  judgment whose order is not known, is a verdict in one order; nanolm's label rows are verdicts already
  averaged over both orders.
- Position, over the verdicts in both orders (none: "not measurable: 0 of N pairs judged in both orders"):
  consistency and the first-shown shares as ``judge_bias``; the offset in logits, for probabilities, the mean of
  (logit p_ab + logit p_ba) / 2; for choices (every p 0, 0.5 or 1) the conditional estimate logit(f) / 2, f the
  share of "the first shown won both orders" among the verdicts where the first shown won both or lost both
  (for a judge whose logit is merit + offset, P(won both | won both or lost both) = σ(2 · offset) whatever the
  merit), its interval the Wilson interval of f carried through.
- Truth: an answer's ``correct``; the agreement with the truth is over the verdicts where one answer is correct
  and the other is not (``judge_bias.ground_truth`` under the rule ``correct``).
- Length, agreement with the user and self-preference, in logits, from one logistic model of the choice
  (``ChoiceModel``): logit P(a better) = position · (+1 a first, −1 b first, 0 unknown) + λ · (words(a) −
  words(b)) + γ · (correct(a) − correct(b)) + α · (agrees(a) − agrees(b)) + σ · (own(a) − own(b)), one row per
  judgment (its P(a better) the outcome: a choice 1 / 0.5 / 0, or the judge's probability), a term kept when
  every row knows it and it varies. **Equal truth** when the correctness of every pair is known: the model is
  fitted on the equally correct pairs only (the correctness term is then zero), so a judge that prefers correct
  answers cannot pass that off as a length or agreement effect; **length-controlled** otherwise: all pairs, the
  correctness term where known (AlpacaEval's length-controlled win rate is the same idea). The intervals are
  pair-clustered sandwich intervals (the judgments of one pair share its answers), t with pairs − 1 degrees of
  freedom. A term the choices follow without exception (complete separation) has no finite estimate: NaN, named.
  On verdicts averaged over both orders, a position offset makes the model's slopes a little smaller than the
  judge's (the average of σ(m + δ) and σ(m − δ) is not σ(m)); exact without one.
- The longer answer's win rate, the correlations and the own model's win rate are ``judge_bias``'s, over the
  same pairs (equally correct ones, or all pairs for the length-controlled model: then confounded with quality).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from .constitution import Principle
from .judge_bias import (
    NAN_CI,
    BiasReport,
    ChoiceModel,
    Coverage,
    Estimate,
    LengthBias,
    PositionBias,
    _Item,
    ground_truth,
    labelling_biases,
    length_bias,
    position_bias,
    self_preference,
    win_rate,
)
from .judges import logit, rule_verdict
from .judgments import Judgment, JudgmentSet, Side
from .labelling import Labelling, Verdict
from .pairs import Answer, Pair
from .stats import mean_estimate, rate

CORRECT = Principle("correct", "Which answer is correct?", "correct")
SEPARATED = 10.0  # |logit| beyond which a term is taken as separated (σ(10) = 0.99995)
LENGTH_METHODS = ("auto", "equal truth", "length-controlled")
CONDITIONAL = (
    "conditional: logit(f) / 2, f = the first shown won both orders / (won both or lost both), Wilson interval carried through"
)


@dataclass(frozen=True)
class _V:
    """A verdict with the judgments it came from."""

    item: _Item  # judge_bias's view of it; for one order or averaged, Verdict(p_a, 1 - p_a): only its p_a is read
    orders: str  # "both", "averaged" or "one"
    consistent: bool | None
    a: Side
    b: Side
    judgments: tuple[Judgment, ...]


def _answer(s: Side) -> Answer:
    return Answer(s.text or "", s.correct, s.agrees_with_user, s.length or 0, s.model or "")


def _item(j: Judgment, p_ab: float, p_ba: float) -> _Item:
    pair = Pair(j.pair_id, "", _answer(j.a), _answer(j.b))
    principle = Principle(j.criterion or "judgment", "")
    return _Item(Verdict(j.pair_id, principle.name, p_ab, p_ba), pair, principle, rule_verdict(CORRECT, pair.a, pair.b))


def verdicts(judgments: Sequence[Judgment]) -> list[_V]:
    """The judgments as verdicts: each pair id's (and criterion's) a-first judgments matched in file order with its
    b-first ones; the rest in one order; nanolm's averaged rows as they are."""
    groups: dict[tuple[str, str], list[Judgment]] = {}
    for j in judgments:
        groups.setdefault((j.pair_id, j.criterion), []).append(j)
    out = []
    for group in groups.values():
        a_first = [j for j in group if j.first == "a" and not j.averaged]
        b_first = [j for j in group if j.first == "b" and not j.averaged]
        for ja, jb in zip(a_first, b_first):
            out.append(_V(_item(ja, ja.p_a, 1.0 - jb.p_a), "both", None, ja.a, ja.b, (ja, jb)))
        matched = min(len(a_first), len(b_first))
        rest = a_first[matched:] + b_first[matched:] + [j for j in group if j.first is None or j.averaged]
        for j in rest:
            out.append(
                _V(
                    _item(j, j.p_a, 1.0 - j.p_a),
                    "averaged" if j.averaged else "one",
                    j.consistent if j.averaged else None,
                    j.a,
                    j.b,
                    (j,),
                )
            )
    return out


# ---- the logistic model ----------------------------------------------------------------------------------------


def fit_logistic(x: np.ndarray, y: np.ndarray, groups: np.ndarray, ridge: float = 1e-6) -> tuple[np.ndarray, np.ndarray, int]:
    """Maximum likelihood of the logistic model P(y) = σ(x β) for outcomes y in [0, 1] (a probability counts as
    that share of a win), by scipy's trust-region Newton; (β, its pair-clustered sandwich covariance
    H⁻¹ (Σ_g s_g s_gᵀ) H⁻¹ · G / (G − 1), G the clusters); ridge keeps a separated term finite."""
    from scipy import optimize
    from scipy.special import expit

    k = x.shape[1]

    def loss(b: np.ndarray) -> tuple[float, np.ndarray]:
        eta = x @ b
        return (float(np.sum(np.logaddexp(0.0, eta) - y * eta) + ridge / 2 * b @ b), x.T @ (expit(eta) - y) + ridge * b)

    def hess(b: np.ndarray) -> np.ndarray:
        mu = expit(x @ b)
        return (x.T * (mu * (1 - mu))) @ x + ridge * np.eye(k)

    beta = optimize.minimize(
        loss, np.zeros(k), jac=True, hess=hess, method="trust-exact", options={"gtol": 1e-9, "maxiter": 500}
    ).x
    _, cluster = np.unique(groups, return_inverse=True)
    g = int(cluster.max()) + 1
    scores = np.zeros((g, k))
    np.add.at(scores, cluster, x * (y - expit(x @ beta))[:, None])
    h_inv = np.linalg.pinv(hess(beta))
    cov = h_inv @ (scores.T @ scores) @ h_inv * (g / (g - 1) if g > 1 else math.nan)
    return beta, cov, g


def _columns(rows: list[Judgment], judge_model: str | None, method: str, notes: list[str]) -> dict[str, np.ndarray]:
    """The model's terms that every row knows and that vary, as columns (a minus b)."""

    def diff(get) -> np.ndarray | None:
        values = [(get(j.a), get(j.b)) for j in rows]
        if any(u is None or v is None for u, v in values):
            return None
        return np.array([float(u) - float(v) for u, v in values])

    cols = {
        "position": np.array([0.0 if j.averaged or j.first is None else (1.0 if j.first == "a" else -1.0) for j in rows]),
        "words": diff(lambda s: s.length),
    }
    if method == "length-controlled":
        cols["correct"] = diff(lambda s: s.correct)
    cols["agrees"] = diff(lambda s: s.agrees_with_user)
    if judge_model is not None:
        cols["own"] = diff(lambda s: None if s.model is None else s.model == judge_model)
    for name in ("correct", "agrees", "own"):
        if (
            name in cols
            and cols[name] is None
            and any(
                getattr(j.a, {"correct": "correct", "agrees": "agrees_with_user", "own": "model"}[name]) is not None for j in rows
            )
        ):
            notes.append(f"model: the {name} term is known for some judgments only: left out of the model")
    return {k: v for k, v in cols.items() if v is not None and np.any(v != 0)}


def choice_model(rows: list[Judgment], judge_model: str | None, method: str, notes: list[str]) -> ChoiceModel | None:
    """The logistic model of the choice over rows (the module's text); None when no term can be fitted."""
    from scipy import stats

    cols = _columns(rows, judge_model, method, notes)
    if not rows or not cols:
        return None
    x = np.column_stack(list(cols.values()))
    beta, cov, g = fit_logistic(x, np.array([j.p_a for j in rows]), np.array([j.pair_id for j in rows]))
    t = float(stats.t.ppf(0.975, g - 1)) if g > 1 else math.nan
    terms, separated = {}, []
    for i, name in enumerate(cols):
        se = math.sqrt(max(float(cov[i, i]), 0.0))
        if abs(beta[i]) > SEPARATED:
            separated.append(name)
            terms[name] = Estimate(math.nan, NAN_CI, len(rows))
        elif math.isfinite(se) and math.isfinite(t):
            terms[name] = Estimate(float(beta[i]), (float(beta[i] - t * se), float(beta[i] + t * se)), len(rows))
        else:
            terms[name] = Estimate(float(beta[i]), NAN_CI, len(rows))
    if separated:
        notes.append(
            f"model: the choices follow {', '.join(separated)} without exception (complete separation): no finite estimate"
        )
    return ChoiceModel(method, len(rows), g, terms, tuple(separated))


# ---- the report ---------------------------------------------------------------------------------------------------


def _position(vs: list[_V], hard: bool) -> PositionBias:
    both = [v for v in vs if v.orders == "both"]
    if both:
        pos = position_bias([v.item for v in both])
        if not hard:
            return pos
        first = sum(v.item.v.first_both for v in both)
        f = rate(first, first + sum(v.item.v.second_both for v in both))
        offset = (
            Estimate(logit(f.value) / 2, (logit(f.ci[0]) / 2, logit(f.ci[1]) / 2), f.n) if f.n else Estimate(math.nan, NAN_CI, 0)
        )
        return replace(pos, offset=offset, offset_method=CONDITIONAL)
    averaged = [v for v in vs if v.orders == "averaged"]
    none = rate(0, 0)
    return PositionBias(
        len(averaged),
        rate(sum(bool(v.consistent) for v in averaged), len(averaged)),
        none,
        none,
        mean_estimate([]),
        Estimate(math.nan, NAN_CI, 0),
        "not measurable",
    )


def _empty_length(method: str) -> LengthBias:
    from .judge_bias import Correlation

    none = Correlation(math.nan, NAN_CI, math.nan, 0)
    return LengthBias(0, win_rate([]), none, none, Estimate(math.nan, NAN_CI, 0), None, method)


def _method(vs: list[_V], length_method: str) -> str:
    if length_method not in LENGTH_METHODS:
        raise ValueError(f"length_method must be one of {LENGTH_METHODS}, got {length_method!r}")
    if length_method != "auto":
        return length_method
    known = all(v.a.correct is not None and v.b.correct is not None for v in vs)
    equal = {v.item.pair.id for v in vs if v.item.truth == 0.5}
    return "equal truth" if known and len(equal) >= 2 else "length-controlled"


def bias_report(judgments: Labelling | JudgmentSet | Sequence[Judgment], length_method: str = "auto") -> BiasReport:
    """Position, length, agreement, self-preference and truth measures of the judge that made the judgments, each
    with its 95% interval and count, and what could not be measured with the counts that say why.

    A nanolm ``Labelling`` (both orders of every verdict, the principles' ground truth known) is measured by
    ``judge_bias.labelling_biases``; anything else through the choice model above."""
    if isinstance(judgments, Labelling):
        return labelling_biases(judgments)
    js = judgments if isinstance(judgments, JudgmentSet) else JudgmentSet(list(judgments), "python", "", "(unnamed judge)", None)
    if not js.judgments:
        raise ValueError("no judgments")
    vs = verdicts(js.judgments)
    notes = [f"left out: {n} {why}" for why, n in js.left_out.items()]
    pair_ids = {v.item.pair.id for v in vs}
    hard = all(j.p_a in (0.0, 0.5, 1.0) for j in js.judgments)
    position = _position(vs, hard)

    method = _method(vs, length_method)
    on = [v for v in vs if v.item.truth == 0.5] if method == "equal truth" else vs
    sized = [v for v in on if v.a.length is not None and v.b.length is not None]
    model = choice_model([j for v in (sized or on) for j in v.judgments], js.judge_model, method, notes)
    terms = model.terms if model else {}
    scratch: list[str] = []  # judge_bias's notes speak of nanolm's pair kinds
    length = length_bias([v.item for v in sized], scratch) if sized else _empty_length(method)
    length = replace(
        length, bonus=terms.get("words", Estimate(math.nan, NAN_CI, 0)), agreement=terms.get("agrees"), method=method, model=model
    )
    own = None
    if js.judge_model is not None:
        with_models = [v.item for v in on if v.a.model is not None and v.b.model is not None]
        own = self_preference(with_models, js.judge_model, scratch) if with_models else None
        if own is not None:
            own = replace(own, bonus=terms.get("own"))
    coverage = _coverage(js, vs, pair_ids, method, on, sized, own)
    return BiasReport(
        js.judge,
        len(pair_ids),
        len(vs),
        position,
        length,
        own,
        ground_truth([v.item for v in vs]),
        [],
        {},
        notes,
        f"{js.source} ({js.format})" if js.source else js.format,
        len(js.judgments),
        coverage,
    )


def _coverage(
    js: JudgmentSet, vs: list[_V], pair_ids: set[str], method: str, on: list[_V], sized: list[_V], own: object
) -> list[Coverage]:
    n_pairs, n_j = len(pair_ids), len(js.judgments)
    both = {v.item.pair.id for v in vs if v.orders in ("both", "averaged")}
    averaged = any(v.orders == "averaged" for v in vs)
    out = [
        Coverage(
            "position",
            bool(both),
            len(both),
            n_pairs,
            "pairs judged in both orders",
            "the label rows keep the two orders averaged: consistency only, no offset"
            if averaged
            else ""
            if both
            else "each pair was judged in one order only",
        )
    ]
    with_len = sum(j.a.length is not None and j.b.length is not None for j in js.judgments)
    out.append(
        Coverage(
            "length",
            bool(sized),
            with_len,
            n_j,
            "judgments with both answers' lengths",
            ""
            if with_len
            else "give --answers (FastChat's model_answer files)"
            if js.format == "mt-bench"
            else "no answer texts or lengths",
        )
    )
    on_pairs = {v.item.pair.id for v in on}
    out.append(
        Coverage(
            f"length model ({method})",
            bool(sized),
            len(on_pairs),
            n_pairs,
            "pairs equally correct" if method == "equal truth" else "pairs, correctness a term where known",
        )
    )
    decisive = sum(v.item.truth in (0.0, 1.0) for v in vs)
    out.append(
        Coverage(
            "agreement with the truth",
            decisive > 0,
            decisive,
            len(vs),
            "verdicts where one answer is correct and the other is not",
            "" if decisive else "the judgments say nothing of correctness",
        )
    )
    agree = sum(
        v.a.agrees_with_user is not None and v.b.agrees_with_user is not None and v.a.agrees_with_user != v.b.agrees_with_user
        for v in on
    )
    out.append(
        Coverage(
            "agreement with the user",
            agree > 0,
            agree,
            len(on),
            "verdicts where one answer agrees with the user's opinion and the other does not"
            + (" (equally correct)" if method == "equal truth" else ""),
            "" if agree else "no user opinion in the judgments",
        )
    )
    m = js.judge_model
    mine = {
        v.item.pair.id
        for v in on
        if m is not None and m in (v.a.model, v.b.model) and v.a.model != v.b.model and None not in (v.a.model, v.b.model)
    }
    why = (
        "the judge's model is not named"
        if m is None
        else ""
        if mine
        else f"no pair sets an answer by {m} against another model's"
    )
    out.append(
        Coverage(
            "self-preference",
            own is not None,
            len(mine),
            len(on_pairs),
            "pairs of the judge's own model's answer against another model's",
            why,
        )
    )
    return out
