"""Generation from a ModelView (a nanolm run or a Hugging Face model), steered or not: the sampler of
``nanolm.generate`` (common random numbers, batches of equal-length prompts, the KV cache) with the view's own
decoding and stop token, and steering vectors added per row while it runs.

Steering. Each row carries a Setting: α·v̂ added at one hook, at every position: the start token, the prompt
and each generated token, with the KV cache or without it. With the cache the prompt's positions are steered
once, when they are first computed, and each step steers its one new position, so cached and uncached
generation see the same edited activations (steering-vectors #60 edited by token index, which breaks when a
cached step has length 1; CAA #3 left the first generated token unsteered; the tests compare both ways). A row
steered and the unsteered row of the same prompt and seed use the same uniforms, so at α = 0 they are the same
text, and a difference between them is the steering's, not the sampler's.

Where a model ends a text, and how ids become text, are its tokenizer's (``eos_id``, ``decode``: the protocol
of ``nanolm.tokenizers.TokenizerLike``, which nanolm's tokenizers and the view's Hugging Face wrapper follow)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..errors import UserError
from ..generate import GPTDecoder, sample
from .view import ModelView


@dataclass(frozen=True)
class Setting:
    """One steering setting: α·v̂ added at hook (hook None: no steering)."""

    hook: str | None
    alpha: float


UNSTEERED = Setting(None, 0.0)


@contextmanager
def steered(view: ModelView, vectors: dict[str, torch.Tensor], settings: Sequence[Setting]) -> Iterator[None]:
    """During the with-block, row b of every batch gets α_b·v̂ added at its setting's hook, at every position.

    vectors: {hook: v̂ [D]}; settings: one per batch row. Rows without steering (α = 0 or hook None) are left
    exactly as they are: a hook adds only where some row's coefficient is non-zero."""
    fns = {}
    for hook, v in vectors.items():
        coef = torch.tensor([s.alpha if s.hook == hook else 0.0 for s in settings], device=v.device)
        if bool((coef != 0).any()):
            add = coef[:, None, None] * v[None, None, :]  # [B, 1, D]: the same at every position

            def fn(x: torch.Tensor, add: torch.Tensor = add) -> torch.Tensor:
                return x + add.to(x.dtype)

            fns[hook] = fn
    with view.hooks(fns):
        yield


@dataclass(frozen=True)
class GenRow:
    """One generated text: prompt number, sampling seed, steering setting."""

    prompt: int
    seed: int
    setting: Setting


def check_sampling(temperature: float, top_k: int | None) -> None:
    """A UserError unless temperature is a finite number ≥ 0 (0: greedy) and top_k is None or ≥ 1."""
    if not math.isfinite(temperature) or temperature < 0:
        raise UserError(f"--temperature must be ≥ 0 (0: greedy), got {temperature}")
    if top_k is not None and top_k < 1:
        raise UserError(f"--top-k must be ≥ 1, got {top_k}")


class ViewDecoder:
    """Next-token logits step by step for a view: nanolm's GPT through nanolm.generate.GPTDecoder; a Hugging Face
    model with its own past_key_values (the prompt once, then one new position per step) or, without the cache,
    the whole sequence every step."""

    def __init__(self, view: ModelView, use_cache: bool) -> None:
        self.view, self.use_cache = view, use_cache
        self.gpt = GPTDecoder(view.model, use_cache) if view.arch == "nanolm" else None
        self.cache = None

    def first(self, idx: torch.Tensor) -> torch.Tensor:
        """idx [B, T] -> logits [B, V] (float32) for the token after it."""
        if self.gpt is not None:
            return self.gpt.first(idx)
        if not self.use_cache:
            return self.view.logits(idx)[:, -1].float()
        out = self.view.model(input_ids=idx, use_cache=True)
        self.cache = _hf_cache(out)
        return out.logits[:, -1].float()

    def next(self, idx: torch.Tensor) -> torch.Tensor:
        """idx [B, T + 1], the last column new -> logits [B, V] for the token after it."""
        if self.gpt is not None:
            return self.gpt.next(idx)
        if not self.use_cache:
            return self.view.logits(idx)[:, -1].float()
        out = self.view.model(input_ids=idx[:, -1:], use_cache=True, **{_hf_cache_arg(self.view.model): self.cache})
        self.cache = _hf_cache(out)
        return out.logits[:, -1].float()


def _hf_cache_arg(model) -> str:
    """The name a Hugging Face model's forward takes its cache under: "cache" from transformers 5.2x on,
    "past_key_values" before (still accepted there, with a deprecation warning)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _hf_cache(out):
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


def stop_token(view: ModelView) -> int | None:
    """The token that ends a text: nanolm's <eos>, a Hugging Face tokenizer's eos token; None without a tokenizer."""
    return view.tokenizer.eos_id if view.tokenizer is not None else None


def decode(view: ModelView, ids: Sequence[int]) -> str:
    """The text of token ids, as the view's tokenizer writes it (without one: the ids, space-separated)."""
    if view.tokenizer is None:
        return " ".join(view.token_str(i) for i in ids)
    return view.tokenizer.decode(list(ids))


def generate(
    view: ModelView,
    prompts: Sequence[Sequence[int]],
    rows: Sequence[GenRow],
    vectors: dict[str, torch.Tensor],
    max_new_tokens: int,
    temperature: float = 0.8,
    top_k: int | None = 20,
    use_cache: bool = True,
    batch_size: int = 64,
) -> list[list[int]]:
    """The generated token ids of each row (after its prompt, cut before the stop token), steered as the row says.

    prompts: token ids (start token included). Rows whose prompts have the same length run together, batch_size
    at a time (no padding, so nothing to mask), one forward pass per step for the whole batch."""
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    longest = max(len(prompts[r.prompt]) for r in rows)
    if longest + max_new_tokens > view.max_len:
        raise UserError(
            f"a prompt of {longest} tokens + {max_new_tokens} new ones exceeds the model's context of "
            f"{view.max_len}; lower --max-new-tokens to {max(view.max_len - longest, 0)} or shorten the prompt"
        )

    @contextmanager
    def open_decoder(batch: list[GenRow]) -> Iterator[ViewDecoder]:
        with steered(view, vectors, [r.setting for r in batch]):
            yield ViewDecoder(view, use_cache)

    return sample(prompts, rows, open_decoder, max_new_tokens, temperature, top_k, stop_token(view), view.device, batch_size)
