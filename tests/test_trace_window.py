"""The window analysis over columns (nanolm.profiling.measure.window) against the object path it replaces,
analyze_window(host_events(...)), which stays the reference: every figure equal to the last bit, on every window
of the real fixture traces and on random traces built to hit the tree's corners; and the array interval union
against intervals.union on random interval sets."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest

from nanolm.profiling.measure.device import clipped, device_in
from nanolm.profiling.measure.host import analyze_window, host_events
from nanolm.profiling.measure.window import trace_window_stats
from nanolm.profiling.trace.intervals import union, union_of
from nanolm.profiling.trace.load import load_trace

FIXTURES = Path(__file__).parent / "fixtures"
TRACES = [
    "cpu/tiny_train.trace.json.gz",
    "gpu/gpt2_compiled.trace.json.gz",
    "gpu/seed_example.trace.json.gz",
    "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/sampled_rank-0.json.gz",
    "hta/sampled_rank-1.json.gz",
]


def same(a, b) -> bool:
    """Equal to the last bit: the reprs of every field (a float's repr is exact; dicts in the same order)."""
    return repr(dataclasses.asdict(a)) == repr(dataclasses.asdict(b))


def assert_every_window_same(trace, sizes=(1, 2, 3)) -> int:
    checked = 0
    for size in sizes:
        for first, count in trace.step_groups(size):
            span = trace.group_span(first, count)
            reference, columns = analyze_window(host_events(trace, *span)), trace_window_stats(trace, *span)
            assert same(reference, columns), (size, first, reference, columns)
            checked += 1
    return checked


@pytest.mark.parametrize("name", TRACES)
def test_every_window_of_a_real_trace_is_the_object_paths_to_the_bit(name):
    assert assert_every_window_same(load_trace(FIXTURES / name)) >= 3


def test_the_large_real_trace_with_nccl_kernels_is_the_object_paths_to_the_bit():
    """216k events, 2 lanes launching, NCCL all-reduces on the device: the communication branch."""
    trace = load_trace(FIXTURES / "hta/df_index_resolver.json.gz")
    window = trace_window_stats(trace, *trace.group_span(0, 5))
    assert window.comm is not None and window.comm.in_flight_ms > 0
    assert assert_every_window_same(trace, sizes=(5,)) == 1


NAMES = ["aten::mm", "aten::add", "aten::copy_", "aten::item", "aten::to", "c10d::allreduce_", "## region ##"]
NAMES += ["nccl:all_reduce", "record_param_comms"]
PHASE_NAMES = ["forward", "backward", "optimizer", "data", "between", "sync", "Optimizer.step#AdamW.step"]


def random_trace(rng: random.Random, steps: int = 6) -> dict:
    """A trace of `steps` ProfilerSteps whose lanes nest at random: phase ranges in phases and in ops, sync ranges,
    python_function events between views (not views themselves), ranges that outlast their parent, zero-length
    events, equal starts, a second launching lane, kernels (some NCCL) linked by correlation ids."""
    events, corr = [], [0]

    def add(cat, name, ts, dur, tid, **args):
        events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args})

    def launch(ts, tid):
        corr[0] += 1
        add("cuda_runtime", "cudaLaunchKernel", ts, 2.0, tid, correlation=corr[0])
        name = rng.choice(["ampere_sgemm_128x64", "ncclDevKernel_AllReduce_Sum_f32", "vectorized_elementwise_kernel"])
        start = ts + rng.choice([1.0, 5.0, 30.0])
        add("kernel", name, start, rng.choice([0.0, 3.0, 40.0]), 7, correlation=corr[0])

    def fill(t0, t1, tid, depth):
        t = t0
        while t < t1 and depth < 6:
            t += rng.choice([0.0, 0.0, 1.0, 3.5])
            dur = rng.choice([0.0, 2.0, 7.25, 20.0, 60.0])
            if t + dur > t1:
                dur = max(0.0, t1 - t)
            kind = rng.random()
            if kind < 0.25:
                add("user_annotation", rng.choice(PHASE_NAMES), t, dur, tid)
            elif kind < 0.35:
                add("python_function", "nn.Module: Block", t, dur, tid)
            elif kind < 0.5 and dur > 2:
                launch(t, tid)
                dur = 2.0
            else:
                add("cpu_op", rng.choice(NAMES), t, dur, tid)
            if dur > 4 and rng.random() < 0.7:
                fill(t + 0.5, t + dur - 0.5, tid, depth + 1)
            if rng.random() < 0.05:  # a range that starts inside this one and outlasts it: not its child
                add("user_annotation", "between", t + dur / 2, dur * 2 + 1, tid)
            t += dur

    for k in range(steps):
        t0 = k * 1000.0
        add("user_annotation", f"ProfilerStep#{k}", t0, 900.0, 1)
        fill(t0 + 1, t0 + 899, 1, 1)
        fill(t0 + 50, t0 + 700, 2, 1)  # the autograd thread: roots of its own
        if k % 3 == 2:  # a zero-length step range on another thread: the main thread is still the one with most
            add("user_annotation", f"ProfilerStep#{k}", t0 + 40, 0.0, 2)
    return {"traceEvents": events}


@pytest.mark.parametrize("seed", range(12))
def test_random_traces_window_by_window_and_cut_anywhere(seed):
    rng = random.Random(seed)
    trace = load_trace(random_trace(rng))
    assert assert_every_window_same(trace) >= 6
    for _ in range(4):  # a window cut through events: their parents start before it, their children after
        t0 = rng.uniform(0, 5000)
        t1 = t0 + rng.uniform(0, 2000)
        assert same(analyze_window(host_events(trace, t0, t1)), trace_window_stats(trace, t0, t1)), (t0, t1)
    assert same(analyze_window(host_events(trace, 3000.0, 1000.0)), trace_window_stats(trace, 3000.0, 1000.0))  # t1 < t0


@pytest.mark.parametrize("seed", range(40))
def test_the_array_union_is_intervals_union(seed):
    """Overlapping, nested, touching, zero-length, reversed (end before start), duplicated, unsorted."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    starts = rng.choice([0.0, 1.0, 2.5, 3.0, 10.0], n) + rng.integers(0, 20, n)
    ends = starts + rng.choice([-1.0, 0.0, 0.5, 1.0, 4.0, 30.0], n)
    assert union_of(starts, ends) == union(list(zip(starts.tolist(), ends.tolist(), strict=True)))


@pytest.mark.parametrize("seed", range(4))
def test_the_group_device_activities_found_by_bisection_are_all_of_them(seed):
    """device_in reads only the activities that can reach the window: the same list as clipping every one."""
    rng = random.Random(seed)
    trace = load_trace(random_trace(rng))
    for _ in range(50):
        t0 = rng.uniform(-100, 6000)
        t1 = t0 + rng.choice([0.0, 0.5, 30.0, 900.0, 3000.0])
        assert device_in(trace, t0, t1) == clipped(trace.device, t0, t1)
