"""The sweep: one SAE per (value, seed) of a grid of L1 coefficients λ (relu) or of K (topk), each evaluated
on held-out texts, so the L0–FVU and L0–CE-recovered frontiers are drawn with each point's seed spread and a
user sees which differences between neighbouring values are beyond noise.

What varies between the SAEs of one value is the training seed (TrainSettings.seed: the dictionary's random
initialisation, the order of the batches and the resampling draws); every SAE of the sweep trains on the
same stored activations and is evaluated on the same held-out texts, so differences between values are
the knob's and the seeds' alone, not the data sample's.

"Beyond the seed spread": two neighbouring values (adjacent in sorted order) differ on a metric when the
ranges [min, max] of that metric over their seeds are disjoint. With fewer than 2 finished seeds on either
side there is no spread to compare against, and the flag is never set. This is the seed-spread rule of
``nanolm compare`` (repro.stats) on its own: with 2–3 seeds a t-test or a bootstrap says little.

Executors: the grid is trained in this process, one SAE after another (a --jobs of 1), not through
nanolm.repro's executors, because an SAE does not fit their job model:
- a SeedJob is a model-training job (config overrides -> ``train()`` -> a run folder), and its JobOutcome
  carries that run's folder and final metrics; an SAE's input is a store of activations, its output an
  SAE and an evaluation;
- the activations are collected once (one pass of the model over the corpus) and shared by every point of
  the grid; a child process per point would collect them again each time, or need them handed over on disk;
- the layer contract (pyproject.toml, import-linter) keeps interp and repro independent of each other;
- on a GPU the points would queue on the one device anyway, and on a few CPU cores parallel children
  fight over them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...errors import UserError
from ...records import Record
from .store import ActivationStore, collect_store, token_batches
from .train import TrainResult, TrainSettings, fit_sae

if TYPE_CHECKING:
    from matplotlib.figure import Figure

METRICS = ("l0", "fvu", "ce_recovered_zero", "ce_recovered_mean")
EVAL_TEXTS = 1000  # held-out texts each SAE is evaluated on by default (the first ones, the same for all)


# ---- seed spread ------------------------------------------------------------------------------------


@dataclass
class Spread:
    """One number over seeds: its median and its range; NaN (failed seeds) left out, n the rest."""

    median: float
    min: float
    max: float
    n: int
    values: list[float] = field(default_factory=list)  # in seed order, NaN for a seed that failed

    @property
    def width(self) -> float:
        return self.max - self.min


def spread(values: Sequence[float]) -> Spread:
    """Median, min and max of the finite values (NaN everywhere when none is)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return Spread(math.nan, math.nan, math.nan, 0, [float(v) for v in values])
    return Spread(statistics.median(finite), min(finite), max(finite), len(finite), [float(v) for v in values])


def beyond_spread(a: Spread, b: Spread) -> bool:
    """True when the seed ranges [min, max] of a and b are disjoint, each from at least 2 seeds."""
    if a.n < 2 or b.n < 2:
        return False
    return a.max < b.min or b.max < a.min


# ---- results ----------------------------------------------------------------------------------------


@dataclass
class SweepPoint:
    """One SAE of the grid, evaluated on the held-out texts (metrics.SAEEval's definitions)."""

    value: float  # λ (relu) or K (topk)
    seed: int
    l0: float  # mean active latents per token
    fvu: float  # Σ‖x - x̂‖² / Σ‖x - x̄‖²
    ce_recovered_zero: float  # CE loss recovered against zero ablation
    ce_recovered_mean: float  # ... against mean ablation
    mse: float
    kl: float  # KL(clean ‖ spliced), nats per position
    dead: int  # latents never active on the evaluated tokens
    steps: int
    seconds: float  # training time
    error: str | None = None  # why it did not train (its numbers are then NaN)


@dataclass
class SweepValue:
    """One value of the grid: each metric over its seeds."""

    value: float
    l0: Spread
    fvu: Spread
    ce_recovered_zero: Spread
    ce_recovered_mean: Spread


@dataclass
class NeighbourDiff:
    """Two neighbouring values on one metric: do their seed ranges overlap?"""

    metric: str
    lower: float  # the smaller value of the pair
    upper: float
    diff: float  # median at upper - median at lower
    beyond_spread: bool  # the [min, max] ranges over seeds are disjoint (>= 2 seeds each)


@dataclass
class SweepResult(Record):
    model: str
    hook: str
    layer: int
    arch: str  # "relu" or "topk"
    knob: str  # "l1" or "k": what the values are
    values: list[float]  # sorted ascending
    seeds: list[int]
    d_sae: int
    tokens: int  # activation tokens stored; every SAE trains on these
    eval_texts: int  # held-out texts each SAE is evaluated on
    eval_tokens: int
    points: list[SweepPoint]  # values × seeds, value-major
    per_value: list[SweepValue]
    neighbours: list[NeighbourDiff]  # per metric, each pair of neighbouring values
    seconds: float
    saved: list[str] = field(default_factory=list)  # folders the SAEs were saved in, if asked

    @property
    def failed(self) -> list[SweepPoint]:
        return [p for p in self.points if p.error is not None]


def summarize(points: Sequence[SweepPoint], values: Sequence[float]) -> tuple[list[SweepValue], list[NeighbourDiff]]:
    """Per value the spread of each metric over its seeds, and for each metric and each pair of neighbouring
    values (sorted) whether they differ beyond the seed spread."""
    per_value = []
    for v in sorted(values):
        mine = [p for p in points if p.value == v]
        per_value.append(SweepValue(v, *(spread([getattr(p, m) for p in mine]) for m in METRICS)))
    neighbours = []
    for metric in METRICS:
        for lo, hi in zip(per_value, per_value[1:]):
            a, b = getattr(lo, metric), getattr(hi, metric)
            neighbours.append(NeighbourDiff(metric, lo.value, hi.value, b.median - a.median, beyond_spread(a, b)))
    return per_value, neighbours


# ---- checking the grid --------------------------------------------------------------------------------


def parse_values(text: str, arch: str) -> list[float]:
    """ "1e-3,3e-3,1e-2" (relu: λ >= 0) or "8,16,32" (topk: K, positive integers): a UserError naming the
    bad item of an empty or malformed list."""
    option = "--l1" if arch == "relu" else "--k"
    items = [s.strip() for s in (text or "").split(",")]
    if not text or not text.strip() or any(not s for s in items):
        raise UserError(
            f"{option} {text!r}: give a comma-separated list, e.g. "
            + ("--l1 1e-3,3e-3,1e-2" if arch == "relu" else "--k 8,16,32")
        )
    values = []
    for s in items:
        try:
            values.append(float(s) if arch == "relu" else int(s))
        except ValueError:
            kind = "a number" if arch == "relu" else "an integer"
            raise UserError(f"{option}: {s!r} is not {kind} (in {text!r})") from None
    return check_values(values, arch)


def check_values(values: Sequence[float], arch: str) -> list[float]:
    """The values sorted, once each is a usable λ (finite, >= 0) or K (integer >= 1), none twice."""
    option = "--l1" if arch == "relu" else "--k"
    if arch not in ("relu", "topk"):
        raise UserError(f"--arch {arch!r}: give relu or topk")
    if not values:
        raise UserError(f"{option}: give at least one value")
    for v in values:
        if arch == "relu" and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
            raise UserError(f"--l1 {v!r}: λ must be a number >= 0")
        if arch == "topk" and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            raise UserError(f"--k {v!r}: K must be a positive integer")
    if len(set(values)) < len(values):
        twice = next(v for v in values if list(values).count(v) > 1)
        raise UserError(f"{option}: {twice:g} is given twice; each value once (its seeds give the spread)")
    return sorted(values)


def seed_list(seeds: int | Sequence[int]) -> list[int]:
    """An int N -> seeds 0..N-1; a list -> itself, once each is a distinct integer >= 0."""
    if isinstance(seeds, bool):
        raise UserError(f"--seeds must be a positive integer, got {seeds!r}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise UserError(f"--seeds must be >= 1, got {seeds}")
        return list(range(seeds))
    out = list(seeds)
    if not out or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in out) or len(set(out)) < len(out):
        raise UserError(f"seeds {out!r}: give distinct integers >= 0")
    return out


def point_settings(base: TrainSettings, arch: str, value: float, seed: int) -> TrainSettings:
    """base with this point's architecture, knob and seed."""
    if arch == "relu":
        return replace(base, arch=arch, l1=float(value), seed=seed)
    return replace(base, arch=arch, k=int(value), seed=seed)


# ---- activations, collected once ----------------------------------------------------------------------


def collect_for(
    view,
    layer: int,
    hook: str,
    tokens: int,
    batch_size: int,
    data: str | Path | None = None,
    store_folder: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[str, ActivationStore, list[str]]:
    """(hook name, a store of up to `tokens` activations from the training texts, the held-out texts): what
    pipeline.train_sae collects, once, for many SAEs."""
    from .pipeline import hook_name, texts_for

    name = hook_name(view, layer, hook)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise UserError(f"--tokens must be a positive integer, got {tokens!r}")
    if tokens < batch_size:
        raise UserError(
            f"--tokens {tokens:,} is fewer than one batch of {batch_size:,}; give more --tokens or a smaller --batch-size"
        )
    train_texts, held = texts_for(view, data)
    store = collect_store(token_batches(view, train_texts, name), tokens, view.d_model, store_folder, progress=progress)
    if store.n < batch_size:
        store.close()
        raise UserError(
            f"the texts give only {store.n:,} tokens, fewer than one batch of {batch_size:,}; give more "
            "text (--data) or a smaller --batch-size"
        )
    return name, store, held


def _fit(
    view, store: ActivationStore, settings: TrainSettings, name: str, layer: int, device: str | torch.device | None
) -> TrainResult:
    from .pipeline import fingerprint

    return fit_sae(
        store,
        settings,
        device or view.device,
        hook_name=name,
        hook_layer=layer,
        model_name=view.name,
        model_fingerprint=fingerprint(view),
    )


def train_seeds(
    view,
    layer: int,
    hook: str,
    settings: TrainSettings,
    seeds: int | Sequence[int],
    tokens: int,
    data: str | Path | None = None,
    device: str | torch.device | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[TrainResult]:
    """One SAE per seed with these settings, all on the same activations (collected once); in seed order."""
    seeds = seed_list(seeds)
    settings.check(view.d_model, max(tokens, settings.batch_size))  # λ, K < M, sizes: before collecting
    report = (lambda n: progress("collect", n, tokens)) if progress else None
    name, store, _ = collect_for(view, layer, hook, tokens, settings.batch_size, data, progress=report)
    try:
        out = []
        for i, seed in enumerate(seeds):
            out.append(_fit(view, store, replace(settings, seed=seed), name, layer, device))
            if progress:
                progress("train", i + 1, len(seeds))
        return out
    finally:
        store.close()


# ---- the sweep ----------------------------------------------------------------------------------------


def _load(run_or_view: Any, runs_dir: str | Path, device: str | torch.device | None):
    if isinstance(run_or_view, (str, Path)):
        from ..view import load_view

        return load_view(run_or_view, runs_dir, str(device or "cpu"))
    return run_or_view


def _evaluate(view, result: TrainResult, held: list[str], value: float, seed: int) -> tuple[SweepPoint, int]:
    from .metrics import evaluate_sae

    ev = evaluate_sae(view, result.sae, held)
    return SweepPoint(
        value,
        seed,
        ev.l0,
        ev.fvu,
        ev.ce_recovered_zero,
        ev.ce_recovered_mean,
        ev.mse,
        ev.kl,
        ev.dead,
        result.steps,
        result.seconds,
    ), ev.tokens


def save_folders(
    save_dir: Path, prefix: str, arch: str, values: Sequence[float], seeds: Sequence[int]
) -> dict[tuple[float, int], Path]:
    """{(value, seed): save_dir/<prefix><l1_λ or kK>-seed<seed>}, once none of them holds an SAE already."""
    from .model import CFG

    folders = {(v, s): Path(save_dir) / f"{prefix}{'l1_' if arch == 'relu' else 'k'}{v:g}-seed{s}" for v in values for s in seeds}
    taken = [f for f in folders.values() if (f / CFG).exists()]
    if taken:
        raise UserError(
            f"{taken[0]} already holds an SAE ({len(taken)} of the sweep's folders do); remove them, or save the sweep elsewhere"
        )
    return folders


def _failed_point(value: float, seed: int, message: str) -> SweepPoint:
    nan = math.nan
    return SweepPoint(value, seed, nan, nan, nan, nan, nan, nan, -1, 0, 0.0, message)


def sweep_sae(
    run_or_view: Any,
    layer: int,
    hook: str = "resid_post",
    arch: str = "relu",
    values: Sequence[float] = (1e-3, 3e-3, 1e-2),
    seeds: int | Sequence[int] = 3,
    tokens: int = 200_000,
    settings: TrainSettings | None = None,
    data: str | Path | None = None,
    eval_texts: int | None = EVAL_TEXTS,
    device: str | torch.device | None = None,
    runs_dir: str | Path = "runs",
    save_dir: Path | None = None,
    save_prefix: str = "",
    progress: Callable[[str, int, int], None] | None = None,
) -> SweepResult:
    """Train an SAE for every (value, seed) — values are λ for arch "relu", K for "topk" — at
    blocks.{layer}.hook_{hook}, each on the same `tokens` activations, and evaluate each on the first
    `eval_texts` held-out texts (None: all). `settings` gives everything else (expansion, batch size, lr...).
    save_dir: each SAE saved there as <save_prefix><knob><value>-seed<seed>/ (SAELens's layout; a folder that
    already holds an SAE is refused before any work, never overwritten). A point whose training
    fails (its loss became NaN) is recorded with its message and left out of the spreads; the grid goes on.
    progress(stage, done, total): "collect" (tokens), "train" (grid points done)."""
    start = time.perf_counter()
    values, seed_ids = check_values(list(values), arch), seed_list(seeds)
    base = settings or TrainSettings()
    view = _load(run_or_view, runs_dir, device)
    for v in values:  # every point's settings (K < M, sizes) before anything is collected
        point_settings(base, arch, v, 0).check(view.d_model, max(tokens, base.batch_size))
    if eval_texts is not None and (not isinstance(eval_texts, int) or eval_texts < 1):
        raise UserError(f"--eval-texts must be a positive integer, got {eval_texts!r}")
    targets = save_folders(save_dir, save_prefix, arch, values, seed_ids) if save_dir is not None else {}
    report = (lambda n: progress("collect", n, tokens)) if progress else None
    name, store, held = collect_for(view, layer, hook, tokens, base.batch_size, data, progress=report)
    held = held[:eval_texts] if eval_texts is not None else held
    points, saved, eval_tokens, d_sae = [], [], 0, 0
    try:
        for v in values:
            for seed in seed_ids:
                s = point_settings(base, arch, v, seed)
                try:
                    result = _fit(view, store, s, name, layer, device)
                except UserError as e:  # the loss became NaN: a result about this value, not a reason to stop
                    points.append(_failed_point(v, seed, str(e)))
                else:
                    point, eval_tokens = _evaluate(view, result, held, v, seed)
                    points.append(point)
                    d_sae = result.sae.cfg.d_sae
                    if targets:
                        saved.append(str(result.sae.save(targets[v, seed], result.densities)))
                if progress:
                    progress("train", len(points), len(values) * len(seed_ids))
        n_stored = store.n
    finally:
        store.close()
    if all(p.error is not None for p in points):
        raise UserError(f"every SAE of the sweep failed to train ({points[0].error})")
    per_value, neighbours = summarize(points, values)
    return SweepResult(
        view.name,
        name,
        layer,
        arch,
        "l1" if arch == "relu" else "k",
        list(values),
        seed_ids,
        d_sae,
        n_stored,
        len(held),
        eval_tokens,
        points,
        per_value,
        neighbours,
        time.perf_counter() - start,
        saved,
    )


# ---- the figure ---------------------------------------------------------------------------------------


def _value_label(result: SweepResult, v: float) -> str:
    return f"λ={v:g}" if result.knob == "l1" else f"K={int(v)}"


def _frontier(ax, result: SweepResult, metric: str, ylabel: str) -> None:
    """One panel: each value's median (L0, metric) with min–max error bars over seeds, joined in value order;
    every seed's own point faint behind it."""
    import numpy as np

    rows = [(pv.l0, getattr(pv, metric), pv.value) for pv in result.per_value if pv.l0.n > 0]
    x = np.array([r[0].median for r in rows])
    y = np.array([r[1].median for r in rows])
    xerr = np.array([[r[0].median - r[0].min for r in rows], [r[0].max - r[0].median for r in rows]])
    yerr = np.array([[r[1].median - r[1].min for r in rows], [r[1].max - r[1].median for r in rows]])
    ok = [p for p in result.points if p.error is None]
    ax.scatter([p.l0 for p in ok], [getattr(p, metric) for p in ok], s=12, color="gray", alpha=0.5, label="each seed", zorder=2)
    ax.errorbar(
        x, y, xerr=xerr, yerr=yerr, fmt="o-", capsize=3, zorder=3, label=f"median over {len(result.seeds)} seeds, bars min–max"
    )
    for xi, yi, (_, _, v) in zip(x, y, rows):
        ax.annotate(_value_label(result, v), (xi, yi), textcoords="offset points", xytext=(5, 5), fontsize=8)
    if len(x) and (x > 0).all() and x.max() / x.min() >= 4:  # L0 spans a decade or more across a usual grid
        from matplotlib.ticker import ScalarFormatter

        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("L0 (active latents per token, held-out)")
    ax.set_ylabel(ylabel)


def sweep_figure(result: SweepResult, ce: str = "zero") -> Figure:
    """The L0–FVU frontier and the L0–CE-recovered frontier (zero or mean ablation), one point per value
    with its seed spread as error bars. Nothing is written: save it with nanolm.plots.save_figure."""
    from ...plots import pyplot

    if ce not in ("zero", "mean"):
        raise UserError(f"ce must be 'zero' or 'mean', got {ce!r}")
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4.2))
    _frontier(left, result, "fvu", "FVU (fraction of variance unexplained)")
    _frontier(right, result, f"ce_recovered_{ce}", f"CE loss recovered ({ce} ablation)")
    left.legend(fontsize=8)
    fig.suptitle(
        f"{result.model} {result.hook}: {result.arch} SAE, M = {result.d_sae}, {result.tokens:,} training "
        f"tokens, evaluated on {result.eval_tokens:,} held-out tokens",
        fontsize=10,
    )
    return fig
