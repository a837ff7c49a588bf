"""nanolm train --nproc N: the checks a launch of several ranks on this machine can be refused for, the
launch itself (torch's elastic launcher, as torchrun), and the one line said when a rank fails."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint import TENSOR_FILES, read_checkpoint, verify_file
from ..config import TrainConfig
from ..device import resolve_device
from ..distributed import (
    PEER_LOST_EXIT,
    LaunchFailed,
    LaunchStopped,
    RankFailure,
    check_nproc,
    launch,
    launch_env,
    per_rank_batch,
    resolve_backend,
    timeout_seconds,
)
from ..errors import RunStopped, UserError
from ..runs import find_launched_run
from .resume import check_world_size, resume_command, resume_config


class RanksFailed(RunStopped):
    """A launch of several ranks ended badly (nanolm train --nproc). said_by_rank: the failed rank printed
    its own line already (the caller need not repeat it); exit_code is then that rank's."""

    def __init__(self, message: str, exit_code: int = 1, said_by_rank: bool = False) -> None:
        super().__init__(message)
        self.exit_code, self.said_by_rank = exit_code, said_by_rank


def check_launch(cfg: TrainConfig, nproc: int, backend: str = "auto", resume: str | Path | None = None) -> str:
    """Everything a launch of `nproc` ranks can be refused for, checked before any process starts: this
    process is not itself a rank, the count fits the machine (a core each on CPU, a GPU each on CUDA), the
    backend exists here, batch_size splits evenly, and a resumed run keeps its world size.
    Returns the backend the ranks will use."""
    if launch_env() is not None:
        raise UserError(
            "--nproc: this process is already a rank of a launch (torchrun or srun set RANK or "
            "SLURM_PROCID); drop --nproc: the launcher decides the number of processes"
        )
    device = resolve_device(cfg.device)
    check_nproc(nproc, device.type)
    chosen = resolve_backend(backend, device.type)
    per_rank_batch(cfg.batch_size, nproc)
    if resume is not None:
        _, ckpt, _ = resume_config(Path(resume), cfg)
        check_world_size(Path(resume), ckpt, nproc)
    return chosen


def launch_training(
    nproc: int, args: list[str], cfg: TrainConfig, resume: str | Path | None = None, backend: str = "auto"
) -> Path | None:
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
        kept = f"the checkpoint at step {step} in {run_dir} is intact; continue with: {resume_command(run_dir, nproc)}"
    lost = [str(f.rank) for f in e.failures if f.exitcode == PEER_LOST_EXIT]
    others = (
        f"rank {', '.join(lost)} lost contact with it and stopped (a rank that dies, or hangs past the "
        f"{timeout_seconds():g} s timeout, stops the others)"
        if lost
        else f"the launcher stopped the other rank{'s' if nproc > 2 else ''}"
    )
    return RanksFailed(f"rank {root.rank} (pid {root.pid}) {root.how}; {others}; {kept}", 1)
