"""nanolm feedback pairs / label: the constitution, the rules, answer pairs with their ground truth, labels in both
orders as TRL rows, and the bias report checked against judges whose biases were planted with known sizes
(expected values worked out by hand from the planted sizes), an unbiased rule judge, model judges, and bad input."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from nanolm.alignment.constitution import (
    DEFAULT_CONSTITUTION,
    RULE_NAMES,
    Constitution,
    Principle,
    default_constitution,
    load_constitution,
    parse_constitution,
)
from nanolm.alignment.judges import LikelihoodJudge, PlantedBiasJudge, PromptJudge, RuleJudge, parse_judge, rule_verdict
from nanolm.alignment.judgment_bias import bias_report
from nanolm.alignment.labelling import LABEL_FIELDS, META_FIELDS, Verdict, label, label_row, label_rows, read_labels, write_labels
from nanolm.alignment.pairs import Answer, Pair, build_pairs, read_pairs, reason, write_pairs
from nanolm.corpus import V2_ARITHMETIC_SHARE, corpus_words, sycophancy_pairs
from nanolm.errors import UserError

CORRECT = Principle("correct", "Which answer is correct?", "correct")
HOLD = Principle("no_capitulation", "Which answer holds?", "no_capitulation")
SHORT = Principle("shorter", "Which is shorter?", "shorter")


def ans(text: str, correct: bool | None = True, agrees: bool | None = False, source: str = "corpus") -> Answer:
    return Answer(f" {text}", correct, agrees, len(text.split()), source)


def one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message, message
    return message


def logistic(x: float) -> float:
    return 1 / (1 + math.exp(-x))


# ---- the constitution -----------------------------------------------------------------------------------


def test_the_default_constitution_has_the_issues_three_principles_with_rules():
    c = default_constitution()
    assert [(p.name, p.rule) for p in c.principles] == [
        ("correct", "correct"),
        ("no_capitulation", "no_capitulation"),
        ("shorter", "shorter"),
    ]
    assert all(p.text and "\n" not in p.text for p in c.principles)  # one paragraph each, as a judge is shown it
    assert parse_constitution(DEFAULT_CONSTITUTION) == Constitution(c.principles, "<text>")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no principles"),
        ('title = "x"\n', "unknown top-level key 'title'"),
        ('[[principle]]\nname = "a"\ntext = "t"\nweight = 2\n', "unknown field 'weight'"),
        (
            '[[principle]]\nname = "a"\ntext = "t"\nrule = "kind"\n',
            "unknown rule 'kind'; the rules are correct, no_capitulation, shorter",
        ),
        ('[[principle]]\nname = "a"\n', "'text' must be a non-empty string"),
        ('[[principle]]\nname = "a"\ntext = "t"\n[[principle]]\nname = "a"\ntext = "u"\n', "two principles are named 'a'"),
        ("[[principle]\n", "not valid TOML"),
    ],
)
def test_a_bad_constitution_is_one_line_naming_the_problem(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        load_constitution(path)
    assert message in one_line_error(e) and str(path) in str(e.value)
    assert RULE_NAMES == ("correct", "no_capitulation", "shorter")


def test_a_principle_without_a_rule_loads_but_a_rule_judge_refuses_it():
    c = parse_constitution('[[principle]]\nname = "kind"\ntext = "Which answer is kinder?"\n')
    assert c.principles[0].rule is None
    with pytest.raises(UserError) as e:
        label([Pair("p", "q", ans("A ."), ans("B .", False))], RuleJudge(), c)
    assert "principle 'kind' has no rule" in one_line_error(e)


# ---- the rules, by hand ------------------------------------------------------------------------------


def test_the_rules_by_hand():
    right, wrong, caved = ans("A ."), ans("B .", False), ans("B .", False, True)
    long_right = ans("A . because two plus three equals five .")
    judge = RuleJudge()
    assert [judge.prefer("q", right, wrong, CORRECT), judge.prefer("q", wrong, right, CORRECT)] == [1.0, 0.0]
    assert judge.prefer("q", right, long_right, CORRECT) == 0.5
    # no capitulation: only "agrees with the user and is wrong" loses; plain wrong vs right is a tie
    assert [judge.prefer("q", right, caved, HOLD), judge.prefer("q", caved, right, HOLD)] == [1.0, 0.0]
    assert judge.prefer("q", right, wrong, HOLD) == 0.5
    # shorter: only between equally correct answers
    assert [judge.prefer("q", right, long_right, SHORT), judge.prefer("q", long_right, right, SHORT)] == [1.0, 0.0]
    assert judge.prefer("q", long_right, wrong, SHORT) == 0.5


def test_a_rule_judge_says_which_rule_needs_which_missing_truth():
    pairs = [Pair("p1", "q", ans("A ."), ans("B .", False)), Pair("p2", "q", ans("A ."), ans("B .", False, None))]
    with pytest.raises(UserError) as e:
        label(pairs, RuleJudge(), default_constitution())
    msg = one_line_error(e)
    assert "pair 'p2'" in msg and "rule 'no_capitulation'" in msg and "agrees_with_user of b" in msg
    # a constitution without that rule needs nothing more
    only_correct = Constitution((CORRECT,), "t")
    assert len(label(pairs, RuleJudge(), only_correct).verdicts) == 2


# ---- pairs -------------------------------------------------------------------------------------------


def test_written_pairs_carry_their_ground_truth():
    ps = build_pairs(None, 120, seed=3)
    assert ps.counts() == {"right_wrong": 30, "right_agreeing": 30, "wrong_agreeing": 30, "short_long": 30}
    vocab = set(corpus_words(2))
    firsts = []
    for p in ps.pairs:
        assert p.prompt.endswith("answer :") and p.a.text.startswith(" ") and p.b.text.startswith(" ")
        assert set((p.a.text + p.b.text).split()) <= vocab  # a word-level judge reads every word
        assert p.a.length == len(p.a.text.split()) and p.a.source == p.b.source == "corpus"
        if p.kind == "right_wrong":
            assert {p.a.correct, p.b.correct} == {True, False} and not p.a.agrees_with_user | p.b.agrees_with_user
            assert "user :" not in p.prompt
        elif p.kind == "right_agreeing":
            caved = p.a if p.a.agrees_with_user else p.b
            held = p.b if caved is p.a else p.a
            assert caved.agrees_with_user and not caved.correct and held.correct and not held.agrees_with_user
            assert f"i think the answer is {caved.text.split()[0]} ." in p.prompt
        elif p.kind == "wrong_agreeing":  # equal truth (both wrong), one agreeing with the user
            assert not p.a.correct and not p.b.correct and p.a.agrees_with_user != p.b.agrees_with_user
            assert p.a.text.split()[0] != p.b.text.split()[0]
            agreeing = p.a if p.a.agrees_with_user else p.b
            assert f"i think the answer is {agreeing.text.split()[0]} ." in p.prompt
        else:
            assert p.a.correct and p.b.correct and p.a.text.split()[0] == p.b.text.split()[0]
            assert abs(p.a.length - p.b.length) >= 4 and "because" in (p.a.text + p.b.text)
        firsts.append(p.a.correct)
    assert 0.3 < sum(firsts) / len(firsts) < 0.85  # the correct answer is not always shown as a
    assert reason("what is two plus three ?", "five") == "because two plus three equals five"
    assert reason("which of these can fly ?", "owl") == "because owl can fly"


def test_pairs_round_trip_through_jsonl(tmp_path):
    ps = build_pairs(None, 12, seed=0)
    write_pairs(tmp_path / "p.jsonl", ps.pairs)
    assert read_pairs(tmp_path / "p.jsonl").pairs == ps.pairs


@pytest.mark.parametrize(
    "line, message",
    [
        ("{oops", ":2: not valid JSON"),
        ('{"id": "x", "prompt": "q", "a": {"text": " A"}, "b": 3}', ":2: 'b' must be an object"),
        (
            '{"id": "x", "prompt": "q", "a": {"text": " A", "correct": "yes"}, "b": {"text": " B"}}',
            ":2: 'a'.correct must be true, false or null",
        ),
        ('{"prompt": "q", "chosen": " A", "rejected": " B"}', ":2: a label row (chosen, rejected), not a pair"),
    ],
)
def test_a_bad_pairs_file_names_the_line(tmp_path, line, message):
    good = json.dumps({"id": "g", "prompt": "q", "a": {"text": " A"}, "b": {"text": " B"}})
    (tmp_path / "p.jsonl").write_text(good + "\n" + line + "\n")
    with pytest.raises(UserError) as e:
        read_pairs(tmp_path / "p.jsonl")
    assert message in one_line_error(e)


def test_n_must_be_positive():
    with pytest.raises(UserError) as e:
        build_pairs(None, 0)
    assert "--n must be at least 1" in one_line_error(e)


# ---- labels: both orders, the swap, the TRL rows ----------------------------------------------------------------


def test_verdicts_from_the_two_orders():
    assert Verdict("p", "c", 0.9, 0.2).p_a == pytest.approx(0.85) and Verdict("p", "c", 0.9, 0.2).consistent
    assert not Verdict("p", "c", 0.9, 0.6).consistent and Verdict("p", "c", 0.9, 0.6).first_both
    assert Verdict("p", "c", 0.5, 0.5).consistent  # a tie both ways is a consistent tie
    assert not Verdict("p", "c", 0.5, 0.7).consistent and not Verdict("p", "c", 0.5, 0.7).first_both


def swapped(pairs: list[Pair]) -> list[Pair]:
    return [Pair(p.id, p.prompt, p.b, p.a, p.kind) for p in pairs]


def test_swapping_a_and_b_flips_a_consistent_judges_label():
    pairs = build_pairs(None, 30, seed=2).pairs
    for judge in (RuleJudge(), PlantedBiasJudge(RuleJudge(), 0.0, 0.3, 1.0)):  # consistent: no position term
        before = label(pairs, judge, default_constitution())
        after = label(swapped(pairs), judge, default_constitution())
        assert all(v.consistent for v in before.verdicts)
        for v, w in zip(before.verdicts, after.verdicts):
            assert w.p_a == pytest.approx(1 - v.p_a, abs=1e-12)
        rows, rows_swapped = label_rows(before), label_rows(after)
        for r, s in zip(rows, rows_swapped):
            assert s["label_prob"] == pytest.approx(r["label_prob"], abs=1e-12)
            if r["label_prob"] > 0.5:  # the same answer is chosen, whichever way round the file had it
                assert (s["chosen"], s["rejected"]) == (r["chosen"], r["rejected"])


def test_label_rows_are_trl_preference_rows(tmp_path):
    pairs = build_pairs(None, 24, seed=4).pairs
    labelling = label(pairs, PlantedBiasJudge(RuleJudge(), 0.5, 0.1), default_constitution())
    rows = label_rows(labelling)
    assert len(rows) == 24 * 3
    for r in rows:
        assert tuple(r) == LABEL_FIELDS
        assert all(isinstance(r[k], str) for k in ("prompt", "chosen", "rejected", "principle", "judge", "pair_id"))
        assert isinstance(r["label_prob"], float) and 0.5 <= r["label_prob"] <= 1
        assert isinstance(r["consistent"], bool)
        for meta in (r["chosen_meta"], r["rejected_meta"]):
            assert tuple(meta) == META_FIELDS and isinstance(meta["length"], int) and isinstance(meta["source"], str)
            assert all(meta[k] is None or isinstance(meta[k], bool) for k in ("correct", "agrees_with_user"))
        assert r["prompt"].endswith("answer :") and r["chosen"].startswith(" ")  # prompt + chosen is the text
    write_labels(tmp_path / "l.jsonl", rows)
    assert [x.to_dict() for x in read_labels(tmp_path / "l.jsonl")] == json.loads(json.dumps(rows))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r.pop("chosen"), "not a label row: no 'chosen'"),
        (lambda r: r.update(label_prob=0.3), "'label_prob' must be a probability in [0.5, 1]"),
        (lambda r: r.update(consistent="yes"), "'consistent' must be true or false"),
        (lambda r: r["chosen_meta"].update(length=-1), "'chosen_meta.length' must be a whole number"),
        (lambda r: r["rejected_meta"].pop("source"), "'rejected_meta' must be an object with correct"),
    ],
)
def test_a_labels_file_of_another_format_names_the_line(tmp_path, edit, message):
    rows = label_rows(label(build_pairs(None, 3).pairs, RuleJudge(), default_constitution()))
    edit(rows[1])
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError) as e:
        read_labels(tmp_path / "l.jsonl")
    assert f"l.jsonl:2: {message}" in one_line_error(e)


def test_a_pairs_file_read_as_labels_says_so(tmp_path):
    write_pairs(tmp_path / "p.jsonl", build_pairs(None, 3).pairs)
    with pytest.raises(UserError) as e:
        label_row((tmp_path / "p.jsonl").read_text().splitlines()[0], "p.jsonl:1")
    assert "p.jsonl:1: not a label row" in one_line_error(e) and "this is a pairs file" in str(e.value)


# ---- the bias report against planted biases ---------------------------------------------------------------------


def test_an_unbiased_rule_judge_shows_no_bias():
    labelling = label(build_pairs(None, 150, seed=5).pairs, RuleJudge(), default_constitution())
    r = bias_report(labelling)
    assert r.position.consistency.k == r.position.consistency.n == 450
    assert r.position.offset.value == 0 and r.position.offset.ci == (0, 0)
    assert r.position.first_shown_prob.mean == 0.5
    # equal by the rules: the judge ties them all, whatever their length or agreement
    assert r.length.longer.ties == r.length.longer.wins + r.length.longer.ties + r.length.longer.losses > 0
    assert r.length.longer.score.mean == 0.5 and r.length.bonus.value == 0 and r.length.bonus.ci == (0, 0)
    assert r.length.agreement is not None and r.length.agreement.value == 0
    assert math.isnan(r.length.pearson.r)  # constant verdicts: no correlation to measure
    assert r.ground_truth.k == r.ground_truth.n > 0 and r.self_preference is None
    assert all(p.consistency.value == 1 and p.ground_truth.value == 1 for p in r.principles)


def test_planted_position_and_length_match_the_closed_form():
    """Equally correct pairs whose lengths differ by d = 1..6 words (5 of each), one principle. Planted offset
    δ = 1, length bonus λ = 0.3/word, base tie (0 logits): logit p_ab = δ + λd, logit p_ba = δ − λd. Both orders
    name the same answer iff |λd| > δ, i.e. d ≥ 4: consistency 15/30; the other 15 have both logits > 0: the first
    shown won both orders. P(a) = (σ(δ + λd) + 1 − σ(δ − λd)) / 2 > 1/2: the longer (a) always wins."""
    delta, lam = 1.0, 0.3
    pairs = [Pair(f"p{d}-{k}", "question : q answer :", ans("A ." + " x" * d), ans("A .")) for d in range(1, 7) for k in range(5)]
    r = bias_report(label(pairs, PlantedBiasJudge(RuleJudge(), delta, lam), Constitution((CORRECT,), "t")))
    assert (r.position.consistency.k, r.position.consistency.n) == (15, 30)
    assert (r.position.first_both.k, r.position.first_both.n) == (15, 15)
    expected_first = sum(logistic(delta + lam * d) + logistic(delta - lam * d) for d in range(1, 7)) / 12
    assert r.position.first_shown_prob.mean == pytest.approx(expected_first, abs=1e-12)
    assert r.position.offset.value == pytest.approx(delta, abs=1e-9)
    assert r.length.bonus.value == pytest.approx(lam, abs=1e-9)
    assert (r.length.longer.wins, r.length.longer.ties, r.length.longer.losses) == (30, 0, 0)
    assert r.length.pearson.r > 0.95  # P(a) rises with d: σ is monotone
    assert r.length.spearman.r == pytest.approx(1.0)  # ... strictly, so the ranks agree exactly
    assert r.planted == {"position_offset": delta, "length_bonus": lam, "agreement_bonus": 0.0}


def test_a_noisy_planted_judge_is_recovered_within_the_reports_intervals():
    """Corpus pairs of every written kind, the default constitution; δ = 0.8, λ = 0.25/word, α = 1.5 for agreeing
    with the user, and N(0, 0.5²) logit noise per call: each planted size lies in its 95% interval, and the
    intervals are narrow enough to tell them from no bias."""
    judge = PlantedBiasJudge(RuleJudge(), 0.8, 0.25, 1.5, noise=0.5, seed=1)
    r = bias_report(label(build_pairs(None, 300, seed=6).pairs, judge, default_constitution()))
    for got, planted in ((r.position.offset, 0.8), (r.length.bonus, 0.25), (r.length.agreement, 1.5)):
        assert got.ci[0] <= planted <= got.ci[1], (got, planted)
        assert got.ci[1] - got.ci[0] < planted / 2  # it is an interval that says something
    assert r.position.consistency.value < 1 and r.length.longer.score.mean > 0.9
    # the same without the biases: intervals around 0
    r0 = bias_report(
        label(build_pairs(None, 300, seed=6).pairs, PlantedBiasJudge(RuleJudge(), noise=0.5, seed=1), default_constitution())
    )
    for got in (r0.position.offset, r0.length.bonus, r0.length.agreement):
        assert got.ci[0] <= 0 <= got.ci[1], got


def test_a_planted_agreement_bias_makes_the_labels_sycophantic():
    """α = 3 > logit(0.9) = 2.197: on right vs agreeing-but-wrong pairs the "correct" verdict (+2.197 logits for the
    right answer) loses to the agreement bonus (−3) in both orders: every such label chooses the wrong answer."""
    pairs = build_pairs(None, 80, seed=7).pairs
    rows = label_rows(label(pairs, PlantedBiasJudge(RuleJudge(), 0.0, 0.0, 3.0), Constitution((CORRECT,), "t")))
    agreeing = [r for r, p in zip(rows, pairs) if p.kind == "right_agreeing"]
    assert len(agreeing) == 20 and all(
        r["chosen_meta"]["agrees_with_user"] and not r["chosen_meta"]["correct"] and r["consistent"] for r in agreeing
    )
    assert all(r["chosen_meta"]["correct"] for r, p in zip(rows, pairs) if p.kind == "right_wrong")
    # a = right: logit p_ab = +logit(0.9) − 3, logit p_ba = −logit(0.9) + 3, so P(a) = σ(logit(0.9) − 3) and the
    # agreeing answer is chosen with probability σ(3 − logit(0.9)) = σ(0.803)
    assert all(r["label_prob"] == pytest.approx(logistic(3 - math.log(9)), abs=1e-12) for r in agreeing)


def test_self_preference_counts_own_answers_at_equal_truth():
    """A judge that prefers model m1's answers (it recognises their texts) against m2's, both correct: own win
    rate 1; against the corpus's answers it is not counted."""
    own = {f" A . {w} .": "m1" for w in ("one", "two", "three")}

    class Fond:
        name, model = "fond", "m1"

        def prefer(self, prompt, first, second, principle):
            return 0.5 + 0.4 * ((own.get(first.text) == "m1") - (own.get(second.text) == "m1"))

    pairs = [
        Pair(f"p{i}", "q", ans(f"A . {w} .", source="m1"), ans("A . x .", source="m2"))
        for i, w in enumerate(("one", "two", "three"))
    ]
    pairs += [Pair("c", "q", ans("A . one .", source="m1"), ans("A . y .", source="corpus"))]
    r = bias_report(label(pairs, Fond(), Constitution((CORRECT,), "t")))
    sp = r.self_preference
    assert sp.model == "m1" and sp.others == ("m2",) and (sp.own.wins, sp.own.ties, sp.own.losses) == (3, 0, 0)


def test_rule_verdict_of_a_principle_without_a_rule_is_equal_correctness():
    free = Principle("kind", "be kind")
    assert rule_verdict(free, ans("A ."), ans("A . because .")) == 0.5
    assert rule_verdict(free, ans("A ."), ans("B .", False)) is None


# ---- judges from the command line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, message",
    [
        ("oracle", "give rule, likelihood:RUN_OR_PATH"),
        ("likelihood", "give rule, likelihood:RUN_OR_PATH"),
        ("planted:1", "planted:POSITION,LENGTH[,AGREEMENT]"),
        ("planted:1,x", "planted:POSITION,LENGTH[,AGREEMENT]"),
        ("planted:1,nan", "planted:POSITION,LENGTH[,AGREEMENT]"),
    ],
)
def test_a_bad_judge_spec_is_one_line(spec, message):
    with pytest.raises(UserError) as e:
        parse_judge(spec)
    assert message in one_line_error(e)


def test_a_prompt_judge_path_that_is_not_a_causal_lm(tmp_path):
    pytest.importorskip("transformers", reason="the hf extra is not installed")
    with pytest.raises(UserError) as e:
        PromptJudge(tmp_path)
    assert "not a Hugging Face model folder" in one_line_error(e)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    judge = PromptJudge(tmp_path)  # checked on first use: loading is lazy
    with pytest.raises(UserError) as e:
        judge.prefer("q", ans("A ."), ans("B ."), CORRECT)
    assert "not a causal LM" in one_line_error(e)


# ---- model judges and the command, on a short run and a tiny Hugging Face model ---------------------------------


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A nanolm run on corpus version 2, a few steps long: the commands' plumbing, not their numbers."""
    from nanolm.config import make_config
    from nanolm.train import train

    runs = tmp_path_factory.mktemp("feedback") / "runs"
    cfg = make_config(
        overrides=[
            "n_layer=2",
            "n_head=2",
            "d_model=32",
            "block_size=64",
            "batch_size=8",
            "corpus_lines=3000",
            "eval_batches=1",
            "warmup_steps=1",
            "steps=3",
            "corpus_version=2",
            f"runs_dir={runs}",
        ],
        name="fb",
    )
    return train(cfg, progress=False).run_dir


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    """A random-init Hugging Face GPT-2 over the corpus's words and the judge prompt's, saved with its tokenizer."""
    from conftest import word_level_gpt2
    from nanolm.alignment.judges import BAI_TEMPLATE

    shown = BAI_TEMPLATE + " ".join(p.text for p in default_constitution().principles)
    words = list(dict.fromkeys(["<unk>", "<bos>", *corpus_words(2), *re.findall(r"\w+|[^\w\s]+", shown)]))
    model, tok = word_level_gpt2(words, n_positions=256)
    path = tmp_path_factory.mktemp("hf") / "judge"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_a_likelihood_judge_scores_by_hand_and_is_position_free(short_run):
    import torch

    from nanolm.interp.view import load_view

    view = load_view(short_run)
    judge = LikelihoodJudge(view)
    prompt = "question : what is two plus three ? A five B six C four answer :"
    ids = view.to_tokens(prompt + " B . because")[0]
    with torch.no_grad():
        logp = view.logits(ids[None])[0].log_softmax(-1)
    n_prompt = len(view.to_tokens(prompt)[0])
    by_hand = sum(float(logp[t - 1, ids[t]]) for t in range(n_prompt, len(ids))) / (len(ids) - n_prompt)
    assert judge.scores([(prompt, " B . because")])[0] == pytest.approx(by_hand, abs=1e-5)
    pairs = build_pairs(None, 12, seed=1).pairs
    r = bias_report(label(pairs, judge, default_constitution()))
    assert r.position.consistency.k == r.position.consistency.n  # each answer scored alone: order cannot matter
    assert r.position.offset.value == pytest.approx(0, abs=1e-6)
    before, after = label(pairs, judge, default_constitution()), label(swapped(pairs), judge, default_constitution())
    assert [w.p_a for w in after.verdicts] == pytest.approx([1 - v.p_a for v in before.verdicts], abs=1e-9)


def test_the_commands_end_to_end(cli, short_run, tmp_path):
    r = cli("feedback", "pairs", str(short_run), "--n", "24", "--out", str(tmp_path / "p.jsonl"), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["n"] == 24 and summary["kinds"] == {
        "right_wrong": 5,
        "right_agreeing": 5,
        "wrong_agreeing": 5,
        "short_long": 5,
        "samples": 4,
    }
    samples = [p for p in read_pairs(tmp_path / "p.jsonl").pairs if p.kind == "samples"]
    assert all(p.a.source == p.b.source == short_run.name for p in samples)
    questions = sycophancy_pairs(24, 0, V2_ARITHMETIC_SHARE)
    for p in samples:  # truth read off the letter each sample starts with
        plain, opinionated = questions[int(p.id.split("-")[1])]
        assert p.prompt in (plain.prompt, opinionated.prompt)
        opinion = opinionated.opinion if p.prompt == opinionated.prompt else None
        for a in (p.a, p.b):
            letter = (a.text.split() or [""])[0].strip("().:")
            assert a.correct == (letter == plain.correct) and a.agrees_with_user == (letter == opinion)

    r = cli("feedback", "label", str(tmp_path / "p.jsonl"), "--judge", "rule", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["labels_path"] == str(tmp_path / "p.rule-labels.jsonl") and out["rows"] == 72 and out["calls"] == 144
    assert out["report"]["position"]["consistency"]["value"] == 1.0
    assert len(read_labels(tmp_path / "p.rule-labels.jsonl")) == 72

    table = cli(
        "feedback",
        "label",
        str(tmp_path / "p.jsonl"),
        "--judge",
        "planted:1,0.3",
        "--out",
        str(tmp_path / "planted.jsonl"),
        cwd=tmp_path,
    )
    assert table.returncode == 0, table.stderr
    assert "consistency" in table.stdout and "logits per word" in table.stdout and "by principle" in table.stdout

    lik = cli(
        "feedback",
        "label",
        str(tmp_path / "p.jsonl"),
        "--judge",
        f"likelihood:{short_run}",
        "--json",
        "--out",
        str(tmp_path / "lik.jsonl"),
        cwd=tmp_path,
    )
    assert lik.returncode == 0, lik.stderr
    assert json.loads(lik.stdout)["report"]["self_preference"] is None  # one model's samples only

    assert cli("feedback", "constitution", cwd=tmp_path).stdout == DEFAULT_CONSTITUTION
    assert cli("feedback", "constitution", "--out", str(tmp_path / "c.toml"), cwd=tmp_path).returncode == 0
    assert load_constitution(tmp_path / "c.toml") == Constitution(default_constitution().principles, str(tmp_path / "c.toml"))


def test_bad_input_is_one_line_exit_2_and_overwrites_nothing(cli, short_run, tmp_path):
    write_pairs(tmp_path / "p.jsonl", build_pairs(None, 6).pairs)
    (tmp_path / "keep.jsonl").write_text("keep\n")
    (tmp_path / "bad.toml").write_text('[[principle]]\nname = "a"\ntext = "t"\nrule = "kind"\n')
    (tmp_path / "none.toml").write_text("")
    rows = label_rows(label(build_pairs(None, 2).pairs, RuleJudge(), default_constitution()))
    write_labels(tmp_path / "labels.jsonl", rows)
    missing = build_pairs(None, 3).pairs
    missing[1] = Pair(missing[1].id, missing[1].prompt, missing[1].a, Answer(" B .", None, False, 2, "x"))
    write_pairs(tmp_path / "missing.jsonl", missing)
    keep = ["--out", str(tmp_path / "keep.jsonl")]
    for args, message in [
        (["pairs", str(short_run), "--n", "0", *keep], "--n"),
        (["pairs", str(tmp_path / "nope"), *keep], "not found"),
        (["label", str(tmp_path / "p.jsonl"), "--judge", "oracle", *keep], "--judge 'oracle'"),
        (
            ["label", str(tmp_path / "p.jsonl"), "--judge", "rule", "--constitution", str(tmp_path / "bad.toml"), *keep],
            "unknown rule 'kind'",
        ),
        (
            ["label", str(tmp_path / "p.jsonl"), "--judge", "rule", "--constitution", str(tmp_path / "none.toml"), *keep],
            "no principles",
        ),
        (["label", str(tmp_path / "missing.jsonl"), "--judge", "rule", *keep], "needs correct of b"),
        (["label", str(tmp_path / "labels.jsonl"), "--judge", "rule", *keep], "a label row (chosen, rejected), not a pair"),
        (["label", str(tmp_path / "p.jsonl"), "--judge", f"prompt:{short_run}", *keep], "cannot read a principle"),
        (["label", str(tmp_path / "p.jsonl"), "--judge", f"prompt:{tmp_path}", *keep], "not a Hugging Face model folder"),
        (["label", str(tmp_path / "p.jsonl"), "--judge", "rule", "--out", str(tmp_path / "p.jsonl")], "the pairs file"),
        (["critique", str(short_run)], "too small to critique"),
    ]:
        r = cli("feedback", *args, cwd=tmp_path)
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert (tmp_path / "keep.jsonl").read_text() == "keep\n"


def test_a_hugging_face_judge_and_a_second_policy(cli, short_run, hf_model, tmp_path):
    """prompt:HF labels in Bai et al.'s format; --versus adds cross-model sample pairs, and a likelihood judge that is
    one of the two models reports its self-preference."""
    r = cli(
        "feedback",
        "pairs",
        str(short_run),
        "--versus",
        str(hf_model),
        "--n",
        "12",
        "--out",
        str(tmp_path / "p.jsonl"),
        "--json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kinds"]["cross_samples"] == 2
    cross = [p for p in read_pairs(tmp_path / "p.jsonl").pairs if p.kind == "cross_samples"]
    assert all({p.a.source, p.b.source} == {short_run.name, "judge"} for p in cross)
    r = cli("feedback", "label", str(tmp_path / "p.jsonl"), "--judge", f"prompt:{hf_model}", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["rows"] == 36 and out["report"]["judge"] == "prompt:judge"  # 12 pairs x 3 principles
    assert out["labels_path"] == str(tmp_path / "p.prompt-judge-labels.jsonl")  # the judge's model in the name
    rows = read_labels(out["labels_path"])
    assert {x.judge for x in rows} == {"prompt:judge"} and all(0.5 <= x.label_prob <= 1 for x in rows)
    r = cli("feedback", "label", str(tmp_path / "p.jsonl"), "--judge", f"likelihood:{hf_model}", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["report"]["judge"] == "likelihood:judge"


def test_prompt_judge_reads_the_letters_after_the_bai_prompt(hf_model):
    """P(first) = σ(log p(A) − log p(B)) at the token after "The answer is: (", checked against the model directly."""
    import torch

    from nanolm.alignment.judges import judge_prompt
    from nanolm.interp.view import load_view

    view = load_view(hf_model)
    judge = PromptJudge(view)
    first, second = ans("A ."), ans("B .", False)
    text = judge_prompt("question : q answer :", first.text, second.text, CORRECT)
    assert text.endswith("The answer is: (") and "(A) A ." in text and "(B) B ." in text and CORRECT.text in text
    with torch.no_grad():
        logp = view.logits(view.to_tokens(text))[0, -1].log_softmax(-1)
    a, b = (view.tokenizer.encode(x)[0] for x in ("A", "B"))
    assert judge.prefer("question : q answer :", first, second, CORRECT) == pytest.approx(
        logistic(float(logp[a] - logp[b])), abs=1e-5
    )


def test_the_command_runs_as_a_program(tmp_path):
    write_pairs(tmp_path / "p.jsonl", build_pairs(None, 9).pairs)
    r = subprocess.run(
        [sys.executable, "-m", "nanolm", "feedback", "label", str(tmp_path / "p.jsonl"), "--judge", "planted:0.5,0.2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "position" in r.stdout and (tmp_path / "p.planted-labels.jsonl").is_file()


def test_a_judge_that_only_reads_correctness_shows_no_length_or_agreement_bias():
    """A judge that prefers the correct answer whatever the principle and is otherwise indifferent: right vs
    agreeing-but-wrong pairs (the agreeing answer is also the wrong one) and right short vs long must not pass
    its correctness preference off as an agreement or length bias. Only pairs equally correct count there."""

    class TruthOnly:
        name, model = "truth-only", None

        def prefer(self, prompt, first, second, principle):
            return 0.5 if first.correct == second.correct else (0.9 if first.correct else 0.1)

    r = bias_report(label(build_pairs(None, 200, seed=11).pairs, TruthOnly(), default_constitution()))
    assert r.length.bonus.value == pytest.approx(0, abs=1e-9)
    assert r.length.agreement is not None and r.length.agreement.value == pytest.approx(0, abs=1e-9)
    longer = r.length.longer  # every equal-truth pair is a tie for this judge
    assert longer.wins == longer.losses == 0 and longer.ties > 0
