"""mfu: model FLOPs utilization, against nanolm.profiling.mfu."""

from __future__ import annotations

import math
import random
from types import ModuleType

from . import Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)


def _close(got: object, want: float, what: str) -> None:
    require(isinstance(got, (int, float)) and math.isfinite(float(got)), f"{what}: you returned {got!r}, not a number")
    g = float(got)
    if math.isclose(g, want, rel_tol=1e-6):
        return
    ratio = g / want if want else float("inf")
    hint = ""
    if math.isclose(ratio, 100, rel_tol=1e-6):
        hint = " (100 times too large: a percentage where a fraction is asked)"
    elif math.isclose(ratio, 1 / 6, rel_tol=1e-6) or math.isclose(ratio, 1 / 3, rel_tol=1e-6):
        hint = f" ({ratio:.3g} of it: fewer FLOPs per parameter per token than training costs)"
    raise AssertionError(f"{what}: you returned {g:.6g}, expected {want:.6g}{hint}")


def _case(rng: random.Random) -> dict:
    return {"n_params": rng.uniform(1e7, 7e10), "tokens_per_s": rng.uniform(1e3, 1e6),
            "peak_flops_per_s": rng.choice([312e12, 989e12, 1979e12, 67e12, 19.5e12])}


def _want_mfu(c: dict) -> float:
    from ...profiling.mfu import mfu, model_flops_per_s

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
    from ...profiling.mfu import mfu, model_flops_per_s_with_attention

    rng = random.Random(seed)
    for _ in range(20):
        c = _case(rng)
        L, d, T = rng.randint(2, 96), rng.choice([256, 768, 1024, 4096, 8192]), rng.choice([512, 1024, 2048, 8192])
        want = mfu(model_flops_per_s_with_attention(c["n_params"], L, d, T, c["tokens_per_s"]), c["peak_flops_per_s"])
        got = mod.mfu_with_attention(c["n_params"], L, d, T, c["tokens_per_s"], c["peak_flops_per_s"])
        _close(got, want, f"mfu_with_attention(N={c['n_params']:.3g}, L={L}, d={d}, T={T}, ...)")


@_check
def check_training_days(mod: ModuleType, seed: int) -> None:
    """Days to train N parameters on D tokens at a given peak and MFU: 6·N·D / (peak · MFU)."""
    rng = random.Random(seed)
    for _ in range(20):
        n, d = rng.uniform(1e8, 7e10), rng.uniform(1e9, 2e12)
        peak, u = rng.choice([312e12, 989e12]), rng.uniform(0.1, 0.6)
        _close(mod.training_days(n, d, peak, u), 6 * n * d / (peak * u) / 86400,
               f"training_days({n:.3g}, {d:.3g}, {peak:.3g}, {u:.2f})")
