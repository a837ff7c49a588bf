"""One run's report: every registered section that has data, in page order; and writing a page."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..errors import UserError
from ..io import atomic_write_text, check_writable_file
from ..runs import read_manifest
from .figures import Budget
from .html import render_html
from .model import Report, Section
from .registry import READ_ERRORS, RunFiles, SectionSpec, reason
from .sections import SECTIONS

PAGE = "report.html"  # a run's page, in its folder, when no other path is given


def check_run_folder(run_dir: str | Path) -> Path:
    """run_dir, once it is a folder holding a run's manifest; else a UserError (what stops a report)."""
    path = Path(run_dir)
    if not path.exists():
        raise UserError(
            f"run {run_dir} not found (no such folder); give a run folder or a run name under runs/ (list them with: nanolm runs)"
        )
    read_manifest(path)  # a UserError when it is not a run, or its manifest is damaged
    return path


def check_page_path(out: str | Path, option: str = "-o") -> Path:
    """Where a page may be written: a name ending in .html, in a folder that exists and is writable."""
    path = Path(out)
    if path.suffix.lower() != ".html" and not path.is_dir():
        raise UserError(
            f"{option} {path}: the report is an HTML page; give a name ending in .html, e.g. {path.with_suffix('.html').name}"
        )
    return check_writable_file(path, option, PAGE)


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


def build_report(run_dir: str | Path, page_dir: str | Path | None = None, sections: tuple[SectionSpec, ...] = SECTIONS) -> Report:
    """The report of one run: a Section for each of `sections` (the page's: nanolm.report.sections.SECTIONS) with
    data (an unreadable artifact gives its section an error line, and the other sections are built as usual).
    page_dir: the folder the page will be written to, which links to the run's files are relative to (default:
    the run folder)."""
    run_dir = check_run_folder(run_dir)
    manifest = read_manifest(run_dir)
    run = RunFiles(run_dir, manifest, Path(page_dir) if page_dir is not None else run_dir, Budget())
    built = []
    for spec in sections:
        section = Section(spec.key, spec.title)
        try:
            spec.build(run, section)
        except READ_ERRORS as e:
            section.errors.append(reason(e))
        section.lines = [run.shorten(line) for line in section.lines]  # file names as the page names them
        section.errors = [run.shorten(e) for e in section.errors]
        if not section.empty:
            built.append(section)
    name = manifest.name or run_dir.name
    commit = (manifest.git.get("commit") or "")[:12]
    subtitle = " · ".join(
        x for x in (run_dir.name, manifest.created, f"commit {commit}" if commit else "", str(manifest.data_version or "")) if x
    )
    return Report(f"nanolm run {name}", subtitle, built, now())


def write_html(report: Report, out: str | Path) -> Path:
    """Write the page at out atomically (a reader never sees half a page); report.output says where."""
    out = Path(out)
    report.output = str(out)
    atomic_write_text(out, render_html(report))
    return out


def write_report(run_dir: str | Path, out: str | Path | None = None, on_problem: Callable[[str], None] | None = None) -> Path:
    """Build the run's report and write its page (default: RUN/report.html); the page's path. Each artifact
    that could not be read is passed to on_problem (a command's warning), and named on the page.
    Long-running commands call this at their end for --report."""
    run_dir = check_run_folder(run_dir)
    page = check_page_path(out if out is not None else Path(run_dir) / PAGE)
    report = build_report(run_dir, page.parent)
    write_html(report, page)
    for problem in report.problems:
        if on_problem is not None:
            on_problem(problem)
    return page
