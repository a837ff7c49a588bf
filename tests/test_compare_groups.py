"""nanolm compare on seed groups: the reference document's examples through the CLI, and the
refusals (too few runs, different data, a missing metric, configs that differ in more than the change)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nanolm.config import TrainConfig


def fake_group(runs, name, values, data="nanolm-corpus-v1:seed=0", sha256=None, first_seed=1337, **config):
    for i, v in enumerate(values):
        seed = first_seed + i
        run = runs / f"20260101-00000{i}-{name}-seed{seed}"
        run.mkdir(parents=True)
        cfg = {**TrainConfig().to_dict(), "group": name, "seed": seed, "name": f"{name}-seed{seed}", **config}
        manifest = {
            "name": cfg["name"],
            "status": "finished",
            "config": cfg,
            "data": {"version": data, "sha256": sha256},
            "final": {"step": 100, "val_loss": float(v), "train_loss": float(v) - 0.1},
        }
        (run / "manifest.json").write_text(json.dumps(manifest))


def compare_subprocess(tmp_path, *args):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "nanolm", "compare", *args, "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.fixture
def compare(cli):
    """`nanolm compare ARGS --runs-dir tmp/runs`, in this process."""
    return lambda tmp_path, *args: cli("compare", *args, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)


def test_reference_examples(tmp_path, compare):
    runs = tmp_path / "runs"
    fake_group(runs, "baseline", [3.21, 3.25, 3.23])
    fake_group(runs, "single", [3.22], lr=1e-3)
    fake_group(runs, "new", [3.22, 3.24, 3.20], lr=1e-3)
    fake_group(runs, "better", [3.01, 3.03, 3.02], lr=1e-3)
    out = compare_subprocess(tmp_path, "baseline", "new", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["comparison"]["verdict"] == "within noise: not a result"
    assert "verdict: within noise: not a result" in compare(tmp_path, "baseline", "new").stdout
    assert json.loads(compare(tmp_path, "baseline", "better", "--json").stdout)["comparison"]["verdict"] == "better beyond noise"
    # The reference's single new run against three baseline seeds: a verdict, and it is "too few seeds".
    single = compare(tmp_path, "baseline", "single", "--json")
    assert single.returncode == 0, single.stderr
    assert json.loads(single.stdout)["comparison"]["verdict"] == "too few seeds (at least 3 a side)"
    # A baseline of one run has no measured noise: refused, in one line.
    reversed_ = compare_subprocess(tmp_path, "single", "baseline")
    assert reversed_.returncode == 2 and "seed noise is unknown" in reversed_.stderr
    assert len(reversed_.stderr.strip().splitlines()) == 1 and "Traceback" not in reversed_.stderr
    itself = compare(tmp_path, "baseline", "baseline")
    assert itself.returncode == 0 and "nanolm: warning: group 'baseline' is compared with itself" in itself.stderr


def test_refusals_and_warnings(tmp_path, compare):
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


def one_error_line(out, *needles):
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_same_file_name_with_other_contents_is_other_data(tmp_path, compare):
    runs = tmp_path / "runs"
    fake_group(runs, "a", [3.21, 3.25, 3.23], data="file:my.txt:val=0.1", sha256="ab" * 32)
    fake_group(runs, "b", [3.2, 3.3, 3.1], data="file:my.txt:val=0.1", sha256="cd" * 32)
    fake_group(runs, "c", [3.2, 3.3, 3.1], data="file:my.txt:val=0.1", sha256="ab" * 32)
    one_error_line(compare(tmp_path, "a", "b"), "different data", "sha256 abab", "sha256 cdcd")
    assert compare(tmp_path, "a", "c").returncode == 0


def test_a_seed_counted_twice_is_refused(tmp_path, compare):
    runs = tmp_path / "runs"
    fake_group(runs, "a", [3.21, 3.25, 3.23])
    fake_group(runs / "again", "a", [3.22], first_seed=1338)  # same group, same seed, another folder
    for path in (runs / "again").iterdir():
        path.rename(runs / f"20260102-{path.name}")
    (runs / "again").rmdir()
    fake_group(runs, "b", [3.2, 3.3, 3.1])
    one_error_line(compare(tmp_path, "a", "b"), "seed 1338 twice")


def test_unreadable_runs_are_skipped_with_a_warning_and_unknown_change_keys_refused(tmp_path, compare):
    runs = tmp_path / "runs"
    fake_group(runs, "a", [3.21, 3.25, 3.23])
    fake_group(runs, "b", [3.2, 3.3, 3.1], lr=1e-3)
    (runs / "broken").mkdir()
    (runs / "broken" / "manifest.json").write_text("{not json")
    (runs / "odd").mkdir()  # valid JSON of the wrong shape, claiming to be one of group a's runs
    (runs / "odd" / "manifest.json").write_text(
        json.dumps({"status": "finished", "config": {"group": "a", "seed": 9}, "data": "corpus", "final": []})
    )
    out = compare(tmp_path, "a", "b", "--change", "lr")
    assert out.returncode == 0 and "warning: skipped" in out.stderr and "corrupt manifest" in out.stderr
    assert "odd/manifest.json: corrupt manifest (data is str)" in out.stderr
    assert json.loads(compare(tmp_path, "a", "b", "--json").stdout)["comparison"]["n_a"] == 3
    one_error_line(compare(tmp_path, "a", "b", "--change", "learning_rate"), "--change", "unknown key 'learning_rate'")


def test_seeds_refuses_to_add_a_seed_a_group_already_has(tmp_path):
    from nanolm.errors import UserError
    from nanolm.repro.seeds import run_seeds

    fake_group(tmp_path / "runs", "a", [3.21, 3.25])  # seeds 1337, 1338
    with pytest.raises(UserError, match=r"already has runs for seed\(s\) 1337, 1338.*--set seed=1339"):
        run_seeds([f"runs_dir={tmp_path / 'runs'}"], n=3, name="a")


def test_a_group_mixing_configs_or_losing_diverged_runs_is_flagged(tmp_path, compare):
    runs = tmp_path / "runs"
    fake_group(runs, "a", [3.21, 3.25, 3.23])
    fake_group(runs, "a", [3.30], first_seed=2000, lr=0.05)  # a fourth "seed" at another lr
    fake_group(runs, "b", [3.1, 3.12, 3.11], lr=1e-3)
    diverged = runs / "20260101-000009-b-seed1400"
    diverged.mkdir()
    (diverged / "manifest.json").write_text(
        json.dumps(
            {
                "status": "diverged",
                "config": {**TrainConfig().to_dict(), "group": "b", "seed": 1400, "lr": 1e-3},
                "data": {"version": "nanolm-corpus-v1:seed=0", "sha256": None},
                "final": {"step": 7, "diverged_at": 7},
            }
        )
    )
    out = compare(tmp_path, "a", "b", "--json")
    assert out.returncode == 0, out.stderr
    assert "group 'a' mixes configs" in out.stderr and "lr: 0.003 (3 runs), 0.05 (1 run)" in out.stderr
    assert "group 'b' leaves out 1 run(s) that did not finish" in out.stderr and "diverged at step 7" in out.stderr
    assert json.loads(out.stdout)["comparison"]["n_b"] == 3
