"""Two runs side by side (``nanolm report compare A B``): the config differences first, then every
measurement both runs have, with the noise-aware verdict (nanolm.repro) where both runs belong to seed
groups, then the before / after / why table of their newest profiles (nanolm.profiling.compare), with
the config differences as the why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError
from ..runs import Manifest, read_manifest
from .build import build_report, check_run_folder, now
from .figures import Budget
from .model import BY_ROW, Column, Measure, Report, Section, Table
from .registry import CONTENT_ERRORS, RunFiles, reason


def config_differences(a: Manifest, b: Manifest) -> dict[str, tuple[Any, Any]]:
    """key -> (A's value, B's value) for every config key on which the two runs differ (a key one run
    lacks counts as None there). The run's name and runs folder are left out: they change nothing measured."""
    keys = sorted((set(a.config) | set(b.config)) - {"name", "runs_dir"})
    return {k: (a.config.get(k), b.config.get(k)) for k in keys if a.config.get(k) != b.config.get(k)}


def _why(diff: dict[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{k}: {va!r} → {vb!r}" for k, (va, vb) in diff.items()) or "no config difference"


def compare_runs(run_a: str | Path, run_b: str | Path, page_dir: str | Path | None = None) -> Report:
    """The comparison page's data: B measured against A (the baseline)."""
    a_dir, b_dir = check_run_folder(run_a), check_run_folder(run_b)
    ma, mb = read_manifest(a_dir), read_manifest(b_dir)
    ra, rb = build_report(a_dir, page_dir), build_report(b_dir, page_dir)
    diff = config_differences(ma, mb)
    config = Section("config", "Config differences")
    config.lines.append(f"A (baseline): {ma.name or a_dir.name} ({a_dir.name}); B: {mb.name or b_dir.name} ({b_dir.name})")
    if diff:
        config.tables.append(
            Table(
                "differences",
                f"{len(diff)} config key(s) differ",
                [Column("key"), Column("A"), Column("B")],
                [[k, _cell(va), _cell(vb)] for k, (va, vb) in diff.items()],
            )
        )
    else:
        config.lines.append("the two configs are the same")
    if ma.data_version != mb.data_version or ma.data_sha256 != mb.data_sha256:
        config.lines.append(
            f"different data: A {ma.data_version} (sha256 {str(ma.data_sha256)[:12]}), "
            f"B {mb.data_version} (sha256 {str(mb.data_sha256)[:12]}): the measurements are not of "
            "the same task"
        )
    sections = [config, _measurements(ra, rb, ma, mb, a_dir, b_dir)]
    profiles = _profiles(a_dir, ma, b_dir, mb, _why(diff))
    if not profiles.empty:
        sections.append(profiles)
    only = _only_in_one(ra, rb)
    if only:
        sections[1].lines += only
    for section in sections:  # files named from the runs folder on, not from the machine's root
        section.lines = [_shorten(line, a_dir, b_dir) for line in section.lines]
        section.errors = [_shorten(e, a_dir, b_dir) for e in section.errors]
    return Report(
        f"nanolm compare: {ma.name or a_dir.name} (A) vs {mb.name or b_dir.name} (B)",
        f"A {a_dir.name} · B {b_dir.name}",
        sections,
        now(),
        kind="compare",
    )


def _shorten(text: str, *run_dirs: Path) -> str:
    for run_dir in run_dirs:
        for prefix in (str(run_dir.parent.resolve()), str(run_dir.parent)):
            if prefix not in (".", ""):
                text = text.replace(prefix.rstrip("/") + "/", "")
    return text


def _cell(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


def _only_in_one(ra: Report, rb: Report) -> list[str]:
    keys_a, keys_b = {s.key: s.title for s in ra.sections}, {s.key: s.title for s in rb.sections}
    out = [f"only A has: {', '.join(t for k, t in keys_a.items() if k not in keys_b)}"] if set(keys_a) - set(keys_b) else []
    if set(keys_b) - set(keys_a):
        out.append(f"only B has: {', '.join(t for k, t in keys_b.items() if k not in keys_a)}")
    return out


def _measurements(ra: Report, rb: Report, ma: Manifest, mb: Manifest, a_dir: Path, b_dir: Path) -> Section:
    section = Section("measurements", "Measurements both runs have")
    section.errors += [f"A: {p}" for p in ra.problems] + [f"B: {p}" for p in rb.problems]
    measures_a, measures_b = ra.measures(), rb.measures()
    shared = [
        name
        for name in measures_a
        if name in measures_b and measures_a[name].value is not None and measures_b[name].value is not None
    ]
    groups = _groups(ma, mb, a_dir, b_dir, section)
    rows, formats = [], []
    for name in shared:
        a, b = measures_a[name], measures_b[name]
        rows.append(
            [
                name,
                "points" if a.unit == "%" else a.unit,
                a.value,
                b.value,
                b.value - a.value,
                (b.value - a.value) / abs(a.value) if a.value else None,
                *_verdict(a, groups, section),
            ]
        )
        formats.append(a.fmt)
    if rows:
        section.tables.append(
            Table(
                "shared",
                f"{len(rows)} measurement(s) of both runs: B against A",
                [
                    Column("measurement"),
                    Column("unit"),
                    Column("A", fmt=BY_ROW),
                    Column("B", fmt=BY_ROW),
                    Column("B − A", fmt=BY_ROW),
                    Column("relative change", "%", "pct"),
                    Column("verdict (seed groups)"),
                    Column("the groups' numbers"),
                ],
                rows,
                row_formats=formats,
                note="a verdict needs both runs in seed groups (nanolm seeds): a difference between two single runs "
                "cannot be told from seed noise",
            )
        )
    else:
        section.lines.append("the two runs have no measurement in common")
    return section


def _groups(ma: Manifest, mb: Manifest, a_dir: Path, b_dir: Path, section: Section) -> tuple | None:
    """(group A, group B, runs folder or None) when both runs belong to seed groups that can be loaded."""
    from ..repro.seeds import load_group

    name_a, name_b = ma.config.get("group"), mb.config.get("group")
    if not (isinstance(name_a, str) and isinstance(name_b, str)):
        return None
    try:
        ga, gb = load_group(name_a, a_dir.parent), load_group(name_b, b_dir.parent)
    except UserError as e:
        section.lines.append(f"no verdicts: {e}")
        return None
    same = a_dir.parent.resolve() == b_dir.parent.resolve()
    section.lines.append(f"seed groups: A is in {name_a} ({len(ga.runs)} seeds), B in {name_b} ({len(gb.runs)} seeds)")
    return ga, gb, a_dir.parent if same else None


def _verdict(m: Measure, groups: tuple | None, section: Section) -> tuple[str, str]:
    """(the noise-aware verdict of the two groups on this measurement, its numbers), or dashes where there is none."""
    if groups is None or m.group_metric is None:
        return "-", "-"
    ga, gb, runs_dir = groups
    higher = m.better == "higher"
    try:
        if runs_dir is not None:  # both in one runs folder: nanolm compare's own checks (same data, mixed configs)
            from ..repro.compare import compare_run_groups

            result = compare_run_groups(ga.name, gb.name, m.group_metric, higher, None, runs_dir)
            section.lines += [f"{m.name}: {w}" for w in result.warnings if w not in section.lines]
            c = result.comparison
        else:
            from ..repro.stats import compare_groups

            c = compare_groups(ga.metrics[m.group_metric].values, gb.metrics[m.group_metric].values, higher)
    except (UserError, KeyError) as e:
        return "no verdict", reason(e)
    return str(c.verdict), c.reason


def _profiles(a_dir: Path, ma: Manifest, b_dir: Path, mb: Manifest, why: str) -> Section:
    """The before / after / why table of the two runs' newest readable profiles (an unreadable one is already
    named among the measurements' problems, from each run's own report)."""
    from ..profiling.compare import compare_reports
    from .sections.profile import comparison_table, load_profile, profile_files

    section = Section("profile", "Profiles: before / after / why")
    newest = []
    for run_dir, manifest in ((a_dir, ma), (b_dir, mb)):
        run = RunFiles(run_dir, manifest, run_dir, Budget())
        newest.append(next((p for p, _ in run.each(Section("", ""), profile_files(run), load_profile)), None))
    if newest.count(None) == 1:
        section.lines.append(f"only {'A' if newest[0] else 'B'} has a profile: nothing to set it beside")
    if None in newest:
        return section
    try:
        comparison = compare_reports(newest[0], newest[1], why)
    except CONTENT_ERRORS as e:
        section.errors.append(reason(e))
        return section
    section.tables.append(
        comparison_table(
            comparison,
            f"before: A ({a_dir.name}/{newest[0].relative_to(a_dir).as_posix()}), "
            f"after: B ({b_dir.name}/{newest[1].relative_to(b_dir).as_posix()})",
        )
    )
    section.lines += [f"warning: {w}" for w in comparison.warnings]
    return section
