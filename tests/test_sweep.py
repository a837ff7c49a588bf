"""nanolm sweep: the noise-aware GP checked on planted responses with known seed noise (no training),
expected improvement against a Monte-Carlo reference, and the command end to end on a tiny model.

Noise is compared as a standard deviation (the WhiteKernel's level is a variance; its square root is
compared with the σ planted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY
from nanolm.plots import pyplot
from nanolm.research.sweep import (
    SweepPoint,
    analyse_sweep,
    expected_improvement,
    fit_gp,
    latent,
    pooled_noise,
    read_sweep,
)
from nanolm.research.sweep_plots import sweep_figure

GRID = (-4.0, -3.5, -3.0, -2.5, -2.0)  # log10(lr)


def planted(rng, sigma: float, seeds: int, x0: float = -2.8, curvature: float = 0.5, grid=GRID) -> list[SweepPoint]:
    """val_loss = 2 + curvature (log10 lr - x0)² + N(0, σ²), `seeds` draws per value."""
    return [
        SweepPoint((10.0**x,), f"g{x}", list(range(seeds)), list(2.0 + curvature * (x - x0) ** 2 + rng.normal(0.0, sigma, seeds)))
        for x in grid
    ]


@pytest.mark.parametrize("draw", range(4))
def test_planted_quadratic_fitted_noise_is_sigma_and_the_interval_covers_the_optimum(draw):
    sigma, x0 = 0.03, -2.8
    points = planted(np.random.default_rng(draw), sigma, seeds=4, x0=x0)
    a = analyse_sweep(["lr"], points, log=[True])

    # the measured noise is the pooled within-group std, recomputed here with numpy (equal groups: mean of variances)
    by_hand = np.sqrt(np.mean([np.var(p.results, ddof=1) for p in points]))
    assert a.noise.measured and a.noise.dof == 5 * 3 and a.noise.measured_std == pytest.approx(by_hand, rel=1e-9)
    assert sigma / 2 < a.noise.fitted_std < 2 * sigma, a.noise
    assert "measured std" in a.noise.note and "fitted noise std" in a.noise.note
    assert a.noise.noisier == []  # equal noise everywhere: no group is set apart

    lo, hi = a.optimum.at_interval["lr"]
    assert lo <= 10**x0 <= hi, (lo, hi)
    assert np.log10(hi / lo) < 1.0  # informative: under half of the two decades swept
    assert abs(np.log10(a.optimum.at["lr"]) - x0) < 0.4 and not a.optimum.at_edge
    lo, hi = a.optimum.value_interval  # the mean function at the predicted optimum, planted value inside
    truth = 2.0 + 0.5 * (np.log10(a.optimum.at["lr"]) - x0) ** 2
    assert lo <= a.optimum.value <= hi and lo <= truth <= hi, (lo, truth, hi)
    lo, hi = a.optimum.best_interval  # the best value anywhere: the planted minimum 2.0
    assert lo <= 2.0 <= hi and hi - lo < 0.5 * 0.5 * 1.2**2, (lo, hi)  # under half the response's range over the grid


def test_a_group_much_noisier_than_the_rest_is_set_apart_not_pooled():
    rng = np.random.default_rng(0)
    sigma, x0 = 0.03, -2.8
    points = planted(rng, sigma, seeds=3, x0=x0)
    unstable = points[-1]  # lr = 1e-2: seeds that sometimes blow up
    unstable.results = list(2.0 + 0.5 * (-2.0 - x0) ** 2 + rng.normal(0.0, 0.5, 3))
    a = analyse_sweep(["lr"], points, log=[True])
    assert [g.group for g in a.noise.noisier] == [unstable.group] and a.noise.noisier[0].p < 0.01 / 5
    assert a.noise.noisier[0].std == pytest.approx(np.std(unstable.results, ddof=1))
    by_hand = np.sqrt(np.mean([np.var(p.results, ddof=1) for p in points[:-1]]))  # the other four groups
    assert a.noise.measured_std == pytest.approx(by_hand) and a.noise.dof == 8
    assert sigma / 2 < a.noise.fitted_std < 2 * sigma  # pooled with the unstable group it would be ~0.25
    lo, hi = a.optimum.at_interval["lr"]
    assert lo <= 10**x0 <= hi and "the seeds spread more at lr=0.01" in a.noise.note


def test_one_seed_per_value_says_the_noise_is_not_measured():
    a = analyse_sweep(["lr"], planted(np.random.default_rng(0), 0.03, seeds=1), log=[True])
    assert not a.noise.measured and a.noise.measured_std is None and a.noise.dof == 0
    assert a.notes[0].startswith("noise is not measured (one seed per value)")
    assert a.distinction is not None and a.distinction.distinguishable is None  # 1 seed a side: too few to tell


def test_seeds_that_all_agree_do_not_count_as_measured_noise():
    points = [SweepPoint((v,), f"g{v}", [1, 2], [1.0 + (v - 2) ** 2] * 2) for v in (1.0, 2.0, 3.0)]
    a = analyse_sweep(["warmup_steps"], points)
    assert not a.noise.measured and "every seed gave the same value" in a.noise.note


def test_pooled_noise_weights_groups_by_their_degrees_of_freedom():
    points = [
        SweepPoint((1.0,), "a", [1, 2, 3], [1.0, 2.0, 3.0]),
        SweepPoint((2.0,), "b", [1, 2], [0.0, 4.0]),
        SweepPoint((3.0,), "c", [1], [7.0]),
    ]
    var, dof = pooled_noise(points)
    assert dof == 3 and var == pytest.approx((2.0 + 8.0) / 3)  # (1+0+1) + (4+4), over 2 + 1 dof; c adds nothing


def test_the_latent_posterior_is_the_predictive_one_without_the_noise():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (30, 1))
    y = np.sin(4 * x[:, 0]) + rng.normal(0, 0.1, 30)
    gp = fit_gp(x, (y - y.mean()) / y.std(), noise=0.01 / y.var())
    new = np.linspace(0, 1, 7)[:, None]
    m_full, s_full = gp.predict(new, return_std=True)
    m_lat, s_lat = latent(gp).predict(new, return_std=True)
    assert np.allclose(m_full, m_lat)
    assert np.allclose(s_full**2, s_lat**2 + gp.kernel_.k2.noise_level)


@pytest.mark.parametrize(
    "mean,std,best,maximize", [(1.0, 0.5, 0.8, False), (0.5, 0.2, 0.8, False), (2.0, 1.0, 2.5, True), (0.3, 0.0, 0.5, False)]
)
def test_expected_improvement_matches_monte_carlo(mean, std, best, maximize):
    f = np.random.default_rng(0).normal(mean, std, 2_000_000)
    mc = np.mean(np.maximum(f - best, 0) if maximize else np.maximum(best - f, 0))
    ei = float(expected_improvement(np.array([mean]), np.array([std]), best, maximize)[0])
    assert ei == pytest.approx(mc, rel=0.01, abs=1e-4)


def test_expected_improvement_suggests_new_values_near_the_true_optimum():
    x0 = -2.75  # between two grid values
    a = analyse_sweep(["lr"], planted(np.random.default_rng(3), 0.02, seeds=3, x0=x0), log=[True], next_k=3)
    assert len(a.next) == 3
    first = np.log10(a.next[0].at["lr"])
    assert abs(first - x0) < 0.25, a.next
    run = {round(x, 6) for x in GRID}
    assert all(round(np.log10(s.at["lr"]), 6) not in run for s in a.next)
    assert a.next[0].expected_improvement >= a.next[1].expected_improvement >= a.next[2].expected_improvement > 0


def test_a_planted_2d_bowl_has_its_optimum_covered():
    rng = np.random.default_rng(0)
    x0, w0 = -2.7, 40.0
    points = [
        SweepPoint(
            (10.0**x, w), f"g{x}-{w}", [1, 2, 3], list(2 + 0.5 * (x - x0) ** 2 + ((w - w0) / 50) ** 2 + rng.normal(0, 0.02, 3))
        )
        for x in GRID
        for w in (0, 25, 50, 75, 100)
    ]
    a = analyse_sweep(["lr", "warmup_steps"], points, log=[True, False], integer=[False, True], next_k=2)
    lr_lo, lr_hi = a.optimum.at_interval["lr"]
    w_lo, w_hi = a.optimum.at_interval["warmup_steps"]
    assert lr_lo <= 10**x0 <= lr_hi and w_lo <= w0 <= w_hi, a.optimum
    assert a.grid_shape == [40, 40] and len(a.mean) == len(a.std) == 1600
    assert 0.01 < a.noise.fitted_std < 0.04
    assert all(float(s.at["warmup_steps"]).is_integer() for s in a.next)  # an int key gets whole numbers
    fig = sweep_figure(a)
    assert len(fig.axes) == 4  # mean and σ contours, each with its colour bar
    pyplot().close(fig)


def test_the_compare_rules_decide_whether_the_optimum_stands_out():
    rng = np.random.default_rng(0)
    sharp = analyse_sweep(["lr"], planted(rng, 0.005, seeds=3, x0=-3.0, curvature=2.0), log=[True])
    assert sharp.distinction is not None and sharp.distinction.distinguishable is True
    assert sharp.distinction.best == {"lr": pytest.approx(1e-3)} and len(sharp.distinction.checks) == 2
    flat = analyse_sweep(["lr"], planted(rng, 0.05, seeds=3, x0=-3.0, curvature=0.02), log=[True])
    assert flat.distinction is not None and flat.distinction.distinguishable is False
    assert "not distinguishable" in flat.distinction.summary


def test_an_optimum_on_the_edge_says_where_to_extend():
    rng = np.random.default_rng(0)
    a = analyse_sweep(["lr"], planted(rng, 0.01, seeds=3, x0=-1.0), log=[True])  # still falling at 1e-2
    assert a.optimum.at_edge and any("e.g. with lr=0.0316" in n for n in a.notes), a.notes


def test_a_value_whose_seeds_all_diverged_is_listed_not_fitted():
    points = planted(np.random.default_rng(0), 0.02, seeds=3)
    points.append(SweepPoint((0.1,), "g-1", [], [], diverged=[0, 1, 2]))
    a = analyse_sweep(["lr"], points, log=[True])
    assert max(g[0] for g in a.grid) == pytest.approx(1e-2)  # the fine grid spans the values that trained
    assert a.at_points[-1] is None and any("g-1: seed(s) 0, 1, 2 diverged" in n for n in a.notes)


# ---- the command ------------------------------------------------------------------------------------

# TINY without its lr: a --set of the swept key is refused
SHORT = [f"--set={kv}" for kv in (*TINY, "steps=6", "eval_every=6", "ckpt_every=6") if not kv.startswith("lr=")]


def test_sweep_end_to_end_with_the_debug_executor(tmp_path, cli):
    out = cli(
        "sweep", "lr", "--values", "1e-3,1e-2", "--log", "--seeds", "2", "--executor", "debug", *SHORT, "--json", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    folder = tmp_path / "runs" / "sweeps" / "sweep-lr"
    assert record["trained"] == 4 and record["reused"] == 0 and Path(record["json"]) == Path("runs/sweeps/sweep-lr/sweep.json")
    assert (folder / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert read_sweep(folder)["analysis"]["params"] == ["lr"]
    for point in record["analysis"]["points"]:  # each seed's value is the run's own final val_loss
        assert point["seeds"] == [1337, 1338] and len(point["runs"]) == 2
        for run, value in zip(point["runs"], point["results"]):
            manifest = json.loads((tmp_path / run / "manifest.json").read_text())
            assert manifest["final"]["val_loss"] == value and manifest["config"]["group"] == point["group"]
            assert Path(run).name.endswith(f"-{point['group']}-seed{manifest['config']['seed']}")
    assert [p["group"] for p in record["analysis"]["points"]] == ["sweep-lr-0.001", "sweep-lr-0.01"]
    assert record["analysis"]["distinction"]["distinguishable"] is None  # 2 seeds a side: too few to tell
    assert "[4/4] sweep-lr-0.01 seed 1338 finished" in out.stderr

    # a third value: the four runs are reused, two are trained; the table shows the fit
    more = cli(
        "sweep",
        "lr",
        "--values",
        "1e-3,3e-3,1e-2",
        "--log",
        "--seeds",
        "2",
        "--executor",
        "debug",
        *SHORT,
        "--next",
        "2",
        cwd=tmp_path,
    )
    assert more.returncode == 0, more.stderr
    assert "2 runs trained, 4 reused" in " ".join(more.stdout.split())
    assert "seed noise: measured std" in more.stdout and "next to run" in more.stdout and "optimum" in more.stdout

    one = cli(
        "sweep",
        "lr",
        "--values",
        "1e-3,1e-2",
        "--seeds",
        "1",
        "--name",
        "single",
        "--executor",
        "debug",
        *SHORT,
        "--report",
        cwd=tmp_path,
    )
    assert one.returncode == 0, one.stderr
    assert "noise is not measured" in " ".join(one.stdout.split())
    pages = sorted((tmp_path / "runs").glob("*-single-lr-*/report.html"))  # --report: each run's page
    assert len(pages) == 2 and all("Loss curves" in p.read_text(encoding="utf-8") for p in pages)


def test_a_2d_sweep_and_a_value_that_diverges_end_to_end(tmp_path, cli):
    two = cli(
        "sweep",
        "lr",
        "--values",
        "1e-3,1e-2",
        "--log",
        "--param2",
        "weight_decay",
        "--values2",
        "0,0.1",
        "--seeds",
        "1",
        "--executor",
        "debug",
        *SHORT,
        "--json",
        cwd=tmp_path,
    )
    assert two.returncode == 0, two.stderr
    record = json.loads(two.stdout)
    assert record["analysis"]["params"] == ["lr", "weight_decay"] and record["analysis"]["grid_shape"] == [40, 40]
    assert [p["group"] for p in record["analysis"]["points"]] == [
        "sweep-lr-0.001-weight_decay-0",
        "sweep-lr-0.001-weight_decay-0.1",
        "sweep-lr-0.01-weight_decay-0",
        "sweep-lr-0.01-weight_decay-0.1",
    ]
    assert (tmp_path / "runs" / "sweeps" / "sweep-lr-weight_decay" / "sweep.png").is_file()
    refused = cli(
        "sweep", "lr", "--values", "1e-3,1e-2", "--param2", "warmup_steps", "--values2", "0,3", *SHORT, cwd=tmp_path
    )  # TINY sets warmup_steps
    assert refused.returncode == 2 and "give its values with --values2 only" in refused.stderr

    blowup = [*SHORT, "--set", "grad_clip=0", "--set", "warmup_steps=0"]
    out = cli(
        "sweep",
        "lr",
        "--values",
        "1e-3,1e-2,1e9",
        "--seeds",
        "1",
        "--name",
        "wild",
        "--executor",
        "debug",
        *blowup,
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    points = json.loads(out.stdout)["analysis"]["points"]
    assert points[2]["group"] == "wild-lr-1e09" and points[2]["results"] == [] and points[2]["diverged"] == [1337]
    assert "wild-lr-1e09 seed 1337 diverged" in out.stderr and "wild-lr-1e09: seed(s) 1337 diverged" in out.stderr


@pytest.mark.slow
def test_a_sweep_through_submitit(tmp_path, monkeypatch):
    """`--executor slurm` through submitit with its cluster swapped for submitit's local one."""
    submitit = pytest.importorskip("submitit", reason="the slurm extra is not installed")
    from nanolm.repro.executors import SlurmResources
    from nanolm.research.sweep import run_sweep, sweep_spec

    real = submitit.AutoExecutor
    monkeypatch.setattr(submitit, "AutoExecutor", lambda folder, cluster=None, **kw: real(folder=folder, cluster="local", **kw))
    overrides = [kv.split("=", 1)[1] for kv in SHORT] + [f"runs_dir={tmp_path}"]
    result = run_sweep(
        sweep_spec("lr", "1e-3,1e-2", log=True, seeds=1), overrides, executor="slurm", slurm=SlurmResources(time_min=5)
    )
    assert result.trained == 2 and [len(p.results) for p in result.analysis.points] == [1, 1]
    assert list((tmp_path / "slurm").glob("*_result.pkl"))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["notakey", "--values", "1,2"], "unknown key 'notakey'"),
        (["lr", "--values", "1e-3"], "a sweep needs at least two"),
        (["lr", "--values", "1e-3,1e-3"], "is given twice"),
        (["lr", "--values", "1e-3,1.00001e-3"], "both name their runs 'sweep-lr-0.001'"),
        (["lr", "--values", "1e-3,nan"], "'nan' is not a finite number"),
        (["steps", "--values", "10,abc"], "'abc' is not a valid int for steps"),
        (["steps", "--values", "10,1.5"], "'1.5' is not a valid int for steps"),
        (["lr", "--values", "1e-3,fast"], "'fast' is not a valid float for lr"),
        (["preset", "--values", "tiny,small"], "a sweep needs a numeric (int or float) key"),
        (["seed", "--values", "1,2"], "'seed' cannot be swept"),
        (["eval_every", "--values", "10,20"], "'eval_every' cannot be swept"),
        (["lr", "--values", "1e-3,1e-2", "--seeds", "0"], "--seeds must be >= 1"),
        (["lr", "--values", "0,1e-2", "--log"], "a log scale needs values > 0"),
        (["lr", "--values", "-1,1e-2"], "sweep value lr=-1: config: lr must be > 0"),
        (["lr", "--values", "1e-3,1e-2", "--param2", "lr", "--values2", "1,2"], "is the first parameter again"),
        (["lr", "--values", "1e-3,1e-2", "--param2", "steps"], "--param2 and --values2 go together"),
        (["lr", "--values", "1e-3,1e-2", "--set", "lr=1e-3"], "give its values with --values only"),
        (["lr", "--values", "1e-3,1e-2", "--metric", "accuracy"], "--metric 'accuracy' is not a final metric"),
        (["lr", "--values", "1e-3,1e-2", "--name", "a b"], "a group name is letters"),
        (["lr", "--values", "1e-3,1e-2", "--seeds", "x"], "'x' is not a valid integer"),
        (["lr", "--values", "1e-3,1e-2", "--slurm-gpus", "1"], "--slurm-gpus: for --executor slurm only"),
    ],
)
def test_bad_input_is_one_line_and_trains_nothing(tmp_path, cli, argv, message):
    out = cli("sweep", *argv, "--executor", "debug", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanolm: error: ") and message in lines[0], out.stderr
    assert not (tmp_path / "runs").exists()


def test_a_reused_group_with_another_config_is_refused(tmp_path, cli):
    first = cli("sweep", "lr", "--values", "1e-3,1e-2", "--seeds", "1", "--executor", "debug", *SHORT, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    runs = sorted((tmp_path / "runs").iterdir())
    again = cli(
        "sweep",
        "lr",
        "--values",
        "1e-3,1e-2",
        "--seeds",
        "1",
        "--executor",
        "debug",
        *SHORT,
        "--set",
        "weight_decay=0.5",
        cwd=tmp_path,
    )
    assert again.returncode == 2 and "already has runs with another config (weight_decay: 0.1 there, 0.5 now)" in again.stderr
    assert sorted((tmp_path / "runs").iterdir()) == runs


def test_bad_input_from_a_real_process(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "nanolm", "sweep", "lr", "--values", "3e-3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        "nanolm: error: --values: 1 value(s) for lr; a sweep needs at least two, comma-separated, e.g. --values 1e-4,3e-4,1e-3"
    )
