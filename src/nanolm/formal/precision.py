"""Finite precision makes an RNN a finite automaton, and that bounds the Dyck depth it can track.

A hidden vector of h units, each holding one of V distinct values, takes at most V^h states. To
predict the next-token sets of Dyck-(k, d), a model must tell apart every stack it can be in: two
different stacks are told apart by some closing suffix (Myhill–Nerode), and there are k^j stacks of
depth j, so Σ_{j=0}^{d} k^j of depth ≤ d. Hence a model that tracks depth d needs

    Σ_{j=0}^{d} k^j ≤ V^h,   roughly   d ≤ log_k(V^h) = h · log_k V.

V per unit: int8 = 256; a float format with e exponent bits and f fraction bits has
2^(1+e+f) − 2·2^f finite bit patterns (the all-ones exponent is inf/NaN), one fewer value because
+0 = −0: bf16 65,279, fp16 63,487, fp32 4,278,190,079. (A ReLU unit is ≥ 0, which halves V; the
bound stays an upper bound either way.) For k = 1 (one bracket type) a counter suffices and the
bound is V^h − 1: astronomically large, which is why Dyck-1 is the easy case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UserError


def finite_float_values(exponent_bits: int, fraction_bits: int) -> int:
    """Distinct finite values of an IEEE-style float format (±0 counted once)."""
    patterns = 2 ** (1 + exponent_bits + fraction_bits) - 2 * 2**fraction_bits  # minus inf and NaN patterns
    return patterns - 1


VALUES_PER_UNIT: dict[str, int] = {
    "int8": 256,
    "bf16": finite_float_values(8, 7),
    "fp16": finite_float_values(5, 10),
    "fp32": finite_float_values(8, 23),
}


@dataclass
class PrecisionRow:
    precision: str
    hidden: int  # h
    values_per_unit: int  # V
    log10_states: float  # log10(V^h)
    k: int
    max_depth: int | None  # largest d with Σ_{j ≤ d} k^j ≤ V^h (None when over 10^18: only for k = 1)
    max_depth_single: int | None  # largest d with k^d ≤ V^h, i.e. floor(log_k V^h): depth-d stacks alone
    log10_max_depth: float  # log10 of max_depth, also when it is too large to print


@dataclass
class PrecisionTable:
    k: int
    rows: list[PrecisionRow]


def _stacks_up_to(k: int, d: int) -> int:
    return d + 1 if k == 1 else (k ** (d + 1) - 1) // (k - 1)


def max_trackable_depth(k: int, hidden: int, values_per_unit: int) -> tuple[int, int]:
    """(largest d with Σ_{j≤d} k^j ≤ V^h, largest d with k^d ≤ V^h), exact in integers."""
    states = values_per_unit**hidden
    if k == 1:
        return states - 1, states - 1 if states > 1 else 0  # k^d = 1 for every d; a counter up to V^h − 1
    # Start from the float estimate and correct it in exact integer arithmetic.
    single = int(hidden * math.log(values_per_unit) / math.log(k))
    while k ** (single + 1) <= states:
        single += 1
    while single > 0 and k**single > states:
        single -= 1
    total = single
    while total >= 0 and _stacks_up_to(k, total) > states:
        total -= 1
    return max(total, 0), single


MAX_HIDDEN = 65_536


def precision_table(
    k: int, hidden_sizes: Sequence[int] = (1, 8, 64, 256), precisions: Sequence[str] = ("int8", "bf16", "fp32")
) -> PrecisionTable:
    """The depth bound for each (precision, hidden size)."""
    if k <= 0:
        raise UserError(f"--k must be a positive integer (the number of bracket types), got {k}")
    bad = [h for h in hidden_sizes if h <= 0]
    if bad:
        raise UserError(f"--hidden must be a positive integer, got {bad[0]}")
    huge = [h for h in hidden_sizes if h > MAX_HIDDEN]
    if huge:  # V^h is computed exactly, as an integer of about h·log10(V) digits
        raise UserError(
            f"--hidden {huge[0]:,}: the bound is computed exactly and takes too long past "
            f"{MAX_HIDDEN:,} units; it grows linearly in h (d ≈ h·log_k V), so scale a smaller one"
        )
    unknown = [p for p in precisions if p not in VALUES_PER_UNIT]
    if unknown:
        raise UserError(f"unknown precision {unknown[0]!r}; use one of {', '.join(VALUES_PER_UNIT)}")
    rows = []
    for p in precisions:
        v = VALUES_PER_UNIT[p]
        for h in hidden_sizes:
            total, single = max_trackable_depth(k, h, v)
            rows.append(
                PrecisionRow(
                    precision=p,
                    hidden=h,
                    values_per_unit=v,
                    log10_states=h * math.log10(v),
                    k=k,
                    max_depth=total if total <= 10**18 else None,
                    max_depth_single=single if single <= 10**18 else None,
                    log10_max_depth=math.log10(total) if total > 0 else 0.0,
                )
            )
    return PrecisionTable(k=k, rows=rows)


def format_depth(row: PrecisionRow) -> str:
    """The depth bound, or ≈10^x when it is too large to print (k = 1)."""
    return f"{row.max_depth:,}" if row.max_depth is not None else f"≈10^{row.log10_max_depth:.4g}"
