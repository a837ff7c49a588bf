"""nanolm feedback bias: the judge-bias report on labels made elsewhere, checked against judges whose biases are
planted here with known sizes (in logits) and written in each format the command reads; the report must recover
each planted size within its 95% interval, and the intervals must cover the planted sizes in at least 90% of 50
seeded draws. Numbers are checked against references computed here: scikit-learn's logistic regression, scipy's
Wilson interval, and closed forms."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nanolm.alignment.judgment_bias import bias_report, fit_logistic
from nanolm.alignment.judgments import Judgment, JudgmentSet, Side, read_judgments
from nanolm.errors import UserError

JUDGE = "judge-m"  # the judge's own model in the planted data
OTHER = "other-m"
PLANTED = {"position": 0.6, "length": 0.08, "own": 0.9, "agreement": 1.2}
TRUTH = 2.0  # logits for the correct answer (not a bias: what a good judge does)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def text(n: int, seed: int) -> str:
    """An answer of n words (distinct texts for distinct seeds)."""
    return " ".join(f"w{seed}x{i}" for i in range(n))


def plant(
    seed: int,
    n: int = 300,
    position: float = PLANTED["position"],
    length: float = PLANTED["length"],
    own: float = PLANTED["own"],
    agreement: float = PLANTED["agreement"],
    truth: float = TRUTH,
    equal_share: float = 0.6,
) -> dict:
    """n pairs judged in both orders by a judge choosing A or B (no ties) with
    logit P(first wins) = position + length·Δwords + truth·Δcorrect + agreement·Δagrees + own·Δown, Δ: first − second.
    Half the answers are correct; equal_share of the pairs are equally correct; one answer in three pairs agrees
    with the user's opinion (a), one in three (b), else neither; a and b are by different models, one the judge's."""
    rng = np.random.default_rng(seed)
    la, lb = rng.integers(3, 40, n), rng.integers(3, 40, n)
    ca = rng.random(n) < 0.5
    cb = np.where(rng.random(n) < equal_share, ca, ~ca)
    opinion = rng.integers(0, 3, n)  # 0: a agrees, 1: b agrees, 2: neither
    a_is_judge = rng.random(n) < 0.5
    eta_a = (
        length * (la - lb)
        + truth * (ca.astype(int) - cb.astype(int))
        + agreement * ((opinion == 0).astype(int) - (opinion == 1).astype(int))
        + own * (a_is_judge.astype(int) * 2 - 1)
    )
    a_first_wins = rng.random(n) < sigmoid(position + eta_a)  # a shown first
    b_first_wins = rng.random(n) < sigmoid(position - eta_a)  # b shown first
    return {
        "n": n,
        "la": la,
        "lb": lb,
        "ca": ca,
        "cb": cb,
        "opinion": opinion,
        "a_is_judge": a_is_judge,
        "wins": {"a": a_first_wins, "b": b_first_wins},
        "seed": seed,
    }


def pairs_lines(d: dict, orders=("a", "b"), truth=True) -> list[dict]:
    """The planted judgments in the generic format, one line per pair and order."""
    out = []
    for order in orders:
        for i in range(d["n"]):
            row = {
                "pair_id": f"p{i}",
                "answer_a": text(int(d["la"][i]), 2 * i),
                "answer_b": text(int(d["lb"][i]), 2 * i + 1),
                "first": order,
                "choice": "A" if d["wins"][order][i] else "B",
                "user_opinion": ("a", "b", "neither")[d["opinion"][i]],
                "model_a": JUDGE if d["a_is_judge"][i] else OTHER,
                "model_b": OTHER if d["a_is_judge"][i] else JUDGE,
                "judge": JUDGE,
            }
            if truth:
                row["correct"] = {(True, True): "both", (True, False): "a", (False, True): "b", (False, False): "neither"}[
                    (bool(d["ca"][i]), bool(d["cb"][i]))
                ]
            out.append(row)
    return out


def trl_lines(d: dict) -> list[dict]:
    """The same judgments as TRL preference rows with chosen_first and nanolm's meta fields."""
    out = []
    for order in ("a", "b"):
        for i in range(d["n"]):
            a_won = bool(d["wins"][order][i]) == (order == "a")
            meta = [
                {
                    "correct": bool(d["ca"][i]),
                    "agrees_with_user": bool(d["opinion"][i] == 0),
                    "source": JUDGE if d["a_is_judge"][i] else OTHER,
                },
                {
                    "correct": bool(d["cb"][i]),
                    "agrees_with_user": bool(d["opinion"][i] == 1),
                    "source": OTHER if d["a_is_judge"][i] else JUDGE,
                },
            ]
            texts = [text(int(d["la"][i]), 2 * i), text(int(d["lb"][i]), 2 * i + 1)]
            c, r = (0, 1) if a_won else (1, 0)
            out.append(
                {
                    "prompt": f"question {i}",
                    "chosen": texts[c],
                    "rejected": texts[r],
                    "chosen_first": (c == 0) == (order == "a"),
                    "judge": JUDGE,
                    "chosen_meta": meta[c],
                    "rejected_meta": meta[r],
                }
            )
    return out


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def covers(estimate, value: float) -> bool:
    return estimate.ci[0] <= value <= estimate.ci[1]


def recovered(report) -> dict:
    return {
        "position": report.position.offset,
        "length": report.length.bonus,
        "own": report.self_preference.bonus,
        "agreement": report.length.agreement,
    }


# ---- the planted judge, in each format --------------------------------------------------------------------------


def test_the_generic_format_recovers_each_planted_bias(tmp_path):
    write_jsonl(tmp_path / "j.jsonl", pairs_lines(plant(1, n=400)))
    js = read_judgments(tmp_path / "j.jsonl")
    assert js.format == "pairs" and js.judge == JUDGE and len(js.judgments) == 800
    r = bias_report(js)
    for key, estimate in recovered(r).items():
        assert covers(estimate, PLANTED[key]), (key, estimate)
        assert estimate.ci[0] > 0, (key, estimate)  # and told apart from no bias
    assert r.length.method == "equal truth" and "correct" not in r.length.model.terms
    assert r.position.offset_method.startswith("conditional")
    assert [str(c).split(":")[0] for c in r.coverage if not c.measured] == []
    assert str(r.coverage[0]) == "position: measured on 400 of 400 pairs judged in both orders"


def test_trl_rows_with_both_orders_give_the_same_report(tmp_path):
    """The same planted judgments as TRL rows (chosen/rejected, chosen_first, nanolm's meta): answers are named a and
    b by their text, so the signs differ from the generic file's, and every number must come out the same."""
    d = plant(2, n=200)
    write_jsonl(tmp_path / "g.jsonl", pairs_lines(d))
    write_jsonl(tmp_path / "t.jsonl", trl_lines(d))
    generic, trl = bias_report(read_judgments(tmp_path / "g.jsonl")), bias_report(read_judgments(tmp_path / "t.jsonl"))
    assert read_judgments(tmp_path / "t.jsonl").format == "trl"
    for key, estimate in recovered(trl).items():
        other = recovered(generic)[key]
        assert estimate.value == pytest.approx(other.value, abs=1e-7) and estimate.ci == pytest.approx(other.ci, abs=1e-7)
    assert trl.position.consistency == generic.position.consistency and trl.ground_truth == generic.ground_truth


def mt_bench_files(
    tmp_path,
    seed: int,
    n_questions: int = 150,
    position: float = PLANTED["position"],
    length: float = PLANTED["length"],
    own: float = PLANTED["own"],
):
    """A planted gpt-4 judge in FastChat's pairwise format: every pair of three models on each question, two games
    per row (model_1 first, then model_2 first), the answer files holding texts of the planted lengths."""
    rng = np.random.default_rng(seed)
    models = ["gpt-4", "claude-v1", "vicuna-13b"]
    lengths = {(m, q): int(rng.integers(5, 60)) for m in models for q in range(n_questions)}
    (tmp_path / "model_answer").mkdir()
    for m in models:
        write_jsonl(
            tmp_path / "model_answer" / f"{m}.jsonl",
            [
                {
                    "question_id": q + 81,
                    "answer_id": f"{m}{q}",
                    "model_id": m,
                    "choices": [{"index": 0, "turns": [text(lengths[(m, q)], q), "turn two"]}],
                }
                for q in range(n_questions)
            ],
        )
    rows = []
    for q in range(n_questions):
        for i, x in enumerate(models):
            for y in models[i + 1 :]:
                m1, m2 = (x, y) if rng.random() < 0.5 else (y, x)
                eta1 = length * (lengths[(m1, q)] - lengths[(m2, q)]) + own * ((m1 == "gpt-4") - (m2 == "gpt-4"))
                g1 = "model_1" if rng.random() < sigmoid(position + eta1) else "model_2"  # model_1 shown first
                g2 = "model_2" if rng.random() < sigmoid(position - eta1) else "model_1"  # model_2 shown first
                rows.append(
                    {
                        "question_id": q + 81,
                        "model_1": m1,
                        "model_2": m2,
                        "g1_winner": g1,
                        "g2_winner": g2,
                        "judge": ["gpt-4", "pair-v2"],
                        "g1_user_prompt": "...",
                        "g1_judgment": "[[A]]",
                        "g2_user_prompt": "...",
                        "g2_judgment": "[[B]]",
                        "turn": 1,
                        "tstamp": 0.0,
                    }
                )
    rows[0]["g2_winner"] = "error"  # the judge's reply had no verdict
    rows.append(
        {
            "question_id": 81,
            "model_1": "gpt-4",
            "model_2": "claude-v1",
            "g1_winner": "tie",
            "g2_winner": "tie",
            "judge": ["gpt-4", "single-v1"],
            "m1_score": 8,
            "m2_score": 8,
            "tstamp": 0.0,
        }
    )
    write_jsonl(tmp_path / "gpt-4_pair.jsonl", rows)
    return tmp_path / "gpt-4_pair.jsonl", tmp_path / "model_answer"


def test_mt_bench_judgments_recover_position_length_and_self_preference(tmp_path):
    path, answers = mt_bench_files(tmp_path, seed=3)
    js = read_judgments(path, answers=[answers])
    assert js.format == "mt-bench" and js.judge == "gpt-4" and js.judge_model == "gpt-4"
    assert js.left_out == {"games whose winner is 'error'": 1, "rows graded one answer at a time (m1_score): no order": 1}
    r = bias_report(js)
    got = recovered(r)
    for key in ("position", "length", "own"):
        assert covers(got[key], PLANTED[key]) and got[key].ci[0] > 0, (key, got[key])
    assert got["agreement"] is None and r.length.method == "length-controlled"
    assert r.n_pairs == 450 and r.n_judgments == 899
    said = {c.measure: str(c) for c in r.coverage}
    assert said["agreement with the truth"].startswith("agreement with the truth: not measurable: 0 of")
    assert said["position"] == "position: measured on 449 of 450 pairs judged in both orders"  # one game an error
    assert "left out: 1 games whose winner is 'error'" in r.notes
    # without the answer files there are no lengths: said so, with the counts
    bare = bias_report(read_judgments(path))
    assert str(bare.coverage[1]) == (
        "length: not measurable: 0 of 899 judgments with both answers' lengths (give --answers (FastChat's model_answer files))"
    )
    # the self-preference is still seen, but smaller: the length, left out of the model, moves the choices too, and a
    # logistic model's slopes shrink when a term that matters is left out (they are not collapsible)
    assert math.isnan(bare.length.bonus.value) and bare.self_preference.bonus.ci[0] > 0
    assert bare.self_preference.bonus.value < got["own"].value


def test_the_mt_bench_reader_on_a_small_file_by_hand(tmp_path):
    """Two matches as FastChat writes them: game 1 shows model_1's answer first, game 2 model_2's; the winners name
    models. The pair's answers are named a, b in sorted order of the models: (alpaca, gpt-3.5)."""
    write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"question_id": 81, "model_id": "gpt-3.5", "choices": [{"index": 0, "turns": ["one two three", "four five"]}]},
            {"question_id": 81, "model_id": "alpaca", "choices": [{"index": 0, "turns": ["one", "two three four five six"]}]},
        ],
    )
    write_jsonl(
        tmp_path / "j.jsonl",
        [
            {
                "question_id": 81,
                "model_1": "gpt-3.5",
                "model_2": "alpaca",
                "g1_winner": "model_1",
                "g2_winner": "model_1",
                "judge": ["gpt-4", "pair-v2"],
                "turn": 1,
            },
            {
                "question_id": 81,
                "model_1": "gpt-3.5",
                "model_2": "alpaca",
                "g1_winner": "tie",
                "g2_winner": "model_2",
                "judge": ["gpt-4", "pair-v2-multi-turn"],
                "turn": 2,
            },
        ],
    )
    js = read_judgments(tmp_path / "j.jsonl", answers=[tmp_path / "answers.jsonl"])
    got = [(j.pair_id, j.first, j.p_a, j.a.length, j.b.length, j.a.model, j.criterion) for j in js.judgments]
    assert got == [
        ("q81-turn1-alpaca-vs-gpt-3.5", "b", 0.0, 1, 3, "alpaca", "pair-v2"),  # gpt-3.5 first, won
        ("q81-turn1-alpaca-vs-gpt-3.5", "a", 0.0, 1, 3, "alpaca", "pair-v2"),  # alpaca first, gpt-3.5 won
        ("q81-turn2-alpaca-vs-gpt-3.5", "b", 0.5, 5, 2, "alpaca", "pair-v2-multi-turn"),
        ("q81-turn2-alpaca-vs-gpt-3.5", "a", 1.0, 5, 2, "alpaca", "pair-v2-multi-turn"),
    ]
    r = bias_report(js)
    # turn 1: consistent (gpt-3.5 both times); turn 2: a tie with gpt-3.5 first, alpaca won when first
    assert (r.position.consistency.k, r.position.consistency.n) == (1, 2)
    assert r.self_preference is None and r.judge == "gpt-4"


def nanolm_rows(d: dict) -> list[dict]:
    """The planted judge as nanolm label rows: probabilities rather than choices, both orders averaged,
    p_ab = σ(δ + η), p_ba = σ(δ − η), η the planted merit of a (a soft judge: no sampling)."""
    from nanolm.alignment.labelling import winner

    rows = []
    for i in range(d["n"]):
        eta = d["eta"][i]
        p_ab, p_ba = sigmoid(d["delta"] + eta), sigmoid(d["delta"] - eta)
        p_a = (p_ab + 1 - p_ba) / 2
        a = {
            "text": text(int(d["la"][i]), 2 * i),
            "meta": {
                "correct": bool(d["ca"][i]),
                "agrees_with_user": bool(d["opinion"][i] == 0),
                "length": int(d["la"][i]),
                "source": JUDGE if d["a_is_judge"][i] else OTHER,
            },
        }
        b = {
            "text": text(int(d["lb"][i]), 2 * i + 1),
            "meta": {
                "correct": bool(d["cb"][i]),
                "agrees_with_user": bool(d["opinion"][i] == 1),
                "length": int(d["lb"][i]),
                "source": OTHER if d["a_is_judge"][i] else JUDGE,
            },
        }
        chosen, rejected = (a, b) if p_a >= 0.5 else (b, a)
        rows.append(
            {
                "prompt": f"q{i}",
                "chosen": chosen["text"],
                "rejected": rejected["text"],
                "label_prob": float(max(p_a, 1 - p_a)),
                "principle": "correct",
                "consistent": {"first": "second", "second": "first", "tie": "tie"}[winner(p_ab)] == winner(p_ba),
                "judge": f"likelihood:{JUDGE}",
                "pair_id": f"p{i}",
                "chosen_meta": chosen["meta"],
                "rejected_meta": rejected["meta"],
            }
        )
    return rows


def soft_plant(seed: int, n: int = 200, delta: float = 0.0) -> dict:
    d = plant(seed, n=n)
    d["eta"] = (
        PLANTED["length"] * (d["la"] - d["lb"])
        + TRUTH * (d["ca"].astype(int) - d["cb"].astype(int))
        + PLANTED["agreement"] * ((d["opinion"] == 0).astype(int) - (d["opinion"] == 1).astype(int))
        + PLANTED["own"] * (d["a_is_judge"].astype(int) * 2 - 1)
    )
    d["delta"] = delta
    return d


def test_nanolm_label_rows_give_the_planted_sizes_and_no_position_offset(tmp_path):
    """Without a position term the average of the two orders is σ(η) itself: the logistic model recovers the planted
    slopes exactly. The rows keep only whether the orders agreed: consistency is measured, the offset is not."""
    d = soft_plant(4)
    write_jsonl(tmp_path / "l.jsonl", nanolm_rows(d))
    js = read_judgments(tmp_path / "l.jsonl")
    assert js.format == "nanolm" and js.judge_model == JUDGE
    r = bias_report(js)
    for key in ("length", "own", "agreement"):
        assert recovered(r)[key].value == pytest.approx(PLANTED[key], abs=1e-5), key
    assert math.isnan(r.position.offset.value) and r.position.consistency.k == r.position.consistency.n == 200
    assert str(r.coverage[0]) == (
        "position: measured on 200 of 200 pairs judged in both orders (the label rows keep "
        "the two orders averaged: consistency only, no offset)"
    )
    # with a position term, consistency is |η| > δ, counted here from the planted merits
    d = soft_plant(4, delta=1.5)
    write_jsonl(tmp_path / "l2.jsonl", nanolm_rows(d))
    r = bias_report(read_judgments(tmp_path / "l2.jsonl"))
    assert r.position.consistency.k == int(np.sum(np.abs(d["eta"]) > 1.5))


def test_labels_from_nanolms_own_planted_judge_read_back(tmp_path):
    """nanolm feedback label's rows, from its planted judge (no position term, no noise) under the rule 'correct':
    the length and agreement bonuses it planted come back exactly."""
    from nanolm.alignment.constitution import Constitution, Principle
    from nanolm.alignment.judges import PlantedBiasJudge, RuleJudge
    from nanolm.alignment.labelling import label, label_rows, write_labels
    from nanolm.alignment.pairs import build_pairs

    judge = PlantedBiasJudge(RuleJudge(), 0.0, 0.25, 1.5)
    labelling = label(build_pairs(None, 120, seed=3).pairs, judge, Constitution((Principle("correct", "?", "correct"),), "t"))
    write_labels(tmp_path / "l.jsonl", label_rows(labelling))
    r = bias_report(read_judgments(tmp_path / "l.jsonl"))
    assert r.length.method == "equal truth"
    assert r.length.bonus.value == pytest.approx(0.25, abs=1e-6) and r.length.agreement.value == pytest.approx(1.5, abs=1e-6)
    assert r.self_preference is None and r.judge.startswith("planted(")


def test_the_intervals_cover_the_planted_sizes_in_50_draws():
    """Each planted size inside its 95% interval in at least 45 of 50 seeded draws (300 pairs, both orders)."""
    hits = dict.fromkeys(PLANTED, 0)
    for seed in range(50):
        d = plant(1000 + seed)
        js = JudgmentSet([judgment(row, k) for k, row in enumerate(pairs_lines(d))], "pairs", "", JUDGE, JUDGE)
        for key, estimate in recovered(bias_report(js)).items():
            hits[key] += covers(estimate, PLANTED[key])
    assert all(h >= 45 for h in hits.values()), hits


def judgment(row: dict, k: int) -> Judgment:
    """A generic-format line as the reader makes it (without a file: the coverage draws stay fast)."""
    from nanolm.alignment.judgments import _pairs_row

    return _pairs_row(row, f"line {k}")[0]


# ---- what cannot be measured, and a judge that reads the truth only --------------------------------------------


def test_one_order_only_says_position_is_not_measurable(tmp_path):
    d = plant(5, n=200)
    write_jsonl(tmp_path / "j.jsonl", pairs_lines(d, orders=("a",), truth=False))
    r = bias_report(read_judgments(tmp_path / "j.jsonl"))
    said = {c.measure: str(c) for c in r.coverage}
    assert said["position"] == (
        "position: not measurable: 0 of 200 pairs judged in both orders (each pair was judged in one order only)"
    )
    assert said["agreement with the truth"].startswith("agreement with the truth: not measurable: 0 of 200 verdicts")
    assert math.isnan(r.position.offset.value) and r.position.consistency.n == 0
    # a was always shown first: the model's position term is an intercept, a's merit and the position together, kept
    # as a nuisance and not reported as the position bias
    assert r.length.method == "length-controlled" and covers(r.length.bonus, PLANTED["length"])
    assert r.ground_truth.n == 0


def truth_only(seed: int, n: int = 400, flip: bool = True) -> list[dict]:
    """A judge that reads correctness alone: it picks the correct answer with probability 0.9, and between equally
    correct answers flips a coin (flip) or says tie. The correct answers are the longer ones and the answers that
    agree with the user are the wrong ones, so a report that did not hold the truth equal would see both biases."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        ca, cb = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        la = int(rng.integers(20, 40) if ca else rng.integers(3, 20))
        lb = int(rng.integers(20, 40) if cb else rng.integers(3, 20))
        opinion = "a" if not ca and cb else "b" if ca and not cb else "neither"
        if rng.random() < 0.3:
            opinion = "a" if opinion == "b" else "b"
        for first in ("a", "b"):
            if ca == cb:
                choice = ("A" if rng.random() < 0.5 else "B") if flip else "tie"
            else:
                first_correct = ca if first == "a" else cb
                choice = "A" if (rng.random() < 0.9) == first_correct else "B"
            rows.append(
                {
                    "pair_id": i,
                    "length_a": la,
                    "length_b": lb,
                    "first": first,
                    "choice": choice,
                    "correct": {(True, True): "both", (True, False): "a", (False, True): "b", (False, False): "neither"}[
                        (ca, cb)
                    ],
                    "user_opinion": opinion,
                }
            )
    return rows


def test_a_judge_that_reads_the_truth_only_shows_no_length_or_agreement_bias(tmp_path):
    write_jsonl(tmp_path / "tie.jsonl", truth_only(6, flip=False))
    r = bias_report(read_judgments(tmp_path / "tie.jsonl"))
    assert r.length.method == "equal truth"
    assert r.length.bonus.value == pytest.approx(0, abs=1e-9) and r.length.agreement.value == pytest.approx(0, abs=1e-9)
    assert r.length.longer.wins == r.length.longer.losses == 0
    write_jsonl(tmp_path / "coin.jsonl", truth_only(7))
    js = read_judgments(tmp_path / "coin.jsonl")
    r = bias_report(js)
    assert covers(r.length.bonus, 0) and covers(r.length.agreement, 0) and covers(r.position.offset, 0)
    assert r.ground_truth.value > 0.75
    # the length-controlled model, correctness a term, holds it equal too; left out, correctness passes for length
    controlled = bias_report(js, length_method="length-controlled")
    assert covers(controlled.length.bonus, 0) and covers(controlled.length.agreement, 0)
    assert controlled.length.model.terms["correct"].ci[0] > 1
    no_truth = bias_report(
        JudgmentSet(
            [
                Judgment(
                    j.pair_id,
                    Side(j.a.length, None, j.a.agrees_with_user),
                    Side(j.b.length, None, j.b.agrees_with_user),
                    j.p_a,
                    j.first,
                )
                for j in js.judgments
            ],
            "pairs",
            "",
            "x",
            None,
        )
    )
    assert no_truth.length.bonus.ci[0] > 0 and no_truth.length.agreement.ci[1] < 0


# ---- the statistics against references ---------------------------------------------------------------------------


def test_the_logistic_fit_is_scikit_learns():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(8)
    x = np.column_stack([rng.choice([-1.0, 1.0], 500), rng.integers(-20, 20, 500), rng.integers(-1, 2, 500)])
    y = (rng.random(500) < sigmoid(x @ np.array([0.5, 0.1, -1.0]))).astype(float)
    beta, cov, g = fit_logistic(x, y, np.arange(500) // 2)
    ref = LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-10, max_iter=10_000).fit(x, y).coef_[0]
    assert beta == pytest.approx(ref, abs=1e-4) and g == 250
    # one judgment per cluster: the sandwich is White's HC0 times n / (n - 1)
    beta, cov, _ = fit_logistic(x, y, np.arange(500))
    mu = sigmoid(x @ beta)
    bread = np.linalg.inv((x.T * (mu * (1 - mu))) @ x)
    meat = (x * (y - mu)[:, None]).T @ (x * (y - mu)[:, None])
    assert cov == pytest.approx(bread @ meat @ bread * 500 / 499, rel=1e-4)


def test_the_conditional_position_offset_by_hand():
    """Choices: 3 pairs where the first shown won both orders, 1 where it lost both, 2 consistent. f = 3/4, offset
    logit(3/4) / 2 = ln 3 / 2, its interval the Wilson interval of 3 of 4 (scipy's) carried through."""
    from scipy.stats import binomtest

    orders = [(1, 0)] * 3 + [(0, 1)] + [(1, 1), (0, 0)]  # (p_a with a first, p_a with b first)
    js = [Judgment(f"p{i}", Side(5), Side(6), p, first) for i, ps in enumerate(orders) for p, first in zip(ps, "ab")]
    r = bias_report(js)
    lo, hi = binomtest(3, 4).proportion_ci(method="wilson")
    assert r.position.offset.value == pytest.approx(math.log(3) / 2)
    assert r.position.offset.ci == pytest.approx((math.log(lo / (1 - lo)) / 2, math.log(hi / (1 - hi)) / 2))
    assert (r.position.consistency.k, r.position.consistency.n) == (2, 6)


# ---- the command, and bad input ---------------------------------------------------------------------------------


def test_the_command_prints_saves_and_says_what_it_could_not_measure(cli, tmp_path):
    d = plant(9, n=120)
    write_jsonl(tmp_path / "j.jsonl", pairs_lines(d, truth=False))
    r = cli("feedback", "bias", str(tmp_path / "j.jsonl"), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert json.loads((tmp_path / "j.bias.json").read_text()) == out
    assert out["format"] == "pairs" and out["judgments"] == 240 and out["report"]["length"]["method"] == "length-controlled"
    table = cli("feedback", "bias", str(tmp_path / "j.jsonl"), cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "agreement with the truth: not measurable: 0 of 120 verdicts" in table.stdout
    assert "logits per word" in table.stdout and "logits for the judge's own model's answer" in table.stdout


def test_the_report_is_shown_by_nanolm_report_when_the_judgments_sit_in_a_run(cli, short_run):
    d = plant(10, n=60)
    write_jsonl(short_run / "feedback" / "api-judge.jsonl", pairs_lines(d))
    r = cli("feedback", "bias", str(short_run / "feedback" / "api-judge.jsonl"), "--json", "--report", cwd=short_run)
    assert r.returncode == 0, r.stderr
    saved = json.loads(r.stdout)["report"]
    page = cli("report", str(short_run), "--json", cwd=short_run)
    report = json.loads(page.stdout)
    assert report["problems"] == []
    section = next(s for s in report["sections"] if s["key"] == "feedback")
    biases = next(t for t in section["tables"] if "api-judge" in t["key"] and t["key"].endswith("biases"))
    offset = next(row for row in biases["rows"] if row[0].startswith("position offset"))
    assert offset[2] == saved["position"]["offset"]["value"]
    own = next(row for row in biases["rows"] if row[0].startswith("self-preference, logits"))
    assert own[2] == saved["self_preference"]["bonus"]["value"]
    assert any("position: measured on 60 of 60 pairs" in line for line in section["lines"])
    labels = next(t for t in section["tables"] if t["key"] == "labels")
    assert any(row[0].endswith("api-judge.jsonl") and row[1] == "(judgments: see the bias report)" for row in labels["rows"])


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    from nanolm.config import make_config
    from nanolm.train import train

    runs = tmp_path_factory.mktemp("bias") / "runs"
    cfg = make_config(
        overrides=[
            "n_layer=1",
            "n_head=2",
            "d_model=16",
            "block_size=16",
            "batch_size=4",
            "corpus_lines=500",
            "eval_batches=1",
            "warmup_steps=1",
            "steps=2",
            f"runs_dir={runs}",
        ],
        name="bias",
    )
    run = train(cfg, progress=False).run_dir
    (run / "feedback").mkdir()
    return run


GOOD = {"pair_id": "p1", "answer_a": "x y", "answer_b": "z", "first": "a", "choice": "A"}


@pytest.mark.parametrize(
    "lines, message",
    [
        ([GOOD, "{oops"], "j.jsonl:2: not valid JSON"),
        ([GOOD, {k: v for k, v in GOOD.items() if k != "first"}], "j.jsonl:2: missing field 'first'"),
        ([GOOD, {**GOOD, "choice": "C"}], "j.jsonl:2: 'choice' is \"C\", not one of A, B, tie"),
        ([GOOD, {**GOOD, "answer_b": "w"}], "j.jsonl:2: pair id 'p1' was seen at 1 with other answers"),
        ([GOOD, {**GOOD, "p_first": 1.5}], "'p_first' must be a probability in [0, 1]"),
        (
            [
                {
                    "question_id": 1,
                    "model_1": "x",
                    "model_2": "y",
                    "g1_winner": "model_3",
                    "g2_winner": "tie",
                    "judge": ["j", "p"],
                    "turn": 1,
                }
            ],
            "j.jsonl:1: 'g1_winner' is \"model_3\", not one of model_1, model_2, tie, error",
        ),
        (
            [{"question_id": 1, "model_1": "x", "model_2": "y", "g1_winner": "tie", "g2_winner": "tie", "judge": ["j", "p"]}],
            "j.jsonl:1: missing field 'turn'",
        ),
        ([{"prompt": "q", "chosen": "a", "rejected": "b", "chosen_first": "yes"}], "'chosen_first' must be true or false"),
        ([{"x": 1}], "cannot tell the format"),
    ],
)
def test_bad_judgments_are_one_line_exit_2_and_write_nothing(cli, tmp_path, lines, message):
    (tmp_path / "j.jsonl").write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    r = cli("feedback", "bias", str(tmp_path / "j.jsonl"), cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "j.bias.json").exists()


def test_an_answers_file_without_a_named_answer_is_refused(cli, tmp_path):
    row = {
        "question_id": 81,
        "model_1": "gpt-3.5",
        "model_2": "alpaca",
        "g1_winner": "tie",
        "g2_winner": "tie",
        "judge": ["gpt-4", "pair-v2"],
        "turn": 2,
    }
    write_jsonl(tmp_path / "j.jsonl", [row])
    write_jsonl(tmp_path / "a.jsonl", [{"question_id": 81, "model_id": "gpt-3.5", "choices": [{"turns": ["a", "b"]}]}])
    for answers, message in [
        (
            [{"question_id": 82, "model_id": "alpaca", "choices": [{"turns": ["a", "b"]}]}],
            "no answer of model 'alpaca' to question 81",
        ),
        ([{"question_id": 81, "model_id": "alpaca", "choices": [{"turns": ["a"]}]}], "has 1 turn(s), not turn 2"),
    ]:
        write_jsonl(tmp_path / "b.jsonl", answers)
        r = cli(
            "feedback",
            "bias",
            str(tmp_path / "j.jsonl"),
            "--answers",
            str(tmp_path / "a.jsonl"),
            "--answers",
            str(tmp_path / "b.jsonl"),
            cwd=tmp_path,
        )
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "j.bias.json").exists()


def test_several_judges_need_one_picked():
    rows = [Judgment("p", Side(1), Side(2), 1.0, "a")]
    with pytest.raises(UserError) as e:
        from nanolm.alignment.judgments import _one_judge

        _one_judge([(rows[0], "x"), (rows[0], "y")], "pairs", __import__("pathlib").Path("f.jsonl"), None, {})
    assert "judgments by 2 judges (x, y); pick one with --judge NAME" in str(e.value)
