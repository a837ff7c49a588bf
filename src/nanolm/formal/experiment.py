"""Depth generalization on Dyck-k: train on shallow strings, test on deeper ones.

Task: next-token-set prediction. The input is a Dyck string x_1..x_n (without END); the target at
position t is the set of symbols allowed after x_1..x_t in unbounded Dyck-k (any open, the close of
the top bracket, END at depth 0), as a multi-hot over the 2k + 1 symbols; the loss is binary
cross-entropy per symbol. A position is right when every one of the 2k + 1 sigmoid outputs is on the
right side of ½; a sequence is right when every position is.

Training strings come from the Dyck-(k, train_depth) generator (depth 1..train_depth, length ≤
max_len, with a small p_end so the lengths spread up to max_len). Test strings for each depth d =
1..test_depth come from the Dyck-(k, d) generator conditioned on reaching depth d, with the same
length cap, so a deeper test is not simply a longer one. The test sets are the same for every model
and seed (paired comparison).

Models: a ReLU-RNN and an LSTM (embedding -> recurrent layer -> linear), and a small nanolm GPT
(rotary positions, block_size = max_len, its vocabulary head used as the 2k + 1 multi-label outputs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import UserError
from .dyck import DepthStats, check_km, depth_stats, generate, next_token_sets
from .precision import PrecisionTable, precision_table

MODELS = ("relu-rnn", "lstm", "transformer")


@dataclass
class DyckExperimentConfig:
    k: int = 2
    train_depth: int = 4
    test_depth: int = 8
    seeds: int = 3
    models: tuple[str, ...] = MODELS
    hidden: int = 32  # recurrent hidden size; the transformer's d_model
    layers: int = 2  # transformer layers (the recurrent models have one layer)
    heads: int = 4
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    train_sequences: int = 2000
    eval_sequences: int = 100  # per depth
    max_len: int = 128  # tokens per string (END included); also the transformer's block_size
    train_p_end: float = 0.1
    test_p_end: float = 0.5
    threads: int = 1  # 2 threads on a 2-core machine that is also busy is 10-50x slower (OpenMP waits)

    def validate(self) -> DyckExperimentConfig:
        check_km(self.k)
        if self.train_depth <= 0:
            raise UserError(f"--train-depth must be a positive integer, got {self.train_depth}")
        if self.test_depth < self.train_depth:
            raise UserError(f"--test-depth ({self.test_depth}) must be >= --train-depth ({self.train_depth})")
        for name in ("seeds", "hidden", "layers", "heads", "steps", "batch_size", "train_sequences", "eval_sequences", "threads"):
            if getattr(self, name) <= 0:
                raise UserError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(self, name)}")
        if "transformer" in self.models and (self.hidden % self.heads or (self.hidden // self.heads) % 2):
            raise UserError(f"--hidden {self.hidden} must split into {self.heads} heads of even size (rotary positions)")
        if self.max_len < 2 * self.test_depth + 1:
            raise UserError(
                f"--max-len {self.max_len} is too short for depth {self.test_depth}; use at least {2 * self.test_depth + 1}"
            )
        unknown = [m for m in self.models if m not in MODELS]
        if unknown or not self.models:
            raise UserError(f"unknown model {unknown[0] if unknown else ''!r}; choose from {', '.join(MODELS)}")
        if not self.lr > 0:
            raise UserError(f"--lr must be > 0, got {self.lr}")
        return self


@dataclass
class TrainedModel:
    model: str
    seed: int
    parameters: int
    final_loss: float  # mean BCE over the last 50 steps
    seconds: float


@dataclass
class DepthAccuracy:
    model: str
    seed: int
    depth: int  # maximum depth of the test strings
    position_accuracy: float
    sequence_accuracy: float
    sequences: int
    positions: int
    # Per-position accuracy by the stack depth after the position (the depth the model must track there).
    by_stack_depth: dict[int, float] = field(default_factory=dict)


@dataclass
class DepthSummary:
    """One model at one depth, over seeds."""

    model: str
    depth: int
    position_mean: float
    position_min: float
    position_max: float
    sequence_mean: float
    sequence_min: float
    sequence_max: float


@dataclass
class StackDepthSummary:
    """One model on the deepest test strings, at the positions whose stack has a given depth, over seeds."""

    model: str
    stack_depth: int
    mean: float
    min: float
    max: float


@dataclass
class DyckExperimentResult:
    config: DyckExperimentConfig
    train_stats: DepthStats
    test_mean_length: dict[int, float]  # depth -> mean test string length
    runs: list[TrainedModel]
    points: list[DepthAccuracy]
    summary: list[DepthSummary]
    deepest_by_stack_depth: list[StackDepthSummary]  # where in the deepest strings the errors are
    precision: PrecisionTable
    seconds: float
    plot: Path | None = None


# ---- data ----------------------------------------------------------------------------------------


def encode_batch(seqs: Sequence[Sequence[int]], k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Strings ending with END -> (inputs [B, T] long, targets [B, T, 2k+1] float, mask [B, T] bool).
    Inputs drop the END; padding uses the END token (never an input otherwise) and is masked out.
    Every model here is causal, so padding after a string cannot change its outputs."""
    end = 2 * k
    bodies = [list(s[:-1]) if s and s[-1] == end else list(s) for s in seqs]
    T = max(1, max(len(b) for b in bodies))
    x = torch.full((len(bodies), T), end, dtype=torch.long)
    y = torch.zeros((len(bodies), T, 2 * k + 1), dtype=torch.float32)
    mask = torch.zeros((len(bodies), T), dtype=torch.bool)
    for i, b in enumerate(bodies):
        if not b:
            continue
        x[i, : len(b)] = torch.tensor(b)
        y[i, : len(b)] = torch.from_numpy(next_token_sets(b, k)[1:].astype(np.float32))  # after x_1..x_t, t ≥ 1
        mask[i, : len(b)] = True
    return x, y, mask


# ---- models --------------------------------------------------------------------------------------


class RecurrentTagger(nn.Module):
    """embedding -> one ReLU-RNN or LSTM layer -> linear: [B, T] -> logits [B, T, 2k+1]."""

    def __init__(self, kind: str, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        if kind == "relu-rnn":
            self.rnn: nn.Module = nn.RNN(hidden, hidden, nonlinearity="relu", batch_first=True)
        else:
            self.rnn = nn.LSTM(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(x))
        return self.head(out)


class TransformerTagger(nn.Module):
    """A nanolm GPT whose vocabulary head gives the 2k + 1 multi-label logits."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, block_size: int) -> None:
        super().__init__()
        from ..model import GPT, GPTConfig

        self.gpt = GPT(
            GPTConfig(vocab_size=vocab, block_size=block_size, n_layer=layers, n_head=heads, d_model=hidden, pos="rope")
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, _ = self.gpt(x)
        return logits


def build_model(name: str, cfg: DyckExperimentConfig) -> nn.Module:
    vocab = 2 * cfg.k + 1
    if name == "transformer":
        return TransformerTagger(vocab, cfg.hidden, cfg.layers, cfg.heads, cfg.max_len)
    return RecurrentTagger(name, vocab, cfg.hidden)


# ---- training and evaluation -------------------------------------------------------------------------


def _masked_bce(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    loss = F.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(-1)  # [B, T]
    return (loss * mask).sum() / mask.sum().clamp(min=1)


def train_model(name: str, cfg: DyckExperimentConfig, seed: int, train_seqs: list[list[int]]) -> tuple[nn.Module, TrainedModel]:
    torch.manual_seed(seed)
    model = build_model(name, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = np.random.default_rng(seed + 7919)
    # Length bucketing: a batch is a random window of the strings sorted by length, so it is padded
    # to about its own length rather than to the longest string (2-3x less compute at max_len 128).
    by_length = sorted(train_seqs, key=len)
    n_windows = max(1, len(by_length) - cfg.batch_size + 1)
    t0 = time.perf_counter()
    losses = []
    model.train()
    for step in range(cfg.steps):
        lo = int(rng.integers(0, n_windows))
        batch = by_length[lo : lo + cfg.batch_size]
        x, y, mask = encode_batch(batch, cfg.k)
        lr = cfg.lr * min(1.0, (step + 1) / 50) * 0.5 * (1 + np.cos(np.pi * step / cfg.steps))  # warm-up, cosine
        for g in opt.param_groups:
            g["lr"] = lr
        loss = _masked_bce(model(x), y, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # ReLU-RNNs explode without it
        opt.step()
        losses.append(loss.item())
    model.eval()
    info = TrainedModel(
        model=name,
        seed=seed,
        parameters=sum(p.numel() for p in model.parameters()),
        final_loss=float(np.mean(losses[-50:])),
        seconds=time.perf_counter() - t0,
    )
    return model, info


@torch.no_grad()
def evaluate(
    model: nn.Module,
    seqs: list[list[int]],
    k: int,
    batch_size: int = 256,
) -> tuple[float, float, int, dict[int, float]]:
    """(per-position accuracy, whole-sequence accuracy, positions, {stack depth: per-position accuracy})
    of exact next-token sets."""
    right_pos = total_pos = right_seq = 0
    right_at: dict[int, int] = {}
    total_at: dict[int, int] = {}
    for lo in range(0, len(seqs), batch_size):
        x, y, mask = encode_batch(seqs[lo : lo + batch_size], k)
        pred = model(x) > 0  # sigmoid > ½
        ok = (pred == (y > 0.5)).all(-1) | ~mask  # [B, T]; padding counts as right
        right_pos += int((ok & mask).sum())
        total_pos += int(mask.sum())
        right_seq += int(ok.all(-1).sum())
        depth = torch.cumsum((x < k).long() - ((x >= k) & (x < 2 * k)).long(), dim=1)  # stack depth after x_t
        for d in depth[mask].unique().tolist():
            sel = mask & (depth == d)
            right_at[d] = right_at.get(d, 0) + int(ok[sel].sum())
            total_at[d] = total_at.get(d, 0) + int(sel.sum())
    by_depth = {d: right_at[d] / total_at[d] for d in sorted(total_at)}
    return right_pos / max(total_pos, 1), right_seq / max(len(seqs), 1), total_pos, by_depth


def _test_set(cfg: DyckExperimentConfig, depth: int) -> list[list[int]]:
    """eval_sequences strings that reach exactly `depth`, at most max_len tokens long."""
    try:
        return generate(
            cfg.k, depth, cfg.eval_sequences, seed=1_000_003 + depth, p_end=cfg.test_p_end, max_len=cfg.max_len, min_depth=depth
        )
    except UserError:
        raise UserError(
            f"--max-len {cfg.max_len} leaves almost no room for strings of depth {depth}: "
            f"{cfg.eval_sequences} of them could not be sampled; use --max-len "
            f"{max(4 * depth + 8, cfg.max_len + 1)} or more, or a smaller --test-depth"
        ) from None


def run_dyck_experiment(
    cfg: DyckExperimentConfig,
    on_progress: Callable[[TrainedModel, list[DepthAccuracy]], None] | None = None,
) -> DyckExperimentResult:
    """Train each model on each seed and evaluate at every depth 1..test_depth."""
    cfg.validate()
    t0 = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(min(cfg.threads, threads))
    try:
        test_sets = {d: _test_set(cfg, d) for d in range(1, cfg.test_depth + 1)}
        runs, points = [], []
        train_stats = None
        for seed in range(cfg.seeds):
            train_seqs = generate(
                cfg.k, cfg.train_depth, cfg.train_sequences, seed=seed, p_end=cfg.train_p_end, max_len=cfg.max_len, min_depth=1
            )
            if train_stats is None:
                train_stats = depth_stats(train_seqs, cfg.k)
            for name in cfg.models:
                model, info = train_model(name, cfg, seed, train_seqs)
                got = []
                for d, seqs in test_sets.items():
                    pos, seq, n_pos, by_depth = evaluate(model, seqs, cfg.k)
                    got.append(DepthAccuracy(name, seed, d, pos, seq, len(seqs), n_pos, by_depth))
                runs.append(info)
                points.extend(got)
                if on_progress is not None:
                    on_progress(info, got)
    finally:
        torch.set_num_threads(threads)
    assert train_stats is not None
    return DyckExperimentResult(
        config=cfg,
        train_stats=train_stats,
        test_mean_length={d: float(np.mean([len(s) for s in seqs])) for d, seqs in test_sets.items()},
        runs=runs,
        points=points,
        summary=summarize(points),
        deepest_by_stack_depth=summarize_stack_depth([p for p in points if p.depth == cfg.test_depth]),
        precision=precision_table(cfg.k, (cfg.hidden,)),
        seconds=time.perf_counter() - t0,
    )


def summarize(points: list[DepthAccuracy]) -> list[DepthSummary]:
    out = []
    for name in dict.fromkeys(p.model for p in points):
        for d in sorted({p.depth for p in points if p.model == name}):
            sel = [p for p in points if p.model == name and p.depth == d]
            pos = [p.position_accuracy for p in sel]
            seq = [p.sequence_accuracy for p in sel]
            out.append(DepthSummary(name, d, float(np.mean(pos)), min(pos), max(pos), float(np.mean(seq)), min(seq), max(seq)))
    return out


def summarize_stack_depth(points: list[DepthAccuracy]) -> list[StackDepthSummary]:
    out = []
    for name in dict.fromkeys(p.model for p in points):
        sel = [p for p in points if p.model == name]
        for d in sorted({d for p in sel for d in p.by_stack_depth}):
            acc = [p.by_stack_depth[d] for p in sel if d in p.by_stack_depth]
            out.append(StackDepthSummary(name, d, float(np.mean(acc)), min(acc), max(acc)))
    return out


def experiment_figure(result: DyckExperimentResult) -> Any:
    """A matplotlib Figure: accuracy against depth, one line per model (mean over seeds) with a
    min–max band. Nothing is written; save it with nanolm.plots.save_figure."""
    from ..plots import pyplot

    cfg = result.config
    fig, axes = pyplot().subplots(1, 2, figsize=(10, 4), sharey=True)
    panels = (("position", "per-position accuracy (exact next-token set)"), ("sequence", "whole-sequence accuracy"))
    for ax, (key, title) in zip(axes, panels):
        for name in dict.fromkeys(s.model for s in result.summary):
            rows = [s for s in result.summary if s.model == name]
            depths = [s.depth for s in rows]
            mean = [getattr(s, f"{key}_mean") for s in rows]
            line = ax.plot(depths, mean, marker="o", label=name)[0]
            ax.fill_between(
                depths,
                [getattr(s, f"{key}_min") for s in rows],
                [getattr(s, f"{key}_max") for s in rows],
                color=line.get_color(),
                alpha=0.2,
                linewidth=0,
            )
        ax.axvline(cfg.train_depth + 0.5, color="grey", linestyle="--", linewidth=1, label="deepest training string")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("maximum depth of the test strings")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Dyck-{cfg.k}: trained on depth ≤ {cfg.train_depth}, {cfg.seeds} seeds (band: min–max)", fontsize=11)
    return fig
