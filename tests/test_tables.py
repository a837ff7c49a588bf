"""The one table model, drawn to the terminal and to the page: both show the same cells."""

from __future__ import annotations

import io

from rich.console import Console

from nanolm.report.html import _table
from nanolm.tables import Column, Table, to_rich


def _table_of_two_rows() -> Table:
    return Table(
        "probe",
        "probe for [b]tense[/b]",
        [
            Column("layer"),
            Column("held-out accuracy", "%", "pct", "acc"),
            Column("95% CI", "%", "pct"),
            Column("token", "text", short="tok"),
        ],
        [[0, 0.914, (0.8, 0.95), "[/b]"], [1, 0.5, None, "y\\"]],
        note="best layer: 0",
        bold_rows=[0],
    )


def _terminal(table: Table) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(to_rich(table))
    return out.getvalue()


def test_the_terminal_shows_the_cells_the_page_shows_markup_and_all():
    text = _terminal(_table_of_two_rows())
    for shown in ("91.4%", "80.0%–95.0%", "50.0%", "[/b]", "probe for [b]tense[/b]", "best layer: 0"):
        assert shown in text  # written by hand from the cells: 0.914 as pct is 91.4%, None is "-"
    assert "y\\" in text and "y\\\\" not in text  # a token ending in a backslash prints as itself, not doubled
    page = _table("s", _table_of_two_rows())
    assert "91.4%" in page and "80.0%–95.0%" in page and "held-out accuracy (%)" in page and ">tok<" not in page


def test_the_terminal_uses_short_headers_and_spells_them_out_under_the_table():
    text = _terminal(_table_of_two_rows())
    header = next(line for line in text.splitlines() if "layer" in line)
    assert header.split() == ["layer", "acc", "95%", "CI", "tok", "(text)"]  # a percentage's unit is in its cells
    assert "acc: held-out accuracy; tok: token. best layer: 0" in " ".join(text.split())


def test_numbers_are_right_aligned_and_the_bold_rows_are_bold_on_both():
    rich_table = to_rich(_table_of_two_rows())
    assert [c.justify for c in rich_table.columns] == ["right", "right", "right", "left"]
    assert rich_table.rows[0].style == "bold" and rich_table.rows[1].style is None
    page = _table("s", _table_of_two_rows())
    assert page.count('<tr class="best">') == 1 and page.index('class="best"') < page.index("50.0%")
