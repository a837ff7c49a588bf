"""``nanolm sycophancy``: a thin click command over nanolm.alignment. Heavy imports happen inside."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import SYCOPHANCY
from .output import (
    SEED,
    OutputFile,
    check_report,
    console,
    count,
    emit,
    fewer_than_asked,
    given_on_command_line,
    json_option,
    report_option,
    runs_dir_option,
    save_run_result,
    warn,
    working,
    write_run_report,
)

if TYPE_CHECKING:
    from ..alignment.sycophancy import SycophancyResult
    from ..interp.view import ModelView

MAX_QUESTIONS = 100_000  # questions asked (200 by default), each twice and probed


@click.command()
@click.argument("model", metavar="RUN_OR_PATH")
@click.option(
    "--data",
    "data_file",
    type=click.Path(path_type=Path),
    help="Questions as JSONL: sycophancy-eval (answer.jsonl, are_you_sure.jsonl), Perez et al. "
    "(answer_matching_behavior), or nanolm rows {question, choices, correct}. Default: the corpus's own.",
)
@click.option(
    "--n", "n", type=count(MAX_QUESTIONS, "questions asked here"), default=200, show_default=True, help="Questions to ask."
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Which of the corpus's questions, and the probe's folds.")
@click.option(
    "--corpus-version",
    type=click.Choice(["1", "2"]),
    help="The corpus whose questions to ask (default: the one the run trained on; 2 for other models).",
)
@click.option(
    "--knows/--no-knows",
    default=True,
    show_default=True,
    help="Also probe the residual stream: did the model know the answer it gave up?",
)
@click.option(
    "--steer-layer",
    help="Also steer with the opinion-following direction (CAA: user's option minus correct "
    "option, built from other questions) at this layer, and measure again at each α.",
)
@click.option(
    "--steer-alphas",
    default="-0.5,-0.25,0,0.25,0.5",
    show_default=True,
    help="The α of --steer-layer (α = 1 adds a vector as long as the mean residual).",
)
@click.option(
    "--out",
    type=OutputFile("sycophancy.jsonl", ".jsonl"),
    help="Per-question results (default: RUN/sycophancy/<questions>.jsonl; none for a model folder).",
)
@runs_dir_option
@json_option
@report_option
def sycophancy(
    model: str,
    data_file: Path | None,
    n: int,
    seed: int,
    corpus_version: str | None,
    knows: bool,
    steer_layer: str | None,
    steer_alphas: str,
    out: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Does the model agree with the user against the facts? Flip rate, "are you sure?", knows vs says.

    \b
    nanolm sycophancy RUN                     the corpus's questions, planted rates beside the measured ones
    nanolm sycophancy RUN --data answer.jsonl sycophancy-eval's records (or Perez et al.'s, or nanolm's)

    Answers are the option with the highest log-probability at the answer position (nothing sampled).
    Flip rate = answers flipped to wrong by a wrong opinion / answers correct without an opinion.
    On a nanolm run, the summary (the --json output: rates, knows vs says, steering) is saved beside the
    per-question records as RUN/sycophancy/NAME.json, for nanolm report.
    """
    from ..alignment.questions import corpus_questions, read_questions
    from ..alignment.sycophancy import measure, planted_for_run, write_records
    from ..interp.view import load_view

    if data_file is not None and corpus_version is not None:
        raise UserError("--corpus-version picks the corpus's questions; with --data the file's are asked instead")
    view = load_view(model, runs_dir)
    check_report(report, view.run_dir)
    trained_on = planted_for_run(view)
    short: list[str] = []
    if data_file is not None:
        qs = read_questions(data_file, n)
        if given_on_command_line("n"):  # the default asks a file's questions, up to 200
            source, fix = f"--data {data_file}", "give a file with more questions"
            short = fewer_than_asked("--n", n, qs.available, source, "scorable questions", "asked all of them", fix)
    else:
        version = int(corpus_version) if corpus_version else (trained_on or 2)
        qs = corpus_questions(n, seed, version)
        if trained_on != version:  # the planted rates are those of the corpus the model learned from
            qs.planted = {}
    alphas = _steer_alphas(steer_alphas) if steer_layer is not None else []
    if steer_layer is not None:
        view.resid_name(steer_layer)  # the model's layers, before any work
    out = out if out is not None else _default_out(view, data_file)
    with working(f"asking {len(qs.questions)} questions under each condition"):
        result = measure(view, qs, knows=knows, seed=seed)
    steering = None
    if steer_layer is not None:
        from ..alignment.opinion_steering import steer_flip_rate

        # The direction from other questions than the measured ones: the corpus's of another seed, or the file's own.
        direction_qs = qs if data_file is not None else corpus_questions(n, seed + 1, version)
        with working(f"steering at layer {steer_layer}: {len(alphas)} values of α"):
            steering = steer_flip_rate(view, qs, direction_qs, steer_layer, alphas)
    replaced = out is not None and out.exists()
    if out is not None:
        write_records(out, result)
        if replaced:
            warn(f"replaced {out}")
    summary = {**result.summary(), "records_path": out}
    if steering is not None:
        from dataclasses import asdict

        summary["steering"] = asdict(steering)
    save_run_result(view.run_dir, SYCOPHANCY, _summary_name(view, data_file, out), summary)

    emit(result, lambda r: _print(r, summary, out), json_out, short, as_json=summary)
    if report:
        write_run_report(view.run_dir)


def _summary_name(view: ModelView, data_file: Path | None, out: Path | None) -> str:
    """The summary's name in RUN/sycophancy/: the records' when they are there too (NAME.jsonl beside NAME.json),
    else the default records' (the questions file's stem, or "corpus")."""
    if out is not None and view.run_dir is not None and out.parent.resolve() == SYCOPHANCY.dir(view.run_dir).resolve():
        return out.stem
    return data_file.stem if data_file else "corpus"


def _steer_alphas(text: str) -> list[float]:
    from ..interp.steering import parse_alpha

    alphas = [parse_alpha(t.strip(), "--steer-alphas") for t in text.split(",") if t.strip()]
    if not alphas:
        raise UserError("--steer-alphas: give a list such as -0.5,0,0.5")
    return alphas


def _default_out(view: ModelView, data_file: Path | None) -> Path | None:
    if view.run_dir is None:
        return None
    return SYCOPHANCY.path(view.run_dir, f"{data_file.stem if data_file else 'corpus'}.jsonl", create=True)


def _pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def _headline(result: SycophancyResult) -> str | None:
    """The reference document's sentence, with this model's numbers."""
    none, wrong, flip = result.accuracy.get("none"), result.accuracy.get("wrong"), result.flip_rate
    if none is None or wrong is None or flip is None:
        return None
    return (
        f"{none.n} questions: right on {none.k} without an opinion; with a wrong user opinion right on {wrong.k}: "
        f"{flip.k} of {flip.n} flipped, flip rate {_pct(flip.value)} (95% CI {_pct(flip.ci[0])}–{_pct(flip.ci[1])})."
    )


def _print(result: SycophancyResult, summary: dict, out: Path | None) -> None:
    """The summary's tables, as the run's page lays them out (nanolm.report.sections.alignment), with the sentences
    that read them."""
    from rich.markup import escape

    from ..io import to_jsonable
    from ..report.sections.alignment import (
        knows_table,
        opinion_steering_table,
        read_sycophancy_summary,
        sycophancy_probabilities_table,
        sycophancy_rates_table,
    )
    from ..tables import to_rich

    con = console()
    # the summary as it is saved, read back: what the page builds the same tables from
    saved, steered = read_sycophancy_summary(to_jsonable(summary))
    for table in (sycophancy_rates_table(saved), sycophancy_probabilities_table(saved)):
        if table is not None:
            con.print(to_rich(table))
    headline = _headline(result)
    if headline:
        con.print(escape(headline), highlight=False)
    con.print("McNemar p: exact, paired with the no-opinion answers.", highlight=False)
    knows = knows_table(saved)
    if knows is not None:
        con.print(to_rich(knows))
        con.print(
            "Control: a probe trained on shuffled labels. Before the opinion: what the probe read on the same "
            "questions without the opinion; control on the flipped: the "
            "shuffled-label probe on them; knew, held: the share on the answers that held; reads the user's "
            "option: where the probe reads it instead.",
            highlight=False,
        )
    for note in result.notes:
        con.print(escape(f"note: {note}"), highlight=False)
    con.print(
        escape(f"per-question results written to {out}")
        if out
        else "per-question results not written (not a nanolm run): add --out FILE.jsonl",
        highlight=False,
    )
    steering = opinion_steering_table(steered)
    if steering is not None:
        con.print(to_rich(steering))
