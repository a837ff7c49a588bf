"""Training FLOPs per token: the one formula behind every MFU nanolm reports (``nanolm mfu``, a profile's MFU,
the model's own ``flops_per_token``).

    6 · N                      N non-embedding parameters: forward 2N, backward 4N (Kaplan et al. 2020)
    6 · N + 12 · L · d · T     with the attention scores and values (PaLM appendix B; nanoGPT's estimate_mfu),
                               L layers of width d over a context of T tokens
"""

from __future__ import annotations


def training_flops_per_token(
    n_params: float, n_layer: int | None = None, d_model: int | None = None, seq_len: int | None = None
) -> float:
    """FLOPs to train on one token: 6N, plus 12·L·d·T when the model's shape (all three) is given."""
    flops = 6.0 * n_params
    if n_layer is not None and d_model is not None and seq_len is not None:
        flops += 12.0 * n_layer * d_model * seq_len
    return flops
