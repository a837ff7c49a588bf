"""``nanolm lens`` and ``nanolm probe``: thin click commands over nanolm.interp.
Heavy imports (torch, scikit-learn, transformers) happen inside the commands."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError
from .output import OutputFile, console, json_option, print_json, runs_dir_option, warn, working


class _DefaultCommandGroup(click.Group):
    """A group whose first argument is a subcommand or, failing that, the default command's argument:
    ``nanolm lens RUN --prompt ...`` runs ``lens show``; ``nanolm lens train RUN`` trains."""

    default_command = "show"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


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
@click.option("--positions", default="all", show_default=True, help="all, last, or indices such as 0,3,-1.")
@click.option("--k", "k", default=5, show_default=True, help="Top-k tokens per cell.")
@click.option("--tuned", "tuned", is_flag=True, help="Use the tuned lens trained by `nanolm lens train`.")
@click.option("--lens-dir", type=click.Path(path_type=Path), help="Where the tuned lens is (default: beside the run).")
@click.option("--no-final-norm", is_flag=True, help="Project the raw residual with W_U, skipping the final norm.")
@click.option("--no-bos", is_flag=True, help="Do not put a start-of-document token before the prompt.")
@click.option("--plot", type=OutputFile("lens.png", ".png"), default="lens.png", show_default=True, help="Heatmap PNG.")
@runs_dir_option
@json_option
def lens_show(model: str, prompt: str, positions: str, k: int, tuned: bool, lens_dir: Path | None, no_final_norm: bool,
              no_bos: bool, plot: Path, runs_dir: str, json_out: bool) -> None:
    """The logit lens: what each layer would predict if the model ended there."""
    from ..interp.lens import lens_figure, logit_lens
    from ..interp.tuned_lens import TunedLens, default_lens_dir
    from ..interp.view import load_view
    from ..plots import save_figure

    if k <= 0:
        raise UserError(f"--k must be > 0, got {k}")
    view = load_view(model, runs_dir)
    translator = TunedLens.load(lens_dir or default_lens_dir(view), view) if tuned else None
    result = logit_lens(view, prompt, positions, k, not no_final_norm, translator, not no_bos)
    plot_path = save_figure(lens_figure(result), plot)
    if json_out:
        print_json({**_as_dict(result), "plot": str(plot_path)})
        return
    _print_lens(result)
    console().print(f"heatmap written to {plot_path}")


def _as_dict(obj) -> dict:
    from dataclasses import asdict

    return asdict(obj)


def _print_lens(result) -> None:
    from rich.table import Table

    out = console()
    kind = "tuned lens" if result.tuned else ("logit lens" if result.final_norm else "raw projection (no final norm)")
    for j, pos in enumerate(result.positions):
        context = " ".join(result.tokens[: pos + 1])
        table = Table(title=f"{kind} at position {pos} ({result.tokens[pos]!r}); the model predicts "
                            f"{result.final_tokens[j]!r}", caption=context[-80:])
        for col in ("layer", "top tokens (probability)", f"p({result.final_tokens[j]})", "rank", "KL(final‖layer)",
                    "entropy"):
            table.add_column(col, justify="left" if col.startswith(("layer", "top")) else "right")
        for layer, row in zip(result.layers, result.cells):
            c = row[j]
            tops = ", ".join(f"{t!r} {p:.2f}" for t, p in zip(c.top_tokens, c.top_probs))
            table.add_row(layer, tops, f"{c.final_token_prob:.3f}", str(c.final_token_rank), f"{c.kl_final:.3f}",
                          f"{c.entropy:.2f}")
        out.print(table)
    for note in result.notes:
        out.print(f"note: {note}")


@lens.command("train")
@_model_option
@click.option("--steps", default=300, show_default=True, help="Optimizer steps.")
@click.option("--lr", default=1e-3, show_default=True, help="Adam learning rate (decays linearly to 0).")
@click.option("--batch", default=16, show_default=True, help="Windows per step.")
@click.option("--data", "data_file", type=click.Path(path_type=Path),
              help="Text to train on (default: a nanolm run's own training data).")
@click.option("--out", type=click.Path(path_type=Path), help="Folder to save the lens in (default: RUN/tuned_lens).")
@runs_dir_option
@json_option
def lens_train(model: str, steps: int, lr: float, batch: int, data_file: Path | None, out: Path | None, runs_dir: str,
               json_out: bool) -> None:
    """Learn a tuned lens: one affine translator per layer, KL to the final distribution."""
    from rich.progress import Progress

    from ..interp.tuned_lens import lens_data, train_tuned_lens
    from ..interp.view import load_view

    if batch <= 0:
        raise UserError(f"--batch must be > 0, got {batch}")
    view = load_view(model, runs_dir)
    data = lens_data(view, data_file)
    with Progress(transient=True, disable=json_out) as progress:
        task = progress.add_task("tuned lens", total=steps)

        def on_step(step: int, loss: float) -> None:
            progress.update(task, completed=step, description=f"tuned lens: KL {loss:.4f}")

        result = train_tuned_lens(view, data, steps, lr, batch, out=out, on_step=on_step)
    if json_out:
        print_json(result)
        return
    console().print(f"tuned lens trained in {result.seconds:.1f} s: mean KL over layers {result.first_loss:.4f} → "
                     f"{result.last_loss:.4f} nats; saved to {result.folder}")


@lens.command("eval")
@_model_option
@click.option("--batches", default=8, show_default=True, help="Held-out batches to average over.")
@click.option("--data", "data_file", type=click.Path(path_type=Path), help="Text to evaluate on (default: the run's val split).")
@click.option("--lens-dir", type=click.Path(path_type=Path), help="Where the tuned lens is (default: beside the run).")
@click.option("--plot", type=OutputFile("lens-eval.png", ".png"), default="lens-eval.png", show_default=True)
@runs_dir_option
@json_option
def lens_eval(model: str, batches: int, data_file: Path | None, lens_dir: Path | None, plot: Path, runs_dir: str,
              json_out: bool) -> None:
    """Per-layer KL(final ‖ lens) of the logit lens and the tuned lens on held-out tokens."""
    from rich.table import Table

    from ..interp.tuned_lens import TunedLens, default_lens_dir, evaluate_lenses, lens_data, lens_evaluation_figure
    from ..interp.view import load_view
    from ..plots import save_figure

    if batches <= 0:
        raise UserError(f"--batches must be > 0, got {batches}")
    view = load_view(model, runs_dir)
    tuned = TunedLens.load(lens_dir or default_lens_dir(view), view)
    with working(f"evaluating the logit and tuned lenses on {batches} batches"):
        ev = evaluate_lenses(view, tuned, lens_data(view, data_file), batches)
    plot_path = save_figure(lens_evaluation_figure(ev), plot)
    if json_out:
        print_json({**ev.to_dict(), "plot": str(plot_path)})
        return
    table = Table(title=f"KL(final ‖ lens) on {ev.tokens} held-out tokens, nats")
    for col in ("layer", "logit lens", "tuned lens", "tuned / logit"):
        table.add_column(col, justify="right")
    for layer, a, b in zip(ev.layers, ev.logit_lens_kl, ev.tuned_lens_kl):
        table.add_row(layer, f"{a:.4f}", f"{b:.4f}", f"{b / a:.2f}" if a > 0 else "-")
    out = console()
    out.print(table)
    out.print(f"plot written to {plot_path}")


@click.command()
@_model_option
@click.option("--feature", required=True, help="tense, sentiment, or a CSV/JSONL file with text and label columns.")
@click.option("--layers", default="all", show_default=True, help="all, or a list such as embed,0,3.")
@click.option("--position", type=click.Choice(["last", "mean"]), default="last", show_default=True,
              help="Probe the last token's activation, or the mean over the text's tokens.")
@click.option("--n", "n", default=400, show_default=True, help="Examples drawn from a built-in feature set.")
@click.option("--control", type=click.Choice(["example", "type"]), default="example", show_default=True,
              help="Control task: random labels per example, or per word type (the token probed).")
@click.option("--test-size", default=0.25, show_default=True, help="Held-out fraction (stratified).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--intervene", is_flag=True, help="Erase the feature at a layer and measure what the model loses.")
@click.option("--at", "at_layer", help="Layer to intervene at (default: the most selective layer).")
@click.option("--method", type=click.Choice(["leace", "projection"]), default="leace", show_default=True)
@click.option("--erase-at", type=click.Choice(["last", "all"]), default="last", show_default=True,
              help="Erase at each text's last token (what the probe reads) or at every token.")
@click.option("--plot", type=OutputFile("probe.png", ".png"), default="probe.png", show_default=True)
@runs_dir_option
@json_option
def probe(model: str, feature: str, layers: str, position: str, n: int, control: str, test_size: float, seed: int,
          intervene: bool, at_layer: str | None, method: str, erase_at: str, plot: Path, runs_dir: str,
          json_out: bool) -> None:
    """Linear probes per layer: held-out accuracy beside majority rate, control task and selectivity."""
    from ..interp.interventions import check_intervention
    from ..interp.interventions import intervene as run_intervention
    from ..interp.probes import feature_dataset, parse_layers, probe_figure
    from ..interp.probes import probe as run_probe
    from ..interp.view import load_view
    from ..plots import save_figure

    if n < 4:
        raise UserError(f"--n must be at least 4, got {n}")
    if not 0.0 < test_size < 1.0:
        raise UserError(f"--test-size must be between 0 and 1, got {test_size}")
    if at_layer is not None and not intervene:
        raise UserError("--at names the layer to intervene at; add --intervene")
    view = load_view(model, runs_dir)
    data = feature_dataset(feature, n, seed)
    at = None if at_layer is None else parse_layers(at_layer, view)
    if at is not None and len(at) != 1:
        raise UserError(f"--at {at_layer}: give one layer, e.g. --at {at[0]}")
    if intervene:
        check_intervention(data, erase_at)
    with working(f"probing {len(data.texts)} texts at {layers} layers"):
        result = run_probe(view, data, parse_layers(layers, view), position, control, test_size, seed)
    if intervene:
        layer = result.best.layer if at is None else at[0]
        with working(f"erasing {data.name} at layer {layer}, and 10 random edits of the same size"):
            result.intervention = run_intervention(view, data, layer, method, test_size=test_size, seed=seed,
                                                   erase_at=erase_at)
    plot_path = save_figure(probe_figure(result), plot)
    for w in result.warnings:
        warn(w)
    if json_out:
        print_json({**_as_dict(result), "best_layer": result.best.layer, "warnings": result.warnings,
                     "plot": str(plot_path)})
        return
    _print_probe(result)
    console().print(f"plot written to {plot_path}")


def _print_probe(result) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"probe for {result.feature} ({', '.join(result.classes)}) on {result.model}: "
                        f"{result.n} examples, position {result.position}")
    for col in ("layer", "held-out acc", "95% CI", "majority", f"control ({result.control})", "selectivity",
                "train acc"):
        table.add_column(col, justify="right")
    best = result.best.layer
    for p in result.layers:
        style = "bold" if p.layer == best else None
        table.add_row(p.layer, f"{p.accuracy:.3f}", f"{p.accuracy_ci[0]:.2f}–{p.accuracy_ci[1]:.2f}", f"{p.majority:.3f}",
                      f"{p.control_accuracy:.3f}", f"{p.selectivity:+.3f}", f"{p.train_accuracy:.3f}", style=style)
    out.print(table)
    first = result.layers[0]
    out.print(f"{first.n_train} train / {first.n_test} held-out examples, dimension {first.dim}. "
                  "High held-out accuracy says the feature is readable, not that the model uses it"
                  + ("." if result.intervention else ": add --intervene to test that."))
    iv = result.intervention
    if iv is not None:
        out.rule(f"intervention at layer {iv.layer}: {iv.method} erasure of {iv.rank} direction(s)")
        out.print(f"{iv.measure}, {iv.scored} texts: {iv.base:.4f} → {iv.erased:.4f} ({iv.delta:+.4f}); "
                      f"edits of the same size (mean ‖Δx‖ {iv.edit_norm:.3g}) along {iv.rank} random direction(s): "
                      f"{iv.random_mean:+.4f} ± {iv.random_std:.4f} over {len(iv.random_deltas)} draws")
        if iv.preference_base is not None:
            out.print(f"target preferred over its contrast: {iv.preference_base:.3f} → {iv.preference_erased:.3f}")
        out.print(f"a fresh probe on the erased activations: {iv.probe_accuracy_after:.3f} "
                      f"(majority {iv.majority:.3f})")
        out.print(f"[bold]verdict[/bold]: {iv.verdict.value}: {iv.reason}")
