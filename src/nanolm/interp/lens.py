"""The logit lens (nostalgebraist 2020): read each layer's residual stream as if the model ended
there, through the model's own final norm and W_U.

Without the final norm, early layers' logits are on another scale than the output's and their
probabilities are not comparable; ``final_norm=False`` shows that raw projection on purpose.
A lens that first maps each layer's residual (a tuned lens's learned affine translators) is passed in as a
``Lens``: this module knows only that protocol, not the lenses that implement it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from ..errors import UserError
from ..records import Record
from .view import ModelView


class Lens(Protocol):
    """A map of each layer's residual before it is read through the final norm and W_U (the tuned lens's
    translators). The final layer is the model's output and is never mapped."""

    def translate(self, resid: torch.Tensor) -> torch.Tensor:
        """[L+1, ..., D] -> [L+1, ..., D]: every layer's residual mapped, the last entry unchanged."""
        ...

    def translate_layer(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """One layer's residual [..., D] mapped (layer < L)."""
        ...


def layer_logits(view: ModelView, resid: torch.Tensor, final_norm: bool = True, tuned: Lens | None = None) -> torch.Tensor:
    """Residual stream [L+1, ..., D] -> lens logits [L+1, ..., V]. The last entry is the model's
    output: the final layer is never translated."""
    if tuned is not None:
        resid = tuned.translate(resid)
    return view.unembed_resid(resid, final_norm)


def kl_from_final(final_logits: torch.Tensor, lens_logits: torch.Tensor) -> torch.Tensor:
    """KL(final ‖ lens) in nats, over the last axis: [..., V], [..., V] -> [...]."""
    return kl_from_final_log_probs(F.log_softmax(_at_least_f32(final_logits), dim=-1), lens_logits)


def kl_from_final_log_probs(final_log_probs: torch.Tensor, lens_logits: torch.Tensor) -> torch.Tensor:
    """The same from the final distribution's log-probabilities, for callers that reuse them across layers."""
    q_log = F.log_softmax(_at_least_f32(lens_logits), dim=-1)
    return (final_log_probs.exp() * (final_log_probs - q_log)).sum(-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats over the last axis: [..., V] -> [...]."""
    logp = F.log_softmax(_at_least_f32(logits), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _at_least_f32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


@dataclass
class LensSummary:
    """The lens over a whole batch, reduced per token so that [L+1, B, T, V] is never held at once."""

    top1: torch.Tensor  # [L+1, B, T] each layer's top-1 token
    top1_prob: torch.Tensor  # [L+1, B, T] its probability
    kl: torch.Tensor  # [L+1, B, T] KL(final ‖ layer), nats
    entropy: torch.Tensor  # [L+1, B, T] nats


@torch.no_grad()
def lens_summary(view: ModelView, tokens: torch.Tensor, final_norm: bool = True, tuned: Lens | None = None) -> LensSummary:
    """Top-1 token and probability, KL to the final distribution and entropy at every layer and
    position of tokens [B, T]. One layer's logits [B, T, V] at a time, turned into log q in place,
    so only one [B, T, V] buffer per layer is ever held besides the final distribution."""
    logits, resid = view.residual_stack(tokens)  # [B, T, V], [L+1, B, T, D]
    logp = F.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    neg_entropy_final = (p * logp).sum(-1)  # [B, T]
    del logp
    rows = []
    for l in range(resid.shape[0]):
        h = resid[l]
        if tuned is not None and l < resid.shape[0] - 1:
            h = tuned.translate_layer(l, h)
        z = view.unembed_resid(h, final_norm).float()  # [B, T, V]
        top, top_i = z.max(-1)
        lse = torch.logsumexp(z, dim=-1)
        z.sub_(lse[..., None])  # z is now log q (subtracting before the sum halves float32's error on large raw logits)
        kl = neg_entropy_final - torch.einsum("btv,btv->bt", p, z)
        ent = -torch.einsum("btv,btv->bt", z.exp(), z)
        rows.append((top_i, (top - lse).exp(), kl, ent))
    top1, top1_prob, kl, ent = (torch.stack(x) for x in zip(*rows))
    return LensSummary(top1, top1_prob, kl, ent)


@dataclass
class LensCell:
    """What one layer predicts at one position."""

    top_ids: list[int]
    top_tokens: list[str]
    top_probs: list[float]
    final_token_prob: float  # probability this layer gives the model's final top-1 token
    final_token_rank: int  # its rank here, 1 = top
    kl_final: float  # KL(final ‖ this layer), nats
    entropy: float | None = None  # nats; None in a file saved before the lens measured it


@dataclass
class LensResult(Record):
    prompt: str
    tokens: list[str]  # the input tokens, [T]
    positions: list[int]  # the positions shown
    layers: list[str]  # "embed", "0", ..., str(L-1)
    cells: list[list[LensCell]]  # [layer][position]
    final_tokens: list[str]  # the model's own top-1 next token at each shown position
    final_norm: bool
    tuned: bool
    model: str = ""
    notes: list[str] = field(default_factory=list)


def parse_positions(spec: str, n_tokens: int) -> list[int]:
    """ "all", "last", or comma-separated indices (negative ones count from the end)."""
    if spec == "all":
        return list(range(n_tokens))
    if spec == "last":
        return [n_tokens - 1]
    out = []
    for part in spec.split(","):
        try:
            i = int(part)
        except ValueError:
            raise UserError(f"--positions {spec!r}: give 'all', 'last' or indices such as 0,3,-1") from None
        if not -n_tokens <= i < n_tokens:
            raise UserError(f"position {i} is out of range for a prompt of {n_tokens} tokens")
        out.append(i % n_tokens)
    return out


@torch.no_grad()
def logit_lens(
    view: ModelView,
    prompt: str,
    positions: str = "last",
    k: int = 3,
    final_norm: bool = True,
    tuned: Lens | None = None,
    prepend_bos: bool = True,
) -> LensResult:
    """The lens table for one prompt: for the embedding output and each block's output, at each
    chosen position (default: the last, which predicts the word after the prompt; "all" for every
    one), the top-k tokens, the final top-1 token's probability and rank, KL to the final
    distribution and the entropy."""
    tokens = view.to_tokens(prompt, prepend_bos)  # [1, T]
    T = tokens.shape[1]
    pos = parse_positions(positions, T)
    logits, resid = view.residual_stack(tokens)  # [1, T, V], [L+1, 1, T, D]
    lens = layer_logits(view, resid[:, 0, pos], final_norm, tuned)  # [L+1, P, V]
    final = logits[0, pos].float()  # [P, V]
    probs = F.softmax(lens.float(), dim=-1)
    top_p, top_i = probs.topk(min(k, probs.shape[-1]), dim=-1)  # [L+1, P, k]
    final_top = final.argmax(-1)  # [P]
    final_tok_p = probs.gather(-1, final_top.expand(probs.shape[0], -1)[..., None])[..., 0]  # [L+1, P]
    rank = (probs > final_tok_p[..., None]).sum(-1) + 1  # [L+1, P]
    kl = kl_from_final(final.expand_as(lens), lens)  # [L+1, P]
    ent = entropy(lens)
    cells = [
        [
            LensCell(
                top_i[l, j].tolist(),
                [view.token_str(i) for i in top_i[l, j].tolist()],
                top_p[l, j].tolist(),
                float(final_tok_p[l, j]),
                int(rank[l, j]),
                float(kl[l, j]),
                float(ent[l, j]),
            )
            for j in range(len(pos))
        ]
        for l in range(lens.shape[0])
    ]
    notes = []
    unknown = getattr(view.tokenizer, "unknown_words", lambda _text: [])(prompt)
    if unknown:
        notes.append(f"not in the vocabulary, read as <unk>: {', '.join(unknown)}")
    if not final_norm:
        notes.append(
            "raw projection without the final norm: early layers are on another scale, so their "
            "probabilities are not comparable with the output's"
        )
    ids = tokens[0].tolist()
    return LensResult(
        prompt,
        [view.token_str(i) for i in ids],
        pos,
        view.layer_labels(),
        cells,
        [view.token_str(int(i)) for i in final_top],
        final_norm,
        tuned is not None,
        view.name,
        notes,
    )


def lens_figure(result: LensResult) -> Any:
    """Heatmap (a matplotlib Figure): layers (rows, embed at the bottom) × positions; each cell is
    labelled with its top-1 token and coloured by that token's probability. Nothing is written; save
    it with nanolm.plots.save_figure."""
    import numpy as np

    from ..plots import pyplot

    L, P = len(result.layers), len(result.positions)
    probs = np.array([[c.top_probs[0] for c in row] for row in result.cells])  # [L+1, P]
    fig, ax = pyplot().subplots(figsize=(max(6.5, 1.1 * P + 2), max(3.0, 0.45 * L + 1.5)))
    im = ax.imshow(probs, origin="lower", cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    for l in range(L):
        for j in range(P):
            tok = result.cells[l][j].top_tokens[0].replace("\n", "\\n")
            ax.text(j, l, tok[:10], ha="center", va="center", fontsize=8, color="white" if probs[l, j] > 0.6 else "black")
    ax.set_yticks(range(L), result.layers)
    ax.set_xticks(range(P), [result.tokens[p].replace("\n", "\\n")[:10] for p in result.positions], rotation=45, ha="right")
    ax.set_ylabel("layer (residual stream after it)")
    ax.set_xlabel("input token (the cell predicts the next one)")
    kind = "tuned lens" if result.tuned else ("logit lens" if result.final_norm else "raw projection (no final norm)")
    ax.set_title(f"{kind}: top-1 token, colour = its probability")
    fig.colorbar(im, ax=ax, label="probability of the top-1 token")
    return fig
