"""Training throughput of `nanolm train` at 1 and 2 data-parallel processes on this machine, one thread each.

Same config, same global batch (batch_size is the global batch; 2 ranks take half each). Three runs, each
repeated --repeats times (the best is kept: the machine is shared, so the slowest runs measure the neighbours):

- 1 process, 1 thread: the baseline of the process-level comparison;
- 2 processes (DDP, gloo), 1 thread each: `nanolm train --nproc 2`;
- 1 process, 2 threads: what the same two cores give without DDP (intra-op threads), for context.

Throughput is tokens/s over the logged steps after the first interval (start-up, first-touch allocation and
DDP's first-iteration bucket rebuild excluded), from the run's metrics.jsonl. The communication share is
rank 0's measured time in gradient all-reduce (DDP's comm hook: the union of the buckets' spans from hand-off
to the averaged result, so concurrent buckets count once; waiting for the other rank included) over the wall
time of the same steps.

    python bench/ddp_scaling.py [--steps 120] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Large enough that a step is mostly matrix work (~1.6M parameters), small enough for a minute on 2 cores.
MODEL = ["preset=tiny", "n_layer=4", "n_head=4", "d_model=128", "block_size=64", "batch_size=16",
         "corpus_lines=5000", "eval_batches=1", "warmup_steps=5", "deterministic=false", "compile_kernels=false"]


def run(steps: int, nproc: int, threads: int, log_every: int) -> dict:
    """One training run; throughput and all-reduce share over the logged intervals after the first."""
    with tempfile.TemporaryDirectory() as tmp:
        sets = [*MODEL, f"steps={steps}", f"log_every={log_every}", f"eval_every={steps}", f"ckpt_every={steps}",
                f"runs_dir={tmp}"]
        args = [sys.executable, "-m", "nanolm", "train", "-q", *[a for kv in sets for a in ("--set", kv)]]
        if nproc > 1:
            args += ["--nproc", str(nproc)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"nanolm train failed ({done.returncode}):\n{done.stderr}")
        run_dir = next(p.parent for p in Path(tmp).glob("*/metrics.jsonl"))
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        n_params = json.loads((run_dir / "manifest.json").read_text())["n_params"]
    first, last = rows[0], rows[-1]
    seconds = last["elapsed_s"] - first["elapsed_s"]
    tokens = last["tokens"] - first["tokens"]
    comm = sum(r.get("allreduce_s", 0.0) for r in rows[1:])
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "n_params": n_params,
            "allreduce_share": comm / seconds if nproc > 1 else None,
            "allreduce_ms_per_step": 1000 * comm / (last["step"] - first["step"]) if nproc > 1 else None}


def _allreduce_worker(rank: int, port: int, numel: int, repeats: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    buffer = torch.ones(numel)
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buffer)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def allreduce_alone(n_params: int, repeats: int = 30) -> float:
    """Median seconds of one gloo all-reduce of n_params float32 between 2 processes that do nothing else:
    the cost of the communication itself, without the wait for a slower rank."""
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous (gloo's env:// init refuses port 0)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "times.json")
        mp.spawn(_allreduce_worker, args=(port, n_params, repeats, out), nprocs=2)
        return statistics.median(json.loads(Path(out).read_text())[3:])


def best(steps: int, nproc: int, threads: int, repeats: int, log_every: int) -> dict:
    results = [run(steps, nproc, threads, log_every) for _ in range(repeats)]
    top = max(results, key=lambda r: r["tokens_per_s"])
    top["all_tokens_per_s"] = [round(r["tokens_per_s"]) for r in results]
    return top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    log_every = max(1, args.steps // 6)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores; model: {' '.join(MODEL)}; {args.steps} steps, best of {args.repeats}")
    one = best(args.steps, 1, 1, args.repeats, log_every)
    two = best(args.steps, 2, 1, args.repeats, log_every)
    threads = best(args.steps, 1, 2, args.repeats, log_every)
    print(f"{one['n_params']:,} parameters ({4 * one['n_params'] / 1e6:.1f} MB of float32 gradients to all-reduce "
          "per step)")
    print(f"1 process,   1 thread:       {one['tokens_per_s']:9,.0f} tokens/s  (runs: {one['all_tokens_per_s']})")
    print(f"2 processes, 1 thread each:  {two['tokens_per_s']:9,.0f} tokens/s  (runs: {two['all_tokens_per_s']})")
    print(f"1 process,   2 threads:      {threads['tokens_per_s']:9,.0f} tokens/s  (runs: {threads['all_tokens_per_s']})")
    print(f"DDP speed-up, 2 processes over 1 (one thread each): {two['tokens_per_s'] / one['tokens_per_s']:.2f}x "
          "(ideal 2.00x)")
    print(f"2 processes over 1 process with 2 threads: {two['tokens_per_s'] / threads['tokens_per_s']:.2f}x")
    print(f"communication: rank 0 spends {two['allreduce_share']:.1%} of the step in gradient all-reduce "
          f"({two['allreduce_ms_per_step']:.1f} ms per step, waiting for the other rank included)")
    alone = allreduce_alone(one["n_params"])
    print(f"the same all-reduce between 2 otherwise idle processes: {1000 * alone:.1f} ms "
          f"({4 * one['n_params'] / alone / 1e9:.2f} GB/s over loopback); the rest of the measured time is waiting "
          "for the other rank and gloo's threads competing with training for the 2 cores")


if __name__ == "__main__":
    main()
