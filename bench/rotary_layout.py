"""Rotary positions on q and k together, in the layout the qkv matmul writes (nanolm's CausalSelfAttention.split_heads),
against one tensor at a time after the transpose to [B, H, T, Dh] (nanolm before 2026-12-04), on a CPU: forward and
backward of a whole model, alternating rounds, eager and with compile_kernels.

    .venv/bin/python bench/rotary_layout.py [--preset tiny|small] [--rounds 15] [--threads 2]

On a GPU with torch.compile the joint layout took the step from 35.6 to 33.4 ms at gpt2-124m (docs/performance.md,
measured by bench/train_throughput_gpu.py); this bench says what it costs where nanolm's demo and tests run."""

from __future__ import annotations

import argparse
import statistics
import time
import types

import torch

from nanolm.model import GPT, apply_rotary, compile_kernels, preset_config


def split_heads_one_at_a_time(self, qkv: torch.Tensor, rotary):
    """The earlier layout: split, transpose to [B, H, T, Dh], then rotate q and k each on its own."""
    B, T, three_d = qkv.shape
    q, k, v = qkv.split(three_d // 3, dim=2)
    q, k, v = (t.view(B, T, self.n_head, self.d_head).transpose(1, 2) for t in (q, k, v))
    if rotary is not None:
        q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
    return q, k, v


def model(preset: str, earlier: bool, compiled: bool) -> GPT:
    torch.manual_seed(0)
    m = GPT(preset_config(preset, vocab_size=512))
    if earlier:
        for block in m.blocks:
            block.attn.split_heads = types.MethodType(split_heads_one_at_a_time, block.attn)
    return compile_kernels(m) if compiled else m


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    shape = (32, 64) if a.preset == "tiny" else (16, 256)  # the demo's batch; small's default context
    idx = torch.randint(0, 512, shape, generator=torch.Generator().manual_seed(0))
    for compiled in (False, True):
        models = {"joint": model(a.preset, False, compiled), "one at a time": model(a.preset, True, compiled)}
        for m in models.values():  # warm-up (and compiling)
            for _ in range(2):
                m(idx, idx)[1].backward()
        seconds: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(a.rounds):
            for name, m in models.items():
                t = time.perf_counter()
                m(idx, idx)[1].backward()
                seconds[name].append(time.perf_counter() - t)
        joint, earlier = (statistics.median(seconds[n]) for n in ("joint", "one at a time"))
        print(f"{a.preset}, {'compile_kernels' if compiled else 'eager'}: joint {joint * 1e3:.0f} ms, one at a time "
              f"{earlier * 1e3:.0f} ms a forward+backward; joint / one at a time {joint / earlier:.3f}")


if __name__ == "__main__":
    main()
