"""``nanolm steer`` and ``nanolm steer sweep``: thin click commands over nanolm.interp.steering.
Heavy imports (torch, transformers) happen inside the commands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import STEERING
from .interp import _DefaultCommandGroup, _figure_note, _figure_path, _save_figure, _slug
from .output import (
    MAX_NEW_TOKENS,
    MAX_SEEDS,
    MAX_TOP_K,
    SEED,
    OutputFile,
    check_report,
    console,
    count,
    emit,
    finite,
    json_option,
    report_option,
    runs_dir_option,
    save_run_result,
    working,
    write_run_report,
)

if TYPE_CHECKING:
    from ..interp.steering import DirectionInfo, SteerResult
    from ..interp.steering_sweep import SweepResult

DIRECTION_HELP = (
    "sentiment (happy − sad), tense (past − present), a pairs file FILE.jsonl/.csv (prompt, positive, "
    "negative; or text, label), or sae:SAE_FOLDER:FEATURE (a decoder row)."
)
MAX_TEXTS = 100_000  # texts a direction is built from (200 by default)
MAX_PROMPTS = 10_000  # neutral prompts per seed of a sweep (32 by default)
MAX_ROWS = 100_000  # rows per forward pass
MAX_SWEEP_TOKENS = 100_000_000  # tokens a sweep generates: cells x seeds x prompts x tokens (about 40,000 by default)
SCALE_HELP = (
    "What α multiplies: residual = the direction rescaled to the mean residual norm at its layer (α = 1 adds "
    "a vector as long as the typical residual); raw = the mean difference itself."
)


@click.group(cls=type("_SteerGroup", (_DefaultCommandGroup,), {"default_command": "generate"}))
def steer() -> None:
    """Steering: add α·v̂ to the residual stream at one layer while the model writes.

    \b
    nanolm steer RUN_OR_PATH --direction sentiment --layer 1 --alpha 1 -p "the cat"   steered beside unsteered
    nanolm steer sweep RUN_OR_PATH --direction sentiment --alphas 0,0.5,1,2,4     the α × layer grid, scored

    RUN_OR_PATH is a nanolm run (folder or name under runs/) or a local Hugging Face model folder.
    Layer L is blocks.L.hook_resid_post (block L's output; "embed" is the embedding output).
    """


def _common(f):
    for option in reversed(
        [
            click.argument("model", metavar="RUN_OR_PATH"),
            click.option("--direction", required=True, help=DIRECTION_HELP),
            click.option(
                "--scale", type=click.Choice(["residual", "raw"]), default="residual", show_default=True, help=SCALE_HELP
            ),
            click.option(
                "--n",
                "n_texts",
                type=count(MAX_TEXTS, "texts a direction is built from here", min=None),
                default=200,
                show_default=True,
                help="Texts drawn from a built-in set to build the direction (half per class).",
            ),
            click.option(
                "--max-new-tokens",
                type=count(MAX_NEW_TOKENS, "tokens generated per text here", min=None),
                default=20,
                show_default=True,
                help="Tokens generated per text.",
            ),
            click.option("--temperature", type=finite(), default=0.8, show_default=True, help="0 is greedy."),
            click.option(
                "--top-k",
                type=count(MAX_TOP_K, "tokens of any vocabulary here", min=None),
                default=20,
                show_default=True,
                help="Sample from the k likeliest tokens; 0 for all.",
            ),
            click.option("--no-cache", is_flag=True, help="Recompute every position each step (slower; same tokens)."),
            runs_dir_option,
            json_option,
        ]
    ):
        f = option(f)
    return f


def _load(model: str, runs_dir: str, n_texts: int):
    from ..interp.view import load_view

    if n_texts < 2:
        raise UserError(f"--n must be at least 2, got {n_texts}")
    view = load_view(model, runs_dir)
    if view.tokenizer is None:
        raise UserError(
            f"{view.name or model} has no tokenizer (no tokenizer.json or vocab.json beside its weights); "
            "steering writes text: save the model's tokenizer in its folder"
        )
    return view


@steer.command("generate")
@_common
@click.option("--layer", help="The layer to steer at (0..n_layers-1, or embed); an SAE direction's own by default.")
@click.option("--alpha", required=True, help="The coefficient α (see --scale).")
@click.option("--prompt", "-p", "prompts", multiple=True, required=True, help="A prompt (repeatable).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Sampling seed, shared by both columns.")
def steer_generate(
    model: str,
    direction: str,
    scale: str,
    n_texts: int,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    no_cache: bool,
    runs_dir: str,
    json_out: bool,
    layer: str | None,
    alpha: str,
    prompts: tuple[str, ...],
    seed: int,
) -> None:
    """Generate from each prompt unsteered and steered, side by side, from the same sampling seed."""
    from ..interp.generate import check_sampling
    from ..interp.steering import build_directions, parse_alpha, sae_layer
    from ..interp.steering import steer as run_steer

    a = parse_alpha(alpha)
    check_sampling(temperature, top_k or None)
    layer = layer if layer is not None else sae_layer(direction)
    if layer is None:
        raise UserError("give --layer L (0..n_layers-1, or embed): the layer whose output the vector is added to")
    view = _load(model, runs_dir, n_texts)
    with working(f"building the {direction} direction at layer {layer}"):
        d = build_directions(view, direction, [layer], scale, n_texts)
    d = next(iter(d.values()))
    with working("generating"):
        result = run_steer(view, d, a, list(prompts), max_new_tokens, seed, temperature, top_k or None, not no_cache)
    emit(result, _print_steer, json_out, as_json=_steer_json(result))


def _steer_json(result: SteerResult) -> dict:
    from dataclasses import asdict

    out = asdict(result)
    out["direction"]["ratio"] = result.direction.ratio
    return out


def direction_lines(info: DirectionInfo) -> list[str]:
    """What a direction is and what α means for it, for a person."""
    where = "the embedding output" if info.layer == "embed" else f"block {info.layer}'s output"
    made = (
        f"{info.n_positive} vs {info.n_negative} texts, each read at its last token"
        if info.n_positive
        else "a decoder row of the SAE"
    )
    unit = (
        f"α multiplies v rescaled to r̄ (‖v̂‖ = {info.unit_norm:.3g}): α = 1 adds a vector as long as the mean residual"
        if info.scale == "residual"
        else f"α multiplies v itself (‖v̂‖ = ‖v‖ = {info.unit_norm:.3g}; --scale raw)"
    )
    return [
        f"direction {info.name} at layer {info.layer} ({info.hook}, {where}); {made}",
        f"‖v‖ = {info.raw_norm:.3g}; mean residual norm there r̄ = {info.resid_norm:.3g} (‖v‖/r̄ = {info.ratio:.2f}); {unit}",
    ]


def _print_steer(result: SteerResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    for line in direction_lines(result.direction):
        out.print(escape(line), highlight=False)
    r = result.direction.resid_norm
    out.print(
        escape(
            f"α = {result.alpha:g}: adds a vector of norm {result.added_norm:.3g} ({result.added_norm / r:.2f} r̄) "
            f"at every position of the prompt and of the generated text"
            f" ({'KV cache' if result.use_cache else 'no cache'})"
        ),
        highlight=False,
    )
    sampling = (
        "greedy"
        if result.temperature <= 0
        else (f"temperature {result.temperature:g}" + (f", top-k {result.top_k}" if result.top_k else ""))
    )
    table = Table(
        title=escape(
            f"seed {result.seed}, {sampling}, up to {result.max_new_tokens} new tokens; both columns draw the same random numbers"
        )
    )
    for col in ("prompt", "unsteered", f"steered (α = {result.alpha:g})"):
        table.add_column(col, overflow="fold")
    for s in result.samples:
        table.add_row(escape(s.prompt), escape(s.unsteered.strip()), escape(s.steered.strip()))
    out.print(table)


@steer.command("sweep")
@_common
@click.option("--layers", default="all", show_default=True, help="all, or a list such as 0,1,3 (embed allowed).")
@click.option("--alphas", default="0,0.25,0.5,1,2,4", show_default=True, help="Comma-separated α values (see --scale).")
@click.option(
    "--seeds",
    type=count(MAX_SEEDS, "seeds a sweep samples with here", min=None),
    default=3,
    show_default=True,
    help="Sampling seeds (seed, seed+1, ...): the spread per cell.",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="The first sampling seed.")
@click.option(
    "--prompts",
    "n_prompts",
    type=count(MAX_PROMPTS, "neutral prompts per seed here", min=None),
    default=32,
    show_default=True,
    help="Neutral prompts per seed.",
)
@click.option(
    "--max-kl",
    type=finite(),
    default=0.5,
    show_default=True,
    help="Fluency bound for the best cell: mean KL(unsteered ‖ steered) on neutral text, nats.",
)
@click.option(
    "--metric",
    type=click.Choice(["sentiment", "matching"]),
    help="Behaviour metric (default: sentiment for sentiment, p(matching) for a direction with options).",
)
@click.option(
    "--collapse-distinct",
    type=finite(),
    default=0.5,
    show_default=True,
    help="The text falls apart when distinct-2 drops below this share of the unsteered value ...",
)
@click.option(
    "--collapse-ppl", type=finite(), default=4.0, show_default=True, help="... or perplexity exceeds this multiple of it."
)
@click.option(
    "--batch-size",
    type=count(MAX_ROWS, "rows per forward pass here", min=None),
    default=256,
    show_default=True,
    help="Rows per forward pass.",
)
@click.option(
    "--plot",
    type=OutputFile("steer-sweep.png", ".png"),
    help="Heatmaps PNG (default: RUN/figures/steer-sweep-DIRECTION.png; for a model folder that is not a run, none).",
)
@report_option
def steer_sweep(
    model: str,
    direction: str,
    scale: str,
    n_texts: int,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    no_cache: bool,
    runs_dir: str,
    json_out: bool,
    layers: str,
    alphas: str,
    seeds: int,
    seed: int,
    n_prompts: int,
    max_kl: float,
    metric: str | None,
    collapse_distinct: float,
    collapse_ppl: float,
    batch_size: int,
    plot: Path | None,
    report: bool,
) -> None:
    """The α × layer grid: behaviour, fluency (KL, perplexity, distinct-2) and seed spread per cell; the best cell
    within --max-kl and where the text falls apart.

    The result (the --json output) is saved in the run as RUN/steering/DIRECTION.json, for nanolm report."""
    from ..interp.generate import check_sampling
    from ..interp.steering import parse_alpha, sae_layer
    from ..interp.steering_sweep import check_sweep_args, parse_list, sweep, sweep_figure

    for item in filter(None, (t.strip() for t in alphas.split(","))):
        parse_alpha(item, "--alphas")  # "'nan' is not a finite number" (parse_list would say only "not a number")
    alpha_list = parse_list(alphas, "--alphas", lambda t: parse_alpha(t, "--alphas"))
    check_sampling(temperature, top_k or None)
    check_sweep_args(seeds, n_prompts, max_kl, collapse_distinct, collapse_ppl, batch_size)
    view = _load(model, runs_dir, n_texts)
    check_report(report, view.run_dir)
    own = sae_layer(direction)
    if layers == "all":
        layer_list = [own] if own is not None else [str(layer) for layer in range(view.n_layers)]
    else:
        layer_list = parse_list(layers, "--layers", str)
        for layer in layer_list:
            view.resid_name(layer)  # the model's range, before any work
    _check_sweep_size(len(layer_list), len(alpha_list), seeds, n_prompts, max_new_tokens)
    name = direction if not direction.startswith("sae:") else f"sae-{Path(direction[4:].rpartition(':')[0]).name}"
    stem = _slug(Path(name).stem)
    plot = _figure_path(plot, view, f"steer-sweep-{stem}.png")
    with working(f"sweeping {len(layer_list)} layers × {len(alpha_list)} α × {seeds} seeds × {n_prompts} prompts") as status:

        def progress(msg: str) -> None:
            if status is not None and hasattr(status, "update"):
                status.update(msg)

        result = sweep(
            view,
            direction,
            layer_list,
            alpha_list,
            seeds,
            n_prompts,
            max_new_tokens,
            temperature,
            top_k or None,
            max_kl,
            scale,
            metric,
            collapse_distinct,
            collapse_ppl,
            not no_cache,
            batch_size,
            seed,
            n_texts,
            progress=progress,
        )
    plot_path = _save_figure(lambda: sweep_figure(result), plot)
    as_json = _sweep_json(result, plot_path)
    save_run_result(view.run_dir, STEERING, stem, as_json)
    emit(result, lambda r: _print_sweep(r, plot_path), json_out, result.notes, as_json=as_json)
    if report:
        write_run_report(view.run_dir)


def _check_sweep_size(layers: int, alphas: int, seeds: int, prompts: int, tokens: int) -> None:
    """A UserError unless the sweep generates at most MAX_SWEEP_TOKENS tokens: (layers x alphas + the unsteered
    row) x seeds x prompts texts of `tokens` tokens."""
    total = (layers * alphas + 1) * seeds * prompts * tokens
    if total > MAX_SWEEP_TOKENS:
        raise UserError(
            f"{layers} layers x {alphas} alphas x {seeds} seeds x {prompts} prompts x {tokens} tokens is "
            f"{total:,} tokens to generate, more than the {MAX_SWEEP_TOKENS:,} a sweep generates here; use "
            "fewer --seeds, --prompts, --max-new-tokens, --alphas or --layers"
        )


def _sweep_json(result: SweepResult, plot: Path | None) -> dict:
    from dataclasses import asdict

    out = asdict(result)
    out["plot"] = plot
    return out


def _print_sweep(result: SweepResult, plot_path: Path | None) -> None:
    """The α × layer grid (the report's steering_table), each layer's direction, what the
    columns mean, where the text falls apart, the best cell, and where the heatmaps went."""
    from rich.markup import escape

    from ..report.sections.interp import steering_table
    from ..tables import to_rich

    out = console()
    out.print(to_rich(steering_table(result)))
    for info in result.directions:
        out.print(
            escape(f"layer {info.layer}: ‖v‖ = {info.raw_norm:.3g}, r̄ = {info.resid_norm:.3g}, ‖v‖/r̄ = {info.ratio:.2f}"),
            highlight=False,
        )
    unit = "× the mean residual norm r̄ (v̂ = v·r̄/‖v‖)" if result.scale == "residual" else "× the raw direction v"
    behaviour = (
        "happy share: happy / (happy + sad) lexicon words in the generated text; log-odds: next word, happy vs "
        "sad lexicon, on the prompts"
        if result.metric == "sentiment"
        else "p(matching): mean p(pos) / (p(pos) + p(neg)) over the pairs"
    )
    out.print(
        escape(
            f"α {unit}; the first row is the unsteered model (α = 0 at every layer). {behaviour}; change: "
            "from unsteered; KL(unsteered ‖ steered) on neutral text; perplexity of the generated text under "
            "the unsteered model; example: the first prompt's text under the first seed."
        ),
        highlight=False,
    )
    for layer, a in result.falls_apart.items():
        what = f"falls apart at α = {a:g}" if a is not None else "does not fall apart within the grid"
        out.print(
            escape(
                f"layer {layer}: the text {what} (distinct-2 < {result.collapse_distinct:g} × unsteered "
                f"{result.unsteered.distinct2:.2f}, or perplexity > {result.collapse_ppl:g} × unsteered "
                f"{result.unsteered.perplexity:.1f})"
            ),
            highlight=False,
        )
    b = result.best
    if b is None:
        out.print(f"[bold]best[/bold]: none: {escape(result.best_reason)}", highlight=False)
    else:
        what = (
            f"layer {b.layer}, α = {b.alpha:g}: change {b.change:+.3f}, KL {b.kl:.3f} nats, perplexity "
            f"{b.perplexity:.1f}; {result.best_reason}"
        )
        out.print(f"[bold]best[/bold]: {escape(what)}", highlight=False)
        if b.example:
            out.print(escape(f"  e.g. {result.prompts[0]!r} → {b.example.strip()!r}"), highlight=False)
    out.print(
        escape(
            f"{result.seconds:.1f} s ({'KV cache' if result.use_cache else 'no cache'}, batches of "
            f"{result.batch_size}). {_figure_note('heatmaps', plot_path)}"
        ),
        highlight=False,
    )
