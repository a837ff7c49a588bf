"""Where the runs of a seed group or an experiment train: executors of seed jobs.

- local: parallel processes, `jobs` at a time, each with cores/jobs threads (OMP_NUM_THREADS, unless
  the environment sets it) so they do not fight over cores;
- debug: in this process, one after another (a breakpoint or a traceback lands where you are);
- slurm: one SLURM array job per seed through submitit (the `slurm` extra).

Each executor runs a list of SeedJob and hands back one JobOutcome per job: finished (with the run
folder and its final metrics), diverged (a result about the config) or failed (the message says
why). Executors raise only for what stops them from starting (no submitit, no cluster); what to do
with a failed job is the caller's choice.

A local job is a child process, ``python -m nanolm.repro.executors --job -`` with the job as JSON on
stdin, that trains in process and prints its outcome as one JSON object on stdout, whatever happens."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from ..config import make_config
from ..errors import RunStopped, UserError

EXECUTORS = ("local", "debug", "slurm")
RUN_KEYS = ("seed", "name", "group")  # set per run by the executor: an override of them is dropped


class JobStatus(str, Enum):
    FINISHED = "finished"
    DIVERGED = "diverged"  # the loss or gradient norm became NaN or inf: a result about the config
    FAILED = "failed"  # anything else that stopped the run (a bad config, a crash, a lost SLURM job)

    def __str__(self) -> str:  # the text, also in f-strings, on every Python version
        return self.value


@dataclass(frozen=True)
class SeedJob:
    """One run of a group: the group's config overrides (seed, name and group among them are dropped:
    the job sets them) on one seed. Its run is named <group>-seed<seed>."""

    overrides: list[str]
    seed: int
    group: str


@dataclass
class JobOutcome:
    seed: int
    group: str
    status: JobStatus
    run_dir: str | None = None  # where the run was recorded (finished runs)
    final: dict[str, Any] = field(default_factory=dict)  # the finished run's final metrics
    message: str | None = None  # one line: why it diverged or failed

    def raise_if_failed(self) -> None:
        """A failed job as the one-line UserError the user sees."""
        if self.status is JobStatus.FAILED:
            raise UserError(self.message or f"seed {self.seed} failed")

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status.value}

    @classmethod
    def from_dict(cls, d: dict) -> JobOutcome:
        return cls(int(d["seed"]), str(d["group"]), JobStatus(d["status"]), d.get("run_dir"), dict(d.get("final") or {}),
                   d.get("message"))


def per_run_overrides(overrides: list[str]) -> list[str]:
    """overrides without seed, name and group, which each run of a group gets from its executor."""
    return [kv for kv in overrides if kv.split("=", 1)[0].strip() not in RUN_KEYS]


# ---- one job, in this process -------------------------------------------------------------------

def train_one_seed(overrides: list[str], seed: int, name: str) -> Any:
    """Train one seed of group `name` in this process; its TrainResult. Raises what train() raises
    (TrainingDiverged, UserError, ...)."""
    from ..train import train

    cfg = make_config(overrides=[*per_run_overrides(overrides), f"group={name}"], seed=seed, name=f"{name}-seed{seed}")
    return train(cfg, progress=False)


def train_job(job: SeedJob) -> JobOutcome:
    """Train one job in this process. A divergence, a UserError or another stopped run is an outcome,
    not an exception; any other exception (a bug) propagates."""
    from ..train import TrainingDiverged

    try:
        result = train_one_seed(job.overrides, job.seed, job.group)
    except TrainingDiverged as e:
        return JobOutcome(job.seed, job.group, JobStatus.DIVERGED, message=f"seed {job.seed} diverged: {e}")
    except (UserError, RunStopped) as e:
        return JobOutcome(job.seed, job.group, JobStatus.FAILED, message=f"seed {job.seed} failed: {e}")
    final = {k: v for k, v in vars(result).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return JobOutcome(job.seed, job.group, JobStatus.FINISHED, str(result.run_dir), final)


# ---- executors ----------------------------------------------------------------------------------

OnDone = Callable[[JobOutcome], None]


class Executor(Protocol):
    name: str

    def run(self, jobs: Sequence[SeedJob], on_done: OnDone | None = None) -> list[JobOutcome]:
        """Run the jobs; on_done(outcome) as each ends (an exception it raises stops the executor
        once the jobs already started have ended). The outcomes, in the order of `jobs`."""
        ...


def _in_job_order(jobs: Sequence[SeedJob], outcomes: dict[int, JobOutcome]) -> list[JobOutcome]:
    return [outcomes[i] for i in range(len(jobs))]


class DebugExecutor:
    """In this process, one job after another."""

    name = "debug"

    def run(self, jobs: Sequence[SeedJob], on_done: OnDone | None = None) -> list[JobOutcome]:
        outcomes = []
        for job in jobs:
            outcomes.append(train_job(job))
            if on_done:
                on_done(outcomes[-1])
        return outcomes


class LocalExecutor:
    """Child processes, `jobs` at a time, each with cores/jobs threads."""

    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise UserError(f"--jobs must be >= 1, got {jobs}")
        self.jobs = jobs

    @property
    def threads(self) -> int:
        return max(1, (os.cpu_count() or 1) // self.jobs)

    def run(self, jobs: Sequence[SeedJob], on_done: OnDone | None = None) -> list[JobOutcome]:
        outcomes: dict[int, JobOutcome] = {}
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        try:
            futures = {pool.submit(run_child, job, self.threads): i for i, job in enumerate(jobs)}
            for future in as_completed(futures):
                outcomes[futures[future]] = future.result()
                if on_done:
                    on_done(outcomes[futures[future]])
        except BaseException:  # an error or Ctrl-C: the queued jobs never start (the running ones finish)
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return _in_job_order(jobs, outcomes)


def run_child(job: SeedJob, threads: int) -> JobOutcome:
    """Train `job` in a child process with `threads` threads; its outcome, read from the child's JSON."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
    out = subprocess.run([sys.executable, "-m", "nanolm.repro.executors", "--job", "-"], input=json.dumps(asdict(job)),
                         capture_output=True, text=True, env=env)
    try:
        return JobOutcome.from_dict(json.loads(out.stdout))
    except (json.JSONDecodeError, TypeError, KeyError, ValueError):  # it died before it could answer
        last = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}, no output"])[-1]
        return JobOutcome(job.seed, job.group, JobStatus.FAILED, message=f"seed {job.seed} failed: {last}")


class SlurmExecutor:
    """One SLURM array job per seed through submitit; its records go to `folder`."""

    name = "slurm"

    def __init__(self, folder: str | Path, job_name: str, timeout_min: int = 60) -> None:
        self.folder, self.job_name, self.timeout_min = Path(folder), job_name, timeout_min

    def run(self, jobs: Sequence[SeedJob], on_done: OnDone | None = None) -> list[JobOutcome]:
        submitted = self._submit(jobs)
        outcomes = []
        for job, handle in zip(jobs, submitted):
            outcomes.append(_slurm_outcome(job, handle))
            if on_done:
                on_done(outcomes[-1])
        return outcomes

    def _submit(self, jobs: Sequence[SeedJob]) -> list:
        try:
            import submitit
        except ImportError:
            raise UserError("--executor slurm needs submitit: pip install 'nanolm[slurm]'") from None
        try:
            ex = submitit.AutoExecutor(folder=self.folder, cluster="slurm")
        except RuntimeError as e:  # no sbatch/srun on this machine
            raise UserError(f"--executor slurm: {e}; run it on a SLURM login node, or use --executor local") from None
        ex.update_parameters(timeout_min=self.timeout_min, name=self.job_name)
        # train_job returns a divergence or a UserError as an outcome: submitit would hand back a job's
        # exception only as a FailedJobError.
        return ex.map_array(train_job, list(jobs))


def _slurm_outcome(job: SeedJob, handle) -> JobOutcome:
    """The job's outcome; a job that crashed or was lost is failed, with the last error line of its traceback."""
    try:
        return handle.result()
    except Exception as e:  # submitit's FailedJobError / UncompletedJobError carry the job's own traceback
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Interrupt)\b", line)]
        last = (errors or lines or [type(e).__name__])[-1]
        return JobOutcome(job.seed, job.group, JobStatus.FAILED,
                          message=f"seed {job.seed}: SLURM job {handle.job_id} failed: {last}; "
                                  f"its logs are in {handle.paths.folder}")


def make_executor(kind: str, jobs: int = 1, runs_dir: str | Path = "runs", name: str = "group") -> Executor:
    """The executor `kind` (one of EXECUTORS): local with `jobs` at a time, debug, or slurm with its
    records under <runs_dir>/slurm and its jobs named nanolm-<name>."""
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "debug":
        return DebugExecutor()
    if kind == "slurm":
        return SlurmExecutor(Path(runs_dir) / "slurm", f"nanolm-{name}")
    raise UserError(f"--executor must be local, debug or slurm, got {kind!r}")


# ---- the local executor's child -----------------------------------------------------------------

def child_main(argv: list[str] | None = None) -> int:
    """Read a SeedJob as JSON (--job FILE, or - for stdin), train it, print its JobOutcome as one JSON
    object on stdout. What training prints goes to stderr, so stdout carries the outcome alone."""
    parser = argparse.ArgumentParser(prog="python -m nanolm.repro.executors", description=child_main.__doc__)
    parser.add_argument("--job", required=True, help="the job as JSON: a file, or - for stdin")
    args = parser.parse_args(argv)
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # print() and C extensions alike now write to stderr
    job = SeedJob(**json.loads(sys.stdin.read() if args.job == "-" else Path(args.job).read_text(encoding="utf-8")))
    try:
        outcome = train_job(job)
    except Exception as e:  # a bug, or something torch raised: still one answer, and the traceback on stderr
        traceback.print_exc()
        outcome = JobOutcome(job.seed, job.group, JobStatus.FAILED,
                             message=f"seed {job.seed} failed: {type(e).__name__}: {e}".splitlines()[0])
    with answer:
        answer.write(json.dumps(outcome.to_dict()) + "\n")
    return 0 if outcome.status is JobStatus.FINISHED else 1


if __name__ == "__main__":
    sys.exit(child_main())
