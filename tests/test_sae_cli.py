"""`nanolm sae train / eval / features` as a user types them, on a trained nanolm run: the saved layout,
the printed numbers against a hand computation (per text, no batching or padding), and every bad input
as one line with exit code 2 that leaves an existing SAE folder byte-identical."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from test_bad_input import assert_user_error, snapshot
from test_cli import nanolm as nanolm_subprocess

SMALL = ("--tokens", "4096", "--batch-size", "256", "--expansion", "4")  # 16 steps: seconds on 2 cores
RELU_NAME = "L1-resid_post-relu-l1_0.03-M256"  # the default folder of `sae train RUN --layer 1` with SMALL


@pytest.fixture(scope="module")
def run(trained_run, tmp_path_factory):
    """A copy of the trained run (SAEs are written into it), in a working folder: (cwd, run folder)."""
    cwd = tmp_path_factory.mktemp("sae_cli")
    folder = cwd / "runs" / trained_run.name
    shutil.copytree(trained_run, folder)
    return cwd, folder


@pytest.fixture(scope="module")
def relu(run):
    """`nanolm sae train RUN --layer 1 ... --json` in a real subprocess: (its JSON summary, the SAE folder)."""
    cwd, folder = run
    out = nanolm_subprocess("sae", "train", str(folder), "--layer", "1", *SMALL, "--json", cwd=cwd)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    return summary, folder / "sae" / RELU_NAME


@pytest.fixture(scope="module")
def model(run):
    """(view, the raw model) of the run, for the hand computations."""
    from nanolm.interp.view import load_view

    view = load_view(run[1])
    return view, view.model


def sae_arrays(folder) -> dict[str, np.ndarray]:
    """The saved tensors, read with safetensors' numpy loader (not nanolm's), float64."""
    return {k: v.astype(np.float64) for k, v in load_file(str(folder / "sae_weights.safetensors")).items()}


def encode(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The relu SAE's latents by hand: ReLU((x - b_dec) W_enc + b_enc), [n, M]."""
    return np.maximum((x - w["b_dec"]) @ w["W_enc"] + w["b_enc"], 0.0)


def acts_of(view, text: str, hook: str) -> np.ndarray:
    """[T, D] activations of one text at hook (start token included), one forward pass, no padding."""
    _, cache = view.run_with_cache(view.to_tokens(text), [hook])
    return cache[hook][0].double().numpy()


def held_out(view) -> list[str]:
    from nanolm.interp.sae.pipeline import texts_for

    return texts_for(view)[1]


# ---- train ---------------------------------------------------------------------------------------------


def test_train_saves_the_saelens_layout_under_the_run(relu, model):
    summary, folder = relu
    assert summary["folder"].endswith(f"sae/{RELU_NAME}") and folder.is_dir()
    assert summary["steps"] == 4096 // 256 and summary["tokens"] == 4096 and summary["d_sae"] == 4 * 64
    assert summary["hook"] == "blocks.1.hook_resid_post" and summary["tokens_per_s"] > 0
    assert 0 <= summary["dead"] <= 256 and summary["final_l0"] > 0 and summary["settings"]["l1"] == 0.03
    assert sorted(p.name for p in folder.iterdir()) == ["cfg.json", "sae_weights.safetensors", "sparsity.safetensors"]
    w = sae_arrays(folder)
    assert {k: v.shape for k, v in w.items()} == {"W_enc": (64, 256), "W_dec": (256, 64), "b_enc": (256,), "b_dec": (64,)}
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["architecture"] == "standard" and cfg["hook_name"] == "blocks.1.hook_resid_post"
    assert cfg["d_in"] == 64 and cfg["d_sae"] == 256 and cfg["nanolm"]["model_fingerprint"] is not None
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_train_prints_a_summary_and_replaces_only_with_force(run, cli):
    cwd, folder = run
    args = ("sae", "train", str(folder), "--layer", "0", "--hook", "mlp_out", "--arch", "topk", "--k", "8", *SMALL)
    out = cli(*args, cwd=cwd)
    assert out.returncode == 0, out.stderr
    saved = folder / "sae" / "L0-mlp_out-topk-k8-M256"
    for words in (
        "trained a topk SAE at blocks.0.hook_mlp_out",
        "K = 8",
        "tokens/s",
        "final L0",
        "final MSE",
        "dead latents",
        f"saved to {saved}",
        "settings: arch=topk",
    ):
        assert words in " ".join(out.stdout.split()), (words, out.stdout)
    l0 = float(re.search(r"final L0\s+([\d.]+)", out.stdout).group(1))
    assert 0 < l0 <= 8  # TopK: at most K active (ReLU may zero some of the K)
    before = snapshot(saved)
    again = cli(*args, cwd=cwd)
    assert_user_error(again.returncode, again.stderr, "already holds an SAE", "--force")
    assert snapshot(saved) == before
    forced = cli(*args, "--seed", "1", "--force", cwd=cwd)
    assert forced.returncode == 0, forced.stderr
    assert snapshot(saved) != before and sorted(snapshot(saved)) == sorted(before)


# ---- eval ----------------------------------------------------------------------------------------------


def test_eval_prints_every_metric_against_a_hand_computation_and_writes_the_png(relu, model, run, cli):
    _, folder = relu
    view, _ = model
    out = cli("sae", "eval", str(folder), "--texts", "60", "--json", cwd=run[0])
    assert out.returncode == 0, out.stderr
    ev = json.loads(out.stdout)
    png = folder / "density.png"
    assert ev["plot"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # L0, FVU, MSE and the dead count by hand over the first 60 held-out texts, one text at a time.
    w = sae_arrays(folder)
    x = np.concatenate([acts_of(view, t, ev["hook"]) for t in held_out(view)[:60]])
    f = encode(w, x)
    x_hat = f @ w["W_dec"] + w["b_dec"]
    assert ev["tokens"] == len(x) == ev["dead_window"]
    assert ev["l0"] == pytest.approx((f > 0).sum(1).mean(), rel=1e-4)
    assert ev["fvu"] == pytest.approx(((x - x_hat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum(), rel=1e-4)
    assert ev["mse"] == pytest.approx(((x - x_hat) ** 2).mean(), rel=1e-4)
    assert ev["dead"] == int(((f > 0).sum(0) == 0).sum())
    assert ev["dense"] == int(((f > 0).mean(0) > 0.10).sum())
    assert ev["ce_recovered_zero"] == pytest.approx(
        (ev["ce_zero_ablated"] - ev["ce_spliced"]) / (ev["ce_zero_ablated"] - ev["ce_clean"])
    )

    shown = cli("sae", "eval", str(folder), "--texts", "20", "--plot", str(run[0] / "d.png"), cwd=run[0])
    assert shown.returncode == 0, shown.stderr
    for metric in (
        "L0",
        "MSE",
        "FVU",
        "dead latents",
        "dense latents",
        "CE, clean",
        "CE, SAE spliced in",
        "CE, zero-ablated",
        "CE, mean-ablated",
        "CE loss recovered vs zero ablation",
        "CE loss recovered vs mean ablation",
        "KL",
        "Σ‖x - x̂‖² / Σ‖x - x̄‖²",
    ):
        assert metric in shown.stdout, (metric, shown.stdout)
    assert (run[0] / "d.png").is_file()


def test_eval_help_prints_every_metric_definition_of_the_library(run, cli):
    from nanolm.interp.sae import metrics

    out = cli("sae", "eval", "--help", cwd=run[0])
    assert out.returncode == 0
    flat = " ".join(out.stdout.split())
    definitions = metrics.__doc__.split("\n\n", 1)[1].split("\n- ")  # the bullet list after the intro
    assert len(definitions) == 6
    for d in definitions:
        assert " ".join(d.strip("- \n").split()) in flat, d


# ---- features ------------------------------------------------------------------------------------------


def test_features_contexts_density_and_direct_effect_match_a_hand_computation(relu, model, run, cli):
    _, folder = relu
    view, net = model
    out = cli("sae", "features", str(folder), "--texts", "80", "--top", "4", "--count", "3", "--json", cwd=run[0])
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    feats = report["features"]
    assert len(feats) == 3 and [f["density"] for f in feats] == sorted((f["density"] for f in feats), reverse=True)

    given = held_out(view)[:80]
    distinct = list(dict.fromkeys(given))  # a repeated text is read once
    assert len(distinct) < len(given)  # the corpus repeats some lines: the dedup is exercised
    w = sae_arrays(folder)
    per_text = {given.index(t): encode(w, acts_of(view, t, report["hook"]))[1:] for t in distinct}  # no start token
    f_all = np.concatenate(list(per_text.values()))
    assert report["tokens"] == len(f_all) and report["texts"] == len(distinct)
    density = (f_all > 0).mean(0)
    assert [f["latent"] for f in feats] == list(np.argsort(-density, kind="stable")[:3])
    gamma = net.ln_final.weight.detach().double().numpy()
    W_U = net.unembed.weight.detach().double().numpy().T  # [D, V]
    for feat in feats:
        i = feat["latent"]
        assert feat["density"] == pytest.approx(density[i], abs=1e-12)
        assert feat["max_activation"] == pytest.approx(f_all[:, i].max(), rel=1e-4)
        assert len(feat["contexts"]) == 4
        for c in feat["contexts"]:
            assert f"[{c['token']}]" in c["text"] and c["text_index"] in per_text
            assert c["activation"] == pytest.approx(per_text[c["text_index"]][c["position"] - 1, i], rel=1e-4)
        assert [c["activation"] for c in feat["contexts"]] == pytest.approx(sorted(f_all[:, i], reverse=True)[:4], rel=1e-4)
        effect = (w["W_dec"][i] * gamma) @ W_U  # [V]: direct logit attribution by hand
        up, down = np.argsort(-effect)[:5], np.argsort(effect)[:5]
        assert [t["id"] for t in feat["promoted"]] == list(up)
        assert [t["id"] for t in feat["suppressed"]] == list(down)
        assert [t["value"] for t in feat["promoted"]] == pytest.approx(effect[up], rel=1e-9)
        assert [t["value"] for t in feat["suppressed"]] == pytest.approx(effect[down], rel=1e-9)
        assert [t["token"] for t in feat["promoted"]] == [view.token_str(int(j)) for j in up]

    shown = cli("sae", "features", str(folder), "--texts", "40", "--feature", str(feats[0]["latent"]), "--top", "3", cwd=run[0])
    assert shown.returncode == 0, shown.stderr
    assert f"latent {feats[0]['latent']}: density" in shown.stdout and "promotes:" in shown.stdout
    assert "suppresses:" in shown.stdout and re.search(r"\[\S+\]", shown.stdout)


# ---- bad input: one line, exit 2, nothing overwritten ------------------------------------------------------

TRAIN_BAD = [
    ((), "already holds an SAE"),  # the default folder of the relu fixture
    (("--arch", "topk", "--l1", "0.1"), "--l1"),
    (("--k", "4"), "--k"),
    (("--expansion", "0"), "--expansion"),
    (("--expansion", "1.5"), "--expansion"),
    (("--arch", "topk", "--k", "0"), "--k"),
    (("--arch", "topk", "--k", "256"), "--k 256"),  # K = M = 4 · 64
    (("--l1", "-0.5"), "--l1"),
    (("--tokens", "100"), "--tokens"),
    (("--hook", "nope"), "--hook"),
    (("--expansion", "2", "--d-sae", "100"), "--d-sae"),
]


@pytest.mark.parametrize("extra, names", TRAIN_BAD)
def test_bad_train_arguments_are_one_line(relu, run, cli, extra, names):
    _, folder = relu
    before = snapshot(folder.parent)
    size = () if "--expansion" in extra or "--d-sae" in extra else ("--expansion", "4")
    out = cli("sae", "train", str(run[1]), "--layer", "1", "--tokens", "4096", "--batch-size", "256", *size, *extra, cwd=run[0])
    assert_user_error(out.returncode, out.stderr, names)
    assert snapshot(folder.parent) == before


def test_a_layer_the_model_lacks_is_one_line(relu, run, cli):
    out = cli("sae", "train", str(run[1]), "--layer", "2", *SMALL, "--out", str(run[0] / "x"), cwd=run[0])
    assert_user_error(out.returncode, out.stderr, "--layer 2", "0..1")
    assert not (run[0] / "x").exists()


def test_force_never_deletes_files_that_are_not_an_saes(run, cli):
    cwd, folder = run
    mine = cwd / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for force in ((), ("--force",)):
        out = cli("sae", "train", str(folder), "--layer", "1", *SMALL, "--out", str(mine), *force, cwd=cwd)
        assert_user_error(out.returncode, out.stderr, "notes.txt")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep"


def test_a_damaged_or_foreign_sae_is_refused(relu, run, cli, tiny):
    from nanolm.train import train

    cwd, _ = run
    _, folder = relu
    before = snapshot(folder)
    foreign = cwd / "foreign" / "sae" / "x"  # same width, another model's fingerprint in its record
    shutil.copytree(folder, foreign)
    cfg = json.loads((foreign / "cfg.json").read_text())
    cfg["nanolm"]["model_fingerprint"] += 1.0
    (foreign / "cfg.json").write_text(json.dumps(cfg))
    out = cli("sae", "eval", str(foreign), "--model", str(run[1]), cwd=cwd)
    assert_user_error(out.returncode, out.stderr, "another model")
    out = cli("sae", "features", str(foreign), "--model", str(run[1]), cwd=cwd)
    assert_user_error(out.returncode, out.stderr, "another model")
    narrow = train(tiny(), progress=False).run_dir  # d_model 32: the SAE reads 64-wide activations
    out = cli("sae", "eval", str(folder), "--model", str(narrow), cwd=cwd)
    assert_user_error(out.returncode, out.stderr, "another model")

    out = cli("sae", "eval", str(foreign), cwd=cwd)  # not under a run: its model must be named
    assert_user_error(out.returncode, out.stderr, "--model")

    damaged = cwd / "damaged"
    shutil.copytree(folder, damaged)
    (damaged / "sae_weights.safetensors").write_bytes(b"\x00" * 100)
    out = cli("sae", "eval", str(damaged), "--model", str(run[1]), cwd=cwd)
    assert_user_error(out.returncode, out.stderr, "sae_weights.safetensors")
    (damaged / "cfg.json").write_text("{not json")
    out = cli("sae", "features", str(damaged), "--model", str(run[1]), cwd=cwd)
    assert_user_error(out.returncode, out.stderr, "cfg.json")

    out = cli("sae", "features", str(folder), "--feature", "256", cwd=cwd)
    assert_user_error(out.returncode, out.stderr, "--feature 256", "0..255")
    assert snapshot(folder) == before


def test_nan_activations_are_one_line(relu, run, cli, monkeypatch):
    """A model whose activations are NaN at the hook (monkeypatched: a saved run with NaN weights is refused
    when it loads): training, reading features and evaluating stop with one line, nothing written (the
    density plot included)."""
    from nanolm.interp.view import ModelView

    original = ModelView.run_with_cache

    def poisoned(self, tokens, names=None):
        logits, cache = original(self, tokens, names)
        return logits, {k: torch.full_like(v, float("nan")) for k, v in cache.items()}

    monkeypatch.setattr(ModelView, "run_with_cache", poisoned)
    cwd, _ = run
    _, folder = relu
    before = snapshot(folder.parent)
    out = cli("sae", "train", str(run[1]), "--layer", "1", *SMALL, "--out", str(cwd / "nan"), cwd=cwd)
    assert_user_error(out.returncode, out.stderr, "NaN")
    assert not (cwd / "nan").exists()
    for command in ("features", "eval"):
        out = cli("sae", command, str(folder), "--texts", "10", cwd=cwd)
        assert_user_error(out.returncode, out.stderr, "NaN")
    assert snapshot(folder.parent) == before


def test_direct_effect_and_marked_context_on_a_hugging_face_model():
    """GPT-2's final norm is a LayerNorm: the decoder row is centred, then scaled by γ, then W_U (by hand here);
    its tokenizer's own decoding writes the context."""
    from conftest import word_level_gpt2
    from nanolm.interp.sae.features import direct_effect, mark_context
    from nanolm.interp.sae.model import SAEConfig, SparseAutoencoder
    from nanolm.interp.view import view_of_hf

    hf, tok = word_level_gpt2(["<unk>", "<bos>", "two", "plus", "equals", "four"])
    with torch.no_grad():
        hf.transformer.ln_f.weight.uniform_(0.5, 1.5)  # not all ones: γ must be applied
    view = view_of_hf(hf, tok)
    sae = SparseAutoencoder(SAEConfig(32, 64))
    W_dec = sae.W_dec.detach().double().numpy()
    gamma = hf.transformer.ln_f.weight.detach().double().numpy()
    W_U = hf.lm_head.weight.detach().double().numpy().T  # [D, V]
    centred = W_dec[[3, 7]] - W_dec[[3, 7]].mean(1, keepdims=True)
    np.testing.assert_allclose(direct_effect(view, sae, [3, 7]).numpy(), (centred * gamma) @ W_U, rtol=1e-10)

    ids = view.to_tokens("two plus two equals")[0].tolist()  # <bos> two plus two equals
    assert mark_context(view, ids, 3, first=1) == "two plus [two] equals"
    assert mark_context(view, ids, 3, before=1, after=0, first=1) == "…plus [two]…"
