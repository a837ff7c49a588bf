"""Training's public entry point: ``nanolm.train.train`` trains (or resumes) a run and returns its TrainResult.

The code lives in the ``nanolm.training`` package (driver, trainer, loop, record, resume, launch, optim; its
docstring says which concern is where) and in ``nanolm.device``; this module names what callers have always
imported from here, so ``from nanolm.train import train, TrainResult, Trainer, resolve_device`` keeps working."""

from __future__ import annotations

from .device import autocast, autocast_dtype, resolve_device
from .training.driver import TrainResult, rank_seed, train
from .training.launch import RanksFailed, check_launch, intact_checkpoint_step, launch_training
from .training.launch import _launch_failure as _launch_failure
from .training.loop import STEADY_SKIP, NonFiniteStep, PendingLosses, Progress, StopRequests, Terminated, steady_step_s
from .training.optim import KERNELS_MIN_D_MODEL, build_optimizer, compiler_works, kernels_compiled, lr_at
from .training.record import RankLost, RunRecord, TrainingDiverged, TrainingInterrupted
from .training.record import _schedule_note as _schedule_note
from .training.resume import RESUMABLE_CHANGES, merged_config, resume_command, resume_config
from .training.trainer import Trainer, evaluate, loss_sum

__all__ = [
    "KERNELS_MIN_D_MODEL",
    "RESUMABLE_CHANGES",
    "STEADY_SKIP",
    "NonFiniteStep",
    "PendingLosses",
    "Progress",
    "RankLost",
    "RanksFailed",
    "RunRecord",
    "StopRequests",
    "Terminated",
    "TrainResult",
    "Trainer",
    "TrainingDiverged",
    "TrainingInterrupted",
    "autocast",
    "autocast_dtype",
    "build_optimizer",
    "check_launch",
    "compiler_works",
    "evaluate",
    "intact_checkpoint_step",
    "kernels_compiled",
    "launch_training",
    "loss_sum",
    "lr_at",
    "merged_config",
    "rank_seed",
    "resolve_device",
    "resume_command",
    "resume_config",
    "steady_step_s",
    "train",
]
