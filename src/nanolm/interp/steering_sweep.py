"""The α × layer sweep of a steering direction: what each setting does to the behaviour, what it costs in
fluency, how much the sampling seed moves both, the best setting within a fluency bound, and where the
text falls apart. Conventions (where v̂ is added, α's unit, the common random numbers) are steering.py's.

Every cell (layer L, α) is scored on texts generated from ``--prompts`` neutral prompts (``sweep_prompts``)
under each of ``--seeds`` sampling seeds, and on fixed texts:

behaviour
- ``sentiment``: happy share = h / (h + s), h and s the generated words in the happy and the sad lexicon
  (``steering.sentiment_lexicon``), pooled over a seed's texts; and the next-word log-odds on the prompts,
  mean over prompts of log Σ_{w happy} p(w) − log Σ_{w sad} p(w) (first token of each word; a token on both
  sides is dropped), deterministic;
- ``matching`` (tense; a pairs file): p(matching) = mean over pairs of p(pos) / (p(pos) + p(neg)), p(option)
  the product of its tokens' probabilities after the prompt (CAA's behaviour score), deterministic;

fluency
- KL: mean over every token position of ``neutral_texts`` of KL(p_unsteered ‖ p_steered) of the next-token
  distributions, nats (0 for the unsteered model);
- perplexity: exp(mean over a seed's generated tokens of −log p_unsteered(token | prompt, earlier tokens)): the
  steered text read by the unsteered model;
- distinct-2 (Li et al. 2016): distinct token bigrams / all token bigrams over a seed's generated texts (bigrams
  within a text); repetition and mode collapse push it down.

Seed-dependent numbers are the mean over seeds, with their min–max. The text "falls apart", per layer, at the
smallest |α| whose distinct-2 falls below ``collapse_distinct`` × the unsteered value or whose perplexity
exceeds ``collapse_ppl`` × the unsteered value. The best cell is the one with the largest behaviour change
in the direction of α's sign, among the cells with α ≠ 0, KL ≤ ``max_kl`` and not fallen apart.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import UserError
from ..records import Record
from .generate import UNSTEERED, GenRow, Setting, check_sampling, decode, generate, steered
from .steering import (
    ContrastSet,
    Direction,
    DirectionInfo,
    build_directions,
    contrast_set,
    neutral_texts,
    sentiment_lexicon,
    words_of,
)
from .view import ModelView

METRICS = ("sentiment", "matching")
FRAMES = ("{s}", "{s} felt", "{s} was")  # neutral starts: the subject alone, and two frames a sentiment word follows


def sweep_prompts(n: int) -> list[str]:
    """n neutral prompts: every corpus subject in the first frame, then in the next, and so on."""
    from ..corpus import SUBJECTS

    return [FRAMES[(i // len(SUBJECTS)) % len(FRAMES)].format(s=SUBJECTS[i % len(SUBJECTS)]) for i in range(n)]


# ---- metrics, each on plain data ------------------------------------------------------------------


def happy_share(texts: Sequence[str]) -> tuple[float, int]:
    """(h / (h + s), h + s) over the words of texts; NaN when no word of either lexicon appears."""
    happy, sad = sentiment_lexicon()
    h = s = 0
    for text in texts:
        for w in words_of(text):
            h += w in happy
            s += w in sad
    return (h / (h + s) if h + s else math.nan), h + s


def distinct_n(token_lists: Sequence[Sequence[int]], n: int = 2) -> float:
    """Distinct n-grams / all n-grams over the lists (n-grams within a list); NaN when there are none."""
    grams = [tuple(t[i : i + n]) for t in token_lists for i in range(len(t) - n + 1)]
    return len(set(grams)) / len(grams) if grams else math.nan


@torch.no_grad()
def score_tokens(
    view: ModelView,
    seqs: Sequence[Sequence[int]],
    starts: Sequence[int],
    vectors: dict[str, torch.Tensor],
    setting: Setting,
    batch_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ log p, count) [N] each, float64: the log-probability of `seqs[i][j]` given `seqs[i][:j]`, summed over the
    positions j ≥ starts[i], under the steering setting."""
    from .activations import pad_batch

    total = torch.zeros(len(seqs), dtype=torch.float64)
    count = torch.zeros(len(seqs), dtype=torch.float64)
    for b in range(0, len(seqs), batch_size):
        part = seqs[b : b + batch_size]
        ids, lengths = pad_batch(part, view.device)  # right-padded: a causal model never sees the padding
        with steered(view, vectors, [setting] * len(part)):
            logp = torch.log_softmax(view.logits(ids).float(), dim=-1)  # [B, T, V]
        target = ids[:, 1:]
        got = logp[:, :-1].gather(-1, target[..., None])[..., 0].double()  # [B, T - 1]: log p(token j + 1)
        j = torch.arange(1, ids.shape[1], device=ids.device)[None]
        first = torch.tensor(starts[b : b + batch_size], device=ids.device)[:, None]
        keep = (j >= first) & (j < lengths[:, None])
        total[b : b + len(part)] = (got * keep).sum(1).cpu()
        count[b : b + len(part)] = keep.sum(1).double().cpu()
    return total, count


@torch.no_grad()
def next_token_kl(
    view: ModelView,
    texts: Sequence[Sequence[int]],
    vectors: dict[str, torch.Tensor],
    settings: Sequence[Setting],
    batch_size: int = 64,
) -> list[float]:
    """Per setting: mean over every token position of texts of KL(p_unsteered ‖ p_steered), nats."""
    from .activations import pad_batch

    sums = [0.0] * len(settings)
    n = 0
    for b in range(0, len(texts), batch_size):
        ids, lengths = pad_batch(texts[b : b + batch_size], view.device)
        mask = torch.arange(ids.shape[1], device=ids.device)[None] < lengths[:, None]  # [B, T]
        base = torch.log_softmax(view.logits(ids).float(), dim=-1)
        n += int(mask.sum())
        for k, s in enumerate(settings):
            if s.hook is None or s.alpha == 0:
                continue
            with steered(view, vectors, [s] * len(lengths)):
                logq = torch.log_softmax(view.logits(ids).float(), dim=-1)
            kl = (base.exp() * (base - logq)).sum(-1)  # [B, T]
            sums[k] += float(kl[mask].double().sum())
    return [s / max(n, 1) for s in sums]


def option_tokens(view: ModelView, words: Sequence[str]) -> list[int]:
    """The first token of " word" for each word (as it follows other text)."""
    out = []
    for w in words:
        ids = view.tokenizer.encode(" " + w)
        if ids:
            out.append(ids[0])
    return out


@torch.no_grad()
def sentiment_log_odds(
    view: ModelView,
    prompts: Sequence[Sequence[int]],
    vectors: dict[str, torch.Tensor],
    settings: Sequence[Setting],
    batch_size: int = 64,
) -> list[float]:
    """Per setting: mean over prompts of log Σ p(happy-word tokens) − log Σ p(sad-word tokens) at the next token;
    NaN when the tokenizer gives the two sides no distinct first tokens."""
    from .activations import pad_batch

    happy, sad = sentiment_lexicon()
    h, s = set(option_tokens(view, sorted(happy))), set(option_tokens(view, sorted(sad)))
    h, s = sorted(h - s), sorted(s - h)
    if not h or not s:
        return [math.nan] * len(settings)
    out = []
    for setting in settings:
        vals = []
        for b in range(0, len(prompts), batch_size):
            ids, lengths = pad_batch(prompts[b : b + batch_size], view.device)
            with steered(view, vectors, [setting] * len(lengths)):
                logits = view.logits(ids).float()
            last = torch.log_softmax(logits[torch.arange(len(lengths)), lengths - 1], dim=-1)  # [B, V]
            vals.append(torch.logsumexp(last[:, h], -1) - torch.logsumexp(last[:, s], -1))
        out.append(float(torch.cat(vals).double().mean()))
    return out


def matching_inputs(view: ModelView, pairs: Sequence[tuple[str, str, str]]) -> tuple[list[list[int]], list[int]]:
    """(sequences, starts): prompt + positive option and prompt + negative option for each pair, in that order,
    with the position where the option starts."""
    from .steering import join_option

    seqs, starts = [], []
    for prompt, pos, neg in pairs:
        head = view.to_tokens(prompt)[0].tolist()
        for option in (pos, neg):
            full = view.to_tokens(join_option(prompt, option))[0].tolist()
            if full[: len(head)] != head:  # a tokenizer that merged across the boundary: tokenize the option alone
                full = head + view.tokenizer.encode(join_option(" ", option) if prompt else option)
            seqs.append(full[: view.max_len])
            starts.append(len(head))
    return seqs, starts


def p_matching(
    view: ModelView,
    seqs: Sequence[Sequence[int]],
    starts: Sequence[int],
    vectors: dict[str, torch.Tensor],
    setting: Setting,
    batch_size: int = 64,
) -> float:
    """Mean over pairs of p(pos) / (p(pos) + p(neg)) (matching_inputs' order)."""
    logp, _ = score_tokens(view, seqs, starts, vectors, setting, batch_size)
    pos, neg = logp[0::2], logp[1::2]
    return float(torch.sigmoid(pos - neg).mean())  # p/(p+q) = sigmoid(log p − log q)


# ---- the sweep ---------------------------------------------------------------------------------------


@dataclass
class Cell:
    layer: str
    alpha: float
    added_norm: float  # ‖α·v̂‖
    behaviour: float  # happy share (mean over seeds) or p(matching)
    behaviour_seeds: list[float]  # per seed (one value for a deterministic metric)
    change: float  # behaviour − the unsteered behaviour
    log_odds: float | None  # sentiment only
    kl: float  # nats
    perplexity: float  # mean over seeds
    perplexity_seeds: list[float]
    distinct2: float  # mean over seeds
    distinct2_seeds: list[float]
    words: int  # sentiment words counted over all seeds (sentiment only)
    fallen_apart: bool = False
    example: str = ""  # the first prompt's text under the first seed

    @property
    def spread(self) -> float:
        """max − min over seeds of the behaviour (0 for a deterministic metric)."""
        finite = [x for x in self.behaviour_seeds if math.isfinite(x)]
        return max(finite) - min(finite) if finite else math.nan


@dataclass
class SweepResult(Record):
    model: str
    direction: str
    metric: str  # "sentiment" or "matching"
    scale: str
    layers: list[str]
    alphas: list[float]
    seeds: list[int]
    prompts: list[str]
    max_new_tokens: int
    temperature: float
    top_k: int | None
    max_kl: float
    collapse_distinct: float
    collapse_ppl: float
    directions: list[DirectionInfo]
    unsteered: Cell  # layer "-", α 0
    cells: list[Cell]
    falls_apart: dict[str, float | None]  # layer -> the smallest |α| (signed) where the text falls apart
    best: Cell | None
    best_reason: str
    use_cache: bool
    batch_size: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    def cell(self, layer: str, alpha: float) -> Cell:
        return next(c for c in self.cells if c.layer == layer and c.alpha == alpha)


def parse_list(text: str, what: str, kind: Callable[[str], Any] = float) -> list:
    """ "0,2,4" -> [0.0, 2.0, 4.0]; a UserError naming the bad item."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise UserError(f"{what} is empty; give a comma-separated list, e.g. {what} 0,1,2")
    out = []
    for item in items:
        try:
            value = kind(item)
        except (TypeError, ValueError, UserError):
            raise UserError(f"{what}: {item!r} is not a number") from None
        if value in out:
            raise UserError(f"{what}: {item} is given twice")
        out.append(value)
    return out


def resolve_metric(metric: str | None, spec: str, contrast: ContrastSet | None) -> str:
    """The behaviour metric for a direction: "sentiment" for the sentiment direction, "matching" for one with
    options to score; another direction needs --metric sentiment."""
    if metric is None:
        if spec == "sentiment":
            return "sentiment"
        if contrast is not None and contrast.pairs:
            return "matching"
        raise UserError(
            f"--direction {spec} has no options to score and is not the sentiment direction: give "
            "--metric sentiment (the happy share of the generated text), or a pairs file with prompts"
        )
    if metric not in METRICS:
        raise UserError(f"--metric {metric!r}: give one of {', '.join(METRICS)}")
    if metric == "matching" and (contrast is None or not contrast.pairs):
        raise UserError(
            f"--metric matching needs options to score; --direction {spec} has none (give a pairs file "
            "with prompt, positive and negative, or text, label, target and contrast columns)"
        )
    return metric


def sweep(
    view: ModelView,
    spec: str,
    layers: Sequence[str],
    alphas: Sequence[float],
    seeds: int = 3,
    n_prompts: int = 32,
    max_new_tokens: int = 20,
    temperature: float = 0.8,
    top_k: int | None = 20,
    max_kl: float = 0.5,
    scale: str = "residual",
    metric: str | None = None,
    collapse_distinct: float = 0.5,
    collapse_ppl: float = 4.0,
    use_cache: bool = True,
    batch_size: int = 256,
    seed: int = 0,
    n_texts: int = 200,
    n_neutral: int = 32,
    progress: Callable[[str], None] | None = None,
) -> SweepResult:
    """Score every (layer, α) cell; see the module docstring for each number's definition."""
    check_sweep_args(seeds, n_prompts, max_kl, collapse_distinct, collapse_ppl, batch_size)
    check_sampling(temperature, top_k)
    t0 = time.perf_counter()
    contrast = None if spec.startswith("sae:") else contrast_set(spec, n_texts, seed)
    metric = resolve_metric(metric, spec, contrast)
    say = progress or (lambda _msg: None)
    say("building the directions")
    directions = build_directions(view, spec, list(layers), scale, n_texts, seed, contrast)
    layers = list(directions)
    vectors = {d.info.hook: d.unit for d in directions.values()}
    settings = [Setting(directions[layer].info.hook, a) for layer in layers for a in alphas if a != 0]
    all_settings = [UNSTEERED, *settings]
    prompts = sweep_prompts(n_prompts)
    prompt_ids = [view.to_tokens(p)[0].tolist() for p in prompts]
    seed_list = list(range(seed, seed + seeds))
    rows = [GenRow(i, s, st) for st in all_settings for s in seed_list for i in range(len(prompts))]
    say(f"generating {len(rows)} texts")
    texts = generate(view, prompt_ids, rows, vectors, max_new_tokens, temperature, top_k, use_cache, batch_size)
    say("scoring fluency")
    nll, cnt = score_tokens(
        view,
        [prompt_ids[r.prompt] + t for r, t in zip(rows, texts)],
        [len(prompt_ids[r.prompt]) for r in rows],
        vectors,
        UNSTEERED,
        batch_size,
    )
    kls = next_token_kl(view, neutral_texts(view, n_neutral), vectors, all_settings, batch_size)
    deterministic, log_odds = _deterministic_behaviour(view, metric, contrast, prompt_ids, vectors, all_settings, batch_size)

    per_setting = len(seed_list) * len(prompts)
    cells = []
    for k, st in enumerate(all_settings):
        block = range(k * per_setting, (k + 1) * per_setting)
        by_seed = [[i for i in block if rows[i].seed == s] for s in seed_list]
        cells.append(
            _cell(
                view,
                st,
                directions,
                by_seed,
                rows,
                texts,
                nll,
                cnt,
                kls[k],
                deterministic[k] if deterministic else None,
                log_odds[k] if log_odds else None,
            )
        )
    base = cells[0]
    base.layer = "-"
    for c in cells[1:]:
        c.change = c.behaviour - base.behaviour
    steered_cells = cells[1:]
    falls_apart = _mark_fallen_apart(steered_cells, base, layers, collapse_distinct, collapse_ppl)
    best, reason = _best_cell(steered_cells, max_kl)
    if best is not None and metric == "sentiment" and math.isfinite(base.spread) and abs(best.change) <= base.spread:
        reason += (
            f"; but its change is within the unsteered model's own seed spread ({base.spread:.2f}): give more "
            "--seeds or --prompts before trusting it"
        )
    # the grid's α = 0 cells are the unsteered model, at every layer
    grid = []
    for layer in layers:
        for a in alphas:
            if a == 0:
                grid.append(Cell(**{**base.__dict__, "layer": layer, "alpha": 0.0, "change": 0.0}))
            else:
                grid.append(next(c for c in steered_cells if c.layer == layer and c.alpha == a))
    notes = []
    if metric == "sentiment" and base.words == 0:
        notes.append("the unsteered texts hold no sentiment word: the happy share is undefined at α = 0")
    return SweepResult(
        view.name,
        next(iter(directions.values())).info.name,
        metric,
        scale,
        layers,
        list(alphas),
        seed_list,
        prompts,
        max_new_tokens,
        temperature,
        top_k,
        max_kl,
        collapse_distinct,
        collapse_ppl,
        [d.info for d in directions.values()],
        base,
        grid,
        falls_apart,
        best,
        reason,
        use_cache,
        batch_size,
        time.perf_counter() - t0,
        notes,
    )


def check_sweep_args(
    seeds: int, n_prompts: int, max_kl: float, collapse_distinct: float, collapse_ppl: float, batch_size: int
) -> None:
    if seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {seeds}")
    if n_prompts < 1:
        raise UserError(f"--prompts must be at least 1, got {n_prompts}")
    if not max_kl > 0:
        raise UserError(f"--max-kl must be > 0 nats, got {max_kl}")
    if not 0 < collapse_distinct < 1:
        raise UserError(f"--collapse-distinct must be between 0 and 1, got {collapse_distinct}")
    if not collapse_ppl > 1:
        raise UserError(f"--collapse-ppl must be > 1, got {collapse_ppl}")
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {batch_size}")


def _deterministic_behaviour(
    view: ModelView,
    metric: str,
    contrast: ContrastSet | None,
    prompt_ids: list[list[int]],
    vectors: dict[str, torch.Tensor],
    settings: list[Setting],
    batch_size: int,
) -> tuple[list[float] | None, list[float] | None]:
    """(p(matching) per setting or None, sentiment log-odds per setting or None)."""
    if metric == "sentiment":
        return None, sentiment_log_odds(view, prompt_ids, vectors, settings, batch_size)
    assert contrast is not None and contrast.pairs
    seqs, starts = matching_inputs(view, contrast.pairs)
    return [p_matching(view, seqs, starts, vectors, s, batch_size) for s in settings], None


def _mean(xs: Sequence[float]) -> float:
    finite = [x for x in xs if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else math.nan


def _cell(
    view: ModelView,
    st: Setting,
    directions: dict[str, Direction],
    by_seed: list[list[int]],
    rows: list[GenRow],
    texts: list[list[int]],
    nll: torch.Tensor,
    cnt: torch.Tensor,
    kl: float,
    matching: float | None,
    log_odds: float | None,
) -> Cell:
    decoded = [[decode(view, texts[i]) for i in idx] for idx in by_seed]
    ppl = [math.exp(-float(nll[idx].sum()) / float(cnt[idx].sum())) if float(cnt[idx].sum()) else math.nan for idx in by_seed]
    d2 = [distinct_n([texts[i] for i in idx]) for idx in by_seed]
    if matching is None:
        shares = [happy_share(d) for d in decoded]
        behaviour_seeds, words = [s for s, _ in shares], sum(n for _, n in shares)
    else:
        behaviour_seeds, words = [matching], 0
    direction = next((d for d in directions.values() if d.info.hook == st.hook), None)
    layer = direction.info.layer if direction is not None else "-"
    added = direction.info.added_norm(st.alpha) if direction is not None else 0.0
    first = rows[by_seed[0][0]]
    example = decoded[0][0] if first.prompt == 0 else ""
    return Cell(
        layer,
        st.alpha,
        added,
        _mean(behaviour_seeds),
        behaviour_seeds,
        0.0,
        log_odds,
        kl,
        _mean(ppl),
        ppl,
        _mean(d2),
        d2,
        words,
        example=example,
    )


def _mark_fallen_apart(
    cells: list[Cell], base: Cell, layers: list[str], collapse_distinct: float, collapse_ppl: float
) -> dict[str, float | None]:
    """Mark each cell whose distinct-2 or perplexity trips the rule; per layer, the smallest |α| that does."""
    out: dict[str, float | None] = {}
    for c in cells:
        # comparisons with NaN are False: an undefined number never trips the rule
        c.fallen_apart = c.distinct2 < collapse_distinct * base.distinct2 or c.perplexity > collapse_ppl * base.perplexity
    for layer in layers:
        tripped = sorted((c.alpha for c in cells if c.layer == layer and c.fallen_apart), key=abs)
        out[layer] = tripped[0] if tripped else None
    return out


def _best_cell(cells: list[Cell], max_kl: float) -> tuple[Cell | None, str]:
    ok = [c for c in cells if c.kl <= max_kl and not c.fallen_apart and math.isfinite(c.change)]
    if not ok:
        return None, f"no steered cell keeps KL ≤ {max_kl:g} nats with the text intact and a measurable behaviour"
    best = max(ok, key=lambda c: c.change * math.copysign(1.0, c.alpha))
    if best.change * math.copysign(1.0, best.alpha) <= 0:
        return None, (
            f"no cell within KL ≤ {max_kl:g} nats moves the behaviour in α's direction "
            f"(the best: layer {best.layer}, α {best.alpha:g}, change {best.change:+.3f})"
        )
    return best, (
        f"the largest change in α's direction among the {len(ok)} cells with KL ≤ {max_kl:g} nats whose text has not fallen apart"
    )


# ---- the figure --------------------------------------------------------------------------------------


def sweep_figure(result: SweepResult) -> Any:
    """Heatmaps, layer × α: the behaviour change (and for sentiment the log-odds), KL, perplexity (log colour scale)
    and distinct-2; the best cell boxed, cells whose text fell apart marked ×. Nothing is written; save it with
    nanolm.plots.save_figure."""
    import numpy as np
    from matplotlib.colors import LogNorm

    from ..plots import pyplot

    plt = pyplot()
    L, A = len(result.layers), len(result.alphas)
    fields = [("change", "p(matching) change" if result.metric == "matching" else "happy share change", "RdBu_r")]
    if result.metric == "sentiment":
        fields.append(("log_odds", "next-word log-odds, happy vs sad", "RdBu_r"))
    fields += [
        ("kl", "KL(unsteered ‖ steered), nats", "viridis"),
        ("perplexity", "perplexity (unsteered model)", "viridis"),
        ("distinct2", "distinct-2", "viridis_r"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(4 + 2.2 * A, 2.5 + 1.4 * L), squeeze=False)
    for ax in axes.flat[len(fields) :]:
        ax.axis("off")
    for ax, (name, title, cmap) in zip(axes.flat, fields):
        grid = np.array([[_value(result.cell(layer, a), name) for a in result.alphas] for layer in result.layers], dtype=float)
        finite = grid[np.isfinite(grid)]
        kw: dict[str, Any] = {}
        if name in ("change", "log_odds") and finite.size:
            lim = float(np.abs(finite).max()) or 1.0
            kw = dict(vmin=-lim, vmax=lim)
        elif name == "perplexity" and finite.size and finite.min() > 0:
            kw = dict(norm=LogNorm(vmin=finite.min(), vmax=max(finite.max(), finite.min() * 1.01)))
        im = ax.imshow(grid, cmap=cmap, aspect="auto", **kw)
        fig.colorbar(im, ax=ax, fraction=0.046)
        for i, layer in enumerate(result.layers):
            for j, a in enumerate(result.alphas):
                c = result.cell(layer, a)
                ax.text(
                    j,
                    i,
                    f"{grid[i, j]:.3g}" + (" ×" if c.fallen_apart else ""),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="red" if c.fallen_apart else "black",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.6),
                )
                if result.best is not None and c.layer == result.best.layer and c.alpha == result.best.alpha:
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="gold", lw=2.5))
        ax.set_xticks(range(A), [f"{a:g}" for a in result.alphas])
        ax.set_yticks(range(L), result.layers)
        ax.set_xlabel(f"α ({'× mean residual norm' if result.scale == 'residual' else '× raw direction'})")
        ax.set_ylabel("layer")
        ax.set_title(title, fontsize=9)
    fig.suptitle(
        f"steering {result.direction}: {len(result.seeds)} seeds × {len(result.prompts)} prompts × "
        f"{result.max_new_tokens} tokens; best boxed (KL ≤ {result.max_kl:g}), × = text fell apart",
        fontsize=9,
    )
    return fig


def _value(cell: Cell, name: str) -> float:
    value = getattr(cell, name)
    return math.nan if value is None else float(value)
