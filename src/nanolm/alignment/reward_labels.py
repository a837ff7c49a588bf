"""What a reward model learns from and is checked against: the labels file and the biases a reward inherits.

The labels file. JSON Lines, one row per pair and principle: TRL's ``prompt``/``chosen``/``rejected``
preference format plus the labeller's record (``label_prob``, the probability that chosen is better, in
[0.5, 1]; the principle, the judge, the pair, and each answer's ground truth). ``nanolm feedback label``
writes it (``labelling``); here it is read back and checked field by field, so a file of another format
fails naming its file, line and first missing field.

Inherited biases, measured on the held-out answers (each distinct prompt + response once, with the
ground truth its labels row recorded):
- reward vs length: Pearson's r between reward and length among equally correct answers (both centred
  within each ground-truth class: correct, wrong, unknown), with a Fisher-z 95% interval and a t-test;
  length as the labels file records it;
- agreeing-but-wrong: the mean reward of answers that agree with the user and are wrong, beside the
  mean reward of correct answers (rewards have no zero: only differences mean something), their gap
  with a Welch 95% interval, and, over the prompts that have both, how often the agreeing-but-wrong
  answer outscores the correct one (a rate with a Wilson interval) and its mean Bradley–Terry win
  probability σ(r_aw − r_c).

Plain data and statistics, no torch: ``reward_model`` trains and scores the model, then measures it here.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..stats import Z95, fisher_interval
from .rows import bool_field, int_field, jsonl_text, number_field, object_field, text_field
from .stats import MeanEstimate, Rate, mean_estimate, rate

# The labels file's fields (TRL's preference format plus the labeller's record) and what each must be.
LABEL_FIELDS: dict[str, str] = {
    "prompt": "text",
    "chosen": "text",
    "rejected": "text",
    "label_prob": "number",
    "principle": "text",
    "consistent": "bool",
    "judge": "text",
    "pair_id": "text",
    "chosen_meta": "object",
    "rejected_meta": "object",
}
META_FIELDS: dict[str, str] = {
    "correct": "bool or null",
    "agrees_with_user": "bool or null",
    "length": "integer",
    "source": "text",
}


# ---- the labels file ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerMeta:
    """The ground truth a labels row records for one answer."""

    correct: bool | None  # None: the question has no known answer
    agrees_with_user: bool | None  # None: the user stated no opinion
    length: int  # as the labeller counted it (tokens or words)
    source: str  # where the answer came from ("policy", "corpus:wrong", ...)


@dataclass(frozen=True)
class PreferenceRow:
    """One labels row: chosen is better than rejected with probability label_prob."""

    prompt: str
    chosen: str  # the text that follows the prompt
    rejected: str
    label_prob: float  # in [0.5, 1]
    principle: str
    consistent: bool  # the verdict survived swapping the two answers
    judge: str
    pair_id: str
    chosen_meta: AnswerMeta
    rejected_meta: AnswerMeta
    line: int = 0  # the line of the file it was read from


def _typed(raw: dict, key: str, kind: str, where: str, label: str | None = None) -> Any:
    """raw[key] checked to be of kind (one of the values of LABEL_FIELDS and META_FIELDS)."""
    if kind == "text":
        return text_field(raw, key, where, empty=key in ("chosen", "rejected", "source"), label=label)
    if kind == "number":
        return number_field(raw, key, where, label=label, what="a number")
    if kind in ("bool", "bool or null"):
        return bool_field(raw, key, where, nullable=kind == "bool or null", label=label)
    if kind == "integer":
        return int_field(raw, key, where, label=label, what="a whole number >= 0 (a length is never negative)")
    return object_field(raw, key, where, label=label)


def _meta(where: str, name: str, raw: dict) -> AnswerMeta:
    for key in META_FIELDS:
        if key not in raw:
            raise UserError(
                f"{where}: {name} has no field {key!r} (each answer's record needs "
                f"{', '.join(META_FIELDS)}); write labels with nanolm feedback label"
            )
    return AnswerMeta(*(_typed(raw, key, kind, where, f"'{name}.{key}'") for key, kind in META_FIELDS.items()))


def parse_label_row(raw: Any, where: str, line: int = 0) -> PreferenceRow:
    """One labels row from its JSON value; a UserError naming `where` (file:line) and the first missing or
    mistyped field."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a labels row is a JSON object, got {type(raw).__name__}")
    missing = [key for key in LABEL_FIELDS if key not in raw]  # before the types: another format lacks fields
    if missing:
        raise UserError(
            f"{where}: missing field {missing[0]!r}: not a labels file (rows need {', '.join(LABEL_FIELDS)}; "
            "TRL's prompt/chosen/rejected plus the labeller's record: write them with nanolm feedback label)"
        )
    v = {key: _typed(raw, key, kind, where) for key, kind in LABEL_FIELDS.items()}
    p = v["label_prob"]
    if not 0.5 <= p <= 1.0:
        raise UserError(f"{where}: label_prob {p} is outside [0.5, 1] (the probability that chosen is the better answer)")
    return PreferenceRow(
        v["prompt"],
        v["chosen"],
        v["rejected"],
        p,
        v["principle"],
        v["consistent"],
        v["judge"],
        v["pair_id"],
        _meta(where, "chosen_meta", v["chosen_meta"]),
        _meta(where, "rejected_meta", v["rejected_meta"]),
        line,
    )


def read_labels(path: str | Path) -> list[PreferenceRow]:
    """Every row of a labels file (JSON Lines, one row per line, blank lines skipped); a UserError naming the
    file, the line and the missing field for a file of another format."""
    path = Path(path)
    text = jsonl_text(path, "a labels .jsonl file", "`nanolm feedback label PAIRS --judge ...` writes one")
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{i}: not valid JSON ({e.msg}); a labels file has one JSON object per line") from None
        rows.append(parse_label_row(raw, f"{path}:{i}", i))
    if not rows:
        raise UserError(f"{path}: no labels rows (the file is empty)")
    return rows


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ---- inherited biases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Correlation:
    """Pearson's r of reward with length, both centred within each ground-truth class."""

    r: float  # NaN when undefined (fewer than 3 answers beyond the classes, or a constant)
    n: int  # answers
    groups: int  # ground-truth classes centred within
    ci: tuple[float, float]  # Fisher z, 95%
    p_value: float  # two-sided t-test of r = 0, n − groups − 1 degrees of freedom


@dataclass(frozen=True)
class RewardMean:
    """The mean reward of n answers, with mean ± 1.96 standard errors (rewards are unbounded: not clipped)."""

    mean: float
    sd: float
    n: int
    ci: tuple[float, float]


@dataclass(frozen=True)
class InheritedBias:
    length: Correlation  # reward vs length among equally correct answers
    agree_wrong: RewardMean  # answers that agree with the user and are wrong
    correct: RewardMean  # correct answers
    gap: RewardMean  # agree_wrong.mean − correct.mean; n = the two counts' sum, Welch 95% CI, sd NaN
    agree_wrong_wins: Rate  # same prompt, both kinds: the agreeing-but-wrong answer scores higher
    agree_wrong_win_prob: MeanEstimate  # mean σ(r_aw − r_c) over those same-prompt pairs
    answers: int  # distinct held-out answers scored


@dataclass(frozen=True)
class ScoredAnswer:
    prompt: str
    response: str
    meta: AnswerMeta
    reward: float


def length_correlation(rewards: Sequence[float], lengths: Sequence[float], classes: Sequence[Any]) -> Correlation:
    """Pearson's r of rewards with lengths after centring both within each class (the pooled within-class
    correlation), Fisher-z 95% CI with standard error 1/sqrt(n − g − 2), t-test with n − g − 1 degrees of freedom
    (g classes); r NaN when n − g < 2 or either centred series is constant."""
    from scipy import stats

    r_, l_ = np.asarray(rewards, dtype=np.float64), np.asarray(lengths, dtype=np.float64)
    keys = list(classes)
    cr, cl = r_.copy(), l_.copy()
    groups = list(dict.fromkeys(keys))
    for g in groups:
        idx = np.array([k == g for k in keys])
        cr[idx] -= r_[idx].mean()
        cl[idx] -= l_[idx].mean()
    n, g = len(r_), len(groups)
    if n - g < 2 or np.allclose(cr, 0) or np.allclose(cl, 0):
        return Correlation(math.nan, n, g, (-1.0, 1.0), math.nan)
    r = float(np.clip(stats.pearsonr(cr, cl).statistic, -1.0, 1.0))
    df = n - g - 1
    if abs(r) >= 1.0:
        p_value = 0.0
    else:
        t = r * math.sqrt(df / (1 - r * r))
        p_value = float(2 * stats.t.sf(abs(t), df))
    if n - g - 2 > 0 and abs(r) < 1.0:
        ci = fisher_interval(r, 1 / math.sqrt(n - g - 2))
    else:
        ci = (-1.0, 1.0) if abs(r) < 1.0 else (r, r)
    return Correlation(r, n, g, ci, p_value)


def reward_mean(values: Sequence[float]) -> RewardMean:
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return RewardMean(math.nan, math.nan, 0, (math.nan, math.nan))
    mean = float(v.mean())
    if len(v) == 1:
        return RewardMean(mean, math.nan, 1, (math.nan, math.nan))
    sd = float(v.std(ddof=1))
    half = Z95 * sd / math.sqrt(len(v))
    return RewardMean(mean, sd, len(v), (mean - half, mean + half))


def _gap(a: RewardMean, b: RewardMean) -> RewardMean:
    """a.mean − b.mean with a Welch (normal) 95% interval."""
    if a.n < 2 or b.n < 2:
        return RewardMean(a.mean - b.mean, math.nan, a.n + b.n, (math.nan, math.nan))
    se = math.sqrt(a.sd**2 / a.n + b.sd**2 / b.n)
    d = a.mean - b.mean
    return RewardMean(d, math.nan, a.n + b.n, (d - Z95 * se, d + Z95 * se))


def distinct_answers(rows: Sequence[PreferenceRow]) -> list[tuple[str, str, AnswerMeta]]:
    """Each (prompt, response, meta) once, in order of appearance."""
    seen: dict[tuple[str, str], AnswerMeta] = {}
    for r in rows:
        for response, meta in ((r.chosen, r.chosen_meta), (r.rejected, r.rejected_meta)):
            seen.setdefault((r.prompt, response), meta)
    return [(p, resp, m) for (p, resp), m in seen.items()]


def inherited_bias(answers: Sequence[ScoredAnswer]) -> InheritedBias:
    """Reward vs length among equally correct answers, and the reward of agreeing-but-wrong answers against
    correct ones (over all of them, and paired within a prompt)."""
    length = length_correlation([a.reward for a in answers], [a.meta.length for a in answers], [a.meta.correct for a in answers])
    aw = [a for a in answers if a.meta.agrees_with_user is True and a.meta.correct is False]
    ok = [a for a in answers if a.meta.correct is True]
    aw_mean, ok_mean = reward_mean([a.reward for a in aw]), reward_mean([a.reward for a in ok])
    correct_by_prompt: dict[str, list[float]] = {}
    for a in ok:
        correct_by_prompt.setdefault(a.prompt, []).append(a.reward)
    diffs = [a.reward - c for a in aw for c in correct_by_prompt.get(a.prompt, [])]
    wins = rate(sum(d > 0 for d in diffs), len(diffs))
    win_prob = mean_estimate([1 / (1 + math.exp(-d)) for d in diffs])
    return InheritedBias(length, aw_mean, ok_mean, _gap(aw_mean, ok_mean), wins, win_prob, len(answers))
