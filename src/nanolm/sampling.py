"""Completions of prompts from a trained run, written by nanolm's one sampler (nanolm.generate): common random
numbers (prompt i under seed s draws the same uniforms whatever the other prompts), the KV cache, and a
word-level model's <eos> as the end of the text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .checkpoint import load_trained_model
from .errors import UserError
from .generate import SampleRow, gpt_decoder, sample


@dataclass
class Completion:
    prompt: str
    completion: str  # the generated text only
    unknown_words: list[str]  # prompt words outside the vocabulary, read as <unk>


def complete(
    run: str | Path,
    prompts: list[str],
    max_new_tokens: int = 20,
    temperature: float = 0.8,
    top_k: int | None = 20,
    seed: int = 0,
    device: str = "cpu",
) -> list[Completion]:
    """Sample a completion of each prompt; a word-level model stops at the end of the sentence."""
    model, tok, _ = load_trained_model(run, device)
    ids = []
    for prompt in prompts:
        # A word-level model read every training line after <eos>: start there, as the lens and the demo's
        # arithmetic check do (without it, "two plus two equals" reads as the middle of another line).
        start = [tok.eos_id] if tok.eos_id is not None else []
        prompt_ids = start + tok.encode(prompt)
        if not prompt_ids:
            prompt_ids = tok.encode("\n")[:1]  # start of a document
        if len(prompt_ids) > model.cfg.block_size:
            raise UserError(
                f"prompt of {len(prompt_ids)} tokens is longer than the model's context of {model.cfg.block_size}; shorten it"
            )
        ids.append(prompt_ids)
    rows = [SampleRow(i, seed) for i in range(len(prompts))]
    new = sample(ids, rows, gpt_decoder(model), max_new_tokens, temperature, top_k, tok.eos_id, device)
    out = []
    for prompt, text_ids in zip(prompts, new):
        text = tok.decode(text_ids)
        sep = " " if tok.kind == "word" and prompt and text else ""
        out.append(Completion(prompt, sep + text, tok.unknown_words(prompt)))
    return out
