"""``nanolm feedback``: AI feedback with a written constitution and a judge whose biases are measured.
Thin click commands over nanolm.alignment (pairs, judges, labelling, judge_bias); heavy imports inside."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import FEEDBACK, is_hf_model
from .output import (
    SEED,
    GroupWithModules,
    OutputFile,
    check_report,
    console,
    count,
    default_output,
    emit,
    finite,
    json_option,
    report_option,
    runs_dir_option,
    save_run_result,
    warn,
    working,
    write_run_report,
)

if TYPE_CHECKING:
    from ..alignment.judge_bias import BiasReport
    from ..alignment.pairs import PairSet
    from ..interp.view import ModelView


@click.group(
    cls=GroupWithModules,
    elsewhere={
        "reward-model": ("feedback_reward", "reward_model"),
        "best-of-n": ("feedback_reward", "best_of_n"),
        "bias": ("feedback_bias", "bias"),
    },
)
def feedback() -> None:
    """AI feedback: answer pairs, a judge labelling them by a constitution, and the judge's biases measured.

    \b
    nanolm feedback pairs RUN --n 500                       answer pairs with their ground truth (JSONL)
    nanolm feedback label PAIRS --judge likelihood:RUN      TRL preference rows + the judge's bias report
    nanolm feedback label PAIRS --judge planted:1,0.2       a rule judge with planted biases: the report's check
    nanolm feedback constitution --out my.toml              the built-in constitution, to edit
    nanolm feedback bias JUDGMENTS                          the bias report on labels made elsewhere (MT-Bench, TRL, ...)

    Each pair is judged under each principle in both orders; the report gives position consistency, length
    bias, self-preference and agreement with the ground truth, each with a 95% CI.
    """


# ---- pairs ------------------------------------------------------------------------------------------

MAX_PAIRS = 100_000  # pairs of one `feedback pairs` (500 by default); each is judged 2 x principles times after
MAX_SAMPLES_PER_PROMPT = 256  # the policy's samples per prompt, of which the first two different ones are paired


@feedback.command("pairs")
@click.argument("model", metavar="RUN_OR_PATH")
@click.option(
    "--n",
    "n",
    type=count(MAX_PAIRS, "pairs one command builds here"),
    default=500,
    show_default=True,
    help="Pairs (one per corpus question; the kinds in turn).",
)
@click.option(
    "--seed", type=SEED, default=0, show_default=True, help="Which questions, which answer is a, and the sampling seed."
)
@click.option(
    "--versus", metavar="RUN_OR_PATH", help="A second model: also pairs of one sample from each (the judge's self-preference)."
)
@click.option(
    "--samples",
    type=count(MAX_SAMPLES_PER_PROMPT, "samples drawn per prompt here", min=2),
    default=4,
    show_default=True,
    help="Samples drawn per prompt; the first two different ones are paired.",
)
@click.option(
    "--temperature",
    type=finite(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Sampling temperature of the policy's answers.",
)
@click.option(
    "--out",
    type=OutputFile("pairs.jsonl", ".jsonl"),
    help="Where to write the pairs (default: RUN/feedback/pairs-N-seedS.jsonl; runs/feedback/ for a model folder).",
)
@runs_dir_option
@json_option
def pairs(
    model: str,
    n: int,
    seed: int,
    versus: str | None,
    samples: int,
    temperature: float,
    out: Path | None,
    runs_dir: str,
    json_out: bool,
) -> None:
    """Answer pairs to the corpus's questions, each answer with its ground truth.

    \b
    Kinds, in turn: right vs wrong; right vs agreeing with the user's wrong opinion; right, short vs long
    (" B ." vs " B . because ... ."); two of the policy's own samples; with --versus, one sample of each model.
    Truth of an answer: correct, agrees_with_user, length (words), source ("corpus" or the model's name).
    """
    from ..alignment.pairs import build_pairs, write_pairs
    from ..interp.view import load_view

    view = load_view(model, runs_dir)
    other = load_view(versus, runs_dir) if versus else None
    out = out if out is not None else _default_pairs_out(view, n, seed)
    with working(f"building {n} pairs"):
        result = build_pairs(view, n, seed, other, samples_per_prompt=samples, temperature=temperature)
    replaced = out.exists()
    write_pairs(out, result.pairs)
    if replaced:
        warn(f"replaced {out}")
    summary = {
        "n": len(result.pairs),
        "source": result.source,
        "policy": result.policy,
        "versus": result.versus,
        "kinds": result.counts(),
        "notes": result.notes,
        "pairs_path": out,
    }
    emit(result, lambda r: _print_pairs(r, summary, out), json_out, as_json=summary)


def _default_pairs_out(view: ModelView, n: int, seed: int) -> Path:
    if view.run_dir is None:
        return default_output(FEEDBACK, "pairs.jsonl")
    return FEEDBACK.path(view.run_dir, f"pairs-{n}-seed{seed}.jsonl", create=True)


def _print_pairs(result: PairSet, summary: dict, out: Path) -> None:
    """The pairs of each kind, as the run's page lays them out (from the pairs as their file holds them), and one
    pair of each kind (the terminal's alone: the page does not quote answers)."""
    from rich.markup import escape
    from rich.table import Table

    from ..alignment.pairs import pair_row
    from ..io import to_jsonable
    from ..report.sections.alignment import pairs_table
    from ..tables import to_rich

    con = console()
    con.print(to_rich(pairs_table({**to_jsonable(summary), "pairs": [to_jsonable(pair_row(p)) for p in result.pairs]})))
    examples = Table(title="one pair of each kind")
    for col in ("kind", "a", "b"):
        examples.add_column(col, overflow="fold")
    for kind in result.counts():
        first = next(p for p in result.pairs if p.kind == kind)
        examples.add_row(kind, escape(first.a.text.strip()), escape(first.b.text.strip()))
    con.print(examples)
    for note in result.notes:
        con.print(escape(f"note: {note}"), highlight=False)
    con.print(escape(f"pairs written to {out}; label them: nanolm feedback label {out} --judge rule"), highlight=False)


# ---- label ------------------------------------------------------------------------------------------

JUDGE_HELP = (
    "rule (the constitution's rules on the ground truth); likelihood:RUN_OR_PATH (the answer the model finds "
    "more probable: mean log-prob per token); prompt:HF_PATH (a Hugging Face causal LM shown the principle, "
    "Bai et al.'s (A)/(B) format); planted:POSITION,LENGTH[,AGREEMENT] (a rule judge with biases of those "
    "sizes, in logits: for being shown first, per word longer, for agreeing with the user)."
)


@feedback.command("label")
@click.argument("pairs_file", metavar="PAIRS", type=click.Path(path_type=Path))
@click.option("--judge", "judge_spec", required=True, help=JUDGE_HELP)
@click.option(
    "--constitution",
    "constitution_file",
    type=click.Path(path_type=Path),
    help="The principles, a TOML file (default: the built-in three; `nanolm feedback constitution` shows them).",
)
@click.option(
    "--out",
    type=OutputFile("labels.jsonl", ".jsonl"),
    help="Label rows, TRL format (default: beside PAIRS, e.g. PAIRS.likelihood-RUN-labels.jsonl).",
)
@runs_dir_option
@json_option
@report_option
def label(
    pairs_file: Path,
    judge_spec: str,
    constitution_file: Path | None,
    out: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Label each pair under each principle in both orders; write TRL preference rows; report the judge's biases.

    \b
    Rows: prompt, chosen, rejected, label_prob (P(chosen better), the two orders averaged), principle,
    consistent (both orders agreed), judge, pair_id, chosen_meta and rejected_meta (the ground truth).
    The bias report (the --json output) is saved in the run the labels (else the pairs) are in, beside the
    labels: RUN/feedback/NAME-labels.json next to NAME-labels.jsonl, for nanolm report.
    """
    from ..alignment.constitution import default_constitution, load_constitution
    from ..alignment.judges import parse_judge
    from ..alignment.judgment_bias import bias_report
    from ..alignment.labelling import label as run_label
    from ..alignment.labelling import label_rows, write_labels
    from ..alignment.pairs import read_pairs
    from ..io import check_writable_file

    pair_set = read_pairs(pairs_file)
    constitution = load_constitution(constitution_file) if constitution_file else default_constitution()
    if out is None:
        stem = pairs_file.name.removesuffix(".jsonl")
        out = check_writable_file(pairs_file.with_name(f"{stem}.{_judge_slug(judge_spec)}-labels.jsonl"), "--out", "labels.jsonl")
    if out.resolve() == pairs_file.resolve():
        raise UserError(f"--out {out}: that is the pairs file; give the labels another name")
    run_dir = run_of_feedback_file(out) or run_of_feedback_file(pairs_file)
    check_report(
        report, run_dir, f"neither the labels nor the pairs are in a run's {FEEDBACK.folder}/ folder (RUN/{FEEDBACK.folder}/)"
    )
    with working("loading the judge"):
        judge = parse_judge(judge_spec, runs_dir)
    calls = 2 * len(pair_set.pairs) * len(constitution.principles)
    with working(f"judging {len(pair_set.pairs)} pairs x {len(constitution.principles)} principles x 2 orders"):
        labelling = run_label(pair_set.pairs, judge, constitution)
    bias = bias_report(labelling)
    rows = label_rows(labelling)
    replaced = out.exists()
    write_labels(out, rows)
    if replaced:
        warn(f"replaced {out}")
    as_json = {"report": bias, "labels_path": out, "rows": len(rows), "calls": calls, "constitution": constitution.source}
    save_run_result(run_dir, FEEDBACK, out.stem, as_json)
    emit(bias, lambda r: _print_report(r, as_json, out, calls, constitution.source), json_out, as_json=as_json)
    if report:
        write_run_report(run_dir)


def run_of_feedback_file(path: Path) -> Path | None:
    """The nanolm run a file in RUN/feedback/ belongs to, or None (a file elsewhere)."""
    return FEEDBACK.run_holding(path)


def _judge_slug(spec: str) -> str:
    """A judge's part of the default labels file name: "rule", "planted", "likelihood-syc" (the model's folder name)."""
    import re

    kind, _, arg = spec.partition(":")
    name = Path(arg.rstrip("/")).name if kind in ("likelihood", "prompt") and arg else ""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{kind}-{name}" if name else kind or "judge")


def print_bias_tables(as_json: dict) -> None:
    """The judge's biases and, where the report has them (nanolm's labelling, not judgments made elsewhere), the judge
    by principle, as the run's page lays them out (nanolm.report.sections.alignment), from the report as saved."""
    from ..io import to_jsonable
    from ..report.sections.alignment import judge_bias_table, judge_principles_table, read_bias_report
    from ..tables import to_rich

    report = read_bias_report(to_jsonable(as_json))  # the report as saved, read back
    con = console()
    con.print(to_rich(judge_bias_table(report)))
    by_principle = judge_principles_table(report)
    if by_principle is not None:
        con.print(to_rich(by_principle))


def _print_report(report: BiasReport, as_json: dict, out: Path, calls: int, constitution: str) -> None:
    from rich.markup import escape

    con = console()
    print_bias_tables(as_json)
    con.print(
        "Equal truth: pairs whose principle's rule calls them a tie (a preference there is the judge's own). "
        "Consistency and ground truth count verdicts (pair x principle); the rest count pairs, each the mean "
        "of its verdicts. Logits: the offset is the mean of (logit p_ab + logit p_ba)/2; the length and "
        "agreement bonuses are least-squares slopes of (logit p_ab − logit p_ba)/2 on the differences "
        "(t intervals). Win rates count a tie as half.",
        highlight=False,
    )
    for note in report.notes:
        con.print(escape(f"note: {note}"), highlight=False)
    con.print(escape(f"{calls} judge calls; constitution: {constitution}; labels written to {out}"), highlight=False)


# ---- the constitution, and critique -------------------------------------------------------------------


@feedback.command("constitution")
@click.option(
    "--out",
    type=OutputFile("constitution.toml", ".toml"),
    help="Write the built-in constitution to this file (a new file) instead of printing it.",
)
def constitution(out: Path | None) -> None:
    """The built-in constitution (TOML): principles with the text a model judge reads and a checkable rule."""
    from ..alignment.constitution import DEFAULT_CONSTITUTION
    from ..io import atomic_write_text

    if out is None:
        click.echo(DEFAULT_CONSTITUTION, nl=False)
        return
    if out.exists():
        raise UserError(f"--out {out}: exists; choose a new name (this writes the default, it would lose your edits)")
    atomic_write_text(out, DEFAULT_CONSTITUTION)
    click.echo(f"wrote {out}")


@feedback.command("critique")
@click.argument("model", metavar="RUN_OR_PATH")
@runs_dir_option
def critique(model: str, runs_dir: str) -> None:
    """Constitutional AI's critique → revision loop. A nanolm model is too small for it, and says so."""
    from ..runs import read_manifest, resolve_run

    path = Path(model)
    if is_hf_model(path):
        raise UserError(
            f"{path}: the critique → revision loop is not implemented in nanolm; judge this model's "
            f"answers with --judge prompt:{path} instead"
        )
    run = resolve_run(model, runs_dir)
    m = read_manifest(run)
    size = f"{m.n_params:,} parameters, " if m.n_params else ""
    vocab = m.data.get("vocab_size")
    raise UserError(
        f"{m.name or run.name} is too small to critique: a nanolm model ({size}"
        f"{f'{vocab} words of vocabulary, ' if vocab else ''}trained on the embedded corpus) cannot read a "
        "principle or write a critique; judge its answers with --judge likelihood:RUN or --judge rule"
    )
