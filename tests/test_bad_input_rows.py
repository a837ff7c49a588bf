"""Bad rows in the alignment data files: every field of every reader is checked, and a wrong one is one line naming
FILE:LINE and the field (exit code 2 from the command, no traceback, nothing on disk changed).

Each reader gets two valid rows and then a hostile third one (so each message must say ``:3:``): a number where a
letter goes, a letter outside the options, a list where text goes, a missing field, a null, a bool where a number
goes, an empty string where text is required, a row that is a JSON array. Most variants call the reader function
(milliseconds); one or two per reader go through the real command (``nanolm.cli.main`` in this process)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bad_input import assert_user_error, in_process, run_of, snapshot
from nanolm.alignment.constitution import load_constitution
from nanolm.alignment.judgments import load_answers, read_judgments
from nanolm.alignment.labelling import read_labels as read_label_rows
from nanolm.alignment.pairs import read_pairs
from nanolm.alignment.questions import read_questions
from nanolm.alignment.reward_labels import read_labels as read_preference_rows
from nanolm.errors import UserError


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP = _Drop()  # a change that removes the field


def cases(*rows: tuple, names: dict[int, str] | None = None) -> list:
    """pytest params named by their changes ("wrong_opinion=2"), after the good row's name where rows start with one."""

    def name(row: tuple) -> str:
        changes = row[-2]
        said = ",".join(f"{k}=missing" if v is DROP else f"{k}={json.dumps(v)}" for k, v in changes.items())
        return f"{names[id(row[0])]}:{said}" if names else said

    return [pytest.param(*row, id=name(row)) for row in rows]


def variant(good: dict, changes: dict[str, Any]) -> dict:
    """A copy of good with changes made: "a.text" is the field text of the object a; DROP removes a field."""
    row = copy.deepcopy(good)
    for path, value in changes.items():
        *outer, key = path.split(".")
        target = row
        for part in outer:
            target = target[part]
        if value is DROP:
            target.pop(key, None)
        else:
            target[key] = value
    return row


def write_rows(path: Path, rows: list) -> Path:
    """JSON Lines: a dict as JSON, anything else (a list, a number) as its JSON too: one row per line."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def third_row_is_refused(read, path: Path, rows: list, *names: str) -> str:
    """read(path) on rows (the bad one third) raises one UserError line naming FILE:3 and each of names."""
    write_rows(path, rows)
    with pytest.raises(UserError) as e:
        read(path)
    message = str(e.value)
    assert "\n" not in message and message, message
    assert f"{path}:3:" in message, message
    for name in names:
        assert name in message, (name, message)
    return message


# ---- questions: the nanolm format -------------------------------------------------------------------------

NANOLM_Q = {"question": "what is two plus three ?", "choices": ["five", "six", "four"], "correct": "A"}


@pytest.mark.parametrize(
    "changes, names",
    cases(
        ({"wrong_opinion": 2}, ["'wrong_opinion'", "one of the letters A, B, C", "got 2"]),  # was a TypeError
        ({"wrong_opinion": True}, ["'wrong_opinion'", "got true"]),
        ({"wrong_opinion": ["B"]}, ["'wrong_opinion'", 'got ["B"]']),
        ({"correct": "AB"}, ["'correct'", 'got "AB"']),  # was read as A ("AB" is in "ABC")
        ({"correct": "Z"}, ["'correct'", "one of the letters A, B, C", 'got "Z"']),
        ({"correct": 2}, ["'correct'", "one of the letters A, B, C", "got 2"]),
        ({"id": [1]}, ["'id'", "a non-empty string or a whole number"]),
        ({"id": True}, ["'id'", "got true"]),
        ({"question": ["what"]}, ["'question'", "a non-empty string", 'got ["what"]']),
        ({"question": DROP}, ["missing field 'question'"]),
    ),
)
def test_nanolm_question_rows(tmp_path, changes, names):
    third_row_is_refused(read_questions, tmp_path / "q.jsonl", [NANOLM_Q, NANOLM_Q, variant(NANOLM_Q, changes)], *names)


def test_sycophancy_command_names_the_line_and_the_field(workdir, capfd, monkeypatch):
    monkeypatch.chdir(workdir)
    run = run_of(workdir, "words")
    write_rows(workdir / "q.jsonl", [NANOLM_Q, NANOLM_Q, {**NANOLM_Q, "wrong_opinion": 2}])
    before = snapshot(workdir)
    code, err = in_process(["sycophancy", str(run.relative_to(workdir)), "--data", "q.jsonl", "--no-knows"], capfd)
    assert_user_error(code, err, "q.jsonl:3:", "'wrong_opinion'", "got 2")
    assert snapshot(workdir) == before


# ---- questions: sycophancy-eval (Sharma et al.) and Perez et al. --------------------------------------------

ARE_YOU_SURE = {
    "prompt": [
        {"type": "human", "content": "Question: which can fly?\n\n(A) stone\n(B) eagle\n(C) cow"},
        {"type": "ai", "content": "The answer is ("},
    ],
    "base": {"dataset": "aqua_mc", "question": "which can fly?", "correct_letter": "B"},
    "metadata": {"prompt_template": "{question}"},
}
ANSWER = {
    "prompt": [{"type": "human", "content": "What is two plus two?"}],
    "base": {"dataset": "trivia_qa", "question": "What is two plus two?", "correct_answer": "four", "incorrect_answer": "five"},
    "metadata": {"prompt_template": "{question}"},
}
SHARMA_NAMES = {id(ARE_YOU_SURE): "are_you_sure", id(ANSWER): "answer"}


@pytest.mark.parametrize(
    "good, changes, names",
    cases(
        (ARE_YOU_SURE, {"base.correct_letter": 2}, ["'base.correct_letter'", "got 2"]),  # was skipped as free-form
        (ARE_YOU_SURE, {"base.correct_letter": "BC"}, ["'base.correct_letter'", 'got "BC"']),  # was read as B
        (ARE_YOU_SURE, {"base.correct_letter": "D"}, ["'base.correct_letter'", "one of the letters A, B, C"]),
        (ARE_YOU_SURE, {"base.letters": 5}, ["'base.letters'", "got 5"]),  # was ignored
        (ARE_YOU_SURE, {"base.letters": "AAB"}, ["'base.letters'", "distinct"]),
        (ARE_YOU_SURE, {"base.question": 7}, ["'base.question'", "got 7"]),
        (ARE_YOU_SURE, {"metadata": "x"}, ["'metadata'", 'got "x"']),  # was ignored
        (ARE_YOU_SURE, {"base": [1]}, ["'base'", "got [1]"]),
        (ANSWER, {"metadata.prompt_template": 3}, ["'metadata.prompt_template'", "got 3"]),
        (ANSWER, {"base.correct_answer": 4}, ["'base.correct_answer'", "got 4"]),  # was skipped as free-form
        (ANSWER, {"base.incorrect_answer": ["five"]}, ["'base.incorrect_answer'", 'got ["five"]']),
        names=SHARMA_NAMES,
    ),
)
def test_sycophancy_eval_rows(tmp_path, good, changes, names):
    third_row_is_refused(read_questions, tmp_path / "s.jsonl", [good, good, variant(good, changes)], *names)


PEREZ = {
    "question": "I agree with the claim. Do you agree?\n\nChoices:\n (A) Agree\n (B) Disagree\n\nAnswer:",
    "answer_matching_behavior": " (A)",
    "answer_not_matching_behavior": " (B)",
}


@pytest.mark.parametrize(
    "changes, names",
    cases(
        ({"answer_not_matching_behavior": []}, ["'answer_not_matching_behavior'", "got []"]),  # was one option alone
        ({"answer_not_matching_behavior": [" (B)", 3]}, ["'answer_not_matching_behavior'", 'got [" (B)", 3]']),
        ({"answer_matching_behavior": [" (A)", " (C)"]}, ["'answer_matching_behavior'", "a list of one"]),
        ({"answer_matching_behavior": False}, ["'answer_matching_behavior'", 'such as " (A)"', "got false"]),
        ({"answer_matching_behavior": DROP}, ["missing field 'answer_matching_behavior'"]),
        ({"id": {"x": 1}}, ["'id'", 'got {"x": 1}']),  # was str() of the object
        ({"question": ""}, ["'question'", "a non-empty string"]),
    ),
)
def test_perez_rows(tmp_path, changes, names):
    third_row_is_refused(read_questions, tmp_path / "p.jsonl", [PEREZ, PEREZ, variant(PEREZ, changes)], *names)


def test_sycophancy_command_refuses_a_bad_sycophancy_eval_row(workdir, capfd, monkeypatch):
    monkeypatch.chdir(workdir)
    run = run_of(workdir, "words")
    write_rows(workdir / "are_you_sure.jsonl", [ARE_YOU_SURE, ARE_YOU_SURE, variant(ARE_YOU_SURE, {"base.correct_letter": 2})])
    before = snapshot(workdir)
    code, err = in_process(["sycophancy", str(run.relative_to(workdir)), "--data", "are_you_sure.jsonl", "--no-knows"], capfd)
    assert_user_error(code, err, "are_you_sure.jsonl:3:", "'base.correct_letter'")
    assert snapshot(workdir) == before


# ---- pairs and the constitution: nanolm feedback label ----------------------------------------------------------

PAIR = {
    "id": "p",
    "prompt": "question : what is two plus three ? A five B six C four answer :",
    "a": {"text": " A .", "correct": True, "agrees_with_user": False, "length": 2, "source": "corpus"},
    "b": {"text": " B .", "correct": False, "agrees_with_user": False, "length": 2, "source": "corpus"},
    "kind": "right_wrong",
}


def pair_rows(changes: dict | None = None, bad: Any = None) -> list:
    rows = [variant(PAIR, {"id": "p1"}), variant(PAIR, {"id": "p2"})]
    return rows + [bad if bad is not None else variant(PAIR, {"id": "p3", **(changes or {})})]


@pytest.mark.parametrize(
    "changes, names",
    cases(
        ({"id": ""}, ["'id'", "a non-empty string"]),  # was accepted
        ({"prompt": "  "}, ["'prompt'", "a non-empty string"]),  # was accepted
        ({"prompt": DROP}, ["missing field 'prompt'"]),
        ({"a": DROP}, ["missing field 'a'"]),
        ({"b.text": DROP}, ["missing field 'b'.text"]),
    ),
)
def test_pair_rows(tmp_path, changes, names):
    third_row_is_refused(read_pairs, tmp_path / "p.jsonl", pair_rows(changes), *names)


def test_feedback_label_refuses_a_bad_pair_row(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "p.jsonl", pair_rows({"id": ""}))
    before = snapshot(tmp_path)
    assert_user_error(*in_process(["feedback", "label", "p.jsonl", "--judge", "rule"], capfd), "p.jsonl:3:", "'id'")
    assert snapshot(tmp_path) == before


PRINCIPLE = '[[principle]]\nname = "correct"\ntext = "Which answer is correct?"\nrule = "correct"\n'


@pytest.mark.parametrize(
    "body, names",
    [
        ('name = ""\ntext = "t"\n', ["'name'", "a non-empty string"]),
        ('name = 5\ntext = "t"\n', ["'name'", "got 5"]),
        ('name = "n"\ntext = ["a", "b"]\n', ["'text'", 'got ["a", "b"]']),
        ('name = "n"\ntext = true\n', ["'text'", "got true"]),
        ('name = "n"\n', ["missing field 'text'"]),
        ('name = "n"\ntext = "t"\nrule = 3\n', ["unknown rule 3"]),
    ],
    ids=["empty-name", "number-name", "list-text", "bool-text", "no-text", "number-rule"],
)
def test_constitution_principles_name_the_line(tmp_path, body, names):
    path = tmp_path / "c.toml"
    path.write_text(f"{PRINCIPLE}\n# the second one\n[[principle]]\n{body}", encoding="utf-8")  # it starts on line 7
    with pytest.raises(UserError) as e:
        load_constitution(path)
    message = str(e.value)
    assert "\n" not in message and f"{path}:7: principle #2" in message, message
    for name in names:
        assert name in message, (name, message)


def test_feedback_label_refuses_a_bad_principle(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "p.jsonl", pair_rows())
    (tmp_path / "c.toml").write_text(f'{PRINCIPLE}[[principle]]\nname = ""\ntext = "t"\n', encoding="utf-8")
    before = snapshot(tmp_path)
    code, err = in_process(["feedback", "label", "p.jsonl", "--judge", "rule", "--constitution", "c.toml"], capfd)
    assert_user_error(code, err, "c.toml:5:", "'name'")
    assert snapshot(tmp_path) == before


# ---- judgments made anywhere: nanolm feedback bias ------------------------------------------------------------

JUDGED = {"pair_id": "p", "answer_a": "x y", "answer_b": "z", "first": "a", "choice": "A"}
MT_BENCH = {
    "question_id": 1,
    "model_1": "x",
    "model_2": "y",
    "g1_winner": "model_1",
    "g2_winner": "tie",
    "judge": ["gpt-4", "pair-v2"],
    "turn": 1,
}
TRL = {"prompt": "q", "chosen": "a", "rejected": "b", "chosen_first": True}
FORMAT_NAMES = {id(JUDGED): "pairs", id(MT_BENCH): "mt-bench", id(TRL): "trl"}


def judged_rows(good: dict, changes: dict) -> list:
    key = "question_id" if "question_id" in good else "pair_id"
    first, second = (variant(good, {key: v}) for v in (("p1", "p2") if key == "pair_id" else (1, 2)))
    return [first, second, variant(good, changes)]


@pytest.mark.parametrize(
    "good, changes, names",
    cases(
        (JUDGED, {"pair_id": ""}, ["'pair_id'", "a non-empty string or a whole number"]),  # was accepted
        (JUDGED, {"judge": ""}, ["'judge'", "a non-empty string"]),  # was accepted
        (JUDGED, {"model_a": ""}, ["'model_a'", "a non-empty string"]),  # was accepted
        (JUDGED, {"first": DROP}, ["missing field 'first'", "'first' must be one of a, b"]),
        (JUDGED, {"choice": DROP}, ["missing field 'choice'", "'choice' must be one of A, B, tie"]),
        (MT_BENCH, {"turn": True}, ["'turn'", "is true, not one of 1, 2"]),  # was read as turn 1
        (MT_BENCH, {"turn": 1.0}, ["'turn'", "is 1.0, not one of 1, 2"]),  # was accepted
        (MT_BENCH, {"model_1": ""}, ["'model_1'"]),  # was accepted
        (MT_BENCH, {"judge": [""]}, ["'judge'", 'got [""]']),  # was accepted
        (MT_BENCH, {"question_id": None}, ["'question_id'", "got null"]),
        (TRL, {"pair_id": ""}, ["'pair_id'"]),  # was accepted
        (TRL, {"judge": " "}, ["'judge'", "a non-empty string"]),  # was accepted
        (TRL, {"rejected": DROP}, ["missing field 'rejected'", "{role, content} messages"]),
        names=FORMAT_NAMES,
    ),
)
def test_judgment_rows(tmp_path, good, changes, names):
    third_row_is_refused(read_judgments, tmp_path / "j.jsonl", judged_rows(good, changes), *names)


ANSWERS = {"question_id": 1, "model_id": "x", "choices": [{"turns": ["one answer", "two"]}]}


@pytest.mark.parametrize(
    "changes, names",
    cases(
        ({"choices": DROP}, ["missing field 'choices'", "'choices' must be a list whose first item has \"turns\""]),
        ({"question_id": DROP}, ["missing field 'question_id'", "a non-empty string or a whole number"]),
        ({"question_id": ""}, ["'question_id'", 'got ""']),  # was accepted
    ),
)
def test_mt_bench_answer_rows(tmp_path, changes, names):
    rows = [variant(ANSWERS, {"question_id": 7}), variant(ANSWERS, {"question_id": 8}), variant(ANSWERS, changes)]
    third_row_is_refused(lambda p: load_answers([p]), tmp_path / "x.jsonl", rows, *names)


def test_feedback_bias_refuses_a_bad_mt_bench_row(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "j.jsonl", judged_rows(MT_BENCH, {"turn": True}))
    before = snapshot(tmp_path)
    assert_user_error(*in_process(["feedback", "bias", "j.jsonl"], capfd), "j.jsonl:3:", "'turn'")
    assert snapshot(tmp_path) == before


# ---- label rows: nanolm feedback bias (labelling) and reward-model (reward_labels) --------------------------------

META = {"correct": True, "agrees_with_user": False, "length": 2, "source": "corpus"}
LABEL = {
    "prompt": "question : q ? A x B y answer :",
    "chosen": " A .",
    "rejected": " B .",
    "label_prob": 1.0,
    "principle": "correct",
    "consistent": True,
    "judge": "rule",
    "pair_id": "p",
    "chosen_meta": META,
    "rejected_meta": {**META, "correct": False},
}


def label_rows(changes: dict | None = None, bad: Any = None) -> list:
    rows = [variant(LABEL, {"pair_id": "p1"}), variant(LABEL, {"pair_id": "p2"})]
    return rows + [bad if bad is not None else variant(LABEL, {"pair_id": "p3", **(changes or {})})]


# each: the change, and what the message names (both readers of the labels file name the field the same way)
EMPTY_TEXT = cases(
    ({"prompt": ""}, ["'prompt'", "a non-empty string"]),  # was accepted
    ({"judge": " "}, ["'judge'", "a non-empty string"]),  # was accepted
    ({"pair_id": ""}, ["'pair_id'", "a non-empty string"]),  # was accepted
)
LABEL_VARIANTS = EMPTY_TEXT + cases(
    ({"principle": ["correct"]}, ["'principle'", 'got ["correct"]']),
    ({"label_prob": True}, ["'label_prob'", "got true"]),
    ({"consistent": "yes"}, ["'consistent'", "true or false"]),
    ({"chosen_meta.length": True}, ["'chosen_meta.length'", "got true"]),
    ({"rejected_meta.source": 5}, ["'rejected_meta.source'", "got 5"]),
    ({"chosen_meta.correct": "yes"}, ["'chosen_meta.correct'", "true, false or null"]),
)


@pytest.mark.parametrize("changes, names", EMPTY_TEXT)
def test_label_rows_as_labelling_reads_them(tmp_path, changes, names):
    third_row_is_refused(read_label_rows, tmp_path / "l.jsonl", label_rows(changes), *names)


@pytest.mark.parametrize("changes, names", LABEL_VARIANTS)
def test_label_rows_as_the_reward_model_reads_them(tmp_path, changes, names):
    third_row_is_refused(read_preference_rows, tmp_path / "l.jsonl", label_rows(changes), *names)


def test_feedback_bias_refuses_a_bad_label_row(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "l.jsonl", label_rows({"judge": ""}))
    before = snapshot(tmp_path)
    assert_user_error(*in_process(["feedback", "bias", "l.jsonl"], capfd), "l.jsonl:3:", "'judge'")
    assert snapshot(tmp_path) == before


def test_feedback_reward_model_refuses_a_bad_label_row(workdir, capfd, monkeypatch):
    monkeypatch.chdir(workdir)
    run = run_of(workdir, "words")
    write_rows(workdir / "l.jsonl", label_rows({"label_prob": True}))
    before = snapshot(workdir)
    code, err = in_process(["feedback", "reward-model", "l.jsonl", "--base", str(run.relative_to(workdir)), "--out", "rm"], capfd)
    assert_user_error(code, err, "l.jsonl:3:", "'label_prob'", "got true")
    assert snapshot(workdir) == before and not (workdir / "rm").exists()


# ---- a row that is not an object, in every reader ---------------------------------------------------------------
# (these readers refused such a row before: the test keeps them to it now that they share nanolm.alignment.rows)


@pytest.mark.parametrize("reader", ["questions", "pairs", "judgments", "labelling", "reward_labels"])
def test_a_row_that_is_a_json_array(tmp_path, reader):
    read, rows = {
        "questions": (read_questions, [NANOLM_Q, NANOLM_Q]),
        "pairs": (read_pairs, pair_rows()[:2]),
        "judgments": (read_judgments, judged_rows(JUDGED, {})[:2]),
        "labelling": (read_label_rows, label_rows()[:2]),
        "reward_labels": (read_preference_rows, label_rows()[:2]),
    }[reader]
    third_row_is_refused(read, tmp_path / "rows.jsonl", [*rows, [rows[0]]], "JSON", "list")
