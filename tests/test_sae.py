"""Sparse autoencoders: every metric against a brute-force float64 computation, TopK's exact L0, a planted
dictionary recovered by both architectures, the identity splice, the saved layout, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nanolm.errors import UserError
from nanolm.interp.sae.metrics import ce_recovered, evaluate_sae, fvu, l0
from nanolm.interp.sae.model import SAEConfig, SparseAutoencoder, load_sae, spliced
from nanolm.interp.sae.store import collect_store, store_from_tensor
from nanolm.interp.sae.train import TrainSettings, fit_sae, geometric_median


def planted(D: int = 32, M: int = 128, active: int = 3, N: int = 40_000, seed: int = 0):
    """x = Σ a_i d_i over a known dictionary of M unit atoms (D-dim), `active` atoms per row."""
    g = torch.Generator().manual_seed(seed)
    atoms = torch.randn(M, D, generator=g)
    atoms /= atoms.norm(dim=1, keepdim=True)
    idx = torch.stack([torch.randperm(M, generator=g)[:active] for _ in range(N)])
    codes = torch.zeros(N, M).scatter_(1, idx, torch.rand(N, active, generator=g) * 2 + 0.5)
    return codes @ atoms, atoms


def identity_sae(d: int, hook: str = "") -> SparseAutoencoder:
    """M = 2D latents relu(x) and relu(-x): x̂ = relu(x) - relu(-x) = x exactly."""
    sae = SparseAutoencoder(SAEConfig(d, 2 * d, hook_name=hook))
    eye = torch.eye(d)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], dim=1))
        sae.W_dec.copy_(torch.cat([eye, -eye], dim=0))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


# ---- metrics against brute force ---------------------------------------------------------------------


def test_metrics_match_a_brute_force_float64_computation():
    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 1.0, size=(50, 6))  # far from zero: FVU about zero would be ~25x smaller
    x_hat = x + rng.normal(0, 0.5, size=x.shape)
    mean = x.mean(0)
    num = sum(((x[i] - x_hat[i]) ** 2).sum() for i in range(50))
    den = sum(((x[i] - mean) ** 2).sum() for i in range(50))
    about_zero = num / sum((x[i] ** 2).sum() for i in range(50))
    got = fvu(torch.tensor(x), torch.tensor(x_hat))
    assert got == pytest.approx(num / den, rel=1e-12)
    assert got > 10 * about_zero  # the SAELens bug would report the smaller number
    f = torch.tensor([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert l0(f) == pytest.approx((2 + 1 + 0) / 3)
    assert ce_recovered(2.0, 2.5, 4.0) == pytest.approx(0.75)
    assert ce_recovered(2.0, 2.0, 4.0) == 1.0 and ce_recovered(2.0, 4.0, 4.0) == 0.0
    assert math.isnan(ce_recovered(2.0, 2.0, 2.0))


def test_topk_keeps_exactly_k_latents():
    sae = SparseAutoencoder(SAEConfig(16, 64, "topk", k=20))
    with torch.no_grad():
        sae.b_enc.fill_(10.0)  # every pre-activation positive: ReLU keeps all K
    f = sae.encode(torch.randn(200, 16))
    assert ((f > 0).sum(-1) == 20).all() and l0(f) == 20.0


def test_geometric_median_resists_outliers():
    x = torch.cat([torch.zeros(99, 3), torch.full((1, 3), 1e6)])
    assert geometric_median(x).abs().max() < 1.0  # the mean would be 1e4
    assert x.mean(0).abs().max() > 1e3


# ---- training --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, extra", [("relu", {"l1": 0.03}), ("topk", {"k": 3})])
def test_a_planted_dictionary_is_recovered(arch, extra):
    torch.set_num_threads(1)
    x, atoms = planted()
    result = fit_sae(store_from_tensor(x), TrainSettings(arch=arch, d_sae=128, lr=1e-3, batch_size=256, steps=2500, **extra))
    dec = result.sae.W_dec.detach()
    dec = dec / dec.norm(dim=1, keepdim=True)
    mean_best_cosine = float((atoms @ dec.T).max(dim=1).values.mean())
    assert mean_best_cosine >= 0.9, mean_best_cosine
    assert result.tokens == 2500 * 256 and result.history[-1]["step"] == 2499


def test_the_training_scale_is_folded_into_the_saved_weights(tmp_path):
    x, _ = planted(N=4000)
    x = x * 37.0 + 3.0  # raw activations far from unit scale
    result = fit_sae(store_from_tensor(x), TrainSettings(d_sae=64, batch_size=256, steps=50))
    assert result.scale == pytest.approx(math.sqrt(32 / float((x.double() ** 2).sum(1).mean())), rel=0.05)
    sae = result.sae
    # The folded SAE on raw x equals the unfolded one on x·s, rescaled back.
    unfolded = SparseAutoencoder(sae.cfg)
    unfolded.load_state_dict(sae.state_dict())
    unfolded.fold_scale(1 / result.scale)
    with torch.no_grad():
        assert torch.allclose(sae(x[:100]), unfolded(x[:100] * result.scale) / result.scale, atol=1e-4)
        assert torch.equal(sae.encode(x[:100]) > 0, unfolded.encode(x[:100] * result.scale) > 0)
    sae.save(tmp_path / "sae", result.densities)
    again = load_sae(tmp_path / "sae")
    with torch.no_grad():
        assert torch.equal(again(x[:100]), sae(x[:100]))


def test_saved_in_saelens_layout(tmp_path):
    from safetensors.torch import load_file

    sae = SparseAutoencoder(SAEConfig(8, 32, "topk", k=4, hook_name="blocks.1.hook_resid_post", hook_layer=1))
    sae.save(tmp_path / "s", torch.full((32,), 0.01))
    cfg = json.loads((tmp_path / "s" / "cfg.json").read_text())
    assert cfg["architecture"] == "topk" and cfg["d_in"] == 8 and cfg["d_sae"] == 32
    assert cfg["activation_fn_kwargs"] == {"k": 4} and cfg["hook_name"] == "blocks.1.hook_resid_post"
    tensors = load_file(str(tmp_path / "s" / "sae_weights.safetensors"))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == {"W_enc": (8, 32), "W_dec": (32, 8), "b_enc": (32,), "b_dec": (8,)}
    assert load_file(str(tmp_path / "s" / "sparsity.safetensors"))["sparsity"][0] == pytest.approx(-2.0)
    # A config in SAELens's own keys only (no "nanolm" record) loads too.
    del cfg["nanolm"]
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    assert load_sae(tmp_path / "s").cfg.k == 4


def test_collection_goes_to_disk_above_the_ram_budget(tmp_path):
    x, _ = planted(N=3000)
    batches = (x[i : i + 500] for i in range(0, 3000, 500))
    store = collect_store(batches, 2600, 32, folder=tmp_path, ram_bytes=1000)
    assert store.path is not None and store.path.parent == tmp_path and store.n == 2600
    assert torch.equal(store.take(torch.tensor([5, 2599, 0])), x[[5, 2599, 0]])
    store.close()
    assert not list(tmp_path.iterdir())


# ---- on a model: splicing and the evaluation -----------------------------------------------------------


@pytest.fixture(scope="module")
def view(trained_run):
    from nanolm.interp.view import load_view

    return load_view(trained_run)


def test_splicing_the_identity_recovers_everything(view):
    hook = "blocks.0.hook_resid_post"
    texts = ["two plus two equals four .", "the cat was happy because it saw a friend ."]
    result = evaluate_sae(view, identity_sae(view.d_model, hook), texts)
    assert result.ce_spliced == pytest.approx(result.ce_clean, abs=1e-5)
    assert result.ce_recovered_zero == pytest.approx(1.0, abs=1e-5)
    assert result.ce_recovered_mean == pytest.approx(1.0, abs=1e-5)
    assert result.fvu == pytest.approx(0.0, abs=1e-10) and result.kl == pytest.approx(0.0, abs=1e-7)
    ids = view.to_tokens(texts[0])
    with torch.no_grad(), spliced(view, identity_sae(view.d_model, hook)):
        assert torch.allclose(view.logits(ids), view.logits(ids), atol=0)


def test_evaluation_matches_brute_force_on_a_model(view):
    torch.manual_seed(0)
    hook = "blocks.1.hook_resid_post"
    sae = SparseAutoencoder(SAEConfig(view.d_model, 4 * view.d_model, hook_name=hook))
    texts = ["two plus two equals four .", "she walked to the park and she saw a dog .", "what is three times two ?"]
    got = evaluate_sae(view, sae, texts, batch_size=2)
    xs, clean, zero, mean_logits, spliced_logits = [], [], [], [], []
    with torch.no_grad():
        for text in texts:  # one text at a time: no padding anywhere
            ids = view.to_tokens(text)
            logits, cache = view.run_with_cache(ids, [hook])
            xs.append(cache[hook][0].double())
            clean.append((ids, logits))
        x = torch.cat(xs)
        x_bar = x.mean(0)
        for ids, _ in clean:
            with view.edit(hook, lambda a: torch.zeros_like(a)):
                zero.append(view.logits(ids))
            with view.edit(hook, lambda a: x_bar.float().expand_as(a).clone()):
                mean_logits.append(view.logits(ids))
            with view.edit(hook, lambda a: sae(a)):
                spliced_logits.append(view.logits(ids))
        f = sae.encode(x.float())
        x_hat = sae(x.float()).double()

    def ce(all_logits):
        nll = [F.cross_entropy(lg[0, :-1].double(), ids[0, 1:], reduction="sum") for (ids, _), lg in zip(clean, all_logits)]
        return float(sum(nll)) / sum(ids.shape[1] - 1 for ids, _ in clean)

    ce_clean = ce([lg for _, lg in clean])
    assert got.tokens == x.shape[0] and got.positions == sum(ids.shape[1] - 1 for ids, _ in clean)
    assert got.fvu == pytest.approx(float(((x - x_hat) ** 2).sum() / ((x - x_bar) ** 2).sum()), rel=1e-6)
    assert got.mse == pytest.approx(float(((x - x_hat) ** 2).mean()), rel=1e-6)
    assert got.l0 == pytest.approx(float((f > 0).double().sum(1).mean()), rel=1e-9)
    assert got.ce_clean == pytest.approx(ce_clean, rel=1e-6)
    assert got.ce_zero_ablated == pytest.approx(ce(zero), rel=1e-6)
    assert got.ce_mean_ablated == pytest.approx(ce(mean_logits), rel=1e-6)
    assert got.ce_spliced == pytest.approx(ce(spliced_logits), rel=1e-6)
    assert got.ce_recovered_mean == pytest.approx((ce(mean_logits) - ce(spliced_logits)) / (ce(mean_logits) - ce_clean), rel=1e-6)
    counts = (f > 0).sum(0)
    assert got.dead == int((counts == 0).sum()) and got.dense == int((counts / x.shape[0] > 0.1).sum())


def test_train_sae_on_a_run_end_to_end(view, tmp_path):
    from nanolm.interp.sae.pipeline import load_sae_for, train_sae

    result = train_sae(view, 1, "resid_post", TrainSettings(arch="topk", k=8, expansion=4, batch_size=256), tokens=4096)
    assert result.steps == 16 and result.sae.cfg.hook_name == "blocks.1.hook_resid_post"
    assert result.sae.cfg.model_fingerprint is not None
    result.sae.save(tmp_path / "sae")
    assert load_sae_for(view, tmp_path / "sae").cfg.k == 8


# ---- bad input -------------------------------------------------------------------------------------------


def test_bad_settings_are_one_clear_error():
    x, _ = planted(N=600)
    store = store_from_tensor(x)
    for settings, match in (
        (TrainSettings(arch="topk", d_sae=16, k=16), "below the dictionary size"),
        (TrainSettings(arch="topk", k=0), "--k must be a positive integer"),
        (TrainSettings(l1=-1.0), "--l1 must be a number >= 0"),
        (TrainSettings(expansion=0), "--expansion must be a positive integer"),
        (TrainSettings(batch_size=1024), "fewer than one batch"),
    ):
        with pytest.raises(UserError, match=match):
            fit_sae(store, settings)
    bad = x.clone()
    bad[123, 4] = float("nan")
    with pytest.raises(UserError, match="row 123"):
        store_from_tensor(bad)
    batches = iter([x[:100], bad[100:200]])
    with pytest.raises(UserError, match="token 100"):
        collect_store(batches, 1000, 32)


def test_a_damaged_or_foreign_sae_is_refused(view, tmp_path):
    from nanolm.interp.sae.pipeline import load_sae_for

    sae = identity_sae(view.d_model, "blocks.0.hook_resid_post")
    sae.cfg.model_fingerprint = 12345.0  # another model's
    sae.save(tmp_path / "other")
    with pytest.raises(UserError, match="trained on another model"):
        load_sae_for(view, tmp_path / "other")
    (tmp_path / "other" / "sae_weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(UserError, match="damaged weights"):
        load_sae(tmp_path / "other")
    (tmp_path / "other" / "cfg.json").write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        load_sae(tmp_path / "other")
    with pytest.raises(UserError, match="not an SAE folder"):
        load_sae(tmp_path / "missing")
