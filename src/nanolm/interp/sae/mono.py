"""Monosemanticity against ground truth: for each labelled set of the embedded corpus, how well the best
single SAE latent separates the label, next to the best single neuron and to a linear probe (the ceiling).

The labelled sets, each a binary label (the class counted positive first), read at one position per text:
- tense (past / present): probes.feature_dataset("tense"); the text ends at the pronoun of the second
  clause, whose next word (the verb) must agree in tense with the first;
- sentiment (happy / sad): probes.feature_dataset("sentiment"); the whole sentence;
- arithmetic (even / odd): every distinct fact of the corpus (corpus.arithmetic_facts, 217 of them), the
  text ending at "equals", labelled by the parity of the answer that follows. Parity is a property of the
  answer, not of any one input token (for plus and minus it depends on both operands);
- mcq (A / B): multiple-choice questions without a stated opinion (corpus.mcq_dataset), the text ending at
  "answer :", labelled by the correct option; questions whose answer is C are left out, so the label is
  binary and roughly balanced.

Position (``pool``): "last" (default) reads each text's last token, where each set's label decides the next
token (and where the probe module reads too); "max" reads the maximum over the text's tokens, per unit (a
latent that fires on the word "happy" anywhere in the sentence counts). The probe reads the hook's activation
pooled the same way.

The units compared, at the SAE's hook blocks.{L}.hook_{x}:
- latent: each SAE latent f_i (SparseAutoencoder.encode of the hook's activation);
- MLP neuron: each hidden unit of block L's MLP after its nonlinearity (blocks.{L}.mlp.hook_post,
  [4·D] units; for a resid_pre SAE that MLP comes after the hook). A Hugging Face view has no such hook:
  there the neuron is a basis direction only (the result says so in its notes);
- basis direction: each coordinate of the activation the SAE reads (the residual stream's basis
  directions for a resid_* hook).

A unit's score is its AUROC at separating the label: the probability that a random positive text has a
higher activation than a random negative one (ties count half; computed from ranks, checked against
sklearn.metrics.roc_auc_score in the tests). A unit that fires for the other class is as good a detector,
so units are ranked by max(AUROC, 1 − AUROC), and the direction that won is kept with the pick.

Selection bias: the best of M units on the same texts looks better than it is (with hundreds of units some
separate any labels by chance). So the texts are split in two (stratified, seeded; a text that occurs twice
stays on one side): the best unit and its direction are chosen on the selection split, and its AUROC is
reported on the held-out split in that direction (it can fall below 0.5 when the pick was noise). The
selection split's score is kept beside it (``select_auroc``) to show the inflation. The linear probe
(probes.make_probe: standardised logistic regression) trains on the selection split and is scored on the
held-out one: its held-out accuracy is the ceiling of what the activation says linearly about the label,
and the AUROC of its score (its decision function) the same ceiling on the single units' scale (an
accuracy counts one threshold, an AUROC ranks: the two can differ by a lot on few texts).

Seed spread: the best latent is found for each SAE given (SAEs trained with different seeds); the table
reports the median and the min–max of its held-out AUROC over them. The neurons, the basis directions and
the probe are the model's own and the split is fixed, so they are one number each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from ...errors import UserError
from ..probes import LabelledSet
from .model import SparseAutoencoder
from .sweep import Spread, spread

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LABELS = ("tense", "sentiment", "arithmetic", "mcq")
POSITIVE = {"tense": "past", "sentiment": "happy", "arithmetic": "even", "mcq": "A"}  # the class counted positive
POOLS = ("last", "max")
HELD_OUT = 0.5


# ---- the labelled sets --------------------------------------------------------------------------------


def labelled_set(name: str, n: int = 400, seed: int = 0) -> LabelledSet:
    """The binary labelled set `name` (one of LABELS; see the module docstring): up to n texts (arithmetic:
    the corpus's 217 distinct facts, a seeded sample of n when n is smaller)."""
    import random

    from ...corpus import NUMBERS, arithmetic_facts, mcq_dataset
    from ..probes import feature_dataset

    if not isinstance(n, int) or isinstance(n, bool) or n < 8:
        raise UserError(f"--n must be an integer >= 8 (texts per labelled set), got {n!r}")
    if name in ("tense", "sentiment"):
        return feature_dataset(name, n, seed)
    if name == "arithmetic":
        facts = arithmetic_facts()
        if n < len(facts):
            facts = random.Random(f"mono-arithmetic-{seed}").sample(facts, n)
        return LabelledSet(
            "arithmetic", [f.prompt for f in facts], ["even" if NUMBERS.index(f.answer) % 2 == 0 else "odd" for f in facts]
        )
    if name == "mcq":
        items = [i for i in mcq_dataset(3 * n, seed, "none") if i.correct in ("A", "B")][:n]
        return LabelledSet("mcq", [i.prompt for i in items], [i.correct for i in items])
    raise UserError(f"unknown labelled set {name!r}; give some of {', '.join(LABELS)}")


# ---- AUROC and the pick ---------------------------------------------------------------------------------


def auroc(scores: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """AUROC of each column of scores [N, K] (or [N]) at telling positive [N] (bool) from the rest:
    P(score of a random positive > score of a random negative) + ½ P(equal), from average ranks (the
    Mann–Whitney U statistic), so tied scores (a latent at exactly 0 on most texts) count as sklearn's
    roc_auc_score counts them. [K] (or a scalar array); a constant column scores 0.5."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        raise UserError("AUROC needs both classes among the texts; give more texts")
    ranks = rankdata(s, axis=0, method="average")  # [N, K]; ties get their mean rank
    u = ranks[pos].sum(0) - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)


@dataclass
class UnitPick:
    """The best single unit of one kind, chosen on the selection split and scored on the held-out split."""

    kind: str  # "latent", "MLP neuron", "basis direction"
    index: int  # which latent / neuron / coordinate
    sign: int  # +1: higher activation means the positive class; -1: the negative class
    select_auroc: float  # max(AUROC, 1 - AUROC) on the selection split: the best of `candidates`, biased upward
    auroc: float  # on the held-out split, in the direction chosen on the selection split
    candidates: int  # how many units it was the best of


def pick_best(kind: str, select: np.ndarray, y_select: np.ndarray, held: np.ndarray, y_held: np.ndarray) -> UnitPick:
    """The unit (column) with the highest max(AUROC, 1 - AUROC) on the selection rows select [n_s, K], and its
    AUROC on the held-out rows held [n_h, K] in the direction that won (labels bool: True = positive)."""
    a = auroc(select, y_select)
    folded = np.maximum(a, 1 - a)
    i = int(np.argmax(folded))  # the first of equals: a deterministic pick
    sign = 1 if a[i] >= 0.5 else -1
    held_a = float(auroc(held[:, i], y_held))
    return UnitPick(kind, i, sign, float(folded[i]), held_a if sign > 0 else 1.0 - held_a, select.shape[1])


# ---- results --------------------------------------------------------------------------------------------


@dataclass
class MonoRow:
    """One labelled set: the best latent of each SAE, the best neurons, and the probe."""

    label: str  # "tense", ...
    positive: str  # the class counted positive ("past")
    negative: str
    n_select: int  # texts the units were chosen on
    n_held: int  # texts they are scored on
    latents: list[UnitPick]  # the best latent of each SAE, in the order of the SAEs
    latent_auroc: Spread  # its held-out AUROC over the SAEs (seeds)
    mlp_neuron: UnitPick | None  # None for a Hugging Face view (no MLP hook)
    basis: UnitPick  # the best coordinate of the hook's activation
    probe_accuracy: float  # the linear probe's held-out accuracy (the ceiling)
    probe_auroc: float  # the held-out AUROC of the probe's score: the ceiling on the units' own scale
    majority: float  # held-out share of the selection split's commonest class (what a constant gets)

    @property
    def neuron(self) -> UnitPick:
        """The better of the two neuron picks by held-out AUROC: the stricter comparison for the latent (the
        neurons get the better of two held-out scores; each pick itself was made on the selection split)."""
        picks = [p for p in (self.mlp_neuron, self.basis) if p is not None]
        return max(picks, key=lambda p: p.auroc)

    @property
    def verdict(self) -> str:
        """The latent's held-out AUROC over seeds against the best neuron's, said as it is."""
        n = self.neuron.auroc
        if self.latent_auroc.n == 0:
            return "no SAE"
        if self.latent_auroc.min > n:
            return "latent above neuron on every seed"
        if self.latent_auroc.max < n:
            return "neuron above latent on every seed"
        return "latent and neuron overlap across seeds"


@dataclass
class MonoResult:
    model: str
    hook: str  # the SAEs' hook
    layer: int
    pool: str  # "last" or "max"
    saes: list[str]  # what each SAE is (its folder, or its settings)
    seeds: list[int | None]  # each SAE's training seed, where recorded
    held_out: float  # share of each set's texts held out for scoring
    split_seed: int
    rows: list[MonoRow]
    notes: list[str] = field(default_factory=list)


# ---- activations ----------------------------------------------------------------------------------------


def _pool(a: torch.Tensor, mask: torch.Tensor, last: torch.Tensor, pool: str) -> torch.Tensor:
    """[B, T, K] -> [B, K]: the last valid position, or the maximum over the valid positions."""
    if pool == "last":
        return a[torch.arange(a.shape[0], device=a.device), last]
    return a.masked_fill(~mask[..., None], -math.inf).amax(1)


@torch.no_grad()
def pooled_units(
    view,
    texts: Sequence[str],
    hook: str,
    mlp_hook: str | None,
    saes: Sequence[SparseAutoencoder],
    pool: str = "last",
    batch_size: int = 32,
) -> tuple[np.ndarray, np.ndarray | None, list[np.ndarray]]:
    """(the hook's activation [N, D], the MLP's hidden units [N, 4D] or None, each SAE's latents [N, M]),
    pooled per text; latents are encoded at every position before a "max" pooling."""
    from ..activations import as_token_ids, iter_batches

    names = [hook] + ([mlp_hook] if mlp_hook else [])
    x_parts, m_parts, f_parts = [], [], [[] for _ in saes]
    for batch in iter_batches(as_token_ids(view, list(texts)), batch_size, view.device):
        _, cache = view.run_with_cache(batch.ids, names)
        x = cache[hook].float()
        mask = batch.mask.clone()
        if view.bos_id is not None and mask.shape[1] > 1:
            mask[batch.lengths > 1, 0] = False  # the start token is the same in every text: its maximum says nothing
        x_parts.append(_pool(x, mask, batch.last, pool).cpu())
        if mlp_hook:
            m_parts.append(_pool(cache[mlp_hook].float(), mask, batch.last, pool).cpu())
        for parts, sae in zip(f_parts, saes):
            dev = sae.W_enc.device
            parts.append(_pool(sae.encode(x.to(dev)), mask.to(dev), batch.last.to(dev), pool).cpu())
    mlp = torch.cat(m_parts).numpy() if mlp_hook else None
    return torch.cat(x_parts).numpy(), mlp, [torch.cat(p).numpy() for p in f_parts]


def _probe_scores(
    X: np.ndarray, labels: np.ndarray, positive: str, sel: np.ndarray, held: np.ndarray, seed: int
) -> tuple[float, float, float]:
    """(held-out accuracy of the linear probe trained on the selection rows, the held-out AUROC of its score
    for the positive class, the majority rate)."""
    from ..probes import make_probe

    probe = make_probe(1.0, seed).fit(X[sel], labels[sel])
    score = probe.decision_function(X[held])  # > 0 leans to probe.classes_[1]
    if probe.classes_[1] != positive:
        score = -score
    values, counts = np.unique(labels[sel], return_counts=True)
    return (
        float((probe.predict(X[held]) == labels[held]).mean()),
        float(auroc(score, labels[held] == positive)),
        float((labels[held] == values[counts.argmax()]).mean()),
    )


# ---- the measurement --------------------------------------------------------------------------------------


def _check_saes(view, saes: Sequence[SparseAutoencoder]) -> tuple[str, int]:
    """(the hook, its layer) the SAEs share, once each was trained on this model."""
    from .pipeline import check_same_model, layer_of

    if not saes:
        raise UserError("give at least one SAE (folders, or --seeds N to train them)")
    hooks = sorted({s.cfg.hook_name for s in saes})
    if len(hooks) > 1 or not hooks[0]:
        raise UserError(
            f"the SAEs read different hooks ({', '.join(h or '?' for h in hooks)}); give SAEs of one "
            "hook point (their seed spread is the point)"
        )
    for i, sae in enumerate(saes):
        check_same_model(sae, view, f"SAE #{i + 1}")
    return hooks[0], layer_of(hooks[0])


def mono_row(
    name: str,
    data: LabelledSet,
    X: np.ndarray,
    mlp: np.ndarray | None,
    latents: Sequence[np.ndarray],
    held_out: float = HELD_OUT,
    seed: int = 0,
) -> MonoRow:
    """The row of one labelled set from its pooled units (X [N, D], mlp [N, 4D] or None, latents [N, M] per SAE):
    split, pick on the selection split, score on the held-out split."""
    from ..probes import split_indices

    labels = np.array(data.labels)
    positive = POSITIVE.get(name, sorted(set(data.labels))[0])
    others = sorted(set(data.labels) - {positive})
    if len(others) != 1:
        raise UserError(f"{name}: a binary label is needed, got classes {sorted(set(data.labels))}")
    sel, held = split_indices(labels, held_out, seed, groups=list(data.texts), unit="distinct text")
    y = labels == positive
    picks = [pick_best("latent", f[sel], y[sel], f[held], y[held]) for f in latents]
    mlp_pick = pick_best("MLP neuron", mlp[sel], y[sel], mlp[held], y[held]) if mlp is not None else None
    basis = pick_best("basis direction", X[sel], y[sel], X[held], y[held])
    acc, probe_auroc, majority = _probe_scores(X, labels, positive, sel, held, seed)
    return MonoRow(
        name,
        positive,
        others[0],
        len(sel),
        len(held),
        picks,
        spread([p.auroc for p in picks]),
        mlp_pick,
        basis,
        acc,
        probe_auroc,
        majority,
    )


def check_request(labels: Sequence[str], n: int, pool: str = "last", held_out: float = HELD_OUT) -> None:
    """A UserError for a labelled set that does not exist, too few texts, an unknown pooling or held-out share:
    what can be refused before any SAE is trained or model run."""
    if pool not in POOLS:
        raise UserError(f"--pool {pool!r}: give last or max")
    if not 0 < held_out < 1:
        raise UserError(f"the held-out share must be between 0 and 1, got {held_out}")
    if not labels:
        raise UserError(f"give at least one labelled set: {', '.join(LABELS)}")
    for label in labels:
        if label not in LABELS:
            raise UserError(f"unknown labelled set {label!r}; give some of {', '.join(LABELS)}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 8:
        raise UserError(f"--n must be an integer >= 8 (texts per labelled set), got {n!r}")


def monosemanticity(
    view,
    saes: Sequence[SparseAutoencoder],
    labels: Sequence[str] = LABELS,
    n: int = 400,
    seed: int = 0,
    pool: str = "last",
    held_out: float = HELD_OUT,
    batch_size: int = 32,
    names: Sequence[str] | None = None,
) -> MonoResult:
    """The table of the module docstring for `saes` (one hook, any number of seeds) on `labels`, n texts each,
    split with `seed` (held_out of them scored). names: how each SAE is shown (default: its settings)."""
    check_request(labels, n, pool, held_out)
    hook, layer = _check_saes(view, saes)
    notes = []
    mlp_hook = f"blocks.{layer}.mlp.hook_post" if view.arch == "nanolm" else None
    if mlp_hook is None:
        notes.append(
            "a Hugging Face model has no MLP hidden-unit hook here: the best neuron is over the basis "
            "directions of the hook's activation only"
        )
    rows = []
    for label in labels:
        data = labelled_set(label, n, seed)
        X, mlp, latents = pooled_units(view, data.texts, hook, mlp_hook, saes, pool, batch_size)
        rows.append(mono_row(label, data, X, mlp, latents, held_out, seed))
    shown = list(names) if names is not None else [_describe(s) for s in saes]
    return MonoResult(view.name, hook, layer, pool, shown, [s.cfg.extra.get("seed") for s in saes], held_out, seed, rows, notes)


def _describe(sae: SparseAutoencoder) -> str:
    c = sae.cfg
    knob = f"K={c.k}" if c.arch == "topk" else f"λ={c.extra.get('l1', '?')}"
    seed = c.extra.get("seed")
    return f"{c.arch} M={c.d_sae} {knob}" + (f" seed {seed}" if seed is not None else "")


# ---- the figure ---------------------------------------------------------------------------------------


def mono_figure(result: MonoResult) -> Figure:
    """Per labelled set, bars: the best latent (median over seeds, min–max error bar), the best MLP neuron, the
    best basis direction and the linear probe (held-out AUROC each; the probe's accuracy as a diamond); chance
    at 0.5.
    Nothing is written: save it with nanolm.plots.save_figure."""
    from ...plots import pyplot

    fig, ax = pyplot().subplots(figsize=(max(6.0, 1.8 * len(result.rows) + 2) + 2.5, 4.2))
    x = np.arange(len(result.rows))
    width = 0.2
    med = np.array([r.latent_auroc.median for r in result.rows])
    err = np.array(
        [
            [r.latent_auroc.median - r.latent_auroc.min for r in result.rows],
            [r.latent_auroc.max - r.latent_auroc.median for r in result.rows],
        ]
    )
    ax.bar(
        x - 1.5 * width,
        med,
        width,
        yerr=err,
        capsize=3,
        label=f"best latent (median, min–max over {len(result.saes)} SAE{'s' * (len(result.saes) > 1)})",
    )
    mlp = [r.mlp_neuron.auroc if r.mlp_neuron is not None else np.nan for r in result.rows]
    ax.bar(x - 0.5 * width, mlp, width, label="best MLP neuron")
    ax.bar(x + 0.5 * width, [r.basis.auroc for r in result.rows], width, label="best basis direction")
    ax.bar(
        x + 1.5 * width,
        [r.probe_auroc for r in result.rows],
        width,
        hatch="//",
        color="lightgray",
        edgecolor="gray",
        label="linear probe (AUROC)",
    )
    ax.plot(x + 1.5 * width, [r.probe_accuracy for r in result.rows], "kD", ms=4, label="linear probe (accuracy)")
    ax.axhline(0.5, color="k", lw=1, ls=":", label="chance")
    ax.set_xticks(x, [f"{r.label}\n({r.positive} vs {r.negative})" for r in result.rows])
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel("held-out AUROC")
    where = "last token" if result.pool == "last" else "max over tokens"
    ax.set_title(
        f"{result.model} {result.hook}: best single unit, chosen on one split, scored on the other ({where})", fontsize=9
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    return fig
