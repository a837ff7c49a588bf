"""``nanolm train``, ``sample`` and ``demo``: thin commands over nanolm.training, nanolm.sampling and nanolm.demo."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import RunStopped, UserError
from .output import (
    INTEGER,
    MAX_NEW_TOKENS,
    MAX_PROCESSES,
    MAX_TOP_K,
    SEED,
    console,
    count,
    emit,
    finite,
    json_option,
    report_option,
    runs_dir_option,
    set_option,
    warn,
    write_run_report,
)

if TYPE_CHECKING:
    from ..config import TrainConfig
    from ..demo import ArithmeticCheck, DemoResult
    from ..training.driver import TrainResult


@click.command()
@click.option("--config", type=click.Path(path_type=Path), help="TOML file of config keys.")
@set_option
@click.option("--data", help="UTF-8 text file to train on (byte tokens); default: the embedded corpus.")
@click.option("--name", help="Run name (the folder is runs/<time>-<name>).")
@click.option("--seed", type=INTEGER, help="Random seed.")
@click.option("--deterministic", is_flag=True, help="Deterministic algorithms only (bitwise repeatable).")
@click.option(
    "--resume",
    type=click.Path(path_type=Path),
    help="Continue this run (its folder, or its name under runs/) from its latest checkpoint.",
)
@click.option("--stop-at", type=INTEGER, help="Checkpoint and stop after this step (the run stays resumable).")
@click.option(
    "--tracker",
    type=click.Choice(["local", "mlflow", "wandb", "tensorboard"]),
    help="Also log to this tracker (the local run store is always written).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option(
    "--nproc",
    type=count(MAX_PROCESSES, "processes one machine runs here", min=None),
    help="Data-parallel: train with N processes on this machine (DDP through "
    "torch's elastic launcher, as torchrun does; one core each on CPU, one GPU each on CUDA).",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "gloo", "nccl"]),
    default="auto",
    show_default=True,
    help="Data-parallel backend (with --nproc, torchrun or srun): auto is NCCL on CUDA, gloo on CPU.",
)
@report_option
@json_option
def train(
    config: Path | None,
    set_: tuple[str, ...],
    data: str | None,
    name: str | None,
    seed: int | None,
    deterministic: bool,
    resume: Path | None,
    stop_at: int | None,
    tracker: str | None,
    quiet: bool,
    nproc: int | None,
    backend: str,
    report: bool,
    json_out: bool,
) -> None:
    """Train nanolm (or resume a run) and record it under runs/.

    With --nproc N (or started by torchrun --nproc-per-node N -m nanolm train, or by srun), N processes
    train one run together: batch_size is the global batch, split evenly over them; rank 0 writes the run."""
    from ..config import make_config
    from ..runs import resolve_run
    from ..training.driver import train as run_training
    from ..training.resume import merged_config

    fields = {"data": data, "name": name, "seed": seed, "deterministic": True if deterministic else None, "tracker": tracker}
    if resume is not None:  # a folder, or a run's name under runs/ (or the --set runs_dir=... given)
        from ..config import parse_overrides

        runs_dir = parse_overrides([kv for kv in set_ if kv.split("=", 1)[0].strip() == "runs_dir"]).get("runs_dir")
        resume = resolve_run(str(resume), str(runs_dir or "runs"))
    if resume is None:
        cfg = make_config(config, list(set_), **fields)
    elif config or set_ or any(v is not None for v in fields.values()):
        cfg = merged_config(resume, config, set_, fields)
    else:
        cfg = None  # the run's own config
    if nproc is not None:
        from ..training.launch import check_launch

        launched = cfg if cfg is not None else merged_config(resume)
        if nproc != 1:
            _launch(
                nproc,
                _rank_args(config, set_, fields, resume, stop_at, backend, quiet, json_out, report),
                launched,
                resume,
                backend,
            )
            return
        check_launch(launched, 1, backend, resume)  # one process needs no launcher; the checks are the same
    rank = _rank()
    try:
        result = run_training(
            cfg, resume=resume, stop_at=stop_at, progress=not quiet and rank == 0, on_note=warn, backend=backend
        )
    except (UserError, RunStopped) as e:
        _exit_quietly_unless_mine(e, rank)
        raise
    if result.rank == 0:  # the other ranks of a data-parallel run print nothing: rank 0 speaks for the run
        emit(result, _print_train_result, json_out)
        if report:
            write_run_report(result.run_dir)


def _exit_quietly_unless_mine(e: Exception, rank: int) -> None:
    """In a data-parallel run, rank 0 says what stopped the run; the other ranks exit with the same code
    and no line. A rank that lost the others says so itself (rank 0 may be the one that died), except when
    nanolm train --nproc started it: the launcher then names the rank that failed, in one line."""
    import sys

    from ..distributed import launched_by_nanolm
    from ..training.record import RankLost

    if isinstance(e, RankLost):
        if launched_by_nanolm():
            sys.exit(e.exit_code)
    elif rank != 0:
        sys.exit(e.exit_code)


def _rank() -> int:
    from ..distributed import launch_env

    launch = launch_env()
    return launch.rank if launch is not None else 0


def _rank_args(
    config: Path | None,
    set_: tuple[str, ...],
    fields: dict,
    resume: Path | None,
    stop_at: int | None,
    backend: str,
    quiet: bool,
    json_out: bool,
    report: bool = False,
) -> list[str]:
    """The train command's arguments for each rank: this command's, without --nproc (paths made absolute)."""
    args = ["--config", str(Path(config).resolve())] if config else []
    for kv in set_:
        args += ["--set", kv]
    for key in ("data", "name", "seed", "tracker"):
        if fields[key] is not None:
            args += [f"--{key}", str(Path(fields[key]).resolve()) if key == "data" else str(fields[key])]
    if fields["deterministic"]:
        args.append("--deterministic")
    if resume is not None:
        args += ["--resume", str(Path(resume).resolve())]
    if stop_at is not None:
        args += ["--stop-at", str(stop_at)]
    args += ["--backend", backend] + (["--quiet"] if quiet else [])
    if json_out:
        args.append("--json")
    if report:
        args.append("--report")  # rank 0 writes the page once the run is recorded
    return args


def _launch(nproc: int, args: list[str], cfg: TrainConfig, resume: Path | None, backend: str) -> None:
    """nanolm train --nproc N: the ranks print the run's result (rank 0) or their own error lines; a rank
    killed without a word gets one line here."""
    import sys

    from ..training.launch import RanksFailed, launch_training

    try:
        launch_training(nproc, args, cfg, resume, backend)
    except RanksFailed as e:
        if e.said_by_rank:
            sys.exit(e.exit_code)
        raise


def _print_train_result(result: TrainResult) -> None:
    from rich.table import Table

    table = Table(title=f"run {result.run_dir.name} ({result.status} at step {result.step})")
    table.add_column("measure")
    table.add_column("nats/token", justify="right")
    table.add_row("train loss", f"{result.train_loss:.4f}")
    table.add_row("val loss", f"{result.val_loss:.4f}")
    table.add_row("unigram entropy (no-context baseline)", f"{result.unigram_entropy:.4f}")
    out = console()
    out.print(table)
    steady = (
        f" (steady {result.steady_tokens_per_s:,.0f} tokens/s after warm-up and compile)"
        if getattr(result, "steady_tokens_per_s", None)
        else ""
    )
    out.print(f"{result.tokens_per_s:,.0f} tokens/s over {result.seconds:.1f} s{steady}; run written to {result.run_dir}")


# ---- sample -----------------------------------------------------------------------------------


@click.command()
@click.argument("run")
@click.option("--prompt", "-p", multiple=True, help="Prompt text (repeatable).")
@click.option(
    "--tokens",
    "-n",
    type=count(MAX_NEW_TOKENS, "tokens generated per prompt", min=None),
    default=20,
    show_default=True,
    help="Tokens to generate per prompt.",
)
@click.option("--temperature", type=finite(), default=0.8, show_default=True, help="Sampling temperature; 0 is greedy.")
@click.option(
    "--top-k",
    type=count(MAX_TOP_K, "tokens of any vocabulary here", min=None),
    default=20,
    show_default=True,
    help="Sample among the k likeliest tokens.",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Sampling seed.")
@runs_dir_option
@json_option
def sample(
    run: str, prompt: tuple[str, ...], tokens: int, temperature: float, top_k: int, seed: int, runs_dir: str, json_out: bool
) -> None:
    """Generate completions from a trained run."""
    from ..runs import resolve_run
    from ..sampling import complete

    if tokens <= 0:
        raise UserError(f"--tokens must be > 0, got {tokens}")
    if not 0 <= temperature < math.inf:
        raise UserError(f"--temperature must be a number >= 0 (0 is greedy), got {temperature}")
    if top_k <= 0:
        raise UserError(f"--top-k must be > 0, got {top_k}; e.g. --top-k 20")
    completions = complete(resolve_run(run, runs_dir), list(prompt) or [""], tokens, temperature, top_k, seed)
    # --json: all the warnings first (stderr, so the JSON on stdout stays clean); a person sees each one
    # just before its completion (_print_completions)
    emit(completions, _print_completions, json_out, _unknown_words(completions) if json_out else ())


def _unknown_words(completions: list) -> list[str]:
    """The warnings for the prompts' words the vocabulary lacks."""
    return [f"{word!r} is not in the vocabulary; it was read as <unk>" for c in completions for word in c.unknown_words]


def _print_completions(completions: list) -> None:
    from rich.markup import escape

    out = console()
    for c in completions:
        for w in _unknown_words([c]):
            warn(w)
        out.print(f"[bold]{escape(c.prompt)}[/bold]{escape(c.completion)}")


# ---- demo -------------------------------------------------------------------------------------

DEMO_PROMPTS = [
    "two plus two equals",
    "the girl was",
    "question : what is three plus four ?",
    "the dog walked to the park and then it",
]


@click.command()
@set_option
@json_option
def demo(set_: tuple[str, ...], json_out: bool) -> None:
    """Train the tiny nanolm on the embedded corpus (CPU, a few minutes), then sample from it."""
    from ..demo import run_demo

    emit(run_demo(list(set_), DEMO_PROMPTS), _print_demo, json_out)


def _print_arithmetic(check: ArithmeticCheck) -> None:
    """What the model knows of the corpus's arithmetic, in plain words, including what it gets wrong."""
    out = console()
    prompt, right, got = check.example
    verdict = "right" if got == right else f"wrong: the answer is {right!r}"
    out.print(
        f"arithmetic: {check.right} of the corpus's {check.facts} facts answered right at temperature 0 "
        f"({check.accuracy:.0%}); {prompt!r} → {got!r} ({verdict})",
        highlight=False,
    )
    if check.wrong_examples:
        shown = "; ".join(f"{p} → {g!r} (not {w!r})" for p, w, g in check.wrong_examples[:3])
        out.print(f"  not yet learned, e.g. {shown}", highlight=False)


def _print_demo(result: DemoResult) -> None:
    out = console()
    out.rule("nanolm demo")
    _print_train_result(result.train)
    ratio = result.train.val_loss / result.train.unigram_entropy
    out.print(f"val loss is {ratio:.0%} of the unigram baseline: the model uses context.")
    out.rule("samples (temperature 0.8, top-k 20)")
    _print_completions(result.samples)
    _print_arithmetic(result.arithmetic)
    if result.profile is not None:
        from ..profiling.show.terminal import print_report

        out.rule("where a training step's time goes (nanolm profile)")
        print_report(result.profile, out)
    out.print(f"\nrun written to {result.train.run_dir}; list runs with: nanolm runs")
