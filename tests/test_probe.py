"""Linear probes, their controls and interventions: numbers checked against scikit-learn, the
reference's 60-examples-in-64-dimensions case, and planted features a model does or does not use."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from nanolm.errors import UserError
from nanolm.interp.interventions import intervene
from nanolm.interp.probes import LabelledSet, control_labels, feature_dataset, probe, probe_layer, read_labelled_file
from nanolm.interp.view import load_view, view_of
from nanolm.model import GPT, GPTConfig


def test_probe_accuracy_equals_scikit_learns_on_the_same_split():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 20))
    y = np.where(X[:, 0] + 0.8 * rng.normal(size=300) > 0, "pos", "neg")
    result = probe_layer(X, y, "3", test_size=0.25, seed=7)
    idx_train, idx_test = train_test_split(np.arange(300), test_size=0.25, random_state=7, stratify=y)
    scaler = StandardScaler().fit(X[idx_train])
    clf = LogisticRegression(max_iter=5000).fit(scaler.transform(X[idx_train]), y[idx_train])
    expected = (clf.predict(scaler.transform(X[idx_test])) == y[idx_test]).mean()
    assert result.accuracy == pytest.approx(expected)
    assert (result.n_train, result.n_test) == (225, 75)
    assert 0.7 < result.accuracy < 1.0 and result.warnings == []


def test_sixty_examples_in_sixty_four_dimensions_fit_random_labels_and_the_warning_fires():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 64))
    y = rng.permutation(np.array(["a", "b"] * 60))
    result = probe_layer(X, y, "6", test_size=0.5, seed=0)
    assert result.n_train == 60 and result.dim == 64
    assert result.train_accuracy == 1.0  # the reference's point: train accuracy proves nothing here
    assert 0.3 <= result.accuracy <= 0.7
    assert any("n_train = 60 ≤ dimension 64" in w for w in result.warnings)
    assert any("within noise of the majority rate" in w for w in result.warnings)


def test_control_tasks_keep_the_label_distribution_and_tie_labels_to_types():
    y = np.array(["a"] * 30 + ["b"] * 10)
    shuffled = control_labels(y, "example", None, seed=0)
    assert sorted(shuffled) == sorted(y) and not (shuffled == y).all()
    types = np.array([i % 5 for i in range(40)])
    per_type = control_labels(y, "type", types, seed=0)
    for t in range(5):  # one label per type
        assert len(set(per_type[types == t])) == 1
    with pytest.raises(UserError, match="single class"):
        probe_layer(np.zeros((10, 3)), np.array(["a"] * 10))


def test_selectivity_is_accuracy_minus_control_accuracy():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 8))
    y = np.where(X[:, 1] > 0, "u", "v")
    ctrl = control_labels(y, "example", None, seed=3)
    result = probe_layer(X, y, "0", seed=3, control=ctrl)
    assert result.accuracy > 0.9 and result.control_accuracy < 0.7
    assert result.selectivity == pytest.approx(result.accuracy - result.control_accuracy)


def test_tense_is_readable_above_majority_in_a_trained_nanolm(trained_run):
    view = load_view(trained_run)
    result = probe(view, feature_dataset("tense", 800), position="last")
    best = result.best
    assert best.accuracy_ci[0] > best.majority, best  # the 95% CI clears the majority rate
    assert best.selectivity > 0.05
    embed = result.layers[0]  # the pronoun's embedding alone cannot know the tense
    assert embed.layer == "embed" and embed.accuracy < best.accuracy


def test_tense_intervention_on_a_trained_nanolm_measures_the_verb(trained_run):
    """The real pipeline on a real model: the measure is the verb after "and then it", each text's
    right tense is compared with its wrong one, and after LEACE a fresh probe reads nothing."""
    pytest.importorskip("concept_erasure")
    view = load_view(trained_run)
    data = feature_dataset("tense", 800)
    result = intervene(view, data, "1", "leace", n_random=4)
    assert result.measure.startswith("loss on the feature-bearing next token") and result.rank == 1
    assert result.preference_base is not None and 0.0 <= result.preference_erased <= 1.0
    assert len(result.random_deltas) == 4 and result.delta == pytest.approx(result.erased - result.base)
    assert result.probe_accuracy_after <= result.majority + 0.08  # LEACE: no linear trace of tense is left


class _Vocab:
    kind = "word"

    def __init__(self, words: list[str]) -> None:
        self.ids = {w: i + 2 for i, w in enumerate(words)}
        self.vocab_size, self.eos_id = len(words) + 2, 1

    def encode(self, text: str) -> list[int]:
        return [self.ids[w] for w in text.split()]

    def token_str(self, i: int) -> str:
        return {v: k for k, v in self.ids.items()}.get(i, "<eos>")


def planted_model(read: float = 4.0):
    """A nanolm whose blocks add nothing (output projections zero), so every layer's residual is
    the token embedding. Words a/b differ along e0, which W_U reads (with weight ±read) to predict p
    or q; words x/y differ along e1, which W_U ignores."""
    words = ["a", "b", "p", "q", "x", "y"]
    tok = _Vocab(words)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=8, n_layer=2, n_head=2, d_model=16)).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.proj.weight.zero_()
            block.mlp.proj.weight.zero_()
        E = torch.zeros(tok.vocab_size, 16)
        E[:, 2] = 1.0
        E[tok.ids["a"], 0], E[tok.ids["b"], 0] = 3.0, -3.0
        E[tok.ids["x"], 1], E[tok.ids["y"], 1] = 3.0, -3.0
        model.embed.weight.copy_(E)
        model.unembed.weight.zero_()
        model.unembed.weight[tok.ids["p"], 0], model.unembed.weight[tok.ids["q"], 0] = read, -read
    return view_of(model, tok, name="planted")


def ab_set() -> LabelledSet:
    """Four x/y words before a/b: 32 distinct texts (repeats share a side of the split); the next word
    should be p after a, q after b."""
    rng = np.random.default_rng(0)
    texts = [" ".join([*rng.choice(["x", "y"], 4), w]) for w in ["a", "b"] * 60]
    labels = [t.split()[-1] for t in texts]
    return LabelledSet(
        "ab", texts, labels, ["p" if lab == "a" else "q" for lab in labels], ["q" if lab == "a" else "p" for lab in labels]
    )


def test_intervention_tells_a_used_feature_from_a_merely_readable_one():
    view = planted_model()
    used = ab_set()
    result = intervene(view, used, "0", "leace", n_random=19)
    assert result.preference_base == 1.0 and result.preference_erased <= 0.6
    assert result.delta > 0.5 and result.delta > max(result.random_deltas)
    assert result.verdict.startswith("used") and result.p_value == pytest.approx(1 / 20)
    assert result.probe_accuracy_after <= result.majority + 0.15  # LEACE leaves nothing linearly readable

    rng = np.random.default_rng(1)
    xy_texts = [" ".join(rng.choice(["x", "y"], 5)) for _ in range(120)]
    readable = LabelledSet("xy", xy_texts, [t.split()[-1] for t in xy_texts])
    assert probe(view, readable).best.accuracy == 1.0  # perfectly readable...
    # ...and never used: erased at every token, the texts' own next-token loss does not move, while
    # random edits moving each activation as far do move it (W_U reads e0).
    unused = intervene(view, readable, "0", "projection", n_random=4, erase_at="all")
    assert abs(unused.delta) < 1e-4 and unused.verdict.startswith("not shown")
    assert min(abs(d) for d in unused.random_deltas) > 10 * abs(unused.delta)
    with pytest.raises(UserError, match="no target words.*--erase-at all"):  # the last token's edit reaches no loss
        intervene(view, readable, "0", "projection", n_random=4)


def test_a_tiny_effect_beyond_every_random_edit_but_below_the_floor_is_not_used():
    """W_U reads the a/b direction 400 times more weakly than above: erasing it still moves the loss more
    than all 29 random edits (p = 1/30), but by a few hundredths of a nat, below the 0.05-nat floor."""
    from nanolm.interp.interventions import MIN_EFFECT_NATS, N_RANDOM, Verdict, verdict

    result = intervene(planted_model(read=0.01), ab_set(), "0", "leace")
    assert len(result.random_deltas) == N_RANDOM == 29 and result.p_value == pytest.approx(1 / 30)
    assert max(abs(d) for d in result.random_deltas) < result.delta < MIN_EFFECT_NATS == 0.05 == result.min_effect
    assert result.verdict is Verdict.NOT_SHOWN and "below the 0.05-nat floor" in result.reason
    # the floor alone decides: without it, the same numbers would say "used"
    assert verdict(result.delta, result.random_deltas, min_effect=0.0)[0] is Verdict.USED
    with pytest.raises(UserError, match="--random-edits must be at least 1"):
        intervene(planted_model(), ab_set(), "0", "leace", n_random=0)
    with pytest.raises(UserError, match="--min-effect must be a number of nats >= 0"):
        intervene(planted_model(), ab_set(), "0", "leace", min_effect=-0.1)


@pytest.mark.parametrize("method", ["leace", "projection"])
def test_erasers_remove_k_minus_1_directions_for_k_classes(method):
    """Three classes carried by two directions: both erasers must remove exactly that 2-D span (an
    eraser fed class indices as one ordinal column removes only one direction, and a fresh probe
    still reads the classes)."""
    pytest.importorskip("concept_erasure")
    from nanolm.interp.interventions import fit_eraser

    rng = np.random.default_rng(0)
    z = np.repeat([0, 1, 2], 200)
    centres = np.array([[4.0, 0.0], [-2.0, 3.5], [-2.0, -3.5]])  # on a circle: no single axis separates them
    X = rng.normal(size=(600, 8))
    X[:, :2] += centres[z]
    X = torch.as_tensor(X)
    erased = fit_eraser(method, X, z, seed=0)(X)
    removed = np.linalg.svd((X - erased).numpy(), compute_uv=False)
    assert (removed > 1e-6 * removed[0]).sum() == 2
    fresh = LogisticRegression(max_iter=2000).fit(erased.numpy()[::2], z[::2])
    # Chance is 1/3. LEACE leaves no linear signal; the probe's own directions are estimated with noise,
    # so projecting them off leaves a little.
    assert fresh.score(erased.numpy()[1::2], z[1::2]) < (0.45 if method == "leace" else 0.6)
    assert LogisticRegression(max_iter=2000).fit(X.numpy()[::2], z[::2]).score(X.numpy()[1::2], z[1::2]) > 0.9


def test_splits_too_small_for_the_labels_are_one_line_errors():
    X = np.random.default_rng(0).normal(size=(6, 4))
    with pytest.raises(UserError, match="label 'c' has a single example.*at least 2 per class"):
        probe_layer(X, np.array(["a", "a", "b", "b", "b", "c"]))
    with pytest.raises(UserError, match="4 examples split 3/1 cannot hold all 2 labels.*at least 5 examples"):
        probe_layer(X[:4], np.array(["a", "a", "b", "b"]))
    assert probe_layer(X[:5], np.array(["a", "a", "b", "b", "b"])).n_test == 2  # 5 split 3/2: enough


def test_user_files_and_bad_features(tmp_path):
    good = tmp_path / "d.csv"
    good.write_text("text,label\nthe dog ran,past\nthe dog runs,present\n")
    data = read_labelled_file(good)
    assert data.texts == ["the dog ran", "the dog runs"] and data.classes == ["past", "present"]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"text": "a", "label": "x", "target": "p"}\n{"text": "b", "label": "y", "target": "q"}\n')
    assert read_labelled_file(jsonl).targets == ["p", "q"]
    bad = tmp_path / "bad.csv"
    bad.write_text("text,tense\nthe dog ran,past\n")
    with pytest.raises(UserError, match="no 'label' column"):
        read_labelled_file(bad)
    with pytest.raises(UserError, match="unknown feature 'mood'.*tense, sentiment"):
        feature_dataset("mood")


def test_a_text_that_repeats_stays_on_one_side_of_the_split():
    """The built-in sets repeat texts; a held-out copy of a train text would be memorized, not read."""
    from nanolm.interp.probes import split_indices

    data = feature_dataset("sentiment", 2000, seed=0)
    assert len(set(data.texts)) < len(data.texts)  # the case this guards
    train, test = split_indices(np.array(data.labels), 0.25, 0, data.texts)
    assert sorted([*train, *test]) == list(range(len(data.texts)))
    assert not {data.texts[i] for i in train} & {data.texts[i] for i in test}
    assert 0.2 < len(test) / len(data.texts) < 0.3


def test_next_word_scores_the_first_token_where_the_two_words_differ():
    from types import SimpleNamespace

    from nanolm.interp.interventions import next_word
    from nanolm.tokenizers import ByteTokenizer

    tok = ByteTokenizer()
    view = SimpleNamespace(tokenizer=tok, token_str=tok.token_str)
    word = next_word(view, "walked", "walks")  # bytes " walk" shared, then e vs s
    assert (word.lead, word.target, word.contrast) == (list(b" walk"), ord("e"), ord("s"))
    assert next_word(view, "walk", "walks") is None  # no token of "walk" tells it from "walks"
    alone = next_word(view, "ran", None)  # no contrast: past the space, which is a token of its own
    assert (alone.lead, alone.target) == ([ord(" ")], ord("r"))
    words = SimpleNamespace(tokenizer=_Vocab(["walked", "walks"]), token_str=_Vocab(["walked", "walks"]).token_str)
    assert next_word(words, "walked", "walks").lead == []


def test_random_edits_move_each_activation_as_far_as_the_eraser():
    from nanolm.interp.interventions import fit_eraser, random_eraser

    rng = np.random.default_rng(0)
    z = np.repeat([0, 1], 100)
    X = torch.as_tensor(rng.normal(size=(200, 6)))
    X[:, 0] += 5.0 * z  # a feature with far more variance than a typical direction
    eraser = fit_eraser("projection", X, z, seed=0)
    rand = random_eraser(6, 1, X.mean(0), torch.Generator().manual_seed(0), eraser)
    moved, moved_random = (X - eraser(X)).norm(dim=1), (X - rand(X)).norm(dim=1)
    assert torch.allclose(moved, moved_random, atol=1e-9) and float(moved.mean()) > 1.0


def test_the_verdict_counts_a_change_of_either_sign_beyond_random_edits():
    from nanolm.interp.interventions import Verdict, verdict

    small = [-0.003, -0.001, -0.006, -0.002, -0.004] * 4  # 20 draws: beating all happens by luck 1 time in 21
    decision, reason = verdict(-0.052, small)
    assert decision is Verdict.USED and reason.startswith("erasing it lowers") and "p = 0.048" in reason
    decision, reason = verdict(0.4, [0.01, 0.02, 0.015, 0.01] * 5)
    assert decision is Verdict.USED and reason.startswith("erasing it raises")
    assert verdict(0.0, [0.2, 0.3, 0.25, 0.22] * 5)[0] is Verdict.NOT_SHOWN  # smaller than random edits' harm
    decision, reason = verdict(0.021, [0.01, 0.02, 0.015, 0.01] * 5, min_effect=0.0)  # beyond all, not 3 sd beyond
    assert decision is Verdict.NOT_SHOWN and "within the range of random edits" in reason
    # the reported case: +0.008 nats against random edits of a thousandth of a nat is below the floor
    decision, reason = verdict(0.008, [0.001, -0.0005, 0.0002, -0.001, 0.0007] * 6)
    assert decision is Verdict.NOT_SHOWN and "below the 0.05-nat floor" in reason
    # beating all of too few draws proves little: 8 draws are beaten by luck 1 time in 9
    decision, reason = verdict(0.4, [0.01, 0.02, 0.015, 0.01] * 2)
    assert decision is Verdict.NOT_SHOWN and "probability 0.11 > 0.05" in reason and "--random-edits 19" in reason
    assert Verdict.USED == "used" and f"{Verdict.NOT_SHOWN}" == "not shown to be used"


def test_the_p_value_counts_random_edits_at_least_as_large():
    from nanolm.interp.interventions import p_value

    rng = np.random.default_rng(0)
    draws = rng.normal(0, 0.1, size=29)
    assert p_value(1.0, list(draws)) == pytest.approx(1 / 30)  # beats all 29
    assert p_value(-1.0, list(draws)) == pytest.approx(1 / 30)  # either sign
    k = int((np.abs(draws) >= 0.05).sum())
    assert 0 < k < 29 and p_value(0.05, list(draws)) == pytest.approx((1 + k) / 30)
    # under the null the erasure is one more exchangeable draw: P(p <= 1/30) = 1/30
    hits = sum(p_value(rng.normal(0, 0.1), list(rng.normal(0, 0.1, size=29))) <= 1 / 30 for _ in range(6000))
    assert abs(hits / 6000 - 1 / 30) < 0.01
