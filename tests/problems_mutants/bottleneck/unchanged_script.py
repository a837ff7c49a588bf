# mutant: the script handed in as given
# expect: the script as given
# variant: tiny_ops
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""Fit a small MLP with a learned polynomial activation to a smooth target.

python train.py --steps 40
"""

import argparse
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class PolyActivation(nn.Module):
    """sum_k c_k * tanh(x)^k with learned coefficients."""

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
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(0)

    n = args.steps * args.batch_size
    x = torch.randn(n, 32)
    y = torch.sin(x[:, :4]).sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(32, 32), PolyActivation(), nn.Linear(32, 32), PolyActivation(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    i = 0
    for i, (xb, yb) in enumerate(loader, start=1):
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= args.steps:
            break
    print(f"done: {i} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
