"""A nanolm model's keys and values read, and compressed ones spliced back, through hooks; and what a change
of K does after softmax.

Reading: a forward hook on each layer's ``attn.qkv`` keeps its output; ``split_heads`` turns it into q, k, v
[B, H, T, Dh] the way CausalSelfAttention.forward does (rotary applied to q and k: what the cache holds).

Splicing: ``blocks.{l}.hook_attn_out`` (TransformerLens's name) is replaced by the attention recomputed from
the kept qkv output with k, v passed through a compression. The recomputation repeats the model's own
operations in the same order, so the exact K and V give back the model's output bit for bit (a test checks
it, and ``kv_claims`` checks it again on every run): a change of the model's attention shows up there
rather than as a silently wrong loss.

Errors after softmax (per layer, the layer's own input exact): the KL divergence between the exact and the
approximate attention distributions of each query (causal mask, nats), the share of queries whose most
attended key changes, and the relative error ‖ŷ − y‖ / ‖y‖ of the attention output (after the output
projection: what the block adds to the residual stream).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..model import GPT, CausalSelfAttention
from .kv_compress import KVFn


def split_heads(model: GPT, qkv_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's qkv output [B, T, 3D] -> q, k, v [B, H, T, Dh], rotary applied to q and k (positions from 0)."""
    T = qkv_out.size(1)
    rotary = (model.rope_cos[:T], model.rope_sin[:T]) if model.cfg.pos == "rope" else None
    return model.blocks[0].attn.split_heads(qkv_out, rotary)  # every layer splits alike


def attention_output(attn: CausalSelfAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The layer's attention output [B, T, D] from q, k, v [B, H, T, Dh], as CausalSelfAttention.forward
    computes it without a cache (in eval mode)."""
    B, _, T, _ = q.shape
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)  # [B, H, T, Dh]
    y = y.transpose(1, 2).contiguous().view(B, T, -1)
    return attn.resid_dropout(attn.proj(y))


@contextmanager
def recorded_qkv(model: GPT) -> Iterator[dict[int, torch.Tensor]]:
    """{layer: its qkv output [B, T, 3D]} of the latest forward pass in the with-block (replaced at each pass)."""
    kept: dict[int, torch.Tensor] = {}
    handles = [
        block.attn.qkv.register_forward_hook(lambda _m, _args, out, layer=layer: kept.__setitem__(layer, out))
        for layer, block in enumerate(model.blocks)
    ]
    try:
        yield kept
    finally:
        for h in handles:
            h.remove()


@contextmanager
def spliced_kv(model: GPT, compress: KVFn) -> Iterator[GPT]:
    """During the with-block every layer attends with compress(layer, k, v) instead of its own k, v."""
    with recorded_qkv(model) as kept:

        def splice(_attn_out: torch.Tensor, name: str) -> torch.Tensor:
            layer = int(name.split(".")[1])
            q, k, v = split_heads(model, kept.pop(layer))
            k_hat, v_hat = compress(layer, k, v)
            return attention_output(model.blocks[layer].attn, q, k_hat, v_hat)

        with model.hooks({f"blocks.{layer}.hook_attn_out": splice for layer in range(model.cfg.n_layer)}):
            yield model


@torch.no_grad()
def sequence_losses(model: GPT, windows: torch.Tensor, batch: int, compress: KVFn | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of each window [N, T+1] -> [N] float64, with the cache compressed
    by compress (None: the model as it is, no hooks)."""
    out = []
    for i in range(0, windows.size(0), batch):
        w = windows[i : i + batch].to(model.W_E.device)
        x, y = w[:, :-1], w[:, 1:]
        if compress is None:
            logits, _ = model(x)
        else:
            with spliced_kv(model, compress):
                logits, _ = model(x)
        ce = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none")  # [b, T]
        out.append(ce.double().mean(1).cpu())
    return torch.cat(out)


# ---- errors after softmax -----------------------------------------------------------------------


def attention_log_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """log softmax(q kᵀ / √Dh) under the causal mask, [B, H, T, T] float64 (-inf at future keys); the
    scores in the inputs' dtype, as the model computes them."""
    T, Dh = q.size(-2), q.size(-1)
    scores = (q @ k.transpose(-1, -2)).double() / math.sqrt(Dh)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).log_softmax(-1)


def attention_kl(logp: torch.Tensor, logp_hat: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ p̂) of each query's attention distribution, [...] from log-probabilities [..., S] (0 · log 0 = 0
    at masked keys)."""
    p = logp.exp()
    terms = torch.where(p > 0, p * (logp - logp_hat), torch.zeros_like(p))
    return terms.sum(-1)


@dataclass
class ExactAttention:
    """One chunk of sequences' exact attention in one layer, computed once and compared with every compression."""

    logp: torch.Tensor  # [B, H, T, T] float64 log-probabilities, -inf at future keys
    p: torch.Tensor  # [B, H, T, T] float64
    log_total: torch.Tensor  # [B, H, T] log Σ_j p_j (0 up to rounding; subtracted so that an unchanged K gives KL 0)
    top: torch.Tensor  # [B, H, T] the most attended key of each query
    y: torch.Tensor  # [B, T, D] the attention output


def exact_attention(attn: CausalSelfAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> ExactAttention:
    logp = attention_log_probs(q, k)
    return ExactAttention(logp, logp.exp(), logp.logsumexp(-1), logp.argmax(-1), attention_output(attn, q, k, v))


def kl_from_shift(
    exact: ExactAttention, q: torch.Tensor, k: torch.Tensor, k_hat: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(KL(p ‖ p̂) [B, H, T] float64, the most attended key under p̂ [B, H, T]) when K becomes k_hat.

    With δ = q (k̂ − k)ᵀ / √Dh the change of every score, p̂_j = p_j e^{δ_j} / Σ_i p_i e^{δ_i}, so
    KL(p ‖ p̂) = log Σ_j p_j e^{δ_j} − Σ_j p_j δ_j: one pass over δ, formed from the difference of the keys
    (no cancellation between two large scores), instead of two softmaxes."""
    delta = (q @ (k_hat - k).transpose(-1, -2)).double() / math.sqrt(q.size(-1))  # [B, H, T, T]
    z = exact.logp + delta  # log p̂ + a constant per query; -inf at future keys
    kl = z.logsumexp(-1) - exact.log_total - torch.linalg.vecdot(exact.p, delta)
    return kl.clamp(min=0.0), z.argmax(-1)


@dataclass
class AttentionErrors:
    """Running sums over chunks of sequences for one layer and one compression."""

    n_head: int
    kl_sum: torch.Tensor = field(init=False)  # [H] Σ KL over queries, nats
    flips: int = 0  # queries whose most attended key changed (over heads)
    queries: int = 0  # per head
    err_sq: float = 0.0  # Σ ‖ŷ − y‖²
    out_sq: float = 0.0  # Σ ‖y‖²
    key_err_sq: float = 0.0  # Σ ‖K̂ − K‖²
    key_sq: float = 0.0  # Σ ‖K‖²

    def __post_init__(self) -> None:
        self.kl_sum = torch.zeros(self.n_head, dtype=torch.float64)

    def add(self, exact: ExactAttention, q: torch.Tensor, k: torch.Tensor, k_hat: torch.Tensor, y_hat: torch.Tensor) -> None:
        """q, k, k_hat [B, H, T, Dh]; y_hat [B, T, D] the attention output with the compressed K and V."""
        kl, top = kl_from_shift(exact, q, k, k_hat)
        self.kl_sum += kl.sum(dim=(0, 2)).cpu()
        self.flips += int((top != exact.top).sum())
        self.queries += q.size(0) * q.size(2)
        self.err_sq += float(((y_hat.double() - exact.y.double()) ** 2).sum())
        self.out_sq += float((exact.y.double() ** 2).sum())
        self.key_err_sq += float(((k_hat.double() - k.double()) ** 2).sum())
        self.key_sq += float((k.double() ** 2).sum())

    @property
    def kl_heads(self) -> list[float]:
        """Mean KL over queries, per head (nats)."""
        return (self.kl_sum / max(self.queries, 1)).tolist()

    @property
    def flip_rate(self) -> float:
        return self.flips / max(self.queries * self.n_head, 1)

    @property
    def rel_error(self) -> float:
        """‖ŷ − y‖ / ‖y‖ of the attention output."""
        return math.sqrt(self.err_sq / self.out_sq) if self.out_sq > 0 else 0.0

    @property
    def key_error(self) -> float:
        """‖K̂ − K‖ / ‖K‖."""
        return math.sqrt(self.key_err_sq / self.key_sq) if self.key_sq > 0 else 0.0
