"""``nanolm report RUN`` and ``nanolm report compare A B``: thin commands over nanolm.report.
Heavy imports (matplotlib, torch for the profile and alignment sections) happen inside the commands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .interp import _DefaultCommandGroup
from .output import OutputFile, console, emit, json_option, runs_dir_option, working

if TYPE_CHECKING:
    from ..report.model import Report


class _ReportGroup(_DefaultCommandGroup):
    """`nanolm report RUN` runs `report page RUN`; `nanolm report compare A B` compares (a run named
    "compare" is reached by its path, e.g. runs/compare)."""

    default_command = "page"


def _output_option(f):
    return click.option(
        "-o",
        "--output",
        "out",
        type=OutputFile("report.html", ".html"),
        help="The page to write (a name ending in .html, in a folder that exists).",
    )(f)


@click.group(cls=_ReportGroup)
def report() -> None:
    """One self-contained HTML page of everything measured on a run.

    \b
    nanolm report RUN [-o report.html] [--json]     the run's page (default: RUN/report.html)
    nanolm report compare A B [-o page.html]        B beside A: config differences, every shared
                                                    measurement (with the seed-noise verdict where
                                                    both are in seed groups), before / after / why

    The page has no scripts and fetches nothing: it opens from a file:// URL with no network, prints
    to PDF, and can be sent as one file. Sections with no data are left out; an artifact that cannot
    be read is named on the page (and in a warning), and the rest is written.
    """


@report.command("page", hidden=True)
@click.argument("run_ref", metavar="RUN")
@_output_option
@runs_dir_option
@json_option
def report_page(run_ref: str, out: Path | None, runs_dir: str, json_out: bool) -> None:
    """The page of one run."""
    from ..report import build_report, check_page_path, write_html
    from ..report.build import PAGE
    from ..runs import resolve_run

    run_dir = resolve_run(run_ref, runs_dir)
    page = out if out is not None else check_page_path(run_dir / PAGE)
    with working(f"reading {run_dir.name}"):
        result = build_report(run_dir, page.parent)
        write_html(result, page)
    emit(result, _print_summary, json_out, result.problems, as_json=result.to_dict())


@report.command("compare")
@click.argument("run_a", metavar="A")
@click.argument("run_b", metavar="B")
@_output_option
@runs_dir_option
@json_option
def report_compare(run_a: str, run_b: str, out: Path | None, runs_dir: str, json_out: bool) -> None:
    """B beside A (the baseline): config differences, shared measurements, before / after / why.

    The page goes to A/compare-<B's folder>.html unless -o names another."""
    from ..report import check_page_path, compare_runs, write_html
    from ..runs import resolve_run

    a, b = resolve_run(run_a, runs_dir), resolve_run(run_b, runs_dir)
    page = out if out is not None else check_page_path(a / f"compare-{b.name}.html")
    with working(f"comparing {a.name} and {b.name}"):
        result = compare_runs(a, b, page.parent)
        write_html(result, page)
    emit(result, _print_summary, json_out, result.problems, as_json=result.to_dict())


def _print_summary(result: Report) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(result.title), show_header=True)
    for col in ("section", "tables", "figures", "unreadable"):
        table.add_column(col, justify="left" if col == "section" else "right")
    for s in result.sections:
        table.add_row(escape(s.title), str(len(s.tables)), str(len(s.figures)), str(len(s.errors)) if s.errors else "")
    out = console()
    out.print(table)
    size = Path(result.output).stat().st_size
    out.print(
        escape(
            f"page written to {result.output} ({size / 1e6:.2f} MB); open it in a browser (no network needed), or print it to PDF"
        ),
        highlight=False,
    )
