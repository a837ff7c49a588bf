"""mfu: model FLOPs utilization, against nanolm.profiling.measure.mfu."""

from __future__ import annotations

import math
import random
from types import ModuleType

from . import Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)


# (ratio of the answer to the truth, what that ratio says): the classic slips, named in the message
_RATIOS = (
    (100.0, "100 times too large: a percentage where a fraction is asked"),
    (1 / 3, "a third of it: 2 FLOPs per parameter per token, the forward pass alone; training costs 6 (2 forward, 4 backward)"),
    (
        2 / 3,
        "two thirds of it: 4 FLOPs per parameter per token, the backward pass alone; training costs 6 (2 forward, 4 backward)",
    ),
    (1 / 6, "a sixth of it: fewer FLOPs per parameter per token than training costs"),
    (1e-12, "10^12 times too small: the peak taken as TFLOP/s, where it is given in FLOP/s"),
    (1e12, "10^12 times too large: the peak taken as FLOP/s where TFLOP/s were meant, or the other way round"),
    (24.0, "24 times too large: hours, not days"),
    (86400.0, "86,400 times too large: seconds, not days"),
)


def _close(got: object, want: float, what: str) -> None:
    require(
        isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(float(got)),
        f"{what}: you returned {got!r}, not a number",
    )
    g = float(got)
    if math.isclose(g, want, rel_tol=1e-6):
        return
    ratio = g / want if want else float("inf")
    hint = next((f" ({text})" for r, text in _RATIOS if math.isclose(ratio, r, rel_tol=1e-6)), "")
    raise AssertionError(f"{what}: you returned {g:.6g}, expected {want:.6g}{hint}")


def _case(rng: random.Random) -> dict:
    return {
        "n_params": rng.uniform(1e7, 7e10),
        "tokens_per_s": rng.uniform(1e3, 1e6),
        "peak_flops_per_s": rng.choice([312e12, 989e12, 1979e12, 67e12, 19.5e12]),
    }


def _want_mfu(c: dict) -> float:
    from ...profiling.measure.mfu import mfu, model_flops_per_s

    return mfu(model_flops_per_s(c["n_params"], c["tokens_per_s"]), c["peak_flops_per_s"])


@_check
def check_reference_numbers(mod: ModuleType, seed: int) -> None:
    """The reference document's example: 124M parameters at 200k tokens/s on a 989 TFLOP/s GPU ≈ 15%."""
    _close(mod.mfu(1.24e8, 2e5, 9.9e14), 6 * 1.24e8 * 2e5 / 9.9e14, "mfu(1.24e8, 2e5, 9.9e14)")


@_check
def check_random_variants(mod: ModuleType, seed: int) -> None:
    """MFU on random model sizes, throughputs and peaks."""
    rng = random.Random(seed)
    for _ in range(20):
        c = _case(rng)
        _close(mod.mfu(**c), _want_mfu(c), f"mfu({c['n_params']:.3g}, {c['tokens_per_s']:.3g}, {c['peak_flops_per_s']:.3g})")


@_check
def check_with_attention(mod: ModuleType, seed: int) -> None:
    """MFU counting the attention FLOPs too: (6N + 12·L·d·T) per token."""
    from ...profiling.measure.mfu import mfu, model_flops_per_s_with_attention

    rng = random.Random(seed)
    for _ in range(20):
        c = _case(rng)
        L, d, T = rng.randint(2, 96), rng.choice([256, 768, 1024, 4096, 8192]), rng.choice([512, 1024, 2048, 8192])
        want = mfu(model_flops_per_s_with_attention(c["n_params"], L, d, T, c["tokens_per_s"]), c["peak_flops_per_s"])
        got = mod.mfu_with_attention(c["n_params"], L, d, T, c["tokens_per_s"], c["peak_flops_per_s"])
        what = f"mfu_with_attention(N={c['n_params']:.3g}, L={L}, d={d}, T={T}, ...)"
        if isinstance(got, (int, float)) and math.isclose(float(got), _want_mfu(c), rel_tol=1e-6):
            raise AssertionError(
                f"{what}: you returned {float(got):.6g}, the MFU without attention's FLOPs; with "
                f"12·L·d·T = {12 * L * d * T:.3g} more per token it is {want:.6g}"
            )
        _close(got, want, what)


@_check
def check_training_days(mod: ModuleType, seed: int) -> None:
    """Days to train N parameters on D tokens at a given peak and MFU: 6·N·D / (peak · MFU)."""
    rng = random.Random(seed)
    for _ in range(20):
        n, d = rng.uniform(1e8, 7e10), rng.uniform(1e9, 2e12)
        peak, u = rng.choice([312e12, 989e12]), rng.uniform(0.1, 0.6)
        _close(
            mod.training_days(n, d, peak, u),
            6 * n * d / (peak * u) / 86400,
            f"training_days({n:.3g}, {d:.3g}, {peak:.3g}, {u:.2f})",
        )


def _model(rng: random.Random, tie: bool, pos: str):
    from ...model import GPT, GPTConfig

    n_head = rng.choice([1, 2])
    cfg = GPTConfig(
        vocab_size=rng.randint(100, 2000),
        block_size=rng.choice([64, 256, 1024]),
        n_layer=rng.randint(1, 3),
        n_head=n_head,
        d_model=n_head * rng.choice([8, 16]),
        pos=pos,
        tie_embeddings=tie,
    )
    return GPT(cfg)


@_check
def check_model_params(mod: ModuleType, seed: int) -> None:
    """mfu_of_model counts N as a nanolm model's non-embedding parameters (W_U is a matmul: it counts, once if tied)."""
    rng = random.Random(seed)
    for tie, pos in ((False, "learned"), (True, "learned"), (False, "rope"), (True, "rope")):
        model = _model(rng, tie, pos)
        c = _case(rng)
        n = model.num_params(exclude_embeddings=True)
        want = 6.0 * n * c["tokens_per_s"] / c["peak_flops_per_s"]
        got = mod.mfu_of_model(model, c["tokens_per_s"], c["peak_flops_per_s"])
        what = (
            f"mfu_of_model on a model of {model.num_params()} parameters ({'W_U tied to W_E' if tie else 'W_U untied'}, "
            f"{'learned' if pos == 'learned' else 'rotary'} positions)"
        )
        if (
            isinstance(got, (int, float))
            and not isinstance(got, bool)
            and math.isfinite(float(got))
            and not math.isclose(float(got), want, rel_tol=1e-6)
        ):
            implied = round(float(got) * c["peak_flops_per_s"] / (6.0 * c["tokens_per_s"]))
            embed = model.embed.weight.numel()
            notes = {
                model.num_params(): f"every parameter, the embedding tables too; N counts the {n} non-embedding ones",
                n - embed: "the tied W_U left out with the embedding table: it is a matmul, counted once",
            }
            if implied in notes and implied != n:
                raise AssertionError(
                    f"{what}: you returned {float(got):.6g}, which counts N = {implied} ({notes[implied]}); expected {want:.6g}"
                )
        _close(got, want, what)
