"""Training: AdamW with warmup + cosine LR, gradient clipping and accumulation, periodic eval,
bf16 autocast on CUDA, optional torch.compile; every run recorded and resumable bit for bit.

Data-parallel: started by torchrun, srun or ``nanolm train --nproc N`` (launch_training), each process is a
rank of a DistributedDataParallel run (nanolm.distributed: gloo on CPU, NCCL on CUDA). The config's
batch_size is the global batch of one micro-step (each rank takes batch_size / world size, its own disjoint
slice of the sample stream), so the global batch per step is per-rank batch x ranks x grad_accum whatever
the world size, and a 2-process run computes what the 1-process run does, up to float rounding. Rank 0
writes the run's folder (manifest, metrics, checkpoints); every rank resumes from it; the ranks vote after
each step, so they stop (Ctrl-C, SIGTERM) and checkpoint at the same step.

The loop never syncs with the device on an ordinary step: per-step losses and gradient norms stay
on the device and are checked for NaN/inf when the loop logs, evaluates or checkpoints, which is
also when the run is stopped on divergence (naming the first bad step)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import signal
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from .allocator import reuse_freed_memory
from .checkpoint import (
    TENSOR_FILES,
    Checkpoint,
    load_optimizer,
    load_weights,
    read_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    verify_file,
)
from .config import TrainConfig, config_from_dict
from .data import ReadReceipt, TokenData, eval_batches, load_data, window_loader
from .device import autocast, autocast_dtype, resolve_device
from .distributed import (
    PEER_LOST_EXIT,
    AllReduceTimer,
    Dist,
    LaunchFailed,
    LaunchStopped,
    RankFailure,
    check_nproc,
    is_peer_failure,
    launch,
    launch_env,
    peer_failure_line,
    per_rank_batch,
    resolve_backend,
    setup,
    teardown,
    timeout_seconds,
    wrap_ddp,
)
from .errors import RunStopped, UserError
from .model import GPT, GPTConfig, compile_kernels
from .runs import (
    METRICS,
    Manifest,
    MetricsLog,
    RunFinal,
    RunStatus,
    command_line,
    environment_info,
    find_launched_run,
    git_info,
    new_run_dir,
    owner_info,
    process_gone,
    read_manifest,
    write_manifest,
)
from .seeding import seed_everything, seed_worker
from .tokenizers import Tokenizer
from .trackers import Tracker, make_tracker

# Keys that may change when a run is resumed: they do not change what is computed.
RESUMABLE_CHANGES = {"steps", "tracker", "eval_every", "log_every", "ckpt_every", "ckpt_seconds", "keep_checkpoints",
                     "num_workers", "pin_memory", "device", "compile", "compile_kernels", "runs_dir"}


class TrainingDiverged(RunStopped):
    """The loss or the gradient norm became NaN or inf: a result about the config, not a user's mistake."""

    exit_code = 1


class TrainingInterrupted(RunStopped):
    """Ctrl-C: the run checkpointed and can be resumed."""

    exit_code = 130


class RankLost(RunStopped):
    """A data-parallel rank lost contact with the others (one died, or hung past the timeout); the last
    checkpoint stands. Its own exit code, so a launcher can tell this rank from the one that failed first."""

    exit_code = PEER_LOST_EXIT


class RanksFailed(RunStopped):
    """A launch of several ranks ended badly (nanolm train --nproc). said_by_rank: the failed rank printed
    its own line already (the caller need not repeat it); exit_code is then that rank's."""

    def __init__(self, message: str, exit_code: int = 1, said_by_rank: bool = False) -> None:
        super().__init__(message)
        self.exit_code, self.said_by_rank = exit_code, said_by_rank


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    train_loss: float  # on the fixed train eval batches, nats/token
    val_loss: float  # on the fixed val eval batches, nats/token
    unigram_entropy: float  # nats/token of the train tokens: the no-context baseline
    tokens_per_s: float
    seconds: float
    status: RunStatus  # finished, or stopped (at stop_at)
    notes: list[str] = field(default_factory=list)  # what the user should know (see train's on_note)
    rank: int = 0  # this process's rank in a data-parallel run (rank 0 wrote the run's files)
    world_size: int = 1  # the processes that trained it together
    steady_tokens_per_s: float | None = None  # after warm-up and compile: the median step's (tokens_per_s averages in both)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup over warmup_steps, then cosine decay to lr * min_lr_ratio at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def build_optimizer(model: GPT, cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; matrices (and embeddings) decay, gains do not. Fused where the device supports it."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kind = {"fused": True} if device.type in ("cuda", "cpu") else {"foreach": True}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), **kind)


# compile_kernels=auto compiles each block's norms and attention on a CPU for models at least this wide: there it was
# measured 5-9% faster a step at the small preset (bench/train_throughput.py), which pays for the ~10 s of compiling
# (once per process and shape) within the first few dozen steps. Not for the narrower models of the demo and the
# tests, whose runs are over before the compile pays off, nor on CUDA or MPS, where it was not measured.
KERNELS_MIN_D_MODEL = 256


def kernels_compiled(cfg: TrainConfig, model_cfg: GPTConfig, device: torch.device) -> bool:
    """Whether a run compiles each block's norms and attention (nanolm.model.compile_kernels): compile_kernels
    true, or auto where it pays (see KERNELS_MIN_D_MODEL); never with compile=true, which compiles the whole
    model. Where torch.compile cannot build kernels (no C++ compiler on a CPU), auto stays eager and true is
    a UserError."""
    if cfg.compile or cfg.compile_kernels is False:
        return False
    if cfg.compile_kernels == "auto" and not (device.type == "cpu" and model_cfg.d_model >= KERNELS_MIN_D_MODEL):
        return False
    if compiler_works(device.type):
        return True
    if cfg.compile_kernels is True:
        raise UserError(f"compile_kernels=true, but torch.compile cannot build kernels for {device.type} here "
                        "(on a CPU it needs a C++ compiler, such as g++); set compile_kernels=auto or false")
    return False


@functools.cache
def compiler_works(device_type: str) -> bool:
    """Whether torch.compile builds and runs a kernel on this device type: a small norm, forward and backward,
    compiled once per process (a second or two). Any failure (no C++ compiler, no writable cache folder) is a
    no; the kernels of a run then stay eager code."""

    def probe(x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.size(-1),)) * x

    try:
        x = torch.linspace(-1.0, 1.0, 16, device=device_type).view(2, 8).requires_grad_()
        torch.compile(probe, dynamic=False)(x).sum().backward()
        return x.grad is not None and bool(torch.isfinite(x.grad).all())
    except Exception:  # whatever the compiler raises (its errors have no common class), the answer is no
        return False


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]],
             device: torch.device, dtype: torch.dtype | None) -> float:
    """Mean loss over fixed batches, nats/token."""
    return float(loss_sum(model, batches, device, dtype)) / len(batches)


@torch.no_grad()
def loss_sum(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]],
             device: torch.device, dtype: torch.dtype | None) -> torch.Tensor:
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


class Progress:
    """A rich progress bar on stderr (step, loss, tokens/s), or nothing."""

    def __init__(self, enabled: bool, total: int, start: int) -> None:
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tps]} tok/s"),
                                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                    console=Console(stderr=True), transient=False)
            self.task = self.bar.add_task("train", total=total, completed=start, loss="-", tps="-")
            self.bar.start()

    def update(self, step: int, loss: float | None = None, tokens_per_s: float | None = None) -> None:
        if self.bar is not None:
            fields = {}
            if loss is not None:
                fields["loss"] = f"{loss:.3f}"
            if tokens_per_s is not None:
                fields["tps"] = f"{tokens_per_s:,.0f}"
            self.bar.update(self.task, completed=step, **fields)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()



# ---- the run's record: manifest, metrics log, tracker ----------------------------------------------

class RunRecord:
    """A run's folder as training writes it: the manifest, the metrics log and the tracker. Every
    change of the manifest's status (running -> finished / stopped / diverged / interrupted) happens
    here, and each is written before the tracker hears of it.

    In a data-parallel run only rank 0's record writes; the other ranks hold a follower (writes=False) that
    knows the folder and the last checkpoint's step, for their messages."""

    def __init__(self, run_dir: Path, manifest: Manifest, metrics: MetricsLog | None, tracker: Tracker,
                 writes: bool = True, resume_command: str | None = None) -> None:
        self.run_dir, self.manifest, self.metrics, self.tracker = run_dir, manifest, metrics, tracker
        self.writes = writes
        self.resume_command = resume_command or f"nanolm train --resume {run_dir}"

    @classmethod
    def create(cls, cfg: TrainConfig, model: GPT, data: TokenData, determinism: dict, device: torch.device) -> RunRecord:
        """A new run folder under cfg.runs_dir and its first manifest."""
        tracker = make_tracker(cfg.tracker)  # a missing tracker extra is reported before a folder exists
        run_dir = new_run_dir(cfg.runs_dir, cfg.name)
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        manifest = Manifest(
            name=cfg.name, run_dir=str(run_dir), created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), command=command_line(),
            config=cfg.to_dict(), model_config=model.cfg.to_dict(), n_params=model.num_params(),
            n_params_non_embedding=model.num_params(exclude_embeddings=True), seed=cfg.seed, determinism=determinism,
            git=git_info(), data=data.describe(), unigram_entropy=data.unigram_entropy(),
            environment=environment_info(device_name), owner=owner_info())
        return cls(run_dir, manifest, MetricsLog(run_dir / METRICS), tracker)

    @classmethod
    def resume(cls, run_dir: Path, manifest: Manifest, cfg: TrainConfig, from_step: int,
               notes: list[str], compiled_kernels: bool = False) -> RunRecord:
        """The run's record, its metrics log trimmed to from_step (what came after the checkpoint is redone).
        The manifest takes the resumed config (only RESUMABLE_CHANGES can differ), this process as its owner
        and the folder's current place; the resume entry says what changed."""
        tracker = make_tracker(cfg.tracker)
        if not (run_dir / METRICS).is_file() and from_step > 0:
            notes.append(f"{run_dir / METRICS} is missing: the history before step {from_step} is gone; "
                         "the log restarts at the resumed steps")
        # Read (and trim) the metrics before the manifest says "running": a damaged log stops here.
        metrics = MetricsLog(run_dir / METRICS, keep_through_step=from_step)
        new = cfg.to_dict()
        changed = {k: [v, new[k]] for k, v in manifest.config.items() if k in new and new[k] != v}
        entry = {"from_step": from_step, "command": command_line(), "git": git_info(),
                 "compiled_kernels": compiled_kernels}
        if changed:
            entry["changed"] = changed
        if "steps" in changed:
            entry["lr_schedule"] = _schedule_note(manifest.config, cfg, from_step, notes)
        manifest.resumes.append(entry)
        manifest.config, manifest.run_dir, manifest.owner = new, str(run_dir), owner_info()
        return cls(run_dir, manifest, metrics, tracker)

    @classmethod
    def follower(cls, run_dir: Path, checkpoint_step: int | None, resume_command: str | None = None) -> RunRecord:
        """A rank other than 0's view of the run: nothing written, the checkpoint step kept for messages."""
        return cls(run_dir, Manifest(run_dir=str(run_dir), checkpoint_step=checkpoint_step), None, Tracker(),
                   writes=False, resume_command=resume_command)

    def start(self) -> None:
        self.manifest.status, self.manifest.final = RunStatus.RUNNING, None  # a resumed run's old final is over
        if self.writes:
            self.tracker.start(self.run_dir, self.manifest)
            write_manifest(self.run_dir, self.manifest)

    def checkpointed(self, step: int) -> None:
        """A checkpoint at `step` is complete: where a resume (after any crash) starts."""
        self.manifest.checkpoint_step = step
        if self.writes:
            write_manifest(self.run_dir, self.manifest)

    def log(self, row: dict) -> None:
        """One metrics row (step, losses, lr, throughput) to metrics.jsonl and the tracker."""
        if self.writes:
            self.metrics.append(row)
            self.tracker.log(row["step"], {k: v for k, v in row.items() if k != "step" and isinstance(v, float)})

    def finish(self, status: RunStatus, final: RunFinal) -> None:
        self._end(status, final)
        if self.writes:
            self.tracker.log(final.step, {"final_val_loss": final.val_loss, "final_train_loss": final.train_loss})
            self.tracker.finish(status.value)

    def diverged(self, step: int, message: str) -> TrainingDiverged:
        """Record the divergence at `step`; returns the error for the caller to raise."""
        self._end(RunStatus.DIVERGED, RunFinal(step=step, diverged_at=step))
        self._tracker_finish(RunStatus.DIVERGED)
        return TrainingDiverged(message)

    def interrupted(self, step: int, why: str = "interrupted") -> TrainingInterrupted:
        """Record the interruption (Ctrl-C, SIGTERM) after the checkpoint at `step`; the error to raise."""
        self._end(RunStatus.INTERRUPTED, self.manifest.final)
        self._tracker_finish(RunStatus.INTERRUPTED)
        saved = f"checkpoint at step {step}" if step else "no step was completed, so no checkpoint"
        return TrainingInterrupted(f"{why}; {saved} in {self.run_dir}; continue with: {self.resume_command}")

    def rank_lost(self, rank: int, error: BaseException, timeout_s: float | None) -> RankLost:
        """Record that this rank lost the others (a collective failed: a peer died or hung); the error to raise.
        The last checkpoint stands: the step in progress may be half-applied on some rank."""
        with contextlib.suppress(OSError, UserError):
            self._end(RunStatus.INTERRUPTED, self.manifest.final)
        self._tracker_finish(RunStatus.INTERRUPTED)
        step = self.manifest.checkpoint_step
        kept = f"the checkpoint at step {step} in {self.run_dir} stands" if step else "no checkpoint was written yet"
        hung = f", or hung past the {timeout_s:g} s timeout" if timeout_s else ""
        return RankLost(f"rank {rank} lost contact with the other ranks ({peer_failure_line(error)}): one of them "
                        f"died{hung}; {kept}; continue with: {self.resume_command}")

    def failed_to_write(self, error: OSError) -> RunStopped:
        """A write failed (disk full, folder made read-only): the run stops, resumable from its last complete checkpoint."""
        kept = (f"the checkpoint at step {self.manifest.checkpoint_step} is intact" if self.manifest.checkpoint_step
                else "no checkpoint was complete")
        # The disk that refused the checkpoint may refuse the manifest too; the checkpoint is what counts.
        with contextlib.suppress(OSError, UserError):
            self._end(RunStatus.INTERRUPTED, self.manifest.final)
        self._tracker_finish(RunStatus.INTERRUPTED)
        return RunStopped(f"could not write to {self.run_dir}: {error.strerror or error}; {kept}; free space (or "
                          f"make the folder writable), then continue with: {self.resume_command}")

    def _tracker_finish(self, status: RunStatus) -> None:
        if self.writes:
            self.tracker.finish(status.value)

    def _end(self, status: RunStatus, final: RunFinal | None) -> None:
        self.manifest.status, self.manifest.final = status, final
        if self.writes:
            write_manifest(self.run_dir, self.manifest)


def _worker_init(worker_id: int) -> None:
    """A DataLoader worker: seeded from torch's per-worker seed, and deaf to Ctrl-C, which the terminal sends
    to the whole process group; the training process decides when to stop (between steps)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seed_worker(worker_id)


def _schedule_note(old_config: dict, cfg: TrainConfig, step: int, notes: list[str]) -> dict:
    """A resume that changes `steps` changes the cosine schedule: from here on the lr follows the schedule
    of the new length, as a run planned that long from the start would (the steps already taken keep the
    old one's lr). Says so in `notes` when the lr moves, and returns what the manifest records."""
    old_steps = int(old_config.get("steps", cfg.steps))
    before = lr_at(step - 1, dataclasses.replace(cfg, steps=old_steps)) if step else cfg.lr
    after = lr_at(step, cfg)
    # Whether the schedule moved: the next step's lr under the old length against the new one (comparing
    # with the step before would flag every warm-up step).
    if not math.isclose(lr_at(step, dataclasses.replace(cfg, steps=old_steps)), after, rel_tol=0.05):
        notes.append(f"steps changed {old_steps} -> {cfg.steps}: the lr follows the {cfg.steps}-step cosine schedule "
                     f"from here, so it moves from {before:.3g} at step {step} to {after:.3g} at step {step + 1}")
    return {"steps_before": old_steps, "steps_after": cfg.steps, "lr_before": before, "lr_after": after}


# ---- one run's model, optimizer and data --------------------------------------------------------

class NonFiniteStep(Exception):
    """A logged step's loss or gradient norm was NaN or inf (internal: the driver records it)."""

    def __init__(self, step: int, what: str, value: float) -> None:
        super().__init__(f"{what} became {value} at step {step}")
        self.step, self.what, self.value = step, what, value


class PendingLosses:
    """Per-step (loss, gradient norm) kept on the device until the loop next logs: one sync for many
    steps, and a NaN is still traced to the first step that had it. In a data-parallel run each rank's
    losses are of its own share of the batch; the flush averages them over the ranks (one all-reduce for
    many steps), so the logged loss is the global batch's, as one process would log it."""

    def __init__(self, dist: Dist | None = None) -> None:
        self.items: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self.last_logged: float | None = None  # the newest loss a flush returned, for the progress bar
        self.dist = dist or Dist()

    def add(self, step: int, loss: torch.Tensor, norm: torch.Tensor) -> None:
        self.items.append((step, loss, norm))

    def flush(self) -> float | None:
        """The newest loss, or None when nothing is pending; NonFiniteStep on the first bad step."""
        if not self.items:
            return None
        with record_function("sync"):
            values = torch.stack([torch.stack((loss, norm)) for _, loss, norm in self.items])
            if self.dist.distributed:  # the norm is of the all-reduced gradients: the same on every rank
                values[:, 0] = self.dist.mean_(values[:, 0].contiguous())
            values = values.cpu()  # one sync
        bad = (~torch.isfinite(values)).any(dim=1).nonzero()
        if len(bad):
            row = int(bad[0])
            what = "loss" if not math.isfinite(float(values[row, 0])) else "gradient norm"
            raise NonFiniteStep(self.items[row][0], what, float(values[row].sum()))
        self.items.clear()
        self.last_logged = float(values[-1, 0])
        return self.last_logged


class Trainer:
    """One run's model, optimizer, batches and schedule. `step` does one optimizer update (with
    gradient accumulation), `evaluate` runs the fixed eval batches, `checkpoint` saves all a resume needs.

    With a Dist of several ranks: `distribute` wraps the model in DistributedDataParallel (after every rank
    has built its own); each rank then reads its slice of every batch, the eval batches are shared out, and
    a checkpoint holds every rank's RNG state."""

    def __init__(self, cfg: TrainConfig, data: TokenData, model_cfg: GPTConfig, device: torch.device,
                 dist: Dist | None = None) -> None:
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
            raise UserError(f"--resume {run_dir}: the checkpoint's RNG state is damaged ({e}); resume an intact "
                            "run, or start a new one") from None

    def batches(self, start: int, last: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The training batches of steps start+1 .. last: the same samples whatever the resume point."""
        A, B = self.cfg.grad_accum, self.cfg.batch_size
        loader = window_loader(self.data.train, self.model.cfg.block_size, B, seed=self.cfg.seed, start=start * A * B,
                               n_batches=(last - start) * A, num_workers=self.cfg.num_workers, pin_memory=self.pin,
                               rank=self.dist.rank, world_size=self.dist.world_size)
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
            norm = (torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip) if self.cfg.grad_clip
                    else torch.zeros((), device=self.device))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return lr, step_loss, norm.detach().float()

    def _sync_gradients(self, sync: bool) -> contextlib.AbstractContextManager:
        return self.ddp.no_sync() if self.ddp is not None and not sync else contextlib.nullcontext()

    def evaluate(self) -> tuple[float, float]:
        """(val loss, train loss) on the fixed eval batches, nats/token. Data-parallel: rank r evaluates
        batches r, r + world, ... and the sums are added over the ranks."""
        if not self.dist.distributed:
            return (evaluate(self.eval_fwd, self.val_set, self.device, self.dtype),
                    evaluate(self.eval_fwd, self.train_set, self.device, self.dtype))
        r, w = self.dist.rank, self.dist.world_size
        sums = torch.stack([loss_sum(self.eval_fwd, batches[r::w], self.device, self.dtype)
                            for batches in (self.val_set, self.train_set)])
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
            state = {"data_position": step * A * B, "config": self.cfg.to_dict(), "model_config": self.model.cfg.to_dict(),
                     "rng": rngs[0], "data": {"version": self.data.version, "sha256": self.data.sha256},
                     "world_size": self.dist.world_size}
            if self.dist.distributed:
                state.update(rng_ranks=rngs, backend=self.dist.backend)
            save_checkpoint(record.run_dir, step, self.model, self.optimizer, self.data.tokenizer, state,
                            self.cfg.keep_checkpoints)
        record.checkpointed(step)


# ---- resuming ------------------------------------------------------------------------------------

def _resume_config(run_dir: Path, cfg: TrainConfig | None) -> tuple[TrainConfig, Checkpoint, Manifest]:
    """The run's config (with allowed changes from cfg), its latest checkpoint and its manifest."""
    try:
        manifest = read_manifest(run_dir)
        ckpt = read_checkpoint(run_dir)
        saved = config_from_dict(manifest.config)
        _ = (int(ckpt.state["step"]), ckpt.state["data"]["sha256"], ckpt.state["data"]["version"],
             ckpt.state["rng"])  # every field the resume reads, present and of the right kind
        if cfg is not None:
            _check_resumable_changes(run_dir, saved, cfg)
        cfg = (cfg or saved).validate()
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"--resume {run_dir}: its manifest or checkpoint state was edited or is damaged "
                        f"({type(e).__name__}: {e}); resume an intact run, or start a new one") from None
    if int(ckpt.state["step"]) < 0:
        raise UserError(f"--resume {run_dir}: the checkpoint says step {ckpt.state['step']}; resume an intact run")
    if manifest.status is RunStatus.RUNNING and process_gone(manifest.owner) is False:
        raise UserError(f"--resume {run_dir}: process {manifest.owner.get('pid')} is still training it; wait for it "
                        "to end, or stop it (Ctrl-C or kill: it checkpoints), then resume")
    return cfg, ckpt, manifest


def _check_resumable_changes(run_dir: Path, saved: TrainConfig, cfg: TrainConfig) -> None:
    changed = {k: (getattr(saved, k), getattr(cfg, k)) for k in saved.to_dict()
               if getattr(saved, k) != getattr(cfg, k) and k not in RESUMABLE_CHANGES
               # Another path to a file is fine: its content is checked against the checkpoint's hash.
               and not (k == "data" and saved.data and cfg.data)}
    if changed:
        key, (old, new) = next(iter(changed.items()))
        raise UserError(f"config mismatch on resume: {key} is {old!r} in {run_dir.name} but {new!r} now; "
                        "resume with the run's own config, or start a new run")


def _check_checkpoint_matches(ckpt: Checkpoint, data: TokenData, tokenizer: Tokenizer, model_cfg: GPTConfig) -> None:
    """The checkpoint was made from this data, vocabulary and model shape."""
    if ckpt.state["data"]["sha256"] != data.sha256 or ckpt.state["data"]["version"] != data.version:
        raise UserError(f"data mismatch on resume: the run trained on {ckpt.state['data']['version']} "
                        f"(sha256 {ckpt.state['data']['sha256'][:12]}), the data now is {data.version} "
                        f"(sha256 {data.sha256[:12]}); resume with the same data")
    if ckpt.tokenizer.to_dict() != tokenizer.to_dict():
        raise UserError(f"vocabulary mismatch on resume: the checkpoint's tokenizer "
                        f"({ckpt.tokenizer.kind}, {ckpt.tokenizer.vocab_size} tokens) differs from the data's "
                        f"({tokenizer.kind}, {tokenizer.vocab_size} tokens)")
    if ckpt.model_config != model_cfg:
        raise UserError(f"config mismatch on resume: the checkpoint's model is {ckpt.model_config}, "
                        f"the config asks for {model_cfg}")


# ---- the driver ------------------------------------------------------------------------------------

def train(cfg: TrainConfig | None = None, resume: str | Path | None = None, stop_at: int | None = None,
          progress: bool = True, on_step: Callable[[int], None] | None = None,
          on_note: Callable[[str], None] | None = None, backend: str = "auto") -> TrainResult:
    """Train (or resume) a run and return its final numbers.

    cfg: the config (validated); with resume, only the keys in RESUMABLE_CHANGES may differ.
    stop_at: checkpoint and stop after this step (the run stays resumable), as a preemption would.
    on_step: called with the step number after every optimizer step (the profiler's hook).
    on_note: called, before the first step, with each thing the user should know (a resume that moves
    the lr schedule, a missing metrics log); the notes are also in the result.
    backend: for a data-parallel run, auto (NCCL on CUDA, gloo on CPU), gloo or nccl.

    Started by torchrun or srun (nanolm.distributed.launch_env), this process is one rank of a data-parallel
    run: it joins the process group (or uses one already initialized), trains its share of each batch, and
    leaves the group at the end. Rank 0 writes the run's folder and shows the progress bar (and on_note);
    every rank returns the result."""
    ckpt: Checkpoint | None = None
    manifest: Manifest | None = None
    run_dir = Path(resume) if resume is not None else None
    if run_dir is not None:
        cfg, ckpt, manifest = _resume_config(run_dir, cfg)
    elif cfg is None:
        cfg = TrainConfig().validate()
    if cfg.data:  # recorded absolute: a resume from another folder must still find the file
        cfg = dataclasses.replace(cfg, data=str(Path(cfg.data).resolve()))
    device = resolve_device(cfg.device)
    d = setup(device.type, backend)  # a world of one, unless a launcher started this process as a rank
    try:
        return _train_as_rank(d, cfg, d.device if d.distributed else device, ckpt, manifest, run_dir, stop_at,
                              progress and d.is_main, on_step, on_note if d.is_main else None)
    except Exception as e:
        if d.distributed and is_peer_failure(e):  # before the first step, when no record can say more
            raise RankLost(f"rank {d.rank} lost contact with the other ranks before training started "
                           f"({peer_failure_line(e)}); another rank failed: its line says why") from None
        raise
    finally:
        teardown(d)


def _train_as_rank(d: Dist, cfg: TrainConfig, device: torch.device, ckpt: Checkpoint | None,
                   manifest: Manifest | None, run_dir: Path | None, stop_at: int | None, progress: bool,
                   on_step: Callable[[int], None] | None, on_note: Callable[[str], None] | None) -> TrainResult:
    """train() once the process group (if any) is joined."""
    problem, prepared = None, None
    try:
        prepared = _prepare(d, cfg, device, ckpt, manifest, run_dir, stop_at)
    except UserError as e:
        if not d.distributed:
            raise
        problem = e
    d.agree_or_raise(problem)  # a check that failed on one rank stops every rank, with its line
    trainer, start, last, determinism = prepared
    trainer.distribute()
    notes: list[str] = []
    record = _open_record(d, trainer, ckpt, manifest, run_dir, start, determinism, notes)
    for note in notes if on_note is not None else []:
        on_note(note)
    record.start()
    seconds, periods = _run_steps(trainer, record, start, last, progress, on_step)
    try:
        result = _finish(trainer, record, start, last, seconds, steady_step_s(periods))
    except Exception as e:
        if d.distributed and is_peer_failure(e):
            raise record.rank_lost(d.rank, e, d.timeout_s) from None
        raise
    result.notes, result.rank, result.world_size = notes, d.rank, d.world_size
    return result


def rank_seed(seed: int, rank: int) -> int:
    """The torch seed of rank `rank` after the model is built (dropout's masks): rank 0 keeps the run's
    seed, so its stream is the one-process run's; the others get seeds of their own."""
    return (seed + rank * 0x9E3779B97F4A7C15) % 2**64


def _prepare(d: Dist, cfg: TrainConfig, device: torch.device, ckpt: Checkpoint | None, manifest: Manifest | None,
             run_dir: Path | None, stop_at: int | None) -> tuple[Trainer, int, int, dict]:
    """Every check, the data and this rank's Trainer (restored from the checkpoint when resuming):
    (trainer, first step, last step, determinism settings). Nothing is written and nothing collective happens."""
    per_rank_batch(cfg.batch_size, d.world_size)
    if ckpt is not None:
        _check_world_size(run_dir, ckpt, d.world_size)
    data = load_data(cfg)  # first of the slow parts: a bad data file is reported before anything else happens
    determinism = seed_everything(cfg.seed, cfg.deterministic)
    model_cfg = cfg.model_config(data.tokenizer.vocab_size)
    if ckpt is not None:
        _check_checkpoint_matches(ckpt, data, data.tokenizer, model_cfg)
        _check_manifest_model(run_dir, manifest, ckpt)
    start = int(ckpt.state["step"]) if ckpt is not None else 0
    last = _last_step(cfg, start, stop_at)
    trainer = Trainer(cfg, data, model_cfg, device, d)
    if ckpt is not None:
        trainer.restore(ckpt, run_dir)
    elif d.rank > 0:
        torch.manual_seed(rank_seed(cfg.seed, d.rank))
    return trainer, start, last, determinism


def _open_record(d: Dist, trainer: Trainer, ckpt: Checkpoint | None, manifest: Manifest | None,
                 run_dir: Path | None, start: int, determinism: dict, notes: list[str]) -> RunRecord:
    """Rank 0 creates (or reopens) the run's record; the others follow it. Every rank gets the folder."""
    ranks = d.gather(d.rank_info())
    record, problem = None, None
    if d.is_main:
        try:
            if ckpt is not None:
                record = RunRecord.resume(run_dir, manifest, trainer.cfg, start, notes, trainer.kernels_compiled)
            else:
                # Which code computed the numbers: compiled kernels round differently from eager ones.
                determinism = {**determinism, "compiled_kernels": trainer.kernels_compiled}
                record = RunRecord.create(trainer.cfg, trainer.model, trainer.data, determinism, trainer.device)
        except UserError as e:
            if not d.distributed:
                raise
            problem = e
    d.agree_or_raise(problem)
    folder = Path(d.broadcast(str(record.run_dir) if record is not None else None))
    command = resume_command(folder, d.world_size, d.launcher)
    if record is None:
        return RunRecord.follower(folder, start or None, command)
    record.resume_command = command
    if d.distributed:
        record.manifest.distributed = d.describe(ranks)
    return record


def resume_command(run_dir: Path, world_size: int = 1, launcher: str = "torchrun") -> str:
    """The command that continues a run on as many processes as it had."""
    if world_size == 1:
        return f"nanolm train --resume {run_dir}"
    if launcher == "slurm":
        return f"srun --ntasks {world_size} nanolm train --resume {run_dir}"
    return f"nanolm train --nproc {world_size} --resume {run_dir}"


def _check_world_size(run_dir: Path, ckpt: Checkpoint, world_size: int) -> None:
    """A run resumes on as many processes as trained it: its checkpoint holds one RNG state per rank."""
    trained = ckpt.state.get("world_size", 1)  # checkpoints from before data parallelism: one process
    per_rank = ckpt.state.get("rng_ranks")
    if not isinstance(trained, int) or trained < 1 or (trained > 1 and not (
            isinstance(per_rank, list) and len(per_rank) == trained)):
        raise UserError(f"--resume {run_dir}: its checkpoint's world_size or per-rank RNG states were edited or are "
                        "damaged; resume an intact run, or start a new one")
    if trained != world_size:
        how = resume_command(run_dir, trained) + (" (one process)" if trained == 1 else "")
        raise UserError(f"--resume {run_dir}: the run was trained by {trained} process(es) and this is {world_size}; "
                        f"its checkpoint holds one random state per rank, so it continues bit for bit only on "
                        f"{trained}; resume with: {how}, or start a new run")


def _last_step(cfg: TrainConfig, start: int, stop_at: int | None) -> int:
    if stop_at is not None and stop_at <= start:
        raise UserError(f"--stop-at {stop_at}: the run is at step {start}; give a later step, up to {cfg.steps}")
    last = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
    if last <= start:
        raise UserError(f"nothing to train: the run is at step {start} and would stop at step {last}; "
                        "raise steps with --set steps=N")
    return last


def _check_manifest_model(run_dir: Path, manifest: Manifest, ckpt: Checkpoint) -> None:
    """The manifest describes the model the checkpoint holds (an edited manifest would mislead every reader)."""
    if manifest.model_config and manifest.model_config != ckpt.model_config.to_dict():
        diff = [f"{k}: {v!r} in the manifest, {ckpt.model_config.to_dict().get(k)!r} in the checkpoint"
                for k, v in manifest.model_config.items() if ckpt.model_config.to_dict().get(k) != v]
        raise UserError(f"--resume {run_dir}: the manifest's model_config was edited ({'; '.join(diff[:2])}); "
                        "restore manifest.json, or start a new run for another model")


class Terminated(BaseException):
    """A stop request (Ctrl-C, or SIGTERM from timeout, kill, a SLURM preemption, a container stop) taken
    between two steps."""


class StopRequests:
    """Within the block, SIGINT and SIGTERM only set `signal`; the loop stops after the step in progress,
    so a checkpoint never holds a half-applied optimizer update. A second Ctrl-C stops at once. Only the
    main thread can take signals; elsewhere this does nothing and Ctrl-C is a KeyboardInterrupt."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.previous: dict[int, object] = {}

    def _take(self, signum: int, frame: object) -> None:
        if self.signal == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt  # asked twice: do not wait for the step to end
        self.signal = signum

    def check(self) -> None:
        """Raise Terminated when a stop was asked for."""
        if self.signal is not None:
            raise Terminated(self.reason())

    def reason(self) -> str:
        """Why the run stops: this process's signal, or (data-parallel) another rank's."""
        if self.signal is None:
            return "stopped because another rank was asked to stop"
        return "terminated (SIGTERM)" if self.signal == signal.SIGTERM else "interrupted"

    def __enter__(self) -> StopRequests:
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._take)
        except ValueError:  # not the main thread
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _writes(record: RunRecord) -> Iterator[None]:
    """A failed write of the run's files (disk full, read-only) stops the run with one line saying what
    was kept, instead of a traceback."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, SafetensorError, UserError) as e:  # io turns a file it cannot create into a UserError
        raise record.failed_to_write(e if isinstance(e, OSError) else OSError(str(e))) from None


STEADY_SKIP = 10  # steps of warm-up left out of the steady throughput (compile, autotune, allocator)


def steady_step_s(periods: list[float | None]) -> float | None:
    """The steady step (s): the median loop period after warm-up (the first STEADY_SKIP steps, at least 2 and at
    most a fifth of the run: allocation, torch.compile, autotuning), over the steps with no evaluation, log or
    checkpoint in them (None entries); None with fewer than 3 such steps."""
    skip = max(2, min(STEADY_SKIP, len(periods) // 5))
    clean = [p for p in periods[skip:] if p is not None]
    return statistics.median(clean) if len(clean) >= 3 else None


class _Periods:
    """Each step's loop period (s), from the end of the previous step's bookkeeping to the end of its own update;
    None for a step after one that evaluated, logged or checkpointed (its period would hold that work)."""

    def __init__(self, t0: float) -> None:
        self.values: list[float | None] = []
        self._start, self._clean = t0, True

    def step_done(self) -> float:
        now = time.perf_counter()
        self.values.append(now - self._start if self._clean else None)
        return now

    def next_step(self, clean: bool) -> None:
        self._start, self._clean = time.perf_counter(), clean


def _run_steps(trainer: Trainer, record: RunRecord, start: int, last: int, progress: bool,
               on_step: Callable[[int], None] | None) -> tuple[float, list[float | None]]:
    """Steps start+1 .. last with logging, evaluation and checkpoints; the seconds they took, and each step's
    loop period (s; None for a step that also evaluated, logged or checkpointed), for the steady throughput.
    A non-finite loss is recorded as a divergence; Ctrl-C or SIGTERM checkpoints the last completed step.
    Data-parallel: after each step the ranks vote (a stop asked on any rank, a checkpoint due by any rank's
    clock), so they stop and checkpoint at the same step; a collective that fails (a rank died or hung)
    ends this rank with RankLost, the last checkpoint standing."""
    cfg, d = trainer.cfg, trainer.dist
    batches, pending = trainer.batches(start, last), PendingLosses(d)
    bar = Progress(progress, cfg.steps, start)
    t0 = t_log = t_ckpt = time.perf_counter()
    # completed: the last step whose optimizer update is done
    tokens_since_log, completed, in_step = 0, start, False
    periods = _Periods(t0)
    trainer.model.train()
    # The handlers stay in place while a stop is handled: a launcher's SIGTERM then waits for the checkpoint.
    with StopRequests() as stops:
        try:
            for step in range(start + 1, last + 1):
                in_step = True  # a second Ctrl-C can land inside the update: then no checkpoint of it
                lr, loss, norm = trainer.step(step, batches)
                completed, in_step = step, False
                pending.add(step, loss, norm)
                tokens_since_log += trainer.tokens_per_step
                if on_step is not None:
                    on_step(step)
                now = periods.step_done()
                stop, overdue = d.vote(stops.signal is not None, now - t_ckpt >= cfg.ckpt_seconds)
                is_eval = step % cfg.eval_every == 0 or step == cfg.steps
                is_ckpt = step % cfg.ckpt_every == 0 or step == last or overdue
                is_log = step % cfg.log_every == 0 or is_eval or is_ckpt
                if is_log:
                    row = _metrics_row(trainer, pending, step, lr, tokens_since_log, now - t_log, now - t0)
                    if is_eval:
                        row["val_loss"], row["train_eval_loss"] = trainer.evaluate()
                    with _writes(record):
                        record.log(row)
                    t_log, tokens_since_log = time.perf_counter(), 0
                bar.update(step, pending.last_logged, (step - start) * trainer.tokens_per_step / max(now - t0, 1e-9))
                if is_ckpt:
                    with _writes(record):
                        trainer.checkpoint(record, step)
                    t_ckpt = time.perf_counter()
                if stop:
                    raise Terminated(stops.reason())
                periods.next_step(clean=not is_log)
        except NonFiniteStep as e:
            raise record.diverged(e.step, f"{e}; the run stopped and the last good checkpoint stays in "
                                          f"{record.run_dir / 'checkpoints'}; try a lower lr or more warmup") from None
        except (KeyboardInterrupt, Terminated) as e:
            bar.close()
            raise _interrupted(trainer, record, pending, start, completed, in_step, e) from None
        except Exception as e:
            if not (d.distributed and is_peer_failure(e)):
                raise
            raise record.rank_lost(d.rank, e, d.timeout_s) from None
        finally:
            bar.close()
    return time.perf_counter() - t0, periods.values


def _interrupted(trainer: Trainer, record: RunRecord, pending: PendingLosses, start: int, completed: int,
                 in_step: bool, e: BaseException) -> TrainingInterrupted:
    """Checkpoint the last completed step after a stop request, and record the interruption; the error to raise.
    Cut inside an optimizer update, the weights are half-way; a data-parallel rank stopped without the vote
    (a second Ctrl-C) cannot checkpoint alone. Either way the last checkpoint stands."""
    if in_step or (trainer.dist.distributed and not isinstance(e, Terminated)):
        return record.interrupted(record.manifest.checkpoint_step or 0,
                                  "interrupted inside a step" if in_step else "interrupted")
    with _writes(record):
        _checkpoint_on_interrupt(trainer, record, pending, start, completed)
    return record.interrupted(completed, str(e) or "interrupted")


def _metrics_row(trainer: Trainer, pending: PendingLosses, step: int, lr: float, tokens: int, interval_s: float,
                 elapsed_s: float) -> dict:
    """A metrics row: the newest step's loss (the mean over the ranks), lr, throughput, and
    (data-parallel on gloo) this rank's seconds in gradient all-reduce and their share of the interval."""
    row = {"step": step, "train_loss": pending.flush(), "lr": lr, "tokens": step * trainer.tokens_per_step,
           "tokens_per_s": round(tokens / max(interval_s, 1e-9), 1), "elapsed_s": round(elapsed_s, 3)}
    comm = trainer.take_allreduce_seconds()
    if comm is not None:
        row["allreduce_s"] = round(comm, 4)
        row["allreduce_share"] = round(comm / max(interval_s, 1e-9), 4)
    return row


def _checkpoint_on_interrupt(trainer: Trainer, record: RunRecord, pending: PendingLosses, start: int,
                             completed: int) -> None:
    """Save the last completed step, unless its loss went non-finite (then that is what is recorded)."""
    if completed <= start or record.manifest.checkpoint_step == completed:
        return
    try:
        pending.flush()
    except NonFiniteStep as e:
        raise record.diverged(e.step, f"{e}; the run stopped and the last good checkpoint stays in "
                                      f"{record.run_dir / 'checkpoints'}; try a lower lr or more warmup") from None
    trainer.checkpoint(record, completed)


def _finish(trainer: Trainer, record: RunRecord, start: int, last: int, seconds: float,
            steady_s: float | None = None) -> TrainResult:
    """The final evaluation, recorded as finished or stopped (or diverged, when the weights went non-finite)."""
    val_loss, train_loss = trainer.evaluate()
    if not (math.isfinite(val_loss) and math.isfinite(train_loss)):  # the weights went non-finite at the last step
        raise record.diverged(last, f"the final evaluation gave val loss {val_loss} at step {last}; the weights are "
                                    "not finite; try a lower lr or more warmup")
    if trainer.receipt is not None:  # what each rank read: its samples, and a digest that adds up over ranks
        reads = trainer.dist.gather({**trainer.receipt.to_dict(), "steps": [start + 1, last]})
        for entry, read in zip(record.manifest.distributed.get("ranks", []), reads, strict=False):
            entry["read"] = read
    status = RunStatus.FINISHED if last == trainer.cfg.steps else RunStatus.STOPPED
    tokens_per_s = (last - start) * trainer.tokens_per_step / max(seconds, 1e-9)
    steady = trainer.tokens_per_step / steady_s if steady_s else None
    record.finish(status, RunFinal(step=last, train_loss=train_loss, val_loss=val_loss,
                                   tokens_per_s=round(tokens_per_s, 1), seconds=round(seconds, 2),
                                   steady_tokens_per_s=round(steady, 1) if steady else None))
    return TrainResult(record.run_dir, last, train_loss, val_loss, trainer.data.unigram_entropy(), tokens_per_s,
                       seconds, status, steady_tokens_per_s=steady)


# ---- launching several ranks on this machine (nanolm train --nproc N) -------------------------------

def check_launch(cfg: TrainConfig, nproc: int, backend: str = "auto", resume: str | Path | None = None) -> str:
    """Everything a launch of `nproc` ranks can be refused for, checked before any process starts: this
    process is not itself a rank, the count fits the machine (a core each on CPU, a GPU each on CUDA), the
    backend exists here, batch_size splits evenly, and a resumed run keeps its world size.
    Returns the backend the ranks will use."""
    if launch_env() is not None:
        raise UserError("--nproc: this process is already a rank of a launch (torchrun or srun set RANK or "
                        "SLURM_PROCID); drop --nproc: the launcher decides the number of processes")
    device = resolve_device(cfg.device)
    check_nproc(nproc, device.type)
    chosen = resolve_backend(backend, device.type)
    per_rank_batch(cfg.batch_size, nproc)
    if resume is not None:
        _, ckpt, _ = _resume_config(Path(resume), cfg)
        _check_world_size(Path(resume), ckpt, nproc)
    return chosen


def launch_training(nproc: int, args: list[str], cfg: TrainConfig, resume: str | Path | None = None,
                    backend: str = "auto") -> Path | None:
    """Train with `nproc` ranks on this machine: check_launch, then ``nanolm train <args>`` in each rank,
    started by torch.distributed's elastic launcher (nanolm.distributed.launch), which is what
    ``torchrun --standalone --nproc-per-node nproc -m nanolm train <args>`` does. `args` are the train
    command's arguments without --nproc; `cfg` (and `resume`) is what they resolve to, for the checks.
    Returns the run's folder (found by the launch's id in its manifest).

    A failed rank stops the others; then this raises RanksFailed: one line naming the rank that failed and
    how, whether the last checkpoint is intact, and the command that continues the run. When the failed
    rank printed its own line (a UserError, a divergence, an interrupt: exit codes 1, 2, 130),
    `said_by_rank` is set and the exit code is that rank's."""
    check_launch(cfg, nproc, backend, resume)
    try:
        run_id = launch(nproc, ["train", *args])
    except LaunchFailed as e:
        raise _launch_failure(e, _launched_run(cfg, resume, e.run_id), nproc) from None
    except LaunchStopped as e:  # Ctrl-C or SIGTERM: passed to the ranks, which checkpointed and said so
        raise RanksFailed(f"{e}; the ranks were asked to checkpoint and stop", 130, said_by_rank=True) from None
    return _launched_run(cfg, resume, run_id)


def _launched_run(cfg: TrainConfig, resume: str | Path | None, run_id: str) -> Path | None:
    return Path(resume) if resume is not None else find_launched_run(cfg.runs_dir, run_id)


def intact_checkpoint_step(run_dir: Path | None) -> int | None:
    """The step of the run's latest checkpoint when it reads back whole (JSON and tensor files' hashes), else None."""
    if run_dir is None:
        return None
    try:
        ckpt = read_checkpoint(run_dir)
        for name in TENSOR_FILES:
            if not (ckpt.path / name).is_file():
                return None
            verify_file(ckpt, name, "damaged")
        return int(ckpt.state["step"])
    except (UserError, KeyError, TypeError, ValueError):
        return None


def _launch_failure(e: LaunchFailed, run_dir: Path | None, nproc: int) -> RanksFailed:
    root: RankFailure = e.root_cause
    if root.exitcode > 0 and root.exitcode != PEER_LOST_EXIT:  # a nanolm error: that rank printed its line
        return RanksFailed(str(e), root.exitcode, said_by_rank=True)
    step = intact_checkpoint_step(run_dir)
    if run_dir is None:
        kept = "no run folder was written"
    elif step is None:
        kept = f"no intact checkpoint in {run_dir}"
    else:
        kept = (f"the checkpoint at step {step} in {run_dir} is intact; continue with: "
                f"{resume_command(run_dir, nproc)}")
    lost = [str(f.rank) for f in e.failures if f.exitcode == PEER_LOST_EXIT]
    others = (f"rank {', '.join(lost)} lost contact with it and stopped (a rank that dies, or hangs past the "
              f"{timeout_seconds():g} s timeout, stops the others)" if lost else
              f"the launcher stopped the other rank{'s' if nproc > 2 else ''}")
    return RanksFailed(f"rank {root.rank} (pid {root.pid}) {root.how}; {others}; {kept}", 1)
