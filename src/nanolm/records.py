"""A result saved as JSON and read back as itself.

A command's result is a dataclass; ``to_dict`` is the JSON it prints with --json and saves in its run
(nanolm.io.to_jsonable), and ``from_dict`` turns that JSON back into the dataclass, typed as its fields say:
nested results, lists and tuples of them, enums by value, paths, and ``X | None``. A notebook or a report
section reads a saved result as the object the command returned, not as dict keys.

Keys a dataclass does not know are left out (a command's JSON may carry more: its figure's path, a summary);
a field missing from the JSON takes its default, so a file saved before the field existed still loads. A
required field that is missing, or a value of the wrong shape, is a ValueError naming the field."""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from .io import to_jsonable

T = TypeVar("T")


class Record:
    """A dataclass result with to_dict (its JSON) and from_dict (the JSON read back as it)."""

    def to_dict(self) -> dict:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls: type[T], data: dict) -> T:
        return from_jsonable(cls, data)

    @classmethod
    def hint_names(cls) -> dict[str, type]:
        """Types the fields name that the module imports only for type checking (a module that imports this
        one): imported when a result is read, not when the module is."""
        return {}


def from_jsonable(cls: type[T], data: Any) -> T:
    """`data` (what to_jsonable made of a `cls`) as a `cls`."""
    return _convert(cls, data, cls.__name__)


@cache
def _hints(cls: type) -> dict[str, Any]:
    module = sys.modules.get(cls.__module__)
    names = cls.hint_names() if isinstance(cls, type) and issubclass(cls, Record) else {}
    return typing.get_type_hints(cls, globalns=vars(module) if module else None, localns=names)


def _convert(tp: Any, value: Any, where: str) -> Any:
    if tp is Any or tp is object:
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union(args, value, where)
    if value is None:
        return None  # a NaN or infinity saved as null, or an optional the type does not say is one
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(value)
    if tp is Path:
        return Path(value)
    if origin in (list, tuple, dict) and not isinstance(value, (list, dict)):
        raise ValueError(f"{where}: expected a {origin.__name__}, got {type(value).__name__}")
    if origin is list:
        return [_convert(args[0] if args else Any, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        kinds = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args) or [Any] * len(value)
        if len(kinds) != len(value):
            raise ValueError(f"{where}: expected {len(kinds)} values, got {len(value)}")
        return tuple(_convert(k, v, f"{where}[{i}]") for i, (k, v) in enumerate(zip(kinds, value)))
    if origin is dict:
        key, kind = args if len(args) == 2 else (str, Any)
        as_key = key if key in (int, float) else (lambda k: k)  # JSON's keys are strings: {1: x} comes back {"1": x}
        return {as_key(k): _convert(kind, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # JSON writes 2.0 as 2.0, but a hand-written file may say 2
    return value


def _union(args: tuple, value: Any, where: str) -> Any:
    if value is None:
        return None
    kinds = [a for a in args if a is not type(None)]
    for kind in kinds:  # the first that takes the value's shape: a dataclass from an object, a list from a list
        shape = dict if dataclasses.is_dataclass(kind) else typing.get_origin(kind) or kind
        if isinstance(shape, type) and isinstance(value, shape if shape is not tuple else list):
            return _convert(kind, value, where)
    return _convert(kinds[0], value, where) if len(kinds) == 1 else value


def _dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    hints, kwargs = _hints(cls), {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in value:
            kwargs[f.name] = _convert(hints[f.name], value[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: the field {f.name!r} is missing")
    return cls(**kwargs)
