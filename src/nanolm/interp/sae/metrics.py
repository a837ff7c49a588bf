"""Evaluating an SAE on held-out tokens. Every metric, exactly (x: activations [N, D] at the SAE's hook over
the N evaluated tokens, x̂ the SAE's reconstruction, f its latents [N, M]):

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

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...errors import UserError
from ...records import Record
from .model import SparseAutoencoder

DENSE_ABOVE = 0.10


def l0(f: torch.Tensor) -> float:
    """Mean number of active latents per token; f [N, M]."""
    return float((f > 0).double().sum(-1).mean())


def fvu(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Σ‖x - x̂‖² / Σ‖x - x̄‖² over tokens [N, D], about the mean x̄."""
    x, x_hat = x.double(), x_hat.double()
    return float(((x - x_hat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())


def ce_recovered(ce_clean: float, ce_spliced: float, ce_ablated: float) -> float:
    """(CE_ablated - CE_spliced) / (CE_ablated - CE_clean); NaN when ablating costs nothing."""
    gap = ce_ablated - ce_clean
    return (ce_ablated - ce_spliced) / gap if gap != 0 else math.nan


@dataclass
class SAEEval(Record):
    """An SAE's numbers on held-out tokens (definitions in this module's docstring)."""

    tokens: int  # N: tokens evaluated (also the dead-latent window)
    positions: int  # positions with a next token (the CE numbers' denominator)
    l0: float
    mse: float
    fvu: float
    dead: int
    dense: int
    d_sae: int
    ce_clean: float
    ce_spliced: float
    ce_zero_ablated: float
    ce_mean_ablated: float
    ce_recovered_zero: float
    ce_recovered_mean: float
    kl: float  # KL(clean ‖ spliced), nats per position
    densities: list[float] = field(default_factory=list)  # [M]: share of tokens each latent is active on
    hook: str = ""
    texts: int | None = None  # held-out texts evaluated; None in a file saved before it was kept

    @property
    def dead_window(self) -> int:
        return self.tokens


class _Sums:
    """Running float64 sums over batches of valid positions."""

    def __init__(self, m: int) -> None:
        self.n = 0  # tokens
        self.sq_err = 0.0
        self.sq_dev = 0.0
        self.active = 0.0
        self.counts = torch.zeros(m, dtype=torch.float64)
        self.ce = {"clean": 0.0, "spliced": 0.0, "zero": 0.0, "mean": 0.0}
        self.kl = 0.0
        self.positions = 0


def _ce_sum(logits: torch.Tensor, ids: torch.Tensor, has_next: torch.Tensor) -> float:
    """Summed next-token cross entropy (nats) over the positions with a next token."""
    logp = F.log_softmax(logits[:, :-1].double(), dim=-1)
    nll = -logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    return float(nll[has_next].sum())


def _kl_sum(clean: torch.Tensor, other: torch.Tensor, has_next: torch.Tensor) -> float:
    p = F.log_softmax(clean[:, :-1].double(), dim=-1)
    q = F.log_softmax(other[:, :-1].double(), dim=-1)
    kl = (p.exp() * (p - q)).sum(-1)
    return float(kl[has_next].sum())


@torch.no_grad()
def _mean_activation(view, ids: list[list[int]], hook: str, batch_size: int) -> torch.Tensor:
    """x̄ [D]: the mean activation at hook over the valid positions of every text (float64)."""
    from ..activations import iter_batches

    total, n = None, 0
    for batch in iter_batches(ids, batch_size, view.device):
        _, cache = view.run_with_cache(batch.ids, [hook])
        acts = cache[hook].double()[batch.mask]
        total = acts.sum(0) if total is None else total + acts.sum(0)
        n += acts.shape[0]
    return total / n


@torch.no_grad()
def evaluate_sae(
    view, sae: SparseAutoencoder, texts: Sequence[str] | Sequence[Sequence[int]], hook: str | None = None, batch_size: int = 32
) -> SAEEval:
    """The SAE's metrics on `texts` (held-out: not the SAE's training texts) at its hook."""
    from ..activations import as_token_ids, iter_batches

    hook = hook or sae.cfg.hook_name
    ids = as_token_ids(view, texts)
    if not ids:
        raise UserError("no texts to evaluate the SAE on")
    sae = sae.to(view.device)
    mean = _mean_activation(view, ids, hook, batch_size)
    s = _Sums(sae.cfg.d_sae)
    for batch in iter_batches(ids, batch_size, view.device):
        clean, cache = view.run_with_cache(batch.ids, [hook])
        x = cache[hook].float()
        valid = batch.mask
        has_next = valid[:, 1:]
        f = sae.encode(x)
        x_hat = sae.decode(f)
        with view.edit(hook, lambda _a, x_hat=x_hat: x_hat.to(_a.dtype)):
            spliced = view.logits(batch.ids)
        with view.edit(hook, lambda a: torch.zeros_like(a)):
            zero = view.logits(batch.ids)
        with view.edit(hook, lambda a: mean.to(a.dtype).expand_as(a).clone()):
            mean_ablated = view.logits(batch.ids)
        xv, xh, fv = x[valid].double(), x_hat[valid].double(), f[valid]
        s.n += xv.shape[0]
        s.sq_err += float(((xv - xh) ** 2).sum())
        s.sq_dev += float(((xv - mean) ** 2).sum())
        s.active += float((fv > 0).double().sum())
        s.counts += (fv > 0).double().sum(0).cpu()
        s.positions += int(has_next.sum())
        for key, logits in (("clean", clean), ("spliced", spliced), ("zero", zero), ("mean", mean_ablated)):
            s.ce[key] += _ce_sum(logits, batch.ids, has_next)
        s.kl += _kl_sum(clean, spliced, has_next)
    return _result(s, sae, hook, len(ids))


def _result(s: _Sums, sae: SparseAutoencoder, hook: str, texts: int) -> SAEEval:
    if s.positions == 0:
        raise UserError("every text is a single token: no position has a next token to score; give longer texts")
    ce = {k: v / s.positions for k, v in s.ce.items()}
    density = s.counts / s.n
    return SAEEval(
        tokens=s.n,
        positions=s.positions,
        l0=s.active / s.n,
        mse=s.sq_err / (s.n * sae.cfg.d_in),
        fvu=s.sq_err / s.sq_dev if s.sq_dev > 0 else math.nan,
        dead=int((s.counts == 0).sum()),
        dense=int((density > DENSE_ABOVE).sum()),
        d_sae=sae.cfg.d_sae,
        ce_clean=ce["clean"],
        ce_spliced=ce["spliced"],
        ce_zero_ablated=ce["zero"],
        ce_mean_ablated=ce["mean"],
        ce_recovered_zero=ce_recovered(ce["clean"], ce["spliced"], ce["zero"]),
        ce_recovered_mean=ce_recovered(ce["clean"], ce["spliced"], ce["mean"]),
        kl=s.kl / s.positions,
        densities=density.tolist(),
        hook=hook,
        texts=texts,
    )


def density_figure(result: SAEEval, title: str = "") -> object:
    """Histogram of log10(firing density) over latents; dead latents counted apart (log of 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    d = np.asarray(result.densities)
    alive = d[d > 0]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if len(alive):
        ax.hist(np.log10(alive), bins=40, color="#4477aa")
    ax.axvline(math.log10(DENSE_ABOVE), color="#cc6677", linestyle="--", label=f"dense (> {DENSE_ABOVE:.0%})")
    ax.set_xlabel("log10(share of tokens the latent is active on)")
    ax.set_ylabel("latents")
    ax.set_title(title or f"latent densities over {result.tokens:,} tokens ({result.dead} dead not shown)")
    ax.legend()
    fig.tight_layout()
    return fig
