"""mfu: how much of the hardware's peak a training run uses.

Read instructions.md, then fill in the functions. Check with: nanolm problems check mfu
"""


def mfu(n_params: float, tokens_per_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization of a training run, as a fraction (0.15 for 15%)."""
    raise NotImplementedError("mfu")


def mfu_with_attention(
    n_params: float, n_layer: int, d_model: int, seq_len: int, tokens_per_s: float, peak_flops_per_s: float
) -> float:
    """The same, counting attention's FLOPs as well."""
    raise NotImplementedError("mfu_with_attention")


def training_days(n_params: float, n_tokens: float, peak_flops_per_s: float, mfu: float) -> float:
    """Days to train n_params parameters on n_tokens tokens at this peak and MFU."""
    raise NotImplementedError("training_days")


def mfu_of_model(model, tokens_per_s: float, peak_flops_per_s: float) -> float:
    """MFU of training a nanolm GPT `model` (N: its non-embedding parameters)."""
    raise NotImplementedError("mfu_of_model")
