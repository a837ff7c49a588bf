"""Reproducibility: seeding, the repro check (identical runs, and a planted nondeterminism found at
its step), and seed groups."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import TINY
from nanolm.data import RandomWindows
from nanolm.errors import UserError
from nanolm.plots import save_figure
from nanolm.repro import seed_everything
from nanolm.repro.check import repro_check
from nanolm.repro.seeds import group_figure, load_group, run_seeds


def test_seed_everything_seeds_every_generator_and_reports_it():
    try:
        settings = seed_everything(7, deterministic=True)
        a = (random.random(), np.random.rand(), torch.rand(1).item())
        seed_everything(7, deterministic=True)
        assert (random.random(), np.random.rand(), torch.rand(1).item()) == a
        assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert settings["seed"] == 7 and settings["deterministic"] is True
        assert settings["CUBLAS_WORKSPACE_CONFIG"] == os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")
        seed_everything(7, deterministic="warn")
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        seed_everything(0, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_repro_check_reports_identical_runs(tmp_path):
    result = repro_check([*TINY, "deterministic=true", f"runs_dir={tmp_path}"], steps=6)
    assert result.identical and result.first_divergent_step is None and result.tensors_differing == 0


def test_repro_check_finds_a_planted_unseeded_numpy_call_and_names_the_step(monkeypatch):
    real_offset = RandomWindows.offset
    batch = 8  # TINY's batch_size

    def offset_with_unseeded_jitter(self, i):
        o = real_offset(self, i)
        if i >= 5 * batch:  # from step 6 on, the data path draws from an unseeded generator
            o = (o + int(np.random.default_rng().integers(1, 1000))) % self.n_starts
        return o

    monkeypatch.setattr(RandomWindows, "offset", offset_with_unseeded_jitter)
    result = repro_check(list(TINY), steps=8)
    assert not result.identical
    assert result.first_divergent_step == 6
    assert result.loss_a != result.loss_b and result.tensor is not None and result.max_abs_diff > 0
    assert any("unseeded generator" in c for c in result.causes)
    assert not any("autocast" in c for c in result.causes)  # CPU: autocast "auto" is full precision


def test_seeds_run_in_parallel_processes_and_form_a_group(tmp_path):
    done = []
    overrides = [*TINY, "steps=20", "eval_every=20", "ckpt_every=20", f"runs_dir={tmp_path}"]
    result = run_seeds(overrides, n=3, name="base", jobs=2, executor="local", on_done=lambda s, d: done.append(s))
    assert sorted(done) == [1337, 1338, 1339]
    group = result.group
    assert group.seeds == [1337, 1338, 1339] and len(group.runs) == 3
    values = group.metrics["val_loss"].values
    assert values == [json.loads((run / "manifest.json").read_text())["final"]["val_loss"] for run in group.runs]
    assert len(set(values)) == 3  # different seeds, different results
    assert result.plot_path == tmp_path / "group-base.png" and not result.plot_path.exists()  # the CLI writes it
    plot = save_figure(group_figure(group), result.plot_path)
    assert plot.is_file() and plot.stat().st_size > 1000
    assert load_group("base", tmp_path).runs == group.runs


def test_seeds_command_prints_the_group_statistics(tmp_path):
    """The debug executor (in process) through the real command; the table's numbers recomputed
    with numpy from the runs' own manifests."""
    sets = [a for kv in [*TINY, "steps=10", "eval_every=10", "ckpt_every=10"] for a in ("--set", kv)]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nanolm",
            "seeds",
            "--n",
            "3",
            "--name",
            "dbg",
            "--executor",
            "debug",
            "--runs-dir",
            str(tmp_path),
            *sets,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stderr
    runs = sorted(tmp_path.glob("*-dbg-seed*"))
    finals = [json.loads((r / "manifest.json").read_text())["final"]["val_loss"] for r in runs]
    assert len(finals) == 3 and "group dbg: 3 seeds (1337, 1338, 1339)" in out.stdout
    row = next(line for line in out.stdout.splitlines() if "final val loss" in line)
    expected = [np.mean(finals), np.std(finals, ddof=1), np.min(finals), np.max(finals), np.ptp(finals)]
    assert re.findall(r"\d+\.\d{4}", row) == [f"{v:.4f}" for v in expected]
    assert (tmp_path / "group-dbg.png").is_file()


@pytest.mark.slow  # over 10 s: make test-slow (CI runs both)
def test_slurm_executor_through_submitit(tmp_path, monkeypatch):
    """`--executor slurm` end to end through submitit, with its cluster swapped for submitit's own
    local one (real job pickling, subprocesses and result files; no SLURM needed)."""
    submitit = pytest.importorskip("submitit", reason="the slurm extra is not installed")
    real = submitit.AutoExecutor
    clusters = []

    def local_cluster(folder, cluster=None, **kwargs):
        clusters.append(cluster)
        return real(folder=folder, cluster="local", **kwargs)

    monkeypatch.setattr(submitit, "AutoExecutor", local_cluster)
    overrides = [*TINY, "steps=10", "eval_every=10", "ckpt_every=10", f"runs_dir={tmp_path}"]
    result = run_seeds(overrides, n=2, name="onslurm", executor="slurm")
    assert clusters == ["slurm"] and result.group.seeds == [1337, 1338]
    assert all(json.loads((r / "manifest.json").read_text())["config"]["group"] == "onslurm" for r in result.group.runs)
    assert list((tmp_path / "slurm").glob("*_result.pkl"))  # submitit's own job records, beside the runs
    # A divergence inside a job comes back as a divergence (submitit re-raises nothing of the job's own).
    with pytest.raises(UserError, match="all 2 seeds diverged"):
        run_seeds([*overrides, "lr=1e9", "grad_clip=0", "warmup_steps=0"], n=2, name="blowup", executor="slurm")


def test_seeds_start_at_the_set_seed_and_each_run_gets_its_own(tmp_path):
    """`--set seed=S` is where the group's seeds start; it must not pin every run to S."""
    overrides = [*TINY, "steps=4", "eval_every=4", "ckpt_every=4", f"runs_dir={tmp_path}", "seed=5"]
    result = run_seeds(overrides, n=2, name="from5", executor="debug")
    recorded = [json.loads((r / "manifest.json").read_text())["config"]["seed"] for r in result.group.runs]
    assert result.group.seeds == recorded == [5, 6]
    assert len(set(result.group.metrics["val_loss"].values)) == 2


@pytest.mark.parametrize("name", ["a/b", "", "../up", "-x"])
def test_a_group_name_that_cannot_name_files_is_refused_before_training(tmp_path, name):
    with pytest.raises(UserError, match="a group name is letters, digits"):
        run_seeds([*TINY, f"runs_dir={tmp_path}"], n=2, name=name)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # over 10 s: make test-slow (CI runs both)
def test_parallel_seeds_share_one_fresh_mlflow_store(tmp_path):
    """Two processes creating the SQLite store at once fail its schema migration; the store is made first."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    overrides = [*TINY, "steps=2", "eval_every=2", "ckpt_every=2", f"runs_dir={tmp_path / 'fresh'}", "tracker=mlflow"]
    result = run_seeds(overrides, n=2, name="ml", jobs=2)
    assert result.group.seeds == [1337, 1338]
    ids = {json.loads((r / "manifest.json").read_text())["trackers"]["mlflow_run_id"] for r in result.group.runs}
    assert len(ids) == 2


def test_a_diverging_seed_is_left_out_and_named(tmp_path, monkeypatch):
    """A seed that diverges is a result about the config: the sweep goes on and the group says so."""
    import nanolm.repro.executors as executors_module

    real = executors_module.train_one_seed

    def second_diverges(overrides, seed, name):
        return real([*overrides, "lr=1e9", "grad_clip=0"] if seed == 1338 else overrides, seed, name)

    monkeypatch.setattr(executors_module, "train_one_seed", second_diverges)
    done = []
    overrides = [*TINY, "steps=6", "eval_every=6", "ckpt_every=6", "warmup_steps=0", f"runs_dir={tmp_path}"]
    result = run_seeds(overrides, n=3, name="dv", executor="debug", on_done=lambda s, d: done.append((s, d is None)))
    assert done == [(1337, False), (1338, True), (1339, False)]
    assert result.group.seeds == [1337, 1339]
    assert len(result.group.excluded) == 1 and "diverged at step" in result.group.excluded[0]


@pytest.mark.skipif(bool(shutil.which("srun") or shutil.which("sbatch")), reason="this machine is a SLURM node")
def test_slurm_without_a_cluster_is_one_line(tmp_path):
    pytest.importorskip("submitit", reason="the slurm extra is not installed")
    with pytest.raises(UserError, match="--executor slurm: .*use --executor local"):
        run_seeds([*TINY, f"runs_dir={tmp_path}"], n=2, name="noslurm", executor="slurm")
