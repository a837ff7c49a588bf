"""Verdicts are enums whose values are the texts every output always showed: JSON, tables and the
profile reports written before the enums (which must still load in `profile compare`)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from nanolm.cli.output import to_jsonable
from nanolm.errors import UserError
from nanolm.profiling.compare import compare_reports, load_report
from nanolm.profiling.report import Bottleneck, CategoryRow, PhaseRow, ProfileReport, Stat, Verdict
from nanolm.profiling.show.terminal import print_comparison, print_report
from nanolm.repro.experiment import Decision, ExperimentVerdict, ScaleVerdict
from nanolm.repro.stats import VERDICTS, compare_groups
from nanolm.repro.stats import Verdict as SeedVerdict


@pytest.mark.parametrize("member", [*SeedVerdict, *Decision, *Bottleneck])
def test_an_enum_member_reads_as_its_text_everywhere(member):
    assert str(member) == f"{member}" == "%s" % member == member.value  # noqa: UP031
    assert json.dumps(member) == json.dumps(member.value) and to_jsonable(member) == member.value
    assert type(member)(member.value) is member


def test_the_texts_are_the_ones_outputs_always_had():
    assert VERDICTS == (
        "better beyond noise",
        "worse beyond noise",
        "within noise: not a result",
        "too few seeds (at least 3 a side)",
    )
    assert SeedVerdict.WORSE_DIVERGED == "worse: diverged" and SeedVerdict.WORSE_DIVERGED not in VERDICTS
    assert [d.value for d in Decision] == ["KEEP", "KILL"]
    assert [b.value for b in Bottleneck] == [
        "input-bound",
        "host-sync-bound",
        "launch/overhead-bound",
        "memory-bound",
        "compute-bound",
        "communication-bound",
    ]
    assert compare_groups([3.21, 3.25, 3.23], [3.22], n_boot=100).verdict is SeedVerdict.TOO_FEW


def test_an_experiment_verdict_prints_its_texts(tmp_path, cli, monkeypatch):
    import nanolm.repro.experiment as experiment

    verdict = ExperimentVerdict(
        "higher lr",
        "close if no effect",
        Decision.KILL,
        "no effect beyond noise at 1 of 2 scales",
        [
            ScaleVerdict("d32", 3.2, 3.0, -0.2, SeedVerdict.BETTER, "all three checks pass"),
            ScaleVerdict("d48", 3.2, None, None, SeedVerdict.WORSE_DIVERGED, "the candidate diverged on seed(s) 2"),
        ],
    )
    monkeypatch.setattr(experiment, "experiment_verdict", lambda path: verdict)
    shown = cli("experiment", "verdict", "exp.toml", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "KILL: no effect beyond noise" in shown.stdout and "better beyond noise" in shown.stdout
    assert "worse: diverged" in shown.stdout and "Decision." not in shown.stdout and "Verdict." not in shown.stdout
    as_json = json.loads(cli("experiment", "verdict", "exp.toml", "--json", cwd=tmp_path).stdout)
    assert as_json["decision"] == "KILL"
    assert [s["verdict"] for s in as_json["scales"]] == ["better beyond noise", "worse: diverged"]


def report(bottleneck: Bottleneck, step_ms: float) -> ProfileReport:
    window = {"wait": 1, "warmup": 1, "active": 3, "repeat": 3}
    return ProfileReport(
        target="nanolm (preset tiny)",
        device="cpu",
        scope="CPU only",
        window=window,
        first_measured_step=3,
        steps_measured=9,
        step_ms=Stat(step_ms, step_ms * 0.98, step_ms * 1.02),
        phases=[PhaseRow("data", Stat(step_ms / 2, step_ms / 2, step_ms / 2), 0.5)],
        categories=[CategoryRow("matmul/GEMM", 10, step_ms / 2, 0.5)],
        top_ops=[],
        ops_per_step=10,
        syncs=[],
        device_busy=None,
        settings={},
        tokens_per_step=None,
        tokens_per_s=None,
        mfu=None,
        verdict=Verdict(bottleneck, "the step waits for data", ["data phase"], ["load data in parallel"]),
    )


def test_a_report_written_before_the_enums_still_loads_and_compares(tmp_path, cli):
    # A report file as nanolm wrote it before: the bottleneck is a plain string in the JSON.
    old = json.loads(json.dumps(report(Bottleneck.INPUT, 100.0).to_dict()))
    assert old["verdict"]["bottleneck"] == "input-bound"
    (tmp_path / "before.json").write_text(json.dumps(old))
    (tmp_path / "after.json").write_text(json.dumps(report(Bottleneck.COMPUTE, 50.0).to_dict()))
    loaded = load_report(tmp_path / "before.json")
    assert loaded.verdict.bottleneck is Bottleneck.INPUT
    comparison = compare_reports(tmp_path / "before.json", tmp_path / "after.json")
    assert (comparison.verdict_before, comparison.verdict_after) == (Bottleneck.INPUT, Bottleneck.COMPUTE)
    out = cli("profile", "compare", "before.json", "after.json", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (json.loads(out.stdout)["verdict_before"], json.loads(out.stdout)["verdict_after"]) == ("input-bound", "compute-bound")
    console = Console(record=True, width=200)
    print_comparison(comparison, console)
    print_report(loaded, console)
    text = console.export_text()
    assert "input-bound" in text and "compute-bound" in text and "Verdict: input-bound" in text
    assert "Bottleneck." not in text


def test_a_report_without_a_verdict_compares_as_a_dash(tmp_path):
    bare = report(Bottleneck.INPUT, 100.0)
    bare.verdict = None
    (tmp_path / "a.json").write_text(json.dumps(bare.to_dict()))
    assert compare_reports(tmp_path / "a.json", tmp_path / "a.json").verdict_before == "-"


def test_a_report_with_an_unknown_bottleneck_is_not_a_report(tmp_path):
    bad = report(Bottleneck.INPUT, 100.0).to_dict()
    bad["verdict"]["bottleneck"] = "gremlin-bound"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(UserError, match="not a nanolm profile report"):
        load_report(tmp_path / "bad.json")
