"""``nanolm profile compare BEFORE.json AFTER.json``: the before / after / why table.

A change is "better" or "worse" only when it is beyond the run-to-run spread: the two min-max ranges
over the repeated windows do not overlap, and the change of the medians is larger than the wider of
the two spreads (max - min). Otherwise it is "within noise". A measure whose value rounds to zero at
the precision shown (0.01 ms, 1 token/s, 0.1% MFU) has no relative change: "too small to compare".
A report whose windows disagreed with each other (the stability rule in analysis.py) is named in the
comparison's warnings: its differences may be the machine, not the change."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from .measure.host import PHASE_LABELS
from .report import Change, Comparison, ComparisonRow, ProfileReport, Stat

# The precision each unit is shown at; a value below half of it shows as zero.
RESOLUTION = {"ms": 0.01, "tokens/s": 1.0, "fraction": 0.001}


def _clamp_unaccounted(report: ProfileReport, path: Path) -> str | None:
    """Reports written before nanolm clamped it can hold a negative unaccounted time (clock skew): read as 0."""
    for p in report.phases:
        if (
            p.phase == "unaccounted"
            and all(isinstance(v, (int, float)) for v in (p.ms.median, p.ms.min, p.ms.max))
            and min(p.ms.median, p.ms.min, p.ms.max) < 0
        ):
            low = p.ms.min
            p.ms = Stat(max(0.0, p.ms.median), max(0.0, p.ms.min), max(0.0, p.ms.max))
            p.share = max(0.0, p.share)
            return f"{path}: its unaccounted time went down to {low:.2f} ms (clock skew); read as 0"
    return None


def load_report(path: str | Path, warnings: list[str] | None = None) -> ProfileReport:
    """A report `nanolm profile --json` wrote; a UserError naming the problem if the file is not one.
    Lenient readings (see _clamp_unaccounted) are added to `warnings`."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such report; write one with nanolm profile --json {path}")
    try:
        report = ProfileReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
        lenient = _clamp_unaccounted(report, path)
        problems = report.problems()
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, KeyError, AttributeError, ValueError) as e:
        raise UserError(f"{path}: not a nanolm profile report ({type(e).__name__})") from None
    if problems:
        raise UserError(f"{path}: not a nanolm profile report ({problems[0]}); write a new one with nanolm profile --json")
    if lenient and warnings is not None:
        warnings.append(lenient)
    return report


def rounds_to_zero(value: float, unit: str) -> bool:
    return abs(value) < RESOLUTION[unit] / 2


def _row(metric: str, a: Stat | None, b: Stat | None, lower_is_better: bool, unit: str = "ms") -> ComparisonRow:
    if a is None or b is None:
        return ComparisonRow(metric, a, b, None, None, None, Change.MISSING, unit)
    if rounds_to_zero(a.median, unit) or rounds_to_zero(b.median, unit):
        return ComparisonRow(metric, a, b, None, None, None, Change.TOO_SMALL, unit)
    change = (b.median - a.median) / a.median
    disjoint = b.max < a.min or b.min > a.max
    beyond = disjoint and abs(b.median - a.median) > max(a.max - a.min, b.max - b.min)
    if not beyond:
        return ComparisonRow(metric, a, b, change, False, None, Change.NOISE, unit)
    better = (b.median < a.median) if lower_is_better else (b.median > a.median)
    return ComparisonRow(metric, a, b, change, True, better, Change.BETTER if better else Change.WORSE, unit)


def _stability_warning(report: ProfileReport, path: str | Path) -> str | None:
    if not report.unstable:
        return None
    return (
        f"{path}: its windows disagreed with each other ({'; '.join(report.unstable)}): "
        "differences involving it may be the machine, not the change; profile again on a quieter machine"
    )


def compare_reports(before: str | Path, after: str | Path, why: str | None = None) -> Comparison:
    warnings: list[str] = []
    a, b = load_report(before, warnings), load_report(after, warnings)
    warnings += [w for w in (_stability_warning(a, before), _stability_warning(b, after)) if w]
    rows = [_row("step time (ms)", a.step_ms, b.step_ms, lower_is_better=True)]
    phases = [p.phase for p in a.phases] + [p.phase for p in b.phases if p.phase not in {q.phase for q in a.phases}]
    for phase in phases:
        pa = next((p.ms for p in a.phases if p.phase == phase), None)
        pb = next((p.ms for p in b.phases if p.phase == phase), None)
        rows.append(_row(f"  {PHASE_LABELS.get(phase, phase)} (ms)", pa, pb, lower_is_better=True))
    rows.append(_row("tokens/s", a.tokens_per_s, b.tokens_per_s, lower_is_better=False, unit="tokens/s"))
    mfu_a = Stat(a.mfu.mfu, a.mfu.mfu, a.mfu.mfu) if a.mfu else None
    mfu_b = Stat(b.mfu.mfu, b.mfu.mfu, b.mfu.mfu) if b.mfu else None
    if mfu_a and mfu_b and a.step_ms.median:
        # MFU scales with 1/step time: carry the step's spread over to it.
        mfu_a = Stat(a.mfu.mfu, a.mfu.mfu * a.step_ms.median / a.step_ms.max, a.mfu.mfu * a.step_ms.median / a.step_ms.min)
        mfu_b = Stat(b.mfu.mfu, b.mfu.mfu * b.step_ms.median / b.step_ms.max, b.mfu.mfu * b.step_ms.median / b.step_ms.min)
    rows.append(_row("MFU", mfu_a, mfu_b, lower_is_better=False, unit="fraction"))
    verdict = lambda r: r.verdict.bottleneck if r.verdict else "-"  # noqa: E731
    return Comparison(a.target, b.target, why, rows, verdict(a), verdict(b), warnings)


LOG_HEADER = (
    "| why (the one change) | step before (ms) | step after (ms) | change | beyond the spread? "
    "| tokens/s before → after | verdict before → after |\n|---|---|---|---|---|---|---|\n"
)


def log_row(c: Comparison) -> str:
    """One Markdown row of the before / after / why table for this comparison."""
    step = c.rows[0]
    tokens = next((r for r in c.rows if r.unit == "tokens/s"), None)

    def cell(s: Stat | None, fmt: str) -> str:
        return "-" if s is None else f"{fmt.format(s.median)} ({fmt.format(s.min)}–{fmt.format(s.max)})"

    throughput = (
        "-"
        if tokens is None or tokens.before is None or tokens.after is None
        else f"{tokens.before.median:,.0f} → {tokens.after.median:,.0f}"
    )
    change = "-" if step.change is None else f"{step.change:+.1%}"
    why = (c.why or "(no --why given)").replace("|", "\\|").replace("\n", " ")
    return (
        f"| {why} | {cell(step.before, '{:.2f}')} | {cell(step.after, '{:.2f}')} | {change} | {Change(step.status)} "
        f"| {throughput} | {c.verdict_before} → {c.verdict_after} |\n"
    )


def append_to_log(c: Comparison, path: str | Path) -> Path:
    """Add this comparison's row to the Markdown table at `path` (made with its header when new); the file is
    rewritten atomically, so an interrupted write never leaves half a table."""
    from ..io import atomic_write_text, check_writable_file

    path = check_writable_file(path, "--log", "changes.md")
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if old and LOG_HEADER.splitlines()[0] not in old:
        raise UserError(f"--log {path}: not a before / after / why table written by nanolm profile compare; give a new file name")
    text = (old if old.endswith("\n") or not old else old + "\n") if old else LOG_HEADER
    atomic_write_text(path, text + log_row(c))
    return path
