"""Training throughput on a GPU, side by side in one process: nanolm's step as `nanolm train` takes it with
`--set autocast=bf16 --set compile=true`, karpathy/nanoGPT's GPT (its model.py from a path, vendored nowhere) and
Hugging Face's GPT2LMHeadModel (sdpa), at GPT-2 124M shapes (vocabulary 50,304), on the same random batches,
each with fused AdamW, gradient clipping at 1.0, bf16 autocast and torch.compile.

    python bench/train_throughput_gpu.py [--nanogpt PATH/TO/nanoGPT] [--batch 16,32] [--seq 1024,2048]
                                         [--rounds 3] [--steps 10] [--no-compile] [--only nanolm,nanoGPT] [--json]
    python bench/train_throughput_gpu.py --device cpu --preset tiny --rounds 1 --steps 1   # the plumbing, on a CPU

For each batch × sequence length: every model is built, compiled and warmed up (3 steps) first, then timed in
alternating rounds (each round runs every model `--steps` steps), each round timed with CUDA events on the
stream (no host clock, one sync a round). It prints each model's median step, tokens/s, MFU with 6N and with the
attention term against the datasheet peak (by device name) and against the bf16 matmul peak measured in the same
run, and the ratios against nanoGPT and HF. N counts the matmul parameters (12·L·d² + V·d, as nanoGPT's
estimate_mfu does); the attention term is 12·L·d·T FLOPs per token. From ../shared/gpu/throughput_gpu.py, written
into the project's bench."""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from nanolm.config import TrainConfig
from nanolm.model import GPT, preset_config
from nanolm.profiling.mfu import lookup_peak, measure_peak
from nanolm.train import build_optimizer

ROUND_TRIP = tuple[torch.nn.Module, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]


@dataclass
class Shape:
    vocab: int
    layers: int
    heads: int
    width: int
    seq: int
    batch: int

    @property
    def matmul_params(self) -> int:
        return 12 * self.layers * self.width**2 + self.vocab * self.width

    @property
    def attention_flops_per_token(self) -> int:
        return 12 * self.layers * self.width * self.seq


@dataclass
class Runner:
    name: str
    step: Callable[[], None]
    params: int
    warmup_s: float
    seconds: list[float] = field(default_factory=list)  # per step, one entry per round


def nanolm_model(preset: str, shape: Shape) -> ROUND_TRIP:
    cfg = preset_config(preset, block_size=shape.seq)
    model = GPT(cfg)
    return model, lambda idx, tgt: model(idx, tgt)[1]


def nanogpt_model(path: str, shape: Shape) -> ROUND_TRIP:
    file = path if path.endswith(".py") else f"{path.rstrip('/')}/model.py"
    spec = importlib.util.spec_from_file_location("nanogpt_model", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["nanogpt_model"] = module  # torch.compile re-imports the module by name
    spec.loader.exec_module(module)
    model = module.GPT(module.GPTConfig(block_size=shape.seq, vocab_size=shape.vocab, n_layer=shape.layers,
                                        n_head=shape.heads, n_embd=shape.width, dropout=0.0, bias=False))
    return model, lambda idx, tgt: model(idx, tgt)[1]


def hf_model(shape: Shape) -> ROUND_TRIP:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its notes on the config stay out of the bench's output
    cfg = GPT2Config(vocab_size=shape.vocab, n_positions=shape.seq, n_embd=shape.width, n_layer=shape.layers,
                     n_head=shape.heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                     eos_token_id=None)
    cfg._attn_implementation = "sdpa"
    model = GPT2LMHeadModel(cfg)

    def loss(idx: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=idx).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), tgt.view(-1))
    return model, loss


def make_runner(name: str, built: ROUND_TRIP, batch: tuple[torch.Tensor, torch.Tensor], device: torch.device,
                compile_: bool, nanolm_optimizer: bool) -> Runner:
    """One model's training step (bf16 autocast on CUDA, clip 1.0, fused AdamW), compiled and warmed up."""
    t0 = time.perf_counter()
    model, loss_fn = built
    model.to(device)
    if nanolm_optimizer:  # nanolm train's groups (gains not decayed), as the run would build them
        opt = build_optimizer(model, TrainConfig(lr=6e-4, weight_decay=0.1), device)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                fused=device.type == "cuda")
    fn = torch.compile(loss_fn) if compile_ else loss_fn
    idx, tgt = batch

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    sync(device)
    return Runner(name, step, sum(p.numel() for p in model.parameters()), time.perf_counter() - t0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_round(runner: Runner, steps: int, device: torch.device) -> float:
    """Seconds per step of `steps` steps: CUDA events on the stream (one sync), or the host clock on a CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            runner.step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000 / steps
    t = time.perf_counter()
    for _ in range(steps):
        runner.step()
    return (time.perf_counter() - t) / steps


def summary(runner: Runner, shape: Shape, datasheet: float | None, measured: float) -> dict:
    step = statistics.median(runner.seconds)
    tokens_per_s = shape.batch * shape.seq / step
    flops_6n = 6 * shape.matmul_params * tokens_per_s
    flops_attn = flops_6n + shape.attention_flops_per_token * tokens_per_s
    out = {"model": runner.name, "batch": shape.batch, "seq": shape.seq, "params": runner.params,
           "warmup_compile_s": round(runner.warmup_s, 1), "step_ms": round(step * 1e3, 3),
           "tokens_per_s": round(tokens_per_s), "rounds_ms": [round(s * 1e3, 3) for s in runner.seconds],
           "mfu_6n_attn_measured": round(flops_attn / measured, 4)}
    if datasheet:
        out.update(mfu_6n_datasheet=round(flops_6n / datasheet, 4), mfu_6n_attn_datasheet=round(flops_attn / datasheet, 4))
    return out


def run_shape(args: argparse.Namespace, shape: Shape, device: torch.device, datasheet: float | None,
              measured: float) -> list[dict]:
    torch.manual_seed(0)
    batch = (torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device),
             torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device))
    builders: dict[str, Callable[[], ROUND_TRIP]] = {"nanolm": lambda: nanolm_model(args.preset, shape)}
    if args.nanogpt:
        builders["nanoGPT"] = lambda: nanogpt_model(args.nanogpt, shape)
    if importlib.util.find_spec("transformers") is not None:
        builders["HF-GPT2"] = lambda: hf_model(shape)
    if args.only:
        builders = {k: v for k, v in builders.items() if k in args.only.split(",")}
    runners = [make_runner(name, build(), batch, device, not args.no_compile, name == "nanolm")
               for name, build in builders.items()]
    for _ in range(args.rounds):  # alternating, so drift hits every model alike
        for runner in runners:
            runner.seconds.append(time_round(runner, args.steps, device))
    rows = [summary(r, shape, datasheet, measured) for r in runners]
    for base in ("nanoGPT", "HF-GPT2"):
        ref = next((r["tokens_per_s"] for r in rows if r["model"] == base), None)
        for r in rows:
            if ref:
                r[f"vs_{base}"] = round(r["tokens_per_s"] / ref, 3)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="gpt2-124m")
    p.add_argument("--nanogpt", help="a clone of karpathy/nanoGPT, or its model.py")
    p.add_argument("--batch", default="16", help="batch sizes, comma-separated")
    p.add_argument("--seq", default="1024", help="sequence lengths, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--json", action="store_true", help="one JSON line per model and shape, nothing else")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("train_throughput_gpu: error: no CUDA device here; --device cpu --preset tiny runs the plumbing")
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = preset_config(args.preset)
    measured = measure_peak(device, torch.bfloat16 if device.type == "cuda" else torch.float32).flops_per_s
    datasheet = None
    if device.type == "cuda":
        try:
            datasheet = lookup_peak(torch.cuda.get_device_name(device)).flops_per_s
        except Exception:  # a GPU the table does not know: the measured peak only
            datasheet = None
    head = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch": torch.__version__,
            "measured_peak_tflops": round(measured / 1e12, 1),
            "datasheet_peak_tflops": round(datasheet / 1e12, 1) if datasheet else None}
    print(json.dumps(head), flush=True)
    for b in (int(x) for x in args.batch.split(",")):
        for t in (int(x) for x in args.seq.split(",")):
            shape = Shape(cfg.vocab_size, cfg.n_layer, cfg.n_head, cfg.d_model, t, b)
            for row in run_shape(args, shape, device, datasheet, measured):
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
