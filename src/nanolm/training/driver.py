"""train(): a run, or the resume of one, from its config to its TrainResult: the checks, the data and the
Trainer, the record, the step loop and the final evaluation; on one process, or as one rank of a
data-parallel run started by torchrun, srun or nanolm train --nproc."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..checkpoint import Checkpoint
from ..config import TrainConfig
from ..data import load_data
from ..device import resolve_device
from ..distributed import Dist, is_peer_failure, peer_failure_line, per_rank_batch, setup, teardown
from ..errors import UserError
from ..runs import Manifest, RunFinal, RunStatus
from ..seeding import seed_everything
from .loop import run_steps, steady_step_s
from .record import RankLost, RunRecord
from .resume import check_checkpoint_matches, check_manifest_model, check_world_size, resume_command, resume_config
from .trainer import Trainer


@dataclass
class TrainResult:
    """What train() returns: the run's folder, the step it ended at and its final numbers."""

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


def train(
    cfg: TrainConfig | None = None,
    resume: str | Path | None = None,
    stop_at: int | None = None,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    backend: str = "auto",
) -> TrainResult:
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
        cfg, ckpt, manifest = resume_config(run_dir, cfg)
    elif cfg is None:
        cfg = TrainConfig().validate()
    if cfg.data:  # recorded absolute: a resume from another folder must still find the file
        cfg = dataclasses.replace(cfg, data=str(Path(cfg.data).resolve()))
    device = resolve_device(cfg.device)
    d = setup(device.type, backend)  # a world of one, unless a launcher started this process as a rank
    try:
        return _train_as_rank(
            d,
            cfg,
            d.device if d.distributed else device,
            ckpt,
            manifest,
            run_dir,
            stop_at,
            progress and d.is_main,
            on_step,
            on_note if d.is_main else None,
        )
    except Exception as e:
        if d.distributed and is_peer_failure(e):  # before the first step, when no record can say more
            raise RankLost(
                f"rank {d.rank} lost contact with the other ranks before training started "
                f"({peer_failure_line(e)}); another rank failed: its line says why"
            ) from None
        raise
    finally:
        teardown(d)


def _train_as_rank(
    d: Dist,
    cfg: TrainConfig,
    device: torch.device,
    ckpt: Checkpoint | None,
    manifest: Manifest | None,
    run_dir: Path | None,
    stop_at: int | None,
    progress: bool,
    on_step: Callable[[int], None] | None,
    on_note: Callable[[str], None] | None,
) -> TrainResult:
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
    seconds, periods = run_steps(trainer, record, start, last, progress, on_step)
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


def _prepare(
    d: Dist,
    cfg: TrainConfig,
    device: torch.device,
    ckpt: Checkpoint | None,
    manifest: Manifest | None,
    run_dir: Path | None,
    stop_at: int | None,
) -> tuple[Trainer, int, int, dict]:
    """Every check, the data and this rank's Trainer (restored from the checkpoint when resuming):
    (trainer, first step, last step, determinism settings). Nothing is written and nothing collective happens."""
    per_rank_batch(cfg.batch_size, d.world_size)
    if ckpt is not None:
        check_world_size(run_dir, ckpt, d.world_size)
    data = load_data(cfg)  # first of the slow parts: a bad data file is reported before anything else happens
    determinism = seed_everything(cfg.seed, cfg.deterministic)
    model_cfg = cfg.model_config(data.tokenizer.vocab_size)
    if ckpt is not None:
        check_checkpoint_matches(ckpt, data, data.tokenizer, model_cfg)
        check_manifest_model(run_dir, manifest, ckpt)
    start = int(ckpt.state["step"]) if ckpt is not None else 0
    last = _last_step(cfg, start, stop_at)
    trainer = Trainer(cfg, data, model_cfg, device, d)
    if ckpt is not None:
        trainer.restore(ckpt, run_dir)
    elif d.rank > 0:
        torch.manual_seed(rank_seed(cfg.seed, d.rank))
    return trainer, start, last, determinism


def _open_record(
    d: Dist,
    trainer: Trainer,
    ckpt: Checkpoint | None,
    manifest: Manifest | None,
    run_dir: Path | None,
    start: int,
    determinism: dict,
    notes: list[str],
) -> RunRecord:
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


def _last_step(cfg: TrainConfig, start: int, stop_at: int | None) -> int:
    if stop_at is not None and stop_at <= start:
        raise UserError(f"--stop-at {stop_at}: the run is at step {start}; give a later step, up to {cfg.steps}")
    last = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
    if last <= start:
        raise UserError(
            f"nothing to train: the run is at step {start} and would stop at step {last}; raise steps with --set steps=N"
        )
    return last


def _finish(
    trainer: Trainer, record: RunRecord, start: int, last: int, seconds: float, steady_s: float | None = None
) -> TrainResult:
    """The final evaluation, recorded as finished or stopped (or diverged, when the weights went non-finite)."""
    val_loss, train_loss = trainer.evaluate()
    if not (math.isfinite(val_loss) and math.isfinite(train_loss)):  # the weights went non-finite at the last step
        raise record.diverged(
            last,
            f"the final evaluation gave val loss {val_loss} at step {last}; the weights are "
            "not finite; try a lower lr or more warmup",
        )
    if trainer.receipt is not None:  # what each rank read: its samples, and a digest that adds up over ranks
        reads = trainer.dist.gather({**trainer.receipt.to_dict(), "steps": [start + 1, last]})
        for entry, read in zip(record.manifest.distributed.get("ranks", []), reads, strict=False):
            entry["read"] = read
    status = RunStatus.FINISHED if last == trainer.cfg.steps else RunStatus.STOPPED
    tokens_per_s = (last - start) * trainer.tokens_per_step / max(seconds, 1e-9)
    steady = trainer.tokens_per_step / steady_s if steady_s else None
    record.finish(
        status,
        RunFinal(
            step=last,
            train_loss=train_loss,
            val_loss=val_loss,
            tokens_per_s=round(tokens_per_s, 1),
            seconds=round(seconds, 2),
            steady_tokens_per_s=round(steady, 1) if steady else None,
        ),
    )
    return TrainResult(
        record.run_dir,
        last,
        train_loss,
        val_loss,
        trainer.data.unigram_entropy(),
        tokens_per_s,
        seconds,
        status,
        steady_tokens_per_s=steady,
    )
