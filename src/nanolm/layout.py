"""Tables that stay readable in a narrow terminal (80 columns: most terminals' default, and what rich uses when
the output is not a terminal). A table none of whose cells wraps into more than MAX_CELL_LINES lines at the
console's width is printed as it is; any other is printed as a list, one item per row, holding the same cells
("header: value"), so a long text is one paragraph under its row instead of a word per line in a narrow column.
Only the layout changes with the width: nothing is left out or cut short.

``fit(table, console)`` is the one call; ``FitTables`` is the same as a rich render hook, which the CLI's
console carries (nanolm.cli.output.console) so every table a command prints is fitted."""

from __future__ import annotations

import copy

from rich.box import Box
from rich.console import Console, ConsoleRenderable, Group, RenderableType, RenderHook
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

MAX_CELL_LINES = 3  # a cell wrapped into more lines than this is not read as one cell any more


SHORT_CELL = 24  # characters: a cell this short goes on one line with its neighbours in the list form


# Every row boxed and ruled, with the rules drawn in a character the cells do not use: what a table's cells take
# at a width is counted from its rendering (rich's own column widths and wrapping), one block of lines per row.
_RULED = Box("╒═╤╕\n│ ││\n╞═╪╡\n│ ││\n╞═╪╡\n╞═╪╡\n│ ││\n╘═╧╛\n")


_RULE = "═"


def cell_lines(table: Table, console: Console, width: int | None = None) -> int:
    """The most lines one cell of the table (its header included) wraps into at `width` (default: the console's).
    Counted on a copy with a rule between rows and edges on both sides, so it errs towards too many."""
    ruled = copy.copy(table)
    ruled.box, ruled.show_lines, ruled.show_edge, ruled.title, ruled.caption = _RULED, True, True, None, None
    options = console.options.update(width=width or console.width)
    lines = ["".join(s.text for s in line) for line in console.render_lines(ruled, options, pad=False)]
    tallest = run = 0
    for line in lines:
        run = 0 if _RULE in line else run + 1
        tallest = max(tallest, run)
    return tallest


def fits(table: Table, console: Console, width: int | None = None) -> bool:
    """No cell wraps into more than MAX_CELL_LINES lines, and no column's least width (a number never broken, a
    long word) pushes the table past the width, where the terminal would cut it off."""
    width = width or console.width
    return drawn_width(table, console, width) <= width and cell_lines(table, console, width) <= MAX_CELL_LINES


def drawn_width(table: Table, console: Console, width: int) -> int:
    """The widest line of the table drawn at `width` (its title and caption aside, which wrap), before the
    terminal cuts it: more than `width` when its columns' least widths do not fit."""
    bare = copy.copy(table)
    bare.title = bare.caption = None
    segments = console.render(bare, console.options.update(width=width))
    return max((Segment.get_line_length(line) for line in Segment.split_lines(segments)), default=0)


def fit(table: Table, console: Console) -> RenderableType:
    """The table as it is when it fits the console's width, else the same cells as a list (as_list)."""
    if fits(table, console):
        return table
    listed = as_list(table, console)
    return table if listed is None else listed


def as_list(table: Table, console: Console) -> RenderableType | None:
    """The table as a list: its title, then per row a bullet with the first cell, then the other cells as
    "header: value", short ones side by side ("ms/step: 12.3 · share: 45%"), long ones a line each; its caption
    last. None for a table whose cells are not text (a nested table, a bar): it is left as it is."""
    columns = table.columns
    rows = [[_text(cell, console) for cell in column.cells] for column in columns]
    if not columns or any(cell is None for column in rows for cell in column):
        return None
    headers = [_text(c.header, console) or Text() for c in columns]
    items = Table.grid(padding=(0, 1))
    items.add_column(no_wrap=True)
    items.add_column(overflow="fold")
    for i, row in enumerate(table.rows):
        cells = [column[i] for column in rows]
        items.add_row("•", _item(headers, cells), style=row.style)  # a bold row (the best layer) stays bold
    parts: list[RenderableType] = []
    if table.title:
        parts.append(_text(table.title, console, "table.title") or Text())
    parts.append(items)
    if table.caption:
        parts.append(_text(table.caption, console, "table.caption") or Text())
    return Group(*parts)


def _item(headers: list[Text], cells: list[Text | None]) -> Text:
    """One row: the first cell, then the others under it, each named by its column's header."""
    first, rest = cells[0], list(zip(headers[1:], cells[1:]))
    if first is None or not first.plain.strip():
        first = Text(headers[0].plain)
    elif first.plain[:1].isdigit() and headers[0].plain:  # "rank 1", not a bare "1"
        first = Text.assemble(Text(headers[0].plain, style="dim"), " ", first)
    lines: list[Text] = [first.copy()]
    short: list[Text] = []
    for header, cell in rest:
        if cell is None or not cell.plain.strip():
            continue
        named = Text.assemble(Text(header.plain, style="dim"), ": ", cell) if header.plain else cell.copy()
        if len(cell.plain) <= SHORT_CELL:
            short.append(named)
            continue
        if short:
            lines.append(Text(" · ").join(short))
            short = []
        lines.append(named)
    if short:
        lines.append(Text(" · ").join(short))
    return Text("\n").join(lines)


def _text(cell: object, console: Console, style: str = "") -> Text | None:
    """A cell as rich Text (markup in a string read as the table would read it); None for any other renderable."""
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        return console.render_str(cell, style=style)
    return None


class FitTables(RenderHook):
    """A render hook: every Table printed on the console it is pushed on is fitted to its width (fit)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_fitted(r, self.console) for r in renderables]


def _fitted(renderable: ConsoleRenderable, console: Console) -> ConsoleRenderable:
    if isinstance(renderable, Table):
        out = fit(renderable, console)
        return out if isinstance(out, ConsoleRenderable) else renderable
    return renderable


def fitting(console: Console) -> Console:
    """console, with every table printed on it from now on fitted to its width."""
    console.push_render_hook(FitTables(console))
    return console
