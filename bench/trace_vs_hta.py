"""nanolm's trace analysis beside Meta's Holistic Trace Analysis (HTA) on the same GPU traces, in one run.

    make bench-hta                      # a venv of its own (.venv-bench-hta): HTA pins pandas and numpy
    python bench/trace_vs_hta.py [TRACE.json[.gz] ...]

Without arguments it runs on the profiler's three planted scenarios (tests/gpu_trace.py: the reference example,
a launch-bound and a compute-bound step, 9 steps each) and on any recorded fixture in tests/fixtures/gpu/. For
each trace it prints what each tool answers and how long it takes:

- HTA: the temporal breakdown (idle / compute / non-compute share of the trace) and the idle-time breakdown per
  stream (host wait / kernel wait / other), i.e. what a notebook user gets from `TraceAnalysis`;
- nanolm: the gate (GPU computing / waiting), the busy share, the largest idle bucket by host label, the verdict
  and its first fix with the replayed step (`nanolm profile analyze`).

Agreement check: HTA's busy share (compute + non-compute) over the trace against nanolm's busy share over its
steps but the first; the two are independent implementations of one quantity (HTA measures from the first to the
last kernel, nanolm over the ProfilerStep ranges). Ratio: HTA's time / nanolm's time (HTA from its file, nanolm
from the parsed trace object, each including its own parse)."""

from __future__ import annotations

import gzip
import io
import json
import logging
import sys
import tempfile
import time
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def planted() -> list[tuple[str, dict]]:
    from gpu_trace import compute_bound, launch_bound, reference_example

    out = [("reference example", reference_example(9).build()), ("launch-bound", launch_bound(9).build()),
           ("compute-bound", compute_bound(9).build())]
    for path in sorted((ROOT / "tests/fixtures/gpu").glob("*.trace.json.gz")):
        out.append((path.name, json.loads(gzip.decompress(path.read_bytes()))))
    return out


def run_hta(data: dict) -> tuple[dict, float]:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as folder:
        data = {**data, "distributedInfo": {"rank": 0, "world_size": 1}}
        Path(folder, "rank0.json").write_text(json.dumps(data))
        t = time.perf_counter()
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.CRITICAL)
            analysis = TraceAnalysis(trace_dir=folder)
            temporal = analysis.get_temporal_breakdown(visualize=False)
            idle = analysis.get_idle_time_breakdown(visualize=False)[0]
        seconds = time.perf_counter() - t
    row = temporal.iloc[0]
    total = row["idle_time(us)"] + row["compute_time(us)"] + row["non_compute_time(us)"]
    by_kind = idle.groupby("idle_category")["idle_time"].sum()
    shares = {k: v / by_kind.sum() for k, v in by_kind.items()} if by_kind.sum() > 0 else {}
    return {"busy": 1 - row["idle_time(us)"] / total, "idle": shares}, seconds


def run_nanolm(data: dict) -> tuple[object, float]:
    """The GPU analysis of every step but the first (nothing was queued before it, while the last step's work
    runs past the trace's end: with both edges the busy share would be low by one step's spill), timed from the
    parsed trace object as HTA's is from its file."""
    from nanolm.profiling.judge.gpu import GpuInputs, analyze_gpu
    from nanolm.profiling.trace.load import load_trace

    t = time.perf_counter()
    trace = load_trace(data)
    analysis = analyze_gpu(trace, GpuInputs(cores=16), 1, len(trace.steps) - 1)
    return analysis, time.perf_counter() - t


def main() -> None:
    traces = [(Path(p).name, json.loads(Path(p).read_bytes() if not p.endswith(".gz") else gzip.decompress(
        Path(p).read_bytes()))) for p in sys.argv[1:]] or planted()
    print(f"{'trace':<22} {'HTA busy':>8} {'nanolm busy':>11} {'HTA idle breakdown':<34} {'nanolm answer':<60} "
          f"{'HTA s':>6} {'nanolm s':>8} {'ratio':>6}")
    for name, data in traces:
        hta, hta_s = run_hta(data)
        analysis, nano_s = run_nanolm(data)
        g, v = analysis.report, analysis.verdict
        idle = [r for r in g.rows if r.kind == "idle"]
        top = max(idle, key=lambda r: r.ms).name[6:] if idle and g.busy_share < 0.99 else "(none)"
        first = v.findings[0] if v.findings else None
        fix = (f"{first.bottleneck.value} → {first.projected_step_ms:.1f} ms" if first and first.projected_step_ms
               else "-")
        answer = f"GPU {g.gate}; idle mostly {top}; {fix}"
        breakdown = ", ".join(f"{k} {share:.0%}" for k, share in hta["idle"].items()) or "(no idle)"
        print(f"{name:<22} {hta['busy']:>8.1%} {g.busy_share:>11.1%} {breakdown:<34} {answer:<60} "
              f"{hta_s:>6.2f} {nano_s:>8.2f} {hta_s / nano_s:>5.1f}×")


if __name__ == "__main__":
    main()
