"""A run's record as training writes it: the manifest (every change of status), the metrics log and the
tracker; and the errors a run ends with when it does not finish (diverged, interrupted, a rank lost)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path

import torch

from ..config import TrainConfig
from ..data import TokenData
from ..distributed import PEER_LOST_EXIT, peer_failure_line
from ..errors import RunStopped, UserError
from ..model import GPT
from ..runs import (
    METRICS,
    Manifest,
    MetricsLog,
    RunFinal,
    RunStatus,
    command_line,
    environment_info,
    git_info,
    new_run_dir,
    owner_info,
    write_manifest,
)
from ..trackers import Tracker, make_tracker
from .optim import lr_at


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


class RunRecord:
    """A run's folder as training writes it: the manifest, the metrics log and the tracker. Every
    change of the manifest's status (running -> finished / stopped / diverged / interrupted) happens
    here, and each is written before the tracker hears of it.

    In a data-parallel run only rank 0's record writes; the other ranks hold a follower (writes=False) that
    knows the folder and the last checkpoint's step, for their messages."""

    def __init__(
        self,
        run_dir: Path,
        manifest: Manifest,
        metrics: MetricsLog | None,
        tracker: Tracker,
        writes: bool = True,
        resume_command: str | None = None,
    ) -> None:
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
            name=cfg.name,
            run_dir=str(run_dir),
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            command=command_line(),
            config=cfg.to_dict(),
            model_config=model.cfg.to_dict(),
            n_params=model.num_params(),
            n_params_non_embedding=model.num_params(exclude_embeddings=True),
            seed=cfg.seed,
            determinism=determinism,
            git=git_info(),
            data=data.describe(),
            unigram_entropy=data.unigram_entropy(),
            environment=environment_info(device_name),
            owner=owner_info(),
        )
        return cls(run_dir, manifest, MetricsLog(run_dir / METRICS), tracker)

    @classmethod
    def resume(
        cls, run_dir: Path, manifest: Manifest, cfg: TrainConfig, from_step: int, notes: list[str], compiled_kernels: bool = False
    ) -> RunRecord:
        """The run's record, its metrics log trimmed to from_step (what came after the checkpoint is redone).
        The manifest takes the resumed config (only RESUMABLE_CHANGES can differ), this process as its owner
        and the folder's current place; the resume entry says what changed."""
        tracker = make_tracker(cfg.tracker)
        if not (run_dir / METRICS).is_file() and from_step > 0:
            notes.append(
                f"{run_dir / METRICS} is missing: the history before step {from_step} is gone; "
                "the log restarts at the resumed steps"
            )
        # Read (and trim) the metrics before the manifest says "running": a damaged log stops here.
        metrics = MetricsLog(run_dir / METRICS, keep_through_step=from_step)
        new = cfg.to_dict()
        changed = {k: [v, new[k]] for k, v in manifest.config_as_trained().items() if k in new and new[k] != v}
        entry = {"from_step": from_step, "command": command_line(), "git": git_info(), "compiled_kernels": compiled_kernels}
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
        return cls(
            run_dir,
            Manifest(run_dir=str(run_dir), checkpoint_step=checkpoint_step),
            None,
            Tracker(),
            writes=False,
            resume_command=resume_command,
        )

    def start(self) -> None:
        """The run is running: the manifest says so (a resumed run's old final is over); the tracker starts."""
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
        """Record the run's end (finished, or stopped at stop_at) with its final numbers; then the tracker hears of it."""
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
        return RankLost(
            f"rank {rank} lost contact with the other ranks ({peer_failure_line(error)}): one of them "
            f"died{hung}; {kept}; continue with: {self.resume_command}"
        )

    def failed_to_write(self, error: OSError) -> RunStopped:
        """A write failed (disk full, folder made read-only): the run stops, resumable from its last complete checkpoint."""
        kept = (
            f"the checkpoint at step {self.manifest.checkpoint_step} is intact"
            if self.manifest.checkpoint_step
            else "no checkpoint was complete"
        )
        # The disk that refused the checkpoint may refuse the manifest too; the checkpoint is what counts.
        with contextlib.suppress(OSError, UserError):
            self._end(RunStatus.INTERRUPTED, self.manifest.final)
        self._tracker_finish(RunStatus.INTERRUPTED)
        return RunStopped(
            f"could not write to {self.run_dir}: {error.strerror or error}; {kept}; free space (or "
            f"make the folder writable), then continue with: {self.resume_command}"
        )

    def _tracker_finish(self, status: RunStatus) -> None:
        if self.writes:
            self.tracker.finish(status.value)

    def _end(self, status: RunStatus, final: RunFinal | None) -> None:
        self.manifest.status, self.manifest.final = status, final
        if self.writes:
            write_manifest(self.run_dir, self.manifest)


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
        notes.append(
            f"steps changed {old_steps} -> {cfg.steps}: the lr follows the {cfg.steps}-step cosine schedule "
            f"from here, so it moves from {before:.3g} at step {step} to {after:.3g} at step {step + 1}"
        )
    return {"steps_before": old_steps, "steps_after": cfg.steps, "lr_before": before, "lr_after": after}
