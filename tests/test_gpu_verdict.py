"""The GPU verdict from a trace: replay what-ifs against hand-computed numbers, calibration to the unprofiled
step, the gate, the ranking rules, and `nanolm profile analyze` (its output, JSON and bad input)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpu_trace import GEMM, TraceBuilder, compute_bound, launch_bound, reference_example, window_summary_of
from nanolm.profiling.assemble import AnalyzeOptions, analyze_trace
from nanolm.profiling.judge.findings import ranked
from nanolm.profiling.judge.gpu import LEAD_FLOOR, GpuInputs, analyze_gpu
from nanolm.profiling.measure.device import COMPUTING, WAITING, analyze_device
from nanolm.profiling.measure.replay import WhatIf, build_replayer
from nanolm.profiling.report import Bottleneck, Finding, ProfileReport
from nanolm.profiling.trace.load import load_trace

BUSY_REF = (4_000 + 18 * 1_000 + 3_000 + 2) / 1000  # ms a step: the batch copy, GEMMs, AdamW, .item()'s copy


def _ref(steps: int = 5):
    trace = load_trace(reference_example(steps).build())
    d = analyze_device(trace, 1, 3)
    return trace, d, build_replayer(trace, d)


# ---- the replay -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [reference_example, launch_bound, compute_bound])
def test_the_baseline_replay_reproduces_the_recorded_steps(make):
    trace = load_trace(make().build())
    d = analyze_device(trace, len(trace.steps) - 3, 3)
    assert abs(build_replayer(trace, d).self_check()) < 0.005


def test_removing_the_sync_leaves_the_host_making_batches():
    """Hand-computed from the builder's layout: per step the host spends 1 (the op) + 5 (the copy's launch) + 5 (the
    sync call, no longer waiting) + 1 + 1 (range exits) + 50,000 (the batch) + 9 + 1 (the copy's op and range exit)
    + 6 × 9 + 1 + 12 × 9 + 1 + 9 + 1 (forward, backward, AdamW) + 1 (the step range) = 50,198 us; the GPU's 25 ms
    run meanwhile."""
    _, _, r = _ref()
    assert r.step_ms(WhatIf(drop_user_syncs=True)) == pytest.approx(50.198, abs=1e-6)


def test_prefetching_and_removing_the_sync_leave_the_gpu_busy_all_step():
    _, d, r = _ref()
    both = r.step_ms(WhatIf(drop_user_syncs=True, prefetch_workers=3))
    assert both == pytest.approx(BUSY_REF, rel=1e-4)
    assert 2.8 <= d.step_ms / both <= 3.1  # the reference example's ≈ 2.9×


def test_prefetching_alone_exposes_only_the_launches_after_the_sync():
    _, _, r = _ref()
    assert BUSY_REF <= r.step_ms(WhatIf(prefetch_workers=3)) <= BUSY_REF + 0.3


def test_one_producer_at_50_ms_caps_the_step():
    _, _, r = _ref()
    assert r.step_ms(WhatIf(drop_user_syncs=True, prefetch_workers=1)) == pytest.approx(50.0, abs=0.3)


def test_halving_kernels_saves_nothing_while_the_gpu_waits_on_launches():
    trace = load_trace(launch_bound(5).build())
    d = analyze_device(trace, 2, 3)
    r = build_replayer(trace, d)
    assert d.busy_share < 0.6
    halved = r.step_ms(WhatIf(class_scale={c: 0.5 for c in d.class_ms}))
    assert d.step_ms - halved < 0.01 * d.step_ms


def test_findings_never_project_below_the_device_or_save_more_than_the_sync_exposes():
    for make in (reference_example, launch_bound, compute_bound):
        trace = load_trace(make().build())
        a = analyze_gpu(trace, GpuInputs(cores=16), len(trace.steps) - 3, 3)
        for f in a.verdict.findings:
            if f.projected_step_ms is not None and f.bottleneck not in (Bottleneck.MEMORY, Bottleneck.COMPUTE):
                assert f.projected_step_ms >= a.device.busy_ms * (1 - 1e-6), (make.__name__, f.bottleneck)
            if f.bottleneck is Bottleneck.HOST_SYNC and f.projected_step_ms is not None:
                # at most the host's time blocked in it (not the design's "post-sync exposed": in a launch-bound loop
                # the host's head start is kept for the whole step, so the saving can exceed the idle after the sync)
                saving = a.report.step_ms - f.projected_step_ms
                assert saving <= a.device.launch.host_blocked_ms + 1e-6


# ---- calibration to the unprofiled step -------------------------------------------------------------------


def test_calibration_takes_the_profilers_cost_out_of_host_events():
    trace = load_trace(launch_bound(5).build())
    d = analyze_device(trace, 2, 3)
    r = build_replayer(trace, d)
    target = 0.8 * d.step_ms
    c = r.calibrate(target)
    assert c is not None and c > 0
    assert r.step_ms() == pytest.approx(target, rel=1e-3)


def test_no_calibration_when_the_unprofiled_step_is_not_shorter():
    _, d, r = _ref()
    assert r.calibrate(d.step_ms * 1.01) == 0.0 and r.c_us == 0.0


def test_time_without_host_events_is_never_shrunk():
    """The reference example's host time is a sleep: no per-event cost can explain a much shorter step."""
    trace = load_trace(reference_example(5).build())
    a = analyze_gpu(trace, GpuInputs(unprofiled_ms=60.0, cores=16), 1, 3)
    assert a.report.profiler_cost_us == 0.0
    assert any("per-event cost removed" in n for n in a.report.notes)


def test_the_table_is_for_the_unprofiled_step_and_adds_up():
    trace = load_trace(launch_bound(5).build())
    profiled = analyze_device(trace, 2, 3).step_ms
    a = analyze_gpu(trace, GpuInputs(unprofiled_ms=0.8 * profiled, cores=16), 2, 3)
    g = a.report
    assert g.basis == "unprofiled" and g.step_ms == pytest.approx(0.8 * profiled)
    assert sum(r.ms for r in g.rows) == pytest.approx(g.step_ms, rel=1e-6)
    assert g.busy_share == pytest.approx(a.device.busy_ms / (0.8 * profiled))


# ---- the gate and the verdict -------------------------------------------------------------------------------


def test_the_reference_example_is_input_bound_then_host_sync_bound():
    trace = load_trace(reference_example(5).build())
    a = analyze_gpu(trace, GpuInputs(cores=16), 1, 3)
    v = a.verdict
    assert a.report.gate == WAITING and v.bottleneck is Bottleneck.INPUT
    assert [f.bottleneck for f in v.findings[:2]] == [Bottleneck.INPUT, Bottleneck.HOST_SYNC]
    assert v.findings[0].projected_step_ms == pytest.approx(BUSY_REF, rel=2e-3)
    assert v.findings[1].projected_step_ms == pytest.approx(50.198, rel=1e-3)
    assert a.report.gate_sentence.startswith("GPU waiting: busy 25.0 ms")


def test_the_launch_bound_step_is_launch_bound_and_syncs_are_minor():
    trace = load_trace(launch_bound(5).build())
    a = analyze_gpu(trace, GpuInputs(cores=16), 2, 3)
    v, step = a.verdict, a.report.step_ms
    assert a.report.gate == WAITING and v.bottleneck is Bottleneck.LAUNCH_OVERHEAD
    top = v.findings[0]
    assert top.bottleneck is Bottleneck.LAUNCH_OVERHEAD and top.upper_bound and "torch.compile" in top.fix
    sync = next(f for f in v.findings if f.bottleneck is Bottleneck.HOST_SYNC)
    assert step - sync.projected_step_ms <= 0.05 * step
    memory = next(f for f in v.findings if f.bottleneck is Bottleneck.MEMORY)
    assert any("would not speed the step up" in e for e in memory.evidence)


def test_the_compute_bound_step_is_compute_bound_with_no_memory_fix_left():
    trace = load_trace(compute_bound().build())
    a = analyze_gpu(trace, GpuInputs(cores=16, settings={"autocast": "bfloat16", "compile": True}), 5, 3)
    v = a.verdict
    assert a.report.gate == COMPUTING and v.bottleneck is Bottleneck.COMPUTE
    assert a.report.queue_full_ms > 0.5 * a.report.step_ms  # the host blocked on a full queue
    kinds = [f.bottleneck for f in v.findings]
    assert kinds.index(Bottleneck.COMPUTE) < kinds.index(Bottleneck.MEMORY)
    memory = v.findings[kinds.index(Bottleneck.MEMORY)]
    assert memory.fix is None and "already on" in memory.no_fix_left
    assert not any(
        f.bottleneck in (Bottleneck.INPUT, Bottleneck.HOST_SYNC, Bottleneck.LAUNCH_OVERHEAD)
        and f.projected_step_ms is not None
        and a.report.step_ms - f.projected_step_ms > 0.03 * a.report.step_ms
        for f in v.findings
    )


def test_achieved_matmul_throughput_and_the_compute_projection():
    trace = load_trace(compute_bound().build())
    matmul_ms = 120 * 0.5  # 120 GEMMs of 500 us a step
    peak = 800e12
    flops = 0.75 * matmul_ms / 1000 * peak  # at the peak these GEMMs would take 45 ms
    a = analyze_gpu(trace, GpuInputs(cores=16, matmul_flops=flops, peak_flops=peak), 5, 3)
    assert a.report.matmul_tflops == pytest.approx(600, rel=1e-6)
    compute = next(f for f in a.verdict.findings if f.bottleneck is Bottleneck.COMPUTE)
    assert compute.projected_step_ms == pytest.approx(a.report.step_ms - 15.0, rel=1e-3)


def test_matmul_time_below_what_the_flops_need_is_a_classification_error():
    trace = load_trace(compute_bound().build())
    a = analyze_gpu(trace, GpuInputs(cores=16, matmul_flops=2 * 0.060 * 800e12, peak_flops=800e12), 5, 3)
    assert any("misclassified" in n for n in a.report.notes)
    assert next(f for f in a.verdict.findings if f.bottleneck is Bottleneck.COMPUTE).projected_step_ms is None


def test_near_the_limit_when_no_fix_saves_five_percent():
    trace = load_trace(compute_bound().build())
    a = analyze_gpu(
        trace,
        GpuInputs(
            cores=16, matmul_flops=0.99 * 0.060 * 800e12, peak_flops=800e12, settings={"autocast": "bfloat16", "compile": True}
        ),
        5,
        3,
    )
    assert "near this setup's limit" in a.verdict.headline


def _finding(b: Bottleneck, ms: float) -> Finding:
    return Finding(b, "x", ms, ms / 100, None, None)


def test_ranking_by_saving_cheaper_fix_first_among_equals_and_small_ones_never_lead():
    step = 100.0
    compute = (_finding(Bottleneck.COMPUTE, 40), 5, 20.0)  # larger batch: cost 5
    memory = (_finding(Bottleneck.MEMORY, 30), 4, 17.0)  # within 5% of the step: the cheaper goes first
    launch = (_finding(Bottleneck.LAUNCH_OVERHEAD, 50), 3, 2.0)  # saves 2%: cannot lead
    stuck = (_finding(Bottleneck.INPUT, 60), 9, None)  # no fix left: never wins a tie
    items = [launch, stuck, compute, memory]
    by_saving = dict(gain=lambda f: f[2], cost=lambda f: f[1], ms=lambda f: f[0].ms, lead_floor=LEAD_FLOOR)
    order = [f for f, _, _ in ranked(items, step, **by_saving)]
    assert [f.bottleneck for f in order] == [Bottleneck.MEMORY, Bottleneck.COMPUTE, Bottleneck.LAUNCH_OVERHEAD, Bottleneck.INPUT]
    # the same whatever the input order (the bubble pass runs until nothing moves)
    for start in range(len(items)):
        rotated = items[start:] + items[:start]
        assert [f for f, _, _ in ranked(rotated, step, **by_saving)] == order


def test_the_host_ranking_is_the_same_ranker_by_time():
    # The host's verdict ranks by the part's own time: 30 and 27 ms are within 5% of a 100 ms step, so the
    # cheaper fix (prefetch, rank 1 in FIX_ORDER) goes before torch.compile (rank 3); 10 ms stays last.
    from nanolm.profiling.judge.findings import FIX_ORDER, fix_cost

    step = 100.0
    items = [("compile", 30.0, ["torch.compile"]), ("prefetch", 27.0, ["prefetch"]), ("small", 10.0, ["remove syncs"])]
    order = ranked(items, step, gain=lambda c: c[1], cost=lambda c: fix_cost(c[2]), ms=lambda c: c[1])
    assert [c[0] for c in order] == ["prefetch", "compile", "small"]
    assert fix_cost(["cuda graphs"]) == fix_cost(["torch.compile"]) == FIX_ORDER.index("torch.compile")
    assert fix_cost(["not a fix"]) == len(FIX_ORDER)


# ---- nanolm profile analyze ----------------------------------------------------------------------------------


def test_analyze_prints_the_gpu_answer_first_and_writes_json(tmp_path, cli):
    trace = reference_example(7).write(tmp_path / "ref.trace.json.gz", gz=True)
    out = tmp_path / "report.json"
    result = cli("profile", "analyze", str(trace), "--cores", "16", "--json", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    first = next(line for line in result.stdout.splitlines() if line.strip())
    assert first.startswith("GPU waiting: busy 25.0 ms")
    report = ProfileReport.from_dict(json.loads(out.read_text()))
    assert report.gpu.gate == WAITING and report.verdict.bottleneck is Bottleneck.INPUT
    assert report.gpu.rows[0].name == "matmul/GEMM"


def test_analyze_reads_a_truth_file(tmp_path, cli):
    trace = launch_bound(5).write(tmp_path / "lb.json")
    truth = tmp_path / "lb.truth.json"
    truth.write_text(json.dumps({"unprofiled_ms": 12.0, "cores": 16, "settings": {"compile": False}}))
    result = cli("profile", "analyze", str(trace), "--truth", str(truth), cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert "of the 12.0 ms unprofiled step" in result.stdout


def test_a_cpu_trace_with_a_gpu_option_is_refused(tmp_path, cli):
    b = TraceBuilder()
    for _ in range(3):
        with b.step(), b.range("forward"):
            b.host(100, "aten::addmm")
    trace = b.write(tmp_path / "cpu.json")
    result = cli("profile", "analyze", str(trace), "--matmul-flops", "1e9", cwd=tmp_path)
    assert result.returncode == 2 and "no device lane" in result.stderr


@pytest.mark.parametrize("content, problem", [(b'{"traceEvents": [', "is not JSON"), (b"\x1f\x8b\x08\x00", "gzip")])
def test_analyze_bad_input_is_one_line_and_writes_nothing(tmp_path, content, problem):
    trace = tmp_path / "bad.json"
    trace.write_bytes(content)
    out = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "nanolm", "profile", "analyze", str(trace), "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2 and problem in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not out.exists()


def test_a_cpu_trace_gets_the_cpu_verdict():
    b = TraceBuilder()
    for _ in range(6):
        with b.step():
            with b.range("between"):
                b.host(8_000, "aten::stack")
            with b.range("forward"):
                b.host(2_000, "aten::addmm")
    report = analyze_trace(b.build(), AnalyzeOptions(cores=4))
    assert report.gpu is None and report.verdict.gate is None
    assert report.verdict.bottleneck is Bottleneck.INPUT


def test_ranks_carry_their_gpu_answer():
    from rich.console import Console

    from nanolm.profiling.judge.ranks import merge_ranks
    from nanolm.profiling.show.terminal import print_ranks_report

    fast = analyze_trace(launch_bound(7).build(), AnalyzeOptions(cores=16))
    slow = analyze_trace(compute_bound(9).build(), AnalyzeOptions(cores=16))
    merged = merge_ranks([fast, slow], "two ranks")
    assert merged.slowest_rank == 1
    assert [(r.gate, round(r.busy_share, 2)) for r in merged.rows] == [(WAITING, round(fast.gpu.busy_share, 2)), (COMPUTING, 1.0)]
    assert merged.verdict.bottleneck is Bottleneck.COMPUTE and merged.verdict.gate == COMPUTING
    console = Console(record=True, width=200)
    print_ranks_report(merged, console)
    text = console.export_text()
    assert "GPU computing, busy 100%" in text and "GPU computing: busy" in text


def test_a_live_cuda_profile_gets_its_answer_from_the_median_windows_trace(tmp_path):
    """assemble.answer on CUDA with the session's median trace: the GPU report and verdict replace the host's,
    for the unprofiled step the clock measured (the CUDA run itself is checked by bench/gpu_check.sh)."""
    from nanolm.profiling.assemble import Measured, Rates, answer, assemble
    from nanolm.profiling.measure.clock import ClockPart
    from nanolm.profiling.report import Stat

    trace = reference_example(7).write(tmp_path / "median-window.json")
    host = analyze_trace(trace)  # its numbers stand in for the host-side measurements a live session makes
    summary = window_summary_of(host)
    measured = Measured(host.target, host.device, host.scope, host.window, 1, summary, [], {}, None, None, None, None)
    clock = ClockPart(Stat(74.0, 73.0, 75.0))
    report = assemble(measured, clock, Rates(None), answer(measured, clock, Rates(None), "cuda", trace_file=trace))
    assert report.gpu.basis == "unprofiled" and report.gpu.step_ms == 74.0
    assert report.verdict.gate == WAITING and report.verdict.bottleneck is Bottleneck.INPUT
    alone = analyze_gpu(load_trace(trace), GpuInputs(unprofiled_ms=74.0))  # every step of the window's trace
    assert report.device_busy == pytest.approx(alone.report.busy_share, rel=1e-9)
    assert [f.bottleneck for f in report.verdict.findings] == [f.bottleneck for f in alone.verdict.findings]


def test_a_gpu_fed_just_in_time_is_called_balanced():
    """Busy all step, but the host never runs ahead (queue depth 0) and never blocks: both sides are saturated."""
    b = TraceBuilder(delay_us=0.0, launch_us=5.0)
    for _ in range(5):
        with b.step(), b.range("forward"):
            for _ in range(50):
                b.launch("nvjet_tst_64x64_TNN", 5.0, op=None)  # 5 us of GEMM behind each 5 us launch
    a = analyze_gpu(load_trace(b.build()), GpuInputs(cores=4), 2, 3)
    assert a.report.gate == COMPUTING and "balanced" in a.report.gate_sentence
    queued = analyze_gpu(load_trace(compute_bound().build()), GpuInputs(cores=4), 5, 3)
    assert "balanced" not in queued.report.gate_sentence  # a deep queue and a host blocked on it


@pytest.mark.parametrize(
    "op, script_owns_it", [("aten::nonzero", False), ("aten::_local_scalar_dense", True), ("aten::_to_copy", True)]
)
def test_only_the_scripts_own_syncs_make_a_host_sync_finding(op, script_owns_it):
    """A sync inside `nonzero` (a masked index) is that op's; `.item()` and `.cpu()` are the script's reads, which
    it can defer. No nanolm sync ranges here: a plain torch.profiler trace."""
    b = TraceBuilder()
    for _ in range(5):
        with b.step(), b.range("forward"):
            b.launches(10, GEMM, 300, op="aten::mm")
            b.sync(op=op, in_range=False)
            b.host(1_000)
    a = analyze_gpu(load_trace(b.build()), GpuInputs(cores=4), 1, 3)
    found = [f for f in a.verdict.findings if f.bottleneck is Bottleneck.HOST_SYNC]
    assert bool(found) is script_owns_it
    if found:
        assert found[0].ms == pytest.approx(a.device.launch.host_blocked_ms, rel=0.05)


def test_the_findings_sizes_add_up_within_the_step():
    """The reference example's two host-side findings: 50 ms making batches + 24.8 ms blocked in .item() of a 75 ms
    step (the GPU idle after the sync is the batch making's, counted once)."""
    trace = load_trace(reference_example(5).build())
    a = analyze_gpu(trace, GpuInputs(cores=16), 1, 3)
    sizes = {f.bottleneck: f.ms for f in a.verdict.findings}
    assert sizes[Bottleneck.INPUT] + sizes[Bottleneck.HOST_SYNC] <= a.report.step_ms * 1.001
    assert sizes[Bottleneck.HOST_SYNC] == pytest.approx(a.report.step_ms - 50.0 - 0.2, abs=0.1)
