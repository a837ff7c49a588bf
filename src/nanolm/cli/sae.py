"""``nanolm sae``: sparse autoencoders (train, eval, features), thin click commands over nanolm.interp.sae,
one function per command; sweep and mono (SAEs over a grid × seeds) are in nanolm.cli.sae_grid.
Heavy imports (torch) happen inside the commands."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import SAE
from .output import (
    INTEGER,
    MAX_STEPS,
    MAX_TOP_K,
    SEED,
    GroupWithModules,
    OutputFile,
    check_report,
    console,
    count,
    emit,
    fewer_than_asked,
    file_name,
    finite,
    given_on_command_line,
    json_option,
    progress_bar,
    report_option,
    runs_dir_option,
    save_result,
    warn,
    working,
    write_run_report,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from _typeshed import DataclassInstance

    from ..interp.sae.features import FeatureReport
    from ..interp.sae.metrics import SAEEval
    from ..interp.sae.model import SAEConfig, SparseAutoencoder
    from ..interp.sae.train import TrainResult, TrainSettings
    from ..interp.view import ModelView

HOOK_CHOICES = ("resid_post", "resid_mid", "mlp_out", "resid_pre", "attn_out")  # pipeline.HOOKS (no torch here)
DENSITY_PLOT = "density.png"  # `sae eval`'s default plot, in the SAE's folder
EVAL_RESULT = "eval.json"  # `sae eval`'s result (its --json output), in the SAE's folder: what nanolm report reads

# The largest sizes the sae commands take (see nanolm.cli.output: far past honest use, short of work that never ends)
MAX_EXPANSION = 1_024  # M / D (8 by default)
MAX_LATENTS = 1_000_000  # M, and K of a topk SAE (M = 8 x D by default)
MAX_TOKENS = 100_000_000  # activation tokens collected (200,000 by default), D floats each in memory
MAX_TOKEN_BATCH = 1_000_000  # tokens per optimizer step (1,024 by default)
MAX_TEXTS = 10_000_000  # held-out texts read (1,000 by default)
MAX_TEXT_BATCH = 100_000  # texts per forward pass (32 by default)
MAX_CONTEXTS = 10_000  # top contexts shown per latent (10 by default)
STEPS = count(MAX_STEPS, "steps an SAE trains here", min=None)
EXPANSION = count(MAX_EXPANSION, "times the model's width an SAE takes here", min=None)
LATENTS = count(MAX_LATENTS, "latents of an SAE here", min=None)
TOKENS = count(MAX_TOKENS, "activation tokens collected here", min=None)
TOKEN_BATCH = count(MAX_TOKEN_BATCH, "tokens per step here", min=None)
TEXTS = count(MAX_TEXTS, "held-out texts read here", min=None)


@click.group(cls=GroupWithModules, elsewhere={"sweep": ("sae_grid", "sae_sweep"), "mono": ("sae_grid", "sae_mono")})
def sae() -> None:
    """Sparse autoencoders: f = act(W_enc·(x - b_dec) + b_enc), x̂ = W_dec·f + b_dec.

    \b
    nanolm sae train RUN_OR_PATH --layer 1            train one on the model's activations
    nanolm sae eval SAE                               L0, MSE, FVU, dead/dense, CE recovered, KL
    nanolm sae features SAE                           each latent's top contexts and output effect
    nanolm sae sweep RUN_OR_PATH --layer 1 --l1 1e-3,1e-2   an SAE per value × seed: the L0–FVU frontier
    nanolm sae mono SAE...                            best latent vs best neuron vs probe, per label

    RUN_OR_PATH is a nanolm run (folder or name under runs/) or a local Hugging Face model folder;
    SAE is the folder `nanolm sae train` saved (SAELens's layout).
    """


# ---- nanolm sae train -------------------------------------------------------------------------------


@sae.command("train")
@click.argument("model", metavar="RUN_OR_PATH")
@click.option("--layer", type=INTEGER, required=True, help="The block whose activation is read (0 = the first).")
@click.option(
    "--hook",
    type=click.Choice(HOOK_CHOICES),
    default="resid_post",
    show_default=True,
    help="Where in the block: its output (resid_post), between attention and MLP (resid_mid), the MLP's "
    "output (mlp_out), its input (resid_pre) or attention's output (attn_out).",
)
@click.option(
    "--arch",
    type=click.Choice(["relu", "topk"]),
    default="relu",
    show_default=True,
    help="relu: f = ReLU(W_enc·(x - b_dec) + b_enc) with an L1 penalty; topk: only the K largest.",
)
@click.option("--expansion", type=EXPANSION, help="M = expansion · D latents  [default: 8]")
@click.option("--d-sae", type=LATENTS, help="M, the dictionary's size (instead of --expansion).")
@click.option("--l1", type=finite(), help="relu: λ, the L1 coefficient (activations scaled to E‖x‖² = D)  [default: 0.03]")
@click.option("--k", "k", type=LATENTS, help="topk: K, the active latents per token  [default: min(32, M - 1)]")
@click.option("--tokens", type=TOKENS, default=200_000, show_default=True, help="Activation tokens to collect.")
@click.option("--batch-size", type=TOKEN_BATCH, default=1024, show_default=True, help="Tokens per optimizer step.")
@click.option("--steps", type=STEPS, help="Optimizer steps  [default: one pass over the tokens]")
@click.option("--lr", type=finite(), default=4e-4, show_default=True, help="Adam learning rate (warm-up, then linear decay).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--data",
    "data_file",
    type=click.Path(path_type=Path),
    help="Text file, one text per line (default: a nanolm run's own corpus).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Folder to save the SAE in (default: RUN/sae/L<layer>-<hook>-<arch>-<k or l1>-M<d_sae>; for a model "
    "folder that is not a run, runs/sae/<model>-L<layer>-...).",
)
@click.option("--force", is_flag=True, help="Replace an SAE already saved in that folder.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, mps or auto.")
@runs_dir_option
@json_option
@report_option
def sae_train(
    model: str,
    layer: int,
    hook: str,
    arch: str,
    expansion: int | None,
    d_sae: int | None,
    l1: float | None,
    k: int | None,
    tokens: int,
    batch_size: int,
    steps: int | None,
    lr: float,
    seed: int,
    data_file: Path | None,
    out: Path | None,
    force: bool,
    device: str,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    """Train an SAE on a model's activations at one hook point, then save it (SAELens's layout)."""
    from ..device import resolve_device
    from ..interp.sae.pipeline import hook_name, train_sae
    from ..interp.view import load_view

    settings = train_settings(arch, expansion, d_sae, l1, k, batch_size, steps, lr, seed)
    if tokens < 1:
        raise UserError(f"--tokens must be a positive integer, got {tokens}")
    if batch_size > 0 and tokens < batch_size:
        raise UserError(
            f"--tokens {tokens:,} is fewer than one batch of {batch_size:,}; give more --tokens or a smaller --batch-size"
        )
    torch_device = resolve_device(device, "--device ")
    view = load_view(model, runs_dir, str(torch_device))
    check_report(report, view.run_dir)
    name = hook_name(view, layer, hook)  # an unknown layer or hook: one line, before anything is read
    settings.check(view.d_model, tokens)  # sizes, λ, K < M, one batch: before anything is collected
    cfg = settings.sae_config(view.d_model)
    folder = out if out is not None else _default_sae_folder(view, layer, hook, cfg, settings)
    _check_sae_folder(folder, force)
    with StageProgress() as progress:
        result = train_sae(view, layer, hook, settings, tokens, data_file, torch_device, progress=progress)
    saved = _save_sae(result, folder, force)
    summary = _train_summary(result, settings, name, saved)
    emit(summary, _print_train_summary, json_out, _tokens_warnings(result, data_file))
    if report:
        write_run_report(view.run_dir)


def train_settings(
    arch: str,
    expansion: int | None,
    d_sae: int | None,
    l1: float | None,
    k: int | None,
    batch_size: int,
    steps: int | None,
    lr: float,
    seed: int,
) -> TrainSettings:
    """TrainSettings from the options, after the checks that need no model: options that belong to the
    other architecture, --expansion with --d-sae."""
    from ..interp.sae.train import TrainSettings

    if arch == "topk" and l1 is not None:
        raise UserError("--l1 is the relu SAE's penalty; a topk SAE keeps K latents instead: give --k, or --arch relu")
    if arch == "relu" and k is not None:
        raise UserError("--k is the topk SAE's number of active latents; give --arch topk, or --l1 for relu")
    if expansion is not None and d_sae is not None:
        raise UserError("give --expansion or --d-sae, not both (M = expansion · D)")
    if k is not None and k < 1:
        raise UserError(f"--k must be a positive integer, got {k}")
    settings = TrainSettings(
        arch=arch,
        d_sae=d_sae,
        expansion=8 if expansion is None else expansion,
        l1=TrainSettings.l1 if l1 is None else l1,
        k=k,
        lr=lr,
        batch_size=batch_size,
        steps=steps,
        seed=seed,
    )
    return settings


def _default_sae_folder(view: ModelView, layer: int, hook: str, cfg: SAEConfig, settings: TrainSettings) -> Path:
    """RUN/sae/L<layer>-<hook>-<arch>-<k or l1>-M<d_sae> for a nanolm run; runs/sae/<model>-L<layer>-... for a
    model folder that is not a run (a fixed name: training the same SAE again is refused, as under a run)."""

    knob = f"k{cfg.k}" if cfg.arch == "topk" else f"l1_{settings.l1:g}"
    name = f"L{layer}-{hook}-{cfg.arch}-{knob}-M{cfg.d_sae}"
    if view.run_dir is not None:
        return SAE.path(view.run_dir, name)  # created when the SAE is saved, not before
    model = file_name(view.name, "model")
    return SAE.outside_runs() / f"{model}-{name}"


def _sae_files() -> set[str]:
    """The files nanolm writes in an SAE folder (`sae eval` adds the density plot and its result)."""
    from ..interp.sae.model import CFG, SPARSITY, WEIGHTS

    return {CFG, WEIGHTS, SPARSITY, DENSITY_PLOT, EVAL_RESULT}


def _check_replaceable(folder: Path, force: bool) -> None:
    """A UserError unless folder may become the new SAE: it is absent or empty, or it holds an SAE, --force is
    given, and every file in it is one nanolm wrote there (replacing it must not delete anything else)."""
    if not folder.is_dir():
        return
    present = [p.name for p in folder.iterdir()]
    if not present:
        return
    others = sorted(set(present) - _sae_files())
    if others:
        raise UserError(
            f"{folder} holds files that are not an SAE's ({', '.join(others[:3])}); give a new or empty folder with --out FOLDER"
        )
    if not force:
        raise UserError(f"{folder} already holds an SAE; add --force to replace it, or give --out FOLDER")


def _check_sae_folder(folder: Path, force: bool) -> None:
    """A UserError, before any work, unless the SAE can be saved at folder: not a file; not an SAE already
    (unless --force) nor a folder of other files; a folder that can be created or written."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--out {folder} is a file; an SAE is a folder (cfg.json and weights): give a folder")
    _check_replaceable(folder, force)
    parent = folder.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK) or (folder.is_dir() and not os.access(folder, os.W_OK)):
        raise UserError(
            f"cannot write the SAE to {folder}: {parent} is read-only; make it writable or give another folder with --out FOLDER"
        )


def _save_sae(result: TrainResult, folder: Path, force: bool) -> Path:
    """Save the trained SAE at folder all at once: written in full to a new sibling folder, then renamed into
    place (an existing SAE folder, with --force, is moved aside first and removed after), so an interrupted
    save leaves either the old SAE or the new one, never a mix."""
    from ..io import install_folder, staging_folder

    staging = staging_folder(folder)
    try:
        result.sae.save(staging, result.densities)
        _check_replaceable(folder, force)  # again: the folder may have changed while training
        install_folder(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return folder


class StageProgress:
    """progress(stage, done, total) for pipeline.train_sae: one bar per stage ("collect": tokens, "train":
    steps) on stderr, drawn on a terminal only."""

    def __enter__(self):
        self._bars: dict[str, Callable[[int, int | None], None]] = {}
        self._open: list[AbstractContextManager[Callable[[int, int | None], None]]] = []
        return self.progress

    def progress(self, stage: str, done: int, total: int) -> None:
        if stage not in self._bars:
            for cm in self._open:  # one stage at a time: the previous bar ends when the next starts
                cm.__exit__(None, None, None)
            self._open = []
            label = "collecting activations (tokens)" if stage == "collect" else "training the SAE (steps)"
            cm = progress_bar(label)
            self._bars[stage] = cm.__enter__()
            self._open.append(cm)
        self._bars[stage](done, total)

    def __exit__(self, *exc) -> None:
        for cm in self._open:
            cm.__exit__(*exc)


def _tokens_warnings(result: TrainResult, data_file: Path | None) -> list[str]:
    """One line when the texts ran out before --tokens were collected: asked, available, what training used."""
    if result.tokens_asked is None or result.tokens_collected is None:
        return []
    source = f"--data {data_file}" if data_file is not None else "the run's corpus"
    used = "trained on those (recorded in the SAE's cfg.json as tokens_asked and tokens_collected)"
    fix = "give more text with --data to train on more"
    return fewer_than_asked("--tokens", result.tokens_asked, result.tokens_collected, source, "activation tokens", used, fix)


def _train_summary(result: TrainResult, settings: TrainSettings, hook: str, folder: Path) -> dict:
    """What `sae train` reports: how training went, the final numbers, the settings and where it is saved."""
    from dataclasses import asdict

    last = result.history[-1] if result.history else {}
    cfg = result.sae.cfg
    return {
        "folder": folder,
        "hook": hook,
        "arch": cfg.arch,
        "d_in": cfg.d_in,
        "d_sae": cfg.d_sae,
        "k": cfg.k,
        "steps": result.steps,
        "tokens": result.tokens,
        "tokens_asked": result.tokens_asked,
        "tokens_collected": result.tokens_collected,
        "seconds": result.seconds,
        "tokens_per_s": result.tokens_per_s,
        "scale": result.scale,
        "final_l0": last.get("l0"),
        "final_mse": last.get("mse"),
        "dead": result.dead,
        "dead_window": cfg.extra.get("dead_window"),
        "resampled": [list(r) for r in result.resampled],
        "settings": {k: v for k, v in asdict(settings).items() if not (cfg.arch == "topk" and k == "l1")},
    }


def _print_train_summary(s: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    out.print(
        escape(
            f"trained a {s['arch']} SAE at {s['hook']}: D = {s['d_in']}, M = {s['d_sae']}" + (f", K = {s['k']}" if s["k"] else "")
        ),
        highlight=False,
    )
    table = Table(show_header=False, box=None)
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_column(justify="left")
    rows = [
        ("steps", f"{s['steps']:,}", ""),
        ("tokens", f"{s['tokens']:,}", "steps × batch size"),
        ("tokens/s", f"{s['tokens_per_s']:,.0f}", f"{s['seconds']:.1f} s of training"),
        ("final L0", f"{s['final_l0']:.2f}", "active latents per token, last batch"),
        ("final MSE", f"{s['final_mse']:.4g}", "last batch, on the scaled activations"),
        ("dead latents", f"{s['dead']:,} / {s['d_sae']:,}", f"none active in the last {s['dead_window']:,} tokens"),
        ("activation scale s", f"{s['scale']:.4g}", "folded into the saved weights"),
    ]
    if s["resampled"]:
        rows.append(("resampled", ", ".join(f"{b} at step {a}" for a, b in s["resampled"]), "dead latents"))
    for row in rows:
        table.add_row(*(escape(c) for c in row))
    out.print(table)
    settings = ", ".join(f"{k}={v}" for k, v in s["settings"].items() if v is not None)
    out.print(escape(f"settings: {settings}"), highlight=False)
    out.print(
        escape(
            f"saved to {s['folder']} (cfg.json, sae_weights.safetensors, sparsity.safetensors); "
            f"evaluate it: nanolm sae eval {s['folder']}"
        ),
        highlight=False,
    )


# ---- the SAE a command reads, and its model ---------------------------------------------------------


def _sae_argument(f):
    return click.argument("sae_folder", metavar="SAE", type=click.Path(path_type=Path))(f)


def model_option(f):
    return click.option(
        "--model",
        "model",
        metavar="RUN_OR_PATH",
        help="The model the SAE reads (default: the run it is saved under, RUN/sae/NAME).",
    )(f)


def _load(folder: Path, model: str | None, runs_dir: str) -> tuple[ModelView, SparseAutoencoder]:
    """(view, SAE): the SAE at folder (a damaged one refused), on its model: --model, else the run it is saved
    under; one trained on another model is refused by fingerprint."""
    from ..interp.sae.model import load_sae
    from ..interp.sae.pipeline import check_same_model
    from ..interp.view import load_view

    sae_model = load_sae(folder)  # corrupt or missing files: one line, before the model is loaded
    ref = model if model is not None else SAE.run_holding(folder)
    if ref is None:
        raise UserError(
            f"{folder} is not saved under a nanolm run (RUN/sae/NAME): give the model it reads with --model RUN_OR_PATH"
        )
    view = load_view(ref, runs_dir)
    check_same_model(sae_model, view, str(folder))
    return view, sae_model.to(view.device)


def _held_out(view: ModelView, data_file: Path | None, n: int) -> tuple[list[str], list[str]]:
    """The first n held-out texts (the run's validation lines, or the held-out tenth of --data's lines), and the
    warning line when --texts asked for more than there are."""
    from ..interp.sae.pipeline import texts_for

    if n < 1:
        raise UserError(f"--texts must be a positive integer, got {n}")
    held = texts_for(view, data_file)[1]
    if not given_on_command_line("n_texts"):  # the default reads what there is, up to 1,000
        return held[:n], []
    source = f"--data {data_file}'s held-out tenth" if data_file is not None else "the run's validation split"
    fix = "give a larger --data file to read more"
    return held[:n], fewer_than_asked("--texts", n, len(held), source, "texts", "read all of them", fix)


# ---- nanolm sae eval --------------------------------------------------------------------------------

# The definitions of nanolm.interp.sae.metrics's docstring, word for word (a test holds them equal): the
# help text is read without importing torch.
METRICS_HELP = """\
Every metric, exactly (x: activations [N, D] at the SAE's hook over the N evaluated tokens, x̂ the SAE's
reconstruction, f its latents [N, M]):

\b
- L0: mean over tokens of the number of latents with f > 0.
- MSE: mean over tokens and dimensions of (x - x̂)², in the raw activations' units.
- FVU (fraction of variance unexplained): Σ‖x - x̂‖² / Σ‖x - x̄‖², x̄ the mean activation over the N tokens:
  variance about the mean, not about zero (SAELens once measured it about zero: issues #659, #665, #710).
- dead latents: no f > 0 on any of the N evaluated tokens (the window is N, stated with the result);
  dense latents: f > 0 on more than 10% of them.
- CE loss recovered: (CE_ablated - CE_spliced) / (CE_ablated - CE_clean), CE the mean next-token cross
  entropy (nats) over the evaluated positions that have a next token; spliced: x̂ in place of x at the
  hook; ablated: zeros (zero ablation) or x̄ at every position (mean ablation). 1 = the SAE loses nothing,
  0 = no better than ablating the activation.
- KL: mean over positions of KL(clean ‖ spliced) of the next-token distributions, nats.
"""


@sae.command(
    "eval",
    help="Evaluate an SAE on held-out texts: every metric, and a histogram of the latents' "
    "log10 firing densities (PNG). The result (the --json output) is saved beside the SAE as "
    "SAE/eval.json, for nanolm report.\n\n" + METRICS_HELP,
)
@_sae_argument
@model_option
@click.option(
    "--data",
    "data_file",
    type=click.Path(path_type=Path),
    help="Text file, one text per line; its held-out tenth is read (default: the run's validation lines).",
)
@click.option("--texts", "n_texts", type=TEXTS, default=1000, show_default=True, help="At most this many held-out texts.")
@click.option(
    "--batch-size",
    type=count(MAX_TEXT_BATCH, "texts per forward pass here", min=None),
    default=32,
    show_default=True,
    help="Texts per forward pass.",
)
@click.option("--plot", type=OutputFile("density.png", ".png"), help="Density histogram PNG (default: SAE/density.png).")
@runs_dir_option
@json_option
@report_option
def sae_eval(
    sae_folder: Path,
    model: str | None,
    data_file: Path | None,
    n_texts: int,
    batch_size: int,
    plot: Path | None,
    runs_dir: str,
    json_out: bool,
    report: bool,
) -> None:
    from ..interp.sae.metrics import density_figure, evaluate_sae
    from ..io import check_writable_file
    from ..plots import save_figure

    if batch_size < 1:
        raise UserError(f"--batch-size must be a positive integer, got {batch_size}")
    view, sae_model = _load(sae_folder, model, runs_dir)
    check_report(report, view.run_dir)
    plot = plot if plot is not None else check_writable_file(sae_folder / DENSITY_PLOT, "--plot", DENSITY_PLOT)
    texts, short = _held_out(view, data_file, n_texts)
    with working(f"evaluating the SAE on {len(texts):,} held-out texts"):
        ev = evaluate_sae(view, sae_model, texts, batch_size=batch_size)
    if not math.isfinite(ev.mse):  # the SAE's weights are finite (load_sae checks): the activations are not
        raise UserError(f"NaN or infinite activations at {ev.hook} on the held-out texts; check the model (a diverged run?)")
    save_figure(density_figure(ev), plot)
    as_json = {
        **{k: v for k, v in as_dict(ev).items() if k != "densities"},
        "sae": sae_folder,
        "plot": plot,
        "dead_window": ev.dead_window,
    }
    _save_eval(sae_folder, as_json)
    emit(ev, lambda e: _print_eval(e, str(sae_folder), plot), json_out, short, as_json=as_json)
    if report:
        write_run_report(view.run_dir)


def _save_eval(folder: Path, as_json: dict) -> Path | None:
    """The evaluation in the SAE's own folder (SAE/eval.json: RUN/sae/NAME/eval.json, where nanolm report reads it, for
    an SAE saved under its run), replacing the last one; a folder that cannot be written is a warning."""
    try:
        return save_result(folder / EVAL_RESULT, as_json)
    except UserError as e:
        warn(f"the evaluation was not saved beside the SAE: {e}")
        return None


def as_dict(obj: DataclassInstance) -> dict:
    from dataclasses import asdict

    return asdict(obj)


def _print_eval(ev: SAEEval, name: str, plot: Path) -> None:
    """Every metric with its definition (the report's sae_eval_table; the SAE named by the folder given) and where
    the densities histogram went."""
    from rich.markup import escape

    from ..report.sections.interp import sae_eval_table
    from ..tables import to_rich

    out = console()
    out.print(to_rich(sae_eval_table(ev, name)))
    out.print(escape(f"Latent densities histogram written to {plot}"), highlight=False)


# ---- nanolm sae features ----------------------------------------------------------------------------


@sae.command("features")
@_sae_argument
@model_option
@click.option(
    "--top",
    type=count(MAX_CONTEXTS, "contexts per latent here", min=None),
    default=10,
    show_default=True,
    help="Contexts per latent (largest activation first).",
)
@click.option(
    "--feature",
    "latents",
    type=INTEGER,
    multiple=True,
    metavar="F",
    help="A latent to read (repeatable; default: the --count densest latents that fire).",
)
@click.option("--count", type=LATENTS, default=10, show_default=True, help="Latents to read when no --feature is given.")
@click.option(
    "--k-tokens",
    type=count(MAX_TOP_K, "tokens of any vocabulary here", min=None),
    default=5,
    show_default=True,
    help="Promoted and suppressed output tokens per latent.",
)
@click.option(
    "--data",
    "data_file",
    type=click.Path(path_type=Path),
    help="Text file, one text per line; its held-out tenth is read (default: the run's validation lines).",
)
@click.option(
    "--texts",
    "n_texts",
    type=TEXTS,
    default=1000,
    show_default=True,
    help="At most this many held-out texts (each distinct one read once).",
)
@runs_dir_option
@json_option
def sae_features(
    sae_folder: Path,
    model: str | None,
    top: int,
    latents: tuple[int, ...],
    count: int,
    k_tokens: int,
    data_file: Path | None,
    n_texts: int,
    runs_dir: str,
    json_out: bool,
) -> None:
    """Each latent's top-activating held-out contexts (the token in brackets), its firing density, and the
    output tokens it promotes and suppresses: its direct effect (W_dec[i] ⊙ γ) · W_U, γ the final norm's
    weight, in logits per unit of activation before the norm's 1/RMS factor."""
    from ..interp.sae.features import check_latents, features

    for name, value in (("--top", top), ("--count", count), ("--k-tokens", k_tokens)):
        if value < 1:
            raise UserError(f"{name} must be a positive integer, got {value}")
    view, sae_model = _load(sae_folder, model, runs_dir)
    check_latents(latents, sae_model.cfg.d_sae)  # before the texts are read
    texts, short = _held_out(view, data_file, n_texts)
    with working(f"reading the SAE's latents on {len(texts):,} held-out texts"):
        report = features(view, sae_model, texts, top, list(latents) or None, count, k_tokens)
    emit(report, _print_features, json_out, short)


def _print_features(report: FeatureReport) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    out.print(
        escape(
            f"{report.chosen}, at {report.hook}, over {report.tokens:,} tokens of {report.texts:,} distinct "
            f"held-out texts (start tokens left out); {report.dead:,} of {report.d_sae:,} latents never fire there"
        ),
        highlight=False,
    )
    for feat in report.features:
        table = Table(
            title=escape(f"latent {feat.latent}: density {feat.density:.2%}, max {feat.max_activation:.3g}"), title_justify="left"
        )
        table.add_column("act", justify="right", no_wrap=True)
        table.add_column("context")
        for c in feat.contexts:
            table.add_row(f"{c.activation:.3g}", escape(c.text))
        if not feat.contexts:
            table.add_row("-", "never active on these texts")
        out.print(table)
        out.print(escape("promotes:   " + "  ".join(f"{_tok(t.token)} {t.value:+.3g}" for t in feat.promoted)), highlight=False)
        out.print(escape("suppresses: " + "  ".join(f"{_tok(t.token)} {t.value:+.3g}" for t in feat.suppressed)), highlight=False)
    out.print(escape(f"promotes/suppresses: {report.effect}"), highlight=False)


def _tok(t: str) -> str:
    """A token bare when it is a plain word, quoted when it has spaces or is empty."""
    return t if t and t == t.strip() and t.isprintable() else repr(t)
