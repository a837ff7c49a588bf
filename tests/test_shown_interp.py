"""Each interpretability result is laid out once (nanolm.report.sections.interp) and drawn twice: every cell of the
page's table, built from what the command saved in the run, is in what the command printed, row after row in order.

The commands run once each, for a person (no --json), on a copy of the session's trained run, on a console wide
enough that no row is wrapped or listed. Cells are compared with their whitespace collapsed: a generated example or a
token may hold a newline, which the terminal prints as one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nanolm.interp.lens import LensResult
from nanolm.interp.probes import ProbeResult
from nanolm.interp.sae.metrics import SAEEval
from nanolm.interp.sae.sweep import SweepResult as SaeSweep
from nanolm.interp.steering_sweep import SweepResult as SteeringSweep
from nanolm.interp.tuned_lens import LensEvaluation
from nanolm.report.sections import interp
from nanolm.tables import Table, terminal_header
from shown import assert_shown, flat, printed, saved


@pytest.fixture(scope="module")
def run(trained_run, tmp_path_factory) -> dict:
    """A copy of the trained run after each command ran on it once: {"run": its folder, command: what it printed}."""
    run = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("shown") / Path(trained_run).name))
    r = str(run)
    out: dict = {"run": run}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "2000")  # rich reads the width from COLUMNS: no cell wraps
        out["lens"] = printed("lens", r, "--prompt", "the cat sat on the", "--positions", "0,-1")
        printed("lens", "train", r, "--steps", "5", "--batch", "4")
        out["lens eval"] = printed("lens", "eval", r, "--batches", "1")
        out["probe"] = printed("probe", r, "--feature", "tense", "--n", "80")
        printed("sae", "train", r, "--layer", "1", "--tokens", "2048", "--batch-size", "256", "--expansion", "2")
        sae = next(p for p in (run / "sae").iterdir() if p.is_dir())
        out["sae"] = sae
        out["sae eval"] = printed("sae", "eval", str(sae), "--texts", "20")
        out["sae sweep"] = printed(
            "sae",
            "sweep",
            r,
            "--layer",
            "1",
            "--l1",
            "1e-3,3e-2",
            "--seeds",
            "2",
            "--tokens",
            "2048",
            "--batch-size",
            "256",
            "--expansion",
            "2",
            "--eval-texts",
            "20",
        )
        out["steer sweep"] = printed(
            "steer",
            "sweep",
            r,
            "--direction",
            "sentiment",
            "--n",
            "20",
            "--alphas",
            "0,2",
            "--seeds",
            "2",
            "--prompts",
            "2",
            "--max-new-tokens",
            "4",
            "--layers",
            "1",
        )
    return out


def assert_headers(table: Table, text: str) -> None:
    """Every column's terminal header (its unit with it) is in the terminal's text, and a short one is spelled out
    in the legend under the table."""
    for column in table.columns:
        assert flat(terminal_header(column)) in flat(text), (table.key, terminal_header(column), text)
        if column.short:
            assert flat(f"{column.short}: {column.name}") in flat(text), (table.key, column.short, text)


def test_lens_show(run):
    tables = interp.lens_tables(LensResult.from_dict(saved(run["run"] / "lens" / "show.json")), "lens/show.json")
    assert len(tables) == 2  # positions 0 and -1: a table each
    for table in tables:
        assert_shown(table, run["lens"])
        assert_headers(table, run["lens"])


def test_lens_eval(run):
    table = interp.lens_eval_table(LensEvaluation.from_dict(saved(run["run"] / "lens" / "eval.json")), "lens/eval.json")
    assert_shown(table, run["lens eval"])
    assert_headers(table, run["lens eval"])


def test_probe(run):
    d = saved(run["run"] / "probes" / "tense.json")
    table = interp.probe_table(ProbeResult.from_dict(d), "probes/tense.json")
    assert_shown(table, run["probe"])
    assert_headers(table, run["probe"])
    assert [table.rows[i][0] for i in table.bold_rows] == [d["best_layer"]]  # the best layer, in bold on both


def test_sae_eval(run):
    path = run["sae"] / "eval.json"
    table = interp.sae_eval_table(SAEEval.from_dict(saved(path)), path.parent.name, path.relative_to(run["run"]).as_posix())
    assert_shown(table, run["sae eval"])
    assert "dead latents" in [row[0] for row in table.rows]


def test_sae_sweep(run):
    sweep = SaeSweep.from_dict(saved(run["run"] / "sae" / "sweep-L1-resid_post-relu.json"))
    table = interp.sae_sweep_table(sweep, "sae/sweep-L1-resid_post-relu.json")
    assert_shown(table, run["sae sweep"])
    assert_headers(table, run["sae sweep"])


def test_steering_sweep(run):
    sweep = SteeringSweep.from_dict(saved(run["run"] / "steering" / "sentiment.json"))
    table = interp.steering_table(sweep, "steering/sentiment.json")
    assert_shown(table, run["steer sweep"])
    assert_headers(table, run["steer sweep"])
    headers = [c.name for c in table.columns]
    assert "happy share, min–max over seeds" in headers and "next-word log-odds, happy vs sad" in headers
