"""A torchrun-style data-parallel training script, as a user would write it: nothing in it knows nanolm.

It reads its rank and world size from the environment torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR ...),
joins the process group itself (gloo on CPU, NCCL on GPUs), wraps an MLP in DistributedDataParallel and
trains it on random data; DDP all-reduces the gradients during backward.

    torchrun --nproc-per-node 2 examples/ddp_script.py --steps 30
    nanolm profile --nproc 2 -- examples/ddp_script.py --steps 30

--straggler-rank R --straggler-ms M plants a straggler: rank R sleeps M ms in every step (before its
forward), so every other rank waits for it in the gradient all-reduce.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--straggler-rank", type=int, default=None)
    parser.add_argument("--straggler-ms", type=float, default=0.0)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")  # rank, world size and address from torchrun's env
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)

    w = args.width
    layers = [nn.Linear(w, w) if i % 2 == 0 else nn.GELU() for i in range(2 * args.layers - 1)]
    model = DistributedDataParallel(nn.Sequential(*layers, nn.Linear(w, 10)).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches

    for step in range(1, args.steps + 1):
        if rank == args.straggler_rank:
            time.sleep(args.straggler_ms / 1000)
        x = torch.randn(args.batch_size, w, generator=data).to(device)
        y = torch.randint(0, 10, (args.batch_size,), generator=data).to(device)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here, bucket by bucket
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step}: loss {loss.item():.4f} (rank 0 of {world})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
