"""``nanolm feedback bias``: the judge-bias report on labels made anywhere (nanolm's label rows, the generic JSONL,
FastChat MT-Bench pairwise judgments, TRL preference rows). A thin click command over nanolm.alignment.judgments
and nanolm.alignment.judgment_bias; heavy imports inside."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import FEEDBACK
from .feedback import print_bias_tables, run_of_feedback_file
from .output import check_report, console, emit, json_option, report_option, save_result, warn, write_run_report

if TYPE_CHECKING:
    from ..alignment.judge_bias import BiasReport

FORMAT_CHOICES = ("auto", "nanolm", "pairs", "mt-bench", "trl")


def saved_path(judgments: Path) -> Path:
    """Where the report is saved: beside the judgments, JUDGMENTS.bias.json (in RUN/feedback/, nanolm report shows it)."""
    return judgments.with_name(judgments.name.removesuffix(".jsonl") + ".bias.json")


@click.command("bias")
@click.argument("judgments_file", metavar="JUDGMENTS", type=click.Path(path_type=Path))
@click.option(
    "--answers",
    "answers",
    multiple=True,
    type=click.Path(path_type=Path),
    help="MT-Bench: FastChat's model_answer/ folder or answer files (repeatable), for the answers' lengths.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMAT_CHOICES),
    default="auto",
    show_default=True,
    help="The judgments' format (auto: told by the first line's fields).",
)
@click.option("--judge", "judge", metavar="NAME", help="The judge to report on, when the file holds several.")
@json_option
@report_option
def bias(judgments_file: Path, answers: tuple[Path, ...], fmt: str, judge: str | None, json_out: bool, report: bool) -> None:
    """The biases of a judge whose labels were made anywhere: position, length, agreement, self-preference, truth.

    \b
    Formats (docs/feedback.md has their fields):
      nanolm    the label rows `nanolm feedback label` writes (both orders already averaged)
      pairs     one judgment per line: pair_id, answer_a/answer_b (or length_a/length_b), first ("a"/"b"),
                choice ("A"/"B"/"tie", the position preferred) or p_first; optional correct, user_opinion,
                model_a, model_b, judge, criterion
      mt-bench  FastChat's pairwise judgments (g1_winner, g2_winner: the two orders); --answers for lengths
      trl       prompt, chosen, rejected, with chosen_first (the order) and optional pair_id, judge, *_meta
    Each measure comes with its 95% CI and n; what the data cannot give is said with its counts. The report (the
    --json output) is saved beside JUDGMENTS as JUDGMENTS.bias.json; in RUN/feedback/, nanolm report shows it.
    """
    from ..alignment.judgment_bias import bias_report
    from ..alignment.judgments import read_judgments
    from ..io import check_writable_file

    out = saved_path(judgments_file)
    run_dir = run_of_feedback_file(judgments_file)
    check_report(report, run_dir, f"the judgments are not in a run's {FEEDBACK.folder}/ folder (RUN/{FEEDBACK.folder}/)")
    judgments = read_judgments(judgments_file, fmt, answers, judge)
    result = bias_report(judgments)
    as_json = {
        "report": result,
        "judgments_path": judgments_file,
        "format": judgments.format,
        "judgments": len(judgments.judgments),
        "answers": list(answers),
    }
    try:
        save_result(check_writable_file(out, "the report", "x.bias.json"), as_json)
    except UserError as e:
        warn(f"the report was not saved beside the judgments: {e}")
        out = None
    emit(result, lambda r: _print(r, as_json, out), json_out, as_json=as_json)
    if report and out is not None:
        write_run_report(run_dir)


def _print(report: BiasReport, as_json: dict, out: Path | None) -> None:
    from rich.markup import escape

    con = console()
    print_bias_tables(as_json)
    for c in report.coverage:
        con.print(escape(str(c)), highlight=False)
    con.print(
        escape(
            f"Position offset: {report.position.offset_method}. Length, agreement and self-preference in "
            "logits: a logistic model of the choice (" + report.length.method + "), pair-clustered 95% "
            "intervals; win rates count a tie as half."
        ),
        highlight=False,
    )
    for note in report.notes:
        con.print(escape(f"note: {note}"), highlight=False)
    if out is not None:
        con.print(escape(f"report saved to {out}"), highlight=False)
