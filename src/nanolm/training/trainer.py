"""One run's model, optimizer, batches and schedule (Trainer): a step, an evaluation, a checkpoint; and the
fixed-batch evaluation it uses."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.profiler import record_function

from ..allocator import reuse_freed_memory
from ..checkpoint import Checkpoint, load_optimizer, load_weights, rng_state, save_checkpoint, set_rng_state
from ..config import TrainConfig
from ..data import ReadReceipt, TokenData, eval_batches, window_loader
from ..device import autocast, autocast_dtype
from ..distributed import AllReduceTimer, Dist, per_rank_batch, wrap_ddp
from ..errors import UserError
from ..model import GPT, GPTConfig, compile_kernels
from ..seeding import seed_worker
from .optim import build_optimizer, kernels_compiled, lr_at
from .record import RunRecord


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device, dtype: torch.dtype | None
) -> float:
    """Mean loss over fixed batches, nats/token."""
    return float(loss_sum(model, batches, device, dtype)) / len(batches)


@torch.no_grad()
def loss_sum(
    model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device, dtype: torch.dtype | None
) -> torch.Tensor:
    """The sum of the batches' mean losses (nats/token), a 0-d tensor left on the device."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), device=device)
    for x, y in batches:
        with autocast(device, dtype):
            _, loss = model(x.to(device), y.to(device))
        total += loss.float()
    model.train(was_training)
    return total


def _worker_init(worker_id: int) -> None:
    """A DataLoader worker: seeded from torch's per-worker seed, and deaf to Ctrl-C, which the terminal sends
    to the whole process group; the training process decides when to stop (between steps)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seed_worker(worker_id)


class Trainer:
    """One run's model, optimizer, batches and schedule. `step` does one optimizer update (with
    gradient accumulation), `evaluate` runs the fixed eval batches, `checkpoint` saves all a resume needs.

    With a Dist of several ranks: `distribute` wraps the model in DistributedDataParallel (after every rank
    has built its own); each rank then reads its slice of every batch, the eval batches are shared out, and
    a checkpoint holds every rank's RNG state."""

    def __init__(
        self, cfg: TrainConfig, data: TokenData, model_cfg: GPTConfig, device: torch.device, dist: Dist | None = None
    ) -> None:
        self.cfg, self.data, self.device = cfg, data, device
        self.dist = dist or Dist(device=device)
        self.rank_batch = per_rank_batch(cfg.batch_size, self.dist.world_size)
        T, B = model_cfg.block_size, cfg.batch_size
        # Before anything is written: a split shorter than the context is a UserError here.
        self.val_set = eval_batches(data.val, T, B, cfg.eval_batches, seed=0)
        self.train_set = eval_batches(data.train, T, B, cfg.eval_batches, seed=1)
        self.model = GPT(model_cfg).to(device)
        self.optimizer = build_optimizer(self.model, cfg, device)
        self.dtype = autocast_dtype(cfg.autocast, device)
        if device.type == "cpu":  # each step's activations reuse the last step's pages (see nanolm.allocator)
            reuse_freed_memory()
        self.kernels_compiled = kernels_compiled(cfg, model_cfg, device)
        if self.kernels_compiled:
            compile_kernels(self.model)  # in place: this model only trains and evaluates, at fixed shapes
        self.fwd = torch.compile(self.model) if cfg.compile else self.model
        self.eval_fwd = self.fwd  # the ranks evaluate different batches: outside DDP, which expects lockstep
        self.ddp: torch.nn.Module | None = None
        self.allreduce_timer: AllReduceTimer | None = None
        self.receipt = ReadReceipt() if self.dist.distributed else None  # what this rank trained on
        self.pin = cfg.pin_memory if cfg.pin_memory is not None else device.type == "cuda"
        self.tokens_per_step = cfg.grad_accum * B * T  # the global batch's, summed over the ranks

    def distribute(self) -> None:
        """Wrap the model in DistributedDataParallel (a collective: every rank calls it, after its checks
        passed); rank 0's weights are broadcast. Nothing for one process."""
        if self.dist.distributed and self.ddp is None:
            self.ddp, self.allreduce_timer = wrap_ddp(self.model, self.dist)
            self.fwd = torch.compile(self.ddp) if self.cfg.compile else self.ddp

    def restore(self, ckpt: Checkpoint, run_dir: Path) -> None:
        """Weights, optimizer state and every RNG (this rank's) from a checkpoint."""
        load_weights(ckpt, self.model)
        load_optimizer(ckpt, self.optimizer)
        try:
            per_rank = ckpt.state.get("rng_ranks")
            set_rng_state(per_rank[self.dist.rank] if per_rank else ckpt.state["rng"])
        except (RuntimeError, TypeError, ValueError) as e:
            raise UserError(
                f"--resume {run_dir}: the checkpoint's RNG state is damaged ({e}); resume an intact run, or start a new one"
            ) from None

    def batches(self, start: int, last: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The training batches of steps start+1 .. last: the same samples whatever the resume point."""
        A, B = self.cfg.grad_accum, self.cfg.batch_size
        loader = window_loader(
            self.data.train,
            self.model.cfg.block_size,
            B,
            seed=self.cfg.seed,
            start=start * A * B,
            n_batches=(last - start) * A,
            num_workers=self.cfg.num_workers,
            pin_memory=self.pin,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
        )
        if self.cfg.num_workers:
            loader.worker_init_fn = _worker_init
        return iter(loader)

    def step(self, step: int, batches: Iterator) -> tuple[float, torch.Tensor, torch.Tensor]:
        """One optimizer update at `step` (1-based): (lr, summed loss, gradient norm), both left on the device."""
        lr = lr_at(step - 1, self.cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        A = self.cfg.grad_accum
        step_loss = torch.zeros((), device=self.device)
        for i in range(A):
            with record_function("data"):
                x, y = next(batches)
                if self.receipt is not None:
                    self.receipt.add(x)
                x, y = x.to(self.device, non_blocking=self.pin), y.to(self.device, non_blocking=self.pin)
            # DDP all-reduces the gradients in the last micro-batch's backward only: the others accumulate locally
            with self._sync_gradients(i == A - 1):
                with record_function("forward"), autocast(self.device, self.dtype):
                    _, loss = self.fwd(x, y)
                    loss = loss / A
                with record_function("backward"):
                    loss.backward()
            step_loss += loss.detach()
        with record_function("optimizer"):
            norm = (
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
                if self.cfg.grad_clip
                else torch.zeros((), device=self.device)
            )
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return lr, step_loss, norm.detach().float()

    def _sync_gradients(self, sync: bool) -> contextlib.AbstractContextManager:
        return self.ddp.no_sync() if self.ddp is not None and not sync else contextlib.nullcontext()

    def evaluate(self) -> tuple[float, float]:
        """(val loss, train loss) on the fixed eval batches, nats/token. Data-parallel: rank r evaluates
        batches r, r + world, ... and the sums are added over the ranks."""
        if not self.dist.distributed:
            return (
                evaluate(self.eval_fwd, self.val_set, self.device, self.dtype),
                evaluate(self.eval_fwd, self.train_set, self.device, self.dtype),
            )
        r, w = self.dist.rank, self.dist.world_size
        sums = torch.stack(
            [loss_sum(self.eval_fwd, batches[r::w], self.device, self.dtype) for batches in (self.val_set, self.train_set)]
        )
        val, train = self.dist.sum_(sums).tolist()
        return val / len(self.val_set), train / len(self.train_set)

    def take_allreduce_seconds(self) -> float | None:
        """Seconds this rank spent in gradient all-reduce since the last call (gloo only; else None)."""
        return self.allreduce_timer.take() if self.allreduce_timer is not None else None

    def checkpoint(self, record: RunRecord, step: int) -> None:
        """Everything a resume needs at `step`, written atomically by rank 0; the manifest then points at it.
        Every rank calls it (its RNG state is gathered); the data position is global, the same for any world size."""
        A, B = self.cfg.grad_accum, self.cfg.batch_size
        rngs = self.dist.gather(rng_state())
        if self.dist.is_main:
            state = {
                "data_position": step * A * B,
                "config": self.cfg.to_dict(),
                "model_config": self.model.cfg.to_dict(),
                "rng": rngs[0],
                "data": {"version": self.data.version, "sha256": self.data.sha256},
                "world_size": self.dist.world_size,
            }
            if self.dist.distributed:
                state.update(rng_ranks=rngs, backend=self.dist.backend)
            save_checkpoint(
                record.run_dir, step, self.model, self.optimizer, self.data.tokenizer, state, self.cfg.keep_checkpoints
            )
        record.checkpointed(step)
