"""A Report as one self-contained HTML page: inline CSS, figures as data: URIs, no scripts, no fonts or
anything else fetched, so it opens from a file:// URL with no network and can be mailed as one file.
Every string from the run (names, tokens, config values, file names) is escaped."""

from __future__ import annotations

import base64
from html import escape

from ..tables import is_number
from .model import Figure, Number, Report, Section, Table

CSS = """
:root { color-scheme: light; --fg: #1d2128; --muted: #5b6270; --line: #d9dde4; --bg-alt: #f5f7fa; --bad: #9b1c1c; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 76rem; padding: 1rem 1.25rem 3rem; color: var(--fg); background: #fff;
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 0.25rem; overflow-wrap: anywhere; }
h2 { font-size: 1.2rem; margin: 2rem 0 0.5rem; padding-bottom: 0.2rem; border-bottom: 2px solid var(--line); }
p { margin: 0.35rem 0; overflow-wrap: anywhere; }
.sub, .note, footer, figcaption { color: var(--muted); font-size: 0.875rem; }
nav ol { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; list-style: none; padding: 0; margin: 0.75rem 0; }
nav a, a { color: #1a4fa3; }
.errors { border-left: 4px solid var(--bad); background: #fdf2f2; padding: 0.4rem 0.75rem; margin: 0.5rem 0; }
.errors p { color: var(--bad); }
.table-wrap { overflow-x: auto; margin: 0.75rem 0 1rem; }
table { border-collapse: collapse; font-size: 0.875rem; min-width: 40%; }
caption { text-align: left; font-weight: 600; padding: 0.25rem 0; caption-side: top; }
th, td { border-bottom: 1px solid var(--line); padding: 0.2rem 0.6rem; text-align: left; vertical-align: top; }
th { background: var(--bg-alt); font-weight: 600; }
td { overflow-wrap: break-word; max-width: 32rem; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fbfcfd; }
tr.best td { font-weight: 650; }
figure { margin: 1rem 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); }
ul.links { padding-left: 1.2rem; }
section.results h2 { margin-top: 0.75rem; }
.overview { display: grid; grid-template-columns: minmax(14rem, 21rem) minmax(0, 1fr); gap: 0.75rem 1.5rem;
  align-items: start; margin: 0.5rem 0; }
.numbers { display: grid; gap: 0.5rem; }
.number { border: 1px solid var(--line); border-radius: 6px; background: var(--bg-alt); padding: 0.4rem 0.75rem; }
.number .label { color: var(--muted); font-size: 0.8rem; }
.number .label a { color: inherit; }
.number .value { font-size: 1.4rem; font-weight: 650; line-height: 1.25; font-variant-numeric: tabular-nums;
  overflow-wrap: anywhere; }
.number .unit { font-size: 0.85rem; font-weight: 400; color: var(--muted); }
.number .note { font-size: 0.8rem; color: var(--muted); margin: 0.1rem 0 0; }
.overview figure { margin: 0; }
section.folded { border-top: 2px solid var(--line); margin-top: 2rem; }
section.folded summary { cursor: pointer; padding: 0.5rem 0; }
section.folded summary h2 { display: inline; border: 0; margin: 0; padding: 0; }
section.folded summary .note { margin-left: 0.5rem; }
@media (max-width: 60rem) {
  .overview { grid-template-columns: minmax(0, 1fr); }
  .numbers { grid-template-columns: repeat(auto-fill, minmax(13rem, 1fr)); }
}
@media print {
  @page { size: A4; margin: 14mm; }
  body { max-width: none; padding: 0; font-size: 10pt; }
  nav { display: none; }
  h2 { break-after: avoid; }
  figure, tr { break-inside: avoid; }
  .table-wrap { overflow: visible; }
  td { max-width: none; }
  a { color: inherit; text-decoration: none; }
}
"""


def render_html(report: Report) -> str:
    """The page, as a string (UTF-8 when written)."""
    nav = "".join(f'<li><a href="#sec-{escape(s.key)}">{escape(s.title)}</a></li>' for s in report.sections)
    body = "\n".join(_section(s) for s in report.sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="nanolm report">\n<title>{escape(report.title)}</title>\n'
        f"<style>{CSS}</style>\n</head>\n<body>\n<header>\n<h1>{escape(report.title)}</h1>\n"
        f'<p class="sub">{escape(report.subtitle)}</p>\n</header>\n'
        f'<nav aria-label="sections"><ol>{nav}</ol></nav>\n<main>\n{body}\n</main>\n'
        f"<footer><p>Written {escape(report.generated)} by nanolm report. One self-contained file: no scripts, "
        f"nothing fetched from the network; figures are embedded.</p></footer>\n</body>\n</html>\n"
    )


def _section(s: Section) -> str:
    """A section: its title, what could not be read, its lines, links, figures (beside its numbers, when it has
    any: the page's first screen) and tables; folded (<details>) for the provenance at the page's end."""
    classes = " ".join(c for c in ("results" if s.numbers else "", "folded" if s.folded else "") if c)
    head = f"<h2>{escape(s.title)}</h2>"
    parts = [
        f'<section id="sec-{escape(s.key)}" data-section="{escape(s.key)}"' + (f' class="{classes}"' if classes else "") + ">"
    ]
    parts.append(f'<details><summary>{head}<span class="note">(folded: click to open)</span></summary>' if s.folded else head)
    if s.errors:
        parts.append('<div class="errors">' + "".join(f"<p>could not be read: {escape(e)}</p>" for e in s.errors) + "</div>")
    if s.numbers:
        parts.append(
            '<div class="overview"><div class="numbers">'
            + "".join(_number(n) for n in s.numbers)
            + "</div>"
            + "".join(_figure(f) for f in s.figures)
            + "</div>"
        )
    parts += [f"<p>{escape(line)}</p>" for line in s.lines]
    if s.links:
        parts.append(
            '<ul class="links">'
            + "".join(
                f'<li><a href="{escape(link.href)}">{escape(link.text)}</a>'
                + (f": {escape(link.note)}" if link.note else "")
                + "</li>"
                for link in s.links
            )
            + "</ul>"
        )
    if not s.numbers:
        parts += [_figure(f) for f in s.figures]
    parts += [_table(s.key, t) for t in s.tables]
    parts.append("</details></section>" if s.folded else "</section>")
    return "\n".join(parts)


def _number(n: Number) -> str:
    label = f'<a href="{escape(n.href)}">{escape(n.label)}</a>' if n.href else escape(n.label)
    unit = f' <span class="unit">{escape(n.unit)}</span>' if n.unit else ""
    note = f'<p class="note">{escape(n.note)}</p>' if n.note else ""
    return (
        f'<div class="number" id="num-{escape(n.key)}" data-number="{escape(n.key)}"><div class="label">{label}</div>'
        f'<div class="value">{escape(n.shown)}{unit}</div>{note}</div>'
    )


def _figure(f: Figure) -> str:
    data = base64.b64encode(f.data).decode("ascii")
    return (
        f'<figure id="fig-{escape(f.key)}"><img src="data:{f.mime};base64,{data}" width="{f.width}" '
        f'height="{f.height}" alt="{escape(f.caption)}"><figcaption>{escape(f.caption)}</figcaption></figure>'
    )


def _table(section_key: str, t: Table) -> str:
    head = "".join(f'<th scope="col">{escape(c.header)}</th>' for c in t.columns)
    rows = []
    for i, row in enumerate(t.rows):
        cells = "".join(
            f'<td class="num">{escape(t.shown(i, j))}</td>' if is_number(v) else f"<td>{escape(t.shown(i, j))}</td>"
            for j, v in enumerate(row)
        )
        rows.append(f'<tr class="best">{cells}</tr>' if i in t.bold_rows else f"<tr>{cells}</tr>")
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    return (
        f'<div class="table-wrap"><table id="{escape(section_key)}-{escape(t.key)}"><caption>{escape(t.caption)}'
        f"</caption><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{note}</div>"
    )
