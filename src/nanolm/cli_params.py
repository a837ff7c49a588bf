"""Click parameter types and terminal helpers shared by the command groups."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from .errors import UserError
from .io import check_writable_file


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


def _option_name(param: click.Parameter | None) -> str:
    if param is None:
        return "the output path"
    return max(param.opts, key=len) if param.opts else param.name or "the output path"


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)  # stderr, and only drawn on a terminal: --json output and logs stay clean


def working(what: str):
    """A spinner on stderr while `what` runs."""
    console = _stderr_console()
    return console.status(what) if console.is_terminal else contextlib.nullcontext()


@contextlib.contextmanager
def progress_bar(what: str):
    """A transient progress bar on stderr; yields advance(done, total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = _stderr_console()
    with Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
