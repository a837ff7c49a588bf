"""The page's first screen: the run's status, its headline numbers (val loss against the unigram baseline,
tokens/s, and with a profile kept in the run, MFU and the profile's verdict: on a GPU, its gate sentence) and the
loss curves, large. Each number is told at length further down (its section), and in the JSON as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import UserError
from ...runs import effective_status
from ..model import Number, Section
from ..registry import CONTENT_ERRORS, RunFiles
from .profile import load_profile, profile_files
from .run import curves_figure, logged_and_evals


def results_section(run: RunFiles, section: Section) -> None:
    m = run.manifest
    _status(run, section)
    try:
        logged, evals = logged_and_evals(run)
    except UserError:  # the Evaluations section names the line
        logged, evals = [], []
        section.lines.append("the loss curves could not be drawn: metrics.jsonl could not be read (see Evaluations)")
    final = m.final.val_loss if m.final is not None else None
    val = final if final is not None else (evals[-1]["val_loss"] if evals else None)
    if val is not None:
        base = m.unigram_entropy
        section.numbers.append(
            Number(
                "val-loss",
                "val loss" if final is not None else "val loss, last evaluation",
                val,
                "nats/token",
                ".4f",
                note=(
                    f"{val / base:.0%} of the unigram baseline, {base:.4f} (a model that reads no context)"
                    if base
                    else "no unigram baseline recorded"
                ),
                href="#sec-curves",
            )
        )
    f = m.final
    if f is not None and f.tokens_per_s:
        over = f" over {f.seconds:,.1f} s" if f.seconds else ""
        steady = f"; {f.steady_tokens_per_s:,.0f} after warm-up" if f.steady_tokens_per_s else ""
        section.numbers.append(
            Number("tokens-per-s", "throughput", f.tokens_per_s, "tokens/s", "int", note=f"training, the whole run{over}{steady}")
        )
    _profile(run, section)
    if logged or evals:
        section.figures.append(curves_figure(run, logged, evals))


def _status(run: RunFiles, section: Section) -> None:
    m = run.manifest
    steps = m.config.get("steps")
    step = m.final.step if m.final is not None else m.checkpoint_step
    where = f"at step {step:,}" if isinstance(step, int) else ""
    if where and isinstance(steps, int):
        where += f" of {steps:,}"
    parts = [
        where,
        f"{m.n_params:,} parameters" if isinstance(m.n_params, int) else "",
        f"on {m.environment['device']}" if m.environment.get("device") else "",
    ]
    if m.final is not None and m.final.diverged_at is not None:
        parts.insert(0, f"diverged at step {m.final.diverged_at:,}")
    section.numbers.append(
        Number("status", "status", effective_status(m), fmt="text", note="; ".join(p for p in parts if p), href="#sec-manifest")
    )


def _profile(run: RunFiles, section: Section) -> None:
    """MFU and the verdict of the newest profile that can be read (the Profile section names any that cannot)."""
    unreadable: list[str] = []
    for path in profile_files(run):
        try:
            report = load_profile(path, [])
        except CONTENT_ERRORS:
            unreadable.append(run.rel(path))
            continue
        _profile_numbers(run, section, path, report, unreadable)
        return
    if unreadable:
        section.numbers.append(
            Number(
                "verdict",
                "profile verdict",
                None,
                text="could not be read",
                note=(f"{', '.join(unreadable)}: see the Profile section for what is wrong"),
                href="#sec-profile",
            )
        )


def _profile_numbers(run: RunFiles, section: Section, path: Path, report: Any, unreadable: list[str]) -> None:
    m, v = report.mfu, report.verdict
    if m is not None and m.mfu is not None:
        section.numbers.append(
            Number(
                "mfu",
                "MFU",
                m.mfu,
                "",
                _pct_format(m.mfu),
                href="#sec-profile",
                note=(
                    f"{m.method}, of a {m.peak_flops_per_s:.3g} FLOP/s peak ({m.peak_source})" if m.peak_flops_per_s else m.method
                ),
            )
        )
    if v is not None:
        said = report.gpu.gate_sentence if report.gpu is not None else v.headline
        newer = f" (newer, not readable: {', '.join(unreadable)})" if unreadable else ""
        section.numbers.append(
            Number(
                "verdict",
                "profile verdict",
                None,
                text=v.bottleneck.value,
                href="#sec-profile",
                note=f"{said}; {run.rel(path)}{newer}",
            )
        )


def _pct_format(x: float) -> str:
    """A share as a percentage with the digits a small one needs (MFU on a CPU is a few hundredths of a percent)."""
    return ".1%" if x >= 0.01 else ".2%" if x >= 0.0001 else ".4%"
