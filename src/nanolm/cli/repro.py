"""``nanolm repro check``, ``seeds``, ``compare``, ``experiment`` and ``bisect``: thin commands over nanolm.repro."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from .output import (
    MAX_PROCESSES,
    MAX_SEEDS,
    console,
    count,
    emit,
    finite,
    json_option,
    report_option,
    runs_dir_option,
    set_option,
    write_run_report,
)

if TYPE_CHECKING:
    from ..repro.bisect import BisectResult, BisectStep
    from ..repro.check import ReproCheck
    from ..repro.compare import GroupComparison
    from ..repro.executors import SlurmResources
    from ..repro.experiment import ExperimentRun, ExperimentVerdict
    from ..repro.seeds import SeedsResult

SLURM_FLAGS = ("--slurm-gpus", "--slurm-time", "--slurm-partition", "--slurm-nproc")
MAX_CHECK_STEPS = 100_000  # steps of each of repro check's two runs (20 by default)
JOBS = count(MAX_PROCESSES, "runs at a time here", min=None)  # --jobs: runs at a time (local executor)


def slurm_options(f):
    """--slurm-gpus, --slurm-time, --slurm-partition and --slurm-nproc: each SLURM job's resources, for a
    command with an --executor option. The command gets them as one argument, `slurm`: a
    nanolm.repro.executors.SlurmResources, or None when none was given. Given with another executor they
    are a UserError (one line, exit 2), so that they are never silently ignored."""

    @functools.wraps(f)
    def with_resources(
        *args, slurm_gpus: int | None, slurm_time: str | None, slurm_partition: str | None, slurm_nproc: int | None, **kwargs
    ):
        values = (slurm_gpus, slurm_time, slurm_partition, slurm_nproc)
        given = [flag for flag, value in zip(SLURM_FLAGS, values) if value is not None]
        slurm = None
        if given:
            if kwargs.get("executor") != "slurm":
                raise UserError(
                    f"{', '.join(given)}: for --executor slurm only (got --executor {kwargs.get('executor')}); "
                    f"add --executor slurm, or drop {'it' if len(given) == 1 else 'them'}"
                )
            from ..repro.executors import SlurmResources

            slurm = SlurmResources.from_options(*values)
        return f(*args, slurm=slurm, **kwargs)

    options = [
        click.option(
            "--slurm-gpus",
            type=count(MAX_PROCESSES, "GPUs per job here", min=None),
            metavar="N",
            help="GPUs per SLURM job (sbatch --gpus-per-node): 0, or "
            "as many as --slurm-nproc (one per process). Default: the partition's.",
        ),
        click.option(
            "--slurm-time",
            metavar="TIME",
            help="Time limit per SLURM job, as sbatch --time takes it: minutes, H:MM:SS or D-HH:MM. Default: 60 minutes.",
        ),
        click.option(
            "--slurm-partition",
            metavar="NAME",
            help="SLURM partition(s) of the jobs (sbatch --partition). Default: the cluster's.",
        ),
        click.option(
            "--slurm-nproc",
            type=count(MAX_PROCESSES, "processes per job here", min=None),
            metavar="N",
            help="Processes per SLURM job (tasks per node, started by "
            "srun): each job is one data-parallel training over N ranks. Default: 1.",
        ),
    ]
    for option in reversed(options):
        with_resources = option(with_resources)
    return with_resources


@click.group()
def repro() -> None:
    """Reproducibility checks."""


@repro.command("check")
@set_option
@click.option(
    "--steps",
    type=count(MAX_CHECK_STEPS, "steps of each run here", min=None),
    default=20,
    show_default=True,
    help="Steps of each of the two runs.",
)
@click.option("--deterministic", is_flag=True, help="Deterministic algorithms only.")
@json_option
def repro_check_command(set_: tuple[str, ...], steps: int, deterministic: bool, json_out: bool) -> None:
    """Train twice with the same seed; compare losses and final weights bit for bit."""
    from ..repro.check import repro_check

    if steps <= 0:
        raise UserError(f"--steps must be > 0, got {steps}")
    result = repro_check([*set_, *(["deterministic=true"] if deterministic else [])], steps, progress=True)
    emit(result, _print_repro_check, json_out)


def _print_repro_check(result: ReproCheck) -> None:
    out = console()
    if result.identical:
        out.print(f"identical: {result.steps} steps of losses and every final weight match bit for bit")
        return
    if result.first_divergent_step is not None:
        out.print(
            f"[bold]not reproducible[/bold]: the losses first differ at step {result.first_divergent_step} "
            f"({result.loss_a!r} vs {result.loss_b!r})"
        )
    if result.tensor is not None:
        out.print(
            f"final weights: {result.tensors_differing} tensors differ; the largest |Δ| is "
            f"{result.max_abs_diff:.3g} in {result.tensor}"
        )
    out.print("usual causes, most likely first:")
    for cause in result.causes:
        out.print(f"  • {cause}")


@click.command()
@set_option
@click.option(
    "--n", "n", type=count(MAX_SEEDS, "seeds of one group here", min=None), default=3, show_default=True, help="Number of seeds."
)
@click.option("--name", required=True, help="Group name (runs are <name>-seed<S>).")
@click.option("--jobs", type=JOBS, default=1, show_default=True, help="Runs at a time (local executor).")
@click.option("--executor", type=click.Choice(["local", "debug", "slurm"]), default="local", show_default=True)
@slurm_options
@click.option("--runs-dir", help="Folder of run records (the same as --set runs_dir=...; default runs).")
@json_option
@report_option
def seeds(
    set_: tuple[str, ...],
    n: int,
    name: str,
    jobs: int,
    executor: str,
    slurm: SlurmResources | None,
    runs_dir: str | None,
    json_out: bool,
    report: bool,
) -> None:
    """Run one config on N seeds as a group; print each metric's mean, std, min, max and spread.
    The seeds are S, S+1, ..., S+N-1, from --set seed=S (default 1337). --report writes each finished
    run's page once the whole group is done, so that every page shows the group's noise."""
    from ..plots import save_figure
    from ..repro.seeds import group_figure, run_seeds

    if runs_dir is not None:
        set_ = (*set_, f"runs_dir={runs_dir}")

    def done(seed: int, run_dir: str | None) -> None:
        click.echo(f"seed {seed} finished: {run_dir}" if run_dir else f"seed {seed} diverged", err=True)

    result = run_seeds(list(set_), n, name, jobs, executor, on_done=done, slurm=slurm)
    plot = save_figure(group_figure(result.group), result.plot_path)
    emit(
        result,
        lambda r: _print_seeds(r, plot),
        json_out,
        [f"left out of the statistics: {line}" for line in result.group.excluded],
        # the fields in the order they always had, with where the figure went
        as_json={
            "group": result.group,
            "plot": plot,
            "seconds": result.seconds,
            "executor": result.executor,
            "jobs": result.jobs,
        },
    )
    if report:
        for run_dir in result.group.runs:
            write_run_report(run_dir)


def _print_seeds(result: SeedsResult, plot: Path) -> None:
    """The group's noise as the runs' pages show it (laid out once, in nanolm.report.sections.run), then how long
    the group took and where its figure went."""
    from ..io import to_jsonable
    from ..report.sections.run import seed_noise_table
    from ..tables import to_rich

    out = console()
    out.print(to_rich(seed_noise_table(to_jsonable(result.group))))  # the "group" of --json
    out.print(f"the group took {result.seconds:.1f} s; plot written to {plot}")


@click.command()
@click.argument("group_a")
@click.argument("group_b")
@click.option("--metric", default="val_loss", show_default=True, help="Final metric to compare.")
@click.option("--higher-is-better", is_flag=True, help="The metric improves upwards (accuracy).")
@click.option("--change", multiple=True, metavar="KEY", help="Config key(s) the comparison is about (repeatable).")
@runs_dir_option
@json_option
def compare(
    group_a: str, group_b: str, metric: str, higher_is_better: bool, change: tuple[str, ...], runs_dir: str, json_out: bool
) -> None:
    """Noise-aware verdict: is GROUP_B better than GROUP_A beyond the seed noise?"""
    from ..repro.compare import compare_run_groups

    result = compare_run_groups(group_a, group_b, metric, higher_is_better, list(change), runs_dir)
    emit(result, _print_comparison, json_out, result.warnings)


def _print_comparison(result: GroupComparison) -> None:
    from rich.table import Table

    c = result.comparison
    table = Table(
        title=f"{result.metric}: {result.group_a} (A) vs {result.group_b} (B), "
        f"{'higher' if c.higher_is_better else 'lower'} is better"
    )
    for col in ("", "A", "B"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("seeds", str(c.n_a), str(c.n_b))
    table.add_row("mean", f"{c.mean_a:.4f}", f"{c.mean_b:.4f}")
    table.add_row("std", "-" if c.std_a is None else f"{c.std_a:.4f}", "-" if c.std_b is None else f"{c.std_b:.4f}")
    table.add_row("spread (max − min)", f"{c.spread_a:.4f}", f"{c.spread_b:.4f}")
    out = console()
    out.print(table)
    out.print(
        f"B − A = {c.diff:+.4f}, 95% bootstrap CI [{c.ci_low:+.4f}, {c.ci_high:+.4f}]; "
        f"P(B better than A) = {c.prob_improvement:.2f}; Welch p = "
        + ("-" if c.welch_p is None else f"{c.welch_p:.3g}")
        + f"; difference {'larger' if c.seed_spread_rule else 'not larger'} than the seed spread"
    )
    out.print(f"[bold]verdict: {c.verdict.value}[/bold] ({c.reason})")


@click.group()
def experiment() -> None:
    """Kill criteria written in advance: run an experiment file, then KEEP or KILL."""


@experiment.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--jobs", type=JOBS, default=1, show_default=True, help="Runs at a time (local executor).")
@click.option("--executor", type=click.Choice(["local", "debug", "slurm"]), default="local", show_default=True)
@slurm_options
@json_option
def experiment_run(file: Path, jobs: int, executor: str, slurm: SlurmResources | None, json_out: bool) -> None:
    """Train the runs the experiment still lacks (finished runs are reused)."""
    from ..repro.experiment import run_experiment

    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    result = run_experiment(
        file,
        jobs,
        on_done=lambda g, s, status: click.echo(f"{g} seed {s} {status.value}", err=True),
        executor=executor,
        slurm=slurm,
    )
    emit(result, lambda r: _print_experiment_run(r, file), json_out)


def _print_experiment_run(result: ExperimentRun, file: Path) -> None:
    diverged = f" ({len(result.diverged)} diverged)" if result.diverged else ""
    console().print(
        f"{len(result.ran)} runs trained{diverged}, {len(result.reused)} reused; next: nanolm experiment verdict {file}"
    )


@experiment.command("verdict")
@click.argument("file", type=click.Path(path_type=Path))
@json_option
def experiment_verdict_command(file: Path, json_out: bool) -> None:
    """KEEP or KILL, by the rule the file wrote down before the runs, with the evidence per scale."""
    from ..repro.experiment import experiment_verdict

    v = experiment_verdict(file)
    emit(v, _print_verdict, json_out, v.warnings)


def _print_verdict(v: ExperimentVerdict) -> None:
    from rich.table import Table

    table = Table(title=f'{v.idea}: rule "{v.rule}"')
    for col in ("scale", "baseline", "candidate", "candidate − baseline", "verdict"):
        table.add_column(col)
    for r in v.scales:
        table.add_row(
            r.scale,
            f"{r.mean_baseline:.4f}",
            "-" if r.mean_candidate is None else f"{r.mean_candidate:.4f}",
            "-" if r.diff is None else f"{r.diff:+.4f}",
            r.verdict.value,
        )
    out = console()
    out.print(table)
    out.print(f"[bold]{v.decision.value}[/bold]: {v.reason}")


# ---- bisect -----------------------------------------------------------------------------------


@click.command("bisect")
@click.option("--good", required=True, help="A commit where the metric was fine (sha, tag or branch).")
@click.option("--bad", required=True, help="A later commit where it is broken.")
@click.option(
    "--metric",
    default="val_loss",
    show_default=True,
    help="Final metric of each run: val_loss, train_loss, tokens_per_s or seconds.",
)
@click.option("--threshold", type=finite(), required=True, help="Good at or below it (at or above with --higher-is-better).")
@click.option("--higher-is-better", is_flag=True, help="Larger values are good, e.g. for tokens_per_s.")
@click.option(
    "--noise",
    type=finite(),
    default=0.0,
    show_default=True,
    help="A value this close to the threshold skips the commit instead of judging it.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=finite(max=7 * 86_400.0),
    default=600,
    show_default=True,
    help="Seconds per training run; a slower commit is skipped.",
)
@set_option
@json_option
def bisect_cmd(
    good: str,
    bad: str,
    metric: str,
    threshold: float,
    higher_is_better: bool,
    noise: float,
    timeout_s: float,
    set_: tuple[str, ...],
    json_out: bool,
) -> None:
    """Find the first commit whose short training run breaks a metric (git bisect run).

    Each commit is trained in a temporary worktree with the --set overrides: good, bad, or skipped when
    it does not train or lands within --noise of the threshold. Your working tree, branch and index are
    left as they are, also on Ctrl-C.

    \b
    nanolm bisect --good v0.1 --bad HEAD --threshold 4.5 --set steps=200
    """
    from ..config import check_finite, parse_overrides
    from ..repro.bisect import bisect_metric

    check_finite(parse_overrides(list(set_)))  # --set lr=nan: one line now, not a skip at every commit's worktree

    def show(step: BisectStep) -> None:  # progress on stderr, so --json output stays clean
        click.echo(f"{step.commit[:12]}  {step.outcome:<4}  {step.reason}", err=True)

    result = bisect_metric(
        Path.cwd(),
        good,
        bad,
        metric,
        threshold,
        list(set_),
        higher_is_better=higher_is_better,
        noise=noise,
        timeout_s=timeout_s,
        on_step=show,
    )
    emit(result, _print_bisection, json_out)
    if result.first_bad is None:
        click.get_current_context().exit(1)


def _print_bisection(result: BisectResult) -> None:
    if result.first_bad is not None:
        console().print(f"first bad commit: {result.first_bad} {result.subject}", highlight=False)
    else:
        console().print(
            "skipped commits hide the first bad commit; it is one of:\n  " + "\n  ".join(result.candidates), highlight=False
        )
