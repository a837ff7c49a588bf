"""What the tests/test_shown_*.py files share: a nanolm command run for a person (no --json) on a console wide
enough that no table row wraps or becomes a list, what it saved, and the check that every cell of the page's
table is in what it printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nanolm.tables import Table

WIDE = 2000  # columns: no table row wraps or becomes a list


class _Nanolm:
    """The `nanolm` program as CliRunner runs it (nanolm.cli.main)."""

    name = "nanolm"

    def main(self, args, prog_name=None, **_):
        from nanolm.cli import main

        main(list(args))


def printed(*args: str) -> str:
    """What a nanolm command printed on stdout, at WIDE columns; it must succeed."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", str(WIDE))  # rich reads the width from COLUMNS
        result = CliRunner().invoke(_Nanolm(), list(args), catch_exceptions=False)
    assert result.exit_code == 0, (args, result.stderr)
    return result.stdout


def saved(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def flat(text: str) -> str:
    """Whitespace collapsed: a generated example or a token may hold a newline, which the terminal prints as one."""
    return " ".join(text.split())


def assert_shown(table: Table, text: str, skip: tuple[str, ...] = ()) -> None:
    """Every cell of `table` (but those of the columns named in `skip`) is in `text`, its rows in order and each
    row's cells in order."""
    text, at = flat(text), 0
    kept = [j for j, c in enumerate(table.columns) if c.name not in skip]
    assert table.rows, f"{table.key}: no rows to compare"
    for i in range(len(table.rows)):
        for j in kept:
            cell = flat(table.shown(i, j))
            found = text.find(cell, at)
            assert found >= 0, f"{table.key}: row {i}, {table.columns[j].header}: {cell!r} is not printed after {at}"
            at = found + len(cell)
