"""The last profile of the run (``RUN/profiles/*.json``: kept there by ``nanolm profile --run RUN``, or written
by ``nanolm profile --json FILE``): where a step's time goes, the ranked verdict with its fixes, MFU, the trace;
and, when the run has two or more profiles, the before / after / why table of the last two
(nanolm.profiling.compare)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...runs.artifacts import PROFILES
from ..model import Link, Measure, Section, Table, field_table
from ..registry import CONTENT_ERRORS, RunFiles

PERFETTO = (
    "open https://ui.perfetto.dev in Chrome or Firefox and drag the trace file onto it (a .json.gz opens as it "
    "is); or chrome://tracing, then Load. The file stays on your machine."
)


def load_profile(path: Path, warnings: list[str] | None = None) -> Any:
    """A profile report as nanolm.profiling reads it; for a damaged one, an error saying what is wrong: not JSON
    (where), not a JSON object, a field missing (which), or what nanolm.profiling finds wrong with it."""
    import dataclasses
    import json

    from ...profiling.compare import load_report
    from ...profiling.report import ProfileReport

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
    """The profile's tables as the terminal shows them (laid out once, in nanolm.profiling.show.tables): on a GPU
    the GPU's first, then the step's, the collectives, the syncs, the verdict's findings and --isolate's."""
    from ...profiling.show import tables as shown

    section.lines.append(
        f"{run.rel(path)} (the newest of {readable} readable profile(s)): {report.target} on {report.device}; {report.scope}"
    )
    _summary(section, report)
    gpu = shown.gpu_table(report)
    if gpu is not None:
        section.lines += [report.gpu.gate_sentence, *filter(None, [shown.gpu_clock_line(report)])]
        section.tables.append(gpu)
        section.lines += shown.gpu_detail_lines(report)
    section.tables += shown.step_tables(report)
    if report.communication is not None:
        section.lines.append(shown.communication_line(report.communication))
    section.tables += [t for t in (shown.collectives_table(report.communication), shown.syncs_table(report)) if t]
    if not report.syncs:
        section.lines.append("host-device syncs: none in the measured steps")
    _verdict(section, report)
    section.lines += shown.expectation_lines(report)
    isolation = shown.isolation_table(report)
    if isolation is not None:
        section.tables.append(isolation)
        section.lines += [line.strip() for line in shown.isolation_lines(report)]
    _trace(run, section, path, report)


def _summary(section: Section, r: Any) -> None:
    w, m = r.window, r.mfu
    rows = [
        ("step time, median over windows", r.step_ms.median, "ms", ".2f"),
        ("step time, min–max over windows", (r.step_ms.min, r.step_ms.max), "ms", ".2f"),
        ("windows × active steps", f"{w.get('windows', w.get('repeat'))} × {w.get('active')}", "", "text"),
        ("steps measured", r.steps_measured, "", "int"),
        ("tokens/s, median", r.tokens_per_s.median if r.tokens_per_s else None, "tokens/s", "int"),
        ("GPU busy", r.device_busy, "% of the step", "pct"),
    ]
    if m is not None:
        rows += [
            ("MFU (6N·tokens/s over the peak)", m.mfu, "%", "pct"),
            ("MFU with attention (12·L·d·T)", m.mfu_with_attention, "%", "pct"),
            ("model FLOP/s achieved", m.flops_per_s, "FLOP/s", ".3g"),
            ("peak", m.peak_flops_per_s, "FLOP/s", ".3g"),
            ("peak's source", m.peak_source, "", "text"),
        ]
    section.tables.append(field_table("summary", "the step", rows))
    section.measures += [Measure("profile: step time", r.step_ms.median, "ms", "lower", ".2f")]
    if r.tokens_per_s:
        section.measures.append(Measure("profile: tokens/s", r.tokens_per_s.median, "tokens/s", "higher", "int"))
    if m is not None:
        section.measures.append(Measure("profile: MFU", m.mfu, "%", "higher", "pct"))
    section.lines += [f"unstable: the windows disagree ({u}); treat these numbers as rough" for u in r.unstable]
    section.lines += [f"note: {n}" for n in r.notes]


def _verdict(section: Section, r: Any) -> None:
    from ...profiling.show.tables import findings_table

    v = r.verdict
    if v is None:
        return
    section.lines.append(f"verdict: {v.bottleneck.value}: {v.headline}")
    section.lines += [f"evidence: {e}" for e in v.evidence]
    findings = findings_table(v)
    if findings is not None:
        section.tables.append(findings)
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
    section.lines.append(
        f"the trace {given.name} is not in the run folder (keep it beside {run.rel(path)} to link it "
        f"here); to read a trace: {PERFETTO}"
    )


def comparison_table(c: Any, caption: str) -> Table:
    """A profile comparison (nanolm.profiling.compare.Comparison) as the before / after / why table: the one
    nanolm.profiling.show.tables lays out for the terminal too (named here for the runs' comparison page)."""
    from ...profiling.show.tables import comparison_table as shown

    return shown(c, caption)
