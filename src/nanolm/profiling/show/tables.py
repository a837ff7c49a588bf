"""A profile's tables, laid out once (nanolm.tables) and drawn twice: to the terminal (nanolm.profiling.show.terminal,
with nanolm.tables.to_rich) and to the run's page (nanolm.report.sections.profile). Each builder takes the
report as nanolm.profiling reads it (a `ProfileReport`, from a saved file by `ProfileReport.from_dict`), so the
terminal and the page show the same cells from the same numbers.

The profiling layer sits below the report and cannot import it: the builders live here, and the report's
section calls them."""

from __future__ import annotations

from ...tables import BY_ROW, Column, Table
from ..measure.host import PHASE_LABELS
from ..report import Change, Comparison, Finding, ProfileReport, Verdict

UNIT_FORMAT = {"ms": ".2f", "tokens/s": "int", "fraction": "pct"}  # a comparison row's format, by its unit


CHANGE_SHOWN = {
    Change.BETTER: "yes, better",
    Change.WORSE: "yes, worse",
    Change.NOISE: "no: within noise",
    Change.TOO_SMALL: "too small to compare",
    Change.MISSING: "in one report only",
}


SPREAD_RULE = (
    "a change counts only when the two min–max ranges over repeated windows are disjoint and the change is "
    "larger than either spread"
)


def _host_side(report: ProfileReport) -> str:
    """The operator tables' caption prefix: on a GPU they are the host's time, not the device's."""
    return "host (CPU) time, launching or waiting: " if report.gpu is not None else ""


def phases_table(report: ProfileReport) -> Table:
    """Where a step's time goes, phase by phase (the median window, with the min–max over the windows)."""
    return Table(
        "phases",
        "where a step's time goes (the median window; phases do not overlap)",
        [
            Column("phase"),
            Column("time", "ms/step", ".2f"),
            Column("min–max over windows", "ms/step", ".2f"),
            Column("share of the step", "%", "pct"),
        ],
        [[PHASE_LABELS.get(p.phase, p.phase), p.ms.median, (p.ms.min, p.ms.max), p.share] for p in report.phases],
    )


def categories_table(report: ProfileReport) -> Table:
    """The operators' self time by category: no microsecond counted twice."""
    return Table(
        "categories",
        f"{_host_side(report)}operators by category (self time, nothing counted twice)",
        [
            Column("category"),
            Column("calls", "per step", ".0f"),
            Column("self time", "ms/step", ".2f"),
            Column("share", "%", "pct"),
        ],
        [[c.category, c.calls_per_step, c.self_ms, c.share] for c in report.categories],
    )


def operators_table(report: ProfileReport) -> Table | None:
    """The operators that take the most self time; None when the report lists none."""
    if not report.top_ops:
        return None
    return Table(
        "operators",
        f"{_host_side(report)}top operators by self time",
        [
            Column("operator"),
            Column("category"),
            Column("calls", "per step", ".0f"),
            Column("self time", "ms/step", ".3f"),
            Column("share", "%", "pct"),
        ],
        [[o.name, o.category, o.calls_per_step, o.self_ms, o.share] for o in report.top_ops],
    )


def step_tables(report: ProfileReport) -> list[Table]:
    """The step's tables in the order both the terminal and the page show them: phases, categories, operators."""
    return [t for t in (phases_table(report), categories_table(report), operators_table(report)) if t is not None]


def findings_table(verdict: Verdict) -> Table | None:
    """The ranked findings with their fixes and what each fix would make of the step; None for a verdict without
    ranked findings (a report written before they were ranked lists its fixes as lines). Takes the verdict, not
    the report, because a data-parallel profile's merged verdict belongs to no one rank's report."""
    if not verdict.findings:
        return None
    caption = (
        "findings by the time their fix saves (a replay of the recorded steps; cheapest fix first among equals)"
        if verdict.gate
        else "what takes the time, largest first (cheapest fix first among equals)"
    )
    return Table(
        "findings",
        caption,
        [
            Column("#", fmt="int"),
            Column("finding"),
            Column("fix"),
            Column("time", "ms/step", ".2f"),
            Column("share", "%", "pct"),
            Column("step if fixed", "ms", ".2f"),
            Column("faster", fmt="x"),
        ],
        [
            [i, f"{f.bottleneck.value}: {f.what}", f.fix or f.no_fix_left or "-", f.ms, f.share, f.projected_step_ms, f.speedup]
            for i, f in enumerate(verdict.findings, 1)
        ],
        note=_best_cases(verdict.findings),
    )


def _best_cases(findings: list[Finding]) -> str:
    """The note naming the findings whose projection is a best case ("up to": their overhead removed entirely)."""
    marked = [f"#{i}" for i, f in enumerate(findings, 1) if f.upper_bound and f.projected_step_ms is not None]
    if not marked:
        return ""
    return f"{', '.join(marked)}: step if fixed and faster are a best case (up to), with all of that time removed"


def comparison_table(c: Comparison, caption: str = "before / after") -> Table:
    """A profile comparison as the before / after / why table: each measure's median and min–max on both sides,
    the change, and whether it is beyond the run-to-run spread; the two verdicts last."""
    rows, formats = [], []
    for r in c.rows:
        rows.append(
            [
                r.metric.strip(),
                None if r.before is None else r.before.median,
                None if r.before is None else (r.before.min, r.before.max),
                None if r.after is None else r.after.median,
                None if r.after is None else (r.after.min, r.after.max),
                r.change,
                CHANGE_SHOWN[Change(r.status)],
            ]
        )
        formats.append(UNIT_FORMAT.get(r.unit, ".2f"))
    rows.append(["verdict", str(c.verdict_before), "", str(c.verdict_after), "", None, ""])
    formats.append("text")
    return Table(
        "before-after",
        caption + (f"; why: {c.why}" if c.why else ""),
        [
            Column("measure"),
            Column("before", fmt=BY_ROW),
            Column("before, min–max", fmt=BY_ROW),
            Column("after", fmt=BY_ROW),
            Column("after, min–max", fmt=BY_ROW),
            Column("change", "%", "pct"),
            Column("beyond the run-to-run spread?"),
        ],
        rows,
        note=SPREAD_RULE,
        row_formats=formats,
    )
