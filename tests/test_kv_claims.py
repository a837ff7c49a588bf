"""nanolm claims kv: spectral energy against numpy's SVD on planted matrices (rank 16 of 128 keeping exactly 70%),
a small change of K that flips the attention after softmax, byte counts against hand-worked numbers and against
what the compressed tensors really hold, quantization round-trip bounds, the exact K spliced back giving the
model's loss bit for bit, the whole report on a trained tiny run, and bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.special import rel_entr

from nanolm.errors import UserError
from nanolm.model import GPT, GPTConfig
from nanolm.research.kv_attention import (
    attention_kl,
    attention_log_probs,
    attention_output,
    exact_attention,
    kl_from_shift,
    recorded_qkv,
    sequence_losses,
    spliced_kv,
    split_heads,
)
from nanolm.research.kv_claims import check_kv_claim, windows_of
from nanolm.research.kv_compress import (
    CacheShape,
    Compression,
    check_compressions,
    compressor,
    energy_kept,
    gram,
    projectors,
    quantize_dequantize,
    quantize_keys,
    quantize_values,
    rank_needed,
    share_heads,
    spectrum,
)


def _orthonormal(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((n, k)))
    return q


def _planted(rng: np.random.Generator, n: int, sigma: np.ndarray) -> np.ndarray:
    """A matrix [n, len(sigma)] with exactly these singular values."""
    d = len(sigma)
    return _orthonormal(rng, n, d) @ np.diag(sigma) @ _orthonormal(rng, d, d).T


# ---- spectra ------------------------------------------------------------------------------------


def test_energy_matches_numpy_svd_batched_over_heads():
    rng = np.random.default_rng(0)
    heads = np.stack([rng.standard_normal((300, 24)) @ np.diag(np.linspace(3, 0.1, 24)) for _ in range(3)])
    ranks = [1, 4, 12, 24]
    sigma2, _ = spectrum(gram(torch.from_numpy(heads)))
    got = energy_kept(sigma2, ranks).numpy()
    for h in range(3):
        s = np.linalg.svd(heads[h], compute_uv=False) ** 2
        np.testing.assert_allclose(sigma2[h].numpy(), s, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(got[h], [s[:r].sum() / s.sum() for r in ranks], rtol=1e-12)


def test_rank_16_of_128_keeps_exactly_70_percent():
    # The reference's example: 70% of the energy on 16 directions, the other 30% spread over 112.
    sigma2 = np.r_[np.full(16, 0.70 / 16), np.full(112, 0.30 / 112)] * 1000.0
    x = _planted(np.random.default_rng(1), 1000, np.sqrt(sigma2))
    s = np.linalg.svd(x, compute_uv=False) ** 2
    assert s[:16].sum() / s.sum() == pytest.approx(0.70, abs=1e-12)  # the planted matrix is what we meant
    got_sigma2, basis = spectrum(gram(torch.from_numpy(x)[None]))
    assert float(energy_kept(got_sigma2, [16])[0, 0]) == pytest.approx(0.70, abs=1e-12)
    assert int(rank_needed(got_sigma2, 0.70)[0]) == 16
    assert int(rank_needed(got_sigma2, 0.71)[0]) == 20  # each later direction adds 0.3/112: 4 more pass 0.71
    # The rank-16 projection is numpy's truncated SVD (Eckart–Young) and leaves exactly 30% of the energy.
    x16 = x @ projectors(basis, 16, torch.float64)[0].numpy()
    u, sv, vt = np.linalg.svd(x, full_matrices=False)
    np.testing.assert_allclose(x16, u[:, :16] @ np.diag(sv[:16]) @ vt[:16], atol=1e-9)
    assert np.sum((x - x16) ** 2) / np.sum(x**2) == pytest.approx(0.30, abs=1e-12)


def test_rank_needed_levels_and_zero_matrix():
    sigma2 = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    assert [int(rank_needed(sigma2, f)[0]) for f in (0.5, 0.7, 0.9, 0.99)] == [1, 2, 3, 4]
    zero = torch.zeros(1, 4, dtype=torch.float64)
    assert energy_kept(zero, [2]).tolist() == [[1.0]] and int(rank_needed(zero, 0.9)[0]) == 0


# ---- after softmax ------------------------------------------------------------------------------


def test_a_small_change_of_k_flips_the_attention_argmax():
    # Two keys nearly tied for a sharp query: moving one key by 0.2% of K's norm swaps the winner.
    q = torch.tensor([[[[0.0, 0.0], [0.0, 0.0], [10000.0, 0.0]]]], dtype=torch.float64)  # [1, 1, T=3, 2]
    k = torch.tensor([[[[0.0, 0.0], [1.0, 0.0], [0.999, 0.0]]]], dtype=torch.float64)
    k_hat = k.clone()
    k_hat[..., 2, 0] = 1.001
    rel_k = float((k_hat - k).norm() / k.norm())
    assert rel_k < 0.002
    logp, logp_hat = attention_log_probs(q, k), attention_log_probs(q, k_hat)
    p, p_hat = logp[0, 0, 2].exp().numpy(), logp_hat[0, 0, 2].exp().numpy()
    assert p.argmax() == 1 and p_hat.argmax() == 2
    kl_ref = rel_entr(p, p_hat).sum()  # scipy, the definition
    assert float(attention_kl(logp, logp_hat)[0, 0, 2]) == pytest.approx(kl_ref, rel=1e-9)
    assert kl_ref > 5.0  # nats: a 0.2% change of K, a near-total change of where the query looks
    assert 0.5 * np.abs(p - p_hat).sum() > 0.99


def test_kl_from_the_score_shift_equals_the_definition():
    g = torch.Generator().manual_seed(0)
    B, H, T, Dh = 2, 3, 12, 8
    q, k, v = (torch.randn(B, H, T, Dh, generator=g, dtype=torch.float64) for _ in range(3))
    k_hat = k + 0.3 * torch.randn(B, H, T, Dh, generator=g, dtype=torch.float64)
    attn = GPT(GPTConfig(n_head=H, d_model=H * Dh, n_layer=1, vocab_size=11, block_size=T)).blocks[0].attn.double()
    exact = exact_attention(attn, q, k, v)
    kl, top = kl_from_shift(exact, q, k, k_hat)
    logp, logp_hat = attention_log_probs(q, k), attention_log_probs(q, k_hat)
    ref = np.array(
        [
            [
                [rel_entr(logp[b, h, t, : t + 1].exp().numpy(), logp_hat[b, h, t, : t + 1].exp().numpy()).sum() for t in range(T)]
                for h in range(H)
            ]
            for b in range(B)
        ]
    )
    np.testing.assert_allclose(kl.numpy(), ref, rtol=1e-9, atol=1e-12)
    assert torch.equal(top, logp_hat.argmax(-1))
    assert float(kl_from_shift(exact, q, k, k)[0].abs().max()) == 0.0  # an unchanged K: exactly 0


# ---- bytes --------------------------------------------------------------------------------------


def test_bytes_per_token_by_hand_for_the_small_preset():
    # small: 6 heads of 64, float32 (4 B). Full K+V: 2·6·64·4 = 3072 B per token per layer.
    shape = CacheShape(n_head=6, d_head=64, dtype_bytes=4)
    assert shape.full_bytes() == 3072
    assert shape.bytes_per_token(Compression("rank", 16)) == 768  # 2·6·16·4
    assert shape.fixed_bytes(Compression("rank", 16)) == 49152  # two bases 6·64·16 numbers: 2·6·64·16·4
    # int4: codes 2·6·64·4/8 = 384; key scale+zero per channel per 32 tokens 2·6·64·4/32 = 96; value 2·6·4 = 48
    assert shape.bytes_per_token(Compression("quant", 4)) == 384 + 96 + 48 == 528
    assert shape.bytes_per_token(Compression("quant", 8)) == 768 + 96 + 48 == 912
    assert shape.bytes_per_token(Compression("groups", 2)) == 1536  # 3 shared heads: 2·3·64·4
    assert shape.bytes_per_token(Compression("groups", 3)) == 1024
    assert shape.ratio(Compression("rank", 8)) == 8.0  # the reference's 8x is rank head_size / 8
    assert shape.bytes_per_token(Compression("rank_k", 16)) == 384 + 1536  # K at rank 16: 6·16·4; V whole: 6·64·4
    assert shape.fixed_bytes(Compression("rank_k", 16)) == 24576  # K's basis alone
    assert shape.matching_rank(912) == 19  # 19·48 = 912
    bf16 = CacheShape(n_head=6, d_head=64, dtype_bytes=2)  # the same in bf16: 384 + 48 + 24
    assert bf16.bytes_per_token(Compression("quant", 4)) == 456


def test_the_compressed_tensors_hold_no_more_than_the_bytes_count():
    g = torch.Generator().manual_seed(1)
    B, H, T, Dh = 2, 4, 64, 16
    k, v = torch.randn(B, H, T, Dh, generator=g), torch.randn(B, H, T, Dh, generator=g)
    basis = spectrum(gram(k.transpose(0, 1).flatten(1, 2)))[1]
    proj = projectors(basis, 3, torch.float32)[None]
    k3, _ = compressor(Compression("rank", 3), proj, proj)(0, k, v)
    for h in range(H):  # rank r: r coefficients per token and head suffice
        assert np.linalg.matrix_rank(k3[:, h].reshape(-1, Dh).double().numpy(), tol=1e-4) == 3
    kq, vq = compressor(Compression("quant", 2))(0, k, v)
    for group in kq.split(32, dim=2):  # 2 bits: at most 4 values per key channel per 32 tokens
        assert int(_distinct(group, dim=2).max()) == 4
    assert int(_distinct(vq, dim=3).max()) == 4  # and per value token and head
    kg, _ = compressor(Compression("groups", 2))(0, k, v)  # groups of 2: H/2 distinct heads, each a mean
    assert torch.equal(kg[:, 0], kg[:, 1]) and torch.equal(kg[:, 2], kg[:, 3])
    torch.testing.assert_close(kg[:, 0], (k[:, 0] + k[:, 1]) / 2)


def _distinct(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The number of distinct values along dim."""
    s = x.sort(dim=dim).values
    return 1 + (s.diff(dim=dim) != 0).sum(dim=dim)


# ---- quantization -------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_round_trip_error_is_at_most_half_a_step(bits):
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(5, 7, 33, generator=g) * torch.logspace(-2, 2, 33)
    x_hat, scale = quantize_dequantize(x, bits, dim=-1)
    assert bool(((x - x_hat).abs() <= scale / 2 * (1 + 1e-5) + 1e-6).all())
    assert float(scale.max()) > 0 and bool(((x - x_hat).abs() > 0).any())  # the bound is not met trivially
    lo, hi = x.amin(-1), x.amax(-1)  # the extremes are levels themselves
    torch.testing.assert_close(x_hat.amin(-1), lo)
    torch.testing.assert_close(x_hat.amax(-1), hi)


def test_keys_per_channel_in_groups_of_tokens_and_values_per_token():
    g = torch.Generator().manual_seed(2)
    k = torch.randn(2, 3, 70, 8, generator=g)  # 70 tokens: groups of 32, 32 and 6
    k[:, :, :, 5] = 3.0  # a constant channel comes back exactly
    k_hat = quantize_keys(k, 4)
    for start in (0, 32, 64):
        part, part_hat = k[:, :, start : start + 32], k_hat[:, :, start : start + 32]
        step = (part.amax(2) - part.amin(2)) / 15  # one scale per channel per group
        assert bool(((part - part_hat).abs() <= step[:, :, None] / 2 * (1 + 1e-5) + 1e-6).all())
    assert bool((k_hat[..., 5] == 3.0).all())
    v = torch.randn(2, 3, 70, 8, generator=g)
    v_hat = quantize_values(v, 4)
    step = (v.amax(-1) - v.amin(-1)) / 15
    assert bool(((v - v_hat).abs() <= step[..., None] / 2 * (1 + 1e-5) + 1e-6).all())


def test_share_heads_is_the_group_mean():
    x = torch.arange(2 * 6 * 3 * 2, dtype=torch.float32).view(2, 6, 3, 2)
    y = share_heads(x, 3)
    torch.testing.assert_close(y[:, 0], x[:, 0:3].mean(1))
    torch.testing.assert_close(y[:, 5], x[:, 3:6].mean(1))


# ---- splicing -----------------------------------------------------------------------------------


def _model(pos: str = "rope") -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=37, block_size=24, n_layer=2, n_head=4, d_model=32, pos=pos)).eval()


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_the_exact_k_spliced_in_changes_the_loss_by_exactly_zero(pos):
    model = _model(pos)
    windows = torch.randint(0, 37, (6, 25), generator=torch.Generator().manual_seed(3))
    plain = sequence_losses(model, windows, batch=3)
    spliced = sequence_losses(model, windows, batch=3, compress=compressor(Compression("exact")))
    assert torch.equal(plain, spliced)
    # ... and the splice does reach the attention: a compressed K changes the loss
    changed = sequence_losses(model, windows, batch=3, compress=compressor(Compression("groups", 4)))
    assert float((changed - plain).abs().max()) > 1e-4


def test_recorded_keys_are_those_the_cache_holds():
    model = _model()
    x = torch.randint(0, 37, (2, 10), generator=torch.Generator().manual_seed(4))
    caches = model.new_kv_cache()
    with torch.no_grad(), recorded_qkv(model) as kept:
        model(x)
        q, k, v = split_heads(model, kept[1])
        y = attention_output(model.blocks[1].attn, q, k, v)
    with torch.no_grad():  # the model's own KV cache holds the same keys and values, after rotary
        model(x, kv_cache=caches)
    assert torch.equal(caches[1].k[:, :, :10], k) and torch.equal(caches[1].v[:, :, :10], v)
    with torch.no_grad():
        _, cache = model.run_with_cache(x, ["blocks.1.hook_attn_out"])
    assert torch.equal(cache["blocks.1.hook_attn_out"], y)
    with torch.no_grad(), spliced_kv(model, lambda layer, k_, v_: (k_, v_)):
        _, again = model.run_with_cache(x, ["blocks.1.hook_attn_out"])
    assert torch.equal(again["blocks.1.hook_attn_out"], y)


# ---- the report ---------------------------------------------------------------------------------


def test_windows_do_not_overlap_and_too_little_text_is_one_error():
    tokens = torch.arange(100)
    w = windows_of(tokens, 4, 20)
    assert w.shape == (4, 21) and w[:, 0].tolist() == [0, 25, 50, 75]
    with pytest.raises(UserError, match="--sequences 4 or fewer"):
        windows_of(tokens, 5, 24)


def test_report_on_a_random_model_is_consistent():
    model = _model()
    windows = torch.randint(0, 37, (12, 25), generator=torch.Generator().manual_seed(5))
    r = check_kv_claim(model, windows, ranks=[2, 8], bits=[8, 2], groups=[2, 4], note="MLA did it")
    assert [c.method for c in r.compressions] == ["rank 2", "rank 8", "int8", "int2", "groups of 2", "groups of 4"]
    full = r.result("rank 8")  # rank = head size: nothing lost (up to float32 rounding of the projection)
    assert abs(full.delta_loss) < 1e-4 and full.lossless and full.kl < 1e-8
    for c in r.compressions:
        assert c.lossless == (abs(c.delta_loss) <= 2 * r.loss_se)
        assert c.delta_ci[0] <= c.delta_loss <= c.delta_ci[1]
    # The bootstrap SE of a mean is about std / sqrt(n) (an independent formula).
    exact = sequence_losses(model, windows, batch=12).numpy()
    assert r.loss_se == pytest.approx(exact.std(ddof=1) / math.sqrt(len(exact)), rel=0.15)
    assert r.loss == pytest.approx(float(exact.mean()), abs=1e-12)
    for s in r.spectra:  # energy grows with rank; a head of size 8 keeps everything at rank 8
        assert s.k_energy[0] <= s.k_energy[1] == pytest.approx(1.0)
    assert r.questions[2].answer[-1] == "note: MLA did it"
    assert [q.question for q in r.questions] == [
        "Are the theorem's conditions met?",
        "Do the baselines get the same information?",
        "Is there prior work?",
    ]
    assert all(b.budget_bytes < r.full_bytes_per_token for b in r.budgets)
    # question (1) is about K alone: V left exact, so the attention output moves less than with V truncated too
    assert [c.method for c in r.key_only] == ["rank 2, K only", "rank 8, K only"]
    k2, kv2 = r.result("rank 2, K only"), r.result("rank 2")
    assert k2.kl == pytest.approx(kv2.kl) and k2.key_error == pytest.approx(kv2.key_error)  # the same K
    assert k2.output_error < kv2.output_error
    assert abs(r.result("rank 8, K only").delta_loss) < 1e-4
    assert "with K alone at rank 2 (V exact)" in r.questions[0].answer[1]
    assert not any(b.winner.endswith("K only") for b in r.budgets)  # equal memory compares K and V compressed


def test_bad_compressions_are_user_errors():
    with pytest.raises(UserError, match="head size 16"):
        check_compressions(4, 16, [32], [], [])
    with pytest.raises(UserError, match="supported bit widths are 2, 4, 8"):
        check_compressions(4, 16, [], [3], [])
    with pytest.raises(UserError, match="divide the 6 heads; here: 2, 3, 6"):
        check_compressions(6, 16, [], [], [4])


def test_cli_writes_the_report_under_the_run(kv_run, cli):
    r = cli(
        "claims",
        "kv",
        str(kv_run),
        "--ranks",
        "2,4,8",
        "--bits",
        "8,4",
        "--groups",
        "2",
        "--sequences",
        "8",
        "--length",
        "32",
        "--note",
        "see MLA",
        "--json",
        cwd=kv_run.parent,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    saved = kv_run / "claims" / "kv.json"
    assert out["saved_to"] == [str(saved)]
    on_disk = json.loads(saved.read_text())
    assert on_disk["note"] == "see MLA" and on_disk["sequences"] == 8 and on_disk["tokens_per_sequence"] == 32
    assert on_disk["data"].startswith("validation split")
    assert [c["method"] for c in on_disk["compressions"]] == ["rank 2", "rank 4", "rank 8", "int8", "int4", "groups of 2"]
    assert on_disk["full_bytes_per_token"] == 2 * 4 * 8 * 4
    r = cli(
        "claims",
        "kv",
        str(kv_run),
        "--ranks",
        "4",
        "--bits",
        "",
        "--groups",
        "",
        "--sequences",
        "4",
        "--length",
        "16",
        cwd=kv_run.parent,
    )
    assert r.returncode == 0, r.stderr
    assert "Are the theorem's conditions met?" in r.stdout and "replaced" in r.stderr


def test_the_run_page_shows_the_claim_with_the_saved_numbers(kv_run, cli):
    r = cli(
        "claims",
        "kv",
        str(kv_run),
        "--ranks",
        "2,4",
        "--bits",
        "4",
        "--groups",
        "2",
        "--sequences",
        "4",
        "--length",
        "16",
        "--note",
        "MLA learns the latent",
        "--report",
        cwd=kv_run.parent,
    )
    assert r.returncode == 0, r.stderr
    assert (kv_run / "report.html").is_file(), "--report writes the run's page"
    saved = json.loads((kv_run / "claims" / "kv.json").read_text())
    r = cli("report", str(kv_run), "--json", cwd=kv_run.parent)
    assert r.returncode == 0, r.stderr
    section = next(s for s in json.loads(r.stdout)["sections"] if s["key"] == "claims")
    table = next(t for t in section["tables"] if t["key"].endswith("compressions"))
    assert [row[0] for row in table["rows"]] == [c["method"] for c in saved["compressions"]]
    assert [row[7] for row in table["rows"]] == [c["delta_loss"] for c in saved["compressions"]]
    assert [row[1] for row in table["rows"]] == [c["bytes_per_token"] for c in saved["compressions"]]
    assert any("Are the theorem's conditions met?" in line for line in section["lines"])
    assert "Note: MLA learns the latent" in section["lines"]


def test_data_file_is_read_with_the_run_tokenizer(kv_run, cli, tmp_path):
    from nanolm.corpus import generate_corpus

    text = "\n".join(generate_corpus(400, seed=7).lines) + "\nthe zyzzyva sat .\n"
    held_out = tmp_path / "held.txt"
    held_out.write_text(text)
    r = cli(
        "claims",
        "kv",
        str(kv_run),
        "--data",
        str(held_out),
        "--ranks",
        "4",
        "--bits",
        "4",
        "--groups",
        "2",
        "--sequences",
        "4",
        "--length",
        "32",
        "--json",
        cwd=kv_run.parent,
    )
    assert r.returncode == 0, r.stderr
    assert "'zyzzyva'" in r.stderr and "unknown" in r.stderr
    saved = kv_run / "claims" / "kv-held.json"
    assert json.loads(saved.read_text())["data"] == str(held_out)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ranks", "16"], "--ranks 16: a rank must be from 1 to the head size 8"),
        (["--ranks", "4,x"], "'x' is not a whole number"),
        (["--bits", "3"], "--bits 3: supported bit widths are 2, 4, 8"),
        (["--groups", "3"], "--groups 3: a group size must be at least 2 and divide the 4 heads; here: 2, 4"),
        (["--length", "64"], "--length 64: give 1 to the model's context of 32 tokens"),
        (["--sequences", "5000"], "not enough for 5000 sequences"),
        (["--data", "missing.txt"], "--data missing.txt: no such file"),
        (["--ranks", "", "--bits", "", "--groups", ""], "nothing to measure"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_and_writes_nothing(kv_run, cli, args, message):
    before = sorted(p.name for p in kv_run.iterdir())
    r = cli("claims", "kv", str(kv_run), *args, cwd=kv_run.parent)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert sorted(p.name for p in kv_run.iterdir()) == before


def test_missing_run_in_a_real_process(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "nanolm", "claims", "kv", "no-such-run", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("nanolm: error: run 'no-such-run' not found") and len(r.stderr.splitlines()) == 1


def test_a_run_that_cannot_take_the_report_still_gets_the_measurement(kv_run, cli, tmp_path):
    import shutil

    run = tmp_path / "blocked"
    shutil.copytree(kv_run, run)
    shutil.rmtree(run / "claims", ignore_errors=True)
    (run / "claims").write_text("a file where the claims folder would go")
    r = cli(
        "claims",
        "kv",
        str(run),
        "--ranks",
        "4",
        "--bits",
        "",
        "--groups",
        "",
        "--sequences",
        "4",
        "--length",
        "16",
        "--json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "the report was not saved at" in r.stderr and json.loads(r.stdout)["saved_to"] == []
    assert json.loads(r.stdout)["compressions"][0]["method"] == "rank 4"
