"""A tiny MLP with a hand-written polynomial activation, evaluated term by term in a Python loop.

Planted bottleneck: LAUNCH/OVERHEAD-BOUND. Each activation is ~50 Python-level iterations of tiny
elementwise ops on a [16, 32] tensor, so one training step runs many hundreds of operators that each
do almost no math: the time goes to per-op dispatch (and, on a GPU, kernel launches), not arithmetic.
Fix: torch.compile the model (fuses the chain), or express the activation as a few large ops.

    python examples/many_tiny_ops.py --steps 40
"""

import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class PolyActivation(nn.Module):
    """sum_k c_k * tanh(x)^k, one term at a time (the planted cost: ~4 tiny ops per term)."""

    def __init__(self, terms: int = 48) -> None:
        super().__init__()
        self.coef = nn.Parameter(torch.tensor([1.0 / math.factorial(k) for k in range(terms)]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.tanh(x)
        term = torch.ones_like(t)
        out = torch.zeros_like(t)
        for k in range(self.coef.numel()):
            out = out + self.coef[k] * term
            term = term * t
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    n = args.steps * args.batch_size
    x = torch.randn(n, 32)
    y = torch.sin(x[:, :4]).sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = nn.Sequential(nn.Linear(32, 32), PolyActivation(), nn.Linear(32, 32), PolyActivation(),
                          nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    model.train()
    i = 0
    for i, (xb, yb) in enumerate(loader, start=1):
        xb, yb = xb.to(device), yb.to(device)
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= args.steps:
            break
    print(f"done: {i} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
