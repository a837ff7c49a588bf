"""A compute-bound MLP training loop: the control case.

Nothing planted: 1024-wide layers at batch 256 make every step a few large matmuls, the data is
pre-generated in memory (TensorDataset), and the loop never reads a value back from the device.
The profiler should call it compute-bound; MFU then says how close to the peak it runs.

    python examples/healthy.py --steps 40
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
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    n, d = args.steps * args.batch_size, 512
    x = torch.randn(n, d)
    y = torch.randint(0, 10, (n,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True)

    w = args.width
    model = nn.Sequential(nn.Linear(d, w), nn.GELU(), nn.Linear(w, w), nn.GELU(), nn.Linear(w, w), nn.GELU(),
                          nn.Linear(w, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    model.train()
    i = 0
    for i, (xb, yb) in enumerate(loader, start=1):
        xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
        loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= args.steps:
            break
    print(f"done: {i} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
