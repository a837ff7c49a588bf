"""Click parameter types shared by the command groups."""

from __future__ import annotations

from pathlib import Path

import click

from .io import check_writable_file


class OutputFile(click.ParamType):
    """A path the command will write a file to, checked while the arguments are parsed, so a typo in
    it is one line (a UserError) before any work is done, not a traceback after it."""

    name = "file"

    def __init__(self, example: str) -> None:
        self.example = example  # a file name the error message suggests inside a folder given by mistake

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        return check_writable_file(Path(value), _option_name(param), self.example)


def _option_name(param: click.Parameter | None) -> str:
    if param is None:
        return "the output path"
    return max(param.opts, key=len) if param.opts else param.name or "the output path"
