# mutant: LayerNorm statistics (mean subtracted) instead of the RMSNorm's
# expect: LayerNorm statistics
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""logit_lens: the top-1 token at every layer, read through the model's final norm and W_U."""

import torch


@torch.no_grad()
def logit_lens(model, tokens: torch.Tensor) -> torch.Tensor:
    """model: a nanolm GPT in eval mode; tokens: [T] token ids.
    Returns [n_layer + 1, T]: row 0 reads the embedding output (what enters block 0), row l + 1
    what leaves block l; each through the final RMSNorm, then W_U, then the argmax."""
    L = model.cfg.n_layer
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(L)]
    _, cache = model.run_with_cache(tokens[None], names=names)
    resid = torch.stack([cache[n][0] for n in names])  # [L + 1, T, D]
    logits = model.unembed(
        torch.nn.functional.layer_norm(resid, (resid.shape[-1],), model.ln_final.weight, None, 1e-5)
    )  # [L + 1, T, V]
    return logits.argmax(-1)
