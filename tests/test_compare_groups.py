"""nanolm compare on seed groups: the reference document's examples through the CLI, and the
refusals (too few runs, different data, a missing metric, configs that differ in more than the change)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nanolm.config import TrainConfig


def fake_group(runs, name, values, data="nanolm-corpus-v1:seed=0", **config):
    for i, v in enumerate(values):
        run = runs / f"20260101-00000{i}-{name}-seed{i}"
        run.mkdir(parents=True)
        cfg = {**TrainConfig().to_dict(), "group": name, "seed": 1337 + i, "name": f"{name}-seed{i}", **config}
        manifest = {"name": cfg["name"], "status": "finished", "config": cfg, "data": {"version": data},
                    "final": {"step": 100, "val_loss": float(v), "train_loss": float(v) - 0.1}}
        (run / "manifest.json").write_text(json.dumps(manifest))


def compare(tmp_path, *args):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "nanolm", "compare", *args, "--runs-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, env=env)


def test_reference_examples(tmp_path):
    runs = tmp_path / "runs"
    fake_group(runs, "baseline", [3.21, 3.25, 3.23])
    fake_group(runs, "single", [3.22], lr=1e-3)
    fake_group(runs, "new", [3.22, 3.24, 3.20], lr=1e-3)
    fake_group(runs, "better", [3.01, 3.03, 3.02], lr=1e-3)
    out = compare(tmp_path, "baseline", "new", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["comparison"]["verdict"] == "within noise: not a result"
    assert "verdict: within noise: not a result" in compare(tmp_path, "baseline", "new").stdout
    assert json.loads(compare(tmp_path, "baseline", "better", "--json").stdout)["comparison"]["verdict"] == \
        "better beyond noise"
    # One seed against three: refused as a comparison, as the reference example says it is too few.
    single = compare(tmp_path, "baseline", "single")
    assert single.returncode == 2 and "at least 2" in single.stderr and len(single.stderr.strip().splitlines()) == 1


def test_refusals_and_warnings(tmp_path):
    runs = tmp_path / "runs"
    fake_group(runs, "a", [3.21, 3.25, 3.23])
    fake_group(runs, "otherdata", [3.2, 3.3, 3.1], data="file:x.txt")
    fake_group(runs, "two_changes", [3.2, 3.3, 3.1], lr=1e-3, n_layer=8)
    out = compare(tmp_path, "a", "otherdata")
    assert out.returncode == 2 and "different data" in out.stderr and "Traceback" not in out.stderr
    out = compare(tmp_path, "a", "two_changes", "--metric", "accuracy")
    assert out.returncode == 2 and "'accuracy' is missing" in out.stderr
    out = compare(tmp_path, "a", "two_changes", "--change", "lr")
    assert out.returncode == 0 and "warning: the configs differ in more than the declared change: n_layer" in out.stderr
