"""cut_many (every host stretch of a group cut by label at once, over arrays) is Labeler.cut stretch by stretch: the
same labels, in the same order, with the same floats, on real and planted traces and on stretches of every kind
(inside one event, across steps, on a boundary, empty, reversed, longer than the trace)."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from gpu_trace import compute_bound, launch_bound, reference_example
from nanolm.profiling.measure.device import Labeler
from nanolm.profiling.trace.load import load_trace

FIXTURES = Path(__file__).parent / "fixtures"


def _overlapping_phases() -> dict:
    """Phase ranges that cross a step boundary and hold later ones: a stretch's label is then the latest-starting
    range still open, a few ranges back (a data range closed in the next step, forward ranges inside it)."""
    events = []

    def x(name, ts, dur, cat="user_annotation"):
        events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1})

    for k, t in enumerate((0.0, 100.0, 200.0)):
        x(f"ProfilerStep#{k}", t, 100.0)
    x("data", 80.0, 50.0)  # closed in the next step: not nested
    for i, t in enumerate((85.0, 92.0, 101.0, 104.0, 110.0)):
        x("forward", t, 2.0)
        x("aten::mm", t + 0.5, 1.0, "cpu_op")
        x(f"aten::add_{i}", t + 3.0, 1.0, "cpu_op")
    x("aten::stack", 150.0, 20.0, "cpu_op")
    return {"traceEvents": events}


TRACES = {
    "overlapping_phases": _overlapping_phases(),
    "seed_example": FIXTURES / "gpu/seed_example.trace.json.gz",
    "gpt2_compiled": FIXTURES / "gpu/gpt2_compiled.trace.json.gz",
    "sampled_rank0": FIXTURES / "hta/sampled_rank-0.json.gz",
    "mi250": FIXTURES / "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "reference_example": reference_example(steps=3),
    "launch_bound": launch_bound(steps=3),
    "compute_bound": compute_bound(steps=3),
}


def _stretches(lab: Labeler, rng: random.Random) -> list[tuple[float, float]]:
    bounds = lab.bounds.tolist()
    lo, hi = bounds[0], bounds[-1]
    out = [(lo - 10, hi + 10), (hi, lo), (lo, lo)]
    for _ in range(300):
        kind = rng.random()
        if kind < 0.3:  # from one boundary to another
            i, j = sorted(rng.sample(range(len(bounds)), 2))
            out.append((bounds[i], bounds[j]))
        elif kind < 0.6:  # short, anywhere
            a = rng.uniform(lo, hi)
            out.append((a, a + rng.choice([0.0, 0.5, 5.0, 300.0])))
        else:
            a, b = sorted(rng.uniform(lo, hi) for _ in range(2))
            out.append((a, b))
    return out


@pytest.mark.parametrize("name", sorted(TRACES))
def test_cut_many_is_cut_stretch_by_stretch(name):
    source = TRACES[name]
    trace = load_trace(source if isinstance(source, (Path, dict)) else source.build())
    lab = Labeler(trace)
    stretches = _stretches(lab, random.Random(name))
    lab.ops = defaultdict(lambda: defaultdict(float))
    want = [tuple(list(dict(d).items()) for d in lab.cut(a, b)) for a, b in stretches]
    want_ops = {label: list(names.items()) for label, names in lab.ops.items()}
    lab.ops = defaultdict(lambda: defaultdict(float))
    got = [tuple(list(d.items()) for d in parts) for parts in lab.cut_many(stretches)]
    assert got == want
    assert {label: list(names.items()) for label, names in lab.ops.items()} == want_ops  # op names, same order
    assert any(parts[2] for parts in want) or name != "reference_example"  # the 50 ms batch: eventless time
