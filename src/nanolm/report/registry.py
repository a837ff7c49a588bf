"""What a section builder gets (the run's files) and what a section is (SectionSpec); the page's list of
sections, in order, is nanolm.report.sections.SECTIONS.

A section is one function ``build(run: RunFiles, section: Section)``, which adds tables, figures and lines to
`section` from the run's artifacts, and adds nothing when the run has none (the section is then left out of
the page). An artifact that cannot be read raises (one of
READ_ERRORS) or is recorded with ``run.each``; the page then says which file could not be read and why,
and the other sections are written as usual."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import UserError
from ..runs import Artifact, Manifest
from .figures import TINY_SIDE_PX, Budget, png_file
from .model import Figure, Section

if TYPE_CHECKING:
    from ..records import Record

    R = TypeVar("R", bound=Record)

# What a damaged artifact raises while it is read (missing, not JSON, a required field missing, refused by its
# reader): the section records it instead of stopping the page.
READ_ERRORS = (UserError, OSError, ValueError, KeyError)
# While one file's content is turned into a part of a section (RunFiles.each, each_part), a value of the wrong
# type in it (a string where a list was written) raises these too; they are the file's fault there and drop only
# its part. Anywhere else they are a bug in nanolm and are not dressed up as a damaged file.
CONTENT_ERRORS = (*READ_ERRORS, TypeError, IndexError, AttributeError)


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text.strip() else ""


def reason(e: BaseException) -> str:
    """Why an artifact could not be read, in one line."""
    if isinstance(e, json.JSONDecodeError):
        return f"not JSON ({e.msg} at line {e.lineno})"
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte {e.start})"
    if isinstance(e, KeyError):
        return f"no field {e}"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    if isinstance(e, (UserError, ValueError, OSError)) and _first_line(str(e)):
        return _first_line(str(e))
    return f"unexpected content ({type(e).__name__}: {_first_line(str(e))})"


@dataclass
class RunFiles:
    """A run's folder as the section builders read it. Nothing outside the folder is read as a file
    (a link that points outside it is skipped), and every figure goes through the page's byte budget."""

    run_dir: Path
    manifest: Manifest
    page_dir: Path  # where the page is written: links are relative to it
    budget: Budget

    def rel(self, path: Path) -> str:
        """path as the page names it: relative to the run folder."""
        try:
            return Path(path).relative_to(self.run_dir).as_posix()
        except ValueError:
            return Path(path).name

    def shorten(self, text: str) -> str:
        """text with the run folder's path taken out of the file names in it (a tool's message names files by
        the path it was given)."""
        for prefix in {str(self.run_dir.resolve()), str(self.run_dir)}:
            text = text.replace(prefix.rstrip("/") + "/", "")
        return text

    def inside(self, path: Path) -> bool:
        try:
            Path(path).resolve().relative_to(self.run_dir.resolve())
        except (ValueError, OSError):
            return False
        return True

    def files(self, kind: Artifact, role: str) -> list[Path]:
        """The run's files of one role of a kind of result (nanolm.runs.artifacts: ``run.files(PROBES, "result")``),
        sorted by name; hidden files (a write in progress) and links out of the folder left out."""
        return [p for p in kind.find(self.run_dir, role) if self.inside(p)]

    def newest_first(self, paths: Iterable[Path]) -> list[Path]:
        return sorted(paths, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)

    def json(self, path: Path) -> Any:
        return json.loads(Path(path).read_text(encoding="utf-8"))

    def json_object(self, path: Path, *required: str) -> dict:
        """A JSON object with the given keys; a ValueError or KeyError naming what is missing."""
        data = self.json(path)
        if not isinstance(data, dict):
            raise ValueError(f"not a JSON object (a {type(data).__name__})")
        for key in required:
            if key not in data:
                raise KeyError(key)
        return data

    def record(self, path: Path, cls: type[R], *required: str) -> R:
        """The result a command saved in `path` (its --json output), read back as the `cls` it was saved from;
        a field missing is the KeyError the page names "no field 'x'" (`required` first, in the order the tables
        read them), any other damage a ValueError naming the field."""
        return as_record(cls, self.json(path), *required)

    def jsonl(self, path: Path) -> list[dict]:
        rows = []
        for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"line {i} is not JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"line {i} is not a JSON object")
                rows.append(row)
        return rows

    def each(self, section: Section, paths: Iterable[Path], read: Callable[[Path], Any]) -> Iterator[tuple[Path, Any]]:
        """(path, read(path)) for each path that can be read; each one that cannot is recorded in the section."""
        for path in paths:
            try:
                value = read(path)
            except CONTENT_ERRORS as e:
                section.errors.append(self.problem(path, e))
                continue
            yield path, value

    def each_part(self, section: Section, paths: Iterable[Path], fill: Callable[[Path, Section], None]) -> None:
        """For each path, fill(path, part) builds a part of the section from that file; a file that cannot be read
        or is not what its section expects is named in the section's errors, and its part is dropped whole."""
        for path in paths:
            part = Section(section.key, section.title)
            try:
                fill(path, part)
            except CONTENT_ERRORS as e:
                section.errors.append(self.problem(path, e))
                continue
            section.merge(part)

    def problem(self, path: Path, e: BaseException) -> str:
        """ "FILE: why" for an artifact that could not be read (once, though the error may name the file itself)."""
        why = self.shorten(reason(e))
        return why if why.startswith(self.rel(path)) else f"{self.rel(path)}: {why}"

    def figure(self, section: Section, path: Path, caption: str) -> Figure | None:
        """The PNG at path as a figure of the section (a damaged one is recorded; past the page's budget, a line
        says it was left out)."""
        fig = None
        for side in dict.fromkeys((self.budget.max_side, TINY_SIDE_PX)):  # smaller once if it does not fit
            try:
                fig = png_file(path, f"{section.key}-{self.rel(path)}", caption, self.rel(path), side)
            except READ_ERRORS as e:
                section.errors.append(self.problem(path, e))
                return None
            if self.budget.fits(fig):
                section.figures.append(self.budget.take(fig))
                return fig
        section.lines.append(f"figure {self.rel(path)} left out to keep the page under 5 MB")
        return None

    def href(self, path: Path) -> str:
        """A link from the page to a file of the run."""
        return Path(os.path.relpath(Path(path).resolve(), self.page_dir.resolve())).as_posix()


Builder = Callable[[RunFiles, Section], None]


@dataclass(frozen=True)
class SectionSpec:
    """One section of a run's page: its key (the anchor and --json's name), its title, and its builder."""

    key: str
    title: str
    build: Builder


def as_record(cls: type[R], data: Any, *required: str) -> R:
    """`data` (a result's JSON) read back as the `cls` it was saved from (``cls.from_dict``). A field missing is a
    KeyError naming it: first any of `required`, then whichever field from_dict finds missing."""
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object (a {type(data).__name__})")
    for key in required:
        if key not in data:
            raise KeyError(key)
    try:
        return cls.from_dict(data)
    except ValueError as e:
        missing = re.search(r": the field '(.+)' is missing$", str(e))
        if missing:
            raise KeyError(missing.group(1)) from None
        raise
