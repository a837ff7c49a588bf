"""Training throughput on a GPU, side by side in one process: nanolm's step as `nanolm train` takes it with
`--set autocast=bf16 --set compile=true`, karpathy/nanoGPT's GPT (its model.py from a path, vendored nowhere) and
Hugging Face's GPT2LMHeadModel (sdpa), at GPT-2 124M shapes (vocabulary 50,304), on the same random batches,
each with fused AdamW, gradient clipping at 1.0, bf16 autocast and torch.compile.

    python bench/train_throughput_gpu.py [--nanogpt PATH/TO/nanoGPT] [--batch 16,32] [--seq 1024,2048]
                                         [--shapes 32x1024,16x2048] [--rounds 3] [--steps 10] [--no-compile]
                                         [--only nanolm,nanoGPT] [--variants untied,learned,flash] [--kernels FILE]
    python bench/train_throughput_gpu.py --device cpu --preset tiny --rounds 1 --steps 1   # the plumbing, on a CPU

--variants adds nanolm rows with one change each (joined by "+"), to find and measure what closes a gap:
tied / untied (W_U = W_E or not; the gpt2-124m preset ties, as GPT-2 and nanoGPT do), learned (learned positions
in place of rotary), flash / cudnn / efficient (pin SDPA's backend),
copt (clip and optimizer step compiled, foreach AdamW), cdt (inductor's coordinate-descent tuning of its kernels),
graphs (the compiled forward and backward replayed as CUDA graphs: torch.compile's mode "reduce-overhead").
--kernels FILE profiles 2 steps of every model after the timing and writes each one's device time per step by
kernel class (nanolm.profiling.trace.classify) and its top kernels: where one model's step differs from another's.

For each batch × sequence length: every model is built, compiled and warmed up (3 steps) first, then timed in
alternating rounds (each round runs every model `--steps` steps), each round timed with CUDA events on the
stream (no host clock, one sync a round). It prints each model's median step, tokens/s, MFU with 6N and with the
attention term against the datasheet peak (by device name) and against the bf16 matmul peak measured in the same
run, and the ratios against nanoGPT and HF. N counts the matmul parameters (12·L·d² + V·d, as nanoGPT's
estimate_mfu does); the attention term is 12·L·d·T FLOPs per token. From ../shared/gpu/throughput_gpu.py, written
into the project's bench."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import torch
import torch.nn.functional as F

from nanolm.config import TrainConfig
from nanolm.model import GPT, preset_config
from nanolm.profiling.measure.mfu import lookup_peak
from nanolm.profiling.record.peak import measure_peak
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


VARIANT_PARTS = {"tied", "untied", "learned", "flash", "cudnn", "efficient", "copt", "cdt", "graphs"}


def variant_parts(variant: str) -> set[str]:
    """The changes a variant name joins with "+" ("learned+tied"); "" is nanolm as `nanolm train` runs it."""
    parts = {p for p in variant.split("+") if p}
    unknown = parts - VARIANT_PARTS
    if unknown:
        fail(f"--variants: unknown change {sorted(unknown)[0]!r}; known: {', '.join(sorted(VARIANT_PARTS))}")
    if {"tied", "untied"} <= parts:
        fail(f"--variants {variant}: tied or untied, not both")
    if len(parts & {"flash", "cudnn", "efficient"}) > 1:
        fail(f"--variants {variant}: pin one SDPA backend at a time")
    return parts


def nanolm_model(preset: str, shape: Shape, parts: set[str] = frozenset()) -> ROUND_TRIP:
    overrides = {"block_size": shape.seq}
    if parts & {"tied", "untied"}:
        overrides["tie_embeddings"] = "tied" in parts
    if "learned" in parts:
        overrides["pos"] = "learned"
    model = GPT(preset_config(preset, **overrides))
    return model, lambda idx, tgt: model(idx, tgt)[1]


def sdpa_backend(parts: set[str]) -> contextlib.AbstractContextManager:
    """SDPA pinned to the variant's backend for the step (compile picks the kernel when it traces), else no-op."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION}
    pinned = [names[p] for p in parts if p in names]
    return sdpa_kernel(pinned) if pinned else contextlib.nullcontext()


def fail(message: str) -> NoReturn:
    """Bad input: one line on stderr, exit code 2."""
    print(f"train_throughput_gpu: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def nanogpt_module(path: str) -> ModuleType:
    """karpathy/nanoGPT's model.py (from a clone's folder or the file itself), loaded as module `nanogpt_model`;
    bad input is one line and exit 2."""
    file = Path(path) if path.endswith(".py") else Path(path) / "model.py"
    if not file.is_file():
        fail(f"--nanogpt {path}: there is no {file} (pass a nanoGPT clone or its model.py)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["nanogpt_model"] = module  # torch.compile re-imports the module by name
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # whatever a file that is not nanoGPT's raises on import
        fail(f"--nanogpt {file} does not import ({type(e).__name__}: {e}); pass nanoGPT's model.py")
    missing = [name for name in ("GPT", "GPTConfig") if not hasattr(module, name)]
    if missing:
        fail(f"--nanogpt {file} has no {' or '.join(missing)}; pass nanoGPT's model.py")
    return module


def nanogpt_model(path: str, shape: Shape) -> ROUND_TRIP:
    module = nanogpt_module(path)
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
                compile_: bool, nanolm_optimizer: bool, parts: set[str] = frozenset()) -> Runner:
    """One model's training step (bf16 autocast on CUDA, clip 1.0, fused AdamW), compiled and warmed up; `parts`
    are a nanolm variant's changes to the step (variant_parts)."""
    t0 = time.perf_counter()
    model, loss_fn = built
    model.to(device)
    compiled_update = compile_ and "copt" in parts
    if nanolm_optimizer:  # nanolm train's groups (gains not decayed), as the run would build them
        opt = build_optimizer(model, TrainConfig(lr=6e-4, weight_decay=0.1), device)
        if compiled_update:  # torch.compile fuses the foreach implementation; the fused one is its own kernel
            groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in opt.param_groups]
            opt = torch.optim.AdamW(groups, lr=6e-4, betas=opt.defaults["betas"], foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                fused=device.type == "cuda")
    options = {"coordinate_descent_tuning": True} if "cdt" in parts else {}
    if "graphs" in parts and device.type == "cuda":
        options["triton.cudagraphs"] = True  # what mode="reduce-overhead" sets (mode and options do not mix)
    fn = torch.compile(own_frame(loss_fn, name), options=options or None) if compile_ else loss_fn
    idx, tgt = batch

    def update() -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    update_fn = torch.compile(update) if compiled_update else update

    def step() -> None:
        with sdpa_backend(parts), torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = fn(idx, tgt)
        loss.backward()
        update_fn()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # the first compiles
        step()
    sync(device)
    return Runner(name, step, sum(p.numel() for p in model.parameters()), time.perf_counter() - t0)


def own_frame(fn: Callable, name: str) -> Callable:
    """fn called from a function with a code object of its own. torch.compile caches compiled code by code
    object, with guards that a second model of the same structure passes (its parameters are inputs), so without
    this a variant would run the code compiled for the model before it: under another SDPA backend, say."""
    namespace = {"fn": fn}
    exec(compile("def loss(idx, tgt):\n    return fn(idx, tgt)\n", f"<{name}>", "exec"), namespace)
    return namespace["loss"]


def kernel_table(runner: Runner, device: torch.device, steps: int = 2, top: int = 40) -> dict:
    """Device time per step of `steps` profiled steps, by kernel class and for the `top` kernels (on a CPU, where
    there are no kernels, the aten operators' self time: the plumbing)."""
    from torch.profiler import ProfilerActivity, profile

    from nanolm.profiling.trace.classify import classify_name

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            runner.step()
        sync(device)
    kernels: dict[str, list[float]] = {}
    for event in prof.events():
        if device.type == "cuda":
            if not str(event.device_type).endswith("CUDA"):
                continue
            us = event.device_time_total
        elif event.name.startswith("aten::"):
            us = event.self_cpu_time_total
        else:
            continue
        entry = kernels.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += us / 1e3  # ms
    classes: dict[str, float] = {}
    for name, (_, ms) in kernels.items():
        cls = classify_name(name)
        classes[cls] = classes.get(cls, 0.0) + ms / steps
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]
    return {"device_ms_per_step": round(sum(ms for _, ms in kernels.values()) / steps, 3),
            "by_class_ms": {k: round(v, 3) for k, v in sorted(classes.items(), key=lambda kv: -kv[1])},
            "top": [[name, calls / steps, round(ms / steps, 4)] for name, (calls, ms) in ranked]}


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
    variants = {"nanolm": set()}
    for variant in filter(None, args.variants.split(",")):
        parts = variant_parts(variant)
        name = "nanolm+" + "+".join(sorted(parts))
        variants[name] = parts
        builders[name] = lambda parts=parts: nanolm_model(args.preset, shape, parts)
    if args.nanogpt:
        builders["nanoGPT"] = lambda: nanogpt_model(args.nanogpt, shape)
    if importlib.util.find_spec("transformers") is not None:
        builders["HF-GPT2"] = lambda: hf_model(shape)
    if args.only:
        builders = {k: v for k, v in builders.items() if k in args.only.split(",")}
    runners = []
    for name, build in builders.items():
        runners.append(make_runner(name, build(), batch, device, not args.no_compile, name in variants,
                                   variants.get(name, set())))
        say(f"{name}: built, compiled and warmed up in {runners[-1].warmup_s:.1f} s")
    for _ in range(args.rounds):  # alternating, so drift hits every model alike
        for runner in runners:
            runner.seconds.append(time_round(runner, args.steps, device))
    rows = [summary(r, shape, datasheet, measured) for r in runners]
    if args.kernels:
        for runner, row in zip(runners, rows):
            row["kernels"] = kernel_table(runner, device)
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
    p.add_argument("--shapes", default="", help="BxT pairs, comma-separated, in place of --batch × --seq")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--only", default="", help="models to run, comma-separated (nanolm, nanoGPT, HF-GPT2, variants)")
    p.add_argument("--variants", default="", help="nanolm variants, comma-separated; changes joined by '+'")
    p.add_argument("--kernels", help="write each model's device time by kernel class and its top kernels here")
    args = p.parse_args()
    try:
        device = torch.device(args.device)
    except RuntimeError:
        fail(f"--device {args.device} is not a device torch knows (use cuda or cpu)")
    if device.type == "cuda" and not torch.cuda.is_available():
        fail("--device cuda, but torch sees no CUDA device here (--device cpu --preset tiny runs the plumbing)")
    if args.nanogpt:
        nanogpt_module(args.nanogpt)  # a wrong path is said before anything is built
    known = {"nanolm", "nanoGPT", "HF-GPT2"}
    for variant in filter(None, args.variants.split(",")):
        known.add("nanolm+" + "+".join(sorted(variant_parts(variant))))
    unknown = [name for name in filter(None, args.only.split(",")) if name not in known]
    if unknown:
        fail(f"--only {unknown[0]}: not a model of this run; it has {', '.join(sorted(known))}")
    if args.rounds < 1 or args.steps < 1:
        fail("--rounds and --steps must be at least 1")
    shapes(args)
    kernels = []
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
    for b, t in shapes(args):
        shape = Shape(cfg.vocab_size, cfg.n_layer, cfg.n_head, cfg.d_model, t, b)
        for row in run_shape(args, shape, device, datasheet, measured):
            if "kernels" in row:
                kernels.append({"model": row["model"], "batch": b, "seq": t, **row.pop("kernels")})
            print(json.dumps(row), flush=True)
    if args.kernels:
        Path(args.kernels).write_text(json.dumps(kernels, indent=1) + "\n")


def shapes(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(batch, sequence length) pairs: --shapes, else every --batch with every --seq."""
    try:
        if args.shapes:
            pairs = [(int(b), int(t)) for b, t in (item.split("x") for item in args.shapes.split(","))]
        else:
            pairs = [(int(b), int(t)) for b in args.batch.split(",") for t in args.seq.split(",")]
    except ValueError:
        pairs = []
    if not pairs or min(min(pair) for pair in pairs) < 1:
        fail("--shapes takes BxT pairs of positive whole numbers (16x1024,32x1024); --batch and --seq likewise")
    return pairs


def say(message: str) -> None:
    """Progress on stderr (stdout holds the JSON lines)."""
    print(f"train_throughput_gpu: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
