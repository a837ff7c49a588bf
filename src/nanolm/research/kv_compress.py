"""KV-cache compressions, and the bytes each one stores, so that they can be compared at equal memory.

Three families, each a function of one layer's keys and values k, v [B, H, T, Dh] (after rotary: what a
KV cache holds) returning the k̂, v̂ that attention then uses:

- low rank (the "LowKV" of the reference): k and v each projected on the top r right singular vectors of
  that layer and head's matrix over the recorded tokens [N, Dh], i.e. the rank-r truncated SVD, the best
  rank-r approximation in the Frobenius norm (Eckart–Young–Mirsky);
- quantization (KIVI, Liu et al. 2024; KVQuant, Hooper et al. 2024): min-max b-bit codes, keys per channel
  (one scale and zero point per channel for each group of KEY_GROUP_TOKENS tokens), values per token (one
  scale and zero point per token and head);
- grouped heads (GQA, Ainslie et al. 2023): each group of g adjacent heads shares the mean of their keys
  and values, as GQA's conversion of a trained model does, without its uptraining.

Bytes per token per layer, s being the bytes of one number in the model's dtype (H heads, Dh head size):

    full            2·H·Dh·s
    rank r          2·H·r·s       (r coefficients per head for K and for V), plus a fixed 2·H·Dh·r·s per layer:
                                  the two bases [Dh, r] per head, shared by every context (weights, not cache)
    b-bit           2·H·Dh·b/8    (the codes) + 2·H·Dh·s/G (K: scale and zero per channel per G tokens)
                                  + 2·H·s (V: scale and zero per token and head)
    groups of g     2·(H/g)·Dh·s

Spectra come from the Gram matrix: the right singular vectors and squared singular values σ² of a
matrix X [N, Dh] are the eigenvectors and eigenvalues of XᵀX [Dh, Dh]. In float64 that costs N·Dh²
instead of an SVD of the tall matrix, and the energy needs σ² itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..errors import UserError

SUPPORTED_BITS = (2, 4, 8)
KEY_GROUP_TOKENS = 32  # KIVI's group size: keys get one scale and zero point per channel per 32 tokens
ENERGY_LEVELS = (0.70, 0.90, 0.99)  # the energies whose rank the report gives

FAMILIES = {"rank": "low rank", "quant": "quantization", "groups": "grouped heads"}

# fn(layer, k, v) -> (k̂, v̂), all [B, H, T, Dh]
KVFn = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Compression:
    """One compression: family "rank" (param r), "quant" (param bits) or "groups" (param g); "exact" stores
    the cache as it is. "rank_k" (param r) truncates K alone and keeps V exact: the reference's question (1),
    what a rank-r K does after softmax, with nothing else changed."""

    family: str
    param: int = 0

    @property
    def label(self) -> str:
        return {
            "rank": f"rank {self.param}",
            "rank_k": f"rank {self.param}, K only",
            "quant": f"int{self.param}",
            "groups": f"groups of {self.param}",
            "exact": "exact",
        }[self.family]


@dataclass(frozen=True)
class CacheShape:
    """What one layer's cache holds per token: H heads of Dh numbers for K and for V, s bytes each."""

    n_head: int
    d_head: int
    dtype_bytes: int
    key_group: int = KEY_GROUP_TOKENS

    def full_bytes(self) -> int:
        """Bytes per token per layer of the uncompressed K and V."""
        return 2 * self.n_head * self.d_head * self.dtype_bytes

    def bytes_per_token(self, c: Compression) -> float:
        """Bytes per token per layer that compression c stores (the formulas of the module docstring)."""
        H, Dh, s = self.n_head, self.d_head, self.dtype_bytes
        if c.family == "exact":
            return float(self.full_bytes())
        if c.family == "rank":
            return float(2 * H * c.param * s)
        if c.family == "rank_k":
            return float(H * c.param * s + H * Dh * s)
        if c.family == "quant":
            codes = 2 * H * Dh * c.param / 8
            return codes + 2 * H * Dh * s / self.key_group + 2 * H * s
        if c.family == "groups":
            return float(2 * (H // c.param) * Dh * s)
        raise ValueError(f"unknown compression family {c.family!r}")

    def fixed_bytes(self, c: Compression) -> int:
        """Bytes per layer stored once, whatever the context length: the rank method's two bases."""
        bases = {"rank": 2, "rank_k": 1}.get(c.family, 0)
        return bases * self.n_head * self.d_head * c.param * self.dtype_bytes

    def ratio(self, c: Compression) -> float:
        """How many times smaller than the full cache (per token)."""
        return self.full_bytes() / self.bytes_per_token(c)

    def matching_rank(self, budget: float) -> int:
        """The largest rank whose bytes per token fit in budget (0 when even rank 1 does not)."""
        return min(self.d_head, int(budget // (2 * self.n_head * self.dtype_bytes)))


def check_compressions(
    n_head: int, d_head: int, ranks: Sequence[int], bits: Sequence[int], groups: Sequence[int]
) -> list[Compression]:
    """The compressions asked for, once each is valid for a model of n_head heads of size d_head; a UserError
    names the first that is not."""
    if not (ranks or bits or groups):
        raise UserError("nothing to measure: --ranks, --bits and --groups are all empty; give at least one of them")
    for r in ranks:
        if not 1 <= r <= d_head:
            raise UserError(
                f"--ranks {r}: a rank must be from 1 to the head size {d_head} (d_model / n_head); "
                f"e.g. --ranks {','.join(str(x) for x in default_ranks(d_head))}"
            )
    for b in bits:
        if b not in SUPPORTED_BITS:
            raise UserError(f"--bits {b}: supported bit widths are {', '.join(map(str, SUPPORTED_BITS))}")
    for g in groups:
        if g < 2 or n_head % g:
            ok = ", ".join(map(str, default_groups(n_head))) or "none: the model has one head"
            raise UserError(f"--groups {g}: a group size must be at least 2 and divide the {n_head} heads; here: {ok}")
    comps = [Compression("rank", r) for r in sorted(set(ranks))]
    comps += [Compression("quant", b) for b in sorted(set(bits), reverse=True)]
    return comps + [Compression("groups", g) for g in sorted(set(groups))]


def default_ranks(d_head: int) -> list[int]:
    """4, 8, 16, 32 where they fit in the head."""
    return [r for r in (4, 8, 16, 32) if r <= d_head] or [1]


def default_groups(n_head: int) -> list[int]:
    """Every group size that divides the heads, from 2 to all of them (one shared head: MQA)."""
    return [g for g in range(2, n_head + 1) if n_head % g == 0]


# ---- spectra ------------------------------------------------------------------------------------


def gram(x: torch.Tensor) -> torch.Tensor:
    """x [..., N, Dh] -> xᵀx [..., Dh, Dh] in float64."""
    x = x.double()
    return x.transpose(-1, -2) @ x


def spectrum(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(σ² [..., Dh] in descending order, right singular vectors [..., Dh, Dh] as columns in that order) of
    the matrices whose Gram matrices are g [..., Dh, Dh] (float64; batched over heads)."""
    evals, evecs = torch.linalg.eigh(g.double())  # ascending
    return evals.flip(-1).clamp(min=0.0), evecs.flip(-1)


def energy_kept(sigma2: torch.Tensor, ranks: Sequence[int]) -> torch.Tensor:
    """Σ_{i≤r} σᵢ² / Σ σᵢ² for each r in ranks: [..., len(ranks)] (1 for an all-zero matrix: nothing to lose)."""
    total = sigma2.sum(-1, keepdim=True)
    cum = sigma2.cumsum(-1)
    kept = cum[..., [r - 1 for r in ranks]] / total.clamp(min=torch.finfo(sigma2.dtype).tiny)
    return torch.where(total > 0, kept, torch.ones_like(kept))


def rank_needed(sigma2: torch.Tensor, fraction: float) -> torch.Tensor:
    """The smallest rank r whose energy kept is at least fraction: [...] long (up to float64 rounding: a
    matrix built to keep exactly 70% at rank 16 needs rank 16 for 70%)."""
    total = sigma2.sum(-1, keepdim=True)
    frac = sigma2.cumsum(-1) / total.clamp(min=torch.finfo(sigma2.dtype).tiny)
    reached = frac >= fraction - 1e-12
    first = reached.long().argmax(-1) + 1
    return torch.where(total[..., 0] > 0, first, torch.zeros_like(first))


def projectors(basis: torch.Tensor, rank: int, dtype: torch.dtype) -> torch.Tensor:
    """B_r B_rᵀ [..., Dh, Dh] in dtype: the projection on the top-r right singular vectors (basis [..., Dh, Dh],
    columns in descending order). x @ B_r B_rᵀ is x's rank-r truncated SVD."""
    b = basis[..., :rank]
    return (b @ b.transpose(-1, -2)).to(dtype)


# ---- quantization -------------------------------------------------------------------------------


def quantize_dequantize(x: torch.Tensor, bits: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x̂, scale): x rounded to 2^bits levels between its min and max along dim (one scale and zero point per
    slice), and back. |x − x̂| ≤ scale / 2 (up to float rounding); scale has dim kept as size 1."""
    lo, hi = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    levels = 2**bits - 1
    scale = (hi - lo) / levels
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant slice: every code 0, x̂ = lo = x
    codes = torch.clamp(torch.round((x - lo) / safe), 0, levels)
    return codes * safe + lo, scale


def quantize_keys(k: torch.Tensor, bits: int, group: int = KEY_GROUP_TOKENS) -> torch.Tensor:
    """k [B, H, T, Dh] quantized per channel: one scale and zero point per channel for each group of `group`
    tokens (the last group may be shorter)."""
    B, H, T, Dh = k.shape
    n_groups = -(-T // group)
    pad = n_groups * group - T
    if pad:  # repeat the last token: a value already in the group changes neither its min nor its max
        k = torch.cat([k, k[:, :, -1:].expand(B, H, pad, Dh)], dim=2)
    k_hat, _ = quantize_dequantize(k.view(B, H, n_groups, group, Dh), bits, dim=3)
    return k_hat.view(B, H, n_groups * group, Dh)[:, :, :T]


def quantize_values(v: torch.Tensor, bits: int) -> torch.Tensor:
    """v [B, H, T, Dh] quantized per token: one scale and zero point per token and head."""
    return quantize_dequantize(v, bits, dim=-1)[0]


def share_heads(x: torch.Tensor, g: int) -> torch.Tensor:
    """x [B, H, T, Dh] with each group of g adjacent heads replaced by their mean (GQA's mean pooling)."""
    B, H, T, Dh = x.shape
    return x.view(B, H // g, g, T, Dh).mean(2, keepdim=True).expand(B, H // g, g, T, Dh).reshape(B, H, T, Dh)


def compressor(c: Compression, key_proj: torch.Tensor | None = None, value_proj: torch.Tensor | None = None) -> KVFn:
    """The fn(layer, k, v) -> (k̂, v̂) of compression c. A rank compression needs key_proj and value_proj
    [L, H, Dh, Dh]: each layer's and head's projection (see projectors)."""
    if c.family == "exact":
        return lambda _layer, k, v: (k, v)
    if c.family == "rank":
        if key_proj is None or value_proj is None:
            raise ValueError("a rank compression needs the projections of each layer")
        return lambda layer, k, v: (k @ key_proj[layer], v @ value_proj[layer])
    if c.family == "rank_k":
        if key_proj is None:
            raise ValueError("a rank compression needs the projections of each layer")
        return lambda layer, k, v: (k @ key_proj[layer], v)
    if c.family == "quant":
        return lambda _layer, k, v: (quantize_keys(k, c.param), quantize_values(v, c.param))
    if c.family == "groups":
        return lambda _layer, k, v: (share_heads(k, c.param), share_heads(v, c.param))
    raise ValueError(f"unknown compression family {c.family!r}")
