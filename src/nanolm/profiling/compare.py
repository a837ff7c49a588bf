"""``nanolm profile compare BEFORE.json AFTER.json``: the before / after / why table.

A change counts as larger than the run-to-run spread only when the two min-max ranges over the
repeated windows do not overlap."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .analysis import Bottleneck, ProfileReport, Stat


@dataclass
class ComparisonRow:
    metric: str
    before: Stat | None
    after: Stat | None
    change: float | None  # (after - before) / before, of the medians
    beyond_spread: bool | None  # the min-max ranges do not overlap
    better: bool | None  # the change goes the good way (lower time, higher throughput)


@dataclass
class Comparison:
    before: str
    after: str
    why: str | None
    rows: list[ComparisonRow]
    verdict_before: Bottleneck | str  # "-" when the report has no verdict
    verdict_after: Bottleneck | str


def load_report(path: str | Path) -> ProfileReport:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such report; write one with nanolm profile --json {path}")
    try:
        report = ProfileReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, KeyError, AttributeError, ValueError) as e:
        raise UserError(f"{path}: not a nanolm profile report ({type(e).__name__})") from None
    stats = [("step_ms", report.step_ms), ("tokens_per_s", report.tokens_per_s),
             *((f"phase {p.phase}", p.ms) for p in report.phases)]
    for name, stat in stats:
        if stat is None and name != "step_ms":  # optional measures
            continue
        values = [stat.median, stat.min, stat.max] if isinstance(stat, Stat) else [stat]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                   for v in values):
            raise UserError(f"{path}: not a nanolm profile report ({name} is {values}, not finite numbers >= 0); "
                            f"write a new one with nanolm profile --json")
    if report.step_ms.min <= 0:
        raise UserError(f"{path}: a step time of {report.step_ms.min} ms is not a measurement; write a new report")
    return report


def _row(metric: str, a: Stat | None, b: Stat | None, lower_is_better: bool) -> ComparisonRow:
    if a is None or b is None:
        return ComparisonRow(metric, a, b, None, None, None)
    change = (b.median - a.median) / a.median if a.median else None
    beyond = b.max < a.min or b.min > a.max
    better = (b.median < a.median) if lower_is_better else (b.median > a.median)
    return ComparisonRow(metric, a, b, change, beyond, better)


def compare_reports(before: str | Path, after: str | Path, why: str | None = None) -> Comparison:
    a, b = load_report(before), load_report(after)
    rows = [_row("step time (ms)", a.step_ms, b.step_ms, lower_is_better=True)]
    phases = [p.phase for p in a.phases] + [p.phase for p in b.phases if p.phase not in {q.phase for q in a.phases}]
    for phase in phases:
        pa = next((p.ms for p in a.phases if p.phase == phase), None)
        pb = next((p.ms for p in b.phases if p.phase == phase), None)
        rows.append(_row(f"  {phase} (ms)", pa, pb, lower_is_better=True))
    rows.append(_row("tokens/s", a.tokens_per_s, b.tokens_per_s, lower_is_better=False))
    mfu_a = Stat(a.mfu.mfu, a.mfu.mfu, a.mfu.mfu) if a.mfu else None
    mfu_b = Stat(b.mfu.mfu, b.mfu.mfu, b.mfu.mfu) if b.mfu else None
    if mfu_a and mfu_b and a.step_ms.median:
        # MFU scales with 1/step time: carry the step's spread over to it.
        mfu_a = Stat(a.mfu.mfu, a.mfu.mfu * a.step_ms.median / a.step_ms.max, a.mfu.mfu * a.step_ms.median / a.step_ms.min)
        mfu_b = Stat(b.mfu.mfu, b.mfu.mfu * b.step_ms.median / b.step_ms.max, b.mfu.mfu * b.step_ms.median / b.step_ms.min)
    rows.append(_row("MFU", mfu_a, mfu_b, lower_is_better=False))
    verdict = lambda r: r.verdict.bottleneck if r.verdict else "-"  # noqa: E731
    return Comparison(a.target, b.target, why, rows, verdict(a), verdict(b))
