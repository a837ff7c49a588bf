"""A judge's labels made anywhere, read into one shape for the bias report (``judgment_bias``).

A ``Judgment`` is one verdict of a judge on a pair of answers (a, b): P(a better) by that verdict (1, 0.5 or 0 for
a choice; the judge's probability where it gave one), which answer was shown first ("a", "b", or None when the
file does not say), and what is known of each answer: its length in words, whether it is correct, whether it
agrees with the opinion the user stated, and which model wrote it. Four formats are read:

- ``pairs``: the generic JSONL, one judgment per line (the order it was shown in, the choice)::

      {"pair_id": str | int,                          # the same id on each line that judges the same two answers
       "answer_a": str, "answer_b": str,              # the answers' text; or "length_a"/"length_b": words, int >= 0
       "first": "a" | "b",                            # which answer was shown first (in position A)
       "choice": "A" | "B" | "tie",                   # the POSITION the judge preferred (A: the one shown first);
                                                      #   or "p_first": P(the answer shown first is better), [0, 1]
       # optional (null or absent: not known)
       "correct": "a" | "b" | "both" | "neither",     # which answers are correct
       "user_opinion": "a" | "b" | "neither",         # which answer says what the user said they believe
       "model_a": str, "model_b": str,                # which model wrote each answer
       "judge": str,                                  # which model (or person) judged
       "criterion": str}                              # the rubric or principle asked, if several were

- ``mt-bench``: FastChat's pairwise judgments (``model_judgment/*_pair.jsonl``): ``question_id``, ``model_1``,
  ``model_2``, ``g1_winner`` and ``g2_winner`` (``model_1`` / ``model_2`` / ``tie`` / ``error``), ``judge``
  ([model, prompt name]) and ``turn``; game 1 showed model_1's answer first, game 2 model_2's (FastChat maps the
  winners back to the models). The answer files (``model_answer/MODEL.jsonl``: ``question_id``, ``choices[0].turns``;
  the model is ``model_id``, else the file's name, as FastChat names it) give the lengths: the words of the judged
  turn's answer. A game whose winner is ``error`` (the judge's reply had no verdict) is left out and counted; a
  row graded one answer at a time (``m1_score``) has no order and is left out and counted.
- ``trl``: TRL preference rows, ``prompt`` (optional), ``chosen`` and ``rejected`` (strings, or conversations:
  lists of {role, content}), with optional ``chosen_first`` (bool: the chosen answer was shown first; without
  it the order is unknown), ``pair_id`` (else the prompt and the two texts make the pair), ``judge``, and
  ``chosen_meta`` / ``rejected_meta`` with any of nanolm's ``correct``, ``agrees_with_user``, ``length``, ``source``.
- ``nanolm``: the label rows ``nanolm feedback label`` writes (``labelling``): each row already averages the two
  orders (``label_prob``) and says whether they agreed (``consistent``): consistency is measurable, the position
  offset is not. The judge's model is read from its name (``likelihood:M``, ``prompt:M``).

Bad input is a UserError naming the file and line: a line that is not JSON, a missing field (named), a value
outside the format's set, a pair id whose answers differ from one line to another, an answers file without an
answer the judgments name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from .pairs import words
from .rows import bool_field, checked, choice_field, id_field, int_field, jsonl_rows, number_field, object_field, text_field

FORMATS = ("auto", "nanolm", "pairs", "mt-bench", "trl")
MT_WINNERS = ("model_1", "model_2", "tie", "error")


@dataclass(frozen=True)
class Side:
    """What the judgments say of one answer (None: not given)."""

    length: int | None  # words
    correct: bool | None = None
    agrees_with_user: bool | None = None
    model: str | None = None  # who wrote it
    text: str | None = None


@dataclass(frozen=True)
class Judgment:
    pair_id: str
    a: Side
    b: Side
    p_a: float  # P(a better) by this verdict
    first: str | None  # "a" or "b": shown first; None: not known (or the two orders averaged)
    averaged: bool = False  # the verdict already averages both orders (nanolm's label rows)
    consistent: bool | None = None  # for an averaged verdict: both orders named the same winner
    criterion: str = ""  # the principle or judge prompt: verdicts under different ones are matched apart
    where: str = ""  # file:line


@dataclass
class JudgmentSet:
    judgments: list[Judgment]
    format: str
    source: str  # the file
    judge: str
    judge_model: str | None  # the judge's own model (self-preference); None when not known
    left_out: dict[str, int] = field(default_factory=dict)  # why -> judgments not used
    notes: list[str] = field(default_factory=list)


# ---- reading -------------------------------------------------------------------------------------------------


def read_judgments(
    path: str | Path, fmt: str = "auto", answers: Iterable[str | Path] = (), judge: str | None = None
) -> JudgmentSet:
    """The judgments in a JSONL file of one of FORMATS (auto: told by the first row's fields); answers: FastChat
    answer files or folders of them (mt-bench lengths); judge: the one judge to keep when the file has several."""
    path = Path(path)
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: give one of {', '.join(FORMATS)}")
    rows = list(_rows(path))
    if fmt == "auto":
        fmt = detect_format(rows[0][1], f"{path}:{rows[0][0]}")
    answers = list(answers)
    if answers and fmt != "mt-bench":
        raise UserError(f"--answers: only MT-Bench judgments take answer files (the {fmt} format carries its answers)")
    reader = {"pairs": _pairs_row, "trl": _trl_row, "nanolm": _nanolm_row}
    left_out: dict[str, int] = {}
    if fmt == "mt-bench":
        found = _mt_bench(rows, path, load_answers(answers) if answers else None, left_out)
    else:
        found = [(j, name) for n, row in rows for j, name in [reader[fmt](row, f"{path}:{n}")]]
    return _one_judge(found, fmt, path, judge, left_out)


def detect_format(row: dict, where: str) -> str:
    if "g1_winner" in row or "model_1" in row:
        return "mt-bench"
    if "label_prob" in row and "chosen_meta" in row:
        return "nanolm"
    if "chosen" in row and "rejected" in row:
        return "trl"
    if "pair_id" in row and "first" in row:
        return "pairs"
    raise UserError(
        f"{where}: cannot tell the format from the fields ({', '.join(list(row)[:8])}); give --format "
        "nanolm, pairs, mt-bench or trl"
    )


def _rows(path: Path, what: str = "judgments") -> list[tuple[int, dict]]:
    rows = jsonl_rows(path, f"a {what} .jsonl file", "docs/feedback.md gives the formats")
    if not rows:
        raise UserError(f"{path}: no {what} (an empty file)")
    return rows


def _one_judge(
    found: list[tuple[Judgment, str | None]], fmt: str, path: Path, judge: str | None, left_out: dict[str, int]
) -> JudgmentSet:
    """The judgments of one judge (a file of several needs --judge), each pair id's answers checked to agree."""
    names = sorted({name for _, name in found if name is not None})
    if judge is not None:
        if judge not in names:
            raise UserError(f"--judge {judge}: no judgments by it in {path}; its judges: {', '.join(names) or 'unnamed'}")
        found = [(j, name) for j, name in found if name == judge]
    elif len(names) > 1:
        raise UserError(f"{path}: judgments by {len(names)} judges ({', '.join(names[:5])}); pick one with --judge NAME")
    judgments = [j for j, _ in found]
    if not judgments:
        raise UserError(f"{path}: no judgment left to measure ({', '.join(f'{v} {k}' for k, v in left_out.items())})")
    check_pairs_agree(judgments)
    name = judge or (names[0] if names else "(unnamed judge)")
    return JudgmentSet(judgments, fmt, str(path), name, judge_model(name, fmt) if names else None, left_out)


def judge_model(name: str, fmt: str) -> str | None:
    """The model a judge is: nanolm names its judges likelihood:M / prompt:M (rule and planted judges are no
    model); in the other formats the judge field names the model."""
    if fmt != "nanolm":
        return name
    kind, _, model = name.partition(":")
    return model.removesuffix(" (sum)") if kind in ("likelihood", "prompt") and model else None


def check_pairs_agree(judgments: list[Judgment]) -> None:
    """Every line of a pair id names the same two answers (a UserError naming the two lines otherwise)."""
    seen: dict[str, Judgment] = {}
    for j in judgments:
        first = seen.setdefault(j.pair_id, j)
        if (first.a, first.b) != (j.a, j.b):
            raise UserError(
                f"{j.where}: pair id {j.pair_id!r} was seen at {first.where.rpartition(':')[2]} with other "
                "answers; one pair id must name the same two answers on every line"
            )


# ---- the generic format --------------------------------------------------------------------------------------

PAIRS_ROW = '; a judgment row is {"pair_id", "answer_a", "answer_b", "first": "a"|"b", "choice": "A"|"B"|"tie"}'


def _pairs_row(row: dict, where: str) -> tuple[Judgment, str | None]:
    pid = id_field(row, "pair_id", where, hint=PAIRS_ROW)
    first = choice_field(row, "first", where, ("a", "b"), hint=PAIRS_ROW)
    p_first = number_field(row, "p_first", where, 0.0, 1.0, required=False, what="a probability in [0, 1]")
    if p_first is None:
        choice = choice_field(
            row, "choice", where, ("A", "B", "tie"), hint='; give "choice" (the position preferred) or "p_first"'
        )
        p_first = {"A": 1.0, "B": 0.0, "tie": 0.5}[choice]
    correct = choice_field(row, "correct", where, ("a", "b", "both", "neither"), required=False)
    opinion = choice_field(row, "user_opinion", where, ("a", "b", "neither"), required=False)
    sides = []
    for s in "ab":
        text = text_field(row, f"answer_{s}", where, required=False, empty=True)
        length = int_field(row, f"length_{s}", where, required=False, what="a whole number of words >= 0")
        if length is None and text is None:
            raise UserError(f"{where}: missing field 'answer_{s}' (the answer's text; or 'length_{s}', its words)")
        model = text_field(row, f"model_{s}", where, required=False)
        sides.append(
            Side(
                words(text) if length is None else length,
                None if correct is None else correct in (s, "both"),
                None if opinion is None else opinion == s,
                model,
                text,
            )
        )
    judge = text_field(row, "judge", where, required=False)
    criterion = text_field(row, "criterion", where, required=False, default="", empty=True)
    p_a = p_first if first == "a" else 1.0 - p_first
    return Judgment(pid, sides[0], sides[1], p_a, first, criterion=criterion, where=where), judge


# ---- TRL preference rows, and nanolm's label rows -----------------------------------------------------------


def _text(row: dict, key: str, where: str, required: bool = True) -> str:
    """A TRL completion: a string, or a conversation (its messages' contents, joined); "" when optional and absent."""

    def ok(v: Any) -> bool:
        return isinstance(v, str) or (
            isinstance(v, list) and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in v)
        )

    return checked(
        row,
        key,
        where,
        "a string or a list of {role, content} messages",
        ok,
        required,
        "",
        convert=lambda v: v if isinstance(v, str) else " ".join(m["content"] for m in v),
    )


def _meta_side(row: dict, key: str, text: str, where: str) -> Side:
    meta = object_field(row, key, where, required=False, what="an object (correct, agrees_with_user, length, source)")
    if meta is None:
        return Side(words(text), text=text)
    correct, agrees = (
        bool_field(meta, k, where, nullable=True, required=False, label=f"'{key}.{k}'") for k in ("correct", "agrees_with_user")
    )
    length = int_field(
        meta, "length", where, required=False, default=words(text), label=f"'{key}.length'", what="a whole number of words >= 0"
    )
    source = text_field(meta, "source", where, required=False, empty=True, label=f"'{key}.source'")
    return Side(length, correct, agrees, source, text)


def _ordered(chosen: Side, rejected: Side, p_chosen: float) -> tuple[Side, Side, float, bool]:
    """(a, b, P(a better), chosen is a): a is the answer whose text sorts first, so every line of a pair agrees."""
    if (chosen.text or "") <= (rejected.text or ""):
        return chosen, rejected, p_chosen, True
    return rejected, chosen, 1.0 - p_chosen, False


def _trl_row(row: dict, where: str) -> tuple[Judgment, str | None]:
    prompt = _text(row, "prompt", where, required=False)
    texts = [_text(row, k, where) for k in ("chosen", "rejected")]
    chosen, rejected = (_meta_side(row, f"{k}_meta", t, where) for k, t in zip(("chosen", "rejected"), texts))
    chosen_first = bool_field(row, "chosen_first", where, required=False)
    a, b, p_a, chosen_is_a = _ordered(chosen, rejected, 1.0)
    first = None if chosen_first is None else "a" if chosen_first == chosen_is_a else "b"
    pid = id_field(row, "pair_id", where, required=False)
    if pid is None:  # the prompt and the two answers, whichever was chosen
        pid = "trl-" + hashlib.sha256(json.dumps([prompt, a.text, b.text]).encode("utf-8")).hexdigest()[:16]
    judge = text_field(row, "judge", where, required=False)
    return Judgment(pid, a, b, p_a, first, where=where), judge


def _nanolm_row(row: dict, where: str) -> tuple[Judgment, str | None]:
    from .labelling import label_from_row

    r = label_from_row(row, where)
    chosen = Side(
        r.chosen_meta["length"], r.chosen_meta["correct"], r.chosen_meta["agrees_with_user"], r.chosen_meta["source"], r.chosen
    )
    rejected = Side(
        r.rejected_meta["length"],
        r.rejected_meta["correct"],
        r.rejected_meta["agrees_with_user"],
        r.rejected_meta["source"],
        r.rejected,
    )
    a, b, p_a, _ = _ordered(chosen, rejected, r.label_prob)
    return Judgment(
        r.pair_id, a, b, p_a, None, averaged=True, consistent=r.consistent, criterion=r.principle, where=where
    ), r.judge


# ---- MT-Bench -----------------------------------------------------------------------------------------------


def load_answers(paths: Iterable[str | Path]) -> dict[tuple[str, str], tuple[list[str], str]]:
    """FastChat answer files (or folders of them): (model, question id) -> (the turns' answers, file:line)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise UserError(f"--answers {p}: no .jsonl answer files in the folder")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"--answers {p}: no such file or folder; give FastChat's model_answer/ folder or its files")
    out: dict[tuple[str, str], tuple[list[str], str]] = {}
    for f in files:
        for n, row in _rows(f, "answers"):
            where = f"{f}:{n}"
            qid = id_field(row, "question_id", where)
            model = text_field(row, "model_id", where, required=False, empty=True) or f.stem
            turns = checked(
                row,
                "choices",
                where,
                'a list whose first item has "turns", a list of strings',
                _has_turns,
                convert=lambda c: c[0]["turns"],
            )
            out[(model, qid)] = (turns, where)
    return out


def _has_turns(choices: Any) -> bool:
    turns = choices[0].get("turns") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    return isinstance(turns, list) and all(isinstance(t, str) for t in turns)


def _mt_bench(
    rows: list[tuple[int, dict]], path: Path, answers: dict | None, left_out: dict[str, int]
) -> list[tuple[Judgment, str | None]]:
    out = []
    for n, row in rows:
        where = f"{path}:{n}"
        if "m1_score" in row:  # graded one answer at a time (FastChat's single mode): no order to read
            left_out["rows graded one answer at a time (m1_score): no order"] = (
                left_out.get("rows graded one answer at a time (m1_score): no order", 0) + 1
            )
            continue
        qid = id_field(row, "question_id", where)
        m1, m2 = (text_field(row, k, where, what="the name of the model whose answer was judged") for k in ("model_1", "model_2"))
        if m1 == m2:
            raise UserError(f"{where}: model_1 and model_2 are both {m1!r}; a pairwise judgment compares two models")
        winners = [choice_field(row, k, where, MT_WINNERS) for k in ("g1_winner", "g2_winner")]
        turn = choice_field(row, "turn", where, (1, 2))
        judge_field = checked(
            row,
            "judge",
            where,
            '[judge model, prompt name], such as ["gpt-4", "pair-v2"]',
            lambda j: (
                (isinstance(j, str) and bool(j.strip()))
                or (isinstance(j, list) and bool(j) and all(isinstance(x, str) for x in j) and bool(j[0].strip()))
            ),
            convert=lambda j: [j, ""] if isinstance(j, str) else j,
        )
        a_model, b_model = sorted((m1, m2))
        sides = [Side(_answer_length(answers, m, qid, turn, where), model=m) for m in (a_model, b_model)]
        pid = f"q{qid}-turn{turn}-{a_model}-vs-{b_model}"
        for game, (shown_first, winner) in enumerate(zip((m1, m2), winners), start=1):
            if winner == "error":
                left_out["games whose winner is 'error'"] = left_out.get("games whose winner is 'error'", 0) + 1
                continue
            p_a = 0.5 if winner == "tie" else float({"model_1": m1, "model_2": m2}[winner] == a_model)
            out.append(
                (
                    Judgment(
                        pid,
                        sides[0],
                        sides[1],
                        p_a,
                        "a" if shown_first == a_model else "b",
                        criterion=judge_field[1] if len(judge_field) > 1 else "",
                        where=f"{where} (game {game})",
                    ),
                    judge_field[0],
                )
            )
    return out


def _answer_length(answers: dict | None, model: str, qid: str, turn: int, where: str) -> int | None:
    if answers is None:
        return None
    found = answers.get((model, qid))
    if found is None:
        raise UserError(
            f"{where}: --answers has no answer of model {model!r} to question {qid}; give that model's "
            "answer file (FastChat's model_answer/MODEL.jsonl)"
        )
    turns, at = found
    if len(turns) < turn:
        raise UserError(f"{where}: the answer of {model!r} to question {qid} ({at}) has {len(turns)} turn(s), not turn {turn}")
    return words(turns[turn - 1])
