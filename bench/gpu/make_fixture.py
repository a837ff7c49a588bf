"""Turn a recorded GPU trace into a test fixture: the median group of steps, trimmed and gzipped, and a truth file.

    python bench/gpu/make_fixture.py TRACE.json[.gz] OUT_DIR NAME --unprofiled-ms U [--fixed NAME=MS ...]
        [--settings JSON] [--cores N] [--matmul-flops F] [--peak-tflops P] [--group 3] [--log FILE --log-regex RE]

Writes OUT_DIR/NAME.trace.json.gz (the median group of `group` consecutive ProfilerStep ranges: the host events
that overlap it, the device activities that overlap it or run within a step after it, the flows between them;
python_function events dropped; gzip -9) and OUT_DIR/NAME.truth.json (what the trace cannot hold: the unprofiled
step, each fixed variant's measured step, settings, cores, FLOPs, peak). With --log and --log-regex, the
unprofiled step is the mean of the regex's first group over the log's lines (skipping the first 5: warm-up).
Only op and kernel names and timings are kept; no data."""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from pathlib import Path

from nanolm.profiling.trace.load import load_trace, read_trace_json

DROP_CATS = {"python_function"}


def median_group(trace, group: int) -> tuple[int, int]:
    groups = trace.step_groups(group)
    spans = [trace.steps[i + size - 1].end - trace.steps[i].ts for i, size in groups]
    return groups[sorted(range(len(groups)), key=lambda g: spans[g])[len(groups) // 2]]


DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def trim(data: dict, group: int = 3) -> dict:
    """The trace object cut to its median group (module docstring). A device activity is kept when it overlaps the
    group or a step either side of it, or when the group launched it: a GPU-bound loop runs up to a queue of
    launches ahead (an H200's compiled gpt2-124m: 98 ms, 1.4 steps), so the last step's kernels run long after
    it, and a replay of the group's launches without them would be short of work."""
    trace = load_trace(data)
    first, count = median_group(trace, group)
    t0, t1 = trace.steps[first].ts, trace.steps[first + count - 1].end
    step = (t1 - t0) / count
    launched = {corr for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
                and e.get("cat") not in DEVICE_CATS and t0 <= float(e["ts"]) < t1
                and (corr := (e.get("args") or {}).get("correlation")) is not None}
    kept, ids = [], set()
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("cat") in DROP_CATS:
            continue
        if e.get("ph") == "X":
            ts, end = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
            device = e.get("cat") in DEVICE_CATS
            lo, hi = (t0 - step, t1 + step) if device else (t0, t1)
            if str(e.get("name", "")).startswith("ProfilerStep#") and not (t0 <= ts and end <= t1):
                continue  # the neighbouring steps: the fixture is its group alone
            if (end > lo and ts < hi) or (device and (e.get("args") or {}).get("correlation") in launched):
                kept.append(e)
                if (e.get("args") or {}).get("correlation") is not None:
                    ids.add(e["args"]["correlation"])
        elif e.get("ph") == "M":
            kept.append(e)
    kept += [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") in ("s", "f")
             and e.get("cat") == "ac2g" and e.get("id") in ids]
    return {**{k: v for k, v in data.items() if k != "traceEvents"}, "traceEvents": kept}


def unprofiled_from_log(log: Path, regex: str, skip: int = 5) -> float:
    """The step (ms) of a script's log of per-step times: their mean after `skip` warm-up steps. A loop that does not
    sync every step runs its host ahead of the GPU and then waits on it, so one step's host time is not its time
    (an H200 run logged steps of 1.7 and 48 ms in turn for a 25 ms step), but the sum over many steps is."""
    values = [float(m.group(1)) for line in log.read_text(errors="replace").splitlines()
              if (m := re.search(regex, line))]
    if len(values) <= skip:
        sys.exit(f"make_fixture: error: {log} has {len(values)} lines matching {regex!r}; need more than {skip}")
    return statistics.mean(values[skip:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("out_dir")
    p.add_argument("name")
    p.add_argument("--unprofiled-ms", type=float)
    p.add_argument("--log", type=Path, help="the script's own log, for the unprofiled step")
    p.add_argument("--log-regex", default=r"time_ms ([0-9.]+)")
    p.add_argument("--fixed", action="append", default=[], metavar="NAME=MS_OR_LOG",
                   help="a fixed variant's unprofiled step: ms, or a log file read with --log-regex")
    p.add_argument("--settings", default="{}")
    p.add_argument("--cores", type=int)
    p.add_argument("--matmul-flops", type=float)
    p.add_argument("--peak-tflops", type=float)
    p.add_argument("--group", type=int, default=3)
    a = p.parse_args()
    data = read_trace_json(a.trace)
    trimmed = trim(data, a.group)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{a.name}.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trimmed, separators=(",", ":")).encode(), compresslevel=9))
    unprofiled = a.unprofiled_ms if a.unprofiled_ms is not None else (
        unprofiled_from_log(a.log, a.log_regex) if a.log else None)
    fixed = {}
    for item in a.fixed:
        name, _, value = item.partition("=")
        fixed[name] = float(value) if re.fullmatch(r"[0-9.]+", value) else unprofiled_from_log(Path(value), a.log_regex)
    truth = {"unprofiled_ms": unprofiled, "fixed_ms": fixed, "settings": json.loads(a.settings), "cores": a.cores,
             "matmul_flops": a.matmul_flops, "peak_tflops": a.peak_tflops, "group": a.group,
             "source": Path(a.trace).name}
    (out / f"{a.name}.truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    print(f"make_fixture: {path} ({path.stat().st_size / 1e6:.2f} MB), truth {out / (a.name + '.truth.json')}")


if __name__ == "__main__":
    main()
