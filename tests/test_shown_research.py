"""Research claims, seed groups and the profiler's tables are each laid out once and drawn twice: every cell of the
page's table, built from what the command saved (or, for a seed group, from the runs the page reads), is in what
the terminal printed, row after row in order.

Each command runs once, for a person (no --json), on a console wide enough that no row is wrapped or listed. Cells
are compared with their whitespace collapsed."""

from __future__ import annotations

import json

from shown import WIDE, assert_shown, flat, printed

# ---- nanolm claims kv ------------------------------------------------------------------------------------------


def test_the_kv_claim_tables_are_the_pages(kv_run):
    from nanolm.report.sections.research import kv_claim_tables
    from nanolm.research.kv_claims import KvClaimReport

    text = printed(
        "claims", "kv", str(kv_run), "--ranks", "2,4", "--bits", "4", "--groups", "2", "--sequences", "4", "--length", "16"
    )
    saved = json.loads((kv_run / "claims" / "kv.json").read_text(encoding="utf-8"))
    tables = kv_claim_tables(KvClaimReport.from_dict(saved), "claims/kv.json")
    assert [t.key for t in tables] == [
        f"claims-kv-json-{k}" for k in ("compressions", "key-only", "spectra", "spectra-worst-head", "after-softmax", "budgets")
    ]
    for table in tables:
        assert_shown(table, text)
    assert flat(" ".join(saved["accounting"])) in flat(text)  # the bytes' accounting: the table's note


# ---- nanolm seeds ----------------------------------------------------------------------------------------------


def test_the_seed_groups_noise_is_the_pages(tmp_path):
    from conftest import TINY
    from nanolm.report import build_report

    sets = [a for kv in [*TINY, "steps=6", "eval_every=6", "ckpt_every=6"] for a in ("--set", kv)]
    text = printed("seeds", *sets, "--n", "2", "--name", "g", "--executor", "debug", "--runs-dir", str(tmp_path))
    run = next(p for p in sorted(tmp_path.glob("*-g-seed*")) if p.is_dir())
    [noise] = [t for t in build_report(run).section("seeds").tables if t.key == "noise"]
    assert {row[0] for row in noise.rows} >= {"final train loss", "final val loss", "training time", "throughput"}
    assert_shown(noise, text, skip=("this run",))  # the terminal shows a group, not one of its runs


# ---- the profile -----------------------------------------------------------------------------------------------


def test_the_profiles_tables_are_the_pages(tmp_path):
    """A GPU profile (the reference example's trace: findings, host operators) and a before / after: the tables the
    page builds from the saved files, in what print_report and print_comparison print."""
    from rich.console import Console

    from gpu_trace import compute_bound, reference_example
    from nanolm.io import atomic_write_json
    from nanolm.profiling.assemble import AnalyzeOptions, analyze_trace
    from nanolm.profiling.compare import compare_reports, load_report
    from nanolm.profiling.show.tables import comparison_table, findings_table, step_tables
    from nanolm.profiling.show.terminal import print_comparison, print_report

    atomic_write_json(
        tmp_path / "before.json",
        analyze_trace(reference_example(7).build(), AnalyzeOptions(unprofiled_ms=75.0, cores=16)).to_dict(),
    )
    atomic_write_json(tmp_path / "after.json", analyze_trace(compute_bound(9).build(), AnalyzeOptions(cores=16)).to_dict())
    report = load_report(tmp_path / "before.json")  # the page's reading: ProfileReport.from_dict of the file
    console = Console(width=WIDE, record=True)
    print_report(report, console)
    tables = [*step_tables(report), findings_table(report.verdict)]
    assert [t.key for t in tables] == ["phases", "categories", "operators", "findings"]
    text = console.export_text()
    for table in tables:
        assert_shown(table, text)

    comparison = compare_reports(tmp_path / "before.json", tmp_path / "after.json", why="planted")
    console = Console(width=WIDE, record=True)
    print_comparison(comparison, console)
    table = comparison_table(comparison)
    assert table.rows[-1][0] == "verdict" and table.caption.endswith("why: planted")
    assert_shown(table, console.export_text())
