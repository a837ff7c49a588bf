"""``nanolm lens`` and ``nanolm probe``: thin click commands over nanolm.interp.
Heavy imports (torch, scikit-learn, transformers) happen inside the commands."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import FIGURES, LENS, PROBES
from .output import (
    MAX_STEPS,
    MAX_TOP_K,
    SEED,
    OutputFile,
    check_report,
    console,
    count,
    emit,
    file_name,
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
    from matplotlib.figure import Figure
    from rich.console import Console

    from ..interp.lens import LensResult
    from ..interp.probes import InterventionResult, ProbeResult
    from ..interp.tuned_lens import LensEvaluation
    from ..interp.view import ModelView


class _DefaultCommandGroup(click.Group):
    """A group whose first argument is a subcommand or, failing that, the default command's argument:
    ``nanolm lens RUN --prompt ...`` runs ``lens show``; ``nanolm lens train RUN`` trains."""

    default_command = "show"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


MAX_WINDOWS = 10_000  # windows per step of a tuned lens (16 by default)
MAX_BATCHES = 10_000  # held-out batches of a lens evaluation (8 by default)
MAX_EXAMPLES = 100_000  # examples of a probe's feature set (400 by default)
MAX_RANDOM_EDITS = 10_000  # random edits an erasure is compared with (29 by default), each a pass over the texts


def _model_option(f):
    return click.argument("model", metavar="RUN_OR_PATH")(f)


@click.group(cls=_DefaultCommandGroup)
def lens() -> None:
    """The logit lens and the tuned lens.

    \b
    nanolm lens RUN_OR_PATH --prompt "two plus two equals"   the lens table and a heatmap
    nanolm lens train RUN_OR_PATH                            learn a tuned lens
    nanolm lens eval RUN_OR_PATH                             logit lens vs tuned lens, per-layer KL

    RUN_OR_PATH is a nanolm run (folder or name under runs/) or a local Hugging Face model folder.
    """


@lens.command("show")
@_model_option
@click.option("--prompt", "-p", required=True, help="The text to read the model on.")
@click.option(
    "--positions",
    default="last",
    show_default=True,
    help="last (the one that predicts what follows the prompt), all (one table each), or indices such as 0,3,-1.",
)
@click.option(
    "--k",
    "k",
    type=count(MAX_TOP_K, "tokens of any vocabulary here", min=None),
    default=3,
    show_default=True,
    help="Top-k tokens per layer.",
)
@click.option("--tuned", "tuned", is_flag=True, help="Use the tuned lens trained by `nanolm lens train`.")
@click.option("--lens-dir", type=click.Path(path_type=Path), help="Where the tuned lens is (default: beside the run).")
@click.option("--no-final-norm", is_flag=True, help="Project the raw residual with W_U, skipping the final norm.")
@click.option("--no-bos", is_flag=True, help="Do not put a start-of-document token before the prompt.")
@click.option(
    "--plot",
    type=OutputFile("lens.png", ".png"),
    help="Heatmap PNG (default: RUN/figures/lens.png; for a model folder that is not a run, none).",
)
@runs_dir_option
@json_option
@report_option
def lens_show(
    model: str,
    prompt: str,
    positions: str,
    k: int,
    tuned: bool,
    lens_dir: Path | None,
    no_final_norm: bool,
    no_bos: bool,
    plot: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """The logit lens: what each layer would predict if the model ended there.

    The result (the --json output) is saved in the run as RUN/lens/show.json, for nanolm report."""
    from ..interp.lens import lens_figure, logit_lens
    from ..interp.tuned_lens import TunedLens, default_lens_dir
    from ..interp.view import load_view

    if k <= 0:
        raise UserError(f"--k must be > 0, got {k}")
    view = load_view(model, runs_dir)
    check_report(report, view.run_dir)
    plot = _figure_path(plot, view, "lens.png")
    translator = TunedLens.load(lens_dir or default_lens_dir(view), view) if tuned else None
    result = logit_lens(view, prompt, positions, k, not no_final_norm, translator, not no_bos)
    plot_path = _save_figure(lambda: lens_figure(result), plot)
    as_json = {**_as_dict(result), "plot": plot_path}
    save_run_result(view.run_dir, LENS, "show", as_json)
    emit(result, lambda r: _print_lens(r, plot_path), json_out, as_json=as_json)
    if report:
        write_run_report(view.run_dir)


# ---- where figures go: --plot, else the run's figures folder ---------------------------------------


def _figure_path(plot: Path | None, view: ModelView, name: str) -> Path | None:
    """Where a command's figure goes: the --plot path when given; else RUN/figures/name, checked writable
    now, before the work; a model folder that is not a nanolm run gets none (the output says so)."""
    if plot is not None:
        return plot
    if view.run_dir is None:
        return None
    folder = FIGURES.dir(view.run_dir)
    where = folder if folder.is_dir() else folder.parent
    if not os.access(where, os.W_OK):
        raise UserError(f"cannot write figures to {folder}: {where} is read-only; make it writable or give --plot FILE.png")
    return folder / name


def _save_figure(make: Callable[[], Figure], path: Path | None) -> Path | None:
    """Make and write the figure at path (neither when path is None); a file it replaces is named on stderr."""
    from ..plots import save_figure

    if path is None:
        return None
    if path.parent.name == FIGURES.folder and not path.parent.exists():
        FIGURES.dir(path.parent.parent, create=True)
    replaced = path.exists()
    save_figure(make(), path)
    if replaced:
        warn(f"replaced {path}")
    return path


def _figure_note(what: str, path: Path | None) -> str:
    if path is None:
        return f"no {what} written (not a nanolm run, so it has no figures folder): add --plot FILE.png to save one"
    return f"{what} written to {path}"


def _slug(name: str) -> str:
    """A name safe in a file name: "my data" -> "my_data"."""
    return file_name(name, "feature")


def _as_dict(obj) -> dict:
    from dataclasses import asdict

    return asdict(obj)


def _print_lens(result: LensResult, plot_path: Path | None) -> None:
    """The lens tables (one per position, laid out by the report's lens_tables), its notes and
    where the heatmap went."""
    from rich.markup import escape

    from ..report.sections.interp import lens_tables
    from ..tables import to_rich

    out = console()
    for table in lens_tables(result):
        out.print(to_rich(table))
    out.print("model's token: what the last layer predicts; whole tokens and their ids: --json", highlight=False)
    for note in result.notes:
        out.print(escape(f"note: {note}"), highlight=False)
    out.print(_figure_note("heatmap", plot_path), highlight=False)


@lens.command("train")
@_model_option
@click.option(
    "--steps",
    type=count(MAX_STEPS, "steps a tuned lens trains here", min=None),
    default=300,
    show_default=True,
    help="Optimizer steps.",
)
@click.option("--lr", type=finite(), default=1e-3, show_default=True, help="Adam learning rate (decays linearly to 0).")
@click.option(
    "--batch", type=count(MAX_WINDOWS, "windows per step here", min=None), default=16, show_default=True, help="Windows per step."
)
@click.option(
    "--data", "data_file", type=click.Path(path_type=Path), help="Text to train on (default: a nanolm run's own training data)."
)
@click.option("--out", type=click.Path(path_type=Path), help="Folder to save the lens in (default: RUN/tuned_lens).")
@runs_dir_option
@json_option
@report_option
def lens_train(
    model: str,
    steps: int,
    lr: float,
    batch: int,
    data_file: Path | None,
    out: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Learn a tuned lens: one affine translator per layer, KL to the final distribution."""
    from ..interp.tuned_lens import check_writable_folder, default_lens_dir, lens_data, train_tuned_lens
    from ..interp.view import load_view

    if batch <= 0:
        raise UserError(f"--batch must be > 0, got {batch}")
    if steps <= 0:
        raise UserError(f"--steps must be > 0, got {steps}")
    view = load_view(model, runs_dir)
    check_report(report, view.run_dir)
    folder = out if out is not None else default_lens_dir(view)
    check_writable_folder(folder)  # before the data is read and the lens trained
    data = lens_data(view, data_file)
    with step_progress("tuned lens", steps) as on_step:
        result = train_tuned_lens(view, data, steps, lr, batch, out=folder, on_step=on_step)
    emit(result, _print_tuned_lens, json_out)
    if report:
        write_run_report(view.run_dir)


@contextlib.contextmanager
def step_progress(what: str, total: int, stderr: Console | None = None) -> Iterator[Callable[[int, float], None]]:
    """Progress through `total` steps on stderr; yields on_step(step, loss). On a terminal, a bar with
    the loss, the time spent and the time left; elsewhere (a log, a pipe) a line at every tenth of the
    steps with the time left. Then one last line, once all steps are done."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    stderr = stderr if stderr is not None else Console(stderr=True)
    t0 = time.perf_counter()
    if stderr.is_terminal:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("spent,"),
            TimeRemainingColumn(),
            TextColumn("left"),
        )
        with Progress(*columns, console=stderr, transient=True) as bar:
            task = bar.add_task(what, total=total)
            yield lambda step, loss: bar.update(task, completed=step, description=f"{what}: loss {loss:.4f}")
    else:

        def on_step(step: int, loss: float) -> None:
            if step * 10 // total > (step - 1) * 10 // total:  # each tenth of the steps
                left = (time.perf_counter() - t0) / step * (total - step)
                stderr.print(f"{what}: step {step}/{total}, loss {loss:.4f}, {_clock(left)} left", highlight=False)

        yield on_step
    stderr.print(f"{what}: {total} steps in {time.perf_counter() - t0:.1f} s", highlight=False)


def _clock(seconds: float) -> str:
    """0:01:05 for 65 s."""
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _print_tuned_lens(result) -> None:
    console().print(
        f"tuned lens trained in {result.seconds:.1f} s: mean KL over layers {result.first_loss:.4f} → "
        f"{result.last_loss:.4f} nats; saved to {result.folder}"
    )


@lens.command("eval")
@_model_option
@click.option(
    "--batches",
    type=count(MAX_BATCHES, "held-out batches an evaluation reads here", min=None),
    default=8,
    show_default=True,
    help="Held-out batches to average over.",
)
@click.option("--data", "data_file", type=click.Path(path_type=Path), help="Text to evaluate on (default: the run's val split).")
@click.option("--lens-dir", type=click.Path(path_type=Path), help="Where the tuned lens is (default: beside the run).")
@click.option(
    "--plot",
    type=OutputFile("lens-eval.png", ".png"),
    help="KL plot PNG (default: RUN/figures/lens-eval.png; for a model folder that is not a run, none).",
)
@runs_dir_option
@json_option
@report_option
def lens_eval(
    model: str,
    batches: int,
    data_file: Path | None,
    lens_dir: Path | None,
    plot: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Per-layer KL(final ‖ lens) of the logit lens and the tuned lens on held-out tokens.

    The result (the --json output) is saved in the run as RUN/lens/eval.json, for nanolm report."""
    from ..interp.tuned_lens import TunedLens, default_lens_dir, evaluate_lenses, lens_data, lens_evaluation_figure
    from ..interp.view import load_view

    if batches <= 0:
        raise UserError(f"--batches must be > 0, got {batches}")
    view = load_view(model, runs_dir)
    check_report(report, view.run_dir)
    plot = _figure_path(plot, view, "lens-eval.png")
    tuned = TunedLens.load(lens_dir or default_lens_dir(view), view)
    with working(f"evaluating the logit and tuned lenses on {batches} batches"):
        ev = evaluate_lenses(view, tuned, lens_data(view, data_file), batches)
    plot_path = _save_figure(lambda: lens_evaluation_figure(ev), plot)
    as_json = {**ev.to_dict(), "plot": plot_path}
    save_run_result(view.run_dir, LENS, "eval", as_json)
    emit(ev, lambda e: _print_lens_evaluation(e, plot_path), json_out, as_json=as_json)
    if report:
        write_run_report(view.run_dir)


def _print_lens_evaluation(evaluation: LensEvaluation, plot_path: Path | None) -> None:
    """The per-layer KL table (the report's lens_eval_table) and where the plot went."""
    from ..report.sections.interp import lens_eval_table
    from ..tables import to_rich

    out = console()
    out.print(to_rich(lens_eval_table(evaluation)))
    out.print(_figure_note("plot", plot_path), highlight=False)


@click.command()
@_model_option
@click.option("--feature", required=True, help="tense, sentiment, or a CSV/JSONL file with text and label columns.")
@click.option("--layers", default="all", show_default=True, help="all, or a list such as embed,0,3.")
@click.option(
    "--position",
    type=click.Choice(["last", "mean"]),
    default="last",
    show_default=True,
    help="Probe the last token's activation, or the mean over the text's tokens.",
)
@click.option(
    "--n",
    "n",
    type=count(MAX_EXAMPLES, "examples a probe reads here", min=None),
    default=400,
    show_default=True,
    help="Examples drawn from a built-in feature set.",
)
@click.option(
    "--control",
    type=click.Choice(["example", "type"]),
    default="example",
    show_default=True,
    help="Control task: random labels per example, or per word type (the token probed).",
)
@click.option("--test-size", type=finite(), default=0.25, show_default=True, help="Held-out fraction (stratified).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--intervene", is_flag=True, help="Erase the feature at a layer and measure what the model loses.")
@click.option("--at", "at_layer", help="Layer to intervene at (default: the most selective layer).")
@click.option("--method", type=click.Choice(["leace", "projection"]), default="leace", show_default=True)
@click.option(
    "--erase-at",
    type=click.Choice(["last", "all"]),
    default="last",
    show_default=True,
    help="Erase at each text's last token (what the probe reads) or at every token.",
)
@click.option(
    "--random-edits",
    "n_random",
    type=count(MAX_RANDOM_EDITS, "random edits an intervention compares with here", min=None),
    default=29,
    show_default=True,
    help="Random edits of the same size to compare the erasure with: a change the model does not care "
    "about beats all N by luck with probability 1/(N+1); 'used' needs N >= 19.",
)
@click.option(
    "--min-effect",
    type=finite(),
    default=0.05,
    show_default=True,
    help="The smallest change of the loss, in nats, that counts as use (0.05: a 5% change in the "
    "probability of the scored token).",
)
@click.option(
    "--plot",
    type=OutputFile("probe.png", ".png"),
    help="Plot PNG (default: RUN/figures/probe-FEATURE.png; for a model folder that is not a run, none).",
)
@runs_dir_option
@json_option
@report_option
def probe(
    model: str,
    feature: str,
    layers: str,
    position: str,
    n: int,
    control: str,
    test_size: float,
    seed: int,
    intervene: bool,
    at_layer: str | None,
    method: str,
    erase_at: str,
    n_random: int,
    min_effect: float,
    plot: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Linear probes per layer: held-out accuracy beside majority rate, control task and selectivity.

    The result (the --json output, with the intervention) is saved in the run as RUN/probes/FEATURE.json,
    for nanolm report."""
    from ..interp.interventions import check_intervention
    from ..interp.interventions import intervene as run_intervention
    from ..interp.probes import feature_dataset, parse_layers, probe_figure
    from ..interp.probes import probe as run_probe
    from ..interp.view import load_view

    if n < 4:
        raise UserError(f"--n must be at least 4, got {n}")
    if not 0.0 < test_size < 1.0:
        raise UserError(f"--test-size must be between 0 and 1, got {test_size}")
    if at_layer is not None and not intervene:
        raise UserError("--at names the layer to intervene at; add --intervene")
    view = load_view(model, runs_dir)
    check_report(report, view.run_dir)
    data = feature_dataset(feature, n, seed)
    at = None if at_layer is None else parse_layers(at_layer, view)
    if at is not None and len(at) != 1:
        raise UserError(f"--at {at_layer}: give one layer, e.g. --at {at[0]}")
    if intervene:
        check_intervention(data, erase_at, n_random, min_effect)
    plot = _figure_path(plot, view, f"probe-{_slug(data.name)}.png")
    with working(f"probing {len(data.texts)} texts at {layers} layers"):
        result = run_probe(view, data, parse_layers(layers, view), position, control, test_size, seed)
    if intervene:
        layer = result.best.layer if at is None else at[0]
        with working(f"erasing {data.name} at layer {layer}, and {n_random} random edits of the same size"):
            result.intervention = run_intervention(
                view, data, layer, method, n_random, test_size=test_size, seed=seed, erase_at=erase_at, min_effect=min_effect
            )
    plot_path = _save_figure(lambda: probe_figure(result), plot)
    as_json = {**_as_dict(result), "best_layer": result.best.layer, "warnings": result.warnings, "plot": plot_path}
    save_run_result(view.run_dir, PROBES, _slug(data.name), as_json)
    emit(result, lambda r: _print_probe(r, plot_path), json_out, result.warnings, as_json=as_json)
    if report:
        write_run_report(view.run_dir)


def _print_probe(result: ProbeResult, plot_path: Path | None) -> None:
    """The probe per layer (the report's probe_table), what its columns mean, the
    intervention when there was one, and where the plot went."""
    from rich.markup import escape

    from ..report.sections.interp import probe_table
    from ..tables import to_rich

    out = console()
    out.print(to_rich(probe_table(result)))
    first = result.layers[0]
    control = "random labels per example" if result.control == "example" else "random labels per word type"
    out.print(
        escape(
            f"{result.model}; labels {', '.join(result.classes)}; {first.n_train} train / {first.n_test} "
            f"held-out examples, dimension {first.dim}. control accuracy: the same probe on {control}; "
            "selectivity = held-out accuracy - control accuracy."
        ),
        highlight=False,
    )
    if result.intervention is not None:
        _print_intervention(out, result.intervention)
    out.print(_figure_note("plot", plot_path), highlight=False)


def _print_intervention(out: Console, iv: InterventionResult) -> None:
    import math

    from rich.markup import escape

    n = len(iv.random_deltas)
    beaten = sum(abs(d) < abs(iv.delta) for d in iv.random_deltas)
    out.rule(f"intervention at layer {iv.layer}: {iv.method} erasure of {iv.rank} direction(s)")
    out.print(f"{iv.measure}, {iv.scored} texts: {iv.base:.4f} → {iv.erased:.4f} ({iv.delta:+.4f})", highlight=False)
    out.print(
        f"{n} random edits of the same size (mean ‖Δx‖ {iv.edit_norm:.3g}): {iv.random_mean:+.4f} ± {iv.random_std:.4f}",
        highlight=False,
    )
    out.print(
        f"p = {iv.p_value:.3f}: the erasure's change is larger than {beaten} of the {n} (a change the model "
        f"ignores beats all {n} with probability 1/{n + 1})",
        highlight=False,
    )
    out.print(
        f"effect-size floor {iv.min_effect:g} nats (a {math.expm1(iv.min_effect):.0%} change in the scored token's probability)",
        highlight=False,
    )
    if iv.preference_base is not None:
        out.print(f"target preferred over its contrast: {iv.preference_base:.3f} → {iv.preference_erased:.3f}", highlight=False)
    out.print(
        f"a fresh probe on the erased activations: {iv.probe_accuracy_after:.3f} (majority {iv.majority:.3f})", highlight=False
    )
    out.print(f"[bold]verdict[/bold]: {escape(f'{iv.verdict.value}: {iv.reason}')}", highlight=False)
