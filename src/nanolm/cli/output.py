"""What every command group shares: the console, JSON output, the common options, one warning
format, spinners and progress bars on stderr, the click type for output files, and a command's result
saved in its run (``save_run_result``) with the run's page written after it (``--report``).

Only click is imported at the top, so ``nanolm --help`` stays fast (no torch)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import UserError
from ..io import check_writable_file, to_jsonable
from ..runs.artifacts import Artifact

if TYPE_CHECKING:
    from typing import TypeVar

    R = TypeVar("R")  # a command's result: what emit renders (a type checker's name only, never defined at run time)

WARNING_PREFIX = "nanolm: warning: "


# ---- options shared by the command groups -----------------------------------------------------

def set_option(f):
    return click.option("--set", "set_", multiple=True, metavar="KEY=VALUE",
                        help="Config override (repeatable), e.g. --set lr=1e-3.")(f)


def json_option(f):
    return click.option("--json", "json_out", is_flag=True, help="Print the result as JSON on stdout.")(f)


def runs_dir_option(f):
    return click.option("--runs-dir", default="runs", show_default=True, help="Folder of run records.")(f)


class OutputFile(click.ParamType):
    """A path the command will write a file to, checked while the arguments are parsed, so a typo in
    it is one line (a UserError) before any work is done, not a traceback after it."""

    name = "file"

    def __init__(self, example: str, suffix: str | None = None) -> None:
        self.example = example  # a file name the error message suggests inside a folder given by mistake
        self.suffix = suffix  # the one format written (".png"): another name would hide what the file is

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        if self.suffix is not None and not path.is_dir() and path.suffix.lower() != self.suffix:
            raise UserError(f"{_option_name(param)} {path}: this is written as {self.suffix[1:].upper()}; give a name "
                            f"ending in {self.suffix}, e.g. {path.with_suffix(self.suffix).name}")
        return check_writable_file(path, _option_name(param), self.example)


def default_output(kind: Artifact, name: str) -> Path:
    """runs/<kind's folder>/<time>-<name>: where a command's file goes when the user names none and there is
    no run to keep it (Artifact.loose), checked writable before the work."""
    return check_writable_file(kind.loose(name), "the output", name)


def _option_name(param: click.Parameter | None) -> str:
    if param is None:
        return "the output path"
    return max(param.opts, key=len) if param.opts else param.name or "the output path"


class GroupWithModules(click.Group):
    """A command group some of whose subcommands live in other modules of nanolm.cli (`elsewhere`: name ->
    (module, attribute)), imported when the group lists them or one runs. The group is whole however it is
    reached: through `nanolm`, or by importing its module in a notebook or a test."""

    def __init__(self, *args: Any, elsewhere: dict[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.elsewhere = dict(elsewhere or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.elsewhere})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.elsewhere and cmd_name not in self.commands:
            import importlib

            module, attribute = self.elsewhere[cmd_name]
            self.add_command(getattr(importlib.import_module(f"{__package__}.{module}"), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


# ---- stdout: tables and JSON ------------------------------------------------------------------

def console():
    """The rich console results are printed on (stdout). A table printed on it that would wrap a cell into more
    than 3 lines at the terminal's width (80 columns, say) is printed as a list of its rows instead, with the
    same cells (nanolm.profiling.layout)."""
    from rich.console import Console

    from ..profiling.layout import fitting

    return fitting(Console())


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2) + "\n")


def warn(message: str) -> None:
    """One warning line on stderr, in the one format every command uses."""
    click.echo(f"{WARNING_PREFIX}{message}", err=True)


def emit(result: R, render: Callable[[R], None], json_out: bool, warnings: Iterable[str] = (),
         as_json: Any = None) -> None:
    """The shape every command ends with: warnings on stderr, then the result as JSON (`as_json`, or
    the result itself) when --json was given, else `render(result)` for a person."""
    for w in warnings:
        warn(w)
    if json_out:
        print_json(result if as_json is None else as_json)
    else:
        render(result)


# ---- a command's result in its run, and the run's page (--report) ---------------------------------

def save_result(path: str | Path, result: Any) -> Path:
    """Write `result` at path as the JSON --json prints (to_jsonable), atomically; the path."""
    from ..io import atomic_write_json

    atomic_write_json(path, to_jsonable(result))
    return Path(path)


def save_run_result(run_dir: str | Path | None, kind: Artifact, name: str, result: Any) -> Path | None:
    """Save a command's --json result in its run, at RUN/<kind's folder>/<name>.json (written atomically), where
    `nanolm report` reads it; every run of the command saves it, --json given or not, replacing the last
    one of that name (as the command's figure is replaced). The path; None when there is no run (a model
    folder that is not a nanolm run: nothing is saved) or when the run's folder cannot be written (a shared,
    read-only run: a warning says so, and the command's output stands)."""
    if run_dir is None:
        return None
    try:
        return save_result(kind.path(run_dir, f"{name}.json", create=True), result)
    except UserError as e:
        warn(f"the result was not saved in the run: {e}")
        return None


def file_name(text: str, default: str = "result") -> str:
    """text as a file name's stem: letters, digits, '-', '_' and '.' kept, anything else '_' ("my data" -> "my_data")."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip(".") or default


def report_option(f):
    """--report: once the command's result is saved, write its run's page (RUN/report.html, nanolm report RUN).
    The command gets `report: bool`; it calls check_report(report, run_dir) before its work and
    write_run_report(run_dir) after its result is saved, when report is true."""
    return click.option("--report", "report", is_flag=True,
                        help="Then write the run's page, RUN/report.html (as nanolm report RUN does).")(f)


def check_report(report: bool, run_dir: str | Path | None,
                 why_none: str = "the model is not a nanolm run: leave out --report") -> None:
    """Before the work: --report needs a nanolm run whose folder can be written (a UserError otherwise; why_none
    says why there is no run, and what to do)."""
    if not report:
        return
    if run_dir is None:
        raise UserError(f"--report writes a nanolm run's page (RUN/report.html), but {why_none}")
    check_writable_file(Path(run_dir) / "report.html", "--report", "report.html")


def write_run_report(run_dir: str | Path) -> Path:
    """Write the run's page (RUN/report.html) and name it on stderr (stdout stays the command's result); each
    artifact the page could not read is a warning. nanolm.report is imported here, not at start-up."""
    from ..report.build import write_report

    page = write_report(run_dir, on_problem=warn)
    click.echo(f"report written to {page}", err=True)
    return page


# ---- stderr: spinners and progress ------------------------------------------------------------

def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)  # stderr, and only drawn on a terminal: --json output and logs stay clean


def working(what: str):
    """A spinner on stderr while `what` runs."""
    stderr = _stderr_console()
    return stderr.status(what) if stderr.is_terminal else contextlib.nullcontext()


@contextlib.contextmanager
def progress_bar(what: str) -> Iterator[Callable[[int, int | None], None]]:
    """A transient progress bar on stderr; yields advance(done, total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    stderr = _stderr_console()
    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=stderr,
                  transient=True, disable=not stderr.is_terminal) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
