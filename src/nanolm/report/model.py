"""What a report page holds, as data: sections of tables (raw numbers, each column with its unit and the
format it is shown in), figures (bytes embedded in the page), plain lines, links to files in the run, and
the scalar measurements `nanolm report compare` sets side by side. ``Report.to_dict()`` is what
``nanolm report --json`` prints: the same numbers the page shows, before formatting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The table model is a leaf (the terminal draws it too); a page holds its tables, so they are named here as well.
from ..tables import BY_ROW, FORMATS, Column, Table, field_table, format_value, plain, slug  # noqa: F401


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
        return {
            "key": self.key,
            "caption": self.caption,
            "mime": self.mime,
            "bytes": len(self.data),
            "width": self.width,
            "height": self.height,
            "source": self.source,
        }


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
        return {
            "key": self.key,
            "label": self.label,
            "value": plain(self.value),
            "unit": self.unit,
            "fmt": self.fmt,
            "shown": self.shown,
            "note": self.note,
            "href": self.href,
        }


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
        return {
            "key": self.key,
            "title": self.title,
            "lines": self.lines,
            "tables": [t.to_dict() for t in self.tables],
            "figures": [f.to_dict() for f in self.figures],
            "links": [{"text": ln.text, "href": ln.href, "note": ln.note} for ln in self.links],
            "measures": [
                {"name": m.name, "value": plain(m.value), "unit": m.unit, "better": m.better, "fmt": m.fmt} for m in self.measures
            ],
            "errors": self.errors,
            "numbers": [n.to_dict() for n in self.numbers],
            "folded": self.folded,
        }


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
        return {
            "kind": self.kind,
            "title": self.title,
            "subtitle": self.subtitle,
            "generated": self.generated,
            "output": self.output,
            "problems": self.problems,
            "sections": [s.to_dict() for s in self.sections],
        }
