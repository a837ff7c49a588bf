"""A steering sweep with the KV cache and batched prompts, against the same sweep without either.

Builds nanolm at the `small` preset with random weights (no download, no training: the speed does not depend on
what the weights say) and the corpus's word tokenizer, then runs `nanolm steer sweep`'s library function on the
sentiment direction over a 4 layers × 6 α grid × 3 seeds × 32 prompts × 32 new tokens, twice:

- cached + batched (the default): rows of every setting and seed that share a prompt length run together, up to
  --batch-size rows per forward pass, the prompt once and then one position per step against the KV cache;
- plain: the same rows one at a time (batch size 1, for the scoring passes too), every step recomputing the whole
  sequence.

Both use the same common random numbers, so the two grids should hold the same numbers (up to float rounding);
the script prints the largest difference. --quick runs 8 prompts × 1 seed instead (the plain sweep of the full grid
takes minutes on 2 cores).

    python bench/steer_sweep.py [--quick] [--batch-size 256] [--preset small]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from nanolm.corpus import corpus_words
from nanolm.interp.steering_sweep import sweep
from nanolm.interp.view import view_of_nanolm
from nanolm.model import GPT, preset_config
from nanolm.tokenizers import WordTokenizer


def timed_sweep(view, layers, alphas, seeds, prompts, new_tokens, use_cache, batch_size):
    start = time.perf_counter()
    result = sweep(view, "sentiment", layers, alphas, seeds=seeds, n_prompts=prompts, max_new_tokens=new_tokens,
                   use_cache=use_cache, batch_size=batch_size)
    return time.perf_counter() - start, result


def largest_difference(a, b) -> float:
    """The largest |difference| between the two grids' KL, distinct-2 and log-odds (NaN-safe)."""
    worst = 0.0
    for x, y in zip(a.cells, b.cells):
        for name in ("kl", "distinct2", "log_odds"):
            u, v = getattr(x, name), getattr(y, name)
            if u is not None and v is not None and math.isfinite(u) and math.isfinite(v):
                worst = max(worst, abs(u - v))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--quick", action="store_true", help="8 prompts × 1 seed instead of 32 × 3")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    tok = WordTokenizer(corpus_words())
    model = GPT(preset_config(args.preset, vocab_size=tok.vocab_size)).eval()
    view = view_of_nanolm(model, tok, name=f"random {args.preset}")
    layers, alphas = ["0", "1", "2", "3"], [0.0, 0.25, 0.5, 1.0, 2.0, 4.0]
    seeds, prompts = (1, 8) if args.quick else (3, 32)
    rows = prompts * seeds * (1 + len(layers) * (len(alphas) - 1))
    print(f"preset {args.preset} (random weights), {torch.get_num_threads()} threads; grid {len(layers)} layers × "
          f"{len(alphas)} α × {seeds} seeds × {prompts} prompts × {args.new_tokens} new tokens = {rows} generated texts "
          f"(α = 0 once for all layers){' (--quick)' if args.quick else ''}")
    timed_sweep(view, layers[:1], [0.0, 1.0], 1, 2, 2, True, args.batch_size)  # warm-up
    fast, a = timed_sweep(view, layers, alphas, seeds, prompts, args.new_tokens, True, args.batch_size)
    print(f"KV cache + batches of {args.batch_size}: {fast:8.1f} s")
    slow, b = timed_sweep(view, layers, alphas, seeds, prompts, args.new_tokens, False, 1)
    print(f"no cache, one row at a time:  {slow:8.1f} s")
    print(f"ratio: {slow / fast:.1f}x; largest difference between the two grids (KL, distinct-2, log-odds): "
          f"{largest_difference(a, b):.2g}")


if __name__ == "__main__":
    main()
