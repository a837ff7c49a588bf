"""A trace loaded with a range of its steps (``profile analyze --steps A:B``) is the same analysis of those steps as the
whole trace's: the windows' numbers and the GPU report of the chosen steps equal the whole trace's for the same
steps, to the last bit, while the host events outside them are never kept."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_trace import compute_bound
from nanolm.errors import UserError
from nanolm.profiling.judge.gpu import analyze_gpu
from nanolm.profiling.measure.window import trace_window_stats
from nanolm.profiling.trace import load as trace_load
from nanolm.profiling.trace import stream
from nanolm.profiling.trace.load import load_trace
from nanolm.profiling.trace.steps import step_number

FIXTURES = Path(__file__).parent / "fixtures"
REAL = [FIXTURES / "gpu/seed_example.trace.json.gz", FIXTURES / "gpu/gpt2_compiled.trace.json.gz"]


def _same_steps_as_whole(path_or_data, steps: tuple[int | None, int | None]):
    """(the range's trace, the whole trace, the whole trace's index of the range's first step)."""
    part, whole = load_trace(path_or_data, steps), load_trace(path_or_data)
    numbers = [step_number(s) for s in whole.steps]
    chosen = [k for k in numbers if (steps[0] is None or k >= steps[0]) and (steps[1] is None or k < steps[1])]
    assert [step_number(s) for s in part.steps] == chosen
    return part, whole, numbers.index(chosen[0]), len(chosen)


def _check_same_analysis(part, whole, first: int, n: int) -> None:
    assert part.group_span(0, n) == whole.group_span(first, n)
    assert trace_window_stats(part, *part.group_span(0, n)) == trace_window_stats(whole, *whole.group_span(first, n))
    if whole.has_device:
        a, b = analyze_gpu(part, None, 0, n), analyze_gpu(whole, None, first, n)
        assert replace(a.report, trace=None) == replace(b.report, trace=None)  # (a trace object has no path)
        assert a.verdict == b.verdict


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_the_steps_of_a_real_trace_are_analysed_as_in_the_whole_trace(path):
    numbers = [step_number(s) for s in load_trace(path).steps]
    for steps in [(numbers[1], numbers[-1]), (numbers[1], None), (None, numbers[-1])]:
        part, whole, first, n = _same_steps_as_whole(path, steps)
        _check_same_analysis(part, whole, first, n)
        if steps[1] is not None:  # the steps after the range are never kept (the one before it is read)
            assert sum(map(len, part.host.values())) < sum(map(len, whole.host.values()))
        assert len(part.device) == len(whole.device)


def test_a_range_inside_a_longer_planted_trace_read_every_way(tmp_path, monkeypatch):
    """By pieces (the step scan, then the filtered read), the whole way (steps found after reading), and from a
    trace object: the same trace of steps 3 to 5."""
    data = compute_bound(steps=9).build()
    marks = sorted((e for e in data["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    last = next(i for i, e in enumerate(marks) if e["name"] == "ProfilerStep#5")
    marks[last]["dur"] = marks[last + 1]["ts"] - marks[last]["ts"] + 3.0  # closed late: the next step's start ends it
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data, indent=1))
    steps = (3, 6)
    part, whole, first, n = _same_steps_as_whole(path, steps)
    assert n == 3
    _check_same_analysis(part, whole, first, n)
    with monkeypatch.context() as m:  # pieces of a few events: the scan decodes only the events around a step's name
        m.setattr(stream, "PIECE_BYTES", 4096)
        _check_same_analysis(load_trace(path, steps), whole, first, n)
        found = []
        assert stream.decode_by_pieces(path, trace_load.Event, trace_load.TraceFile, found.extend, only=b"ProfilerStep#")
        assert sum(e.name.startswith("ProfilerStep#") for e in found) == 9
        assert len(found) < len(data["traceEvents"]) / 4  # the rest never decoded
    by_pieces = trace_load.decode_by_pieces
    with monkeypatch.context() as m:  # the scan reads by pieces, the file's second pass cannot: still only the range
        m.setattr(trace_load, "decode_by_pieces", lambda *a, **k: by_pieces(*a, **k) if k.get("only") else None)
        scanned_then_whole = load_trace(path, steps)
        _check_same_analysis(scanned_then_whole, whole, first, n)
        assert sum(map(len, scanned_then_whole.host.values())) == sum(map(len, part.host.values()))
    monkeypatch.setattr(trace_load, "decode_by_pieces", lambda *a, **k: None)
    whole_way = load_trace(path, steps)
    _check_same_analysis(whole_way, whole, first, n)
    _check_same_analysis(load_trace(data, steps), whole, first, n)


def test_the_main_lane_of_a_range_is_the_whole_traces(tmp_path):
    """Another thread marks more ProfilerSteps inside the range than the training loop has there (5 to its 3), but
    fewer over the whole trace (5 to 9): the range's steps are the training loop's, as the whole trace's are."""
    data = compute_bound(steps=9).build()
    marks = sorted((e for e in data["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    lane = (marks[0]["pid"], marks[0]["tid"])
    t0 = next(e["ts"] for e in marks if e["name"] == "ProfilerStep#4")
    for i, k in enumerate([3, 3, 4, 4, 5]):
        data["traceEvents"].append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k}",
                "ts": t0 + 10.0 * i,
                "dur": 5.0,
                "pid": 77,
                "tid": 7,
            }
        )
    path = tmp_path / "two_lanes.json"
    path.write_text(json.dumps(data))
    for source in (path, data):
        part, whole, first, n = _same_steps_as_whole(source, (3, 6))
        assert part.main_lane == whole.main_lane == lane and n == 3
        _check_same_analysis(part, whole, first, n)


def test_a_range_with_no_step_names_the_steps_there_are(tmp_path):
    path = FIXTURES / "hta/sampled_rank-0.json.gz"
    with pytest.raises(UserError, match=r"has ProfilerStep#551 to #552; --steps 7:9 holds none of them; .* --steps 551:553"):
        load_trace(path, (7, 9))


@pytest.mark.parametrize(
    "given, says",
    [
        ("5", "not a range of step numbers"),
        ("a:b", "not a range of step numbers"),
        (":", "not a range of step numbers"),
        ("-1:3", "not a range of step numbers"),
        ("6:6", "holds no step"),
        ("7:5", "holds no step"),
        ("\u00b2:5", "not a range of step numbers"),  # a digit to str.isdigit, not to int()
    ],
)
def test_a_step_range_that_is_not_one_is_one_line(given, says, tmp_path, cli):
    trace = tmp_path / "t.json"
    trace.write_bytes(gzip.decompress(REAL[0].read_bytes()))
    result = cli("profile", "analyze", str(trace), "--steps", given, cwd=tmp_path)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line and says in line, line
