"""`nanolm profile analyze` on traces of the size real jobs write, beside Holistic Trace Analysis (HTA), in one run.

    python bench/trace_scale.py                      # nanolm alone (HTA where .venv-bench-hta exists)
    make bench-hta                                   # builds HTA's venv, then runs this beside trace_vs_hta.py
    python bench/trace_scale.py --copies 1 4 12 --hta-python .venv-bench-hta/bin/python

The input is a real public trace: 5 ProfilerSteps of a data-parallel training job on a V100 (HTA's test data,
tests/fixtures/hta/df_index_resolver.json.gz: 216k events, 53 MB unpacked). It is repeated end to end, as the
profiler would record more steps of the same job: copy i is shifted in time by i spans of the trace, its
correlation, External and flow ids by i times the largest id, its ProfilerStep numbers by i × 5. The copies are
written as plain JSON without Kineto's indentation (1×: 42 MB, 4×: 169 MB, 12×: 509 MB) to a temporary folder.

For each size, each tool runs as a whole process, as its user runs it, and is timed from its start to its exit,
with its peak resident memory read from the kernel (wait4's ru_maxrss):

- nanolm: `python -m nanolm profile analyze FILE --group 5 --json OUT` (every group of 5 steps is one copy);
- HTA 0.5: `TraceAnalysis(trace_dir=...)`, then `get_temporal_breakdown` and `get_gpu_kernel_breakdown`.

Printed per size: seconds and peak GB of each, HTA's time over nanolm's (the speed ratio), nanolm's peak over
the file's size, and nanolm's time over the 1× time against the copies (linear growth is 1). Checked: nanolm's
figures (the step, the busy share, every row of the GPU table) at every size are those of the unrepeated trace."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests/fixtures/hta/df_index_resolver.json.gz"
STEPS = 5  # ProfilerSteps in the source trace
ID_ARGS = ("correlation", "External id")  # the ids that link events: unique per copy
HTA_SCRIPT = """
import logging, sys, warnings
warnings.simplefilter("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
analysis.get_temporal_breakdown(visualize=False)
analysis.get_gpu_kernel_breakdown(visualize=False)
"""


def repeated(data: dict, copies: int, out: Path, steps: int = STEPS) -> Path:
    """The trace `data` repeated `copies` times end to end (module docstring), written to `out` as plain JSON."""
    events = data["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000  # a millisecond between copies
    ids = [e.get("id") for e in events] + [(e.get("args") or {}).get(k) for e in events for k in ID_ARGS]
    stride = 1 + max(v for v in ids if isinstance(v, int))
    encode = msgspec.json.Encoder().encode
    with open(out, "wb") as f:
        head = {k: v for k, v in data.items() if k != "traceEvents"}  # spaced as Kineto writes it: HTA's rank
        f.write(json.dumps(head).encode()[:-1] + b', "traceEvents": [')  # reader wants '"rank": N'
        first = True
        for i in range(copies):
            for e in events:
                if i and e.get("ph") == "M":  # process and thread names: once
                    continue
                f.write((b"" if first else b",") + encode(_shifted(e, i, i * span, i * stride, i * steps)))
                first = False
        f.write(b"]}")
    return out


def _shifted(e: dict, i: int, dt: float, did: int, dstep: int) -> dict:
    if not i:
        return e
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + dt
    if isinstance(e.get("id"), int):
        e["id"] += did
    args = e.get("args")
    if isinstance(args, dict) and any(k in args for k in ID_ARGS):
        e["args"] = {**args, **{k: args[k] + did for k in ID_ARGS if isinstance(args.get(k), int)}}
    name = e.get("name", "")
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + dstep}"
    return e


def timed_process(argv: list[str]) -> tuple[float, float]:
    """(seconds from start to exit, peak resident GB) of a whole process; raises if it fails."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{argv[:4]} failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss * 1024 / 1e9


def figures(report: Path) -> dict:
    """What must not change with the trace's length: the step, the busy share, the GPU table's rows."""
    g = json.loads(report.read_text())["gpu"]
    return {
        "step_ms": round(g["step_ms"], 3),
        "busy_share": round(g["busy_share"], 4),
        "rows": [(r["name"], round(r["ms"], 3)) for r in g["rows"]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, nargs="+", default=[1, 4, 12])
    hta_default = ROOT / ".venv-bench-hta/bin/python"
    ap.add_argument("--hta-python", type=Path, default=hta_default if hta_default.exists() else None)
    a = ap.parse_args()
    data = json.loads(gzip.decompress(SOURCE.read_bytes()))
    os.environ["PYTHONPATH"] = str(ROOT / "src")  # this checkout's nanolm, in HTA's venv too
    base = None
    print(f"{'copies':>6} {'file MB':>8} {'nanolm s':>9} {'nanolm GB':>9} {'GB/file':>7} {'vs linear':>9} "
          f"{'HTA s':>7} {'HTA GB':>7} {'speed vs HTA':>12}  figures")
    with tempfile.TemporaryDirectory() as folder:
        for copies in a.copies:
            where = Path(folder, f"x{copies}")
            where.mkdir()
            trace = repeated(data, copies, where / "rank1.json")
            size = trace.stat().st_size
            out = Path(folder, f"x{copies}.report.json")
            seconds, gb = timed_process(
                [sys.executable, "-m", "nanolm", "profile", "analyze", str(trace), "--group", str(STEPS), "--json", str(out)]
            )
            got = figures(out)
            base = base or (seconds, copies, got)
            same = "same as 1×" if got == base[2] else f"DIFFER: {got} vs {base[2]}"
            linear = (seconds / base[0]) / (copies / base[1])
            hta = timed_process([str(a.hta_python), "-c", HTA_SCRIPT, str(where)]) if a.hta_python else None
            hta_cols = f"{hta[0]:>7.1f} {hta[1]:>7.2f} {hta[0] / seconds:>11.1f}×" if hta else f"{'-':>7} {'-':>7} {'-':>12}"
            print(f"{copies:>6} {size / 1e6:>8.0f} {seconds:>9.1f} {gb:>9.2f} {gb / (size / 1e9):>7.1f} {linear:>9.2f} "
                  f"{hta_cols}  {same}", flush=True)
            trace.unlink()


if __name__ == "__main__":
    main()
