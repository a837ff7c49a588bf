"""The demo's arithmetic check against planted answers: it counts exactly the facts a model gets right,
reads each prompt at a line's start, and names what the model has not learned. And what the demo and the
profile report print, read in an 80-column terminal: no table cell broken into more than 3 lines (a table too
wide becomes a list of its rows, with the same words); the demo keeps its profile in its run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nanolm.corpus import arithmetic_facts, corpus_words
from nanolm.demo import check_arithmetic
from nanolm.tokenizers import WordTokenizer


class PlantedModel(torch.nn.Module):
    """Answers the first `n_right` facts right and the others with "zero" (or "one" where zero is right);
    records what it was asked."""

    def __init__(self, tok: WordTokenizer, n_right: int) -> None:
        super().__init__()
        self.tok, self.seen = tok, []
        self.weight = torch.nn.Parameter(torch.zeros(1))  # a device to read
        facts = arithmetic_facts()
        self.answer = {}
        for i, f in enumerate(facts):
            wrong = "one" if f.answer == "zero" else "zero"
            self.answer[tuple(tok.encode(f.prompt))] = tok.encode(f.answer if i < n_right else wrong)[0]

    def forward(self, x: torch.Tensor):
        self.seen.append(x.clone())
        logits = torch.zeros(x.shape[0], x.shape[1], self.tok.vocab_size)
        for b, row in enumerate(x.tolist()):
            logits[b, -1, self.answer[tuple(row[1:])]] = 1.0
        return logits, None


def test_counts_exactly_the_planted_right_answers():
    tok = WordTokenizer(corpus_words())
    facts = arithmetic_facts()
    two_plus_two = next(i for i, f in enumerate(facts) if f.prompt == "two plus two equals")
    for n_right in (0, two_plus_two, two_plus_two + 1, len(facts)):
        model = PlantedModel(tok, n_right)
        check = check_arithmetic(model, tok)
        assert (check.facts, check.right) == (217, n_right)
        assert check.accuracy == n_right / 217
        assert check.example[:2] == ("two plus two equals", "four")
        assert (check.example[2] == "four") == (two_plus_two < n_right)
        assert len(check.wrong_examples) == min(5, 217 - n_right)
        assert all(want != got for _, want, got in check.wrong_examples)
        [x] = model.seen
        assert (x[:, 0] == tok.eos_id).all()  # every prompt read after <eos>, as training lines are


# ---- 80 columns -----------------------------------------------------------------------------------------

DEMO_SMALL = [
    "n_layer=2",
    "n_head=2",
    "d_model=32",
    "block_size=16",
    "batch_size=8",
    "corpus_lines=2000",
    "steps=120",
    "eval_every=40",
]
CONTENT, MOST = "│┃", 3  # a boxed table's cell lines start with one of these; a cell may wrap into MOST lines
_DEMO: dict[str, tuple[Path, str]] = {}


def ruled(mp: pytest.MonkeyPatch) -> None:
    """Every rich Table made from now on has a rule between its rows, so each row's height can be read off the text."""
    from rich.table import Table

    init = Table.__init__

    def ruled_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.show_lines = True

    mp.setattr(Table, "__init__", ruled_init)


def tall_rows(text: str) -> list[list[str]]:
    """Each row of a boxed table in `text` taller than MOST lines: one of its cells is broken into more lines."""
    tall, row = [], []
    for line in [*text.splitlines(), ""]:
        if line.lstrip()[:1] in CONTENT and line.strip():
            row.append(line)
            continue
        if len(row) > MOST:
            tall.append(row)
        row = []
    return tall


def words(text: str) -> str:
    """The text with its line breaks and indents as single spaces (a wrapped sentence reads as written)."""
    return " ".join(text.split())


def demo_at_80_columns(where: Path) -> tuple[Path, str]:
    """`nanolm demo` on a smaller model (seconds, not minutes) at COLUMNS=80, its tables ruled between rows:
    (its run, what it printed). Made once per session; the report's browser test opens the same run's page."""
    if "run" not in _DEMO:
        from click.testing import CliRunner

        from nanolm.cli import app

        runs = where / "runs"
        sets = [a for kv in [*DEMO_SMALL, f"runs_dir={runs}"] for a in ("--set", kv)]
        with pytest.MonkeyPatch.context() as mp:
            ruled(mp)
            result = CliRunner().invoke(app, ["demo", *sets], env={"COLUMNS": "80"}, catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        [run] = [p for p in runs.iterdir() if (p / "manifest.json").is_file()]
        _DEMO["run"] = (run, result.stdout)
    return _DEMO["run"]


def test_a_too_wide_table_becomes_a_list_with_the_same_words():
    """The check finds a planted table whose long cells wrap a word a line at 80 columns; the CLI's console
    prints the same table as a list, every word kept, and leaves a table that fits as it is."""
    from rich.console import Console
    from rich.table import Table

    from nanolm.layout import fitting

    long = "load data in parallel: DataLoader(num_workers=4), and move heavy per-item work out of __getitem__"
    texts = []
    for console in (Console(width=80, record=True), fitting(Console(width=80, record=True))):
        with pytest.MonkeyPatch.context() as mp:
            ruled(mp)
            table = Table(title="findings")
            for col in ("#", "finding", "fix", "ms/step", "share", "step if fixed", "faster"):
                table.add_column(col)
            table.add_row("1", "input-bound: waiting for the DataLoader", long, "12.5", "45%", "6.9 ms", "1.81×")
            small = Table(title="small")
            small.add_column("phase")
            small.add_column("ms/step")
            small.add_row("forward", "1.25")
            console.print(table)
            console.print(small)
        texts.append(console.export_text())
    plain, fitted = texts
    assert len(tall_rows(plain)) == 1  # the planted row, as rich wraps it in 7 columns
    assert tall_rows(fitted) == [] and all(len(line) <= 80 for line in fitted.splitlines())
    assert f"fix: {long}" in words(fitted) and "step if fixed: 6.9 ms" in words(fitted) and "faster: 1.81×" in fitted
    assert "┃ phase   ┃ ms/step ┃" in fitted  # a table that fits stays a table


def test_the_demo_reads_at_80_columns_and_keeps_its_profile_in_the_run(tmp_path_factory):
    from nanolm.profiling.report import ProfileReport

    run, text = demo_at_80_columns(tmp_path_factory.mktemp("demo"))
    assert tall_rows(text) == [], "\n\n".join("\n".join(r) for r in tall_rows(text))
    assert all(len(line) <= 80 for line in text.splitlines())
    [kept] = [p for p in (run / "profiles").glob("*.json") if "trace" not in p.name]  # as `profile --run RUN` keeps it
    assert (run / "profiles" / f"{kept.stem}-trace.json").is_file()
    report = ProfileReport.from_dict(json.loads(kept.read_text()))
    assert report.problems() == [] and report.verdict is not None and report.verdict.findings
    shown = words(text)
    for f in report.verdict.findings:  # every finding's words are printed, in 80 columns
        assert f"{f.bottleneck.value}: {f.what}" in shown and words(f.fix or f.no_fix_left or "-") in shown
    assert f"trace written to {kept.parent / kept.stem}-trace.json".replace(" ", "") in "".join(text.split())


def test_the_profile_report_reads_at_80_columns_and_is_a_table_when_wide(tmp_path):
    """A GPU report (the reference example's trace), two ranks side by side, and a before / after comparison."""
    from rich.console import Console

    from gpu_trace import compute_bound, launch_bound, reference_example
    from nanolm.io import atomic_write_json
    from nanolm.profiling.assemble import AnalyzeOptions, analyze_trace
    from nanolm.profiling.compare import compare_reports
    from nanolm.profiling.judge.ranks import merge_ranks
    from nanolm.profiling.show.terminal import print_comparison, print_ranks_report, print_report

    gpu = analyze_trace(reference_example(7).build(), AnalyzeOptions(unprofiled_ms=75.0, cores=16))
    ranks = merge_ranks(
        [
            analyze_trace(launch_bound(7).build(), AnalyzeOptions(cores=16)),
            analyze_trace(compute_bound(9).build(), AnalyzeOptions(cores=16)),
        ],
        "two ranks",
    )
    atomic_write_json(tmp_path / "before.json", gpu.to_dict())
    atomic_write_json(tmp_path / "after.json", ranks.reports[1].to_dict())
    texts = {}
    for width in (80, 200):
        console = Console(width=width, record=True)
        with pytest.MonkeyPatch.context() as mp:
            ruled(mp)
            print_report(gpu, console)
            print_ranks_report(ranks, console)
            print_comparison(compare_reports(tmp_path / "before.json", tmp_path / "after.json", why="planted"), console)
        texts[width] = console.export_text()
    narrow, wide = texts[80], texts[200]
    assert tall_rows(narrow) == [], "\n\n".join("\n".join(r) for r in tall_rows(narrow))
    assert all(len(line) <= 80 for line in narrow.splitlines())
    assert "┃ # ┃ finding" in wide and "┃ # ┃ finding" not in narrow  # the findings: a table when wide, a list here
    for f in gpu.verdict.findings:  # the list holds the table's words
        assert f"{f.bottleneck.value}: {f.what}" in words(narrow) and words(f.fix or f.no_fix_left or "-") in words(narrow)
    assert narrow.splitlines()[0].startswith("GPU waiting: busy 25.0 ms of the 75.0 ms unprofiled step (33%)")
