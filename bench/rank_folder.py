"""`nanolm profile analyze DIR` on a folder of rank traces, one worker process per rank at a time (--jobs 1, then the
cores), beside Holistic Trace Analysis (HTA) 0.5 on the same folder, in one run.

    python bench/rank_folder.py                                  # HTA where .venv-bench-hta exists
    python bench/rank_folder.py --ranks 4 --hta-python .venv-bench-hta/bin/python

The folder holds `--ranks` copies of a real public trace (HTA's test data, tests/fixtures/hta/df_index_resolver.json.gz:
5 ProfilerSteps of a data-parallel job on a V100, 42 MB written without indentation), each with its own
distributedInfo rank, as a job's ranks would write them. Each tool runs as a whole process, timed from its start to
its exit:

- nanolm: `python -m nanolm profile analyze DIR --group 5 --jobs J --json OUT`;
- HTA 0.5: `TraceAnalysis(trace_dir=DIR)` (it parses the ranks in parallel itself), then `get_temporal_breakdown`
  and `get_gpu_kernel_breakdown` over every rank.

Printed: seconds of each, HTA's time over nanolm's, and nanolm's --jobs 1 time over its parallel time. Checked:
every rank's busy share in the merged report equals the single trace's."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from trace_scale import HTA_SCRIPT, ROOT, SOURCE, repeated, timed_process  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    hta_default = ROOT / ".venv-bench-hta/bin/python"
    ap.add_argument("--hta-python", type=Path, default=hta_default if hta_default.exists() else None)
    a = ap.parse_args()
    data = json.loads(gzip.decompress(SOURCE.read_bytes()))
    os.environ["PYTHONPATH"] = str(ROOT / "src")
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "ranks")
        folder.mkdir()
        for rank in range(a.ranks):
            data["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": a.ranks}
            repeated(data, 1, folder / f"rank{rank}.json")
        size = sum(p.stat().st_size for p in folder.iterdir())
        times = {}
        for jobs in sorted({1, cores}):
            out = Path(tmp, f"jobs{jobs}.json")
            argv = [sys.executable, "-m", "nanolm", "profile", "analyze", str(folder), "--group", "5", "--jobs", str(jobs)]
            times[jobs], _ = timed_process([*argv, "--json", str(out)])
            shares = [r["gpu"]["busy_share"] for r in json.loads(out.read_text())["reports"]]
            assert len(set(shares)) == 1, shares  # every rank is the same trace: the same figures
        hta = timed_process([str(a.hta_python), "-c", HTA_SCRIPT, str(folder)])[0] if a.hta_python else None
        line = f"{a.ranks} ranks, {size / 1e6:.0f} MB: nanolm --jobs 1 {times[1]:.1f} s"
        if cores > 1:
            line += f", --jobs {cores} {times[cores]:.1f} s ({times[1] / times[cores]:.2f}× from the workers)"
        if hta is not None:
            line += f"; HTA 0.5 {hta:.1f} s: nanolm {hta / times[cores]:.1f}× HTA's speed"
        print(line)


if __name__ == "__main__":
    main()
