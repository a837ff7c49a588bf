"""Train a small classifier on features computed from synthetic signals.

python train.py --steps 40
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

N_FEATURES, N_CLASSES, SIGNAL = 64, 10, 3000


class Signals(Dataset):
    """Item i: a synthetic signal, summarised as 64 features."""

    def __init__(self, n_items: int) -> None:
        self.n_items = n_items

    def __len__(self) -> int:
        return self.n_items

    def __getitem__(self, idx: int):
        y = idx % N_CLASSES
        rng = np.random.default_rng(idx)
        v = rng.random(SIGNAL)
        # the same features, vectorized: numpy instead of a Python loop per item
        feats = np.bincount(np.arange(SIGNAL) % N_FEATURES, weights=np.sin(v * 6.283) * np.exp(-v), minlength=N_FEATURES)
        feats[3 * y] += 20.0  # the class shows in one feature
        x = feats.astype(np.float32)
        x = (x - x.mean()) / (x.std() + 1e-6)
        return torch.from_numpy(x), y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)

    loader = DataLoader(Signals(args.steps * args.batch_size), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(N_FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, N_CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

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
