"""The logit lens and the tuned lens, checked against independent float64 computations on the
same weights: nanolm, and Hugging Face GPT-2, Llama and GPT-NeoX built from small random configs."""

from __future__ import annotations

import copy

import pytest
import torch

from nanolm.errors import UserError
from nanolm.interp.lens import kl_from_final, layer_logits, lens_figure, logit_lens
from nanolm.interp.view import view_of
from nanolm.model import GPT, GPTConfig
from nanolm.plots import save_figure


def hf():
    """transformers, or a skip of the one test that needs it (the nanolm tests here run without it)."""
    return pytest.importorskip("transformers", reason="the hf extra is not installed")


def small_nanolm(pos: str = "rope") -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=2, d_model=32, pos=pos)).eval()


def hf_gpt2():
    transformers = hf()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=60, n_positions=32, n_embd=32, n_layer=3, n_head=4, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # a random LayerNorm γ, β: the test must see them applied
        model.transformer.ln_f.weight.uniform_(0.5, 1.5)
        model.transformer.ln_f.bias.normal_(0.0, 0.3)
    return model


def hf_llama():
    transformers = hf()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=60,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.model.norm.weight.uniform_(0.5, 1.5)
    return model


def hf_neox():
    transformers = hf()
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(
        vocab_size=60,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=32,
    )
    model = transformers.GPTNeoXForCausalLM(cfg).eval()
    with torch.no_grad():
        model.gpt_neox.final_layer_norm.weight.uniform_(0.5, 1.5)
        model.gpt_neox.final_layer_norm.bias.normal_(0.0, 0.3)
    return model


def reference_lens_f64(model, tokens: torch.Tensor, norm: str) -> list[torch.Tensor]:
    """Per layer logits [B, T, V], computed in float64 from HF's own hidden states (no nanolm code):
    hidden_states[l] is the input of block l; the last layer's lens is the model's output itself."""
    m = copy.deepcopy(model).double()
    out = m(tokens, output_hidden_states=True)
    final_norm = {
        "gpt2": lambda: m.transformer.ln_f,
        "llama": lambda: m.model.norm,
        "gpt_neox": lambda: m.gpt_neox.final_layer_norm,
    }[norm]()
    W_U = m.get_output_embeddings().weight.double()  # [V, D]
    gamma = final_norm.weight.double()
    refs = []
    for h in out.hidden_states[:-1]:  # embedding output, then blocks 0..L-2
        if norm == "llama":  # RMSNorm with γ
            normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + final_norm.variance_epsilon) * gamma
        else:  # LayerNorm with γ and β
            mu, var = h.mean(-1, keepdim=True), h.var(-1, unbiased=False, keepdim=True)
            normed = (h - mu) / torch.sqrt(var + final_norm.eps) * gamma + final_norm.bias.double()
        refs.append(normed @ W_U.T)
    refs.append(out.logits)
    return refs


@pytest.mark.parametrize("build,norm", [(hf_gpt2, "gpt2"), (hf_llama, "llama"), (hf_neox, "gpt_neox")])
def test_hf_lens_equals_a_float64_computation_at_every_layer(build, norm):
    model = build()
    tokens = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(1))
    view = view_of(model)
    logits, resid = view.residual_stack(tokens)
    lens = layer_logits(view, resid)  # [L+1, B, T, V]
    refs = reference_lens_f64(model, tokens, norm)
    assert lens.shape[0] == len(refs) == 4
    for layer, ref in enumerate(refs):
        torch.testing.assert_close(lens[layer].double(), ref, atol=1e-5, rtol=1e-5, msg=f"layer {layer}")
    torch.testing.assert_close(logits, lens[-1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_nanolm_lens_at_the_last_layer_is_the_models_own_logits(pos):
    model = small_nanolm(pos)
    view = view_of(model)
    tokens = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(2))
    logits, resid = view.residual_stack(tokens)
    lens = layer_logits(view, resid)
    torch.testing.assert_close(lens[-1], model(tokens)[0], atol=1e-5, rtol=1e-5)
    assert resid.shape == (4, 3, 16, 32)
    # the embedding row is what enters block 0: token embedding (+ learned positions)
    expected = model.embed(tokens) + (model.pos_embed(torch.arange(16)) if pos == "learned" else 0)
    torch.testing.assert_close(resid[0], expected)


def test_nanolm_lens_matches_a_float64_rmsnorm_and_W_U():
    model = small_nanolm()
    view = view_of(model)
    tokens = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        model.ln_final.weight.uniform_(0.5, 1.5)
    _, resid = view.residual_stack(tokens)
    h = resid.double()
    gamma, eps = model.ln_final.weight.double(), model.cfg.norm_eps
    ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * gamma @ model.unembed.weight.double().T
    torch.testing.assert_close(layer_logits(view, resid).double(), ref, atol=1e-5, rtol=1e-5)
    raw = layer_logits(view, resid, final_norm=False).double()
    torch.testing.assert_close(raw, h @ model.unembed.weight.double().T, atol=1e-5, rtol=1e-5)


class _Words:
    """A tokenizer over a fixed word list, enough to run the lens on text."""

    kind = "word"

    def __init__(self, n: int) -> None:
        self.vocab_size = n
        self.eos_id = 1

    def encode(self, text: str) -> list[int]:
        return [2 + (sum(map(ord, w)) % (self.vocab_size - 2)) for w in text.split()]

    def token_str(self, i: int) -> str:
        return f"w{i}"


def test_lens_table_is_consistent_with_its_own_definitions(tmp_path):
    model = small_nanolm()
    view = view_of(model, _Words(50))
    result = logit_lens(view, "a b c d e", positions="all", k=3)
    assert result.layers == ["embed", "0", "1", "2"] and result.positions == list(range(6))
    assert result.tokens[0] == "w1"  # the start-of-document token comes first
    tokens = view.to_tokens("a b c d e")
    logits = model(tokens)[0][0].detach()
    p_final = torch.softmax(logits, -1)
    for j in result.positions:
        last = result.cells[-1][j]
        assert last.final_token_rank == 1 and last.kl_final == pytest.approx(0.0, abs=1e-6)
        assert last.top_ids[0] == int(logits[j].argmax())
        assert last.top_probs[0] == pytest.approx(float(p_final[j].max()), rel=1e-5)
        entropy = float(-(p_final[j] * p_final[j].log()).sum())
        assert last.entropy == pytest.approx(entropy, rel=1e-4)
    # Every layer's cell against its own full distribution, computed in float64 from the residuals.
    with torch.no_grad():
        _, resid = view.residual_stack(tokens)
        direct = layer_logits(view, resid).double()[:, 0]  # [L+1, T, V]
    for l, row in enumerate(result.cells):
        for j, c in zip(result.positions, row):
            q = torch.softmax(direct[l, j], -1)
            final = int(logits[j].argmax())
            assert c.final_token_prob == pytest.approx(float(q[final]), rel=1e-4)
            assert c.final_token_rank == 1 + int((q > q[final]).sum())
            top = torch.topk(q, 3)
            assert c.top_ids == top.indices.tolist() and c.top_probs == pytest.approx(top.values.tolist(), rel=1e-4)
            p = p_final[j].double()
            assert c.kl_final == pytest.approx(float((p * (p.log() - q.log())).sum()), abs=1e-5)
            assert c.entropy == pytest.approx(float(-(q * q.log()).sum()), rel=1e-4)
    # The heatmap: one label per cell, its top-1 token, over an image of the top-1 probabilities.
    ax = lens_figure(result).axes[0]
    assert [t.get_text() for t in ax.texts] == [c.top_tokens[0] for row in result.cells for c in row]
    shown = ax.images[0].get_array()
    assert shown.shape == (4, 6) and float(shown[2, 3]) == pytest.approx(result.cells[2][3].top_probs[0])
    assert not any(tmp_path.iterdir())  # making the figure writes nothing
    assert save_figure(lens_figure(result), tmp_path / "lens.png").read_bytes()[:4] == b"\x89PNG"


def test_kl_from_final_matches_a_hand_computation():
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    expected = sum(pi * (torch.log(pi) - torch.log(qi)) for pi, qi in zip(p, q))
    assert float(kl_from_final(p.log(), q.log())) == pytest.approx(float(expected), rel=1e-6)


def test_edit_replaces_an_activation_in_hf_and_nanolm_and_is_removed_after():
    for model in (small_nanolm(), hf_gpt2(), hf_llama(), hf_neox()):
        view = view_of(model)
        tokens = torch.randint(0, 50, (1, 8), generator=torch.Generator().manual_seed(4))
        before = view.logits(tokens).detach()
        last = view.n_layers - 1
        with view.edit(f"blocks.{last}.hook_resid_post", lambda x: torch.zeros_like(x)):
            zeroed = view.logits(tokens).detach()
        # a zero residual normalizes to zero (β for LayerNorm): every position gets the same logits
        assert torch.allclose(zeroed[0, 0], zeroed[0, -1], atol=1e-5)
        with view.edit("blocks.0.hook_resid_pre", lambda x: x * 0):
            assert not torch.allclose(view.logits(tokens), before)
        torch.testing.assert_close(view.logits(tokens).detach(), before)


def test_bad_lens_inputs_name_the_problem():
    view = view_of(small_nanolm(), _Words(50))
    with pytest.raises(UserError, match="longer than the model's context of 16"):
        logit_lens(view, " ".join(["a"] * 20))
    with pytest.raises(UserError, match="out of range"):
        view.resid_name(7)
    with pytest.raises(UserError, match="position 9 is out of range"):
        logit_lens(view, "a b", positions="9")


def test_batch_lens_summary_equals_the_direct_computation():
    from nanolm.interp.lens import entropy, lens_summary
    from nanolm.interp.tuned_lens import TunedLens

    model = hf_gpt2()
    view = view_of(model)
    tokens = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(5))
    tuned = TunedLens(view.d_model, view.n_layers)
    with torch.no_grad():
        for t in tuned.translators:
            t.weight.normal_(0, 0.1)
            t.bias.normal_(0, 0.1)
    for lens in (None, tuned):
        summary = lens_summary(view, tokens, tuned=lens)
        logits, resid = view.residual_stack(tokens)
        direct = layer_logits(view, resid, tuned=lens).double()  # [L+1, B, T, V]
        q = torch.softmax(direct, -1)
        torch.testing.assert_close(summary.top1, direct.argmax(-1))
        torch.testing.assert_close(summary.top1_prob.double(), q.max(-1).values, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            summary.kl.double(), kl_from_final(logits.double().expand_as(direct), direct), atol=1e-5, rtol=1e-4
        )
        torch.testing.assert_close(summary.entropy.double(), entropy(direct).double(), atol=1e-5, rtol=1e-4)


def test_function_forms_take_a_bare_model():
    from nanolm.interp import edit_activation, run_with_cache

    model = hf_gpt2()
    tokens = torch.randint(0, 60, (1, 6), generator=torch.Generator().manual_seed(6))
    logits, cache = run_with_cache(model, tokens, ["blocks.1.hook_resid_post"])
    hidden = model(tokens, output_hidden_states=True).hidden_states  # [embed, after block 0, ..., after ln_f]
    torch.testing.assert_close(cache["blocks.1.hook_resid_post"], hidden[2])
    with edit_activation(model, "blocks.1.hook_resid_pre", lambda x: x + 1.0) as view:
        assert not torch.allclose(view.logits(tokens), logits)


def test_raw_projection_kl_stays_exact_with_large_logits():
    """--no-final-norm can give logits in the hundreds; the KL must still match a float64 computation."""
    from nanolm.interp.lens import lens_summary

    model = small_nanolm()
    with torch.no_grad():
        model.embed.weight.mul_(500.0)  # raw residuals ~30 and raw logits in the hundreds
        model.unembed.weight.mul_(100.0)
    view = view_of(model)
    tokens = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(7))
    summary = lens_summary(view, tokens, final_norm=False)
    reference = view_of(copy.deepcopy(model).double())
    with torch.no_grad():
        logits, resid = reference.residual_stack(tokens)
        direct = layer_logits(reference, resid, final_norm=False)
    assert direct.dtype == torch.float64 and direct.abs().max() > 100
    expected = kl_from_final(logits.double().expand_as(direct), direct)
    torch.testing.assert_close(summary.kl.double(), expected, atol=1e-4, rtol=1e-5)
