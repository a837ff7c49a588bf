"""The logit lens over every layer of a GPT-2-shaped model (random weights), nanolm against
TransformerLens 2.x on the same weights, in one run.

Both compute, for every layer (embedding output and each block's output) and every token of a
batch: the top-1 token and its probability, KL(final ‖ layer) and the entropy, each layer
normalized by the model's own final LayerNorm (its own statistics, as the lens is defined), then W_U.
nanolm reads a Hugging Face GPT2LMHeadModel through its ModelView; TransformerLens gets the same
weights converted into a HookedTransformer, and runs the lens the way its docs do (run_with_cache
on the residual hooks, ln_final, unembed, log_softmax). The outputs are checked to agree.

TransformerLens 2.x needs numpy<2 and transformers 4.x, so it lives in its own venv:
    make bench-lens        (or: .venv-bench/bin/python bench/lens_speed.py --batch 64 --seq 128)
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def build_models(n_layer: int):
    import transformers
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=n_layer)).eval()  # GPT-2 small's shapes
    with torch.no_grad():
        hf.transformer.ln_f.weight.uniform_(0.5, 1.5)
        hf.transformer.ln_f.bias.normal_(0.0, 0.1)
    c = hf.config
    cfg = HookedTransformerConfig(n_layers=c.n_layer, d_model=c.n_embd, d_head=c.n_embd // c.n_head, n_heads=c.n_head,
                                  d_mlp=4 * c.n_embd, d_vocab=c.vocab_size, n_ctx=c.n_positions, act_fn="gelu_new",
                                  normalization_type="LN", eps=c.layer_norm_epsilon,
                                  original_architecture="GPT2LMHeadModel", default_prepend_bos=False)
    tl = HookedTransformer(cfg)
    tl.load_and_process_state_dict(convert_gpt2_weights(hf, cfg), fold_ln=False, center_writing_weights=False,
                                   center_unembed=False, fold_value_biases=False, refactor_factored_attn_matrices=False)
    return hf, tl.eval()


@torch.no_grad()
def nanolm_lens(view, tokens):
    from nanolm.interp.lens import lens_summary

    s = lens_summary(view, tokens)
    return s.top1, s.top1_prob, s.kl, s.entropy


@torch.no_grad()
def transformer_lens_lens(tl, tokens):
    """The logit lens as TransformerLens users write it, normalizing each layer with ln_final."""
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(tl.cfg.n_layers)]
    logits, cache = tl.run_with_cache(tokens, names_filter=lambda n: n in names)
    logp_final = logits.log_softmax(-1)
    out = []
    for name in names:
        logp = tl.unembed(tl.ln_final(cache[name])).log_softmax(-1)  # [B, T, V]
        top_logp, top = logp.max(-1)
        kl = F.kl_div(logp, logp_final, log_target=True, reduction="none").sum(-1)
        ent = -(logp.exp() * logp).sum(-1)
        out.append((top, top_logp.exp(), kl, ent))
    return tuple(torch.stack(x) for x in zip(*out))


def best_of(fn, repeats: int) -> tuple[float, tuple]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()

    from nanolm.interp.view import view_of

    hf, tl = build_models(args.layers)
    view = view_of(hf)
    tokens = torch.randint(0, hf.config.vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    # the two models are the same function: check on a small slice before timing
    torch.testing.assert_close(tl(tokens[:2, :16]), view.logits(tokens[:2, :16]), atol=1e-4, rtol=1e-4)
    warm = tokens[:2, :16]
    nanolm_lens(view, warm), transformer_lens_lens(tl, warm)

    print(f"logit lens over {args.layers + 1} layers, batch {args.batch} x {args.seq} tokens, vocab "
          f"{hf.config.vocab_size}, {torch.get_num_threads()} threads")
    t_tl, out_tl = best_of(lambda: transformer_lens_lens(tl, tokens), args.repeats)
    print(f"TransformerLens {t_tl:8.2f} s")
    t_nl, out_nl = best_of(lambda: nanolm_lens(view, tokens), args.repeats)
    print(f"nanolm          {t_nl:8.2f} s")
    agree = (out_nl[0] == out_tl[0]).float().mean().item()
    max_kl = (out_nl[2] - out_tl[2]).abs().max().item()
    print(f"top-1 tokens agree on {agree:.4%} of (layer, token) cells; max |ΔKL| = {max_kl:.2e} nats")
    print(f"nanolm / TransformerLens time: {t_nl / t_tl:.2f}x (target <= 1.0x)")


if __name__ == "__main__":
    main()
