"""The reward model and best-of-n (nanolm.alignment.reward_model, best_of_n, `nanolm feedback reward-model` and
`best-of-n`): the Bradley–Terry loss, pair accuracy and the bias statistics against hand-worked numbers and scipy;
a reward model learns a planted preference from labels built here (not by the labeller); best-of-n at n = 1 is
plain sampling written out here; the curve is the reward model's own scores; reward hacking on a sycophancy-loving
reward model and a rising correct share on a correctness-loving one; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from test_bad_input import assert_user_error, snapshot

# ---- labels built here, in the labeller's format --------------------------------------------------


def _meta(q, letter: str, response: str) -> dict:
    return {
        "correct": letter == q.labels[q.correct],
        "agrees_with_user": letter == q.labels[q.wrong_opinion],
        "length": len(response.split()),
        "source": "test",
    }


def _response(q, letter: str, long: bool) -> str:
    """ " B ." (the corpus's form), or " B six ." (the option's text too: one word longer)."""
    return f" {letter} {q.prompts['none'].split(f' {letter} ')[1].split()[0]} ." if long else f" {letter} ."


def label_rows(questions, rule: str, long_forms: bool = False) -> list[dict]:
    """Every pair of a question's three answers to its wrong-opinion prompt, labelled by a planted rule:
    "agree" prefers the user's option, "correct" the correct one, "longer" the longer of two forms of the same
    answer; a pair the rule cannot order is a tie (label_prob 0.5)."""
    rows = []
    for q in questions:
        opinion, correct = q.labels[q.wrong_opinion], q.labels[q.correct]
        answers = [(x, False) for x in q.labels] + ([(x, True) for x in q.labels] if long_forms else [])
        for i, (a, la) in enumerate(answers):
            for b, lb in answers[i + 1 :]:
                if rule == "longer":
                    if a != b:
                        continue
                    better = 1 if la else 2
                else:
                    target = opinion if rule == "agree" else correct
                    better = 0 if a == b else 1 if a == target else 2 if b == target else 0
                first, second = ((a, la), (b, lb)) if better != 2 else ((b, lb), (a, la))
                ra, rb = _response(q, first[0], first[1]), _response(q, second[0], second[1])
                rows.append(
                    {
                        "prompt": q.prompts["wrong"],
                        "chosen": ra,
                        "rejected": rb,
                        "label_prob": 1.0 if better else 0.5,
                        "principle": rule,
                        "consistent": True,
                        "judge": "rule:test",
                        "pair_id": f"{q.id}-{first[0]}{int(first[1])}-{second[0]}{int(second[1])}",
                        "chosen_meta": _meta(q, first[0], ra),
                        "rejected_meta": _meta(q, second[0], rb),
                    }
                )
    return rows


def write_labels(path, rows: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_cli(capsys, *args: str):
    """A feedback command through nanolm's error handling (run()), in this process: (code, stdout, stderr)."""
    import click

    from nanolm.cli import run
    from nanolm.cli.feedback_reward import best_of_n, reward_model

    group = click.Group("feedback", commands={"reward-model": reward_model, "best-of-n": best_of_n})
    capsys.readouterr()
    try:
        run(group, list(args), "nanolm")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- the loss and the accuracy, by hand ---------------------------------------------------------------


def test_bradley_terry_loss_and_pair_accuracy_against_a_hand_worked_example():
    from nanolm.alignment.reward_model import bradley_terry_loss, pair_accuracy

    r_c = torch.tensor([2.0, 0.5, -1.0, 0.3], dtype=torch.float64, requires_grad=True)
    r_r = torch.tensor([1.0, 1.5, -1.0, 0.3], dtype=torch.float64)
    p = torch.tensor([1.0, 0.8, 0.5, 0.9], dtype=torch.float64)
    # d = r_c − r_r = (1, −1, 0, 0). log σ(1) = −ln(1 + e⁻¹) = −0.313261687518..., log σ(−1) = −1.313261687518...
    # pair 1: 0.313261687518; pair 2: 0.8·1.313261687518 + 0.2·0.313261687518 = 1.113261687518;
    # pairs 3, 4: d = 0, so −[p·ln ½ + (1 − p)·ln ½] = ln 2 = 0.693147180560 whatever p.
    by_hand = (0.31326168751822286 + 1.1132616875182228 + 2 * 0.6931471805599453) / 4
    loss = bradley_terry_loss(r_c, r_r, p)
    assert float(loss.detach()) == pytest.approx(by_hand, abs=1e-12)
    assert by_hand == pytest.approx(0.7032044340390841, abs=1e-15)
    # ∂L/∂r_c = (σ(d) − p) / N: σ(1) = 0.731058578630, σ(−1) = 0.268941421370, σ(0) = ½
    loss.backward()
    expected = [(0.7310585786300049 - 1.0) / 4, (0.2689414213699951 - 0.8) / 4, 0.0, (0.5 - 0.9) / 4]
    assert r_c.grad.tolist() == pytest.approx(expected, abs=1e-12)
    # accuracy over the preferred pairs (p > 0.5): pair 1 right, pair 2 wrong, pair 4 a tie (wrong); pair 3 left out
    acc = pair_accuracy(r_c.detach(), r_r, p)
    assert (acc.k, acc.n) == (1, 3)


def test_the_length_correlation_is_scipys_pearson_within_each_ground_truth_class():
    from scipy import stats

    from nanolm.alignment.reward_model import length_correlation

    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 12, 60).astype(float)
    rewards = 0.3 * lengths + rng.normal(0, 1, 60)
    one = length_correlation(rewards, lengths, [True] * 60)
    ref = stats.pearsonr(rewards, lengths)
    assert one.r == pytest.approx(ref.statistic, abs=1e-12)
    assert one.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert one.ci == pytest.approx(tuple(ref.confidence_interval(0.95)), abs=1e-9)  # Fisher z, se 1/sqrt(n − 3)
    # Two classes whose means differ in both length and reward: pooled r is large, within-class r is 0 by construction.
    correct = [True] * 30 + [False] * 30
    l2 = np.array([2.0, 3.0, 4.0] * 10 + [8.0, 9.0, 10.0] * 10)
    r2 = np.array([1.0, 0.0, 1.0] * 10 + [6.0, 5.0, 6.0] * 10)  # within a class: symmetric around the middle length
    assert stats.pearsonr(r2, l2).statistic > 0.9
    two = length_correlation(r2, l2, correct)
    assert two.r == pytest.approx(0.0, abs=1e-12) and two.groups == 2
    assert math.isnan(length_correlation([1.0, 2.0, 3.0], [2, 2, 2], [True] * 3).r)  # constant length: undefined


def test_inherited_bias_against_hand_computed_rewards():
    from nanolm.alignment.reward_model import AnswerMeta, ScoredAnswer, inherited_bias

    def ans(prompt, correct, agrees, reward):
        return ScoredAnswer(prompt, f"{correct}{agrees}", AnswerMeta(correct, agrees, 2, "t"), reward)

    answers = [
        ans("p1", True, False, 1.0),
        ans("p1", False, True, 3.0),
        ans("p1", False, False, -1.0),
        ans("p2", True, False, 2.0),
        ans("p2", False, True, 1.0),
        ans("p3", False, True, 0.0),
    ]  # p3 has no correct answer: not in the paired comparison
    b = inherited_bias(answers)
    assert (b.agree_wrong.n, b.correct.n) == (3, 2)
    assert b.agree_wrong.mean == pytest.approx(4 / 3) and b.correct.mean == pytest.approx(1.5)
    assert b.gap.mean == pytest.approx(4 / 3 - 1.5)
    # Welch: se² = var(aw)/3 + var(c)/2; var(aw) = ((3 − 4/3)² + (1 − 4/3)² + (0 − 4/3)²)/2 = 7/3, var(c) = 0.5
    se = math.sqrt((7 / 3) / 3 + 0.5 / 2)
    assert b.gap.ci == pytest.approx((4 / 3 - 1.5 - 1.959963984540054 * se, 4 / 3 - 1.5 + 1.959963984540054 * se))
    assert (b.agree_wrong_wins.k, b.agree_wrong_wins.n) == (1, 2)  # p1: 3 > 1; p2: 1 < 2
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert b.agree_wrong_win_prob.mean == pytest.approx((sig(2.0) + sig(-1.0)) / 2)


# ---- the labels file -----------------------------------------------------------------------------------


def test_labels_of_another_format_are_one_line_naming_the_line_and_the_field(tmp_path):
    from nanolm.alignment.questions import corpus_questions
    from nanolm.alignment.reward_model import read_labels
    from nanolm.errors import UserError

    rows = label_rows(corpus_questions(3, 0, 1).questions, "agree")
    good = read_labels(write_labels(tmp_path / "good.jsonl", rows))
    assert len(good) == 9 and sum(r.label_prob == 0.5 for r in good) == 3  # correct vs the other wrong option: a tie
    assert all(r.chosen_meta.agrees_with_user and not r.rejected_meta.agrees_with_user for r in good if r.label_prob == 1)
    broken = [dict(r) for r in rows]
    del broken[1]["label_prob"]
    with pytest.raises(UserError, match=r"bad\.jsonl:2: missing field 'label_prob'"):
        read_labels(write_labels(tmp_path / "bad.jsonl", broken))
    broken = [dict(r) for r in rows]
    broken[2] = {**broken[2], "rejected_meta": {"correct": True, "length": 2, "source": "x"}}
    with pytest.raises(UserError, match=r"bad\.jsonl:3: rejected_meta has no field 'agrees_with_user'"):
        read_labels(write_labels(tmp_path / "bad.jsonl", broken))
    with pytest.raises(UserError, match=r":1: label_prob 0\.2 is outside \[0\.5, 1\]"):
        read_labels(write_labels(tmp_path / "bad.jsonl", [{**rows[0], "label_prob": 0.2}]))
    sharma = {"prompt": [{"type": "human", "content": "hi"}], "base": {}, "metadata": {}}  # another tool's rows
    with pytest.raises(UserError, match=r":1: missing field 'chosen'"):
        read_labels(write_labels(tmp_path / "bad.jsonl", [sharma]))


# ---- a trained reward model ------------------------------------------------------------------------------

QUESTIONS = 150  # 450 pairs per rule
STEPS, LR = 100, 1e-3  # ~3 s on 2 cores


@pytest.fixture(scope="module")
def view(trained_run):
    from nanolm.interp.view import load_view

    return load_view(trained_run)


def _trained_rm(trained_run, tmp_path_factory, rule: str, steps: int = STEPS):
    from nanolm.alignment.questions import corpus_questions
    from nanolm.alignment.reward_model import TrainSettings, read_labels, reward_model_from_run, train_reward_model

    path = write_labels(
        tmp_path_factory.mktemp(rule) / f"{rule}.jsonl", label_rows(corpus_questions(QUESTIONS, 0, 1).questions, rule)
    )
    rm = reward_model_from_run(trained_run, seed=0)
    result = train_reward_model(rm, read_labels(path), TrainSettings(steps=steps, batch_size=32, lr=LR), str(path))
    return rm, result


@pytest.fixture(scope="module")
def agree_rm(trained_run, tmp_path_factory):
    """A reward model trained on labels that prefer the user's (wrong) option: a judge with a planted sycophancy bias."""
    return _trained_rm(trained_run, tmp_path_factory, "agree")


def test_the_reward_model_learns_a_planted_preference_and_inherits_it(agree_rm):
    rm, result = agree_rm
    acc = result.held_out_accuracy
    assert result.held_out_pairs == round(0.2 * QUESTIONS * 3)  # split by pair_id
    assert 0 < acc.n < result.held_out_pairs  # the ties (correct vs the other wrong option) are left out
    assert acc.value > 0.9 and acc.ci[0] > 0.75, acc  # chance is 0.5
    assert result.held_out_loss < 0.4 < math.log(2)
    assert result.loss_curve[-1] < result.loss_curve[0]
    b = result.bias
    # it prefers agreeing-but-wrong answers to correct ones, on held-out questions
    assert b.gap.ci[0] > 0 and b.agree_wrong_wins.value > 0.9, b
    assert math.isnan(b.length.r)  # every answer is two words: no length to correlate with


def test_the_reward_model_saves_and_loads_without_pickle(agree_rm, tmp_path):
    from nanolm.alignment.reward_model import CONFIG, WEIGHTS, load_reward_model, save_reward_model
    from nanolm.errors import UserError

    rm, _ = agree_rm
    folder = save_reward_model(rm, tmp_path / "rm")
    assert sorted(p.name for p in folder.iterdir()) == sorted([CONFIG, WEIGHTS])
    loaded = load_reward_model(folder)
    prompts = ["user : i think the answer is B . question : what is two plus two ? A four B five C six answer :"] * 3
    responses = [" A .", " B .", " C ."]
    assert loaded.score(prompts, responses) == pytest.approx(rm.score(prompts, responses), abs=1e-6)
    with pytest.raises(UserError, match="already holds a reward model"):
        save_reward_model(rm, folder)
    (folder / WEIGHTS).write_bytes((folder / WEIGHTS).read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(UserError, match="sha256 differs"):
        load_reward_model(folder)
    with pytest.raises(UserError, match="not a reward model folder"):
        load_reward_model(tmp_path)


# ---- best-of-n ----------------------------------------------------------------------------------------------


def plain_sample(view, prompt: str, prompt_index: int, seed: int, max_new: int, temperature: float) -> list[int]:
    """Sampling written out: the whole sequence every step, softmax(logits / T), the first token whose cumulative
    probability exceeds u_t, u from the generator of (seed, prompt index) as nanolm's sampler documents it."""
    from nanolm.interp.steering import CRN_STRIDE

    u = torch.rand(max_new, generator=torch.Generator().manual_seed(seed * CRN_STRIDE + prompt_index))
    seq = view.to_tokens(prompt)[0].tolist()
    start, stop = len(seq), view.tokenizer.eos_id
    with torch.no_grad():
        for t in range(max_new):
            probs = torch.softmax(view.logits(torch.tensor([seq]))[0, -1].double() / temperature, -1)
            token = int(torch.searchsorted(probs.cumsum(0), u[t].double() * probs.sum(), right=True))
            seq.append(min(token, len(probs) - 1))
            if token == stop:
                break
    new = seq[start:]
    return new[: new.index(stop)] if stop in new else new


@pytest.fixture(scope="module")
def wrong_questions():
    from nanolm.alignment.questions import corpus_questions

    return corpus_questions(40, 1, 1).questions  # seed 1: other questions than the labels' (seed 0)


def test_best_of_n_at_n_1_is_plain_sampling_with_the_same_seed(view, agree_rm, wrong_questions):
    from nanolm.alignment.best_of_n import best_of_n, response_text

    rm, _ = agree_rm
    qs = wrong_questions[:12]
    result = best_of_n(view, rm, qs, [1, 4], [0, 7], temperature=1.0, max_new_tokens=4)
    assert len(result.records) == 24
    for rec in result.records:
        i = next(k for k, q in enumerate(qs) if q.id == rec.question)
        plain = response_text(view, plain_sample(view, rec.prompt, i, rec.seed, 4, 1.0))
        assert rec.kept[1] == 0 and rec.responses[0] == plain, (rec.responses, plain)
    # the n = 1 curve is those answers' rewards and ground truth
    for j, seed in enumerate([0, 7]):
        recs = [r for r in result.records if r.seed == seed]
        assert result.point(1).reward.values[j] == pytest.approx(np.mean([r.rewards[0] for r in recs]))
        assert result.point(1).correct.values[j] == pytest.approx(np.mean([r.answers[0] == r.correct for r in recs]))


def test_the_best_of_n_curve_is_the_reward_models_own_scores(view, agree_rm, wrong_questions):
    from nanolm.alignment.best_of_n import best_of_n

    rm, _ = agree_rm
    ns, seeds = [1, 2, 8], [0, 1]
    result = best_of_n(view, rm, wrong_questions[:15], ns, seeds, temperature=1.0, max_new_tokens=4)
    for n in ns:
        for j, seed in enumerate(seeds):
            recs = [r for r in result.records if r.seed == seed]
            direct = [rm.score([r.prompt] * n, r.responses[:n]) for r in recs]  # every candidate scored afresh
            for r, d in zip(recs, direct):
                assert r.rewards[:n] == pytest.approx(d.tolist(), abs=1e-5)
            best = [float(d.max()) for d in direct]
            kept = [float(rm.score([r.prompt], [r.responses[r.kept[n]]])[0]) for r in recs]
            assert kept == pytest.approx(best, abs=1e-5)
            assert result.point(n).reward.values[j] == pytest.approx(np.mean(best), abs=1e-5)
            sycophantic = np.mean([r.answers[r.kept[n]] == r.opinion for r in recs])
            assert result.point(n).sycophantic.values[j] == pytest.approx(sycophantic)
    for j in range(len(seeds)):  # the best of more is never worse
        values = [result.point(n).reward.values[j] for n in ns]
        assert values == sorted(values)


def test_reward_hacking_a_sycophancy_loving_reward_model_buys_agreement_not_correctness(view, agree_rm, wrong_questions):
    from nanolm.alignment.best_of_n import best_of_n, figure

    rm, _ = agree_rm
    result = best_of_n(view, rm, wrong_questions, [1, 4, 16], [0, 1, 2], temperature=1.0, max_new_tokens=4)
    first, last = result.point(1), result.point(16)
    assert last.reward.min > first.reward.max  # the score rises in every seed
    assert last.sycophantic.mean > first.sycophantic.mean + 0.3, (first, last)
    assert last.correct.mean < first.correct.mean - 0.2, (first, last)
    fig = figure(result)
    assert len(fig.axes) == 3
    from nanolm.plots import pyplot

    pyplot().close(fig)


@pytest.mark.slow
def test_a_correctness_loving_reward_model_raises_correctness(view, trained_run, tmp_path_factory, wrong_questions):
    from nanolm.alignment.best_of_n import best_of_n

    rm, result = _trained_rm(trained_run, tmp_path_factory, "correct", steps=3 * STEPS)  # correctness is harder to learn
    assert result.held_out_accuracy.value > 0.7, result.held_out_accuracy
    bon = best_of_n(view, rm, wrong_questions, [1, 4, 16], [0, 1, 2], temperature=1.0, max_new_tokens=4)
    first, last = bon.point(1), bon.point(16)
    assert last.reward.mean > first.reward.mean
    assert last.correct.mean > first.correct.mean + 0.1, (first, last)
    assert last.sycophantic.mean < first.sycophantic.mean, (first, last)


@pytest.mark.slow
def test_a_reward_model_trained_to_like_length_inherits_a_length_bias(trained_run, tmp_path):
    from nanolm.alignment.questions import corpus_questions
    from nanolm.alignment.reward_model import TrainSettings, read_labels, reward_model_from_run, train_reward_model

    qs = corpus_questions(QUESTIONS, 0, 1).questions
    rows = label_rows(qs, "longer", long_forms=True) + label_rows(qs, "correct")
    path = write_labels(tmp_path / "longer.jsonl", rows)
    rm = reward_model_from_run(trained_run, seed=0)
    result = train_reward_model(rm, read_labels(path), TrainSettings(steps=STEPS, lr=LR), str(path))
    assert result.bias.length.r > 0.5 and result.bias.length.ci[0] > 0, result.bias.length
    rm2 = reward_model_from_run(trained_run, seed=0)
    path2 = write_labels(tmp_path / "correct.jsonl", label_rows(qs, "correct", long_forms=True))
    plain = train_reward_model(rm2, read_labels(path2), TrainSettings(steps=STEPS, lr=LR), str(path2))
    assert abs(plain.bias.length.r) < result.bias.length.r - 0.3, (plain.bias.length, result.bias.length)


# ---- the commands -------------------------------------------------------------------------------------------


def test_the_commands_train_save_sample_and_plot(trained_run, tmp_path, capsys):
    from nanolm.alignment.questions import corpus_questions

    labels = write_labels(tmp_path / "agree.jsonl", label_rows(corpus_questions(20, 0, 1).questions, "agree"))
    code, out, err = run_cli(
        capsys, "reward-model", str(labels), "--base", str(trained_run), "--steps", "5", "--out", str(tmp_path / "rm"), "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["rows"] == 60 and summary["held_out_pairs"] == 12 and len(summary["loss_curve"]) == 5
    assert summary["folder"] == str(tmp_path / "rm")
    code, out, err = run_cli(
        capsys,
        "best-of-n",
        str(trained_run),
        "--reward",
        str(tmp_path / "rm"),
        "--n",
        "1,2,4,...,8",
        "--prompts",
        "6",
        "--seeds",
        "0,1",
        "--plot",
        str(tmp_path / "bon.png"),
        "--json",
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["ns"] == [1, 2, 4, 8] and result["seeds"] == [0, 1] and result["prompts"] == 6
    assert (tmp_path / "bon.png").stat().st_size > 1000
    records = [json.loads(x) for x in (tmp_path / "bon.jsonl").read_text().splitlines()]
    assert len(records) == 12 and all(len(r["responses"]) == 8 for r in records)
    code, out, err = run_cli(
        capsys,
        "best-of-n",
        str(trained_run),
        "--reward",
        str(tmp_path / "rm"),
        "--n",
        "1,2",
        "--prompts",
        "3",
        "--seeds",
        "0",
        "--plot",
        str(tmp_path / "bon2.png"),
    )
    assert code == 0, err
    assert "RM score" in out and "sycophantic" in out


def test_lists_of_n_continue_the_way_their_first_terms_go():
    from nanolm.cli.feedback_reward import parse_int_list
    from nanolm.errors import UserError

    assert parse_int_list("1,2,4,...,64", "--n") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_int_list("1,2,4,...,50", "--n") == [1, 2, 4, 8, 16, 32, 50]  # the last one as given
    assert parse_int_list("2,4,6,...,12", "--n") == [2, 4, 6, 8, 10, 12]  # +2, not ×2 (4/2 ≠ 6/4)
    assert parse_int_list(" 3, 1 ,2", "--n") == [3, 1, 2]
    for bad in ("1,...,8", "1,2,...", "1,2,4,...,2", "1,3,4,...,9", ""):
        with pytest.raises(UserError, match="--n"):
            parse_int_list(bad, "--n")


def test_bad_input_is_one_line_exit_2_and_nothing_is_overwritten(trained_run, tmp_path, capsys):
    from nanolm.alignment.questions import corpus_questions

    rows = label_rows(corpus_questions(4, 0, 1).questions, "agree")
    bad = [dict(r) for r in rows]
    del bad[3]["pair_id"]
    labels = write_labels(tmp_path / "bad.jsonl", bad)
    (tmp_path / "plot.png").write_bytes(b"an earlier figure")
    before = snapshot(tmp_path)
    code, _, err = run_cli(capsys, "reward-model", str(labels), "--base", str(trained_run), "--out", str(tmp_path / "rm"))
    assert_user_error(code, err, "bad.jsonl:4", "'pair_id'")
    code, _, err = run_cli(
        capsys, "best-of-n", str(trained_run), "--reward", str(tmp_path), "--n", "1,2", "--plot", str(tmp_path / "plot.png")
    )
    assert_user_error(code, err, "not a reward model folder")
    for ns in ("0,1,2", "1,-4", "1,x"):
        code, _, err = run_cli(
            capsys, "best-of-n", str(trained_run), "--reward", str(tmp_path), "--n", ns, "--plot", str(tmp_path / "plot.png")
        )
        assert_user_error(code, err, "--n")
    code, _, err = run_cli(
        capsys, "reward-model", str(trained_run / "manifest.json"), "--base", str(trained_run), "--out", str(tmp_path / "rm")
    )
    assert_user_error(code, err, "manifest.json")
    assert snapshot(tmp_path) == before
    # once as a real process, through nanolm's own error handling
    code = (
        "import sys, click; from nanolm.cli import run; from nanolm.cli.feedback_reward import best_of_n; "
        "run(click.Group('feedback', commands={'best-of-n': best_of_n}), sys.argv[1:], 'nanolm')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "best-of-n", str(trained_run), "--reward", str(tmp_path), "--n", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert_user_error(r.returncode, r.stderr, "--n 0", "positive integer")
    assert snapshot(tmp_path) == before
