"""The checks every reader of user-supplied rows runs on each field (JSON Lines rows, TOML tables).

Each bad value is one UserError naming where it is (``where``: "FILE:LINE"), the field, what it must be and what it
is: ``data.jsonl:3: 'correct' must be one of the letters A, B, C, got 2``. A required field that is absent is ``missing
field 'x' ('x' must be ...)``; one null, of another type or out of range is ``'x' must be ..., got VALUE`` (VALUE as
JSON, cut to 40 characters). A bool is never a number here (Python's bool is an int). An optional field
(``required=False``) absent or null takes its default. ``label``: how the message names the field (default: the key,
quoted); ``hint``: appended to the message (what a row looks like)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..errors import UserError

_ABSENT = object()


def show(value: Any, width: int = 40) -> str:
    """A value as a message quotes it: JSON (what JSON cannot write, by its repr), cut to width characters."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= width else text[: width - 1] + "…"


def fail(where: str, label: str, what: str, value: Any, hint: str = "") -> NoReturn:
    """The one-line UserError of a field whose value is not what it must be."""
    raise UserError(f"{where}: {label} must be {what}, got {show(value)}{hint}")


def checked(
    row: dict,
    name: str,
    where: str,
    what: str,
    ok: Callable[[Any], bool] = lambda v: True,
    required: bool = True,
    default: Any = None,
    label: str | None = None,
    hint: str = "",
    convert: Callable[[Any], Any] = lambda v: v,
) -> Any:
    """row[name] when ok(it) (then convert(it)); default when optional and absent or null; else the UserError."""
    label = label or repr(name)
    value = row.get(name, _ABSENT)
    if value is _ABSENT or (value is None and not required):
        if required:
            raise UserError(f"{where}: missing field {label} ({label} must be {what}){hint}")
        return default
    if not ok(value):
        fail(where, label, what, value, hint)
    return convert(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def text_field(
    row: dict,
    name: str,
    where: str,
    *,
    empty: bool = False,
    required: bool = True,
    default: Any = None,
    what: str | None = None,
    label: str | None = None,
    hint: str = "",
) -> Any:
    """A string (non-blank unless empty=True)."""
    what = what or ("a string" if empty else "a non-empty string")
    ok = (lambda v: isinstance(v, str)) if empty else (lambda v: isinstance(v, str) and bool(v.strip()))
    return checked(row, name, where, what, ok, required, default, label, hint)


def letter_field(
    row: dict,
    name: str,
    where: str,
    letters: Sequence[str],
    *,
    required: bool = True,
    default: Any = None,
    label: str | None = None,
    hint: str = "",
) -> Any:
    """One of letters (each a one-letter string; "ABC" is A, B or C, never "AB")."""
    allowed = tuple(letters)
    return checked(
        row,
        name,
        where,
        f"one of the letters {', '.join(allowed)}",
        lambda v: isinstance(v, str) and v in allowed,
        required,
        default,
        label,
        hint,
    )


def choice_field(
    row: dict,
    name: str,
    where: str,
    allowed: Sequence[Any],
    *,
    required: bool = True,
    default: Any = None,
    label: str | None = None,
    hint: str = "",
) -> Any:
    """One of allowed, of the same type too (true is not 1, 1.0 is not 1): "'x' is VALUE, not one of ..." otherwise."""
    names = ", ".join(map(str, allowed))
    value = checked(row, name, where, f"one of {names}", lambda v: True, required, _ABSENT, label, hint)
    if value is not _ABSENT and not any(type(value) is type(a) and value == a for a in allowed):
        raise UserError(f"{where}: {label or repr(name)} is {show(value)}, not one of {names}{hint}")
    return default if value is _ABSENT else value


def int_field(
    row: dict,
    name: str,
    where: str,
    *,
    minimum: int | None = 0,
    required: bool = True,
    default: Any = None,
    what: str | None = None,
    label: str | None = None,
    hint: str = "",
) -> Any:
    """A whole number (not a bool, not 2.0), at least minimum."""
    what = what or ("a whole number" + ("" if minimum is None else f" >= {minimum}"))
    return checked(
        row, name, where, what, lambda v: _whole(v) and (minimum is None or v >= minimum), required, default, label, hint
    )


def number_field(
    row: dict,
    name: str,
    where: str,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    required: bool = True,
    default: Any = None,
    what: str | None = None,
    label: str | None = None,
    hint: str = "",
) -> Any:
    """A finite number (not a bool) in [lo, hi], as a float."""
    ok = lambda v: (_whole(v) or isinstance(v, float)) and math.isfinite(v) and lo <= v <= hi  # noqa: E731
    return checked(row, name, where, what or f"a number in [{lo:g}, {hi:g}]", ok, required, default, label, hint, float)


def bool_field(
    row: dict,
    name: str,
    where: str,
    *,
    nullable: bool = False,
    required: bool = True,
    default: Any = None,
    label: str | None = None,
    hint: str = "",
) -> Any:
    """true or false (or null, where nullable: a truth not known)."""
    return checked(
        row,
        name,
        where,
        "true, false or null" if nullable else "true or false",
        lambda v: isinstance(v, bool) or (nullable and v is None),
        required,
        default,
        label,
        hint,
    )


def id_field(
    row: dict, name: str, where: str, *, required: bool = True, default: Any = None, label: str | None = None, hint: str = ""
) -> Any:
    """An id: a non-empty string or a whole number, as a string."""
    return checked(
        row,
        name,
        where,
        "a non-empty string or a whole number",
        lambda v: _whole(v) or (isinstance(v, str) and bool(v.strip())),
        required,
        default,
        label,
        hint,
        str,
    )


def object_field(
    row: dict,
    name: str,
    where: str,
    *,
    required: bool = True,
    default: Any = None,
    what: str = "an object",
    label: str | None = None,
    hint: str = "",
) -> Any:
    """A JSON object (a dict)."""
    return checked(row, name, where, what, lambda v: isinstance(v, dict), required, default, label, hint)


def list_of_text(
    row: dict,
    name: str,
    where: str,
    *,
    min_len: int = 1,
    max_len: int | None = None,
    empty: bool = False,
    required: bool = True,
    what: str | None = None,
    label: str | None = None,
    hint: str = "",
) -> Any:
    """A list of min_len to max_len strings (each non-blank unless empty=True)."""
    what = what or f"a list of {min_len}{'' if max_len is None else f' to {max_len}'} non-empty strings"
    return checked(
        row,
        name,
        where,
        what,
        lambda v: (
            isinstance(v, list)
            and min_len <= len(v) <= (max_len or len(v))
            and all(isinstance(x, str) and (empty or x.strip()) for x in v)
        ),
        required,
        None,
        label,
        hint,
    )


# ---- the file ------------------------------------------------------------------------------------
def jsonl_text(path: Path, what: str, hint: str) -> str:
    """The text of a JSON Lines file; a UserError for a folder, a missing file or not UTF-8 (what: "a pairs .jsonl
    file"; hint: where one comes from)."""
    if path.is_dir():
        raise UserError(f"{path}: is a folder; give {what} ({hint})")
    if not path.is_file():
        raise UserError(f"{path}: no such file; give {what} ({hint})")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}); give {what}") from None


def json_object(path: Path | str, line_no: int, line: str) -> dict:
    """One line of a JSON Lines file as a JSON object, or a UserError naming FILE:LINE."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{line_no}: not valid JSON ({e.msg}); give one JSON object per line") from None
    if not isinstance(row, dict):
        raise UserError(f"{path}:{line_no}: a JSON {type(row).__name__}, not an object; give one object per line")
    return row


def jsonl_rows(path: Path, what: str, hint: str) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON Lines file (none: an empty list)."""
    text = jsonl_text(path, what, hint)
    return [(n, json_object(path, n, line)) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
