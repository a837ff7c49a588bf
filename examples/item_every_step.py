"""A healthy little MLP training loop, except that it prints the loss every step.

Planted bottleneck: HOST-SYNC-BOUND on a GPU. `loss.item()` inside the f-string runs once per step; on
a GPU it makes the host wait until every queued kernel has finished, so the CPU can never run ahead of
the GPU. On a CPU it costs nothing: there the matmuls take the time, the verdict is compute-bound, and
the sync is listed as a GPU hazard with its line.
Fix: keep the loss on the device (loss.detach()) and read it every N steps.

    python examples/item_every_step.py --steps 40
"""

import argparse
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    n = args.steps * args.batch_size
    x = torch.randn(n, 512)
    y = (x[:, :8].sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    model.train()
    for i, (xb, yb) in enumerate(loader):
        xb, yb = xb.to(device), yb.to(device)
        loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {i} loss {loss.item():.4f}")  # the planted host-device sync, every step
        if i + 1 >= args.steps:
            break


if __name__ == "__main__":
    main()
