"""Results read back from their JSON as the dataclasses they were (nanolm.records)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import pytest

from gpu_trace import reference_example
from nanolm.io import to_jsonable
from nanolm.profiling.assemble import analyze_trace
from nanolm.profiling.report import Bottleneck, ProfileReport, Stat
from nanolm.records import Record, from_jsonable


class Kind(Enum):
    A = "a"
    B = "b"


@dataclass
class Inner:
    x: float
    ci: tuple[float, float]


@dataclass
class Outer(Record):
    name: str
    kind: Kind
    rows: list[Inner]
    best: Inner | None
    where: Path
    by_name: dict[str, Inner] = field(default_factory=dict)
    added_later: int = 7  # a field newer than some saved files


def _saved(obj) -> dict:
    return json.loads(json.dumps(to_jsonable(obj)))  # exactly what a command writes and a reader reads


def test_a_nested_result_comes_back_equal_with_its_types():
    planted = Outer(
        "n",
        Kind.B,
        [Inner(1.0, (0.5, 1.5)), Inner(2.0, (1.0, 3.0))],
        Inner(3.0, (2.0, 4.0)),
        Path("runs/x"),
        {"k": Inner(4.0, (3.0, 5.0))},
        9,
    )
    back = Outer.from_dict(_saved(planted))
    assert back == planted
    assert back.kind is Kind.B and isinstance(back.rows[0].ci, tuple) and isinstance(back.where, Path)
    assert back.to_dict() == _saved(planted)


def test_an_older_file_loads_and_extra_keys_are_ignored_but_a_missing_required_field_is_named():
    saved = _saved(Outer("n", Kind.A, [], None, Path("p")))
    del saved["added_later"]
    saved["plot"] = "figures/p.png"  # a command's JSON carries more than its dataclass
    back = Outer.from_dict(saved)
    assert back.added_later == 7 and back.best is None
    del saved["kind"]
    with pytest.raises(ValueError, match="Outer: the field 'kind' is missing"):
        Outer.from_dict(saved)
    with pytest.raises(ValueError, match=r"Outer\.rows: expected a list"):
        from_jsonable(Outer, {**_saved(Outer("n", Kind.A, [], None, Path("p"))), "rows": 3})


def test_a_profile_report_round_trips_through_its_json():
    report = analyze_trace(reference_example(7).build())
    back = ProfileReport.from_dict(_saved(report))
    assert back == report
    assert isinstance(back.step_ms, Stat) and back.verdict.bottleneck is Bottleneck.INPUT
    assert back.gpu is not None and back.gpu.rows == report.gpu.rows


# ---- every kind of result nanolm saves -----------------------------------------------------------------


def _all_records() -> list[type]:
    import importlib
    import pkgutil

    import nanolm

    for info in pkgutil.walk_packages(nanolm.__path__, "nanolm."):
        if not info.name.startswith(("nanolm.cli", "nanolm.profiling.record.script", "nanolm.__main__")):
            importlib.import_module(info.name)
    found, todo = [], list(Record.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return sorted((c for c in found if c.__module__.startswith("nanolm.")), key=lambda c: c.__qualname__)


def _planted(tp, where: str):
    """A value of type tp with every field filled, for a round trip through JSON."""
    import dataclasses
    import types
    import typing

    from nanolm.records import _hints

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _planted(next(a for a in args if a is not type(None)), where)
    if origin is typing.Literal:
        return args[-1]
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        return tp(**{f.name: _planted(hints[f.name], f"{where}.{f.name}") for f in dataclasses.fields(tp) if f.init})
    if isinstance(tp, type) and issubclass(tp, Enum):
        return list(tp)[-1]
    if origin is list or tp is list:
        return [_planted(args[0], where)] if args else [1]
    if origin is tuple or tp is tuple:
        return (
            tuple(_planted(args[0], where) for _ in range(2))
            if len(args) == 2 and args[1] is Ellipsis
            else tuple(_planted(a, where) for a in args)
        )
    if origin is dict or tp is dict:
        return {(3 if args and args[0] is int else "k"): _planted(args[1], where) if args else 1}
    simple = {bool: True, int: 3, float: 1.5, str: "s", Path: Path("p"), typing.Any: {"k": [1, "x"]}}
    assert tp in simple, f"{where}: no planted value for {tp!r}: a result's field JSON cannot hold"
    return simple[tp]


RECORDS = _all_records()


def test_every_kind_of_result_is_a_record():
    names = {f"{c.__module__}.{c.__qualname__}" for c in RECORDS}
    assert {
        "nanolm.interp.probes.ProbeResult",
        "nanolm.interp.lens.LensResult",
        "nanolm.interp.sae.metrics.SAEEval",
        "nanolm.alignment.judge_bias.BiasReport",
        "nanolm.alignment.sycophancy.SycophancyResult",
    } <= names


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_each_result_round_trips_through_its_json_with_every_field_filled(cls):
    planted = _planted(cls, cls.__qualname__)
    back = cls.from_dict(_saved(planted))
    assert back == planted
