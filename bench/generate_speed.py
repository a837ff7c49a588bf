"""Greedy generation speed with and without the key/value cache.

Builds nanolm at a preset with random weights and a fixed vocabulary, and times one greedy generate of
--new-tokens tokens from a --prompt-tokens prompt with use_cache=True and one with use_cache=False (after a
short warm-up generate of each). The defaults, a 1-token prompt and 255 new tokens at the small preset
(block_size 256), keep the whole sequence inside the context, so both paths produce the same tokens and the
uncached one never slides its window: it runs the forward over 1, 2, ..., 255 positions, the cached one over
the prompt once and then one position a step. It checks that the two outputs agree, and prints tokens/s of
each and their ratio.

    python bench/generate_speed.py [--preset small] [--prompt-tokens 1] [--new-tokens 255] [--batch-size 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from nanolm.model import GPT, preset_config


def generate_time(model: GPT, idx: torch.Tensor, new_tokens: int, use_cache: bool) -> tuple[float, torch.Tensor]:
    """Seconds for one greedy generate of new_tokens tokens after idx, and its output."""
    start = time.perf_counter()
    out = model.generate(idx, new_tokens, temperature=0, use_cache=use_cache)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=255)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT(preset_config(args.preset, vocab_size=args.vocab_size)).eval()
    idx = torch.randint(0, args.vocab_size, (args.batch_size, args.prompt_tokens))
    total = args.prompt_tokens + args.new_tokens
    for use_cache in (True, False):  # warm-up
        generate_time(model, idx, 4, use_cache)
    cached, out_cached = generate_time(model, idx, args.new_tokens, use_cache=True)
    plain, out_plain = generate_time(model, idx, args.new_tokens, use_cache=False)
    new = args.batch_size * args.new_tokens
    print(f"preset {args.preset}, batch {args.batch_size}, prompt {args.prompt_tokens} + {args.new_tokens} new tokens "
          f"(block_size {model.cfg.block_size}{', the window slides' if total > model.cfg.block_size else ''}), "
          f"vocab {args.vocab_size}, {torch.get_num_threads()} threads, greedy")
    print(f"{'':12} {'tokens/s':>10} {'ms/token':>9} {'total s':>8}")
    for label, seconds in (("KV cache", cached), ("no cache", plain)):
        print(f"{label:12} {new / seconds:>10,.0f} {seconds / args.new_tokens * 1e3:>9.2f} {seconds:>8.2f}")
    print(f"ratio cached/uncached: {plain / cached:.1f}x; same tokens: {torch.equal(out_cached, out_plain)}")


if __name__ == "__main__":
    main()
