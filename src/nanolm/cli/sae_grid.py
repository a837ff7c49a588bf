"""``nanolm sae sweep`` and ``nanolm sae mono``: SAEs over a grid of settings × seeds (their L0–FVU frontiers,
and monosemanticity against the corpus's labels), thin click commands over nanolm.interp.sae.sweep and .mono.
They join the ``nanolm sae`` group in nanolm.cli; the single-SAE commands are in nanolm.cli.sae."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import SAE
from .output import (
    INTEGER,
    MAX_SEEDS,
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
    save_run_result,
    write_run_report,
)
from .sae import (
    EXPANSION,
    HOOK_CHOICES,
    LATENTS,
    MAX_LATENTS,
    STEPS,
    TEXTS,
    TOKEN_BATCH,
    TOKENS,
    StageProgress,
    as_dict,
    model_option,
    train_settings,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..interp.sae.model import SparseAutoencoder
    from ..interp.sae.mono import MonoResult
    from ..interp.sae.sweep import Spread, SweepResult
    from ..interp.sae.train import TrainResult, TrainSettings
    from ..interp.view import ModelView

MAX_LABELLED = 100_000  # texts per labelled set of `sae mono` (400 by default)

# ---- nanolm sae sweep -------------------------------------------------------------------------------


def _grid_values(arch: str, l1: str | None, k: str | None) -> list[float]:
    """The sweep's values from --l1 (relu) or --k (topk), each list checked (one line for an empty or malformed
    list, λ < 0, K < 1)."""
    from ..interp.sae.sweep import parse_values

    if arch == "relu" and k is not None:
        raise UserError("--k lists the topk SAE's K values; give --arch topk, or --l1 λ,λ,... for relu")
    if arch == "topk" and l1 is not None:
        raise UserError("--l1 lists the relu SAE's λ values; give --arch relu, or --k K,K,... for topk")
    given = l1 if arch == "relu" else k
    if given is None:
        raise UserError("give the grid: --l1 1e-3,3e-3,1e-2 (relu) or --arch topk --k 8,16,32")
    values = parse_values(given, arch)
    if arch == "topk":
        for value in values:
            check_count(int(value), "--k", MAX_LATENTS, "latents of an SAE here")
    return values


def _sae_figure_path(plot: Path | None, view: ModelView, name: str) -> Path:
    """--plot, else RUN/sae/NAME (runs/sae/MODEL-NAME for a model folder that is not a run), checked writable."""
    from ..io import check_writable_file

    if plot is not None:
        return plot
    if view.run_dir is not None:
        return check_writable_file(SAE.path(view.run_dir, name, create=True), "--plot", name)
    model = file_name(view.name, "model")
    return check_writable_file(SAE.outside_runs(create=True) / f"{model}-{name}", "--plot", name)


class _grid_progress(StageProgress):
    """StageProgress with the grid's stages: activations collected (tokens), then SAEs trained (of the grid)."""

    def progress(self, stage: str, done: int, total: int) -> None:
        if stage not in self._bars:
            for cm in self._open:
                cm.__exit__(None, None, None)
            self._open = []
            cm = progress_bar("collecting activations (tokens)" if stage == "collect" else "training SAEs (of the grid)")
            self._bars[stage] = cm.__enter__()
            self._open.append(cm)
        self._bars[stage](done, total)


def _grid_settings(
    expansion: int | None, d_sae: int | None, batch_size: int, steps: int | None, lr: float, seeds: int
) -> TrainSettings:
    from ..interp.sae.train import TrainSettings

    if seeds < 1:
        raise UserError(f"--seeds must be a positive integer, got {seeds}")
    if expansion is not None and d_sae is not None:
        raise UserError("give --expansion or --d-sae, not both (M = expansion · D)")
    return TrainSettings(d_sae=d_sae, expansion=8 if expansion is None else expansion, lr=lr, batch_size=batch_size, steps=steps)


def _grid_options(f):
    """The options sweep and mono share: what each SAE is and how it trains."""
    for option in reversed(
        [
            click.option("--layer", type=INTEGER, help="The block whose activation is read (0 = the first)."),
            click.option(
                "--hook",
                type=click.Choice(HOOK_CHOICES),
                default="resid_post",
                show_default=True,
                help="Where in the block (see `nanolm sae train --help`).",
            ),
            click.option("--arch", type=click.Choice(["relu", "topk"]), default="relu", show_default=True),
            click.option(
                "--seeds",
                type=count(MAX_SEEDS, "SAEs per setting here", min=None),
                default=3,
                show_default=True,
                help="SAEs per setting, seeds 0..N-1: their spread is the noise a difference must beat.",
            ),
            click.option("--expansion", type=EXPANSION, help="M = expansion · D latents  [default: 8]"),
            click.option("--d-sae", type=LATENTS, help="M, the dictionary's size (instead of --expansion)."),
            click.option(
                "--tokens",
                type=TOKENS,
                default=200_000,
                show_default=True,
                help="Activation tokens to collect (once; every SAE trains on them).",
            ),
            click.option("--batch-size", type=TOKEN_BATCH, default=1024, show_default=True, help="Tokens per optimizer step."),
            click.option("--steps", type=STEPS, help="Optimizer steps per SAE  [default: one pass over the tokens]"),
            click.option("--lr", type=finite(), default=4e-4, show_default=True, help="Adam learning rate."),
            click.option(
                "--data",
                "data_file",
                type=click.Path(path_type=Path),
                help="Text file, one text per line (default: a nanolm run's own corpus).",
            ),
            click.option("--device", default="cpu", show_default=True, help="cpu, cuda, mps or auto."),
        ]
    ):
        f = option(f)
    return f


@click.command("sweep")
@click.argument("model", metavar="RUN_OR_PATH")
@_grid_options
@click.option("--l1", "l1_values", metavar="λ,λ,...", help="relu: the L1 coefficients, e.g. 1e-3,3e-3,1e-2.")
@click.option("--k", "k_values", metavar="K,K,...", help="topk: the K values, e.g. 8,16,32.")
@click.option("--eval-texts", type=TEXTS, default=1000, show_default=True, help="Held-out texts each SAE is evaluated on.")
@click.option(
    "--save",
    is_flag=True,
    help="Keep every SAE, as RUN/sae/sweep-L<layer>-<hook>-<arch>-<l1_λ or kK>-seed<s> (never overwritten).",
)
@click.option(
    "--plot", type=OutputFile("sweep.png", ".png"), help="Frontier PNG (default: RUN/sae/sweep-L<layer>-<hook>-<arch>.png)."
)
@runs_dir_option
@json_option
@report_option
def sae_sweep(
    model: str,
    layer: int | None,
    hook: str,
    arch: str,
    seeds: int,
    expansion: int | None,
    d_sae: int | None,
    tokens: int,
    batch_size: int,
    steps: int | None,
    lr: float,
    data_file: Path | None,
    device: str,
    l1_values: str | None,
    k_values: str | None,
    eval_texts: int,
    save: bool,
    plot: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Train an SAE for every value × seed of a grid (λ for relu, K for topk), on the same activations, evaluate
    each on held-out texts, and draw the L0–FVU and L0–CE-recovered frontiers with each value's seed spread
    (median, min–max). Neighbouring values whose seed ranges are disjoint differ beyond the seed spread.
    The SAEs train in this process, one after another (see nanolm.interp.sae.sweep). The result (the --json
    output) is saved in the run as RUN/sae/sweep-L<layer>-<hook>-<arch>.json, for nanolm report."""
    from ..device import resolve_device
    from ..interp.sae.sweep import sweep_figure, sweep_sae
    from ..interp.view import load_view
    from ..plots import save_figure

    if layer is None:
        raise UserError("--layer is required: the block whose activation the SAEs read")
    values = _grid_values(arch, l1_values, k_values)
    settings = _grid_settings(expansion, d_sae, batch_size, steps, lr, seeds)
    if eval_texts < 1:
        raise UserError(f"--eval-texts must be a positive integer, got {eval_texts}")
    torch_device = resolve_device(device, "--device ")
    view = load_view(model, runs_dir, str(torch_device))
    check_report(report, view.run_dir)
    stem = f"sweep-L{layer}-{hook}-{arch}"
    plot = _sae_figure_path(plot, view, f"{stem}.png")
    save_dir, prefix = None, f"{stem}-"
    if save and view.run_dir is not None:
        save_dir = SAE.dir(view.run_dir)  # beside `sae train`'s: sae eval/features find the run above them
    elif save:
        save_dir = SAE.outside_runs()
        prefix = file_name(view.name, "model") + f"-{stem}-"
    with _grid_progress() as progress:
        result = sweep_sae(
            view,
            layer,
            hook,
            arch,
            values,
            seeds,
            tokens,
            settings,
            data_file,
            eval_texts,
            torch_device,
            runs_dir,
            save_dir,
            prefix,
            progress,
        )
    replaced = plot.exists()
    save_figure(sweep_figure(result), plot)
    warnings = [f"{'λ' if result.knob == 'l1' else 'K'} = {p.value:g}, seed {p.seed}: {p.error}" for p in result.failed]
    warnings += [f"replaced {plot}"] if replaced else []
    as_json = {**as_dict(result), "plot": plot}
    save_run_result(view.run_dir, SAE, stem, as_json)
    emit(result, lambda r: _print_sweep(r, plot), json_out, warnings, as_json=as_json)
    if report:
        write_run_report(view.run_dir)


def _range(s: Spread, fmt: str) -> str:
    if s.n == 0:
        return "failed"
    return f"{s.median:{fmt}} [{s.min:{fmt}}–{s.max:{fmt}}]" if s.n > 1 else f"{s.median:{fmt}}"


def _print_sweep(r: SweepResult, plot: Path) -> None:
    """The frontier per value (the report's sae_sweep_table), the neighbouring values that
    differ beyond the seed spread, the SAEs saved, and where the plot went."""
    from rich.markup import escape

    from ..report.sections.interp import sae_sweep_table
    from ..tables import to_rich

    out = console()
    knob = "λ" if r.knob == "l1" else "K"
    out.print(to_rich(sae_sweep_table(r)))
    beyond = [d for d in r.neighbours if d.beyond_spread]
    names = {"l0": "L0", "fvu": "FVU", "ce_recovered_zero": "CE recovered (zero)", "ce_recovered_mean": "CE recovered (mean)"}
    if len(r.seeds) < 2:
        out.print("one seed per value: no seed spread, so no difference can be called beyond it (give --seeds 3)")
    for metric in names:
        pairs = [d for d in beyond if d.metric == metric]
        said = ", ".join(f"{d.lower:g}→{d.upper:g} ({d.diff:+.3g})" for d in pairs) or "none"
        out.print(escape(f"{names[metric]}: neighbouring {knob} values beyond the seed spread: {said}"), highlight=False)
    if r.saved:
        out.print(escape(f"{len(r.saved)} SAEs saved: {r.saved[0]} ... {Path(r.saved[-1]).name}"), highlight=False)
    out.print(escape(f"frontiers written to {plot}"), highlight=False)


# ---- nanolm sae mono --------------------------------------------------------------------------------


def _mono_saes(
    folders: tuple[Path, ...],
    model: str | None,
    run: str | None,
    layer: int | None,
    runs_dir: str,
    device: str,
    train: Callable[[ModelView], list[TrainResult]],
) -> tuple[ModelView, list[SparseAutoencoder], list[str]]:
    """(view, SAEs, their names): the folders given (on --model, else the run they are saved under), or
    --seeds SAEs trained on --run (train(view) -> [TrainResult])."""
    from ..interp.sae.model import load_sae
    from ..interp.view import load_view

    if folders and run is not None:
        raise UserError("give SAE folders or --run RUN --layer L --seeds N (to train them), not both")
    if not folders:
        if run is None:
            raise UserError("give SAE folders (nanolm sae mono SAE SAE ...), or --run RUN --layer L --seeds N")
        if layer is None:
            raise UserError("--run needs --layer L: the block the SAEs read")
        view = load_view(run, runs_dir, device)
        results = train(view)
        return view, [r.sae for r in results], [f"seed {r.sae.cfg.extra.get('seed')}" for r in results]
    saes = [load_sae(f, device) for f in folders]  # a damaged folder: one line, before the model is loaded
    ref = model if model is not None else SAE.run_holding(folders[0])
    if ref is None:
        raise UserError(
            f"{folders[0]} is not saved under a nanolm run (RUN/sae/NAME): give the model the SAEs read with --model RUN_OR_PATH"
        )
    return load_view(ref, runs_dir, device), saes, [str(f) for f in folders]


@click.command("mono")
@click.argument("sae_folders", metavar="[SAE]...", nargs=-1, type=click.Path(path_type=Path))
@model_option
@click.option("--run", "run", metavar="RUN_OR_PATH", help="Train --seeds SAEs on this model instead of reading folders.")
@_grid_options
@click.option("--l1", "l1", type=finite(), help="relu (with --run): λ  [default: 0.03]")
@click.option("--k", "k", type=LATENTS, help="topk (with --run): K  [default: min(32, M - 1)]")
@click.option(
    "--labels",
    default=",".join(("tense", "sentiment", "arithmetic", "mcq")),
    show_default=True,
    help="Labelled sets: tense (past/present), sentiment (happy/sad), arithmetic (answer even/odd), mcq (correct option A/B).",
)
@click.option(
    "--n",
    "n",
    type=count(MAX_LABELLED, "texts per labelled set here", min=None),
    default=400,
    show_default=True,
    help="Texts per labelled set (half chooses, half scores).",
)
@click.option(
    "--pool",
    type=click.Choice(["last", "max"]),
    default="last",
    show_default=True,
    help="Read each text's last token, or each unit's maximum over the text.",
)
@click.option("--plot", type=OutputFile("mono.png", ".png"), help="Bar chart PNG (default: RUN/sae/mono-L<layer>-<hook>.png).")
@runs_dir_option
@json_option
def sae_mono(
    sae_folders: tuple[Path, ...],
    model: str | None,
    run: str | None,
    layer: int | None,
    hook: str,
    arch: str,
    seeds: int,
    expansion: int | None,
    d_sae: int | None,
    tokens: int,
    batch_size: int,
    steps: int | None,
    lr: float,
    data_file: Path | None,
    device: str,
    l1: float | None,
    k: int | None,
    labels: str,
    n: int,
    pool: str,
    plot: Path | None,
    runs_dir: str,
    json_out: bool,
) -> None:
    """Monosemanticity against the corpus's ground-truth labels: per labelled set, the best single SAE latent's
    AUROC at separating the label, next to the best MLP neuron's and the best residual basis direction's, and a
    linear probe's accuracy (the ceiling). The best unit is chosen on one half of the texts and scored on the
    other (the best of hundreds of units on the same texts would look better than it is); a unit that fires for
    the other class counts (max(AUROC, 1 - AUROC) picks it, its direction is kept). Over several SAEs (seeds):
    the latent's median and min–max. See nanolm.interp.sae.mono."""
    from ..device import resolve_device
    from ..interp.sae.mono import check_request, mono_figure, monosemanticity
    from ..interp.sae.sweep import train_seeds
    from ..plots import save_figure

    names = [s.strip() for s in labels.split(",") if s.strip()]
    check_request(names, n, pool)  # before any SAE is trained or model run
    settings = train_settings(arch, expansion, d_sae, l1, k, batch_size, steps, lr, 0)
    if seeds < 1:
        raise UserError(f"--seeds must be a positive integer, got {seeds}")
    if tokens < 1:
        raise UserError(f"--tokens must be a positive integer, got {tokens}")

    torch_device = resolve_device(device, "--device ")

    def train(view: ModelView) -> list[TrainResult]:
        with _grid_progress() as progress:
            return train_seeds(view, layer, hook, settings, seeds, tokens, data_file, torch_device, progress)

    view, saes, shown = _mono_saes(sae_folders, model, run, layer, runs_dir, str(torch_device), train)
    result = monosemanticity(view, saes, names, n, pool=pool, names=shown)
    plot = _sae_figure_path(plot, view, f"mono-L{result.layer}-{result.hook.rsplit('hook_', 1)[-1]}.png")
    replaced = plot.exists()
    save_figure(mono_figure(result), plot)
    warnings = result.notes + ([f"replaced {plot}"] if replaced else [])
    emit(result, lambda r: _print_mono(r, plot), json_out, warnings, as_json={**as_dict(result), "plot": plot})


def _print_mono(r: MonoResult, plot: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    where = "the last token" if r.pool == "last" else "each unit's maximum over the text"
    out.print(
        escape(
            f"{r.model} {r.hook}, {len(r.saes)} SAE(s), read at {where}: the best single unit of each kind "
            f"chosen on {1 - r.held_out:.0%} of each set's texts, its AUROC on the other {r.held_out:.0%}"
        ),
        highlight=False,
    )
    table = Table()
    for col in ("label", "latent", "MLP neuron", "basis dir.", "probe", "probe acc. (majority)", "latent vs best neuron"):
        table.add_column(
            col,
            justify="left" if col in ("label", "latent vs best neuron") else "right",
            min_width=13 if col == "latent" else None,
        )
    short = {
        "latent above neuron on every seed": "above, every seed",
        "neuron above latent on every seed": "below, every seed",
        "latent and neuron overlap across seeds": "overlap",
    }
    for row in r.rows:
        mlp = f"{row.mlp_neuron.auroc:.3f}" if row.mlp_neuron is not None else "-"
        table.add_row(
            f"{row.label} ({row.positive}/{row.negative})",
            _range(row.latent_auroc, ".3f"),
            mlp,
            f"{row.basis.auroc:.3f}",
            f"{row.probe_auroc:.3f}",
            f"{row.probe_accuracy:.3f} ({row.majority:.2f})",
            short.get(row.verdict, row.verdict),
        )
    out.print(table)
    out.print(
        escape(
            "latent: median [min–max] over the SAEs; held-out AUROC, 0.5 = chance, 1 = separates the label "
            "perfectly (below 0.5: the unit chosen on the other half was noise); probe: the AUROC of a linear probe's "
            "score, then its accuracy. "
            "--json has each unit's index."
        ),
        highlight=False,
    )
    out.print(escape(f"bars written to {plot}"), highlight=False)
