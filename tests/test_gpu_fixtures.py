"""Recorded GPU traces (tests/fixtures/gpu/, made by bench/gpu_traces.sh on a GPU): the gate, the verdict, the
order of findings and each projection held against the step measured with the fix in place. A fixture not
recorded yet is skipped with that reason; the synthetic traces (test_gpu_verdict.py) hold the same rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nanolm.profiling.judge.gpu import GpuInputs, analyze_gpu
from nanolm.profiling.measure.device import COMPUTING, LAUNCHING, WAITING
from nanolm.profiling.report import Bottleneck
from nanolm.profiling.trace.classify import OTHER
from nanolm.profiling.trace.intervals import length, union
from nanolm.profiling.trace.load import load_trace, read_trace_json

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def _load(name: str):
    trace_path, truth_path = FIXTURES / f"{name}.trace.json.gz", FIXTURES / f"{name}.truth.json"
    if not trace_path.is_file():
        pytest.skip(f"no recorded {name} trace yet: bench/gpu_traces.sh records it on a machine with a CUDA GPU")
    truth = json.loads(truth_path.read_text())
    trace = load_trace(trace_path)
    peak = truth.get("peak_tflops")
    inputs = GpuInputs(
        truth.get("unprofiled_ms"),
        truth.get("settings") or {},
        truth.get("cores"),
        truth.get("matmul_flops"),
        peak * 1e12 if peak else None,
    )
    return trace, truth, analyze_gpu(trace, inputs), trace_path


def _finding(analysis, bottleneck):
    return next(f for f in analysis.verdict.findings if f.bottleneck is bottleneck)


def test_nanogpt_eager_is_launch_bound():
    trace, truth, a, path = _load("nanogpt_eager")
    g, v = a.report, a.verdict
    assert g.gate == WAITING and g.busy_share <= 0.5
    idle = {r.name[6:]: r.ms for r in g.rows if r.kind == "idle"}
    assert idle.get(LAUNCHING, 0) >= 0.6 * sum(idle.values())
    assert v.bottleneck is Bottleneck.LAUNCH_OVERHEAD and v.findings[0].bottleneck is Bottleneck.LAUNCH_OVERHEAD
    assert "torch.compile" in v.findings[0].fix
    assert g.profiled_step_ms / truth["unprofiled_ms"] >= 1.3
    sync = _finding(a, Bottleneck.HOST_SYNC)
    assert sync.projected_step_ms is None or g.step_ms - sync.projected_step_ms <= 0.05 * g.step_ms
    # the "up to" projection is a best case: not slower than the step measured with torch.compile
    assert v.findings[0].projected_step_ms <= truth["fixed_ms"]["compile"] * 1.05
    # D1 on real data: counted, the GPU annotations made this step look busy
    data = read_trace_json(path)
    spans = [
        (e["ts"], e["ts"] + e["dur"])
        for e in data["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
    ]
    t0, t1 = a.device.t0, a.device.t1
    with_annotations = length(union([(max(s, t0), min(e, t1)) for s, e in spans if e > t0 and s < t1])) / (t1 - t0)
    assert with_annotations >= 0.9 and a.device.busy_share <= 0.5


def test_seed_example_is_input_bound_then_host_sync_bound():
    _, truth, a, _ = _load("seed_example")
    v, fixed = a.verdict, truth["fixed_ms"]
    assert a.report.gate == WAITING and v.bottleneck is Bottleneck.INPUT
    assert [f.bottleneck for f in v.findings[:2]] == [Bottleneck.INPUT, Bottleneck.HOST_SYNC]
    assert _finding(a, Bottleneck.INPUT).projected_step_ms == pytest.approx(fixed["prefetch"], rel=0.2)
    assert _finding(a, Bottleneck.HOST_SYNC).projected_step_ms == pytest.approx(fixed["no_sync"], rel=0.15)


def test_seed_example_with_both_fixed_is_one_replay():
    _, truth, a, _ = _load("seed_example")
    if "both" not in truth["fixed_ms"]:
        pytest.skip(f"the both-fixed step is not recorded: {truth.get('fixed_notes', {}).get('both', 'no reason given')}")
    assert a.verdict.together_ms == pytest.approx(truth["fixed_ms"]["both"], rel=0.2)


def test_gpt2_compiled_is_compute_bound():
    _, truth, a, _ = _load("gpt2_compiled")
    g, v = a.report, a.verdict
    assert g.gate == COMPUTING and g.busy_share >= 0.95 and v.bottleneck is Bottleneck.COMPUTE
    kinds = [f.bottleneck for f in v.findings]
    assert kinds.index(Bottleneck.COMPUTE) < kinds.index(Bottleneck.MEMORY)
    assert _finding(a, Bottleneck.MEMORY).fix is None
    assert a.device.class_ms.get(OTHER, 0.0) <= 0.05 * a.device.busy_ms
    for f in v.findings:
        if f.bottleneck in (Bottleneck.INPUT, Bottleneck.HOST_SYNC, Bottleneck.LAUNCH_OVERHEAD) and f.projected_step_ms:
            assert g.step_ms - f.projected_step_ms <= 0.03 * g.step_ms
    assert g.profiled_step_ms / truth["unprofiled_ms"] <= 1.05


def test_a_trimmed_trace_keeps_its_median_group():
    """bench/gpu/make_fixture.py's trim: the fixture analyses as the full trace's median group does."""
    import importlib.util

    from gpu_trace import launch_bound

    spec = importlib.util.spec_from_file_location("make_fixture", Path(__file__).parents[1] / "bench/gpu/make_fixture.py")
    make_fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_fixture)
    data = launch_bound(9).build()
    full = load_trace(data)
    first, count = make_fixture.median_group(full, 3)
    trimmed = make_fixture.trim(data, 3)
    assert len(trimmed["traceEvents"]) < 0.5 * len(data["traceEvents"])
    whole = analyze_gpu(full, GpuInputs(cores=4), first, count)
    cut = analyze_gpu(load_trace(trimmed), GpuInputs(cores=4))
    assert cut.device.steps == 3
    assert cut.report.busy_ms == pytest.approx(whole.report.busy_ms, rel=1e-6)
    assert [r.name for r in cut.report.rows] == [r.name for r in whole.report.rows]
    assert cut.verdict.bottleneck is whole.verdict.bottleneck


def test_a_trimmed_trace_keeps_the_kernels_its_steps_launched_however_late_they_ran():
    """A GPU-bound loop runs up to a queue of launches ahead (an H200's compiled gpt2-124m: 1.4 steps; here a queue of
    400 launches, 2.6 steps): the kernels the group's last step launched run long after it, and the fixture keeps them,
    so the replay of the group's launches has all its work."""
    import importlib.util

    from gpu_trace import compute_bound

    spec = importlib.util.spec_from_file_location("make_fixture", Path(__file__).parents[1] / "bench/gpu/make_fixture.py")
    make_fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_fixture)
    data = compute_bound(9, queue_limit=400).build()
    full = load_trace(data)
    first, count = make_fixture.median_group(full, 3)
    t0, t1 = full.steps[first].ts, full.steps[first + count - 1].end
    launched = [k for k in full.device if full.launch(k) is not None and t0 <= full.launch(k).ts < t1]
    assert max(k.ts for k in launched) > t1 + (t1 - t0) / count  # some run more than a step after the group
    cut = load_trace(make_fixture.trim(data, 3))
    kept = [k for k in cut.device if cut.launch(k) is not None and t0 <= cut.launch(k).ts < t1]
    assert sorted((k.ts, k.dur) for k in kept) == sorted((k.ts, k.dur) for k in launched)


def test_the_gpu_table_names_kernels_as_a_person_reads_them(cli, tmp_path):
    """The recorded trace's ATen kernels are C++ signatures of up to 717 characters; the table gives each one's
    function and what it computes (the JSON keeps the whole)."""
    trace = FIXTURES / "seed_example.trace.json.gz"
    if not trace.is_file():
        pytest.skip("no recorded seed_example trace yet")
    result = cli("profile", "analyze", str(trace), "--unprofiled-ms", "75.02", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "unrolled_elementwise_kernel<direct_copy_kernel_cuda>" in result.stdout
    assert "multi_tensor_apply_kernel<FusedAdamMathFunctor>" in result.stdout
    assert "TrivialOffsetCalculator" not in result.stdout and "anonymous namespace" not in result.stdout
    saved = json.loads((tmp_path / "r.json").read_text())
    assert "TrivialOffsetCalculator" in json.dumps(saved)
