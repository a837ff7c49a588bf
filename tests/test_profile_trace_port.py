"""The CPU analysis runs on a recorded trace with the numbers a live profile gives: the window analysis fed
torch's FunctionEvents and fed the same window's exported Chrome trace (nanolm.profiling.measure.host.host_events)
agree, and reports written before the GPU fields existed still load."""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from nanolm.profiling.measure.host import analyze_window, host_events
from nanolm.profiling.report import ProfileReport
from nanolm.profiling.trace.load import load_trace


def _record(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    captured = {}

    def ready(prof):
        captured["events"] = list(prof.events())
        prof.export_chrome_trace(str(tmp_path / "window.json"))

    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1), on_trace_ready=ready
    ) as prof:
        for _ in range(5):
            with record_function("between"):
                x = torch.randn(32, 64)
            with record_function("forward"):
                loss = model(x).pow(2).mean()
            with record_function("backward"):
                loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return captured["events"], load_trace(tmp_path / "window.json")


def test_the_trace_view_gives_the_live_window_numbers(tmp_path):
    events, trace = _record(tmp_path)
    live = analyze_window(events)
    recorded = analyze_window(host_events(trace))
    assert recorded.steps == live.steps == 3
    assert recorded.step_ms == pytest.approx(live.step_ms, rel=0.01)
    for phase, ms in live.phase_ms.items():
        assert recorded.phase_ms.get(phase, 0.0) == pytest.approx(ms, rel=0.01, abs=0.005), phase
    for category, ms in live.category_ms.items():
        if ms > 0.01 * live.step_ms:
            assert recorded.category_ms.get(category, 0.0) == pytest.approx(ms, rel=0.01, abs=0.005), category
    assert sum(recorded.category_ms.values()) == pytest.approx(sum(live.category_ms.values()), rel=0.01)


def test_a_report_from_before_the_gpu_fields_still_loads(tmp_path, cli):
    from gpu_trace import TraceBuilder
    from nanolm.profiling.assemble import analyze_trace

    b = TraceBuilder()
    for _ in range(6):
        with b.step(), b.range("forward"):
            b.host(1_000, "aten::addmm")
    old = analyze_trace(b.build()).to_dict()
    for key in ("gpu", "unprofiled_step_ms", "profiled_over_unprofiled", "boundary_ms"):
        old.pop(key)
    old["verdict"].pop("gate")
    for f in old["verdict"]["findings"]:
        f.pop("upper_bound"), f.pop("no_fix_left")
    report = ProfileReport.from_dict(old)
    assert report.gpu is None and report.verdict.gate is None
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(old))
    after.write_text(json.dumps(old))
    result = cli("profile", "compare", str(before), str(after), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
