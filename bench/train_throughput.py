"""Training throughput: nanolm against Hugging Face GPT-2 of the same shape, and against this machine's matmul peak.

Builds nanolm at a preset and a randomly initialised ``GPT2LMHeadModel`` with the same width, depth, heads,
context and vocabulary (no download, dropout 0, SDPA attention), trains both with fused AdamW on the same
batches of real corpus tokens (forward, cross-entropy, backward, gradient clipping, optimizer step: the step
``nanolm train`` takes), and alternates between them in rounds, so that machine noise hits both alike.
It reports the median tokens/s of each, their ratio, and nanolm's achieved FLOP/s (6N, and 6N plus attention)
as a fraction of the fp32 matmul peak measured here. With --compile it also times both under torch.compile
and compares each model in its better mode.

A quick matmul probe runs between rounds. On a shared (virtual) machine whose speed drifts, rounds bracketed
by probes well below the best one are "unsteady"; the medians use the steady rounds when there are at least
three of them (--steady 0 uses every round).

    python bench/train_throughput.py [--preset small] [--batch-size 16] [--rounds 7] [--compile] [--json]

Needs the ``bench`` extra (transformers): pip install -e ".[bench]"
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from nanolm.config import TrainConfig
from nanolm.data import corpus_data, eval_batches
from nanolm.model import GPT, PRESETS, preset_config
from nanolm.train import build_optimizer

Batch = tuple[torch.Tensor, torch.Tensor]


def matmul_peak(n: int, reps: int) -> float:
    """Best-of-reps FLOP/s of an n x n by n x n fp32 torch.mm."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up: allocation, thread pool, BLAS dispatch
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best


@dataclass
class Runner:
    """One model in one mode: a training step on a batch, and its seconds per step in each round."""

    name: str
    family: str  # "nanolm", "HF" or "variant" (an experiment, left out of the headline)
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    logits: Callable[[torch.Tensor], torch.Tensor]  # idx [B, T] -> logits [B, T, V]
    grad_clip: float
    flops_6n: float  # 6 * non-embedding parameters, per token
    flops_attn: float  # 6N plus the attention term, per token
    setup_s: float = 0.0  # warm-up time (includes compilation under torch.compile)
    round_s: list[float] = field(default_factory=list)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        logits = self.logits(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """nanolm's parameter groups (matrices decay, vectors do not), for the HF model's optimizer."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def build_nanolm(args: argparse.Namespace, vocab: int, cfg: TrainConfig, mode: str) -> Runner:
    """mode: "eager", "compiled" (torch.compile of the whole model), or "regional" (an experiment: eager, but
    each RMSNorm and each attention module compiled on its own, which fuses the norms' and rotary's
    elementwise passes while the model stays an eager module)."""
    torch.manual_seed(args.seed)
    model = GPT(preset_config(args.preset, vocab_size=vocab, block_size=args.block_size)).train()
    optimizer = build_optimizer(model, cfg, torch.device("cpu"))
    fwd = torch.compile(model) if mode == "compiled" else model
    if mode == "regional":
        for block in model.blocks:
            for module in (block.ln1, block.ln2, block.attn):
                module.compile(dynamic=False)
        model.ln_final.compile(dynamic=False)
    T = model.cfg.block_size
    name, family = {"eager": ("nanolm", "nanolm"), "compiled": ("nanolm compiled", "nanolm"),
                    "regional": ("nanolm, norms+attn compiled", "variant")}[mode]
    return Runner(name, family, model, optimizer, lambda x: fwd(x)[0], cfg.grad_clip,
                  model.flops_per_token(T, with_attention=False), model.flops_per_token(T))


def build_hf(args: argparse.Namespace, vocab: int, cfg: TrainConfig, mode: str) -> Runner:
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
    # Our own loss on the same (x, y) pairs as nanolm; HF's labels= path would shift and copy the logits.
    return Runner(name, "HF", model, optimizer, lambda x: fwd(input_ids=x).logits, cfg.grad_clip, 6.0 * n, 6.0 * n + attn)


def time_steps(runner: Runner, batches: list[Batch], start: int, steps: int) -> float:
    """Seconds per training step: the median over `steps` steps, each timed alone (a stall of the shared
    machine spoils one step, not the round)."""
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        runner.step(*batches[(start + i) % len(batches)])
        times.append(time.perf_counter() - t0)
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
    p.add_argument("--compile", action="store_true", help="also time both models under torch.compile")
    p.add_argument("--variants", action="store_true",
                   help="also time an experimental nanolm (norms and attention compiled one module at a time)")
    p.add_argument("--steady", type=float, default=0.85,
                   help="a round is steady when the probes either side of it reach this fraction of the best probe")
    p.add_argument("--peak-size", type=int, default=4096, help="n of the n x n fp32 matmul that measures the peak")
    p.add_argument("--peak-reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON dict (progress goes to stderr)")
    args = p.parse_args(argv)
    for name in ("batch_size", "rounds", "steps", "peak_size", "peak_reps", "corpus_lines", "round_s"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    if args.warmup < 0 or not 0 <= args.steady <= 1:
        p.error("--warmup must be >= 0 and --steady in [0, 1]")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))
    t_start = time.perf_counter()

    data = corpus_data(args.corpus_lines)
    vocab = args.vocab or data.tokenizer.vocab_size
    T = args.block_size or PRESETS[args.preset]["block_size"]
    B = args.batch_size
    tokens = data.train if vocab >= data.tokenizer.vocab_size else data.train % vocab
    batches = eval_batches(tokens, T, B, 16, seed=args.seed)  # random windows, used in turn by every model
    cfg = TrainConfig(preset=args.preset, batch_size=B, block_size=args.block_size).validate()

    log(f"measuring the fp32 matmul peak ({args.peak_size}^3, best of {args.peak_reps}) ...")
    peaks = [matmul_peak(args.peak_size, args.peak_reps)]
    modes = ["eager", "compiled"] if args.compile else ["eager"]
    runners = [build(args, vocab, cfg, mode) for mode in modes for build in (build_nanolm, build_hf)]
    if args.variants:
        runners.append(build_nanolm(args, vocab, cfg, "regional"))
    for r in runners:
        log(f"warm-up: {r.name} ({args.warmup} step{'s' * (args.warmup != 1)}) ...")
        t0 = time.perf_counter()
        for i in range(args.warmup):
            r.step(*batches[i])
        r.setup_s = time.perf_counter() - t0
    if args.steps is None:  # one more untimed step each tells how many make a round of about --round-s seconds
        slowest = max(time_steps(r, batches, args.warmup, 1) for r in runners)
        args.steps = max(1, round(args.round_s / slowest))

    # Rounds: every model in turn, the order reversed every other round; a quick matmul probe between rounds.
    quick = min(args.peak_size, 2048)
    probes = [matmul_peak(quick, 3)]
    for k in range(args.rounds):
        for r in runners if k % 2 == 0 else runners[::-1]:
            r.round_s.append(time_steps(r, batches, args.warmup + k * args.steps, args.steps))
        probes.append(matmul_peak(quick, 3))
        log(f"round {k + 1}/{args.rounds}: " + ", ".join(f"{r.name} {B * T / r.round_s[-1]:,.0f}" for r in runners)
            + f" tok/s; matmul probe {probes[-1] / 1e9:.1f} GFLOP/s")
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
        rows.append({"name": r.name, "family": r.family, "tokens_per_s": med, "tokens_per_s_min": min(tps),
                     "tokens_per_s_max": max(tps), "ms_per_step": 1e3 * B * T / med, "setup_s": r.setup_s,
                     "flops_per_token_6n": r.flops_6n, "flops_per_token_attn": r.flops_attn,
                     "flops_6n": med * r.flops_6n, "flops_attn": med * r.flops_attn,
                     "frac_peak_6n": med * r.flops_6n / peak, "frac_peak_attn": med * r.flops_attn / peak,
                     "frac_probe_attn": statistics.median(local),
                     "round_tokens_per_s": [B * T / s for s in r.round_s]})

    def best(family: str) -> int:
        return max((i for i, r in enumerate(rows) if r["family"] == family), key=lambda i: rows[i]["tokens_per_s"])

    def paired(i: int, j: int) -> float:
        """Median over the used rounds of runner i's speed over runner j's in the same round."""
        return statistics.median(runners[j].round_s[k] / runners[i].round_s[k] for k in used)

    i_nano, i_hf = best("nanolm"), best("HF")
    nano, hf = rows[i_nano], rows[i_hf]
    result = {
        "preset": args.preset, "batch_size": B, "block_size": T, "vocab_size": vocab,
        "rounds": args.rounds, "steps_per_round": args.steps, "warmup": args.warmup, "rounds_used": used,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        "peak_flops": peak, "peak_flops_start_end": peaks, "probe_flops": probes,
        "models": rows, "best_nanolm": nano["name"], "best_hf": hf["name"],
        "ratio": nano["tokens_per_s"] / hf["tokens_per_s"], "ratio_paired": paired(i_nano, i_hf),
        "ratio_eager": rows[0]["tokens_per_s"] / rows[1]["tokens_per_s"], "ratio_eager_paired": paired(0, 1),
        "nanolm_frac_peak_6n": nano["frac_peak_6n"], "nanolm_frac_peak_attn": nano["frac_peak_attn"],
    }
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
    print(f"preset {args.preset}: batch {B} x {T} tokens, vocab {vocab}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}; {args.rounds} rounds x {args.steps} step(s) per model; medians over "
          + (f"the {len(used)} steady rounds" if used == steady else f"all rounds (only {len(steady)} steady)"))
    print(f"matmul peak (fp32 mm, best measured): {peak / 1e9:.1f} GFLOP/s "
          f"({args.peak_size}^3 at start {peaks[0] / 1e9:.1f}, at end {peaks[1] / 1e9:.1f}; "
          f"probes between rounds {min(probes) / 1e9:.1f}-{max(probes) / 1e9:.1f})")
    header = (f"{'model':<30} {'tokens/s':>9} {'(min-max)':>13} {'ms/step':>8} {'warm-up s':>9} {'GFLOP/s 6N':>10} "
              f"{'%peak 6N':>8} {'%peak +attn':>11} {'%probe +attn':>12}")
    print(header)
    print("-" * len(header))
    for r in rows:
        spread = f"{r['tokens_per_s_min']:,.0f}-{r['tokens_per_s_max']:,.0f}"
        print(f"{r['name']:<30} {r['tokens_per_s']:>9,.0f} {spread:>13} {r['ms_per_step']:>8.0f} {r['setup_s']:>9.1f} "
              f"{r['flops_6n'] / 1e9:>10.1f} {r['frac_peak_6n']:>8.1%} {r['frac_peak_attn']:>11.1%} "
              f"{r['frac_probe_attn']:>12.1%}")
    print(f"nanolm FLOPs/token: 6N = {nano['flops_per_token_6n'] / 1e6:.1f} M, "
          f"with attention {nano['flops_per_token_attn'] / 1e6:.1f} M")
    if args.compile:
        print(f"eager vs eager: nanolm/HF {result['ratio_eager']:.3f}x (paired per round {result['ratio_eager_paired']:.3f}x)")
    for r in rows:
        if r["family"] == "variant":
            i = rows.index(r)
            print(f"{r['name']}: {paired(i, 0):.3f}x nanolm eager, {paired(i, i_hf):.3f}x {hf['name']} (paired)")
    print(f"nanolm/HF tokens/s: {result['ratio']:.3f}x (paired per round {result['ratio_paired']:.3f}x), "
          f"{nano['name']} vs {hf['name']}; nanolm at {nano['frac_peak_6n']:.1%} of the measured peak (6N), "
          f"{nano['frac_peak_attn']:.1%} with attention [{result['seconds']:.0f} s]")
    return result


if __name__ == "__main__":
    main()
