# mutant: the token embedding subtracted even when W_U is tied to it (W_U left out)
# expect: tied W_U left out
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""mfu: how much of the hardware's peak a training run uses."""


def mfu(n_params: float, tokens_per_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization, a fraction: training costs 6 FLOPs per parameter per token
    (2 forward, 4 backward), so the model computes 6 · N · tokens/s FLOP/s."""
    return 6.0 * n_params * tokens_per_s / peak_flops_per_s


def mfu_with_attention(
    n_params: float, n_layer: int, d_model: int, seq_len: int, tokens_per_s: float, peak_flops_per_s: float
) -> float:
    """The same, adding attention's scores and weighted values: 12 · L · d · T FLOPs per token."""
    per_token = 6.0 * n_params + 12.0 * n_layer * d_model * seq_len
    return per_token * tokens_per_s / peak_flops_per_s


def training_days(n_params: float, n_tokens: float, peak_flops_per_s: float, mfu: float) -> float:
    """Days to train N parameters on D tokens: 6 · N · D FLOPs at peak · MFU FLOP/s."""
    return 6.0 * n_params * n_tokens / (peak_flops_per_s * mfu) / 86400.0


def mfu_of_model(model, tokens_per_s: float, peak_flops_per_s: float) -> float:
    """MFU of training a nanolm GPT: N counts its non-embedding parameters. The lookup tables (token
    embedding, learned positions) cost no FLOPs; W_U is a matmul and counts, once if tied to W_E."""
    n = sum(p.numel() for p in model.parameters()) - model.embed.weight.numel()
    if model.pos_embed is not None:
        n -= model.pos_embed.weight.numel()
    return mfu(n, tokens_per_s, peak_flops_per_s)
