"""The trace reader's two ways in read the same trace: a Kineto file's bytes decoded straight into typed events
(msgspec, only the fields the analysis reads), and plain JSON values read field by field (the lenient way, for
a trace given as an object or a file with fields of other types). Checked against Python's own json module."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpu_trace import compute_bound
from nanolm.errors import UserError
from nanolm.profiling.trace import load as trace_load
from nanolm.profiling.trace import stream
from nanolm.profiling.trace.load import load_trace
from nanolm.profiling.trace.steps import span_of_steps

FIXTURES = Path(__file__).parent / "fixtures"
FILES = (
    sorted(FIXTURES.glob("gpu/*.trace.json.gz"))
    + sorted(FIXTURES.glob("hta/*.json.gz"))
    + [FIXTURES / "cpu/tiny_train.trace.json.gz"]
)


def as_rows(trace) -> dict:
    """Everything the analysis reads of a Trace, as plain values (events named by their place in their list)."""
    place = {}
    lanes = {}
    for lane, events in sorted(trace.host.items(), key=lambda kv: str(kv[0])):
        lanes[str(lane)] = [(e.name, e.cat, e.ts, e.dur, e.correlation, e.external_id) for e in events]
        place.update({id(e): ("host", str(lane), i) for i, e in enumerate(events)})
    place.update({id(e): ("device", i) for i, e in enumerate(trace.device)})
    return {
        "host": lanes,
        "parents": {str(lane): [place.get(id(e.parent)) for e in events] for lane, events in trace.host.items()},
        "device": [(e.name, e.cat, e.ts, e.dur, e.pid, e.tid, e.correlation) for e in trace.device],
        "annotations": [(e.name, e.ts, e.dur) for e in trace.device_annotations],
        "steps": [place[id(e)] for e in trace.steps],
        "launch_of": [place[id(e.launched_by)] if e.launched_by else None for e in trace.device],
        "op_of": [
            place[id(e.made_by)] if e.made_by else None for e in [*trace.device, *(h for v in trace.host.values() for h in v)]
        ],
        "device_properties": trace.device_properties,
    }


@pytest.mark.parametrize("path", [p for p in FILES if p.name != "df_index_resolver.json.gz"], ids=lambda p: p.name)
def test_a_kineto_file_decoded_typed_is_the_trace_read_from_pythons_json(path, monkeypatch):
    # (the 53 MB V100 trace is left to its golden report: 10 s here for the same code)
    typed = load_trace(path)
    plain = load_trace(json.loads(gzip.decompress(path.read_bytes())))  # the lenient way, from the stdlib's parse
    assert as_rows(typed) == as_rows(plain)

    def no_fallback(*_):
        raise AssertionError("the typed decoder fell back to the lenient one on a file Kineto wrote")

    monkeypatch.setattr(trace_load, "_lenient_events", no_fallback)
    load_trace(path)  # Kineto's own files take the typed way


def test_a_field_of_another_type_is_read_leniently_and_the_event_skipped(tmp_path):
    data = compute_bound(steps=3).build()
    events = data["traceEvents"]
    kernel = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    events[kernel] = {**events[kernel], "ts": "soon"}  # a string time: the typed decoder refuses the file
    events.append(["not", "an", "event"])
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data))
    trace = load_trace(path)
    assert trace.meta["skipped_events"] == 2
    assert len(trace.device) == sum(e.get("cat") == "kernel" for e in events if isinstance(e, dict)) - 1


def test_nan_times_are_skipped_events_not_a_json_error(tmp_path):
    data = compute_bound(steps=3).build()
    text = json.dumps(data)
    first = next(e for e in data["traceEvents"] if e.get("cat") == "kernel")
    text = text.replace(f'"dur": {json.dumps(first["dur"])}', '"dur": NaN', 1)  # what Python's json writes for nan
    path = tmp_path / "nan.json"
    path.write_text(text)
    assert load_trace(path).meta["skipped_events"] >= 1


def test_a_file_cut_short_names_the_byte_where_it_breaks(tmp_path):
    text = json.dumps(compute_bound(steps=3).build())
    path = tmp_path / "cut.json"
    path.write_text(text[:5000])
    with pytest.raises(UserError, match=r"is not JSON \(JSONDecodeError at byte \d+\)") as info:
        load_trace(path)
    offset = int(str(info.value).split("at byte ")[1].split(")")[0])
    with pytest.raises(json.JSONDecodeError) as stdlib:
        json.loads(text[:5000])
    assert offset == stdlib.value.pos


def test_the_scale_bench_repeats_a_trace_into_one_with_the_same_figures_per_window(tmp_path):
    """bench/trace_scale.py's longer traces are the same job recorded longer: each window of the repeated trace
    is one copy, so the report's figures are those of the trace itself, at every length."""
    import importlib.util

    from nanolm.profiling.assemble import AnalyzeOptions, analyze_trace

    spec = importlib.util.spec_from_file_location("trace_scale", Path(__file__).parents[1] / "bench/trace_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = compute_bound(steps=4).build()
    once, thrice = (bench.repeated(data, k, tmp_path / f"x{k}.json", steps=4) for k in (1, 3))
    a, b = (analyze_trace(p, AnalyzeOptions(group=4)).gpu for p in (once, thrice))
    assert len(load_trace(thrice).steps) == 3 * len(load_trace(once).steps) == 12
    assert len(load_trace(thrice).device) == 3 * len(load_trace(once).device)
    assert [r.name for r in b.rows] == [r.name for r in a.rows]
    assert [b.step_ms, b.busy_share, *(r.ms for r in b.rows)] == pytest.approx(
        [a.step_ms, a.busy_share, *(r.ms for r in a.rows)], abs=1e-6
    )


def test_the_unpacked_size_is_read_from_the_gzip_trailer(tmp_path):
    for path in FILES:
        assert trace_load.unpacked_size(path) == len(gzip.decompress(path.read_bytes()))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(compute_bound(steps=3).build()))
    assert trace_load.unpacked_size(plain) == plain.stat().st_size


def test_a_trace_too_big_for_the_free_memory_is_one_line_before_it_is_read(tmp_path, monkeypatch, cli):
    path = FILES[0]
    need = trace_load.expected_peak_bytes(trace_load.unpacked_size(path))
    monkeypatch.setattr(trace_load, "available_memory", lambda: need - 1)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("the trace was read"))
    result = cli("profile", "analyze", str(path), cwd=tmp_path)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert f"needs about {need / 1e9:.1f} GB" in line and f"has {(need - 1) / 1e9:.1f} GB free" in line
    assert "--steps A:B" in line
    steps = cli("profile", "analyze", str(path), "--steps", "0:1", cwd=tmp_path)  # fewer steps need less
    assert steps.returncode == 2 and "ProfilerStep#" in steps.stderr and "GB free" not in steps.stderr
    monkeypatch.undo()
    assert load_trace(path).steps  # with the memory there, it is read


def test_a_range_of_steps_is_refused_by_what_its_share_of_the_steps_needs(tmp_path, monkeypatch):
    """Free memory for one step's host events but not all of them: one step is read, every step refused once the scan
    has found how much of the trace they are."""
    data = compute_bound(steps=9).build()
    path = tmp_path / "nine.json"
    path.write_text(json.dumps(data))
    marks = {e["name"]: e for e in data["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
    first, last = min(marks.values(), key=lambda e: e["ts"]), max(marks.values(), key=lambda e: e["ts"])
    k = int(first["name"].split("#")[1]) + 4
    before, chosen = marks[f"ProfilerStep#{k - 1}"], marks[f"ProfilerStep#{k}"]
    share = (chosen["ts"] + chosen["dur"] - before["ts"]) / (last["ts"] + last["dur"] - first["ts"])  # by hand
    assert span_of_steps(load_trace(path).steps, (k, k + 1), "t").share == pytest.approx(share, rel=1e-12)
    size = path.stat().st_size
    one, every = trace_load.expected_peak_bytes(size, share), trace_load.expected_peak_bytes(size)
    assert one < every
    monkeypatch.setattr(trace_load, "available_memory", lambda: (one + every) // 2)
    assert len(load_trace(path, (k, k + 1)).steps) == 1
    with pytest.raises(UserError, match=r"analysing those steps of it needs about .*\(a smaller --steps range"):
        load_trace(path, (0, None))


def _innermost_by_descent(trace, lane, t):
    """The definition, walked: at each level the latest event to start at or before t, if t is inside it."""
    level = [e for e in trace.host[lane] if e.parent is None]
    found = None
    while True:
        started = [e for e in level if e.ts <= t]
        if not started or not t < started[-1].end:
            return found
        found = started[-1]
        level = list(found.children)


@pytest.mark.parametrize("seed", range(6))
def test_the_innermost_timeline_is_the_descent_at_every_time(seed):
    """Random lanes: nested, overlapping without nesting, zero-length, equal starts, unsorted; asked at every
    start and end and between them."""
    import random

    rng = random.Random(seed)
    events = []
    for i in range(300):
        ts = float(rng.choice([rng.randrange(0, 200), rng.randrange(0, 2000)]))
        dur = float(rng.choice([0, rng.randrange(1, 10), rng.randrange(1, 300)]))
        events.append({"ph": "X", "cat": "cpu_op", "name": f"op{i}", "ts": ts, "dur": dur, "pid": 1, "tid": 1})
    rng.shuffle(events)
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 2500, "pid": 1, "tid": 2})
    trace = load_trace({"traceEvents": events})
    lane = (1, 1)
    edges = sorted({t for e in trace.host[lane] for t in (e.ts, e.end)})
    probes = edges + [(a + b) / 2 for a, b in zip(edges, edges[1:])] + [-1.0, 1e9]
    for t in probes:
        assert trace.innermost(lane, t) is _innermost_by_descent(trace, lane, t), t


def test_a_lane_nested_deeper_than_pythons_call_stack():
    events = [{"ph": "X", "cat": "cpu_op", "name": "f", "ts": i, "dur": 10**6 - 2 * i, "pid": 1, "tid": 1} for i in range(5000)]
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10**6, "pid": 1, "tid": 1})
    trace = load_trace({"traceEvents": events})
    assert trace.innermost((1, 1), 4999.5).ts == 4999


def _whole_way(monkeypatch):
    """Make load_trace read files the whole way (the reference the pieces are checked against)."""
    monkeypatch.setattr(trace_load, "decode_by_pieces", lambda *a, **k: None)


def _pieces_only(monkeypatch, piece_bytes):
    """Make load_trace read files by pieces of `piece_bytes`, and fail if it falls back to the whole way."""
    from nanolm.profiling.trace import stream

    monkeypatch.setattr(stream, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(trace_load, "_file_bytes", lambda p: pytest.fail(f"{p} was read the whole way"))


def _layouts(data: dict, folder: Path) -> list[Path]:
    """The trace `data` written as Kineto indents it, compact (no whitespace), with fields after the event list,
    and gzipped as two members (gzip -c a b)."""
    head = {k: v for k, v in data.items() if k != "traceEvents"}
    events = data["traceEvents"]
    indented = folder / "indented.json"
    indented.write_text(json.dumps({**head, "traceEvents": events}, indent=2))
    compact = folder / "compact.json"
    compact.write_text(json.dumps({**head, "traceEvents": events}, separators=(",", ":")))
    tail = folder / "tail.json"
    tail.write_text(json.dumps({"traceEvents": events, **head, "traceName": "x]},{"}))
    members = folder / "members.json.gz"
    text = indented.read_bytes()
    members.write_bytes(gzip.compress(text[: len(text) // 2]) + gzip.compress(text[len(text) // 2 :]))
    return [indented, compact, tail, members]


def test_a_gzip_file_is_unpacked_in_blocks_of_the_size_asked_member_after_member(tmp_path):
    """Blocks of at most the size asked, however well the file packs; a second member found however the reads fall
    (one read ends exactly where the first member does), zero padding skipped and a cut member refused, as the
    stdlib's gzip reader does."""
    text = json.dumps(compute_bound(steps=3).build()).encode()
    first, second = gzip.compress(text[:5000]), gzip.compress(text[5000:])
    path = tmp_path / "t.json.gz"
    for packed in (first + second, first + b"\0" * 700 + second + b"\0" * 30):
        path.write_bytes(packed)
        for size in (len(first), 97, 4096, 1 << 20):  # len(first): a read ends at the first member's end
            blocks = list(stream.file_blocks(path, size))
            assert b"".join(blocks) == gzip.decompress(packed) == text, size
            assert max(map(len, blocks)) <= size
    path.write_bytes(first + second[:-9])
    with pytest.raises(EOFError):
        list(stream.file_blocks(path, 4096))
    with pytest.raises(EOFError):
        gzip.decompress(path.read_bytes())


@pytest.mark.parametrize("piece", [256, 4096, 1 << 20])
def test_a_file_read_by_pieces_is_the_trace_read_whole(piece, tmp_path, monkeypatch):
    """Every layout, cut into pieces smaller than one event (read on to the next cut), of a few events, and larger
    than the file: the same Trace as the whole file decoded at once."""
    data = compute_bound(steps=3).build()
    data["deviceProperties"] = [{"id": 0, "name": "H100"}]
    data["distributedInfo"] = {"rank": 0}
    for path in _layouts(data, tmp_path) + [FIXTURES / "gpu" / sorted(p.name for p in (FIXTURES / "gpu").glob("*.gz"))[0]]:
        with monkeypatch.context() as m:
            _whole_way(m)
            whole = load_trace(path)
        with monkeypatch.context() as m:
            _pieces_only(m, piece)
            pieces = load_trace(path)
        assert as_rows(pieces) == as_rows(whole), path.name
        assert pieces.meta == whole.meta, path.name


def test_what_pieces_cannot_read_is_read_the_whole_way(tmp_path, monkeypatch):
    """A cut that lands inside an event (a list of objects in its args), a string time, a truncated gzip file and
    a bare list of events each make the pieces give up; the whole way then reads the file, or names its problem."""
    from nanolm.profiling.trace import stream

    data = compute_bound(steps=3).build()
    kernel = next(e for e in data["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"] = {**kernel.get("args", {}), "blocks": [{"x": i} for i in range(200)]}
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps(data))
    got = stream.decode_by_pieces(nested, trace_load.Event, trace_load.TraceFile, lambda events: None, 512)
    assert got is None
    monkeypatch.setattr(stream, "PIECE_BYTES", 512)
    with monkeypatch.context() as m:
        _whole_way(m)
        whole = load_trace(nested)
    assert as_rows(load_trace(nested)) == as_rows(whole)

    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data["traceEvents"]))
    assert stream.decode_by_pieces(bare, trace_load.Event, trace_load.TraceFile, lambda events: None) is None
    events_only = {k: v for k, v in as_rows(whole).items() if k != "device_properties"}  # a bare list has none
    assert {k: v for k, v in as_rows(load_trace(bare)).items() if k != "device_properties"} == events_only

    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(nested.read_bytes())[:-100])
    with pytest.raises(UserError, match="truncated or damaged gzip file"):
        load_trace(cut)


def test_pieces_never_hold_the_whole_file(tmp_path, monkeypatch):
    """Python's allocation peak while reading by pieces stays below the whole way's by most of the file's size:
    the whole way holds the file's bytes while it decodes, the pieces hold one piece."""
    import tracemalloc

    data = compute_bound(steps=40).build()
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data, indent=2))
    size = path.stat().st_size
    peaks = {}
    for way in ("whole", "pieces"):
        with monkeypatch.context() as m:
            _whole_way(m) if way == "whole" else _pieces_only(m, 64 << 10)
            tracemalloc.start()
            load_trace(path)
            peaks[way] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    assert size > 2 << 20
    assert peaks["pieces"] < peaks["whole"] - 0.8 * size, (peaks, size)
