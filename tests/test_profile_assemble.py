"""A profile report is built once, from its parts (nanolm.profiling.assemble)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from gpu_trace import TraceBuilder, window_summary_of
from nanolm.profiling import assemble as assemble_module
from nanolm.profiling.assemble import Measured, Rates, analyze_trace, answer
from nanolm.profiling.measure.clock import ClockPart
from nanolm.profiling.report import ProfileReport

LATER = {"expectation", "isolation", "trace_replaced", "profiler_log"}  # added with replace once the report exists


def test_assemble_sets_every_field_but_those_added_later_and_no_stage_sets_one():
    tree = ast.parse(Path(assemble_module.__file__).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "assemble")
    call = next(n for n in ast.walk(fn) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "ProfileReport")
    fields = {f.name for f in dataclasses.fields(ProfileReport)}
    assert {k.arg for k in call.keywords} == fields - LATER
    profiling = Path(assemble_module.__file__).parent
    for path in profiling.glob("*.py"):  # no stage assigns to a report's field after assembly
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
            for t in targets:
                for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "report":
                        assert el.attr not in fields - {"matmul_tflops", "notes"}, f"{path.name}: report.{el.attr} ="


def _host_only_trace(path: Path) -> Path:
    """Six steps of host work and no device lane: what a CPU run records."""
    b = TraceBuilder()
    for _ in range(6):
        with b.step():
            with b.range("forward", device_annotation=False):
                b.host(2_000, "aten::mm")
            with b.range("Optimizer.step#AdamW.step", device_annotation=False):
                b.host(500, "aten::_fused_adamw_")
    return b.write(path)


def test_a_cuda_profile_whose_trace_has_no_device_lane_gets_the_hosts_verdict_and_says_why(tmp_path):
    trace = _host_only_trace(tmp_path / "median-window.json")
    host = analyze_trace(trace)
    summary = window_summary_of(host)
    measured = Measured(host.target, host.device, host.scope, host.window, 1, summary, [], {}, None, None, None, host.step_parts)
    got = answer(measured, ClockPart(), Rates(None), "cuda", trace_file=trace)
    assert got.gpu is None and got.verdict is not None
    assert got.verdict.bottleneck == host.verdict.bottleneck  # the same host-side reading analyze gives
    assert any("no GPU answer" in n and "no device lane" in n for n in got.notes)
