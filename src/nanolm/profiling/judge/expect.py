"""``nanolm profile --expect TOKENS_PER_S`` / ``--expect-mfu MFU``: "training is 3× slower than the estimate".

The expectation is written the way the estimate is made:

    expected tokens/s = peak FLOP/s × MFU / (6 · N)          (N: non-embedding parameters)

so a throughput implies an MFU and an MFU implies a throughput, on this device's peak. The measured step
is set beside the expected one, their ratio says how far off the run is ("2.9× slower than expected"),
and the missing time per step is assigned to the ranked findings (verdict.py), largest first, until it
is covered; what they do not cover is said to be unexplained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import UserError
from ..measure.clock import rate_step_ms
from ..report import Expectation, ProfileReport


@dataclass(frozen=True)
class Expected:
    """What the user expected: a throughput (tokens/s) or an MFU (a fraction in (0, 1])."""

    tokens_per_s: float | None = None
    mfu: float | None = None

    @classmethod
    def given(cls, tokens_per_s: float | None = None, mfu: float | None = None) -> Expected | None:
        """The expectation from --expect / --expect-mfu (None when neither is given); a UserError for a value
        that cannot be one, checked before anything runs."""
        if tokens_per_s is not None and mfu is not None:
            raise UserError("give one of --expect TOKENS_PER_S or --expect-mfu MFU, not both")
        if tokens_per_s is not None and not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
            raise UserError(f"--expect must be a throughput in tokens/s above 0, got {tokens_per_s:g}")
        if mfu is not None and not (math.isfinite(mfu) and 0 < mfu <= 1):
            raise UserError(f"--expect-mfu must be a fraction in (0, 1] (0.4 for 40%), got {mfu:g}")
        if tokens_per_s is None and mfu is None:
            return None
        return cls(tokens_per_s, mfu)


def _flops_per_step(report: ProfileReport) -> float | None:
    """The model FLOPs of one step the MFU was computed from (6N·tokens, or counted), or None."""
    if report.mfu is None:
        return None
    return report.mfu.flops_per_s * rate_step_ms(report) / 1000  # the step the MFU was measured on


def _expected_step(report: ProfileReport, expected: Expected) -> tuple[float, str, float | None, float | None]:
    """(expected step ms, the formula worked out, expected tokens/s, expected MFU), or a UserError when the
    report lacks what the expectation needs, or the expectation is more than the device can do."""
    mfu, tokens = report.mfu, report.tokens_per_step
    flops = _flops_per_step(report)
    six_n = mfu is not None and mfu.method.startswith("6N")
    if expected.tokens_per_s is not None:
        if not tokens:
            raise UserError(
                "--expect TOKENS_PER_S needs the tokens in a step: give --tokens-per-step N with the script, or use --expect-mfu"
            )
        step_ms = tokens / expected.tokens_per_s * 1000
        implied = None if flops is None else flops / (step_ms / 1000) / mfu.peak_flops_per_s
        if implied is not None and implied > 1:
            raise UserError(
                f"--expect {expected.tokens_per_s:,.0f} tokens/s would be an MFU of {implied:.0%} of this "
                f"device's peak ({mfu.peak_flops_per_s:.3g} FLOP/s, {mfu.peak_source}): more than the "
                "hardware can do; check the expectation, the peak, or the FLOP count"
            )
        formula = f"{tokens:,} tokens/step ÷ {expected.tokens_per_s:,.0f} tokens/s = {step_ms:.2f} ms/step" + (
            f"; 6N × tokens/s / peak = 6 × {mfu.n_params:.3g} × {expected.tokens_per_s:,.0f} / "
            f"{mfu.peak_flops_per_s:.3g} = MFU {implied:.1%}"
            if six_n and implied is not None
            else f"; MFU {implied:.1%}"
            if implied is not None
            else ""
        )
        return step_ms, formula, expected.tokens_per_s, implied
    if flops is None:
        raise UserError(
            "--expect-mfu needs the step's FLOPs and the device's peak, and this profile has no MFU "
            "(no optimizer step was measured); use --expect TOKENS_PER_S with --tokens-per-step"
        )
    step_ms = flops / (mfu.peak_flops_per_s * expected.mfu) * 1000
    tokens_per_s = tokens / (step_ms / 1000) if tokens else None
    if six_n and tokens_per_s is not None:
        formula = (
            f"tokens/s = peak × MFU / 6N = {mfu.peak_flops_per_s:.3g} × {expected.mfu:g} / "
            f"(6 × {mfu.n_params:.3g}) = {tokens_per_s:,.0f} tokens/s, {step_ms:.2f} ms/step"
        )
    else:
        formula = (
            f"step = FLOPs per step / (peak × MFU) = {flops:.3g} / ({mfu.peak_flops_per_s:.3g} × "
            f"{expected.mfu:g}) = {step_ms:.2f} ms"
        )
    return step_ms, formula, tokens_per_s, expected.mfu


def expectation(report: ProfileReport, expected: Expected) -> Expectation:
    """The measured step (the unprofiled one when the step clock measured it) beside the expected one, and the
    missing time per step assigned to the ranked findings (what each fix would buy on the profiled step, largest
    first) until it is covered."""
    step_ms, formula, tokens_per_s, mfu = _expected_step(report, expected)
    measured = rate_step_ms(report)
    given = (
        f"--expect {expected.tokens_per_s:,.0f} tokens/s"
        if expected.tokens_per_s is not None
        else f"--expect-mfu {expected.mfu:g}"
    )
    missing = measured - step_ms
    explained: list[tuple[str, float]] = []
    left = max(0.0, missing)
    for f in report.verdict.findings if report.verdict else []:
        if left <= 0:
            break
        if f.projected_step_ms is None:  # no worked-out gain: claim none of the missing time for it
            continue
        gain = report.step_ms.median - f.projected_step_ms
        if gain > 0:
            explained.append((f"{f.bottleneck.value}: {f.what}", min(gain, left)))
            left -= min(gain, left)
    return Expectation(
        given,
        formula,
        step_ms,
        measured,
        tokens_per_s,
        report.tokens_per_s.median if report.tokens_per_s else None,
        mfu,
        report.mfu.mfu if report.mfu else None,
        measured / step_ms,
        missing,
        explained,
        left,
    )
