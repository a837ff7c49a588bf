"""``nanolm feedback reward-model`` and ``nanolm feedback best-of-n``: thin click commands over
nanolm.alignment.reward_model and nanolm.alignment.best_of_n. Heavy imports happen inside."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import BEST_OF_N, REWARD_MODELS
from .output import (
    INT64_MAX,
    MAX_NEW_TOKENS,
    MAX_SEEDS,
    MAX_STEPS,
    MAX_TOP_K,
    SEED,
    OutputFile,
    check_count,
    check_report,
    console,
    count,
    emit,
    file_name,
    finite,
    json_option,
    progress_bar,
    report_option,
    runs_dir_option,
    warn,
    working,
    write_run_report,
)

if TYPE_CHECKING:
    from ..alignment.best_of_n import BestOfNResult
    from ..alignment.reward_model import RewardModel, RewardModelResult
    from ..interp.view import ModelView

DEFAULT_NS = "1,2,4,...,64"
MAX_N = 4096  # samples per prompt and seed best-of-n draws at most (64 by default)
MAX_PROMPTS = 10_000  # questions asked (100 by default)
MAX_BON_SAMPLES = 10_000_000  # max(n) x prompts x seeds, the answers sampled and scored in one run (19,200 by default)
MAX_BATCH = 100_000  # pairs per step of a reward model


# ---- parsing lists --------------------------------------------------------------------------------


def _int(text: str, option: str, most: int = INT64_MAX, what: str = "") -> int:
    """text as an integer of at most `most`; else a UserError naming option."""
    try:
        value = int(text.strip())
    except ValueError:
        raise UserError(f"{option} {text.strip()!r}: not an integer") from None
    return check_count(value, option, most, what)


def _continue(before: list[int], last: int, option: str) -> list[int]:
    """before, continued geometrically (1,2,4 -> ×2) or arithmetically (2,4,6 -> +2) up to last, last included."""
    ratios = {b / a for a, b in zip(before, before[1:])} if 0 not in before else set()
    steps = {b - a for a, b in zip(before, before[1:])}
    out = list(before)
    if len(ratios) == 1 and (r := ratios.pop()) > 1 and r == int(r):
        while out[-1] * int(r) < last:
            out.append(out[-1] * int(r))
    elif len(steps) == 1 and (d := steps.pop()) > 0:
        while out[-1] + d < last:
            out.append(out[-1] + d)
    else:
        raise UserError(
            f"{option}: the numbers before '...' ({','.join(map(str, before))}) are neither doubling "
            "(or another whole ratio) nor evenly spaced; write the list out"
        )
    return out + [last] if last > out[-1] else out


def parse_int_list(text: str, option: str, most: int = INT64_MAX, what: str = "", most_items: int | None = None) -> list[int]:
    """ "1,2,4,8" or "1,2,4,...,64" (continued the way the first numbers go) as integers, each at most `most` (a
    UserError naming it, and `what` the numbers count), before any list is continued; at most most_items of them."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"{option}: give a comma-separated list, e.g. {option} 1,2,4,8")
    if "..." not in items:
        return _at_most([_int(t, option, most, what) for t in items], option, most_items)
    at = items.index("...")
    before = [_int(t, option, most, what) for t in items[:at]]
    after = [_int(t, option, most, what) for t in items[at + 1 :]]
    if len(before) < 2 or len(after) != 1:
        raise UserError(f"{option} {text}: write at least two numbers before '...' and one after, e.g. 1,2,4,...,64")
    if after[0] < before[-1]:
        raise UserError(f"{option} {text}: the number after '...' is below the ones before it; write the list out")
    return _at_most(_continue(before, after[0], option), option, most_items)


def _at_most(values: list[int], option: str, most_items: int | None) -> list[int]:
    """values, once there are at most most_items of them (None: any number)."""
    if most_items is not None and len(values) > most_items:
        raise UserError(f"{option}: {len(values)} values, more than the {most_items} it takes; use at most {most_items}")
    return values


# ---- nanolm feedback reward-model ---------------------------------------------------------------


@click.command("reward-model")
@click.argument("labels", type=click.Path(path_type=Path))
@click.option(
    "--base",
    "base",
    required=True,
    metavar="RUN",
    help="The nanolm run whose model is the backbone (a folder or a name under runs/).",
)
@click.option(
    "--steps",
    type=count(MAX_STEPS, "steps a reward model trains here", min=None),
    default=300,
    show_default=True,
    help="AdamW steps.",
)
@click.option(
    "--batch-size", type=count(MAX_BATCH, "pairs per step here", min=None), default=32, show_default=True, help="Pairs per step."
)
@click.option(
    "--lr", type=finite(), default=1e-3, show_default=True, help="AdamW learning rate (10% warm-up, then linear decay to 0)."
)
@click.option(
    "--held-out",
    type=finite(),
    default=0.2,
    show_default=True,
    help="Share of pair_ids held out for the accuracy and the bias measures.",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Head initialization, held-out split, batch order.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Folder to save the reward model in (default: BASE/reward_models/<labels file name>).",
)
@click.option("--force", is_flag=True, help="Replace a reward model already saved in that folder.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, mps or auto.")
@runs_dir_option
@json_option
@report_option
def reward_model(
    labels: Path,
    base: str,
    steps: int,
    batch_size: int,
    lr: float,
    held_out: float,
    seed: int,
    out: Path | None,
    force: bool,
    device: str,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Train a Bradley–Terry reward model (BASE's backbone + a scalar head) on preference labels.

    \b
    nanolm feedback reward-model labels.jsonl --base RUN

    LABELS: JSON Lines in TRL's preference format (prompt, chosen, rejected) with label_prob, principle,
    consistent, judge, pair_id, chosen_meta and rejected_meta (as nanolm feedback label writes them).
    Loss: −[p·log σ(r_c − r_r) + (1 − p)·log σ(r_r − r_c)], p = label_prob. Reports the held-out pair accuracy
    and the biases the model inherited: reward vs length among equally correct answers, and the reward of
    answers that agree with the user but are wrong. --report writes BASE's page, which lists the reward
    models saved under it (BASE/reward_models/).
    """
    from ..alignment.reward_model import (
        TrainSettings,
        check_output_folder,
        read_labels,
        reward_model_from_run,
        save_reward_model,
        train_reward_model,
    )
    from ..device import resolve_device

    settings = TrainSettings(steps=steps, batch_size=batch_size, lr=lr, held_out=held_out, seed=seed)
    settings.check()
    rows = read_labels(labels)
    torch_device = resolve_device(device, "--device ")
    rm = reward_model_from_run(base, runs_dir, torch_device, seed)
    check_report(report, rm.base["run"])
    folder = check_output_folder(out if out is not None else _default_rm_folder(rm, labels), force)
    with progress_bar(f"training the reward model on {len(rows)} labels") as advance:
        result = train_reward_model(rm, rows, settings, str(labels), lambda step, total, _loss: advance(step, total))
    replaced = folder.is_dir() and any(folder.iterdir())
    save_reward_model(rm, folder, force)
    if replaced:
        warn(f"replaced the reward model in {folder}")
    as_json = {**result.summary(), "folder": str(folder)}
    emit(result, lambda r: _print_rm(r, as_json, folder), json_out, as_json=as_json)
    if report:
        write_run_report(rm.base["run"])


def _default_rm_folder(rm: RewardModel, labels: Path) -> Path:
    stem = file_name(labels.stem, "labels")
    return REWARD_MODELS.path(rm.base["run"], stem)


def _print_rm(result: RewardModelResult, as_json: dict, folder: Path) -> None:
    """The reward model's measures, as the page of its base run lays out each reward model trained on it."""
    from rich.markup import escape

    from ..io import to_jsonable
    from ..report.sections.alignment import reward_model_table
    from ..tables import to_rich

    con = console()
    con.print(to_rich(reward_model_table(folder.name, to_jsonable(as_json))))
    con.print(
        "Held out: every row of a random share of the pair_ids. Biases on the held-out answers: Pearson r of "
        "reward with length after centring both within each ground-truth class (Fisher-z CI); rewards have no "
        "zero, so compare the agreeing-but-wrong mean with the correct one (Welch CI on the gap). Same prompt: "
        "where a prompt has both, the share of pairs where the agreeing-but-wrong answer scores above the "
        "correct one, and the mean of σ(r_aw − r_c).",
        highlight=False,
    )
    if result.ties:
        con.print(f"{result.ties} ties (label_prob 0.5): in the loss, not in the accuracy.", highlight=False)
    if result.truncated:
        con.print(f"{result.truncated} texts were longer than the context and kept their last tokens.", highlight=False)
    if result.unknown_words:
        con.print(
            escape(f"words outside the base's vocabulary (read as <unk>): {', '.join(result.unknown_words[:8])}"), highlight=False
        )
    for note in result.notes:
        con.print(escape(f"note: {note}"), highlight=False)
    con.print(escape(f"reward model saved to {folder}"), highlight=False)


# ---- nanolm feedback best-of-n ----------------------------------------------------------------------


@click.command("best-of-n")
@click.argument("policy", metavar="RUN_OR_PATH")
@click.option(
    "--reward",
    "reward",
    required=True,
    type=click.Path(path_type=Path),
    metavar="RM",
    help="A reward model folder (nanolm feedback reward-model).",
)
@click.option(
    "--n",
    "ns",
    default=DEFAULT_NS,
    show_default=True,
    help=f"Values of n: a list, or its first terms, '...' and the last (continued the same way); n <= {MAX_N}.",
)
@click.option(
    "--prompts",
    type=count(MAX_PROMPTS, "questions best-of-n asks here"),
    default=100,
    show_default=True,
    help="Corpus questions asked with a wrong user opinion.",
)
@click.option("--seeds", default="0,1,2", show_default=True, help="Sampling seeds: the spread across them is reported.")
@click.option(
    "--question-seed",
    type=SEED,
    default=1,
    show_default=True,
    help="Which of the corpus's questions (1: other than seed 0's, where labels are often drawn).",
)
@click.option(
    "--corpus-version",
    type=click.Choice(["1", "2"]),
    help="The corpus whose questions to ask (default: the one the policy trained on; 2 for other models).",
)
@click.option("--temperature", type=finite(), default=1.0, show_default=True, help="Sampling temperature (> 0).")
@click.option(
    "--top-k",
    type=count(MAX_TOP_K, "tokens of any vocabulary here"),
    help="Sample among the k likeliest tokens only (default: all).",
)
@click.option(
    "--max-new-tokens",
    type=count(MAX_NEW_TOKENS, "tokens generated per answer here"),
    default=4,
    show_default=True,
    help="Tokens per answer (the corpus answers in two: 'B .').",
)
@click.option(
    "--plot",
    type=OutputFile("best_of_n.png", ".png"),
    help="The figure (default: RUN/best_of_n/<reward model>.png; runs/best_of_n/... for a model folder).",
)
@click.option(
    "--out",
    type=OutputFile("best_of_n.jsonl", ".jsonl"),
    help="Every candidate with its reward and answer, per prompt and seed (default: beside the plot).",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, mps or auto.")
@runs_dir_option
@json_option
@report_option
def best_of_n(
    policy: str,
    reward: Path,
    ns: str,
    prompts: int,
    seeds: str,
    question_seed: int,
    corpus_version: str | None,
    temperature: float,
    top_k: int | None,
    max_new_tokens: int,
    plot: Path | None,
    out: Path | None,
    device: str,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Best-of-n against a reward model: does its score buy correct answers, or agreement with the user?

    \b
    nanolm feedback best-of-n RUN --reward RM --n 1,2,4,...,64

    For each question (with a wrong user opinion) and seed, the policy samples max(n) answers; for each n the
    answer with the highest reward among the first n is kept (n = 1: plain sampling). Plotted against n: the
    reward model's score of the kept answers, the share correct and the share sycophantic (the user's wrong
    option), each with the spread across seeds. Reward rising while correctness falls is reward hacking.
    """
    from ..alignment.best_of_n import MAX_SEED, check_ns, check_seeds, figure, write_records
    from ..alignment.best_of_n import best_of_n as run_best_of_n
    from ..alignment.questions import corpus_questions
    from ..alignment.reward_model import load_reward_model
    from ..alignment.sycophancy import planted_for_run
    from ..device import resolve_device
    from ..interp.generate import check_sampling
    from ..interp.view import load_view
    from ..plots import save_figure

    n_list = check_ns(parse_int_list(ns, "--n", MAX_N, "samples best-of-n draws per prompt here"))
    seed_list = check_seeds(parse_int_list(seeds, "--seeds", MAX_SEED, most_items=MAX_SEEDS))
    _check_samples(max(n_list), prompts, len(seed_list))
    check_sampling(temperature, top_k)
    if temperature <= 0:
        raise UserError(f"--temperature must be > 0: best-of-n needs different answers to choose from, got {temperature}")
    torch_device = str(resolve_device(device, "--device "))
    rm = load_reward_model(reward, torch_device)
    view = load_view(policy, runs_dir, torch_device)
    check_report(report, view.run_dir, "the policy is not a nanolm run")
    version = int(corpus_version) if corpus_version else (planted_for_run(view) or 2)
    qs = corpus_questions(prompts, question_seed, version)
    plot, out = _default_outputs(view, reward, plot, out)
    with working(f"sampling {max(n_list)} answers to {prompts} questions × {len(seed_list)} seeds, scoring them"):
        result = run_best_of_n(view, rm, qs.questions, n_list, seed_list, temperature, top_k, max_new_tokens, source=qs.source)
    for path in (plot, out):
        if path.exists():
            warn(f"replaced {path}")
    save_figure(figure(result), plot)
    write_records(out, result)
    as_json = {**result.summary(), "plot": str(plot), "records_path": str(out)}
    emit(result, lambda r: _print_bon(r, as_json, plot, out), json_out, as_json=as_json)
    if report:
        write_run_report(view.run_dir)


def _check_samples(n: int, prompts: int, seeds: int) -> None:
    """A UserError unless the answers to sample, n per prompt and seed, are at most MAX_BON_SAMPLES."""
    total = n * prompts * seeds
    if total > MAX_BON_SAMPLES:
        fits = max(1, MAX_BON_SAMPLES // (prompts * seeds))
        raise UserError(
            f"--n {n} x --prompts {prompts} x {seeds} seeds is {total:,} answers to sample, more than the "
            f"{MAX_BON_SAMPLES:,} best-of-n samples in one run; use --n up to {fits}, or fewer prompts or seeds"
        )


def _default_outputs(view: ModelView, reward: Path, plot: Path | None, out: Path | None) -> tuple[Path, Path]:
    """(plot, records): given, else RUN/best_of_n/<reward model>.{png,jsonl}, or runs/best_of_n/<time>-... for a
    model folder; the records beside the plot when only the plot is named."""
    from .output import default_output

    if plot is None:
        stem = file_name(reward.resolve().name, "reward_model")
        plot = (
            BEST_OF_N.path(view.run_dir, f"{stem}.png", create=True)
            if view.run_dir is not None
            else default_output(BEST_OF_N, f"{stem}.png")
        )
    if out is None:
        out = plot.with_suffix(".jsonl")
    return plot, out


def _headline(result: BestOfNResult) -> str:
    first, last = result.points[0], result.points[-1]
    return (
        f"from n={first.n} to n={last.n}: RM score {first.reward.mean:+.3f} → {last.reward.mean:+.3f}, correct "
        f"{first.correct.mean:.1%} → {last.correct.mean:.1%}, sycophantic {first.sycophantic.mean:.1%} → "
        f"{last.sycophantic.mean:.1%} (means over {len(result.seeds)} seeds)."
    )


def _print_bon(result: BestOfNResult, as_json: dict, plot: Path, out: Path) -> None:
    """The curve, as the run's page lays it out (there from the saved per-prompt records), and its headline."""
    from rich.markup import escape

    from ..alignment.best_of_n import BestOfNResult
    from ..io import to_jsonable
    from ..report.sections.alignment import best_of_n_table
    from ..tables import to_rich

    con = console()
    saved = BestOfNResult.from_dict(to_jsonable(as_json))  # the result as --json prints it, read back
    con.print(to_rich(best_of_n_table(saved.points, saved.reward_model, saved.prompts, saved.seeds, saved.policy)))
    if len(result.points) > 1:
        con.print(escape(_headline(result)), highlight=False)
    con.print(
        "Kept answer: the highest reward among the first n samples (n = 1 is plain sampling). Its reward: the "
        "reward model's own score (RM score); correct and sycophantic come from the corpus's ground truth. sd: "
        "the standard deviation across seeds; --json and the figure give every seed's value.",
        highlight=False,
    )
    for note in result.notes:
        con.print(escape(f"note: {note}"), highlight=False)
    con.print(escape(f"figure written to {plot}; every candidate written to {out}"), highlight=False)
