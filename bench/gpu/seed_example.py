"""The reference document's 100 ms step on a GPU, planted: batches made by hand on the CPU (~50 ms, no DataLoader),
loss.item() every step (the host waits for the whole queue), and a bf16 MLP whose forward+backward is ~20 ms.
Truth: the GPU idles while the host makes the next batch; removing the sync and prefetching the data hides it.

    python bench/gpu/seed_example.py [STEPS] [--log-every N] [--prefetch W]

--log-every 1 (the default) reads the loss every step (a sync); 20 reads it every 20th. --prefetch W makes
batches in a pool of W threads ahead of the loop (a bounded queue; time.sleep releases the GIL). Every step
prints `step K time_ms T` (perf_counter around the step); the GPU fixture recorder takes the mean of the steps
after warm-up as the unprofiled step (without a sync in every step, one step's host time is not its time, but
their sum over many steps is). From ../shared/gpu/seed_example.py, with the flags the fixed variants need."""
import argparse
import queue
import threading
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("steps", nargs="?", type=int, default=60)
parser.add_argument("--log-every", type=int, default=1)
parser.add_argument("--prefetch", type=int, default=0)
args = parser.parse_args()

dev = "cuda" if torch.cuda.is_available() else "cpu"
W = 8192 if dev == "cuda" else 256
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(W, W, bias=False) for _ in range(4)]).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev == "cuda")
pool = [torch.randn(W, W).pin_memory() if dev == "cuda" else torch.randn(W, W) for _ in range(2)]


def make_batch(step):
    time.sleep(0.050)  # reading and decoding a shard: the host is busy, the GPU has nothing queued
    return pool[step % 2]


def batches():
    if not args.prefetch:
        for step in range(args.steps):
            yield make_batch(step)
        return
    # Made batches wait in a queue of at most W; the loop takes them in step order (a worker may finish out of
    # order). Every batch goes through the queue, so the bound holds: an earlier version put only a notice there
    # and read it only when its step was missing, so notices piled up, the workers blocked on the full queue and
    # every ~5th step took 75 ms in place of 25 (seen on an H200).
    ready: queue.Queue = queue.Queue(maxsize=args.prefetch)
    todo = iter(range(args.steps))
    lock = threading.Lock()
    made: dict = {}

    def worker():
        while True:
            with lock:
                step = next(todo, None)
            if step is None:
                return
            ready.put((step, make_batch(step)))

    for _ in range(args.prefetch):
        threading.Thread(target=worker, daemon=True).start()
    for step in range(args.steps):  # in order, whichever worker made it
        while step not in made:
            done, batch = ready.get()
            made[done] = batch
        yield made.pop(step)


last = time.perf_counter()
for step, cpu_batch in enumerate(batches()):
    x = cpu_batch.to(dev, non_blocking=True)
    with torch.autocast(dev, dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if step % args.log_every == 0:
        print(f"step {step} loss {loss.item():.4f}")
    now = time.perf_counter()
    print(f"step {step} time_ms {(now - last) * 1000:.2f}", flush=True)
    last = now
