"""A profile's tables, laid out once (nanolm.tables) and drawn twice: to the terminal (nanolm.profiling.show.terminal,
with nanolm.tables.to_rich) and to the run's page (nanolm.report.sections.profile). Each builder takes the
report as nanolm.profiling reads it (a `ProfileReport`, from a saved file by `ProfileReport.from_dict`), so the
terminal and the page show the same cells from the same numbers.

The profiling layer sits below the report and cannot import it: the builders live here, and the report's
section calls them."""

from __future__ import annotations

from ...tables import BY_ROW, Column, Table
from ..measure.host import PHASE_LABELS
from ..report import Change, Communication, Comparison, Finding, ProfileReport, Verdict
from ..trace.classify import short_name

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


def gpu_table(report: ProfileReport) -> Table | None:
    """Where a step's time goes on the GPU: each device class busy, then each idle bucket, then the step (the
    rows add up to it); None for a report without a GPU part."""
    g = report.gpu
    if g is None:
        return None
    rows = [
        [row.name if row.kind != "busy" else f"busy: {row.name}", row.ms, row.share, "; ".join(short_name(n) for n in row.top)]
        for row in g.rows
    ]
    return Table(
        "gpu",
        f"where a step's time goes on the GPU (ms per {g.basis} step; adds up to the step)",
        [Column("GPU"), Column("ms/step", fmt=".2f"), Column("share", fmt="pct0"), Column("top kernels / host ops")],
        [*rows, ["step", g.step_ms, 1.0, ""]],
        bold_rows=[len(rows)],
    )


def gpu_clock_line(report: ProfileReport) -> str | None:
    """What the profiler cost the step: the unprofiled step beside the profiled one; None when not clocked."""
    g = report.gpu
    if g is None or report.unprofiled_step_ms is None or report.profiled_over_unprofiled is None:
        return None
    added = report.profiled_over_unprofiled - 1
    return f"unprofiled {report.unprofiled_step_ms.median:.1f} ms; profiled {g.profiled_step_ms:.1f} ms: " + (
        f"the profiler added {added:.0%}" if added > 0.02 else "the profiler added next to nothing"
    )


def gpu_detail_lines(report: ProfileReport) -> list[str]:
    """The lines under the GPU table: the launches (kernels a step, median kernel, launch call and launch delay,
    the deepest queue, the host blocked, the matmul kernels' rate), the unclassified kernels, the GPU's notes."""
    g = report.gpu
    if g is None:
        return []
    stats = [f"{g.kernels_per_step:.0f} kernels a step"]
    if g.median_kernel_us is not None:
        stats.append(f"median kernel {g.median_kernel_us:.0f} µs")
    if g.median_launch_us is not None:
        stats.append(f"median launch call {g.median_launch_us:.0f} µs")
    if g.median_launch_delay_us is not None:
        stats.append(f"median launch→start {g.median_launch_delay_us:.0f} µs")
    stats.append(f"deepest queue {g.max_queue_depth}")
    if g.host_blocked_ms:
        stats.append(
            f"host blocked {g.host_blocked_ms:.1f} ms a step"
            + (f" ({g.queue_full_ms:.1f} ms 'Command Buffer Full': the GPU's queue was full)" if g.queue_full_ms else "")
        )
    if g.matmul_tflops is not None:
        stats.append(f"matmul kernels at {g.matmul_tflops:.0f} TFLOP/s")
    lines = ["launches: " + "; ".join(stats)]
    if g.top_other:
        lines.append("unclassified kernels: " + ", ".join(f"{short_name(n)} ({ms:.2f} ms)" for n, ms in g.top_other))
    return lines + [f"note: {note}" for note in g.notes]


def syncs_table(report: ProfileReport) -> Table | None:
    """The host-device syncs in the measured steps, where they are in the code; None when there were none."""
    if not report.syncs:
        return None
    return Table(
        "syncs",
        "host-device syncs" + ("" if "CUDA" in report.scope else " (would be syncs on a GPU)"),
        [Column("call"), Column("where"), Column("per step", fmt=".1f"), Column("code")],
        [[s.kind, s.location, s.per_step, s.code] for s in report.syncs],
    )


def communication_line(c: Communication) -> str:
    """The collectives in a sentence: in flight, exposed, and how much of the in-flight time was hidden."""
    return (
        f"communication{f' ({c.backend})' if c.backend else ''}: collectives in flight {c.in_flight_ms:.2f} ms a "
        f"step ({c.share:.0%} of it), exposed {c.exposed_ms:.2f} ms ({c.exposed_share:.0%}: the step waiting for "
        f"them), {c.overlap:.0%} of the in-flight time behind {c.overlap_with}"
    )


def collectives_table(c: Communication | None) -> Table | None:
    """Each kind of collective: calls and time in flight a step; None without collectives."""
    if c is None or not c.collectives:
        return None
    return Table(
        "collectives",
        "collectives",
        [Column("kind"), Column("calls/step", fmt=".1f"), Column("in flight ms/step", fmt=".2f")],
        [[row.kind, row.calls_per_step, row.in_flight_ms] for row in c.collectives],
    )


def isolation_table(report: ProfileReport) -> Table | None:
    """--isolate: the input pipeline alone and the model alone beside the profiled step; None without --isolate."""
    iso = report.isolation
    if iso is None:
        return None
    rows = [
        [name, "-", "-", "not measured"] if stat is None else [name, stat.median, (stat.min, stat.max), stat.median / iso.step_ms]
        for name, stat in (("input pipeline alone", iso.loader_ms), ("model alone", iso.model_ms))
    ]
    return Table(
        "isolation",
        "--isolate: each part measured alone",
        [Column("measured"), Column("ms/step", fmt=".2f"), Column("min–max", fmt=".2f"), Column("share of the step", fmt="pct0")],
        [*rows, ["profiled step", iso.step_ms, "", 1.0]],
    )


def isolation_lines(report: ProfileReport) -> list[str]:
    """--isolate's lines under its table: what each part ran, then the bound it measured; [] without --isolate."""
    iso = report.isolation
    if iso is None:
        return []
    return [
        f"  input pipeline: {iso.loader_what}",
        f"  model: {iso.model_what}",
        f"Measured alone: {iso.bound}: {iso.explanation}",
    ]


def expectation_lines(report: ProfileReport) -> list[str]:
    """--expect: the estimate worked out, the measurement beside it and, when slower, the missing time per step by
    what fixing each finding would buy; [] without an expectation."""
    e = report.expectation
    if e is None:
        return []
    measured = [f"{e.measured_step_ms:.2f} ms/step"]
    if e.measured_tokens_per_s is not None:
        measured.append(f"{e.measured_tokens_per_s:,.0f} tokens/s")
    if e.measured_mfu is not None:
        measured.append(f"MFU {e.measured_mfu:.1%}")
    how = (
        f"{e.slower:.1f}× slower than expected"
        if e.slower >= 1.05
        else f"{1 / e.slower:.1f}× faster than expected"
        if e.slower <= 1 / 1.05
        else "as expected (within 5%)"
    )
    lines = [f"Expected ({e.given}): {e.formula}", f"Measured: {', '.join(measured)}: {how}"]
    if e.missing_ms <= 0 or e.slower < 1.05:
        return lines
    lines.append(f"the missing {e.missing_ms:.2f} ms per step, by what fixing each finding would buy:")
    lines += [f"  {ms:8.2f} ms  {what}" for what, ms in e.explained]
    if e.unexplained_ms > 0:
        lines.append(
            f"  {e.unexplained_ms:8.2f} ms  not explained by the findings (the estimate's MFU may be "
            "out of reach for this model and device)"
        )
    return lines


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
