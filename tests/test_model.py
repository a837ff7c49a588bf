"""The model: shapes, causality, parameter counts by hand, hooks, and the forward pass against an
independent float64 implementation written from the equations."""

from __future__ import annotations

import math

import pytest
import torch

from nanolm.model import GPT, GPTConfig, preset_config


def small_model(**kw) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(**{"vocab_size": 50, "block_size": 16, "n_layer": 2, "n_head": 2, "d_model": 16, **kw})
    return GPT(cfg).eval()


def reference_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """logits [B, T, V] in float64 from the weights, with explicit masks, softmax and rotations."""
    cfg = model.cfg
    W = {k: v.detach().double() for k, v in model.state_dict().items()}
    B, T = idx.shape
    H, Dh = cfg.n_head, cfg.d_head

    def rms(x, g):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.norm_eps) * g

    def rotate(x):  # x [B, H, T, Dh]; pair i with i + Dh/2 as a complex number times e^{i t theta_i}
        half = Dh // 2
        theta = torch.tensor([cfg.rope_base ** (-2 * i / Dh) for i in range(half)], dtype=torch.float64)
        angle = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]
        z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(angle), angle)
        return torch.cat((z.real, z.imag), dim=-1)

    x = W["embed.weight"][idx]
    if cfg.pos == "learned":
        x = x + W["pos_embed.weight"][:T]
    mask = torch.ones(T, T).tril().bool()
    for l in range(cfg.n_layer):
        p = f"blocks.{l}."
        h = rms(x, W[p + "ln1.weight"])
        q, k, v = (h @ W[p + "attn.qkv.weight"].T).split(cfg.d_model, dim=-1)
        q, k, v = (t.reshape(B, T, H, Dh).transpose(1, 2) for t in (q, k, v))
        if cfg.pos == "rope":
            q, k = rotate(q), rotate(k)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        att = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, cfg.d_model)
        x = x + y @ W[p + "attn.proj.weight"].T
        h = rms(x, W[p + "ln2.weight"])
        a = h @ W[p + "mlp.fc.weight"].T
        gelu = 0.5 * a * (1 + torch.erf(a / math.sqrt(2)))
        x = x + gelu @ W[p + "mlp.proj.weight"].T
    return rms(x, W["ln_final.weight"]) @ W["unembed.weight"].T


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_forward_matches_float64_reference(pos):
    model = small_model(pos=pos)
    # Non-trivial gains, so that a missing gamma would show.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name.startswith("ln_final"):
                p.uniform_(0.5, 1.5)
    idx = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(1))
    logits, _ = model(idx)
    ref = reference_logits(model, idx)
    assert logits.shape == (3, 16, 50)
    torch.testing.assert_close(logits.double(), ref, atol=1e-5, rtol=1e-5)


def test_loss_is_cross_entropy_in_nats():
    model = small_model()
    idx = torch.randint(0, 50, (2, 8))
    logits, loss = model(idx, idx)
    logp = torch.log_softmax(logits.double(), -1)
    expected = -logp.gather(-1, idx[..., None]).mean()
    assert abs(loss.item() - expected.item()) < 1e-5


def test_causality_future_tokens_do_not_change_the_past():
    model = small_model()
    idx = torch.randint(0, 50, (1, 16), generator=torch.Generator().manual_seed(2))
    t = 9
    changed = idx.clone()
    changed[0, t] = (idx[0, t] + 1) % 50
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], atol=1e-6, rtol=0)
    assert (a[:, t:] - b[:, t:]).abs().max() > 1e-4  # the change is seen from t on


def test_parameter_counts_by_hand():
    # V=10, D=8, L=1, MLP 32: embed 80; block: ln 8 + qkv 192 + proj 64 + ln 8 + fc 256 + proj 256 = 784;
    # final norm 8; unembed 80. Total 952; without the embedding lookup 872.
    cfg = GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, d_model=8)
    model = GPT(cfg)
    assert model.num_params() == 952
    assert model.num_params(exclude_embeddings=True) == 872
    learned = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, d_model=8, pos="learned"))
    assert learned.num_params() == 952 + 32 and learned.num_params(exclude_embeddings=True) == 872
    tied = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, d_model=8, tie_embeddings=True))
    assert tied.num_params() == 872 and tied.num_params(exclude_embeddings=True) == 872
    assert tied.unembed.weight is tied.embed.weight


def test_gpt2_preset_has_gpt2_small_shape():
    cfg = preset_config("gpt2-124m")
    assert (cfg.n_layer, cfg.n_head, cfg.d_model, cfg.block_size, cfg.vocab_size) == (12, 12, 768, 1024, 50304)
    # 12 layers x 12 d^2 weights = 84.9M non-embedding in blocks, plus W_U 768 x 50304 (nanoGPT's 6N convention).
    model = GPT(preset_config("gpt2-124m", n_layer=1))
    assert model.num_params(exclude_embeddings=True) == 12 * 768**2 + 2 * 768 + 768 + 768 * 50304


def test_flops_per_token_adds_attention_term():
    model = small_model()
    n = model.num_params(exclude_embeddings=True)
    assert model.flops_per_token(T=16, with_attention=False) == 6 * n
    assert model.flops_per_token(T=16) == 6 * n + 12 * 2 * 16 * 16


def test_hook_names_follow_transformerlens():
    names = list(small_model().hook_points())
    assert names[0] == "hook_embed" and names[-1] == "ln_final.hook_normalized"
    for l in range(2):
        for point in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            assert f"blocks.{l}.hook_{point}" in names


def test_cache_holds_exactly_what_the_forward_used():
    model = small_model()
    idx = torch.randint(0, 50, (2, 12))
    logits, cache = model.run_with_cache(idx)
    # The last residual stream, through the final norm and W_U, is the output, bit for bit.
    assert torch.equal(model.unembed(model.ln_final(cache["blocks.1.hook_resid_post"])), logits)
    assert torch.equal(cache["ln_final.hook_normalized"] @ model.W_U, logits)
    assert torch.equal(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"])
    assert torch.equal(cache["blocks.0.hook_resid_mid"], cache["blocks.0.hook_resid_pre"] + cache["blocks.0.hook_attn_out"])
    assert torch.equal(cache["blocks.0.hook_resid_post"], cache["blocks.0.hook_resid_mid"] + cache["blocks.0.hook_mlp_out"])
    assert torch.equal(cache["hook_embed"], model.embed(idx))
    plain, _ = model(idx)
    assert torch.equal(plain, logits)


def test_run_with_cache_subset_and_predicate():
    model = small_model()
    idx = torch.randint(0, 50, (1, 5))
    _, cache = model.run_with_cache(idx, ["blocks.0.hook_mlp_out"])
    assert list(cache) == ["blocks.0.hook_mlp_out"]
    _, cache = model.run_with_cache(idx, lambda n: n.endswith("resid_post"))
    assert list(cache) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def test_a_hook_can_replace_an_activation_and_is_removed_afterwards():
    model = small_model()
    idx = torch.randint(0, 50, (1, 6))
    before, _ = model(idx)
    with model.hooks({"blocks.1.hook_resid_post": lambda x, name: torch.zeros_like(x)}):
        zeroed, _ = model(idx)
    assert torch.equal(zeroed, torch.zeros_like(zeroed))  # RMSNorm(0) = 0, then W_U: all logits zero
    after, _ = model(idx)
    assert torch.equal(before, after)
    assert all(not p.fns for p in model.hook_points().values())


def test_hooks_are_removed_on_error_and_unknown_names_are_refused():
    model = small_model()
    with pytest.raises(RuntimeError), model.hooks({"hook_embed": lambda x, n: None}):
        raise RuntimeError("boom")
    assert not model.hook_points()["hook_embed"].fns
    with pytest.raises(KeyError, match="blocks.9.hook_resid_post"), model.hooks({"blocks.9.hook_resid_post": print}):
        pass


def test_steering_hook_adds_a_vector_at_one_layer():
    model = small_model()
    idx = torch.randint(0, 50, (1, 6))
    v = torch.randn(16)
    _, base = model.run_with_cache(idx, ["blocks.0.hook_resid_post"])
    with model.hooks({"blocks.0.hook_resid_post": lambda x, n: x + 3.0 * v}):
        _, steered = model.run_with_cache(idx, ["blocks.0.hook_resid_post", "blocks.1.hook_resid_pre"])
    # A later hook on the same point sees the replaced tensor, and the next block receives it.
    torch.testing.assert_close(steered["blocks.0.hook_resid_post"], base["blocks.0.hook_resid_post"] + 3.0 * v)
    assert torch.equal(steered["blocks.1.hook_resid_pre"], steered["blocks.0.hook_resid_post"])


def test_context_longer_than_block_size_is_refused():
    with pytest.raises(ValueError, match="longer than the context"):
        small_model()(torch.zeros(1, 17, dtype=torch.long))


def test_generate_greedy_is_deterministic_and_crops_context():
    model = small_model()
    idx = torch.randint(0, 50, (2, 14))
    a = model.generate(idx, 10, temperature=0)
    b = model.generate(idx, 10, temperature=0)
    assert a.shape == (2, 24) and torch.equal(a, b) and torch.equal(a[:, :14], idx)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(model.generate(idx, 5, 1.0, 10, g1), model.generate(idx, 5, 1.0, 10, g2))


def test_bad_model_config_is_refused():
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="pos"):
        GPTConfig(pos="alibi")
