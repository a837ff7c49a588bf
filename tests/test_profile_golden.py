"""The profiler's behaviour held still: every report, comparison, expectation, isolation and merged-ranks result
the profiler makes from recorded input, as JSON and as the terminal prints it, byte for byte against a golden copy
in tests/fixtures/golden/profile/ made before the profiler's package was rebuilt (issue 37).

This is not where a number is shown correct (the tests beside each stage check those against hand-worked values and
HTA); it is what says a move changed nothing. A deliberate change of a figure (a bug fixed) rewrites the copies:

    NANOLM_GOLDEN=write .venv/bin/python -m pytest -q tests/test_profile_golden.py

and the commit says which figures moved and why.

Inputs: the two recorded H200 traces (tests/fixtures/gpu), four real traces from HTA's test data (an 8-GPU job's
ranks 0 and 1, an AMD MI250 run, a 5-step V100 training run of 216k events: tests/fixtures/hta), the three planted
GPU scenarios (tests/gpu_trace.py), a CPU trace and two reports recorded by ``nanolm profile`` on this machine
(tests/fixtures/cpu)."""

from __future__ import annotations

import difflib
import io
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_trace import compute_bound, launch_bound, reference_example

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures")  # relative: the reports name their trace by the path they were given
GOLDEN = ROOT / FIXTURES / "golden" / "profile"
WRITE = os.environ.get("NANOLM_GOLDEN") == "write"
WIDTH = 100  # the terminal's width the text copies are drawn at


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", str(WIDTH))


def _console():
    from rich.console import Console

    from nanolm.layout import fitting

    return fitting(
        Console(file=io.StringIO(), width=WIDTH, color_system=None, force_terminal=False, legacy_windows=False, record=True)
    )


def _text(draw: Callable) -> str:
    console = _console()
    draw(console)
    return console.export_text()


def _json(obj) -> str:
    from nanolm.io import to_jsonable

    return json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n"


def _hold(name: str, produced: str) -> None:
    """produced equals the golden copy `name` (written instead when NANOLM_GOLDEN=write)."""
    path = GOLDEN / name
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(produced, encoding="utf-8")
        return
    assert path.exists(), f"no golden copy {path}: write it with NANOLM_GOLDEN=write (module docstring)"
    golden = path.read_text(encoding="utf-8")
    if produced != golden:
        diff = "".join(difflib.unified_diff(golden.splitlines(True), produced.splitlines(True), "golden", "now", n=1))
        pytest.fail(f"{name} differs from its golden copy:\n{diff[:6000]}")


# ---- the recorded traces: profile analyze ---------------------------------------------------------------


def _options(**given):
    from nanolm.profiling.assemble import AnalyzeOptions

    return AnalyzeOptions(**given)


def _truth(path: Path, **given):
    from nanolm.profiling.assemble import options_from_truth, read_truth

    return options_from_truth(read_truth(path), _options(**given))


GPU = FIXTURES / "gpu"
HTA = FIXTURES / "hta"
CPU = FIXTURES / "cpu"
TRACES: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
    # name: (the trace as analyze_trace takes it, the options)
    "seed_example": (lambda: GPU / "seed_example.trace.json.gz", lambda: _truth(GPU / "seed_example.truth.json")),
    "gpt2_compiled": (lambda: GPU / "gpt2_compiled.trace.json.gz", lambda: _truth(GPU / "gpt2_compiled.truth.json")),
    "gpt2_compiled_bare": (lambda: GPU / "gpt2_compiled.trace.json.gz", lambda: _options()),
    "hta_rank0": (lambda: HTA / "sampled_rank-0.json.gz", lambda: _options()),
    "hta_rank1": (lambda: HTA / "sampled_rank-1.json.gz", lambda: _options(group=1)),
    "hta_mi250": (lambda: HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", lambda: _options(group=1)),
    "hta_resolver": (lambda: HTA / "df_index_resolver.json.gz", lambda: _options(group=1)),
    "planted_reference": (lambda: reference_example(9).build(), lambda: _options()),
    "planted_launch": (lambda: launch_bound(9).build(), lambda: _options(cores=8)),
    "planted_compute": (
        lambda: compute_bound(9).build(),
        lambda: _options(
            unprofiled_ms=40.0,
            matmul_flops=2.0e13,
            peak_tflops=800.0,
            tokens_per_step=16384,
            settings={"num_workers": 4, "pin_memory": True},
        ),
    ),
    "cpu_trace": (lambda: CPU / "tiny_train.trace.json.gz", lambda: _options()),
    "cpu_trace_clocked": (
        lambda: CPU / "tiny_train.trace.json.gz",
        lambda: _options(group=2, unprofiled_ms=9.5, cores=2, tokens_per_step=256),
    ),
}


def analyzed(name: str):
    from nanolm.profiling.assemble import analyze_trace

    source, options = TRACES[name]
    return analyze_trace(source(), options())


@pytest.mark.parametrize("name", sorted(TRACES))
def test_analyze_is_as_it_was(name):
    from nanolm.profiling.show.terminal import print_report

    report = analyzed(name)
    _hold(f"analyze-{name}.json", _json(report.to_dict()))
    _hold(f"analyze-{name}.txt", _text(lambda c: print_report(report, c)))


def test_the_command_writes_the_same_report(tmp_path, capfd):
    """`nanolm profile analyze TRACE --truth T --json F` writes what analyze_trace returns (the golden copy)."""
    from nanolm.cli import main

    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "profile",
                "analyze",
                str(GPU / "seed_example.trace.json.gz"),
                "--truth",
                str(GPU / "seed_example.truth.json"),
                "--json",
                str(out),
            ]
        )
    assert exc.value.code == 0, capfd.readouterr().err
    _hold("analyze-seed_example.json", json.dumps(json.loads(out.read_text()), indent=2) + "\n")


# ---- reports nanolm profile recorded: read back and printed --------------------------------------------

REPORTS = {"cpu_live": CPU / "tiny_train.report.json", "cpu_live_isolate_expect": CPU / "tiny_isolate_expect.report.json"}


def recorded(name: str):
    from nanolm.profiling.compare import load_report

    return load_report(REPORTS[name])


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_a_recorded_report_reads_back_and_prints_as_it_did(name):
    from nanolm.profiling.show.terminal import print_report

    report = recorded(name)
    _hold(f"report-{name}.json", _json(report.to_dict()))
    _hold(f"report-{name}.txt", _text(lambda c: print_report(report, c)))


# ---- profile compare ----------------------------------------------------------------------------------

PAIRS = [
    ("planted_launch", "planted_compute"),
    ("gpt2_compiled_bare", "gpt2_compiled"),
    ("hta_rank0", "hta_rank1"),
    ("cpu_trace", "cpu_live"),
    ("cpu_live", "cpu_live_isolate_expect"),
]


@pytest.mark.parametrize(("before", "after"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_compare_is_as_it_was(before, after, tmp_path):
    from nanolm.profiling.compare import compare_reports, log_row
    from nanolm.profiling.show.terminal import print_comparison

    paths = []
    for name in (before, after):
        report = recorded(name) if name in REPORTS else analyzed(name)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report.to_dict()))
        paths.append(path)
    comparison = compare_reports(*paths, why="golden")
    comparison = replace(comparison, before=before, after=after)  # the tmp paths would differ run to run
    _hold(f"compare-{before}-{after}.json", _json(comparison))
    _hold(f"compare-{before}-{after}.txt", _text(lambda c: print_comparison(comparison, c)) + log_row(comparison))


# ---- --expect, --isolate, --nproc: their stages on recorded reports ------------------------------------

EXPECTED = [
    ("cpu_live", {"tokens_per_s": 50_000.0}),
    ("cpu_live", {"mfu": 0.5}),
    ("cpu_live", {"mfu": 0.05}),
    ("cpu_trace_clocked", {"tokens_per_s": 40_000.0}),
    ("planted_compute", {"tokens_per_s": 500_000.0}),
]


@pytest.mark.parametrize(("name", "given"), EXPECTED, ids=[f"{n}-{'-'.join(map(str, g.values()))}" for n, g in EXPECTED])
def test_expect_is_as_it_was(name, given):
    from nanolm.profiling.judge.expect import Expected, expectation
    from nanolm.profiling.show.terminal import print_report

    report = recorded(name) if name in REPORTS else analyzed(name)
    report = replace(report, expectation=expectation(report, Expected(**given)))
    key = f"{name}-{'-'.join(f'{k}{v:g}' for k, v in given.items())}"
    _hold(f"expect-{key}.json", _json(report.expectation))
    _hold(f"expect-{key}.txt", _text(lambda c: print_report(report, c)))


ISOLATIONS = {  # step ms, loader (median, min, max) or None, model (median, min, max), between-steps ms
    "input_bound": (50.0, (46.0, 45.0, 48.0), (3.0, 2.9, 3.2), None),
    "model_bound": (20.0, (0.4, 0.3, 0.5), (18.5, 18.0, 19.0), None),
    "neither": (30.0, (6.0, 5.5, 6.5), (8.0, 7.5, 8.5), None),
    "no_loader_between": (25.0, None, (5.0, 4.8, 5.3), 19.0),
    "no_loader": (25.0, None, (21.0, 20.0, 22.0), None),
}


@pytest.mark.parametrize("name", sorted(ISOLATIONS))
def test_isolation_is_as_it_was(name):
    from nanolm.profiling.record.isolate import _isolation
    from nanolm.profiling.report import Stat
    from nanolm.profiling.show.terminal import print_report

    step, loader, model, between = ISOLATIONS[name]
    isolation = _isolation(
        step,
        (Stat(*loader), "the loader, alone") if loader else None,
        (Stat(*model), "the model"),
        "the script has no DataLoader",
        between,
    )
    report = replace(recorded("cpu_live"), isolation=isolation)
    _hold(f"isolate-{name}.json", _json(isolation))
    _hold(f"isolate-{name}.txt", _text(lambda c: print_report(report, c)))


RANKS = {
    "hta_ranks": ["hta_rank0", "hta_rank1"],
    "planted_straggler": ["planted_compute", "planted_launch"],
    "cpu_three": ["cpu_trace", "cpu_live", "cpu_trace_clocked"],
}


@pytest.mark.parametrize("name", sorted(RANKS))
def test_merged_ranks_are_as_they_were(name):
    from nanolm.profiling.judge.ranks import merge_ranks
    from nanolm.profiling.show.terminal import print_ranks_report

    reports = [recorded(n) if n in REPORTS else analyzed(n) for n in RANKS[name]]
    merged = merge_ranks(reports, f"golden {name}")
    _hold(f"ranks-{name}.json", _json(merged.to_dict()))
    _hold(f"ranks-{name}.txt", _text(lambda c: print_ranks_report(merged, c)))
