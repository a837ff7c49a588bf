"""Activations of a model over many texts, read in one place for every tool (probes, interventions,
sparse autoencoders, steering, evaluations), the same for nanolm and Hugging Face views.

Texts are tokenized by the view (after its start-of-document token, if it has one), right-padded
into batches of ``batch_size`` and run once per batch with a cache of the requested hook points.
The models are causal, so a valid position never sees the padding after it; the padding's own
positions are dropped by the pooling below and never reach a caller.

Pooling per text:
- ``"last"``: the activation at the text's last token, [N, D];
- ``"mean"``: the mean over the text's tokens (padding excluded), [N, D];
- ``"all"``: every position, [N, T, D] zero-padded to the longest text, with a mask [N, T].

For sparse-autoencoder training ``iter_token_activations`` yields every valid token's activation
batch by batch, and ``token_activations`` gathers them all into one [M, D] matrix.

Activations come back as float32 tensors, on the CPU unless said otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ..errors import UserError
from .view import ModelView

Pool = Literal["last", "mean", "all"]
POOLS: tuple[str, ...] = ("last", "mean", "all")
Texts = Sequence[str] | Sequence[Sequence[int]]  # texts, or token ids already (used as they are)


# ---- tokens and batches ------------------------------------------------------------------------


def tokenize_texts(view: ModelView, texts: Sequence[str], prepend_bos: bool = True) -> list[list[int]]:
    """Each text's token ids (after the view's start token, if any); a UserError naming the first
    text that is empty or longer than the model's context."""
    out = []
    for i, text in enumerate(texts, start=1):
        try:
            out.append(view.to_tokens(text, prepend_bos)[0].tolist())
        except UserError as e:
            short = text if len(text) <= 40 else text[:37] + "..."
            raise UserError(f"text #{i} ({short!r}): {e}") from None
    return out


def as_token_ids(view: ModelView, texts: Texts) -> list[list[int]]:
    """Texts tokenized by the view, or lists of token ids copied as they are."""
    if all(isinstance(t, str) for t in texts):
        return tokenize_texts(view, texts)  # type: ignore[arg-type]
    if any(isinstance(t, str) for t in texts):
        raise TypeError("give texts or token-id lists, not a mix of both")
    ids = [[int(i) for i in t] for t in texts]
    for k, t in enumerate(ids, start=1):
        if not t or len(t) > view.max_len:
            raise UserError(f"text #{k} is {len(t)} tokens; give 1 to {view.max_len} (the model's context)")
    return ids


def pad_batch(batch: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [B, T] long, right-padded with 0; lengths [B] long), T the longest sequence of the batch."""
    T = max(len(ids) for ids in batch)
    x = torch.zeros(len(batch), T, dtype=torch.long)
    for i, ids in enumerate(batch):
        x[i, : len(ids)] = torch.as_tensor(list(ids), dtype=torch.long)
    return x.to(device), torch.tensor([len(ids) for ids in batch], device=device)


def valid_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """[B, T] bool: True at each sequence's own tokens, False at its padding."""
    return torch.arange(T, device=lengths.device)[None] < lengths[:, None]


@dataclass
class Batch:
    """One right-padded batch of sequences, texts start .. start + B - 1 of the input."""

    ids: torch.Tensor  # [B, T] long, on the model's device
    lengths: torch.Tensor  # [B] long
    start: int  # index of the batch's first sequence in the input

    @property
    def mask(self) -> torch.Tensor:
        """[B, T] bool, True at valid (non-padding) positions."""
        return valid_mask(self.lengths, self.ids.shape[1])

    @property
    def last(self) -> torch.Tensor:
        """[B] long: the position of each sequence's last token."""
        return self.lengths - 1


def iter_batches(ids: Sequence[Sequence[int]], batch_size: int, device: torch.device | str) -> Iterator[Batch]:
    """ids in order, batch_size sequences at a time, right-padded."""
    if batch_size <= 0:
        raise UserError(f"batch size must be > 0, got {batch_size}")
    for start in range(0, len(ids), batch_size):
        x, lengths = pad_batch(ids[start : start + batch_size], device)
        yield Batch(x, lengths, start)


# ---- pooled activations ------------------------------------------------------------------------


@dataclass
class Activations:
    """Activations of N texts at some hook points, pooled per text.

    acts[name] is float32 on the CPU: [N, D] for pool "last" and "mean"; [N, T, D] for pool "all",
    T the longest text in tokens, zero where mask is False."""

    pool: str
    acts: dict[str, torch.Tensor]  # hook name -> [N, D] or [N, T, D]
    lengths: torch.Tensor  # [N] long: each text's length in tokens (start token included)
    last_token: torch.Tensor  # [N] long: the token id at each text's last position (its "word type")
    mask: torch.Tensor | None = None  # [N, T] bool for pool "all": True at the text's own tokens

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.acts[name]

    @property
    def names(self) -> list[str]:
        return list(self.acts)


def _batched(a: torch.Tensor, B: int) -> torch.Tensor:
    """An activation the same for every text has no batch axis (nanolm's hook_pos_embed is [T, D]): [B, T, D]."""
    return a.expand(B, *a.shape) if a.ndim == 2 else a


def _pool(a: torch.Tensor, batch: Batch, pool: str) -> torch.Tensor:
    """[B, T, D] (or [T, D]) -> [B, D] ("last", "mean") or [B, T, D] with the padding zeroed ("all")."""
    a = _batched(a, len(batch.lengths))
    valid = batch.mask.float()  # [B, T]
    if pool == "last":
        return a[torch.arange(len(batch.lengths), device=a.device), batch.last]
    if pool == "mean":
        return (a * valid[..., None]).sum(1) / batch.lengths[:, None]
    return a * valid[..., None]


def _pad_to(a: torch.Tensor, T: int) -> torch.Tensor:
    """[B, t, ...] -> [B, T, ...], zeros after t."""
    return (
        torch.nn.functional.pad(a, (0, 0, 0, T - a.shape[1])) if a.ndim == 3 else torch.nn.functional.pad(a, (0, T - a.shape[1]))
    )


@torch.no_grad()
def collect(view: ModelView, texts: Texts, names: Sequence[str], pool: Pool = "last", batch_size: int = 64) -> Activations:
    """The activations of texts (strings, or token-id lists) at hook names, pooled per text.

    One forward pass per batch of batch_size texts, caching only names. A UserError for an unknown
    pool or hook name, or a text that is empty or longer than the model's context."""
    if pool not in POOLS:
        raise UserError(f"pooling {pool!r}: give one of {', '.join(POOLS)}")
    ids = as_token_ids(view, texts)
    if not ids:
        raise UserError("no texts to read activations from")
    names = list(dict.fromkeys(names))
    out: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    last_tokens, lengths, masks = [], [], []
    for batch in iter_batches(ids, batch_size, view.device):
        _, cache = view.run_with_cache(batch.ids, names)
        rows = torch.arange(len(batch.lengths), device=batch.ids.device)
        last_tokens.append(batch.ids[rows, batch.last].cpu())
        lengths.append(batch.lengths.cpu())
        if pool == "all":
            masks.append(batch.mask.cpu())
        for name in names:
            out[name].append(_pool(cache[name].float(), batch, pool).cpu())
    T = max(len(t) for t in ids)
    if pool == "all":
        out = {name: [_pad_to(a, T) for a in parts] for name, parts in out.items()}
    mask = torch.cat([_pad_to(m, T) for m in masks]) if pool == "all" else None
    return Activations(
        pool, {name: torch.cat(parts) for name, parts in out.items()}, torch.cat(lengths), torch.cat(last_tokens), mask
    )


# ---- every token ---------------------------------------------------------------------------------


@dataclass
class TokenBatch:
    """The valid tokens of one batch of texts, text by text, position by position."""

    acts: torch.Tensor  # [M, D] float32: each valid token's activation (padding dropped)
    text: torch.Tensor  # [M] long: the index of the token's text in the input
    position: torch.Tensor  # [M] long: the token's position in its text (0 = first token)


@torch.no_grad()
def iter_token_activations(view: ModelView, texts: Texts, name: str, batch_size: int = 64) -> Iterator[TokenBatch]:
    """Every valid token's activation at hook name, one TokenBatch per batch of texts; the tensors
    stay on the model's device (an SAE trained there reads them without a copy)."""
    ids = as_token_ids(view, texts)
    if not ids:
        raise UserError("no texts to read activations from")
    for batch in iter_batches(ids, batch_size, view.device):
        _, cache = view.run_with_cache(batch.ids, [name])
        valid = batch.mask  # [B, T]
        B, T = valid.shape
        text = torch.arange(B, device=valid.device)[:, None].expand(B, T) + batch.start
        position = torch.arange(T, device=valid.device)[None].expand(B, T)
        yield TokenBatch(_batched(cache[name].float(), B)[valid], text[valid], position[valid])


@dataclass
class TokenActivations:
    """Every valid token of N texts at one hook point, texts in order, positions in order."""

    acts: torch.Tensor  # [M, D] float32 on the CPU, M = lengths.sum()
    text: torch.Tensor  # [M] long: each row's text index
    position: torch.Tensor  # [M] long: each row's position in its text
    lengths: torch.Tensor  # [N] long

    def last(self) -> torch.Tensor:
        """[N, D]: each text's last-token activation."""
        return self.acts[torch.cumsum(self.lengths, 0) - 1]


def token_activations(view: ModelView, texts: Texts, name: str, batch_size: int = 64) -> TokenActivations:
    """All of iter_token_activations gathered on the CPU."""
    parts = [(b.acts.cpu(), b.text.cpu(), b.position.cpu()) for b in iter_token_activations(view, texts, name, batch_size)]
    acts, text, position = (torch.cat(x) for x in zip(*parts))
    return TokenActivations(acts, text, position, torch.bincount(text, minlength=len(texts)))
