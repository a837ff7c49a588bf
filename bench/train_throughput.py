"""Training throughput: nanolm against Hugging Face GPT-2 and karpathy/nanoGPT's model of the same shape, and
against this machine's matmul peak.

Builds nanolm at a preset, a randomly initialised ``GPT2LMHeadModel`` with the same width, depth, heads,
context and vocabulary (no download, dropout 0, SDPA attention) and, given --nanogpt, the ``GPT`` of
nanoGPT's ``model.py`` built from its ``GPTConfig`` with the same shapes (bias off, as in nanolm; dropout 0).
nanoGPT is vendored nowhere: the file is imported from the path given, and skipped when there is none.
All train with fused AdamW on the same batches of real corpus tokens (forward, cross-entropy, backward,
gradient clipping, optimizer step: the step ``nanolm train`` takes), alternating in rounds, so that machine
noise hits all alike.

"nanolm" is the step ``nanolm train`` takes by default: eager code, with each block's norms and attention
compiled where compile_kernels=auto turns that on (see nanolm.train.kernels_compiled); "nanolm eager" (nothing
compiled) is timed beside it when the two differ. It reports the median tokens/s of each, the ratios, and
nanolm's achieved FLOP/s (6N, and 6N plus attention) as a fraction of the fp32 matmul peak measured here.
With --compile it also times every model under torch.compile and compares each in its better mode.

A quick matmul probe runs between rounds. On a shared (virtual) machine whose speed drifts, rounds bracketed
by probes well below the best one are "unsteady"; the medians use the steady rounds when there are at least
three of them (--steady 0 uses every round).

    python bench/train_throughput.py [--preset small] [--batch-size 16] [--rounds 7] [--compile]
                                     [--nanogpt PATH/TO/nanoGPT] [--json]

Needs the ``bench`` extra (transformers): pip install -e ".[bench]". nanoGPT: git clone
https://github.com/karpathy/nanoGPT and pass the folder (or its model.py) as --nanogpt.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import multiprocessing
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from nanolm.allocator import reuse_freed_memory
from nanolm.config import TrainConfig
from nanolm.data import corpus_data, eval_batches
from nanolm.model import GPT, PRESETS, compile_kernels, preset_config
from nanolm.train import build_optimizer, kernels_compiled

Batch = tuple[torch.Tensor, torch.Tensor]


# The clock every step and probe is timed by: wall time, or with --cpu-time this thread's CPU time.
clock: Callable[[], float] = time.perf_counter


def matmul_peak(n: int, reps: int) -> float:
    """Best-of-reps FLOP/s of an n x n by n x n fp32 torch.mm."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up: allocation, thread pool, BLAS dispatch
    best = float("inf")
    for _ in range(reps):
        start = clock()
        torch.mm(a, b)
        best = min(best, clock() - start)
    return 2.0 * n**3 / best


@dataclass
class Runner:
    """One model in one mode: a training step on a batch, and its seconds per step in each round."""

    name: str
    family: str  # "nanolm", "HF" or "nanoGPT"
    mode: str  # "default" (nanolm train's step; eager for the others), "eager" or "compiled"
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (idx [B, T], targets [B, T]) -> mean nats
    grad_clip: float
    flops_6n: float  # 6 * non-embedding parameters, per token
    flops_attn: float  # 6N plus the attention term, per token
    setup_s: float = 0.0  # warm-up time (includes compilation under torch.compile)
    round_s: list[float] = field(default_factory=list)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.loss(x, y).backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def warm_up(self, batches: list[Batch], steps: int) -> None:
        t0 = time.perf_counter()
        for i in range(steps):
            self.step(*batches[i])
        self.setup_s = time.perf_counter() - t0

    def timed(self, batches: list[Batch], start: int, steps: int) -> float:
        return time_steps(self, batches, start, steps)


@dataclass
class Remote:
    """A Runner built and timed in a process of its own, driven over a pipe: the process's C allocator then
    serves that model alone, as it does when the model's own training script runs (see serve())."""

    name: str
    family: str
    mode: str
    flops_6n: float
    flops_attn: float
    conn: Connection
    process: BaseProcess
    setup_s: float = 0.0
    round_s: list[float] = field(default_factory=list)

    def _ask(self, *message: object) -> float:
        self.conn.send(message)
        reply = self.conn.recv()
        if isinstance(reply, str):  # the worker's traceback
            raise RuntimeError(f"{self.name}: {reply}")
        return reply

    def warm_up(self, batches: list[Batch], steps: int) -> None:
        self.setup_s = self._ask("warm", steps)

    def timed(self, batches: list[Batch], start: int, steps: int) -> float:
        return self._ask("time", start, steps)

    def close(self) -> None:
        self.conn.send(None)
        self.process.join(timeout=60)


BUILDERS = {"nanolm": lambda args, vocab, cfg, mode: build_nanolm(args, vocab, cfg, mode),
            "HF": lambda args, vocab, cfg, mode: build_hf(args, vocab, cfg, mode),
            "nanoGPT": lambda args, vocab, cfg, mode: build_nanogpt(args, vocab, cfg, mode, load_nanogpt(args.nanogpt))}


def serve(conn: Connection, family: str, mode: str, args: argparse.Namespace, vocab: int, cfg: TrainConfig,
          batches: list[Batch]) -> None:
    """A worker process: build one model, say what it is, then warm it up and time it on request. nanolm's
    workers set nanolm train's allocator policy (nanolm.allocator), as nanolm train does; the rivals keep the
    C library's defaults, as their own scripts run."""
    import traceback

    global clock
    if args.cpu_time:
        clock = time.thread_time
    if args.threads:
        torch.set_num_threads(args.threads)
    if family == "nanolm":
        reuse_freed_memory()
    try:
        r = BUILDERS[family](args, vocab, cfg, mode)
        conn.send((r.name, r.flops_6n, r.flops_attn))
        while (message := conn.recv()) is not None:
            if message[0] == "warm":
                r.warm_up(batches, message[1])
                conn.send(r.setup_s)
            else:
                conn.send(r.timed(batches, message[1], message[2]))
    except Exception:  # the parent raises it with the model's name
        conn.send(traceback.format_exc())


def start_remote(family: str, mode: str, args: argparse.Namespace, vocab: int, cfg: TrainConfig,
                 batches: list[Batch]) -> Remote:
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this process's heap or threads
    parent, child = ctx.Pipe()
    process = ctx.Process(target=serve, args=(child, family, mode, args, vocab, cfg, batches), daemon=True)
    process.start()
    reply = parent.recv()
    if isinstance(reply, str):
        raise RuntimeError(f"{family} {mode}: {reply}")
    name, flops_6n, flops_attn = reply
    return Remote(name, family, mode, flops_6n, flops_attn, parent, process)


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """nanolm's parameter groups (matrices decay, vectors do not), for the HF model's optimizer."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def build_nanolm(args: argparse.Namespace, vocab: int, cfg: TrainConfig, mode: str) -> Runner:
    """mode: "default" (what nanolm train does: eager code, each block's norms and attention compiled where
    compile_kernels=auto says so), "eager" (nothing compiled) or "compiled" (torch.compile of the whole model)."""
    torch.manual_seed(args.seed)
    model = GPT(preset_config(args.preset, vocab_size=vocab, block_size=args.block_size)).train()
    optimizer = build_optimizer(model, cfg, torch.device("cpu"))
    if mode == "default" and kernels_compiled(cfg, model.cfg, torch.device("cpu")):
        compile_kernels(model)
    fwd = torch.compile(model) if mode == "compiled" else model
    T = model.cfg.block_size
    name = {"default": "nanolm", "eager": "nanolm eager", "compiled": "nanolm compiled"}[mode]
    # nanolm's own loss, as nanolm train computes it (the same cross-entropy as the others').
    return Runner(name, "nanolm", mode, model, optimizer, lambda x, y: fwd(x, y)[1], cfg.grad_clip,
                  model.flops_per_token(T, with_attention=False), model.flops_per_token(T))


def build_hf(args: argparse.Namespace, vocab: int, cfg: TrainConfig, mode: str) -> Runner:
    """GPT2LMHeadModel of nanolm's shape, randomly initialised; mode "eager" or "compiled"."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    shape = preset_config(args.preset, vocab_size=vocab, block_size=args.block_size)
    hf_cfg = GPT2Config(vocab_size=vocab, n_positions=shape.block_size, n_embd=shape.d_model, n_layer=shape.n_layer,
                        n_head=shape.n_head, n_inner=shape.mlp_dim, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        summary_first_dropout=0.0, bos_token_id=None, eos_token_id=None, use_cache=False)
    torch.manual_seed(args.seed)
    try:  # SDPA attention: the fastest HF implementation on CPU
        model = GPT2LMHeadModel._from_config(hf_cfg, attn_implementation="sdpa")
    except (TypeError, ValueError, ImportError):
        model = GPT2LMHeadModel(hf_cfg)
    model.train()
    optimizer = torch.optim.AdamW(decay_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                  fused=True)
    fwd = torch.compile(model) if mode == "compiled" else model
    # N for 6N: every parameter but the position table; the token table counts, being the tied lm_head matmul.
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    attn = 12.0 * shape.n_layer * shape.d_model * shape.block_size
    name = f"HF GPT2 {model.config._attn_implementation}" + (" compiled" if mode == "compiled" else "")

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # Our own loss on the same (x, y) pairs as nanolm; HF's labels= path would shift and copy the logits.
        logits = fwd(input_ids=x).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))

    return Runner(name, "HF", mode, model, optimizer, loss, cfg.grad_clip, 6.0 * n, 6.0 * n + attn)


def load_nanogpt(path: str) -> ModuleType:
    """karpathy/nanoGPT's model.py imported from path (the file, or the repository folder that holds it), under
    a module name of its own; SystemExit when it is not there or holds no GPT and GPTConfig."""
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "model.py"
    if not file.is_file():
        raise SystemExit(f"--nanogpt {path}: no such file (give nanoGPT's model.py, or the folder of a clone of "
                         "https://github.com/karpathy/nanoGPT)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not (hasattr(module, "GPT") and hasattr(module, "GPTConfig")):
        raise SystemExit(f"--nanogpt {path}: {file} defines no GPT and GPTConfig; is it nanoGPT's model.py?")
    return module


def build_nanogpt(args: argparse.Namespace, vocab: int, cfg: TrainConfig, mode: str, nanogpt: ModuleType) -> Runner:
    """nanoGPT's GPT from its GPTConfig at nanolm's shape (no biases, as nanolm; dropout 0); mode "eager" or
    "compiled". It keeps its own design: LayerNorm, learned positions, W_U tied to W_E, GELU MLP of 4 * width."""
    shape = preset_config(args.preset, vocab_size=vocab, block_size=args.block_size)
    if shape.mlp_dim != 4 * shape.d_model:
        raise SystemExit(f"nanoGPT's MLP is 4 x n_embd wide; the {args.preset} preset's is {shape.mlp_dim}")
    ng_cfg = nanogpt.GPTConfig(block_size=shape.block_size, vocab_size=vocab, n_layer=shape.n_layer,
                               n_head=shape.n_head, n_embd=shape.d_model, dropout=0.0, bias=False)
    torch.manual_seed(args.seed)
    with contextlib.redirect_stdout(sys.stderr):  # it prints its parameter count
        model = nanogpt.GPT(ng_cfg)
    model.train()
    # The same optimizer as the others (nanoGPT's configure_optimizers fuses AdamW only on CUDA).
    optimizer = torch.optim.AdamW(decay_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                  fused=True)
    fwd = torch.compile(model) if mode == "compiled" else model
    n = model.get_num_params()  # its own N for 6N: all but the position table (W_E counts, being the tied W_U)
    attn = 12.0 * shape.n_layer * shape.d_model * shape.block_size
    name = "nanoGPT" + (" compiled" if mode == "compiled" else "")
    # With targets its forward returns the full logits and its own cross-entropy; without, the last position only.
    return Runner(name, "nanoGPT", mode, model, optimizer, lambda x, y: fwd(x, y)[1], cfg.grad_clip, 6.0 * n,
                  6.0 * n + attn)


def time_steps(runner: Runner, batches: list[Batch], start: int, steps: int) -> float:
    """Seconds per training step: the median over `steps` steps, each timed alone (a stall of the shared
    machine spoils one step, not the round)."""
    times = []
    for i in range(steps):
        t0 = clock()
        runner.step(*batches[(start + i) % len(batches)])
        times.append(clock() - t0)
    return statistics.median(times)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="small", choices=list(PRESETS))
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=None, help="context T (default: the preset's)")
    p.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: the corpus word tokenizer's)")
    p.add_argument("--corpus-lines", type=int, default=TrainConfig.corpus_lines)
    p.add_argument("--rounds", type=int, default=7, help="timed rounds; each times every model in turn")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps per model per round (default: enough for about --round-s seconds)")
    p.add_argument("--round-s", type=float, default=1.5, help="seconds per model per round when --steps is not given")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per model first (compilation happens here)")
    p.add_argument("--compile", action="store_true", help="also time every model under torch.compile")
    p.add_argument("--nanogpt", default=None, metavar="PATH",
                   help="karpathy/nanoGPT's model.py, or a clone's folder: also time its GPT (skipped without)")
    p.add_argument("--steady", type=float, default=0.85,
                   help="a round is steady when the probes either side of it reach this fraction of the best probe")
    p.add_argument("--peak-size", type=int, default=4096, help="n of the n x n fp32 matmul that measures the peak")
    p.add_argument("--peak-reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--cpu-time", action="store_true",
                   help="one thread, timed by its CPU time: on a machine other processes keep busy, time slicing then "
                        "stretches no step (the peak is measured alike)")
    p.add_argument("--one-process", action="store_true",
                   help="time every model in this process (one heap, allocator defaults) instead of a process each")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON dict (progress goes to stderr)")
    args = p.parse_args(argv)
    for name in ("batch_size", "rounds", "steps", "peak_size", "peak_reps", "corpus_lines", "round_s"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    if args.warmup < 0 or not 0 <= args.steady <= 1:
        p.error("--warmup must be >= 0 and --steady in [0, 1]")
    if args.cpu_time and args.threads not in (None, 1):
        p.error("--cpu-time times one thread: leave --threads out or give --threads 1")
    return args


def runner_specs(args: argparse.Namespace, cfg: TrainConfig, vocab: int) -> list[tuple[str, str]]:
    """(family, mode) of each model timed: nanolm as nanolm train runs it (and plain eager nanolm when that
    differs), HF GPT-2, nanoGPT when given; with --compile each of them compiled too."""
    shape = preset_config(args.preset, vocab_size=vocab, block_size=args.block_size)
    specs = [("nanolm", "default")]
    if kernels_compiled(cfg, shape, torch.device("cpu")):
        specs.append(("nanolm", "eager"))
    specs += [("HF", "eager")] + ([("nanoGPT", "eager")] if args.nanogpt else [])
    if args.compile:
        specs += [("nanolm", "compiled"), ("HF", "compiled")] + ([("nanoGPT", "compiled")] if args.nanogpt else [])
    return specs


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    global clock
    if args.cpu_time:
        # Intra-op work then runs on this thread alone (compiled kernels are built for one thread too), so its
        # CPU time is the step's whole cost.
        args.threads, clock = 1, time.thread_time
    if args.threads:
        torch.set_num_threads(args.threads)
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))
    t_start = time.perf_counter()
    nanogpt = load_nanogpt(args.nanogpt) if args.nanogpt else None  # fails here, early, on a wrong path

    data = corpus_data(args.corpus_lines)
    vocab = args.vocab or data.tokenizer.vocab_size
    T = args.block_size or PRESETS[args.preset]["block_size"]
    B = args.batch_size
    tokens = data.train if vocab >= data.tokenizer.vocab_size else data.train % vocab
    batches = eval_batches(tokens, T, B, 16, seed=args.seed)  # random windows, used in turn by every model
    cfg = TrainConfig(preset=args.preset, batch_size=B, block_size=args.block_size).validate()

    log(f"measuring the fp32 matmul peak ({args.peak_size}^3, best of {args.peak_reps}) ...")
    peaks = [matmul_peak(args.peak_size, args.peak_reps)]
    specs = runner_specs(args, cfg, vocab)
    if args.one_process:
        runners: list[Runner | Remote] = [BUILDERS[f](args, vocab, cfg, m) for f, m in specs]
    else:
        log(f"starting {len(specs)} worker processes, one per model ...")
        runners = [start_remote(f, m, args, vocab, cfg, batches) for f, m in specs]
    for r in runners:
        log(f"warm-up: {r.name} ({args.warmup} step{'s' * (args.warmup != 1)}) ...")
        r.warm_up(batches, args.warmup)
    if args.steps is None:  # one more untimed step each tells how many make a round of about --round-s seconds
        slowest = max(r.timed(batches, args.warmup, 1) for r in runners)
        args.steps = max(1, round(args.round_s / slowest))

    # Rounds: every model in turn, the order reversed every other round; a quick matmul probe between rounds.
    quick = min(args.peak_size, 2048)
    probes = [matmul_peak(quick, 3)]
    for k in range(args.rounds):
        for r in runners if k % 2 == 0 else runners[::-1]:
            r.round_s.append(r.timed(batches, args.warmup + k * args.steps, args.steps))
        probes.append(matmul_peak(quick, 3))
        log(f"round {k + 1}/{args.rounds}: " + ", ".join(f"{r.name} {B * T / r.round_s[-1]:,.0f}" for r in runners)
            + f" tok/s; matmul probe {probes[-1] / 1e9:.1f} GFLOP/s")
    for r in runners:
        if isinstance(r, Remote):
            r.close()
    peaks.append(matmul_peak(args.peak_size, args.peak_reps))
    peak = max(peaks + probes)
    steady = [k for k in range(args.rounds) if min(probes[k], probes[k + 1]) >= args.steady * max(probes)]
    used = steady if len(steady) >= 3 else list(range(args.rounds))

    rows = []
    for r in runners:
        tps = [B * T / r.round_s[k] for k in used]
        med = statistics.median(tps)
        # Each round against the better of the probes either side of it: how close to the machine of the moment.
        local = [B * T / r.round_s[k] * r.flops_attn / max(probes[k], probes[k + 1]) for k in used]
        rows.append({"name": r.name, "family": r.family, "mode": r.mode, "tokens_per_s": med,
                     "tokens_per_s_min": min(tps), "tokens_per_s_max": max(tps), "ms_per_step": 1e3 * B * T / med,
                     "setup_s": r.setup_s, "flops_per_token_6n": r.flops_6n, "flops_per_token_attn": r.flops_attn,
                     "flops_6n": med * r.flops_6n, "flops_attn": med * r.flops_attn,
                     "frac_peak_6n": med * r.flops_6n / peak, "frac_peak_attn": med * r.flops_attn / peak,
                     "frac_probe_attn": statistics.median(local),
                     "round_tokens_per_s": [B * T / s for s in r.round_s]})
    index = {r.name: i for i, r in enumerate(runners)}

    def best(family: str) -> int | None:
        """The row of a family's fastest mode; None when the family was not timed."""
        found = [i for i, r in enumerate(rows) if r["family"] == family]
        return max(found, key=lambda i: rows[i]["tokens_per_s"]) if found else None

    def compare(i: int, j: int, what: str) -> dict:
        """Runner i against runner j: the ratio of their medians, and the median over the used rounds of i's
        speed over j's in the same round (machine drift between rounds cancels)."""
        return {"what": what, "a": rows[i]["name"], "b": rows[j]["name"],
                "ratio": rows[i]["tokens_per_s"] / rows[j]["tokens_per_s"],
                "paired": statistics.median(runners[j].round_s[k] / runners[i].round_s[k] for k in used)}

    # Each rival as its users run it by default (eager), then with nothing of nanolm compiled, then each compiled.
    rivals = [(f, mode) for mode in ("eager", "compiled") for f in ("HF", "nanoGPT")]
    comparisons = []
    for family, mode in rivals:
        rival = next((i for i, r in enumerate(runners) if r.family == family and r.mode == mode), None)
        if rival is None:
            continue
        if mode == "eager":
            comparisons.append(compare(index["nanolm"], rival, "nanolm train's step vs the rival eager"))
            if "nanolm eager" in index:
                comparisons.append(compare(index["nanolm eager"], rival, "both eager, nothing compiled"))
        else:
            comparisons.append(compare(index["nanolm compiled"], rival, "both compiled whole"))
    i_nano, i_hf, i_ng = best("nanolm"), best("HF"), best("nanoGPT")
    nano, hf = rows[i_nano], rows[i_hf]
    default = rows[index["nanolm"]]
    result = {
        "preset": args.preset, "batch_size": B, "block_size": T, "vocab_size": vocab,
        "rounds": args.rounds, "steps_per_round": args.steps, "warmup": args.warmup, "rounds_used": used,
        "threads": torch.get_num_threads(), "cpu_time": args.cpu_time, "torch": torch.__version__,
        "processes": "one" if args.one_process else "one per model",
        "machine": platform.processor() or platform.machine(),
        "peak_flops": peak, "peak_flops_start_end": peaks, "probe_flops": probes,
        "models": rows, "comparisons": comparisons, "best_nanolm": nano["name"], "best_hf": hf["name"],
        "ratio": nano["tokens_per_s"] / hf["tokens_per_s"], "ratio_paired": compare(i_nano, i_hf, "best")["paired"],
        "nanolm_frac_peak_6n": default["frac_peak_6n"], "nanolm_frac_peak_attn": default["frac_peak_attn"],
        "nanogpt": None if nanogpt is None else str(Path(nanogpt.__file__).resolve()),
    }
    if i_ng is not None:
        result.update(best_nanogpt=rows[i_ng]["name"], ratio_nanogpt=nano["tokens_per_s"] / rows[i_ng]["tokens_per_s"],
                      ratio_nanogpt_paired=compare(i_nano, i_ng, "best")["paired"])
    try:
        import transformers

        result["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - build_hf would have failed first
        pass
    result["seconds"] = time.perf_counter() - t_start

    if args.json:
        print(json.dumps(result, indent=2))
        return result
    print()
    print(f"preset {args.preset}: batch {B} x {T} tokens, vocab {vocab}, {torch.get_num_threads()} threads"
          + (" timed by CPU time" if args.cpu_time else "") + ", "
          f"torch {torch.__version__}; {args.rounds} rounds x {args.steps} step(s) per model; medians over "
          + (f"the {len(used)} steady rounds" if used == steady else f"all rounds (only {len(steady)} steady)"))
    print("one process for every model (one C heap, the C library's allocator defaults)" if args.one_process else
          "each model in a process of its own, as its own script runs it: nanolm's with nanolm train's allocator "
          "policy (nanolm.allocator), the rivals' with the C library's defaults")
    print(f"matmul peak (fp32 mm, best measured): {peak / 1e9:.1f} GFLOP/s "
          f"({args.peak_size}^3 at start {peaks[0] / 1e9:.1f}, at end {peaks[1] / 1e9:.1f}; "
          f"probes between rounds {min(probes) / 1e9:.1f}-{max(probes) / 1e9:.1f})")
    how = "each block's norms and attention compiled" if "nanolm eager" in index else "eager"
    print(f"nanolm: the step nanolm train takes by default ({how}; compile_kernels=auto)")
    if nanogpt is None:
        print("nanoGPT: skipped (give --nanogpt PATH: nanoGPT's model.py or the folder of a clone of "
              "https://github.com/karpathy/nanoGPT)")
    else:
        print(f"nanoGPT: {result['nanogpt']}")
    header = (f"{'model':<24} {'tokens/s':>9} {'(min-max)':>13} {'ms/step':>8} {'warm-up s':>9} {'GFLOP/s 6N':>10} "
              f"{'%peak 6N':>8} {'%peak +attn':>11} {'%probe +attn':>12}")
    print(header)
    print("-" * len(header))
    for r in rows:
        spread = f"{r['tokens_per_s_min']:,.0f}-{r['tokens_per_s_max']:,.0f}"
        print(f"{r['name']:<24} {r['tokens_per_s']:>9,.0f} {spread:>13} {r['ms_per_step']:>8.0f} {r['setup_s']:>9.1f} "
              f"{r['flops_6n'] / 1e9:>10.1f} {r['frac_peak_6n']:>8.1%} {r['frac_peak_attn']:>11.1%} "
              f"{r['frac_probe_attn']:>12.1%}")
    print(f"nanolm FLOPs/token: 6N = {default['flops_per_token_6n'] / 1e6:.1f} M, "
          f"with attention {default['flops_per_token_attn'] / 1e6:.1f} M")
    for c in comparisons:
        print(f"{c['a']} / {c['b']}: {c['ratio']:.3f}x (paired per round {c['paired']:.3f}x)  [{c['what']}]")
    print(f"best vs best: {nano['name']} / {hf['name']} {result['ratio']:.3f}x (paired {result['ratio_paired']:.3f}x)"
          + (f"; / {result['best_nanogpt']} {result['ratio_nanogpt']:.3f}x (paired {result['ratio_nanogpt_paired']:.3f}x)"
             if i_ng is not None else ""))
    print(f"nanolm (train's step) at {default['frac_peak_6n']:.1%} of the measured peak (6N), "
          f"{default['frac_peak_attn']:.1%} with attention [{result['seconds']:.0f} s]")
    return result


if __name__ == "__main__":
    main()
