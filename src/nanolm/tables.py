"""A table as data, laid out once and drawn twice: to the terminal (``to_rich``) and to a run's page
(nanolm.report.html). A table holds raw numbers; each column has its unit and the format its cells are shown in,
so ``--json`` and ``nanolm report --json`` keep the numbers while a person sees them formatted.

A command builds its result's table from the result's JSON (what it saves in the run), with the same function the
report's section uses, so what the terminal shows and what the page shows cannot drift apart."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table as RichTable  # rich is imported when a table is drawn, not before

# How a column's numbers are shown. The JSON keeps the raw value; the page shows format_value(value, fmt).
FORMATS = ("text", "int", "pct", "pct0", "x") + tuple(f".{d}{k}" for d in range(0, 7) for k in "fge")
BY_ROW = "row"  # a column whose cells each take their row's format (Table.row_formats): a field / value table


def slug(text: str) -> str:
    """A name usable in an HTML id: letters, digits and '-' only ("probes/tense.json" -> "probes-tense-json")."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


@dataclass
class Column:
    name: str
    unit: str = ""  # shown in the header: "val loss (nats/token)"; "%" for fractions shown as percentages
    fmt: str = "text"  # one of FORMATS
    short: str = ""  # the terminal's header when the name is long ("sel."); a legend under the table spells it out

    def __post_init__(self) -> None:
        if self.fmt not in (*FORMATS, BY_ROW):
            raise ValueError(f"column {self.name!r}: unknown format {self.fmt!r}")

    @property
    def header(self) -> str:
        return f"{self.name} ({self.unit})" if self.unit else self.name


def format_value(value: Any, fmt: str) -> str:
    """A cell as the page shows it. A pair (a confidence interval, a min–max range) is shown "lo–hi";
    None and NaN as "-"; booleans as yes/no."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = format_value(value[0], fmt), format_value(value[1], fmt)
        return f"{lo} to {hi}" if hi.startswith("-") else f"{lo}–{hi}"  # "-2.6%–-0.0%" reads badly
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if fmt == "text" or not isinstance(value, (int, float)):
        return str(value)
    if fmt == "int":
        return f"{round(value):,}"
    if fmt == "pct":
        return f"{value:.1%}"
    if fmt == "pct0":
        return f"{value:.0%}"
    if fmt == "x":
        return f"{value:.2f}×"
    return format(value, fmt)


@dataclass
class Table:
    key: str  # unique within its section; the page's id is "<section>-<key>"
    caption: str
    columns: list[Column]
    rows: list[list[Any]]
    note: str = ""
    row_formats: list[str] | None = None  # with a BY_ROW column: each row's format
    bold_rows: list[int] = field(default_factory=list)  # rows shown in bold (the best layer)

    def __post_init__(self) -> None:
        self.key = slug(self.key)
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.key}: a row of {len(row)} cells for {len(self.columns)} columns")
        if any(c.fmt == BY_ROW for c in self.columns) and len(self.row_formats or []) != len(self.rows):
            raise ValueError(f"table {self.key}: a column formatted by row needs one format per row")

    def fmt(self, row: int, col: int) -> str:
        """The format cell (row, col) is shown in."""
        fmt = self.columns[col].fmt
        return self.row_formats[row] if fmt == BY_ROW and self.row_formats else fmt

    def shown(self, row: int, col: int) -> str:
        """Cell (row, col) as the page shows it."""
        return format_value(self.rows[row][col], self.fmt(row, col))

    def numeric(self, col: int) -> bool:
        """Whether column col holds numbers (shown right-aligned)."""
        return any(is_number(row[col]) for row in self.rows)

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "caption": self.caption,
            "note": self.note,
            "columns": [{"name": c.name, "unit": c.unit, "fmt": c.fmt} for c in self.columns],
            "rows": [[plain(v) for v in row] for row in self.rows],
            **({"row_formats": self.row_formats} if self.row_formats else {}),
            **({"bold_rows": self.bold_rows} if self.bold_rows else {}),
        }


def is_number(v: object) -> bool:
    """A number, or a pair holding one (an interval): a cell shown right-aligned."""
    if isinstance(v, (list, tuple)):
        return any(is_number(x) for x in v)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def to_rich(table: Table) -> RichTable:
    """The table for the terminal: its caption as the title, one column per column, its cells as the page shows
    them (numbers right-aligned, never broken across lines), the note under it. Drawn narrow, so a page's table
    fits 80 columns where it can: rules under the header only, and a column's short name where it has one (the
    legend under the table spells each out); a percentage column's unit is left to its cells, which say "%".
    Text is never read as markup: a token such as "[/b]" or "\\" prints as itself. A console that fits tables
    (nanolm.layout) lists the rows of one that is still too wide."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    key = legend(table)
    under = " ".join(part for part in (key and key + ".", table.note) if part)
    out = RichTable(
        title=Text(table.caption),
        caption=Text(under) if under else None,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for j, column in enumerate(table.columns):
        numeric = table.numeric(j)
        widest = max((len(table.shown(i, j)) for i in range(len(table.rows))), default=0)
        out.add_column(
            Text(terminal_header(column)),
            justify="right" if numeric else "left",
            min_width=widest if numeric else None,
            overflow="fold",
        )  # a long header folds, never "…"
    for i in range(len(table.rows)):
        out.add_row(*(Text(table.shown(i, j)) for j in range(len(table.columns))), style="bold" if i in table.bold_rows else None)
    return out


def terminal_header(column: Column) -> str:
    """A column's header in the terminal: its short name if it has one, else its name; with its unit unless the
    cells say it ("%")."""
    name = column.short or column.name
    return name if not column.unit or (column.unit == "%" and column.fmt.startswith("pct")) else f"{name} ({column.unit})"


def legend(table: Table) -> str:
    """What the terminal's short headers stand for ("acc: held-out accuracy; sel.: selectivity (acc − control)");
    "" when no column has one."""
    return "; ".join(f"{c.short}: {c.name}" for c in table.columns if c.short)


def field_table(key: str, caption: str, rows: list[tuple[str, Any, str, str]], note: str = "") -> Table:
    """A field / value / unit table from (field, value, unit, format) rows; rows whose value is None are left out."""
    kept = [r for r in rows if r[1] is not None]
    return Table(
        key,
        caption,
        [Column("field"), Column("value", fmt=BY_ROW), Column("unit")],
        [[f, v, "" if fmt.startswith("pct") and u == "%" else u] for f, v, u, fmt in kept],
        note,
        [fmt for *_, fmt in kept],
    )


def plain(value: Any) -> Any:
    """A cell as JSON has it: tuples as lists, NaN and infinity as None."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
