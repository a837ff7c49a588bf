"""Cost of nanolm's hook points when no hook is set.

Times the forward + backward pass of a model as it is against the same model with every hook point
swapped for a bare identity function (what a model without hooks would do), alternating the two in
rounds, and prints the median step time of each and their ratio.

    python bench/hook_overhead.py [--preset tiny] [--rounds 7] [--steps 20]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from nanolm.model import GPT, HookPoint, preset_config


def without_hook_points(model: GPT) -> GPT:
    """A copy of model whose hook points are plain identity functions."""
    bare = copy.deepcopy(model)
    for module in bare.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, HookPoint):
                setattr(module, name, lambda x: x)
    return bare


def step_time(model: GPT, idx: torch.Tensor, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        _, loss = model(idx, idx)
        loss.backward()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT(preset_config(args.preset, vocab_size=512))
    bare = without_hook_points(model)
    idx = torch.randint(0, 512, (args.batch_size, model.cfg.block_size))
    step_time(model, idx, 3), step_time(bare, idx, 3)  # warm-up
    hooked, plain = [], []
    for _ in range(args.rounds):
        hooked.append(step_time(model, idx, args.steps))
        plain.append(step_time(bare, idx, args.steps))
    h, p = statistics.median(hooked), statistics.median(plain)
    print(f"preset {args.preset}, batch {args.batch_size}x{model.cfg.block_size}, {args.rounds} rounds of {args.steps} steps")
    print(f"with hook points (none set): {h * 1e3:8.3f} ms/step")
    print(f"hook points removed:         {p * 1e3:8.3f} ms/step")
    print(f"ratio with/without: {h / p:.3f} (round-to-round spread of the bare model: "
          f"{(max(plain) - min(plain)) / p:.1%})")


if __name__ == "__main__":
    main()
