"""The SAE sweep: the seed spread and the "beyond the seed spread" flag against a hand computation on planted
numbers, the grid's bad input, a tiny grid on a trained run (every point, its numbers reproduced from the saved
SAE), and the frontier figure's points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nanolm.errors import UserError
from nanolm.interp.sae.sweep import (
    METRICS,
    SweepPoint,
    SweepResult,
    beyond_spread,
    check_values,
    parse_values,
    seed_list,
    spread,
    summarize,
    sweep_figure,
    sweep_sae,
)


def point(
    value: float, seed: int, l0: float, fvu: float = 0.5, zero: float = 0.9, mean: float = 0.8, error: str | None = None
) -> SweepPoint:
    return SweepPoint(value, seed, l0, fvu, zero, mean, 0.1, 0.01, 0, 10, 1.0, error)


# ---- planted numbers, computed by hand --------------------------------------------------------------------


def planted_points() -> list[SweepPoint]:
    nan = math.nan
    return [
        # λ = 0.001: L0 10, 12, 11 -> median 11, range [10, 12]
        point(0.001, 0, 10, fvu=0.20),
        point(0.001, 1, 12, fvu=0.22),
        point(0.001, 2, 11, fvu=0.21),
        # λ = 0.01: L0 12.5, 14, 13 -> median 13, range [12.5, 14]: disjoint from [10, 12]
        point(0.01, 0, 12.5, fvu=0.215),
        point(0.01, 1, 14, fvu=0.30),
        point(0.01, 2, 13, fvu=0.25),
        # λ = 0.1: L0 13.5, 20 and a failed seed -> median 16.75, range [13.5, 20]: overlaps [12.5, 14]
        point(0.1, 0, 13.5, fvu=0.5),
        point(0.1, 1, 20, fvu=0.6),
        point(0.1, 2, nan, nan, nan, nan, error="NaN loss"),
    ]


def test_spreads_and_the_beyond_the_seed_spread_flag_match_a_hand_computation():
    per_value, neighbours = summarize(planted_points(), [0.1, 0.001, 0.01])
    assert [v.value for v in per_value] == [0.001, 0.01, 0.1]  # sorted: neighbours are adjacent values
    l0 = [(v.l0.median, v.l0.min, v.l0.max, v.l0.n) for v in per_value]
    assert l0 == [(11, 10, 12, 3), (13, 12.5, 14, 3), (16.75, 13.5, 20, 2)]
    flags = {(d.metric, d.lower, d.upper): (d.beyond_spread, d.diff) for d in neighbours}
    assert len(neighbours) == len(METRICS) * 2
    assert flags[("l0", 0.001, 0.01)] == (True, 2.0)  # [10, 12] vs [12.5, 14]
    assert flags[("l0", 0.01, 0.1)] == (False, 3.75)  # [12.5, 14] vs [13.5, 20] overlap
    # FVU: [0.20, 0.22] vs [0.215, 0.30] overlap (0.215 < 0.22); [0.215, 0.30] vs [0.5, 0.6] do not.
    assert flags[("fvu", 0.001, 0.01)][0] is False and flags[("fvu", 0.01, 0.1)][0] is True
    # Every seed the same CE recovered: zero-width ranges that touch are not disjoint.
    assert not any(d.beyond_spread for d in neighbours if d.metric.startswith("ce_"))


def test_one_seed_has_no_spread_to_be_beyond():
    a, b = spread([1.0]), spread([5.0])
    assert (a.median, a.min, a.max, a.n) == (1.0, 1.0, 1.0, 1)
    assert not beyond_spread(a, b) and beyond_spread(spread([1.0, 1.1]), spread([5.0, 5.2]))
    assert spread([math.nan, math.nan]).n == 0 and math.isnan(spread([math.nan]).median)


def test_the_grid_is_checked_before_any_work():
    assert parse_values("1e-2, 1e-3,0", "relu") == [0.0, 1e-3, 1e-2]
    assert parse_values("32,8,16", "topk") == [8, 16, 32]
    for text, arch, match in [
        ("", "relu", "comma-separated"),
        ("1e-3,,1e-2", "relu", "comma-separated"),
        ("abc", "relu", "not a number"),
        ("-1e-3", "relu", "λ must be"),
        ("inf", "relu", "λ must be"),
        ("8,0", "topk", "positive integer"),
        ("-4", "topk", "positive integer"),
        ("8.5", "topk", "not an integer"),
        ("8,8", "topk", "twice"),
        (" , ", "topk", "comma-separated"),
    ]:
        with pytest.raises(UserError, match=match):
            parse_values(text, arch)
    with pytest.raises(UserError, match="at least one"):
        check_values([], "relu")
    assert seed_list(3) == [0, 1, 2] and seed_list([4, 7]) == [4, 7]
    for bad in (0, -1, True, [], [1, 1], [-2]):
        with pytest.raises(UserError):
            seed_list(bad)


# ---- the figure ------------------------------------------------------------------------------------------


def planted_result() -> SweepResult:
    points = planted_points()
    per_value, neighbours = summarize(points, [0.001, 0.01, 0.1])
    return SweepResult(
        "m",
        "blocks.1.hook_resid_post",
        1,
        "relu",
        "l1",
        [0.001, 0.01, 0.1],
        [0, 1, 2],
        256,
        4096,
        10,
        300,
        points,
        per_value,
        neighbours,
        1.0,
    )


def test_the_figure_has_one_point_per_value_with_its_spread_and_every_seed_behind_it():
    result = planted_result()
    fig = sweep_figure(result)
    fvu_ax, ce_ax = fig.axes[:2]
    for ax, metric in ((fvu_ax, "fvu"), (ce_ax, "ce_recovered_zero")):
        line = ax.lines[0]  # the errorbar's data line: one point per value
        np.testing.assert_allclose(line.get_xdata(), [11, 13, 16.75])
        np.testing.assert_allclose(line.get_ydata(), [getattr(v, metric).median for v in result.per_value])
        seeds = ax.collections[0].get_offsets()  # every finished seed's own point
        assert len(seeds) == 8
    assert "mean ablation" in sweep_figure(result, ce="mean").axes[1].get_ylabel()
    with pytest.raises(UserError):
        sweep_figure(result, ce="median")


# ---- a trained run ---------------------------------------------------------------------------------------


def test_a_tiny_grid_on_a_trained_run(trained_run, tmp_path):
    from nanolm.interp.sae.metrics import evaluate_sae
    from nanolm.interp.sae.model import load_sae
    from nanolm.interp.sae.pipeline import texts_for
    from nanolm.interp.sae.train import TrainSettings
    from nanolm.interp.view import load_view

    view = load_view(trained_run)
    settings = TrainSettings(batch_size=256, expansion=4)
    stages = []
    result = sweep_sae(
        view,
        1,
        "resid_post",
        "relu",
        [3e-2, 1e-3],
        2,
        4096,
        settings,
        eval_texts=100,
        save_dir=tmp_path / "grid",
        progress=lambda stage, done, total: stages.append((stage, done, total)),
    )
    assert result.values == [1e-3, 3e-2] and result.seeds == [0, 1] and result.knob == "l1"
    assert [(p.value, p.seed) for p in result.points] == [(1e-3, 0), (1e-3, 1), (3e-2, 0), (3e-2, 1)]
    assert result.tokens == 4096 and result.d_sae == 256 and result.eval_texts == 100 and not result.failed
    assert stages[-1] == ("train", 4, 4) and any(s[0] == "collect" for s in stages)
    for p in result.points:
        assert 0 < p.l0 <= 256 and p.fvu > 0 and math.isfinite(p.ce_recovered_zero) and p.steps == 16
    # Per value: the median and range of its seeds' points; the flag from those ranges.
    for v in result.per_value:
        fvus = [p.fvu for p in result.points if p.value == v.value]
        assert (v.fvu.median, v.fvu.min, v.fvu.max) == pytest.approx((np.median(fvus), min(fvus), max(fvus)))
    lo, hi = result.per_value
    d = next(n for n in result.neighbours if n.metric == "l0")
    assert d.beyond_spread == (lo.l0.max < hi.l0.min or hi.l0.max < lo.l0.min)
    assert result.points[0].fvu != result.points[1].fvu  # the seeds differ
    # A point's numbers again, from its saved SAE evaluated on the same held-out texts.
    assert len(result.saved) == 4
    sae = load_sae(result.saved[3])
    assert sae.cfg.extra["seed"] == 1 and sae.cfg.extra["l1"] == 3e-2
    again = evaluate_sae(view, sae, texts_for(view)[1][:100])
    assert again.fvu == pytest.approx(result.points[3].fvu, rel=1e-5)
    assert again.l0 == pytest.approx(result.points[3].l0, rel=1e-5)
    fig = sweep_figure(result)
    assert len(fig.axes[0].lines[0].get_xdata()) == 2 and len(fig.axes[1].collections[0].get_offsets()) == 4
    # topk: K >= M refused before anything is collected.
    with pytest.raises(UserError, match="below the dictionary size"):
        sweep_sae(view, 1, arch="topk", values=[8, 256], seeds=1, tokens=4096, settings=settings)
    with pytest.raises(UserError, match="--layer 5"):
        sweep_sae(view, 5, values=[1e-3], seeds=1, tokens=4096, settings=settings)
    with pytest.raises(UserError, match="fewer than one batch"):
        sweep_sae(view, 1, values=[1e-3], seeds=1, tokens=100, settings=settings)


# ---- the command -----------------------------------------------------------------------------------------

SMALL = ("--tokens", "4096", "--batch-size", "256", "--expansion", "4")


def test_nanolm_sae_sweep_prints_the_grid_as_json_and_refuses_bad_grids(cli, trained_run, tmp_path):
    import json

    from test_bad_input import assert_user_error, snapshot

    before = snapshot(trained_run)
    out = cli(
        "sae",
        "sweep",
        str(trained_run),
        "--layer",
        "1",
        "--arch",
        "topk",
        "--k",
        "16,4",
        "--seeds",
        "2",
        *SMALL,
        "--eval-texts",
        "50",
        "--plot",
        str(tmp_path / "sweep.png"),
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["values"] == [4, 16] and got["knob"] == "k" and len(got["points"]) == 4
    assert all(0 < p["l0"] <= p["value"] for p in got["points"])  # TopK: at most K active (ReLU may zero some)
    assert got["plot"] == str(tmp_path / "sweep.png") and (tmp_path / "sweep.png").stat().st_size > 0
    l0 = next(d for d in got["neighbours"] if d["metric"] == "l0")
    ranges = [(v["l0"]["min"], v["l0"]["max"]) for v in got["per_value"]]
    assert l0["beyond_spread"] == (ranges[0][1] < ranges[1][0]) and l0["diff"] > 0
    # with --plot and no --save, no SAE is written into the run: only the sweep's result, where nanolm report reads it
    saved = "sae/sweep-L1-resid_post-topk.json"
    assert json.loads((trained_run / saved).read_text()) == got
    assert {k: v for k, v in snapshot(trained_run).items() if k != saved} == {k: v for k, v in before.items() if k != saved}
    before = snapshot(trained_run)
    run = str(trained_run)
    for args, names in [
        (("--l1", "1e-3,,1e-2"), ["--l1", "comma-separated"]),
        (("--l1", ""), ["--l1"]),
        (("--l1", "1e-3,x"), ["'x'", "not a number"]),
        (("--l1", "-1e-3"), ["λ must be"]),
        (("--arch", "topk", "--k", "8,0"), ["K must be a positive integer"]),
        (("--arch", "topk", "--k", "8", "--seeds", "0"), ["--seeds"]),
        (("--arch", "topk", "--k", "8,256", "--expansion", "4"), ["--k 256", "dictionary size"]),
        (("--k", "8"), ["--arch topk"]),
        ((), ["give the grid"]),
    ]:
        out = cli("sae", "sweep", run, "--layer", "1", *args, cwd=tmp_path)
        assert_user_error(out.returncode, out.stderr, *names)
    out = cli("sae", "sweep", run, "--l1", "1e-3", cwd=tmp_path)
    assert_user_error(out.returncode, out.stderr, "--layer")
    assert snapshot(trained_run) == before
