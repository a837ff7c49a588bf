"""Reading an SAE's latents: for each, the contexts it is most active on, how often it fires, and which
output tokens it pushes up and down.

- Contexts: over the given (held-out) texts, each distinct one read once, the `top` tokens with the
  largest activation f_i, each shown inside its text with the token marked: ``two plus [two] equals``.
  Kept as a running top-k per latent while the texts stream through (memory: top × M numbers, not the
  N × M latents).
- Density: the share of the read tokens on which f_i > 0.
- Tokens read: every token of every text except the start-of-document token the view puts first (it is the
  same token in every text, so it says nothing about a latent, and its outlying activations would fill
  every latent's list with the same context).
- Direct effect on the output (direct logit attribution of the decoder row, as TransformerLens computes it
  with the final norm folded in): e_i = (W_dec[i] ⊙ γ) · W_U  [V], γ the final norm's weight (ones when the
  norm has none); for a LayerNorm (which subtracts the mean) W_dec[i] is first centred over its D
  coordinates. This is the change of the logits per unit of f_i with the norm's division by the token's
  RMS (or standard deviation) left out: that factor is positive and the same for every output token, so the
  ranking of promoted (largest e_i) and suppressed (smallest e_i) tokens is exact; the unembedding's bias
  does not depend on the latent and is left out too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from ...errors import UserError
from .model import SparseAutoencoder

EFFECT = (
    "direct effect e_i = (W_dec[i] ⊙ γ) · W_U, γ the final norm's weight (W_dec[i] centred first for a "
    "LayerNorm); logits per unit of activation, before the norm's positive 1/RMS factor"
)


@dataclass
class Context:
    """One token a latent is active on, inside its text."""

    text: str  # the tokens around it, the token itself in brackets: "two plus [two] equals"
    token: str
    activation: float  # f_i at this token
    text_index: int  # which of the given texts (the first, when it was given more than once)
    position: int  # the token's position in that text (0 = the start token)


@dataclass
class TokenEffect:
    token: str
    id: int
    value: float  # e_i[token]: logits per unit of f_i (see the module docstring)


@dataclass
class Feature:
    """One latent: its density, its top contexts (largest activation first), its direct effect."""

    latent: int
    density: float  # share of the read tokens with f_i > 0
    max_activation: float  # 0 when it never fired
    contexts: list[Context] = field(default_factory=list)
    promoted: list[TokenEffect] = field(default_factory=list)  # largest e_i first
    suppressed: list[TokenEffect] = field(default_factory=list)  # smallest (most negative) e_i first


@dataclass
class FeatureReport:
    """Latents of an SAE read over some texts."""

    hook: str
    d_sae: int
    texts: int  # distinct texts read (a text given twice is read once)
    tokens: int  # tokens read (start tokens excluded)
    dead: int  # latents with f = 0 on every read token
    features: list[Feature]
    chosen: str  # how the latents were chosen
    effect: str = EFFECT


class _RunningTop:
    """The `top` largest activations of each of M latents seen so far, and where they were ([top, M] each)."""

    def __init__(self, top: int, m: int, device: torch.device) -> None:
        self.values = torch.full((top, m), -torch.inf, device=device)
        self.text = torch.zeros(top, m, dtype=torch.long, device=device)
        self.position = torch.zeros(top, m, dtype=torch.long, device=device)

    def add(self, f: torch.Tensor, text: torch.Tensor, position: torch.Tensor) -> None:
        """f [n, M] latents of n tokens, text and position [n] where each token is."""
        top = self.values.shape[0]
        values = torch.cat([self.values, f])  # [top + n, M]
        texts = torch.cat([self.text, text[:, None].expand_as(f)])
        positions = torch.cat([self.position, position[:, None].expand_as(f)])
        best = values.topk(min(top, values.shape[0]), dim=0)
        self.values = best.values
        self.text = texts.gather(0, best.indices)
        self.position = positions.gather(0, best.indices)


def check_latents(latents: Sequence[int], m: int) -> list[int]:
    """The latents, each checked to be in 0..m-1 (a UserError otherwise), duplicates dropped."""
    out = []
    for latent in latents:
        if not isinstance(latent, int) or isinstance(latent, bool) or not 0 <= latent < m:
            raise UserError(f"--feature {latent!r}: this SAE has latents 0..{m - 1}")
        out.append(latent)
    return list(dict.fromkeys(out))


def direct_effect(view, sae: SparseAutoencoder, latents: Sequence[int]) -> torch.Tensor:
    """[len(latents), V]: e_i = (W_dec[i] ⊙ γ) · W_U for each latent i (see the module docstring), float64."""
    w = sae.W_dec.detach()[list(latents)].double().to(view.device)  # [L, D]
    norm = view.final_norm
    if isinstance(norm, nn.LayerNorm):  # LayerNorm subtracts the mean: the part of W_dec[i] it keeps is centred
        w = w - w.mean(-1, keepdim=True)
    gamma = getattr(norm, "weight", None)
    if isinstance(gamma, torch.Tensor):
        w = w * gamma.detach().double()
    return w @ view.W_U.detach().double()  # [L, D] @ [D, V]


def _decoder(view) -> Callable[[list[int]], str] | None:
    """The tokenizer's decode (nanolm's own, or the Hugging Face tokenizer behind the view's), or None."""
    return view.tokenizer.decode if view.tokenizer is not None else None


def _split_at(view, ids: list[int], i: int) -> tuple[str, str, str] | None:
    """(text before token i, token i's text, text after) of ids as the tokenizer decodes them, or None when
    its decoding is not prefix-consistent (then the tokens are shown one by one)."""
    decode = _decoder(view)
    if decode is None:
        return None
    before, upto, whole = decode(ids[:i]), decode(ids[: i + 1]), decode(ids)
    if not (upto.startswith(before) and whole.startswith(upto)):
        return None
    return before, upto[len(before) :], whole[len(upto) :]


def mark_context(view, ids: Sequence[int], position: int, before: int = 12, after: int = 4, first: int = 0) -> str:
    """The tokens ids[position - before : position + after + 1] (not before `first`) as the tokenizer writes
    them, the one at `position` in brackets ("two plus [two] equals"); "…" where the text was cut."""
    lo, hi = max(first, position - before), min(len(ids), position + after + 1)
    window = [int(i) for i in ids[lo:hi]]
    parts = _split_at(view, window, position - lo)
    if parts is None:
        strs = [view.token_str(i) for i in window]
        parts = ("".join(strs[: position - lo]), strs[position - lo], "".join(strs[position - lo + 1 :]))
    head, token, tail = parts
    lead = token[: len(token) - len(token.lstrip())]  # a token's own leading space stays outside the mark
    text = f"{head}{lead}[{token.lstrip()}]{tail}".replace("\n", "⏎")
    return ("…" if lo > first else "") + text + ("…" if hi < len(ids) else "")


@torch.no_grad()
def features(
    view,
    sae: SparseAutoencoder,
    texts: Sequence[str] | Sequence[Sequence[int]],
    top: int = 10,
    latents: Sequence[int] | None = None,
    count: int = 10,
    k_tokens: int = 5,
    batch_size: int = 32,
) -> FeatureReport:
    """Read the SAE's latents over texts at its hook: the given `latents`, else the `count` densest latents
    that fire at all; for each, its `top` contexts, density, and `k_tokens` promoted and suppressed tokens."""
    from ..activations import as_token_ids, iter_token_activations

    for name, value in (("--top", top), ("--count", count), ("--k-tokens", k_tokens)):
        if not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a positive integer, got {value!r}")
    m = sae.cfg.d_sae
    chosen = check_latents(latents, m) if latents else None
    hook = sae.cfg.hook_name
    if not hook:
        raise UserError("this SAE records no hook point (cfg.json hook_name); it cannot be read on a model")
    given = as_token_ids(view, texts)
    if not given:
        raise UserError("no texts to read the SAE's latents on")
    first_seen: dict[tuple[int, ...], int] = {}  # a repeated text would repeat its contexts: each is read once
    for j, t in enumerate(given):
        first_seen.setdefault(tuple(t), j)
    ids, where = [list(t) for t in first_seen], list(first_seen.values())  # where[u]: u's index in `texts`
    sae = sae.to(view.device)
    first = 1 if view.bos_id is not None else 0  # the start token is left out (module docstring)
    counts = torch.zeros(m, dtype=torch.float64, device=view.device)
    running = _RunningTop(top, m, view.device)
    n = 0
    for batch in iter_token_activations(view, ids, hook, batch_size):
        keep = batch.position >= first
        acts = batch.acts[keep]
        if not torch.isfinite(acts).all():
            bad = int(batch.text[keep][(~torch.isfinite(acts)).any(-1)][0])
            raise UserError(f"NaN or infinite activations at {hook} in text #{bad + 1}; check the model (a diverged run?)")
        f = sae.encode(acts)  # [n, M]
        counts += (f > 0).double().sum(0)
        running.add(f, batch.text[keep], batch.position[keep])
        n += f.shape[0]
    if n == 0:
        raise UserError("the texts have no tokens after the start token; give longer texts")
    density = (counts / n).cpu()
    if chosen is None:
        alive = (density > 0).nonzero().flatten()
        order = alive[density[alive].argsort(descending=True, stable=True)]
        chosen = order[:count].tolist()
        how = f"the {len(chosen)} densest latents that fire on these texts"
    else:
        how = "the latents asked for"
    report = FeatureReport(hook, m, len(ids), n, int((density == 0).sum()), [], how)
    if not chosen:
        return report
    effect = direct_effect(view, sae, chosen).cpu()  # [L, V]
    k = min(k_tokens, effect.shape[1])
    values, text_idx, pos = running.values.cpu(), running.text.cpu(), running.position.cpu()
    for j, latent in enumerate(chosen):
        contexts = []
        for r in range(values.shape[0]):
            if values[r, latent] > 0:
                u, p = int(text_idx[r, latent]), int(pos[r, latent])
                contexts.append(
                    Context(
                        mark_context(view, ids[u], p, first=first),
                        view.token_str(ids[u][p]),
                        float(values[r, latent]),
                        where[u],
                        p,
                    )
                )
        up, down = effect[j].topk(k), (-effect[j]).topk(k)
        report.features.append(
            Feature(
                latent,
                float(density[latent]),
                float(values[0, latent].clamp_min(0)),
                contexts,
                [TokenEffect(view.token_str(int(i)), int(i), float(v)) for v, i in zip(up.values, up.indices)],
                [TokenEffect(view.token_str(int(i)), int(i), -float(v)) for v, i in zip(down.values, down.indices)],
            )
        )
    return report


read_features = features  # the name exported by nanolm.interp.sae (where `features` is this module)
