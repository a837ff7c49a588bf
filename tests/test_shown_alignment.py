"""Each alignment result is laid out once (nanolm.report.sections.alignment) and drawn twice: every cell of the
page's table, built from what the command saved in the run, is on one line of what the command printed, in order.

The commands run once each, for a person (no --json), on a copy of the session's trained run, on a console wide
enough that no row is wrapped or listed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nanolm.report.sections import alignment
from nanolm.tables import Column, Table
from shown import printed, saved


@pytest.fixture(scope="module")
def run(trained_run, tmp_path_factory) -> dict:
    """A copy of the trained run after each command ran on it once: {"run": its folder, command: what it printed}."""
    run = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("shown") / Path(trained_run).name))
    r, feedback = str(run), run / "feedback"
    out: dict = {"run": run}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "2000")  # rich reads the width from COLUMNS: no cell wraps
        out["sycophancy"] = printed("sycophancy", r, "--n", "40", "--steer-layer", "1", "--steer-alphas", "0,0.5")
        out["pairs"] = printed("feedback", "pairs", r, "--n", "24")
        out["label"] = printed("feedback", "label", str(feedback / "pairs-24-seed0.jsonl"), "--judge", "planted:1,0.2")
        labels = feedback / "pairs-24-seed0.planted-labels.jsonl"
        out["bias"] = printed("feedback", "bias", str(labels))
        out["reward-model"] = printed("feedback", "reward-model", str(labels), "--base", r, "--steps", "5")
        out["best-of-n"] = printed(
            "feedback",
            "best-of-n",
            r,
            "--reward",
            str(run / "reward_models" / labels.stem),
            "--n",
            "1,2",
            "--prompts",
            "3",
            "--seeds",
            "0,1",
        )
    return out


def _in_order(cells: list[str], line: str) -> bool:
    at = 0
    for cell in cells:
        found = line.find(cell, at)
        if found < 0:
            return False
        at = found + len(cell)
    return True


def assert_shown(table: Table | None, text: str) -> None:
    """Every row of the page's table is on a line of the terminal's text, its cells as the page shows them, in order."""
    assert table is not None and table.rows
    lines = text.splitlines()
    for i in range(len(table.rows)):
        cells = [table.shown(i, j) for j in range(len(table.columns))]
        assert any(_in_order(cells, line) for line in lines), (table.key, cells, text)


def test_sycophancy_rates_and_probabilities(run):
    result, _ = alignment.read_sycophancy_summary(saved(run["run"] / "sycophancy" / "corpus.json"))
    assert_shown(alignment.sycophancy_rates_table(result, "sycophancy/corpus.json"), run["sycophancy"])
    assert_shown(alignment.sycophancy_probabilities_table(result, "sycophancy/corpus.json"), run["sycophancy"])


def test_knows_vs_says(run):
    result, _ = alignment.read_sycophancy_summary(saved(run["run"] / "sycophancy" / "corpus.json"))
    assert_shown(alignment.knows_table(result, "sycophancy/corpus.json"), run["sycophancy"])


def test_sycophancy_steering(run):
    _, steering = alignment.read_sycophancy_summary(saved(run["run"] / "sycophancy" / "corpus.json"))
    assert_shown(alignment.opinion_steering_table(steering, "sycophancy/corpus.json"), run["sycophancy"])


def test_feedback_pairs(run):
    path = run["run"] / "feedback" / "pairs-24-seed0.jsonl"
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    table = alignment.pairs_table({"pairs": pairs}, "feedback/pairs-24-seed0.jsonl")
    assert [row[0] for row in table.rows] == ["right_wrong", "right_agreeing", "wrong_agreeing", "short_long", "samples"]
    assert_shown(table, run["pairs"])


@pytest.mark.parametrize(
    ("command", "name"), [("label", "pairs-24-seed0.planted-labels.json"), ("bias", "pairs-24-seed0.planted-labels.bias.json")]
)
def test_judge_biases(run, command, name):
    report = alignment.read_bias_report(saved(run["run"] / "feedback" / name))
    assert_shown(alignment.judge_bias_table(report, f"feedback/{name}"), run[command])


def test_judge_by_principle(run):
    report = alignment.read_bias_report(saved(run["run"] / "feedback" / "pairs-24-seed0.planted-labels.json"))
    assert_shown(alignment.judge_principles_table(report, "feedback/pairs-24-seed0.planted-labels.json"), run["label"])


def test_reward_model(run):
    folder = run["run"] / "reward_models" / "pairs-24-seed0.planted-labels"
    training = saved(folder / "reward_model.json")["training"]
    table = alignment.reward_model_table(folder.name, training)
    assert_shown(table, run["reward-model"])
    # the page shows this very table for each reward model trained on the run
    from nanolm.report import build_report

    page = build_report(run["run"]).to_dict()
    assert table.to_dict()["rows"] in [t["rows"] for s in page["sections"] for t in s["tables"]]
    ci_rows = [r for r in table.rows if r[3] is not None]
    assert len(ci_rows) >= 3 and all(r[1] not in ("", "-") for r in ci_rows[:1])  # accuracy: counted, with its CI


def test_best_of_n(run):
    from nanolm.report import build_report

    page = build_report(run["run"]).to_dict()
    feedback = next(s for s in page["sections"] if s["key"] == "feedback")
    shown = next(t for t in feedback["tables"] if "best-of-n" in t["key"])
    # the page recounts the curve from the saved per-prompt records; the terminal drew it from the command's result
    table = Table(shown["key"], shown["caption"], [Column(**c) for c in shown["columns"]], shown["rows"])
    assert len(table.rows) == 2
    assert_shown(table, run["best-of-n"])
