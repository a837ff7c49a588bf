"""Hostile traces for `nanolm profile analyze`: a valid trace whose steps touch, overlap or repeat (the replay
once indexed a step outside its group: IndexError), and input that is not a trace file at all (a folder, a pipe,
an empty file, a damaged gzip, JSON of another shape, events of the wrong types). Each valid trace gets the
report of its clean twin; each invalid one gets one line, exit 2, and the disk as it was."""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
from pathlib import Path

import pytest

from bad_input import assert_user_error, in_process, snapshot
from gpu_trace import compute_bound, launch_bound, reference_example
from nanolm.profiling.assemble import analyze_trace

STEP = "ProfilerStep#"
SCENARIOS = {
    "compute": lambda: compute_bound(steps=5),
    "launch": lambda: launch_bound(steps=4),
    "reference": lambda: reference_example(steps=4),
}


def _steps(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith(STEP)]


def rounded_ends(trace: dict) -> dict:
    """Each step's end a float rounding past the next step's start (ts + dur in floats, as Kineto's 3 decimals
    give): the next group's first step then starts before this group's t1."""
    for e in _steps(trace):
        e["dur"] += 1e-7
    return trace


def overlapping(trace: dict) -> dict:
    """Each step ends 0.5 us after the next one starts (the profiler's step range closes after the next opens)."""
    for e in _steps(trace)[:-1]:
        e["dur"] += 0.5
    return trace


def renumbered(trace: dict) -> dict:
    """Steps counted from 100, as a schedule with wait/warmup steps numbers them."""
    for e in _steps(trace):
        e["name"] = f"{STEP}{int(e['name'][len(STEP) :]) + 100}"
    return trace


def with_junk_events(trace: dict) -> dict:
    """Events no profiler writes, beside the real ones: wrong types in every field the reader looks at."""
    junk = [
        1,
        "x",
        None,
        [],
        {"ph": "X"},
        {"ph": "X", "ts": "abc", "dur": 1},
        {"ph": "X", "cat": ["cpu_op"], "name": "a", "ts": 1.0, "dur": 1.0, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": 7, "ts": 2.0, "dur": 1.0, "pid": [1], "tid": {"a": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 3.0, "dur": 1.0, "pid": 1, "tid": 1, "args": [1, 2]},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "ts": 4.0,
            "dur": 1.0,
            "pid": 0,
            "tid": 7,
            "args": {"correlation": [1], "External id": {"x": 1}},
        },
        {"ph": "X", "cat": "cpu_op", "name": "c", "ts": float("nan"), "dur": 1.0, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "d", "ts": 5.0, "dur": float("inf"), "pid": 1, "tid": 1},
        {"ph": "s", "cat": "ac2g", "id": [3], "pid": [1], "tid": 1, "ts": 1.0},
    ]
    trace["traceEvents"] = junk + trace["traceEvents"]
    return trace


def _figures(report) -> dict:
    """What the report says of the steps, rounded where a 1e-7 us shift may move a float's last digit."""
    d = report.to_dict()

    def rounded(x):
        if isinstance(x, float):
            return round(x, 6)
        if isinstance(x, dict):
            return {k: rounded(v) for k, v in x.items() if k not in ("target", "trace_path", "trace")}
        if isinstance(x, list):
            return [rounded(v) for v in x]
        return x

    return rounded(d)


def _write(path: Path, trace: dict) -> Path:
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("damage", [rounded_ends, renumbered, with_junk_events], ids=lambda f: f.__name__)
def test_a_valid_trace_gets_the_report_of_its_clean_twin(tmp_path, scenario, damage):
    clean = SCENARIOS[scenario]().build()
    expected = _figures(analyze_trace(_write(tmp_path / "clean.json", clean)))
    got = _figures(analyze_trace(_write(tmp_path / "damaged.json", damage(copy.deepcopy(clean)))))
    if damage is renumbered:  # the step labels are the only thing that differs
        got, expected = json.dumps(got).replace("#10", "#"), json.dumps(expected)
    assert got == expected


def _numbers(x) -> list[float]:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return [float(x)]
    if isinstance(x, dict):
        return [n for v in x.values() for n in _numbers(v)]
    if isinstance(x, list):
        return [n for v in x for n in _numbers(v)]
    return []


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_overlapping_steps_are_analysed_with_every_figure_finite(tmp_path, scenario):
    """Steps that overlap by 0.5 us: each group replays its own steps; the step time is the clean one's and every
    figure of the report (the replay's projections among them) is a number."""
    got = analyze_trace(_write(tmp_path / "t.json", overlapping(SCENARIOS[scenario]().build()))).to_dict()
    clean = analyze_trace(_write(tmp_path / "c.json", SCENARIOS[scenario]().build())).to_dict()
    assert got["gpu"]["step_ms"] == pytest.approx(clean["gpu"]["step_ms"], rel=1e-3)
    assert math.isfinite(got["gpu"]["replay_error"])
    numbers = _numbers(got)
    assert len(numbers) > 50 and all(math.isfinite(n) for n in numbers)


def test_the_compute_bound_trace_of_the_report_goes_through_the_command(tmp_path, monkeypatch, capfd):
    """The command line the report came from: five steps, host blocked on a full queue, ends rounded."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "t.json", rounded_ends(compute_bound(steps=5).build()))
    capfd.readouterr()
    from nanolm.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["profile", "analyze", "t.json", "--json", "r.json"])
    out = capfd.readouterr()
    assert exc.value.code in (0, None), out.err
    assert "Traceback" not in out.err
    assert math.isfinite(json.loads((tmp_path / "r.json").read_text())["gpu"]["step_ms"])


def _empty_folder(tmp_path: Path) -> tuple[Path, list[str]]:
    (tmp_path / "empty").mkdir()  # (a folder of traces is a folder of ranks: tests/test_profile_folder.py)
    return tmp_path / "empty", ["holds no trace", "one torch.profiler trace per rank"]


def _pipe(tmp_path: Path) -> tuple[Path, list[str]]:
    os.mkfifo(tmp_path / "pipe.json")  # reading it would wait for a writer forever
    return tmp_path / "pipe.json", ["not a regular file"]


def _file(name: str, data: bytes, *names: str):
    def make(tmp_path: Path) -> tuple[Path, list[str]]:
        (tmp_path / name).write_bytes(data)
        return tmp_path / name, list(names)

    make.__name__ = name
    return make


_GZ = gzip.compress(json.dumps(compute_bound(steps=3).build()).encode())
HOSTILE = [
    _empty_folder,
    _pipe,
    _file("empty.json", b"", "is empty"),
    _file("latin1.json", '{"traceEvents": ["caf\xe9"]}'.encode("latin-1"), "not JSON"),
    _file("truncated.json.gz", _GZ[: len(_GZ) // 2], "truncated or damaged gzip"),
    _file("notgzip.json.gz", b"\x1f\x8b" + b"\x00" * 40, "damaged gzip"),
    _file("half.json", json.dumps(compute_bound(steps=3).build()).encode()[:5000], "not JSON"),
    _file("number.json", b"42", "no traceEvents list"),
    _file("string.json", b'"trace"', "no traceEvents list"),
    _file("other.json", b'{"events": []}', "no traceEvents list"),
    _file("eventsdict.json", b'{"traceEvents": {"a": 1}}', "no traceEvents list"),
    _file(
        "nosteps.json",
        json.dumps(
            {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}
        ).encode(),
        "no ProfilerStep",
    ),
]


@pytest.mark.parametrize("make", HOSTILE, ids=lambda f: f.__name__)
def test_what_is_not_a_trace_file_gets_one_line(tmp_path, monkeypatch, capfd, make):
    path, names = make(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = {p.name for p in tmp_path.rglob("*")}
    files = snapshot(tmp_path)
    code, err = in_process(["profile", "analyze", str(path.relative_to(tmp_path)), "--json", "r.json"], capfd)
    assert_user_error(code, err, path.name, *names)
    assert {p.name for p in tmp_path.rglob("*")} == before
    assert snapshot(tmp_path) == files


def test_a_missing_trace_is_still_said_to_be_missing(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["profile", "analyze", "nope.json"], capfd)
    assert_user_error(code, err, "nope.json", "does not exist")
    assert not list(tmp_path.iterdir())
