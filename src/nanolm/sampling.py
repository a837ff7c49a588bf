"""Completions of prompts from a trained run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .checkpoint import load_trained_model
from .errors import UserError


@dataclass
class Completion:
    prompt: str
    completion: str  # the generated text only
    unknown_words: list[str]  # prompt words outside the vocabulary, read as <unk>


def complete(run: str | Path, prompts: list[str], max_new_tokens: int = 20, temperature: float = 0.8,
             top_k: int | None = 20, seed: int = 0, device: str = "cpu") -> list[Completion]:
    """Sample a completion of each prompt; a word-level model stops at the end of the sentence."""
    model, tok, _ = load_trained_model(run, device)
    generator = torch.Generator(device=device).manual_seed(seed)
    out = []
    for prompt in prompts:
        # A word-level model read every training line after <eos>: start there, as the lens and the demo's
        # arithmetic check do (without it, "two plus two equals" reads as the middle of another line).
        start = [tok.eos_id] if tok.eos_id is not None else []
        ids = start + tok.encode(prompt)
        if not ids:
            ids = tok.encode("\n")[:1]  # start of a document
        if len(ids) > model.cfg.block_size:
            raise UserError(f"prompt of {len(ids)} tokens is longer than the model's context of "
                            f"{model.cfg.block_size}; shorten it")
        idx = torch.tensor([ids], device=device)
        full = model.generate(idx, max_new_tokens, temperature, top_k, generator, stop_token=tok.eos_id)
        new = full[0, len(ids):].tolist()
        if tok.eos_id is not None and tok.eos_id in new:
            new = new[: new.index(tok.eos_id)]
        text = tok.decode(new)
        sep = " " if tok.kind == "word" and prompt and text else ""
        out.append(Completion(prompt, sep + text, tok.unknown_words(prompt)))
    return out
