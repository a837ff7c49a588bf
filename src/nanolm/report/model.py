"""What a report page holds, as data: sections of tables (raw numbers, each column with its unit and the
format it is shown in), figures (bytes embedded in the page), plain lines, links to files in the run, and
the scalar measurements `nanolm report compare` sets side by side. ``Report.to_dict()`` is what
``nanolm report --json`` prints: the same numbers the page shows, before formatting."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

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

    def to_dict(self) -> dict:
        return {"key": self.key, "caption": self.caption, "note": self.note,
                "columns": [{"name": c.name, "unit": c.unit, "fmt": c.fmt} for c in self.columns],
                "rows": [[_plain(v) for v in row] for row in self.rows],
                **({"row_formats": self.row_formats} if self.row_formats else {})}


def field_table(key: str, caption: str, rows: list[tuple[str, Any, str, str]], note: str = "") -> Table:
    """A field / value / unit table from (field, value, unit, format) rows; rows whose value is None are left out."""
    kept = [r for r in rows if r[1] is not None]
    return Table(key, caption, [Column("field"), Column("value", fmt=BY_ROW), Column("unit")],
                 [[f, v, "" if fmt.startswith("pct") and u == "%" else u] for f, v, u, fmt in kept], note,
                 [fmt for *_, fmt in kept])


@dataclass
class Figure:
    key: str
    caption: str
    mime: str  # "image/svg+xml" or "image/png"
    data: bytes = field(repr=False)
    width: int  # pixels the page shows it at (at most; it shrinks with the window)
    height: int
    source: str = ""  # the file in the run it was read from ("" when drawn from the numbers)

    def __post_init__(self) -> None:
        self.key = slug(self.key)

    def to_dict(self) -> dict:
        return {"key": self.key, "caption": self.caption, "mime": self.mime, "bytes": len(self.data),
                "width": self.width, "height": self.height, "source": self.source}


@dataclass
class Link:
    text: str
    href: str  # relative to the page, inside the run folder
    note: str = ""


@dataclass
class Measure:
    """One number a comparison of two runs can set side by side."""

    name: str
    value: float | None
    unit: str = ""
    better: str | None = None  # "lower", "higher" or None (neither is better)
    fmt: str = ".4g"
    group_metric: str | None = None  # the seed groups' name for it (nanolm.repro.seeds), when groups measure it


@dataclass
class Number:
    """A headline number, at the top of a run's page: "val loss 3.95 nats/token", with a line under it ("86% of
    the unigram baseline"). A number that is a sentence (a profile's verdict) has value None and says it in text."""

    key: str
    label: str
    value: Any
    unit: str = ""
    fmt: str = ".4g"
    note: str = ""
    text: str = ""  # shown instead of the formatted value (a verdict: "compute-bound")
    href: str = ""  # where on the page (or in the run) it is told at length ("#sec-profile")

    def __post_init__(self) -> None:
        self.key = slug(self.key)

    @property
    def shown(self) -> str:
        return self.text or format_value(self.value, self.fmt)

    def to_dict(self) -> dict:
        return {"key": self.key, "label": self.label, "value": _plain(self.value), "unit": self.unit, "fmt": self.fmt,
                "shown": self.shown, "note": self.note, "href": self.href}


@dataclass
class Section:
    key: str
    title: str
    lines: list[str] = field(default_factory=list)  # plain sentences, shown as paragraphs
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    measures: list[Measure] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # artifacts of this section that could not be read
    numbers: list[Number] = field(default_factory=list)  # headline numbers, shown large beside the figures
    folded: bool = False  # shown folded (its title only, opened with a click): the provenance at the page's end

    @property
    def empty(self) -> bool:
        return not (self.lines or self.tables or self.figures or self.links or self.errors or self.numbers)

    def merge(self, part: Section) -> None:
        """Add what part holds (a piece of this section built from one file)."""
        for name in ("lines", "tables", "figures", "links", "measures", "errors", "numbers"):
            getattr(self, name).extend(getattr(part, name))

    def table(self, key: str) -> Table:
        return next(t for t in self.tables if t.key == slug(key))

    def to_dict(self) -> dict:
        return {"key": self.key, "title": self.title, "lines": self.lines,
                "tables": [t.to_dict() for t in self.tables], "figures": [f.to_dict() for f in self.figures],
                "links": [{"text": ln.text, "href": ln.href, "note": ln.note} for ln in self.links],
                "measures": [{"name": m.name, "value": _plain(m.value), "unit": m.unit, "better": m.better,
                              "fmt": m.fmt} for m in self.measures],
                "errors": self.errors, "numbers": [n.to_dict() for n in self.numbers], "folded": self.folded}


@dataclass
class Report:
    title: str
    subtitle: str
    sections: list[Section]
    generated: str  # ISO time the page was made
    kind: str = "run"  # "run" or "compare"
    output: str | None = None  # where the page was written, once it is

    @property
    def problems(self) -> list[str]:
        """One line per artifact that could not be read (its section says so on the page)."""
        return [f"{s.title}: {e}" for s in self.sections for e in s.errors]

    def section(self, key: str) -> Section:
        return next(s for s in self.sections if s.key == key)

    def measures(self) -> dict[str, Measure]:
        return {m.name: m for s in self.sections for m in s.measures}

    def to_dict(self) -> dict:
        return {"kind": self.kind, "title": self.title, "subtitle": self.subtitle, "generated": self.generated,
                "output": self.output, "problems": self.problems, "sections": [s.to_dict() for s in self.sections]}


def _plain(value: Any) -> Any:
    """A cell as JSON has it: tuples as lists, NaN and infinity as None."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
