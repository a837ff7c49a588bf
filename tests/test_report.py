"""nanolm report: one self-contained page per run. The page is well-formed HTML (html5lib, strict) with
nothing from outside the run; every number on it equals the --json output's, and those equal the tools'
own outputs (read here from their files, not through the report); a run with no optional artifacts gives
a short page; a damaged artifact drops only its section, with a warning; bad input is one line, exit 2.

The artifacts are made by running the real tools on the session's trained run (quick settings)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

try:
    import html5lib
except ImportError:  # the dev extra's; the tests that parse the page skip without it
    html5lib = None
needs_html5lib = pytest.mark.skipif(html5lib is None, reason="html5lib (the dev extra) is not installed")

TINY_PROFILE = ["n_layer=2", "n_head=2", "d_model=32", "block_size=16", "batch_size=8", "corpus_lines=2000"]


# ---- the run with artifacts, made once per session --------------------------------------------


def invoke(*args: str) -> str:
    """Run a nanolm command in this process; its stdout (it must succeed)."""
    from nanolm.cli import app

    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, (args, result.stderr)
    return result.stdout


def _save(run: Path, kind: str, name: str, text: str) -> None:
    (run / kind).mkdir(exist_ok=True)
    (run / kind / name).write_text(text, encoding="utf-8")


_ARTIFACT_RUNS: dict[Path, Path] = {}  # trained run -> its copy with artifacts: made once per session


def artifact_run(trained_run: Path, where: Path) -> Path:
    """A copy of the trained run with an artifact of each cheap tool, saved where nanolm report reads it:
    lens (show, tuned lens, eval), a probe with an intervention, sycophancy records, an SAE with its eval,
    a steering sweep, and two profiles (the older a planted copy of the newer, twice as slow). Made in
    `where` the first time; later calls (the browser tests) get the same run."""
    if trained_run not in _ARTIFACT_RUNS:
        _ARTIFACT_RUNS[trained_run] = _make_artifact_run(trained_run, where)
    return _ARTIFACT_RUNS[trained_run]


def _make_artifact_run(trained_run: Path, where: Path) -> Path:
    from nanolm.io import atomic_write_json
    from nanolm.profiling.record.session import Window
    from nanolm.profiling.record.training import profile_training

    run = where / trained_run.name
    shutil.copytree(trained_run, run)
    r = str(run)
    _save(run, "lens", "show.json", invoke("lens", r, "--prompt", "the cat sat on the", "--json"))
    invoke("lens", "train", r, "--steps", "5", "--batch", "4")
    _save(run, "lens", "eval.json", invoke("lens", "eval", r, "--batches", "1", "--json"))
    _save(
        run,
        "probes",
        "tense.json",
        invoke("probe", r, "--feature", "tense", "--n", "80", "--intervene", "--random-edits", "19", "--json"),
    )
    (where / "sycophancy.json").write_text(invoke("sycophancy", r, "--n", "30", "--no-knows", "--json"))
    invoke("sae", "train", r, "--layer", "1", "--tokens", "2048", "--batch-size", "256")
    sae = next(p for p in (run / "sae").iterdir() if p.is_dir())
    (sae / "eval.json").write_text(invoke("sae", "eval", str(sae), "--texts", "20", "--json"))
    _save(
        run,
        "steering",
        "sentiment.json",
        invoke(
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
            "--json",
        ),
    )
    (run / "profiles").mkdir()
    report = profile_training(
        TINY_PROFILE, Window(wait=1, warmup=1, active=2, repeat=2), trace=run / "profiles" / "last-trace.json"
    )
    before = report.to_dict()
    before["step_ms"] = {k: 2 * v for k, v in before["step_ms"].items()}  # planted: the older profile, twice as slow
    atomic_write_json(run / "profiles" / "first.json", before)
    os.utime(run / "profiles" / "first.json", (1e9, 1e9))
    atomic_write_json(run / "profiles" / "last.json", report.to_dict())
    return run


@pytest.fixture(scope="module")
def full_run(trained_run, tmp_path_factory):
    return artifact_run(Path(trained_run), tmp_path_factory.mktemp("report-full"))


@pytest.fixture(scope="module")
def full_report(full_run):
    """(the --json output, the page's text) of the run with artifacts."""
    out = invoke("report", str(full_run), "--json")
    return json.loads(out), (full_run / "report.html").read_text(encoding="utf-8")


def copy_run(run: Path, where: Path, *keep: str) -> Path:
    """The run's manifest, metrics and checkpoints, and the named artifact folders, copied to where/run's name."""
    out = where / run.name
    out.mkdir(parents=True)
    for name in ("manifest.json", "metrics.jsonl", "checkpoints", *keep):
        src = run / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, out / name)
    return out


# ---- reading the page -------------------------------------------------------------------------


def parse(page: str):
    """The page as an ElementTree; html5lib in strict mode raises on any parse error."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)


def text_of(element) -> str:
    return "".join(element.itertext())


NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")


def _tolerance(shown: str) -> float:
    """Half a unit in the last place shown: "3.14" -> 0.005, "1.5e+03" -> 50, "7,536" -> 0.5."""
    mantissa, _, exp = shown.partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 0.5 * 10 ** (-decimals + (int(exp) if exp else 0)) * (1 + 1e-9)


def cell_matches(text: str, value) -> bool:
    """Whether a cell's text shows value: numbers to the precision shown (percentages as value × 100),
    pairs as both ends, text as itself, None as "-"."""
    if value is None:
        return text == "-"
    if isinstance(value, bool):
        return text == ("yes" if value else "no")
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, (int, float)) or v is None for v in values):
        return text == str(value)
    shown = NUMBER.findall(text)
    numbers = [v for v in values if v is not None]
    if len(shown) != len(numbers):
        return False
    scale = 100.0 if "%" in text else 1.0
    return all(abs(float(s.replace(",", "")) - v * scale) <= _tolerance(s.replace(",", "")) for s, v in zip(shown, numbers))


def check_tables_match(tables_by_id: dict[str, list[list[str]]], data: dict) -> int:
    """Every table of the --json output is on the page under its id, cell for cell; the cells compared."""
    compared = 0
    for section in data["sections"]:
        for table in section["tables"]:
            tid = f"{section['key']}-{table['key']}"
            assert tid in tables_by_id, f"table {tid} of the JSON is not on the page"
            rows = tables_by_id[tid]
            assert len(rows) == len(table["rows"]), tid
            for shown_row, row in zip(rows, table["rows"]):
                for text, value in zip(shown_row, row):
                    assert cell_matches(text, value), (tid, text, value)
                    compared += 1
    return compared


def page_tables(tree) -> dict[str, list[list[str]]]:
    return {
        t.get("id"): [[text_of(td) for td in tr.findall("td")] for tr in t.find("tbody").findall("tr")]
        for t in tree.iter("table")
    }


def table(data: dict, section: str, key_part: str) -> dict:
    s = next(s for s in data["sections"] if s["key"] == section)
    return next(t for t in s["tables"] if key_part in t["key"])


def field(t: dict, name: str):
    return next(r[1] for r in t["rows"] if r[0] == name)


# ---- the page --------------------------------------------------------------------------------------


@needs_html5lib
def test_page_is_well_formed_and_holds_nothing_from_outside_the_run(full_run, full_report):
    data, page = full_report
    tree = parse(page)  # raises on any parse error
    assert tree.find(".//script") is None and tree.find(".//link") is None and tree.find(".//iframe") is None
    assert tree.find(".//head/meta[@charset]") is not None and tree.find(".//head/meta[@name='viewport']") is not None
    for el in tree.iter():
        for attr in ("src", "href", "srcset", "data", "action", "poster"):
            url = el.get(attr)
            if url is None:
                continue
            assert not re.match(r"^[a-z][a-z0-9+.-]*://", url, re.I), (el.tag, url)  # no http(s)://, file://
            if url.startswith("data:") or url.startswith("#"):
                continue
            assert not url.startswith("/"), url  # no absolute path
            assert (full_run / url).resolve().is_relative_to(full_run.resolve()), url  # a file of the run
            assert (full_run / url).is_file(), url
    css = "".join(text_of(s) for s in tree.iter("style"))
    assert "url(" not in css and "@import" not in css
    assert "<script" not in page.lower() and "javascript:" not in page.lower()
    # every section of the data is on the page, in the same order, and the trace is linked for Perfetto
    assert [s.get("data-section") for s in tree.iter("section")] == [s["key"] for s in data["sections"]]
    links = [a.get("href") for a in tree.iter("a") if not a.get("href").startswith("#")]
    assert links == ["profiles/last-trace.json"]
    assert "ui.perfetto.dev" in text_of(tree.find(".//section[@id='sec-profile']"))
    assert data["problems"] == []


@needs_html5lib
def test_every_number_on_the_page_is_the_json_outputs(full_report):
    data, page = full_report
    expected = {
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
        "provenance",
    }
    assert {s["key"] for s in data["sections"]} == expected
    compared = check_tables_match(page_tables(parse(page)), data)
    assert compared > 300
    figures = [f for s in data["sections"] for f in s["figures"]]
    imgs = list(parse(page).iter("img"))
    assert len(imgs) == len(figures) >= 6  # loss curves, lens (2), probe, SAE density, steering
    assert all(img.get("src").startswith(("data:image/png;base64,", "data:image/svg+xml;base64,")) for img in imgs)


def test_the_json_numbers_are_the_tools_own(full_run, full_report, tmp_path):
    """Each section against the file its tool wrote (or the tool's --json output), read here directly."""
    data, _ = full_report
    manifest = json.loads((full_run / "manifest.json").read_text())
    summary = table(data, "manifest", "summary")
    assert field(summary, "final val loss") == manifest["final"]["val_loss"]
    assert field(summary, "parameters") == manifest["n_params"]
    evals = [json.loads(line) for line in (full_run / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in line]
    assert [(r[0], r[3]) for r in table(data, "curves", "evals")["rows"]] == [(r["step"], r["val_loss"]) for r in evals]

    probe = json.loads((full_run / "probes" / "tense.json").read_text())
    rows = table(data, "probe", "tense")["rows"]
    assert [r[0] for r in rows] == [p["layer"] for p in probe["layers"]]
    assert [r[1] for r in rows] == [p["accuracy"] for p in probe["layers"]]
    assert [r[4] for r in rows] == [p["control_accuracy"] for p in probe["layers"]]
    iv = table(data, "intervention", "tense")
    assert field(iv, "change") == probe["intervention"]["delta"]
    assert field(iv, "verdict") == probe["intervention"]["verdict"]

    lens_eval = json.loads((full_run / "lens" / "eval.json").read_text())
    rows = table(data, "lens", "eval")["rows"]
    assert [r[1] for r in rows] == lens_eval["logit_lens_kl"] and [r[2] for r in rows] == lens_eval["tuned_lens_kl"]

    # sycophancy: the report counts the saved per-question records; the tool's --json counted its answers
    tool = json.loads((full_run.parent / "sycophancy.json").read_text())
    rates = {r[0].split(",")[-1].split(":")[0].strip(): r for r in table(data, "sycophancy", "corpus")["rows"]}
    assert rates["no opinion"][1:3] == [tool["accuracy"]["none"]["k"], tool["accuracy"]["none"]["n"]]
    assert rates["wrong opinion"][1:3] == [tool["accuracy"]["wrong"]["k"], tool["accuracy"]["wrong"]["n"]]
    assert rates["flip rate"][1:3] == [tool["flip_rate"]["k"], tool["flip_rate"]["n"]]
    assert rates["flip rate"][4] == pytest.approx(tool["flip_rate"]["ci"])

    profile = json.loads((full_run / "profiles" / "last.json").read_text())
    assert field(table(data, "profile", "summary"), "step time, median over windows") == profile["step_ms"]["median"]
    phases = table(data, "profile", "phases")["rows"]
    assert [r[1] for r in phases] == [p["ms"]["median"] for p in profile["phases"]]
    assert sum(r[3] for r in phases) == pytest.approx(1.0, abs=1e-6)  # the phases tile the step
    # before / after: the planted older profile took twice as long a step; its spread is doubled too, so the
    # ranges are disjoint only if the step's own spread is narrow: the change itself is exactly -50%
    step = table(data, "profile", "before-after")["rows"][0]
    assert step[0] == "step time (ms)" and step[5] == pytest.approx(-0.5)

    sae_eval = json.loads(next((full_run / "sae").glob("*/eval.json")).read_text())
    sae = next(t for t in next(s for s in data["sections"] if s["key"] == "sae")["tables"] if t["key"].startswith("eval"))
    assert field(sae, "FVU: variance unexplained (about the mean)") == sae_eval["fvu"]
    assert field(sae, "L0: active latents per token") == sae_eval["l0"]

    steer = json.loads((full_run / "steering" / "sentiment.json").read_text())
    rows = table(data, "steering", "sentiment")["rows"]
    assert [r[5] for r in rows] == [steer["unsteered"]["kl"], *(c["kl"] for c in steer["cells"])]


@needs_html5lib
def test_a_run_with_no_optional_artifacts_gives_a_short_page(trained_run, tmp_path, cli):
    run = copy_run(Path(trained_run), tmp_path)
    out = cli("report", str(run), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [s["key"] for s in data["sections"]] == ["results", "manifest", "curves", "provenance"]
    page = (run / "report.html").read_text()
    parse(page)
    assert len(page.encode()) < 200_000
    assert out.stderr == ""


@needs_html5lib
def test_a_damaged_artifact_drops_its_section_with_a_warning_and_the_rest_is_written(full_run, tmp_path, cli):
    run = copy_run(full_run, tmp_path, "lens", "probes", "figures", "steering", "sae", "profiles")
    (run / "lens" / "eval.json").write_text('{"layers": ["embed", ')  # cut short
    (run / "steering" / "sentiment.json").write_text("[1, 2]")  # not an object
    (run / "figures" / "probe-tense.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    (run / "sae" / "sweep-bad.json").write_text(json.dumps({"knob": "l1"}))  # no per_value
    cut = {**json.loads((run / "probes" / "tense.json").read_text()), "layers": [{"layer": "0"}], "intervention": None}
    (run / "probes" / "broken.json").write_text(json.dumps(cut))  # its rows cut
    out = cli("report", str(run), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warnings = out.stderr.strip().splitlines()
    assert len(warnings) == 5 and all(w.startswith("nanolm: warning: ") for w in warnings), warnings
    assert any("probes/broken.json: no field 'n_train'" in w for w in warnings)  # LayerProbe's first field after layer
    assert any("lens/eval.json: not JSON" in w for w in warnings)
    assert any("steering/sentiment.json: not a JSON object" in w for w in warnings)
    assert any("figures/probe-tense.png" in w for w in warnings)
    assert any("sae/sweep-bad.json: no field 'per_value'" in w for w in warnings)
    data = json.loads(out.stdout)
    sections = {s["key"]: s for s in data["sections"]}
    assert sections["steering"]["tables"] == [] and sections["steering"]["errors"]
    assert [t["key"] for t in sections["lens"]["tables"] if "eval" in t["key"]] == []  # the damaged file's table
    assert any("show" in t["key"] for t in sections["lens"]["tables"])  # the rest of the section stays
    assert sections["probe"]["tables"] and not sections["probe"]["figures"]
    page = (run / "report.html").read_text()
    tree = parse(page)
    shown = [text_of(p) for p in tree.iter("p") if text_of(p).startswith("could not be read")]
    assert len(shown) == 5 and any("lens/eval.json" in s for s in shown)
    assert [t["key"] for t in sections["probe"]["tables"]] == ["probes-tense-json"]  # the good file's table stays
    assert {"results", "manifest", "curves", "profile", "probe", "intervention", "sae", "provenance"} <= set(sections)


@needs_html5lib
def test_run_derived_text_is_escaped(full_run, tmp_path, cli):
    run = copy_run(full_run, tmp_path, "probes")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["name"] = '<script>alert("x")</script>'
    (run / "manifest.json").write_text(json.dumps(manifest))
    probe = json.loads((run / "probes" / "tense.json").read_text())
    probe["feature"] = "<img src=http://example.com/x.png>"
    (run / "probes" / "tense.json").write_text(json.dumps(probe))
    assert cli("report", str(run), cwd=tmp_path).returncode == 0
    tree = parse((run / "report.html").read_text())
    assert tree.find(".//script") is None and all(i.get("src").startswith("data:") for i in tree.iter("img"))
    assert '<script>alert("x")</script>' in text_of(tree.find(".//h1"))
    assert any("<img src=http://example.com/x.png>" in text_of(c) for c in tree.iter("caption"))


def test_large_figures_are_downsampled_and_the_page_stays_under_5_mb(trained_run, tmp_path):
    import numpy as np
    from PIL import Image

    from nanolm.report import build_report, write_html

    run = copy_run(Path(trained_run), tmp_path)
    (run / "figures").mkdir()
    rng = np.random.default_rng(0)
    for i in range(5):  # noise does not compress: 5 × ~1.9 MB of PNG
        Image.fromarray(rng.integers(0, 256, (800, 800, 3), dtype=np.uint8)).save(run / "figures" / f"lens-{i}.png")
    Image.new("RGB", (3000, 1500), "white").save(run / "figures" / "lens-0-wide.png")  # first in name order
    report = build_report(run)
    page = write_html(report, run / "report.html")
    figures = report.section("lens").figures
    assert all(max(f.width, f.height) <= 1000 for f in figures)
    wide = next(f for f in figures if f.source == "figures/lens-0-wide.png")
    assert (wide.width, wide.height) == (1000, 500)
    assert page.stat().st_size < 5_000_000
    left_out = [line for line in report.section("lens").lines if "left out to keep the page under 5 MB" in line]
    assert left_out and len(figures) + len(left_out) == 6


@needs_html5lib
def test_compare_sets_config_differences_first_then_shared_measurements_and_before_after(full_run, tmp_path, cli):
    a = copy_run(full_run, tmp_path / "a", "probes", "profiles")
    b = copy_run(full_run, tmp_path / "b", "probes", "profiles")
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["config"]["lr"] = 0.01  # planted: the one config change
    manifest["final"]["val_loss"] -= 0.25
    (b / "manifest.json").write_text(json.dumps(manifest))
    (a / "profiles" / "first.json").unlink()
    (b / "profiles" / "first.json").unlink()
    planted = json.loads((a / "profiles" / "last.json").read_text())
    median = planted["step_ms"]["median"]  # A's step given a narrow spread (a loaded machine's can pass 4×)
    planted["step_ms"] = {"median": median, "min": 0.99 * median, "max": 1.01 * median}
    (a / "profiles" / "last.json").write_text(json.dumps(planted))
    planted["step_ms"] = {k: v / 4 for k, v in planted["step_ms"].items()}  # B's step: 4× faster, ranges disjoint
    (b / "profiles" / "last.json").write_text(json.dumps(planted))
    out = cli("report", "compare", str(a), str(b), "-o", str(tmp_path / "cmp.html"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [s["key"] for s in data["sections"]] == ["config", "measurements", "profile"]
    diff = data["sections"][0]["tables"][0]
    assert diff["rows"] == [["lr", json.loads((a / "manifest.json").read_text())["config"]["lr"], 0.01]]
    shared = {r[0]: r for r in data["sections"][1]["tables"][0]["rows"]}
    assert shared["final val loss"][4] == pytest.approx(-0.25)
    assert shared["final val loss"][6] == "-"  # single runs: no verdict
    assert shared["probe tense: held-out accuracy, layer 1"][4] == 0
    before_after = data["sections"][2]["tables"][0]
    step = before_after["rows"][0]
    assert step[5] == pytest.approx(-0.75) and step[6] == "yes, better"
    assert before_after["caption"].endswith("why: lr: 0.003 → 0.01")
    tree = parse((tmp_path / "cmp.html").read_text())
    check_tables_match(page_tables(tree), data)
    assert [s.get("data-section") for s in tree.iter("section")] == ["config", "measurements", "profile"]


@needs_html5lib
def test_compare_gives_the_noise_aware_verdict_for_seed_groups(tiny, tmp_path, cli):
    """Two seed groups of tiny runs; the verdict on the final val loss is nanolm compare's, from the runs'
    own manifests (2 seeds a side: too few for any verdict but that one)."""
    from nanolm.repro.stats import compare_groups
    from nanolm.train import train

    runs = {}
    for group, lr in (("base", "3e-3"), ("fast", "1e-2")):
        for seed in (1, 2):
            cfg = tiny(
                "steps=20",
                f"lr={lr}",
                "eval_every=20",
                f"seed={seed}",
                f"group={group}",
                "log_every=10",
                name=f"{group}-seed{seed}",
            )
            runs[(group, seed)] = train(cfg, progress=False).run_dir
    out = cli("report", "compare", str(runs[("base", 1)]), str(runs[("fast", 1)]), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    shared = {r[0]: r for r in data["sections"][1]["tables"][0]["rows"]}
    finals = {k: json.loads((p / "manifest.json").read_text())["final"]["val_loss"] for k, p in runs.items()}
    expected = compare_groups([finals[("base", 1)], finals[("base", 2)]], [finals[("fast", 1)], finals[("fast", 2)]])
    assert shared["final val loss"][6] == str(expected.verdict) and shared["final val loss"][6].startswith("too few seeds")
    assert shared["final val loss"][7] == expected.reason
    page = (runs[("base", 1)] / f"compare-{runs[('fast', 1)].name}.html").read_text()
    check_tables_match(page_tables(parse(page)), data)
    # and the run's own page shows its group's noise: mean and spread over the two seeds' manifests
    one = json.loads(invoke("report", str(runs[("base", 1)]), "--json"))
    noise = {r[0]: r for r in table(one, "seeds", "noise")["rows"]}["final val loss"]
    values = [finals[("base", 1)], finals[("base", 2)]]
    assert noise[3] == pytest.approx(sum(values) / 2) and noise[7] == pytest.approx(max(values) - min(values))
    assert noise[4] == pytest.approx(math.sqrt(sum((v - sum(values) / 2) ** 2 for v in values)))


@needs_html5lib
def test_write_report_is_the_library_call_other_commands_use(full_run, tmp_path):
    from nanolm.report import write_report

    run = copy_run(full_run, tmp_path, "lens")
    (run / "lens" / "eval.json").write_text("{")
    problems = []
    page = write_report(run, on_problem=problems.append)
    assert page == run / "report.html" and page.is_file()
    assert len(problems) == 1 and "lens/eval.json" in problems[0]
    parse(page.read_text())


def one_line_error(out) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def test_bad_input(full_run, tmp_path, cli):
    assert "not found" in one_line_error(cli("report", str(tmp_path / "nope"), cwd=tmp_path))
    assert "does not exist" in one_line_error(cli("report", str(full_run), "-o", str(tmp_path / "no" / "r.html"), cwd=tmp_path))
    assert ".html" in one_line_error(cli("report", str(full_run), "-o", str(tmp_path / "r.pdf"), cwd=tmp_path))
    assert "is a folder" in one_line_error(cli("report", str(full_run), "-o", str(tmp_path), cwd=tmp_path))
    assert "not found" in one_line_error(cli("report", "compare", str(full_run), str(tmp_path / "nope"), cwd=tmp_path))
    not_a_run = tmp_path / "folder"
    not_a_run.mkdir()
    assert "not a nanolm run" in one_line_error(cli("report", str(not_a_run), cwd=tmp_path))
    damaged = copy_run(full_run, tmp_path / "damaged")
    (damaged / "manifest.json").write_text("{")
    assert "corrupt manifest" in one_line_error(cli("report", str(damaged), cwd=tmp_path))
    assert not (damaged / "report.html").exists() and not list(tmp_path.glob("*.html"))
    # once as a real process: the same one line and exit code
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "nanolm", "report", str(tmp_path / "nope")], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("nanolm: error: run ")


def test_train_report_writes_the_finished_runs_page(tmp_path, cli):
    from conftest import TINY

    runs = tmp_path / "runs"
    sets = [a for kv in [*TINY, "steps=4", "eval_every=4", f"runs_dir={runs}"] for a in ("--set", kv)]
    r = cli("train", *sets, "--name", "paged", "--quiet", "--report", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run_dir = Path(json.loads(r.stdout)["run_dir"])
    page = run_dir / "report.html"
    assert page.is_file() and f"report written to {page}" in " ".join(r.stderr.split())
    html = page.read_text(encoding="utf-8")
    assert run_dir.name in html and "Loss curves" in html


# ---- the first screen: results first, provenance last --------------------------------------------------


@needs_html5lib
def test_the_page_leads_with_results_and_ends_with_the_provenance_folded(full_run, full_report):
    data, page = full_report
    keys = [s["key"] for s in data["sections"]]
    assert keys[0] == "results" and keys[-1] == "provenance"
    results = data["sections"][0]
    numbers = {n["key"]: n for n in results["numbers"]}
    assert list(numbers) == ["status", "val-loss", "tokens-per-s", "mfu", "verdict"]
    manifest = json.loads((full_run / "manifest.json").read_text())
    final = manifest["final"]
    assert numbers["status"]["value"] == manifest["status"] == "finished"
    assert numbers["val-loss"]["value"] == final["val_loss"]
    assert numbers["val-loss"]["note"].startswith(
        f"{final['val_loss'] / manifest['unigram_entropy']:.0%} of the unigram baseline, {manifest['unigram_entropy']:.4f}"
    )
    assert numbers["tokens-per-s"]["value"] == final["tokens_per_s"]
    newest = json.loads((full_run / "profiles" / "last.json").read_text())  # the planted first.json is older
    assert numbers["mfu"]["value"] == newest["mfu"]["mfu"]
    assert numbers["verdict"]["shown"] == newest["verdict"]["bottleneck"]
    assert numbers["verdict"]["note"] == f"{newest['verdict']['headline']}; profiles/last.json"
    assert [f["key"] for f in results["figures"]] == ["curves-loss"]
    assert all(not s["figures"] for s in data["sections"] if s["key"] in ("manifest", "curves"))  # drawn once

    sections = list(parse(page).iter("section"))
    first = sections[0]
    for n in results["numbers"]:  # each card shows its number as the JSON has it
        assert n["shown"] in text_of(first.find(f".//div[@id='num-{n['key']}']")), n
    assert [img.get("alt") for img in first.iter("img")] == [results["figures"][0]["caption"]]
    details = sections[-1].find("details")  # closed until clicked: no "open"
    assert details is not None and details.get("open") is None
    assert [t.get("id") for t in details.iter("table")] == [
        "provenance-code-and-data",
        "provenance-environment",
        "provenance-config",
    ]
    assert all(s.find("details") is None for s in sections[:-1])


def _run_with_profiles(trained_run: Path, where: Path, **profiles: bytes) -> Path:
    """A copy of the trained run with the given files in profiles/, each newer than the one before."""
    run = copy_run(trained_run, where)
    (run / "profiles").mkdir()
    for i, (name, content) in enumerate(profiles.items()):
        (run / "profiles" / f"{name}.json").write_bytes(content)
        os.utime(run / "profiles" / f"{name}.json", (1e9 + i, 1e9 + i))
    return run


def test_a_gpu_profile_leads_with_its_gate_sentence(trained_run, tmp_path):
    from gpu_trace import reference_example
    from nanolm.io import to_jsonable
    from nanolm.profiling.assemble import AnalyzeOptions, analyze_trace
    from nanolm.report import build_report

    profile = analyze_trace(reference_example(7).build(), AnalyzeOptions(unprofiled_ms=75.0, cores=16))
    run = _run_with_profiles(Path(trained_run), tmp_path, gpu=json.dumps(to_jsonable(profile.to_dict())).encode())
    gate = json.loads((run / "profiles" / "gpu.json").read_text())["gpu"]["gate_sentence"]
    assert gate.startswith("GPU waiting: busy 25.0 ms of the 75.0 ms unprofiled step (33%)")
    numbers = {n.key: n for n in build_report(run).section("results").numbers}
    assert numbers["verdict"].shown == "input-bound" and numbers["verdict"].note == f"{gate}; profiles/gpu.json"


@needs_html5lib
def test_a_damaged_profile_is_named_on_the_page_and_on_stderr(full_run, trained_run, tmp_path, cli):
    good = (full_run / "profiles" / "last.json").read_bytes()
    # the newest profile cut short, an older one readable: the page shows the older one and names the newer
    run = _run_with_profiles(Path(trained_run), tmp_path / "one", older=good, newer=good[:200])
    out = cli("report", str(run), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("nanolm: warning: Profile: profiles/newer.json: not JSON"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    sections = {s["key"]: s for s in json.loads(out.stdout)["sections"]}
    errors = sections["profile"]["errors"]
    assert len(errors) == 1 and errors[0].startswith("profiles/newer.json: not JSON"), errors
    assert sections["profile"]["tables"]  # the older profile's
    verdict = next(n for n in sections["results"]["numbers"] if n["key"] == "verdict")
    assert verdict["note"].endswith("; profiles/older.json (newer, not readable: profiles/newer.json)")
    page = parse((run / "report.html").read_text())
    said = text_of(page.find(".//section[@id='sec-profile']"))
    assert "could not be read: profiles/newer.json: not JSON" in said

    # the only profile is not a profile: the page is written, its profile section says what is wrong
    run = _run_with_profiles(Path(trained_run), tmp_path / "two", only=b'{"target": "x"}')
    out = cli("report", str(run), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "nanolm: warning: Profile: profiles/only.json: not a nanolm profile report: no field 'device'\n"
    sections = {s["key"]: s for s in json.loads(out.stdout)["sections"]}
    assert len(sections["profile"]["errors"]) == 1 and not sections["profile"]["tables"]
    verdict = next(n for n in sections["results"]["numbers"] if n["key"] == "verdict")
    assert verdict["shown"] == "could not be read" and "profiles/only.json" in verdict["note"]
    assert "mfu" not in {n["key"] for n in sections["results"]["numbers"]}
    page = parse((run / "report.html").read_text())
    assert "could not be read: profiles/only.json" in text_of(page.find(".//section[@id='sec-profile']"))


def test_a_wrongly_typed_field_drops_its_files_part_but_a_bug_in_a_section_is_not_called_a_damaged_file(trained_run, tmp_path):
    """A value of the wrong type in one file ("cells": 5) is that file's fault: its part is dropped and named. The
    same TypeError raised by a section's own code, outside any one file, is a bug: build_report raises it."""
    from nanolm.report import SECTIONS, SectionSpec, build_report
    from nanolm.runs import STEERING

    run = copy_run(trained_run, tmp_path)
    STEERING.path(run, "happy.json", create=True).write_text(json.dumps({"cells": 5, "unsteered": {}, "direction": "happy"}))
    report = build_report(run)
    steering = next(s for s in report.sections if s.key == "steering")
    assert steering.tables == [] and len(steering.errors) == 1
    assert steering.errors[0].startswith("steering/happy.json: "), steering.errors  # read as the sweep it is not

    def buggy(run_files, section):
        section.lines.append(len(None))  # a bug, not a file's content

    with pytest.raises(TypeError):
        build_report(run, sections=(*SECTIONS, SectionSpec("buggy", "Buggy", buggy)))


@pytest.mark.parametrize("line", ["[1]", "5", '{"step": 1'])
def test_a_metrics_line_that_is_not_an_object_is_named_and_the_page_is_still_written(trained_run, tmp_path, line):
    """A line of metrics.jsonl that parses but is no object ("[1]") is as damaged as one cut short: the sections
    that read the log name it, the others are built (it once escaped as an AttributeError)."""
    from nanolm.report import build_report

    run = copy_run(trained_run, tmp_path)
    with (run / "metrics.jsonl").open("a") as f:
        f.write(line + "\n")
    report = build_report(run)
    errors = [e for s in report.sections for e in s.errors]
    assert errors and all("metrics.jsonl" in e and "not a JSON object" in e for e in errors), errors
    assert {"manifest", "provenance"} <= {s.key for s in report.sections}
