"""The last profile of the run (``RUN/profiles/*.json``: kept there by ``nanolm profile --run RUN``, or written
by ``nanolm profile --json FILE``): where a step's time goes, the ranked verdict with its fixes, MFU, the trace;
and, when the run has two or more profiles, the before / after / why table of the last two
(nanolm.profiling.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...runs.artifacts import PROFILES
from ..model import BY_ROW, Column, Link, Measure, Section, Table, field_table
from ..registry import CONTENT_ERRORS, RunFiles

PERFETTO = ("open https://ui.perfetto.dev in Chrome or Firefox and drag the trace file onto it (a .json.gz opens as it "
            "is); or chrome://tracing, then Load. The file stays on your machine.")
UNIT_FORMAT = {"ms": ".2f", "tokens/s": "int", "fraction": "pct"}


def load_profile(path: Path, warnings: list[str] | None = None) -> Any:
    """A profile report as nanolm.profiling reads it; for a damaged one, an error saying what is wrong: not JSON
    (where), not a JSON object, a field missing (which), or what nanolm.profiling finds wrong with it."""
    import dataclasses
    import json

    from ...profiling.analysis import ProfileReport
    from ...profiling.compare import load_report

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object (a {type(data).__name__})")
    for f in dataclasses.fields(ProfileReport):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in data:
            raise ValueError(f"not a nanolm profile report: no field {f.name!r}")
    return load_report(path, warnings)


def profile_files(run: RunFiles) -> list[Path]:
    """The run's profile reports, newest first (trace files, kept beside them, left out)."""
    return run.newest_first(p for p in run.files(PROFILES, "report") if "trace" not in p.name)


def profile_section(run: RunFiles, section: Section) -> None:
    readable = list(run.each(section, profile_files(run), lambda p: load_profile(p, section.lines)))
    if not readable:
        return
    path, report = readable[0]
    run.each_part(section, [path], lambda p, part: _last_profile(run, p, report, len(readable), part))
    if len(readable) > 1:
        from ...profiling.compare import compare_reports

        (after, _), (before, _) = readable[0], readable[1]
        try:
            comparison = compare_reports(before, after, why=None)
        except CONTENT_ERRORS as e:
            section.errors.append(run.problem(after, e))
            return
        section.tables.append(comparison_table(comparison, f"before ({run.rel(before)}) / after ({run.rel(after)})"))
        section.lines += [f"comparison warning: {w}" for w in comparison.warnings]


def _last_profile(run: RunFiles, path: Path, report: Any, readable: int, section: Section) -> None:
    section.lines.append(f"{run.rel(path)} (the newest of {readable} readable profile(s)): {report.target} on "
                         f"{report.device}; {report.scope}")
    _summary(section, report)
    _phase_tables(section, report)
    _verdict(section, report)
    _trace(run, section, path, report)


def _summary(section: Section, r: Any) -> None:
    w, m = r.window, r.mfu
    rows = [("step time, median over windows", r.step_ms.median, "ms", ".2f"),
            ("step time, min–max over windows", (r.step_ms.min, r.step_ms.max), "ms", ".2f"),
            ("windows × active steps", f"{w.get('windows', w.get('repeat'))} × {w.get('active')}", "", "text"),
            ("steps measured", r.steps_measured, "", "int"),
            ("tokens/s, median", r.tokens_per_s.median if r.tokens_per_s else None, "tokens/s", "int"),
            ("GPU busy", r.device_busy, "% of the step", "pct")]
    if m is not None:
        rows += [("MFU (6N·tokens/s over the peak)", m.mfu, "%", "pct"),
                 ("MFU with attention (12·L·d·T)", m.mfu_with_attention, "%", "pct"),
                 ("model FLOP/s achieved", m.flops_per_s, "FLOP/s", ".3g"),
                 ("peak", m.peak_flops_per_s, "FLOP/s", ".3g"), ("peak's source", m.peak_source, "", "text")]
    section.tables.append(field_table("summary", "the step", rows))
    section.measures += [Measure("profile: step time", r.step_ms.median, "ms", "lower", ".2f")]
    if r.tokens_per_s:
        section.measures.append(Measure("profile: tokens/s", r.tokens_per_s.median, "tokens/s", "higher", "int"))
    if m is not None:
        section.measures.append(Measure("profile: MFU", m.mfu, "%", "higher", "pct"))
    section.lines += [f"unstable: the windows disagree ({u}); treat these numbers as rough" for u in r.unstable]
    section.lines += [f"note: {n}" for n in r.notes]


def _phase_tables(section: Section, r: Any) -> None:
    from ...profiling.analysis import PHASE_LABELS

    section.tables.append(Table("phases", "where a step's time goes (the median window; phases do not overlap)", [
        Column("phase"), Column("time", "ms/step", ".2f"), Column("min–max over windows", "ms/step", ".2f"),
        Column("share of the step", "%", "pct")],
        [[PHASE_LABELS.get(p.phase, p.phase), p.ms.median, (p.ms.min, p.ms.max), p.share] for p in r.phases]))
    section.tables.append(Table("categories", "operators by category (self time, nothing counted twice)", [
        Column("category"), Column("calls", "per step", ".0f"), Column("self time", "ms/step", ".2f"),
        Column("share", "%", "pct")], [[c.category, c.calls_per_step, c.self_ms, c.share] for c in r.categories]))
    if r.top_ops:
        section.tables.append(Table("operators", "top operators by self time", [
            Column("operator"), Column("category"), Column("calls", "per step", ".0f"),
            Column("self time", "ms/step", ".3f"), Column("share", "%", "pct")],
            [[o.name, o.category, o.calls_per_step, o.self_ms, o.share] for o in r.top_ops]))


def _verdict(section: Section, r: Any) -> None:
    v = r.verdict
    if v is None:
        return
    section.lines.append(f"verdict: {v.bottleneck.value}: {v.headline}")
    section.lines += [f"evidence: {e}" for e in v.evidence]
    if v.findings:
        section.tables.append(Table("findings", "what takes the time, largest first (cheapest fix first among equals)", [
            Column("rank", fmt="int"), Column("bottleneck"), Column("finding"), Column("fix"),
            Column("time", "ms/step", ".2f"), Column("share", "%", "pct"), Column("step if fixed", "ms", ".2f"),
            Column("faster", "×", "x")],
            [[i, f.bottleneck.value, f.what, f.fix or "-", f.ms, f.share, f.projected_step_ms, f.speedup]
             for i, f in enumerate(v.findings, 1)]))
    else:  # a report written before findings were ranked
        section.lines += [f"fix {i}: {fix}" for i, fix in enumerate(v.fixes, 1)]
    if v.together_ms is not None:
        section.lines.append(f"all the ranked findings fixed at once: a {v.together_ms:.2f} ms step")
    section.lines += [f"GPU hazard: {h.what} (fix: {h.fix or '-'})" for h in v.hazards]
    section.lines += [f"left out: {x}" for x in v.left_out]


def _trace(run: RunFiles, section: Section, path: Path, r: Any) -> None:
    if not r.trace_path:
        section.lines.append("no trace was written with this profile")
        return
    given = Path(r.trace_path)
    for candidate in (given, run.run_dir / given, path.parent / given.name):
        if candidate.is_file() and run.inside(candidate):
            section.links.append(Link(f"trace: {run.rel(candidate)}", run.href(candidate), PERFETTO))
            return
    section.lines.append(f"the trace {given.name} is not in the run folder (keep it beside {run.rel(path)} to link it "
                         f"here); to read a trace: {PERFETTO}")


def comparison_table(c: Any, caption: str) -> Table:
    """A profile comparison (nanolm.profiling.compare.Comparison) as the before / after / why table."""
    from ...profiling.compare import Change

    status = {Change.BETTER: "yes, better", Change.WORSE: "yes, worse", Change.NOISE: "no: within noise",
              Change.TOO_SMALL: "too small to compare", Change.MISSING: "in one report only"}
    rows, formats = [], []
    for r in c.rows:
        rows.append([r.metric.strip(), None if r.before is None else r.before.median,
                     None if r.before is None else (r.before.min, r.before.max),
                     None if r.after is None else r.after.median, None if r.after is None else (r.after.min, r.after.max),
                     r.change, status[Change(r.status)]])
        formats.append(UNIT_FORMAT.get(r.unit, ".2f"))
    rows.append(["verdict", str(c.verdict_before), "", str(c.verdict_after), "", None, ""])
    formats.append("text")
    return Table("before-after", caption + (f"; why: {c.why}" if c.why else ""), [
        Column("measure"), Column("before", fmt=BY_ROW), Column("before, min–max", fmt=BY_ROW),
        Column("after", fmt=BY_ROW), Column("after, min–max", fmt=BY_ROW), Column("change", "%", "pct"),
        Column("beyond the run-to-run spread?")], rows,
        note="a change counts only when the two min–max ranges over repeated windows are disjoint and the change is "
             "larger than either spread", row_formats=formats)
