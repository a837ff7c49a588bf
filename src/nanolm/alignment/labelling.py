"""Labelling: every pair judged by every principle in both orders, written as TRL preference rows.

A pair (a, b) under a principle is shown to the judge as (a, b) and as (b, a) (Lee et al. 2023 average the two
orders; MT-Bench judges each pair twice with the order swapped). With p_ab = P(first better | a shown first)
and p_ba = P(first better | b shown first):

- the verdict P(a better) = (p_ab + 1 - p_ba) / 2: the soft label, the position term cancelling in the average;
- each order's winner: the first shown if its p > 0.5, the second if p < 0.5, a tie at exactly 0.5;
- consistent: both orders name the same winner (or both tie). MT-Bench counts an inconsistent pair as a tie;
  here the row keeps its averaged soft label and says ``consistent: false``, so a reader can do either.

A label row (JSON Lines, one per pair and principle; THE CONTRACT the reward model reads)::

    {"prompt": str,            # ends where the answers start
     "chosen": str,            # the preferred answer: the continuation of the prompt, leading space included
     "rejected": str,          # (TRL's "prompt"/"chosen"/"rejected" preference format)
     "label_prob": float,      # P(chosen is better) in [0.5, 1]; 0.5 is a tie (chosen is then the pair's a)
     "principle": str, "consistent": bool, "judge": str, "pair_id": str,
     "chosen_meta": {"correct": bool|null, "agrees_with_user": bool|null, "length": int (words), "source": str},
     "rejected_meta": {... the same ...}}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from .constitution import Constitution
from .judges import Query, check_judge, prefer_all
from .pairs import Pair
from .rows import bool_field, checked, int_field, jsonl_text, number_field, text_field

LABEL_FIELDS = (
    "prompt",
    "chosen",
    "rejected",
    "label_prob",
    "principle",
    "consistent",
    "judge",
    "pair_id",
    "chosen_meta",
    "rejected_meta",
)
META_FIELDS = ("correct", "agrees_with_user", "length", "source")


def winner(p_first: float) -> str:
    """One order's verdict: "first", "second" or "tie" (exactly 0.5)."""
    return "first" if p_first > 0.5 else "second" if p_first < 0.5 else "tie"


@dataclass(frozen=True)
class Verdict:
    """One pair under one principle, judged in both orders."""

    pair_id: str
    principle: str
    p_ab: float  # P(first better) with a shown first: P(a better) in that order
    p_ba: float  # P(first better) with b shown first: P(b better) in that order

    @property
    def p_a(self) -> float:
        """The averaged verdict: P(a better)."""
        return (self.p_ab + 1 - self.p_ba) / 2

    @property
    def consistent(self) -> bool:
        """Both orders name the same answer (a in both, b in both, or a tie in both)."""
        ab, ba = winner(self.p_ab), winner(self.p_ba)
        return {"first": "second", "second": "first", "tie": "tie"}[ab] == ba

    @property
    def first_both(self) -> bool:
        """The first shown won in both orders (a first, then b first): a pure position effect."""
        return self.p_ab > 0.5 and self.p_ba > 0.5

    @property
    def second_both(self) -> bool:
        return self.p_ab < 0.5 and self.p_ba < 0.5


@dataclass
class Labelling:
    judge: str
    judge_model: str | None  # the model the judge is (self-preference), None for a rule judge
    constitution: Constitution
    pairs: list[Pair]
    verdicts: list[Verdict]  # pair-major: pair i's verdicts under each principle in turn
    planted: dict[str, float] = field(default_factory=dict)  # a planted judge's bias sizes (logits)


def label(pairs: list[Pair], judge: Any, constitution: Constitution) -> Labelling:
    """Every pair under every principle, asked of the judge in both orders (2 · pairs · principles calls)."""
    if not pairs:
        raise UserError("no pairs to label")
    ids = [p.id for p in pairs]
    if len(set(ids)) != len(ids):
        raise UserError(f"pair id {next(x for x in ids if ids.count(x) > 1)!r} appears twice; give every pair its own id")
    check_judge(judge, pairs, constitution)
    queries: list[Query] = []
    keys: list[tuple[str, str]] = []  # (pair id, principle) of each pair of queries
    for pair in pairs:
        for principle in constitution.principles:
            queries.append((pair.prompt, pair.a, pair.b, principle))
            queries.append((pair.prompt, pair.b, pair.a, principle))
            keys.append((pair.id, principle.name))
    probs = prefer_all(judge, queries)
    bad = next((p for p in probs if not 0.0 <= p <= 1.0), None)
    if bad is not None:
        raise ValueError(f"judge {judge.name} returned {bad}, not a probability")
    verdicts = [Verdict(pid, name, probs[2 * k], probs[2 * k + 1]) for k, (pid, name) in enumerate(keys)]
    planted = judge.planted() if hasattr(judge, "planted") else {}
    return Labelling(judge.name, judge.model, constitution, list(pairs), verdicts, planted)


def label_rows(labelling: Labelling) -> list[dict[str, Any]]:
    """The labels as TRL preference rows (the contract in the module's text), pair-major."""
    by_id = {p.id: p for p in labelling.pairs}
    rows = []
    for v in labelling.verdicts:
        pair = by_id[v.pair_id]
        p_a = v.p_a
        chosen, rejected = (pair.a, pair.b) if p_a >= 0.5 else (pair.b, pair.a)
        rows.append(
            {
                "prompt": pair.prompt,
                "chosen": chosen.text,
                "rejected": rejected.text,
                "label_prob": max(p_a, 1 - p_a),
                "principle": v.principle,
                "consistent": v.consistent,
                "judge": labelling.judge,
                "pair_id": pair.id,
                "chosen_meta": chosen.meta(),
                "rejected_meta": rejected.meta(),
            }
        )
    return rows


def write_labels(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    """Label rows as JSON Lines, written atomically."""
    from ..io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return Path(path)


# ---- reading a labels file -------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelRow:
    prompt: str
    chosen: str
    rejected: str
    label_prob: float
    principle: str
    consistent: bool
    judge: str
    pair_id: str
    chosen_meta: dict[str, Any]
    rejected_meta: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_labels(path: str | Path) -> list[LabelRow]:
    """The rows of a labels file `nanolm feedback label` wrote, each checked against the contract; a UserError
    naming the file and the line of the first row that is not one (extra fields are allowed)."""
    path = Path(path)
    text = jsonl_text(path, "a labels .jsonl file", "`nanolm feedback label PAIRS --judge ...` writes one")
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            rows.append(label_row(line, f"{path}:{n}"))
    if not rows:
        raise UserError(f"{path}: no label rows; `nanolm feedback label` writes them")
    return rows


def label_row(line: str, where: str) -> LabelRow:
    """One line of a labels file as a LabelRow, or a UserError saying what is wrong with it at `where`."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg}); a labels file has one JSON object per line") from None
    return label_from_row(row, where)


def label_from_row(row: Any, where: str) -> LabelRow:
    """One label row's JSON value as a LabelRow, or a UserError naming `where` and the first field that is wrong."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: a JSON {type(row).__name__}, not a label row object")
    missing = [k for k in LABEL_FIELDS if k not in row]
    if missing:
        hint = " (this is a pairs file: label it with `nanolm feedback label`)" if {"a", "b"} <= set(row) else ""
        raise UserError(
            f"{where}: not a label row: no {', '.join(map(repr, missing))}{hint}; a label row has {', '.join(LABEL_FIELDS)}"
        )
    prompt, principle, judge, pair_id = (text_field(row, k, where) for k in ("prompt", "principle", "judge", "pair_id"))
    chosen, rejected = (text_field(row, k, where, empty=True) for k in ("chosen", "rejected"))
    p = number_field(row, "label_prob", where, 0.5, 1.0, what="a probability in [0.5, 1]")
    consistent = bool_field(row, "consistent", where)
    metas = [_check_meta(row, key, where) for key in ("chosen_meta", "rejected_meta")]
    return LabelRow(prompt, chosen, rejected, p, principle, consistent, judge, pair_id, *metas)


def _check_meta(row: dict, key: str, where: str) -> dict[str, Any]:
    meta = checked(
        row,
        key,
        where,
        f"an object with {', '.join(META_FIELDS)}",
        lambda m: isinstance(m, dict) and all(k in m for k in META_FIELDS),
    )
    for k in ("correct", "agrees_with_user"):
        bool_field(meta, k, where, nullable=True, label=f"'{key}.{k}'")
    int_field(meta, "length", where, label=f"'{key}.length'", what="a whole number of words >= 0")
    text_field(meta, "source", where, empty=True, label=f"'{key}.source'")
    return meta
