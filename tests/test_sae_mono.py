"""Monosemanticity against ground truth: AUROC against scikit-learn's roc_auc_score, a planted latent that is
the label (AUROC 1) beside a neuron that mixes two labels, the pick made on one split and scored on the other,
the MLP hidden-unit hook point, and the table on a trained nanolm run (reported, not asserted either way)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from nanolm.errors import UserError
from nanolm.interp.probes import LabelledSet
from nanolm.interp.sae.model import SAEConfig, SparseAutoencoder
from nanolm.interp.sae.mono import (
    LABELS,
    auroc,
    labelled_set,
    mono_figure,
    mono_row,
    monosemanticity,
    pick_best,
    pooled_units,
)

# ---- AUROC against sklearn ------------------------------------------------------------------------------


def test_auroc_equals_sklearn_with_ties_and_constant_columns():
    rng = np.random.default_rng(0)
    y = rng.random(300) < 0.4
    scores = np.column_stack(
        [
            rng.normal(size=300) + y,  # continuous, informative
            rng.integers(0, 4, size=300).astype(float),  # heavy ties
            np.where(rng.random(300) < 0.8, 0.0, rng.random(300)) + 0.5 * y * (rng.random(300) < 0.3),  # mostly 0, a latent
            -(rng.normal(size=300) + 2 * y),  # fires for the negative class: AUROC < 0.5
            np.full(300, 3.0),  # constant (a dead latent)
        ]
    )
    got = auroc(scores, y)
    want = [roc_auc_score(y, scores[:, j]) for j in range(scores.shape[1])]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert got[3] < 0.5 and got[4] == 0.5
    assert float(auroc(scores[:, 0], y)) == pytest.approx(want[0], abs=1e-12)  # a single column too
    with pytest.raises(UserError, match="both classes"):
        auroc(scores, np.ones(300, dtype=bool))


# ---- planted data: the pick, its direction, and the held-out split ---------------------------------------


def planted(n: int = 400, seed: int = 0):
    """(texts, labels, latents [n, 30] where latent 7 is the label exactly, neurons [n, 10] where neuron 4
    fires for the label OR an unrelated second label, residual [n, 5] of noise)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2 == 0
    rng.shuffle(y)
    other = rng.random(n) < 0.5  # a second concept the neuron also fires for
    latents = rng.random((n, 30)) * (rng.random((n, 30)) < 0.1)
    latents[:, 7] = y * (1.0 + rng.random(n))  # active exactly on the positive class
    neurons = rng.normal(size=(n, 10))
    neurons[:, 4] = (y | other) + 0.01 * rng.normal(size=n)  # polysemantic: y or the other concept
    resid = rng.normal(size=(n, 5))
    texts = [f"text {i}" for i in range(n)]
    return texts, np.where(y, "past", "present"), latents, neurons, resid, y, other


def test_a_latent_equal_to_the_label_beats_a_neuron_that_mixes_two_labels():
    texts, labels, latents, neurons, resid, y, other = planted()
    row = mono_row("tense", LabelledSet("tense", texts, list(labels)), resid, neurons, [latents, latents[:, ::-1]])
    assert row.positive == "past" and row.negative == "present"
    assert row.n_select == 200 and row.n_held == 200
    first, flipped = row.latents
    assert (first.index, first.sign, first.auroc, first.select_auroc) == (7, 1, 1.0, 1.0)
    assert flipped.index == 29 - 7 and flipped.auroc == 1.0  # the same latent, in the second "SAE"'s order
    # The mixed neuron is picked, and scores what its construction implies: positives always fire (~1);
    # negatives fire as often when the other concept is on (half of them: a coin flip against a positive)
    # and not at all otherwise, so AUROC ~ 1/2 · 1 + 1/2 · 1/2 = 0.75.
    assert row.mlp_neuron is not None and row.mlp_neuron.index == 4
    held = _held_rows(texts, labels)
    assert row.mlp_neuron.auroc == pytest.approx(roc_auc_score(y[held], neurons[held, 4]), abs=1e-12)
    assert 0.65 < row.mlp_neuron.auroc < 0.85 and abs(other[held][~y[held]].mean() - 0.5) < 0.2
    assert row.latent_auroc.median == row.latent_auroc.min == row.latent_auroc.max == 1.0
    assert row.neuron is row.mlp_neuron and row.verdict == "latent above neuron on every seed"
    assert row.probe_accuracy < 0.7 and row.probe_auroc < 0.7  # the probe reads the "residual" (noise here)


def _held_rows(texts, labels):
    from nanolm.interp.probes import split_indices

    return split_indices(np.array(labels), 0.5, 0, groups=list(texts))[1]


def test_the_residual_probe_and_basis_pick_are_scored_on_the_held_out_split():
    texts, labels, latents, neurons, resid, y, _ = planted()
    resid[:, 2] = y + 0.5 * np.random.default_rng(1).normal(size=len(y))  # a readable basis direction
    row = mono_row("tense", LabelledSet("tense", texts, list(labels)), resid, None, [latents])
    held = _held_rows(texts, labels)
    assert row.mlp_neuron is None and row.neuron is row.basis and row.basis.index == 2
    assert row.basis.auroc == pytest.approx(roc_auc_score(y[held], resid[held, 2]), abs=1e-12)
    assert 0.8 < row.probe_accuracy <= 1.0 and row.majority == pytest.approx(0.5)
    # The probe's AUROC: its decision function on the held-out texts, scored by sklearn.
    from nanolm.interp.probes import make_probe

    sel = np.setdiff1d(np.arange(len(y)), held)
    probe = make_probe(1.0, 0).fit(resid[sel], labels[sel])
    score = probe.decision_function(resid[held]) * (1 if probe.classes_[1] == "past" else -1)
    assert row.probe_auroc == pytest.approx(roc_auc_score(y[held], score), abs=1e-12) and row.probe_auroc > 0.85


def test_the_best_of_many_noise_units_is_inflated_on_the_selection_split_only():
    rng = np.random.default_rng(3)
    n, m = 60, 3000
    y = np.arange(n) % 2 == 0
    noise = rng.normal(size=(n, m))
    sel, held = np.arange(n // 2), np.arange(n // 2, n)  # 15 of each class on each side
    pick = pick_best("latent", noise[sel], y[sel], noise[held], y[held])
    a = roc_auc_score(y[held], noise[held, pick.index])
    assert pick.select_auroc > 0.8  # the best of 3000 noise units on 30 texts looks like a detector...
    assert pick.auroc == pytest.approx(a if pick.sign > 0 else 1 - a, abs=1e-12)
    assert abs(pick.auroc - 0.5) < 0.25  # ...and is noise on the texts it was not chosen on
    # A unit that fires for the other class counts, its direction kept from the selection split.
    flipped = pick_best("latent", -y[sel, None].astype(float), y[sel], -y[held, None].astype(float), y[held])
    assert (flipped.sign, flipped.select_auroc, flipped.auroc) == (-1, 1.0, 1.0)


# ---- the labelled sets ----------------------------------------------------------------------------------


def test_labelled_sets_are_binary_and_labelled_by_their_definition():
    from nanolm.corpus import NUMBERS, arithmetic_facts

    for name in LABELS:
        data = labelled_set(name, 40, 0)
        assert len(set(data.labels)) == 2, name
        assert len(data.texts) == len(data.labels) > 8
    arith = labelled_set("arithmetic", 1000)
    assert len(arith.texts) == len(arithmetic_facts()) == 217
    facts = {f.prompt: f.answer for f in arithmetic_facts()}
    for text, label in zip(arith.texts, arith.labels):
        assert label == ("even" if NUMBERS.index(facts[text]) % 2 == 0 else "odd")
    assert dict(zip(arith.texts, arith.labels))["two plus two equals"] == "even"
    mcq = labelled_set("mcq", 100)
    assert set(mcq.labels) == {"A", "B"} and len(mcq.texts) == 100
    assert all(t.endswith("answer :") for t in mcq.texts)
    with pytest.raises(UserError, match="unknown labelled set"):
        labelled_set("colour")


# ---- the MLP hidden-unit hook ----------------------------------------------------------------------------


def test_the_mlp_hidden_units_have_a_hook_point_that_costs_nothing_unused():
    from nanolm.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, d_model=16)).eval()
    names = list(model.hook_points())
    assert names.index("blocks.1.hook_resid_mid") < names.index("blocks.1.mlp.hook_post") < names.index("blocks.1.hook_mlp_out")
    assert model.check_hook_names(["blocks.0.mlp.hook_post"]) == ["blocks.0.mlp.hook_post"]
    idx = torch.randint(0, 50, (2, 9))
    _, cache = model.run_with_cache(idx)
    block = model.blocks[0]
    hidden = cache["blocks.0.mlp.hook_post"]
    assert hidden.shape == (2, 9, 4 * 16)
    # The hidden units are GELU(fc(ln2(resid_mid))), and the MLP's output is proj of them, bit for bit.
    assert torch.equal(hidden, torch.nn.functional.gelu(block.mlp.fc(block.ln2(cache["blocks.0.hook_resid_mid"]))))
    assert torch.equal(block.mlp.proj(hidden), cache["blocks.0.hook_mlp_out"])
    x = torch.randn(3)
    assert block.mlp.hook_post(x) is x  # unhooked: the identity, no copy
    with model.hooks({"blocks.0.mlp.hook_post": lambda h, _n: torch.zeros_like(h)}):
        _, cache2 = model.run_with_cache(idx, ["blocks.0.hook_mlp_out"])
    assert torch.equal(cache2["blocks.0.hook_mlp_out"], torch.zeros_like(cache2["blocks.0.hook_mlp_out"]))
    with pytest.raises(KeyError, match="mlp.hook_post"):
        model.check_hook_names(["blocks.2.mlp.hook_post"])


# ---- a trained run ---------------------------------------------------------------------------------------


def test_the_table_on_a_trained_run(trained_run):
    from nanolm.interp.activations import collect
    from nanolm.interp.sae.sweep import train_seeds
    from nanolm.interp.sae.train import TrainSettings
    from nanolm.interp.view import load_view

    view = load_view(trained_run)
    settings = TrainSettings(batch_size=256, expansion=4, l1=0.03)
    saes = [r.sae for r in train_seeds(view, 1, "resid_post", settings, 2, 4096)]
    result = monosemanticity(view, saes, n=160)
    assert [r.label for r in result.rows] == list(LABELS)
    assert result.hook == "blocks.1.hook_resid_post" and result.seeds == [0, 1] and not result.notes
    print(f"\n{'label':<11}{'latent (median, min-max)':>28}{'MLP neuron':>12}{'basis':>8}{'probe':>8}{'acc':>7}  verdict")
    for r in result.rows:
        assert len(r.latents) == 2 and r.mlp_neuron is not None
        for p in (*r.latents, r.mlp_neuron, r.basis):
            assert 0.5 <= p.select_auroc <= 1.0 and 0.0 <= p.auroc <= 1.0
        assert r.mlp_neuron.candidates == 4 * 64 and r.basis.candidates == 64 and r.latents[0].candidates == 256
        assert 0.0 <= r.probe_accuracy <= 1.0 and 0.0 <= r.probe_auroc <= 1.0 and 0.0 <= r.majority <= 1.0
        s = r.latent_auroc
        print(
            f"{r.label:<11}{s.median:>14.3f} ({s.min:.3f}-{s.max:.3f})   {r.mlp_neuron.auroc:>12.3f}"
            f"{r.basis.auroc:>8.3f}{r.probe_auroc:>8.3f}{r.probe_accuracy:>7.3f}  {r.verdict}"
        )
    # The numbers from an independent route: the last-token activations from the activations module, each
    # SAE's latents from them, sklearn's AUROC on the held-out split of the reported units.
    data = labelled_set("tense", 160)
    x = collect(view, data.texts, ["blocks.1.hook_resid_post", "blocks.1.mlp.hook_post"], pool="last")
    held = _held_rows(data.texts, data.labels)
    y = np.array(data.labels) == "past"
    row = result.rows[0]
    with torch.no_grad():
        f = saes[1].encode(x["blocks.1.hook_resid_post"]).numpy()
    a = roc_auc_score(y[held], f[held, row.latents[1].index])
    assert row.latents[1].auroc == pytest.approx(a if row.latents[1].sign > 0 else 1 - a, abs=1e-6)
    a = roc_auc_score(y[held], x["blocks.1.mlp.hook_post"].numpy()[held, row.mlp_neuron.index])
    assert row.mlp_neuron.auroc == pytest.approx(a if row.mlp_neuron.sign > 0 else 1 - a, abs=1e-6)
    fig = mono_figure(result)
    bars = [p for p in fig.axes[0].patches]
    assert len(bars) == 4 * len(LABELS)  # latent, MLP neuron, basis direction, probe per label
    # "max" pooling reads every token but the start token: checked against one text's own maximum.
    X, mlp, (lat,) = pooled_units(
        view, data.texts[:3], "blocks.1.hook_resid_post", "blocks.1.mlp.hook_post", saes[:1], pool="max"
    )
    _, cache = view.run_with_cache(view.to_tokens(data.texts[2]), ["blocks.1.hook_resid_post"])
    own = cache["blocks.1.hook_resid_post"][0, 1:]
    torch.testing.assert_close(torch.from_numpy(X[2]), own.amax(0))
    torch.testing.assert_close(torch.from_numpy(lat[2]), saes[0].encode(own).amax(0))


def test_a_hugging_face_view_has_no_mlp_neurons_and_says_so():
    from conftest import word_level_gpt2
    from nanolm.corpus import corpus_words
    from nanolm.interp.view import view_of

    model, tok = word_level_gpt2(["<unk>", "<bos>", *sorted(corpus_words())], n_positions=64)
    view = view_of(model.eval(), tok, name="tiny-gpt2")
    torch.manual_seed(0)
    sae = SparseAutoencoder(SAEConfig(32, 64, hook_name="blocks.1.hook_resid_post", hook_layer=1))
    result = monosemanticity(view, [sae], labels=["sentiment", "mcq"], n=40)
    assert all(r.mlp_neuron is None and r.neuron is r.basis for r in result.rows)
    assert result.notes and "basis directions" in result.notes[0]


def test_bad_input_is_one_line():
    from nanolm.corpus import corpus_words
    from nanolm.interp.view import view_of
    from nanolm.model import GPT, GPTConfig

    class Words:
        words = ["<eos>", *sorted(corpus_words())]
        vocab_size, eos_id = len(words), 0

        def encode(self, text):
            return [self.words.index(w) for w in text.split()]

        def token_str(self, i):
            return self.words[i]

    view = view_of(GPT(GPTConfig(vocab_size=Words.vocab_size, block_size=64, n_layer=2, n_head=2, d_model=16)).eval(), Words())
    a = SparseAutoencoder(SAEConfig(16, 32, hook_name="blocks.1.hook_resid_post"))
    b = SparseAutoencoder(SAEConfig(16, 32, hook_name="blocks.0.hook_resid_post"))
    with pytest.raises(UserError, match="at least one SAE"):
        monosemanticity(view, [])
    with pytest.raises(UserError, match="different hooks"):
        monosemanticity(view, [a, b])
    with pytest.raises(UserError, match="unknown labelled set"):
        monosemanticity(view, [a], labels=["colour"])
    with pytest.raises(UserError, match="last or max"):
        monosemanticity(view, [a], pool="mean")
    wide = SparseAutoencoder(SAEConfig(24, 32, hook_name="blocks.1.hook_resid_post"))
    with pytest.raises(UserError, match="another model"):
        monosemanticity(view, [wide])


# ---- the command -----------------------------------------------------------------------------------------


def test_nanolm_sae_mono_trains_seeds_or_reads_folders_and_refuses_bad_input(cli, trained_run, tmp_path):
    import json
    import shutil

    from test_bad_input import assert_user_error

    run = tmp_path / "runs" / trained_run.name
    shutil.copytree(trained_run, run)
    small = ("--tokens", "4096", "--batch-size", "256", "--expansion", "4")
    out = cli(
        "sae",
        "mono",
        "--run",
        str(run),
        "--layer",
        "1",
        "--seeds",
        "2",
        *small,
        "--labels",
        "sentiment,mcq",
        "--n",
        "80",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert [r["label"] for r in got["rows"]] == ["sentiment", "mcq"] and got["seeds"] == [0, 1]
    for r in got["rows"]:
        assert len(r["latents"]) == 2 and r["n_select"] + r["n_held"] == 80
        assert r["latent_auroc"]["min"] <= r["latent_auroc"]["median"] <= r["latent_auroc"]["max"]
    assert got["plot"] == str(run / "sae" / "mono-L1-resid_post.png") and (run / "sae" / "mono-L1-resid_post.png").is_file()
    # SAE folders, their model the run they are saved under.
    for seed in (0, 1):
        out = cli(
            "sae",
            "train",
            str(run),
            "--layer",
            "1",
            *small,
            "--seed",
            str(seed),
            "--out",
            str(run / "sae" / f"s{seed}"),
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stderr
    out = cli(
        "sae",
        "mono",
        str(run / "sae" / "s0"),
        str(run / "sae" / "s1"),
        "--labels",
        "sentiment",
        "--n",
        "80",
        "--plot",
        str(tmp_path / "m.png"),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "sentiment" in out.stdout and (tmp_path / "m.png").is_file()
    for args, names in [
        (("--run", str(run), "--layer", "1", "--seeds", "0"), ["--seeds"]),
        (("--run", str(run), "--layer", "1", "--l1", "-1", "--seeds", "1", *small), ["--l1", ">= 0"]),
        (("--run", str(run), "--layer", "1", "--arch", "topk", "--k", "0"), ["--k"]),
        (("--run", str(run), "--seeds", "2"), ["--layer"]),
        (("--run", str(run), "--layer", "1", "--labels", "colour"), ["colour"]),
        (("--run", str(run), "--layer", "1", "--labels", ","), ["labelled set"]),
        (("--run", str(run), "--layer", "1", "--n", "3"), ["--n"]),
        ((str(run / "sae" / "s0"), "--run", str(run)), ["not both"]),
        ((), ["SAE folders"]),
        ((str(run / "sae" / "missing"),), ["not an SAE folder"]),
    ]:
        out = cli("sae", "mono", *args, cwd=tmp_path)
        assert_user_error(out.returncode, out.stderr, *names)
