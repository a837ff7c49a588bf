"""Generation: the one sampler behind every command that writes text (``nanolm sample``, ``steer``, the
sycophancy and AI-feedback tools), batched, with nanolm's KV cache.

Common random numbers. Row r (prompt i, seed s) draws its uniforms u_1, u_2, ... from a generator seeded with
s·1000003 + i (``row_uniforms``) and takes the first token whose cumulative probability exceeds u_t
(``nanolm.model.draw``, inverse-CDF sampling). Two rows of the same prompt and seed use the same u, so they
write the same text unless something else differs (a steering vector, another model), and a row's text does
not depend on which rows share its batch. Temperature 0 is greedy (argmax).

Batching. Rows whose prompts have the same length run together, ``batch_size`` at a time (no padding, so
nothing to mask), one forward pass per step for the whole batch; a batch stops once every row has written the
stop token, and each row's text is cut before it.

The forward passes are a ``Decoder``'s: ``GPTDecoder`` for nanolm's GPT (the prompt once, then one position a
step against the cache; past the context the window slides and is recomputed); ``nanolm.interp.generate``
adds a Hugging Face model's cache and steering hooks. This module sits among the core parts, below the
domain packages, so that ``nanolm.sampling`` may use it as well as interp and alignment."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from .model import GPT, draw

CRN_STRIDE = 1_000_003  # seed s, prompt i -> generator seed s * CRN_STRIDE + i


def row_uniforms(seed: int, prompt_index: int, n: int) -> torch.Tensor:
    """The n uniforms [n] of prompt prompt_index's rows under seed (common random numbers); the generator's seed
    is taken modulo 2^64, the most torch accepts."""
    g = torch.Generator().manual_seed((seed * CRN_STRIDE + prompt_index) % 2**64)
    return torch.rand(n, generator=g)


class Decoder(Protocol):
    """Next-token logits step by step for one batch of rows."""

    def first(self, idx: torch.Tensor) -> torch.Tensor:
        """idx [B, T], the prompts -> logits [B, V] (float32) for the token after them."""
        ...

    def next(self, idx: torch.Tensor) -> torch.Tensor:
        """idx [B, T + t], the last column new -> logits [B, V] (float32) for the token after it."""
        ...


class GPTDecoder:
    """nanolm's GPT: with the KV cache, the prompt is run once and then one new position per step (past
    block_size the window slides and the cropped window is recomputed: GPT.next_token_logits); without it,
    the whole sequence every step."""

    def __init__(self, model: GPT, use_cache: bool = True) -> None:
        self.model = model
        self.cache = model.new_kv_cache() if use_cache else None

    def first(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.next_token_logits(idx, self.cache)

    def next(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.next_token_logits(idx, self.cache)


class Row(Protocol):
    """What the sampler reads of a row: its prompt's number and its sampling seed."""

    @property
    def prompt(self) -> int: ...

    @property
    def seed(self) -> int: ...


@dataclass(frozen=True)
class SampleRow:
    """One text to write: prompt number, sampling seed."""

    prompt: int
    seed: int


# the rows of one batch -> a context manager whose value is the Decoder that runs them (hooks stay on inside it)
OpenDecoder = Callable[[list], contextlib.AbstractContextManager[Decoder]]


def gpt_decoder(model: GPT, use_cache: bool = True) -> OpenDecoder:
    """The OpenDecoder of a plain nanolm GPT: a fresh GPTDecoder for each batch, nothing around it."""
    return lambda rows: contextlib.nullcontext(GPTDecoder(model, use_cache))


@torch.no_grad()
def sample(
    prompts: Sequence[Sequence[int]],
    rows: Sequence[Row],
    open_decoder: OpenDecoder,
    max_new_tokens: int,
    temperature: float = 0.8,
    top_k: int | None = 20,
    stop: int | None = None,
    device: torch.device | str = "cpu",
    batch_size: int = 64,
) -> list[list[int]]:
    """The generated token ids of each row (after its prompt, cut before the stop token).

    prompts: token ids (start token included); rows: which prompt and seed each text is written from.
    open_decoder(batch rows) gives the Decoder of one batch, as a context manager (steering keeps its
    hooks on inside it)."""
    order = sorted(range(len(rows)), key=lambda i: len(prompts[rows[i].prompt]))
    out: list[list[int]] = [[] for _ in rows]
    start = 0
    while start < len(order):
        T = len(prompts[rows[order[start]].prompt])
        chunk = [i for i in order[start : start + batch_size] if len(prompts[rows[i].prompt]) == T]
        start += len(chunk)
        batch = [rows[i] for i in chunk]
        with open_decoder(batch) as decoder:
            new = _sample_batch(
                decoder, [prompts[r.prompt] for r in batch], batch, max_new_tokens, temperature, top_k, stop, device
            )
        for i, ids in zip(chunk, new):
            out[i] = ids
    return out


def _sample_batch(
    decoder: Decoder,
    prompts: list[Sequence[int]],
    rows: list[Row],
    max_new: int,
    temperature: float,
    top_k: int | None,
    stop: int | None,
    device: torch.device | str,
) -> list[list[int]]:
    """One batch of rows whose prompts have the same length: the new ids of each, cut before the stop token."""
    idx = torch.tensor([list(p) for p in prompts], device=device)  # [B, T], all the same length
    u = torch.stack([row_uniforms(r.seed, r.prompt, max_new) for r in rows]).to(device)  # [B, max_new]
    done = torch.zeros(len(rows), dtype=torch.bool, device=device)
    logits = decoder.first(idx) if max_new > 0 else None
    for t in range(max_new):
        nxt = draw(logits, u[:, t], temperature, top_k)
        idx = torch.cat((idx, nxt[:, None]), dim=1)
        if stop is not None:
            done |= nxt == stop
            if bool(done.all()):
                break
        if t + 1 < max_new:
            logits = decoder.next(idx)
    T = len(prompts[0])
    return [row[: row.index(stop)] if stop is not None and stop in row else row for row in idx[:, T:].tolist()]
