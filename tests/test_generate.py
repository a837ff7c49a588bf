"""Generation with a key/value cache: the same tokens and logits as recomputing the whole context each
step, with rotary and learned positions, hooks, sampling, stop tokens and contexts past block_size."""

from __future__ import annotations

import pytest
import torch

from nanolm.model import GPT, GPTConfig, KVCache

V, BLOCK = 50, 16


def tiny_model(**kw) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(**{"vocab_size": V, "block_size": BLOCK, "n_layer": 2, "n_head": 4, "d_model": 32, **kw})
    model = GPT(cfg).eval()
    # Random init gives near-uniform logits (std ~0.1), where near-ties make "same greedy tokens" fragile and
    # weak; tripled weights give logits of std ~1, like a trained model's, with clear top-1 margins.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    return model


def prompt(B: int = 3, T: int = 5, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


VARIANTS = [
    dict(pos="rope"),
    dict(pos="learned"),
    dict(pos="rope", tie_embeddings=True),
    dict(pos="learned", tie_embeddings=True),
]


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_cached_greedy_tokens_equal_uncached(kw):
    model = tiny_model(**kw)
    idx = prompt(B=3, T=5)
    cached = model.generate(idx, 10, temperature=0, use_cache=True)
    plain = model.generate(idx, 10, temperature=0, use_cache=False)
    assert cached.shape == (3, 15) and torch.equal(cached[:, :5], idx)
    assert torch.equal(cached, plain)
    assert len(set(map(tuple, cached[:, 5:].tolist()))) > 1  # the rows differ: the batch is not one sequence


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_incremental_logits_equal_full_forward(pos):
    """Run a sequence through the cache as a 5-token prefill, a 3-token chunk (which needs the offset
    causal mask) and then single tokens; every position's logits match one full forward."""
    model = tiny_model(pos=pos)
    idx = prompt(B=2, T=BLOCK, seed=3)
    full, _ = model(idx)
    cache = model.new_kv_cache()
    pieces, start = [], 0
    with torch.no_grad():
        for size in [5, 3] + [1] * (BLOCK - 8):
            logits, _ = model(idx[:, start : start + size], kv_cache=cache)
            assert logits.shape == (2, size, V)
            pieces.append(logits)
            start += size
    assert all(c.length == BLOCK for c in cache)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_cache_refuses_more_than_block_size():
    model = tiny_model()
    cache = model.new_kv_cache()
    model(prompt(B=1, T=BLOCK), kv_cache=cache)
    with pytest.raises(ValueError, match="longer than the context"):
        model(prompt(B=1, T=1), kv_cache=cache)
    with pytest.raises(ValueError, match="full"):
        KVCache(2).append(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4))


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_steering_hook_same_tokens_and_one_position_per_step(pos):
    model = tiny_model(pos=pos)
    idx = prompt(B=2, T=6)
    v = torch.randn(32, generator=torch.Generator().manual_seed(7))
    shapes: list[tuple[int, ...]] = []

    def steer(x: torch.Tensor, name: str) -> torch.Tensor:
        shapes.append(tuple(x.shape))
        return x + 4.0 * v

    name = "blocks.0.hook_resid_post"
    with model.hooks({name: steer}):
        cached = model.generate(idx, 8, temperature=0, use_cache=True)
    assert shapes == [(2, 6, 32)] + [(2, 1, 32)] * 7  # the prompt once, then one new position per step
    with model.hooks({name: steer}):
        plain = model.generate(idx, 8, temperature=0, use_cache=False)
    assert torch.equal(cached, plain)
    assert not torch.equal(cached, model.generate(idx, 8, temperature=0))  # the hook does steer
    assert all(not p.fns for p in model.hook_points().values())


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_generation_past_block_size_matches_uncached(pos):
    model = tiny_model(pos=pos)
    idx = prompt(B=2, T=10)
    cached = model.generate(idx, 20, temperature=0, use_cache=True)  # 30 tokens: the window slides from 17 on
    plain = model.generate(idx, 20, temperature=0, use_cache=False)
    assert cached.shape == (2, 30) and torch.equal(cached, plain)
    long_prompt = prompt(B=2, T=BLOCK + 4)  # longer than the context from the start
    assert torch.equal(
        model.generate(long_prompt, 5, temperature=0, use_cache=True),
        model.generate(long_prompt, 5, temperature=0, use_cache=False),
    )


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_sampling_with_same_seed_equal_with_and_without_cache(pos):
    model = tiny_model(pos=pos)
    idx = prompt(B=3, T=4)

    def sample(use_cache: bool, seed: int = 11) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return model.generate(idx, 20, temperature=1.5, top_k=10, generator=g, use_cache=use_cache)

    assert torch.equal(sample(True), sample(False))
    assert not torch.equal(sample(True), sample(True, seed=12))  # the draws do depend on the generator


def test_stop_token_ends_generation_with_and_without_cache():
    model = tiny_model()
    idx = prompt(B=1, T=5)
    full = model.generate(idx, 10, temperature=0)
    stop = int(full[0, 8])  # the 4th generated token
    first = 5 + full[0, 5:].tolist().index(stop)  # its first occurrence among the generated tokens
    for use_cache in (True, False):
        out = model.generate(idx, 10, temperature=0, stop_token=stop, use_cache=use_cache)
        assert torch.equal(out, full[:, : first + 1])


def test_check_hook_names():
    model = tiny_model()
    names = model.check_hook_names(n for n in ["hook_embed", "blocks.1.hook_resid_post"])
    assert names == ["hook_embed", "blocks.1.hook_resid_post"]
    with pytest.raises(KeyError, match="unknown hook point 'blocks.2.hook_resid_post'"):
        model.check_hook_names(["hook_embed", "blocks.2.hook_resid_post"])
