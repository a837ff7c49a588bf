"""logit_lens: the top-1 token at every layer, read through the model's final norm and W_U.

Read instructions.md, then fill in the function. Check with: nanolm problems check logit_lens
"""

import torch


def logit_lens(model, tokens: torch.Tensor) -> torch.Tensor:
    """model: a nanolm GPT in eval mode; tokens: [T] token ids.
    Returns [n_layer + 1, T] token ids: row 0 reads the embedding output (what enters block 0), row
    l + 1 what leaves block l."""
    raise NotImplementedError("logit_lens")
