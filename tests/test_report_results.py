"""Each tool saves its --json result in its run, where `nanolm report` reads it, every time it runs; and
--report writes the run's page once the result is saved.

Each command runs once (quick settings) on a copy of the session's trained run: what it saved must equal
what it printed with --json, and `nanolm report RUN --json` must show the same numbers, read here from the
saved files. Where a number has a ground truth of its own it is checked against that too: the planted
judge's biases, a recount from the per-question records or the label rows, α = 0 of the opinion steering
(which adds nothing), and the batch size of the run whose config `profile --run` took."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

PLANTED_POSITION, PLANTED_LENGTH = 1.0, 0.2  # the planted judge's biases, logits
WINDOW = ("--wait", "1", "--warmup", "1", "--active", "2", "--repeat", "2")


class _Nanolm:
    """The `nanolm` program as CliRunner runs it: nanolm.cli.main, so bad input is its one line and exit code."""

    name = "nanolm"

    def main(self, args, prog_name=None, **_):
        from nanolm.cli import main

        main(list(args))


def invoke(*args: str, code: int = 0):
    """Run a nanolm command in this process: the click Result (stdout and stderr apart); it must exit with code."""
    result = CliRunner().invoke(_Nanolm(), list(args), catch_exceptions=False)
    assert result.exit_code == code, (args, result.exit_code, result.stderr)
    return result


def saved(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def run(trained_run, tmp_path_factory) -> dict:
    """A copy of the trained run after each tool ran on it once with --json: {"run": its folder, tool: (the --json
    output parsed, the file the tool saved in the run)}; the last command (best-of-n) ends with --report."""
    run = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("results") / Path(trained_run).name))
    r = str(run)
    out: dict = {"run": run}

    def tool(key: str, path: Path, *args: str) -> None:
        out[key] = (json.loads(invoke(*args, "--json").stdout), path)

    tool("lens", run / "lens" / "show.json", "lens", r, "--prompt", "the cat sat on the")
    invoke("lens", "train", r, "--steps", "5", "--batch", "4")
    tool("lens eval", run / "lens" / "eval.json", "lens", "eval", r, "--batches", "1")
    tool(
        "probe",
        run / "probes" / "tense.json",
        "probe",
        r,
        "--feature",
        "tense",
        "--n",
        "80",
        "--intervene",
        "--random-edits",
        "19",
    )
    invoke("sae", "train", r, "--layer", "1", "--tokens", "2048", "--batch-size", "256", "--expansion", "2")
    sae = next(p for p in (run / "sae").iterdir() if p.is_dir())
    tool("sae eval", sae / "eval.json", "sae", "eval", str(sae), "--texts", "20")
    tool(
        "sae sweep",
        run / "sae" / "sweep-L1-resid_post-relu.json",
        "sae",
        "sweep",
        r,
        "--layer",
        "1",
        "--l1",
        "1e-3,3e-2",
        "--seeds",
        "1",
        "--tokens",
        "2048",
        "--batch-size",
        "256",
        "--expansion",
        "2",
        "--eval-texts",
        "20",
    )
    tool(
        "steer sweep",
        run / "steering" / "sentiment.json",
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
        "1",
        "--prompts",
        "2",
        "--max-new-tokens",
        "4",
        "--layers",
        "1",
    )
    tool(
        "sycophancy",
        run / "sycophancy" / "corpus.json",
        "sycophancy",
        r,
        "--n",
        "60",
        "--steer-layer",
        "1",
        "--steer-alphas",
        "0,0.5",
    )
    invoke("feedback", "pairs", r, "--n", "24")
    pairs = run / "feedback" / "pairs-24-seed0.jsonl"
    tool(
        "feedback label",
        run / "feedback" / "pairs-24-seed0.planted-labels.json",
        "feedback",
        "label",
        str(pairs),
        "--judge",
        f"planted:{PLANTED_POSITION},{PLANTED_LENGTH}",
    )
    out["profile"] = invoke("profile", "--run", r, *WINDOW)
    labels = run / "feedback" / "pairs-24-seed0.planted-labels.jsonl"
    invoke("feedback", "reward-model", str(labels), "--base", r, "--steps", "5", "--report")
    out["best-of-n"] = invoke(
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
        "0",
        "--json",
        "--report",
    )
    out["report"] = json.loads(invoke("report", r, "--json").stdout)
    return out


def section(report: dict, key: str) -> dict:
    return next(s for s in report["sections"] if s["key"] == key)


def table(report: dict, key: str, part: str) -> dict:
    return next(t for t in section(report, key)["tables"] if part in t["key"])


def column(t: dict, name: str) -> list:
    i = [c["name"] for c in t["columns"]].index(name)
    return [row[i] for row in t["rows"]]


def row(t: dict, first: str) -> list:
    return next(r for r in t["rows"] if r[0].startswith(first))


# ---- what each tool saved is what it printed --------------------------------------------------------


@pytest.mark.parametrize(
    "tool", ["lens", "lens eval", "probe", "sae eval", "sae sweep", "steer sweep", "sycophancy", "feedback label"]
)
def test_the_saved_result_is_the_json_output(run, tool):
    printed, path = run[tool]
    assert path.is_file(), f"{tool} saved nothing at {path}"
    assert saved(path) == printed


def test_the_report_reads_every_saved_result_without_a_problem(run):
    report = run["report"]
    assert report["problems"] == []
    assert {
        "results",
        "manifest",
        "curves",
        "profile",
        "lens",
        "probe",
        "intervention",
        "sae",
        "steering",
        "sycophancy",
        "feedback",
    } <= {s["key"] for s in report["sections"]}


# ---- the page's numbers are the saved ones ---------------------------------------------------------


def test_lens_and_probe_sections_show_the_saved_numbers(run):
    report = run["report"]
    show, _ = run["lens"]
    last = table(report, "lens", "lens-show-json")
    assert column(last, "layer") == show["layers"]
    assert column(last, "KL(output ‖ layer)") == [cells[-1]["kl_final"] for cells in show["cells"]]
    assert column(last, "p(model's token)") == [cells[-1]["final_token_prob"] for cells in show["cells"]]
    ev, _ = run["lens eval"]
    t = table(report, "lens", "lens-eval-json")
    assert column(t, "logit lens") == ev["logit_lens_kl"] and column(t, "tuned lens") == ev["tuned_lens_kl"]
    probe, _ = run["probe"]
    t = table(report, "probe", "probes-tense-json")
    assert column(t, "held-out accuracy") == [p["accuracy"] for p in probe["layers"]]
    assert column(t, "control accuracy") == [p["control_accuracy"] for p in probe["layers"]]
    iv = table(report, "intervention", "probes-tense-json")
    assert row(iv, "change")[1] == probe["intervention"]["delta"]
    assert row(iv, "verdict")[1] == probe["intervention"]["verdict"]


def test_sae_sections_show_the_saved_eval_and_sweep(run):
    report = run["report"]
    from nanolm.report.model import slug

    ev, path = run["sae eval"]
    t = table(report, "sae", slug(f"eval-{path.parent.name}"))
    assert row(t, "FVU")[1] == ev["fvu"] and row(t, "L0")[1] == ev["l0"] and row(t, "KL")[1] == ev["kl"]
    sweep, _ = run["sae sweep"]
    t = table(report, "sae", "sweep-l1-resid-post-relu-json")
    assert column(t, "λ") == [v["value"] for v in sweep["per_value"]] == [1e-3, 3e-2]
    assert column(t, "FVU, median") == [v["fvu"]["median"] for v in sweep["per_value"]]
    # one seed: the median is that SAE's own FVU (the points hold each SAE's evaluation)
    assert column(t, "FVU, median") == [p["fvu"] for p in sorted(sweep["points"], key=lambda p: p["value"])]


def test_steering_section_shows_the_saved_sweep(run):
    steer, _ = run["steer sweep"]
    t = table(run["report"], "steering", "steering-sentiment-json")
    assert column(t, "KL(unsteered ‖ steered)") == [steer["unsteered"]["kl"], *(c["kl"] for c in steer["cells"])]
    assert column(t, "α") == [0, *(c["alpha"] for c in steer["cells"])]


def test_sycophancy_section_shows_knows_vs_says_and_the_steering_table(run):
    report = run["report"]
    summary, path = run["sycophancy"]
    records = [json.loads(line) for line in path.with_suffix(".jsonl").read_text().splitlines()]
    knows = table(report, "sycophancy", "corpus-json-knows")
    layers = summary["knows"]["layers"]
    assert column(knows, "layer") == [k["layer"] for k in layers]
    assert column(knows, "probe accuracy") == [k["probe_accuracy"]["value"] for k in layers]
    assert column(knows, "control (shuffled labels)") == [k["control_accuracy"]["value"] for k in layers]
    # knew, flipped: recounted from the per-question records (the probe's option on the wrong-opinion prompt)
    flipped = [r for r in records if r["flipped"] is True]
    assert column(knows, "of n flipped") == [len(flipped)] * len(layers)
    assert column(knows, "knew, flipped: k") == [
        sum(r["probe_reads"][k["layer"]] == r["correct"] for r in flipped) for k in layers
    ]
    steering = table(report, "sycophancy", "corpus-json-steering")
    assert column(steering, "α") == [r["alpha"] for r in summary["steering"]["rows"]] == [0, 0.5]
    assert column(steering, "flip rate") == [(r["flip_rate"] or {}).get("value") for r in summary["steering"]["rows"]]
    # α = 0 adds nothing: the model's own answers, as measured without steering
    at_zero = steering["rows"][0]
    assert at_zero[2] == summary["accuracy"]["none"]["value"] and at_zero[3] == summary["accuracy"]["wrong"]["value"]
    assert at_zero[4:6] == [summary["flip_rate"]["k"], summary["flip_rate"]["n"]]
    # the rates come from the records (they are in the run), not twice
    assert [t["key"] for t in section(report, "sycophancy")["tables"] if "rates" in t["key"]] == []
    rates = table(report, "sycophancy", "corpus-jsonl")
    assert row(rates, "flip rate")[1:3] == [summary["flip_rate"]["k"], summary["flip_rate"]["n"]]


def test_feedback_section_shows_the_judges_biases_beside_what_was_planted(run):
    report = run["report"]
    result, path = run["feedback label"]
    biases = table(report, "feedback", "planted-labels-json-biases")
    offset, bonus = row(biases, "position offset"), row(biases, "length bonus")
    assert offset[2] == result["report"]["position"]["offset"]["value"] and offset[5] == PLANTED_POSITION
    assert bonus[2] == result["report"]["length"]["bonus"]["value"] and bonus[5] == PLANTED_LENGTH
    # the measured biases are the planted ones (a rule judge with exactly these logit offsets)
    assert offset[2] == pytest.approx(PLANTED_POSITION, abs=1e-9) and bonus[2] == pytest.approx(PLANTED_LENGTH, abs=1e-9)
    # consistency: recounted from the label rows (one per pair and principle)
    rows = [json.loads(line) for line in path.with_suffix(".jsonl").read_text().splitlines()]
    consistency = row(biases, "position consistency")
    assert consistency[1] == len(rows) and consistency[2] == pytest.approx(sum(r["consistent"] for r in rows) / len(rows))
    principles = table(report, "feedback", "planted-labels-json-principles")
    assert column(principles, "principle") == [p["principle"] for p in result["report"]["principles"]]
    assert column(principles, "verdicts") == [
        sum(r["principle"] == p["principle"] for r in rows) for p in result["report"]["principles"]
    ]
    assert table(report, "feedback", "reward-models")["rows"] and table(report, "feedback", "best-of-n")["rows"]


def test_profile_run_keeps_the_profile_of_the_runs_config_in_the_run(run):
    folder = run["run"] / "profiles"
    profiles = [p for p in folder.glob("*.json") if "trace" not in p.name]
    assert len(profiles) == 1
    kept = saved(profiles[0])
    config = saved(run["run"] / "manifest.json")["config"]
    assert kept["settings"]["batch_size"] == config["batch_size"] == 16  # the run's, not the default 32
    assert "profile kept in the run" in run["profile"].stdout
    report = run["report"]
    summary = table(report, "profile", "summary")
    assert row(summary, "step time, median over windows")[1] == kept["step_ms"]["median"]
    links = section(report, "profile")["links"]
    assert [link["href"] for link in links] == [f"profiles/{profiles[0].stem}-trace.json"]
    assert (folder / f"{profiles[0].stem}-trace.json").is_file()


# ---- --report ---------------------------------------------------------------------------------------


def test_report_writes_the_runs_page_and_keeps_stdout_the_result(run):
    page = run["run"] / "report.html"
    result = run["best-of-n"]
    assert json.loads(result.stdout)["ns"] == [1, 2]  # stdout is still the command's JSON only
    assert result.stderr.strip().splitlines()[-1] == f"report written to {page}"
    text = page.read_text(encoding="utf-8")
    assert 'data-section="feedback"' in text and "best_of_n/" in text


def test_report_is_refused_before_the_work_where_there_is_no_run(run, tmp_path):
    from test_bad_input import snapshot

    before = snapshot(run["run"])
    for args, words in [
        (("profile", "--report", *WINDOW), "give --run RUN"),
        (("profile", "--run", str(run["run"]), "--report", "--", "python", "x.py"), "a script is profiled"),
    ]:
        result = invoke(*args, code=2)
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    pairs = tmp_path / "pairs.jsonl"  # pairs outside any run: labelling them has no run to report on
    shutil.copy(run["run"] / "feedback" / "pairs-24-seed0.jsonl", pairs)
    result = invoke("feedback", "label", str(pairs), "--judge", "rule", "--report", code=2)
    assert "neither the labels nor the pairs are in a run's feedback/ folder" in result.stderr
    assert not list(tmp_path.glob("*labels*"))
    assert snapshot(run["run"]) == before


def test_a_run_that_cannot_take_the_result_gets_a_warning_and_the_output_stands(trained_run, tmp_path):
    """A result that cannot be saved (here a file where the lens folder would be) costs a warning, not the
    command: its output is printed as usual."""
    run = Path(shutil.copytree(trained_run, tmp_path / "run"))
    shutil.rmtree(run / "lens", ignore_errors=True)  # other tests' lens results in the shared run, if they ran first
    (run / "lens").write_text("not a folder")
    result = invoke("lens", str(run), "-p", "the cat", "--plot", str(tmp_path / "l.png"), "--json")
    assert json.loads(result.stdout)["layers"] == ["embed", "0", "1"]
    assert result.stderr.startswith("nanolm: warning: the result was not saved in the run: cannot create")
    assert (run / "lens").read_text() == "not a folder"


def test_seeds_report_writes_each_runs_page_with_the_groups_noise(tmp_path):
    from conftest import TINY

    args = [x for item in TINY for x in ("--set", item)]
    result = invoke(
        "seeds",
        *args,
        "--set",
        "steps=6",
        "--set",
        "eval_every=6",
        "--n",
        "2",
        "--name",
        "g",
        "--runs-dir",
        str(tmp_path),
        "--report",
    )
    runs = sorted(p for p in tmp_path.glob("*-g-seed*") if p.is_dir())
    assert len(runs) == 2
    for run_dir in runs:
        assert f"report written to {run_dir / 'report.html'}" in result.stderr
        page = (run_dir / "report.html").read_text(encoding="utf-8")
        assert 'data-section="seeds"' in page and "finished runs of seed group g" in page


def test_a_summary_without_its_records_shows_its_own_rates_and_a_damaged_one_is_named(run, tmp_path):
    """sycophancy --out elsewhere leaves only the summary in the run: the page shows the rates the command counted.
    A summary or bias report that is not what the section expects drops its part, with a warning naming it."""
    from nanolm.report import build_report

    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("manifest.json", "metrics.jsonl"):
        shutil.copy(run["run"] / name, copy / name)
    (copy / "sycophancy").mkdir()
    shutil.copy(run["run"] / "sycophancy" / "corpus.json", copy / "sycophancy" / "corpus.json")
    (copy / "feedback").mkdir()
    (copy / "feedback" / "cut.json").write_text(json.dumps({"report": {"judge": "rule"}}))
    report = build_report(copy).to_dict()
    summary, _ = run["sycophancy"]
    rates = table(report, "sycophancy", "corpus-json-rates")
    assert row(rates, "accuracy, no opinion")[1:4] == [summary["accuracy"]["none"][k] for k in ("k", "n", "value")]
    assert row(rates, "flip rate")[1:5] == [summary["flip_rate"][k] for k in ("k", "n", "value", "ci")]
    assert report["problems"] == ["AI feedback: feedback/cut.json: no field 'position'"]
