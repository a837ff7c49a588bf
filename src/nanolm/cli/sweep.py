"""``nanolm sweep``: a thin click command over nanolm.research.sweep. Heavy imports happen inside."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .output import MAX_SEEDS, console, count, emit, json_option, report_option, set_option, write_run_report
from .repro import JOBS, slurm_options

if TYPE_CHECKING:
    from ..repro.executors import JobOutcome, SlurmResources
    from ..research.sweep import SweepResult

MAX_SUGGESTIONS = 1_000  # values suggested to run next (3 by default), each an optimization of the acquisition


@click.command()
@click.argument("param")
@click.option(
    "--values",
    "values",
    required=True,
    metavar="V1,V2,...",
    help="Comma-separated values of PARAM (at least two), e.g. 1e-4,3e-4,1e-3,3e-3,1e-2.",
)
@click.option("--log", is_flag=True, help="PARAM on a log scale: the GP fits log10(PARAM) (learning rates).")
@click.option(
    "--seeds",
    type=count(MAX_SEEDS, "seeds per value here", min=None),
    default=3,
    show_default=True,
    help="Seeds per value; their spread is the GP's observation noise (1 runs, but the noise is not measured).",
)
@set_option
@click.option("--param2", metavar="KEY", help="A second config key: a 2-D sweep over the grid of both.")
@click.option("--values2", metavar="V1,V2,...", help="Comma-separated values of --param2.")
@click.option("--log2", is_flag=True, help="--param2 on a log scale.")
@click.option(
    "--metric",
    default="val_loss",
    show_default=True,
    help="The final metric of each run: val_loss, train_loss, tokens_per_s or seconds.",
)
@click.option("--maximize", is_flag=True, help="Higher is better (e.g. tokens_per_s); lower is better otherwise.")
@click.option(
    "--next",
    "next_k",
    type=count(MAX_SUGGESTIONS, "suggestions a sweep makes here", min=None),
    default=3,
    show_default=True,
    help="Suggest this many values to run next, by expected improvement (0: none).",
)
@click.option(
    "--name",
    default="sweep",
    show_default=True,
    help="The sweep's name: groups are NAME-PARAM-VALUE, the result goes to RUNS_DIR/sweeps/NAME-PARAM/. "
    "Rerunning a sweep of the same name reuses its finished runs.",
)
@click.option("--jobs", type=JOBS, default=1, show_default=True, help="Runs at a time (local executor).")
@click.option("--executor", type=click.Choice(["local", "debug", "slurm"]), default="local", show_default=True)
@slurm_options
@click.option("--runs-dir", help="Folder of run records (the same as --set runs_dir=...; default runs).")
@report_option
@json_option
def sweep(
    param: str,
    values: str,
    log: bool,
    seeds: int,
    set_: tuple[str, ...],
    param2: str | None,
    values2: str | None,
    log2: bool,
    metric: str,
    maximize: bool,
    next_k: int,
    name: str,
    jobs: int,
    executor: str,
    slurm: SlurmResources | None,
    runs_dir: str | None,
    report: bool,
    json_out: bool,
) -> None:
    """Sweep a config key over values on several seeds each; a Gaussian process whose noise is the
    measured seed noise gives the optimum with credible intervals, and whether it beats its neighbours
    beyond noise.

    \b
    nanolm sweep lr --values 1e-4,3e-4,1e-3,3e-3,1e-2 --log --seeds 3 --set steps=300
    nanolm sweep lr --values 1e-3,3e-3,1e-2 --log --param2 warmup_steps --values2 0,30,100

    Prints the per-value results, the measured and fitted noise, the optimum with 95% credible intervals
    for its location and value, the compare verdicts of the best value against its neighbours, and the
    next values to run; writes RUNS_DIR/sweeps/NAME-PARAM/sweep.json and sweep.png.
    """
    from ..plots import save_figure
    from ..research.sweep import run_sweep, sweep_record, sweep_spec, write_sweep
    from ..research.sweep_plots import sweep_figure

    if runs_dir is not None:
        set_ = (*set_, f"runs_dir={runs_dir}")
    spec = sweep_spec(param, values, log, seeds, param2, values2, log2, metric, maximize, next_k, name)

    def start(todo: int, reused: int) -> None:
        click.echo(
            f"sweep {spec.sweep_id}: {len(spec.points)} values × {seeds} seed(s); training {todo} run(s) with "
            f"the {executor} executor"
            + (f", {jobs} at a time" if executor == "local" else "")
            + (f"; {reused} reused from an earlier sweep of this name" if reused else ""),
            err=True,
        )

    def show(done: int, total: int, outcome: JobOutcome) -> None:
        got = outcome.final.get(metric)
        tail = f": {metric} {got:.4f}" if isinstance(got, float) else (f": {outcome.message}" if outcome.message else "")
        click.echo(f"[{done}/{total}] {outcome.group} seed {outcome.seed} {outcome.status}{tail}", err=True)

    result = run_sweep(spec, list(set_), executor, jobs, on_run=show, on_start=start, slurm=slurm)
    path = write_sweep(result)
    plot = save_figure(sweep_figure(result.analysis), result.plot_path)
    warnings = [n for n in result.analysis.notes if n != result.analysis.noise.note]
    emit(
        result,
        lambda r: _print_sweep(r, path, plot),
        json_out,
        warnings,
        as_json={**sweep_record(result), "json": str(path), "plot": str(plot)},
    )
    if report:  # each finished run's page, written once every group is done (so each shows its group's noise)
        for point in result.analysis.points:
            for run_dir in point.runs:
                write_run_report(run_dir)


def _where(at: dict[str, float]) -> str:
    from ..research.sweep import format_value

    return ", ".join(f"{p}={format_value(v)}" for p, v in at.items())


def _print_sweep(result: SweepResult, path: Path, plot: Path) -> None:
    from rich.table import Table

    from ..research.sweep import format_value

    a = result.analysis
    table = Table(
        title=f"sweep {result.name}: {a.metric}, {'higher' if a.maximize else 'lower'} is better; "
        f"{result.trained} runs trained, {result.reused} reused, {result.seconds:.0f} s"
    )
    for p in a.params:
        table.add_column(p, justify="right")
    for col in ("seeds", "mean", "std", "per seed", "GP mean ± 2σ"):
        table.add_column(col, justify="left" if col == "per seed" else "right")
    for point, gp_at in zip(a.points, a.at_points):
        gp = "-" if gp_at is None else f"{gp_at[0]:.4f} ± {2 * gp_at[1]:.4f}"
        diverged = f" ({len(point.diverged)} diverged)" if point.diverged else ""
        table.add_row(
            *(format_value(v) for v in point.at),
            f"{len(point.results)}{diverged}",
            "-" if point.mean is None else f"{point.mean:.4f}",
            "-" if point.std is None else f"{point.std:.4f}",
            " ".join(f"{r:.4f}" for r in point.results),
            gp,
        )
    out = console()
    out.print(table)
    out.print(a.noise.note, highlight=False)
    out.print(f"kernel (standardised {a.metric}): {a.kernel}", highlight=False)
    o = a.optimum
    level = f"{100 * a.credible:g}%"
    intervals = "; ".join(f"{p} in [{format_value(lo)}, {format_value(hi)}]" for p, (lo, hi) in o.at_interval.items())
    out.print(
        f"[bold]optimum[/bold]: {_where(o.at)} ({level} credible interval: {intervals}); "
        f"{a.metric} there {o.value:.4f} ({level} interval [{o.value_interval[0]:.4f}, {o.value_interval[1]:.4f}]); "
        f"the best {a.metric} anywhere in the range: [{o.best_interval[0]:.4f}, {o.best_interval[1]:.4f}]",
        highlight=False,
    )
    if a.distinction is None:
        out.print("the best grid value has no measured neighbour to compare with", highlight=False)
    else:
        d = a.distinction
        head = {True: "distinguishable", False: "not distinguishable", None: "cannot tell"}[d.distinguishable]
        out.print(f"[bold]{head}[/bold]: {d.summary}", highlight=False)
        for c in d.checks:
            out.print(f"  vs {_where(c.neighbour)}: {c.verdict} ({c.reason})", highlight=False)
    if a.next:
        out.print(
            "next to run (expected improvement of the mean function): "
            + "; ".join(f"{_where(s.at)} (EI {s.expected_improvement:.3g})" for s in a.next),
            highlight=False,
        )
    out.print(f"result written to {path}; plot to {plot}", highlight=False)
