"""A small classifier whose Dataset does heavy per-item Python work in __getitem__.

Planted bottleneck: INPUT-BOUND. Each item costs a few milliseconds of pure-Python feature
extraction, and the DataLoader runs it in the training process (num_workers=0), so the step mostly
waits for data (well over half of every step) while the model itself is tiny.
Fix: DataLoader(num_workers=2..8), or precompute/cache the features once.

    python examples/slow_dataset.py --steps 40
"""

import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

N_FEATURES, N_CLASSES = 64, 10


class SlowFeatures(Dataset):
    """Each item: a synthetic 'signal' turned into 64 features by a Python loop, on every access."""

    def __init__(self, n_items: int, work: int = 6000) -> None:
        self.n_items, self.work = n_items, work

    def __len__(self) -> int:
        return self.n_items

    def __getitem__(self, idx: int):
        rng = random.Random(idx)
        feats = [0.0] * N_FEATURES
        for j in range(self.work):  # the planted cost: pure Python, per item, every epoch
            v = rng.random()
            feats[j % N_FEATURES] += math.sin(v * 6.283) * math.exp(-v)
        x = np.asarray(feats, dtype=np.float32)
        x = (x - x.mean()) / (x.std() + 1e-6)
        y = idx % N_CLASSES
        return torch.from_numpy(x), y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (the fix to try)")
    args = parser.parse_args()

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)

    loader = DataLoader(SlowFeatures(args.steps * args.batch_size), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.num_workers)
    model = nn.Sequential(nn.Linear(N_FEATURES, 128), nn.ReLU(), nn.Linear(128, N_CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    model.train()
    step = 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step >= args.steps:
            break
    print(f"done: {step} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
