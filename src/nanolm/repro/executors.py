"""Where the runs of a seed group or an experiment train: executors of seed jobs.

- local: parallel processes, `jobs` at a time, each with cores/jobs threads (OMP_NUM_THREADS, unless
  the environment sets it) so they do not fight over cores;
- debug: in this process, one after another (a breakpoint or a traceback lands where you are);
- slurm: one SLURM array job per seed through submitit (the `slurm` extra), each job with the
  resources of a SlurmResources (GPUs, time limit, partition, processes per job); a job of several
  processes is one data-parallel training (its tasks get torch.distributed's env:// variables).

Each executor runs a list of SeedJob and hands back one JobOutcome per job: finished (with the run
folder and its final metrics), diverged (a result about the config) or failed (the message says
why). Executors raise only for what stops them from starting (no submitit, no cluster); what to do
with a failed job is the caller's choice.

A local job is a child process, ``python -m nanolm.repro.executors --job -`` with the job as JSON on
stdin, that trains in process and prints its outcome as one JSON object on stdout, whatever happens."""

from __future__ import annotations

import argparse
import importlib.util
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
from typing import Any, Protocol, TypeVar

from ..config import make_config
from ..errors import RunStopped, UserError
from ..runs.store import check_runs_root

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
        return cls(
            int(d["seed"]),
            str(d["group"]),
            JobStatus(d["status"]),
            d.get("run_dir"),
            dict(d.get("final") or {}),
            d.get("message"),
        )


def per_run_overrides(overrides: list[str]) -> list[str]:
    """overrides without seed, name and group, which each run of a group gets from its executor."""
    return [kv for kv in overrides if kv.split("=", 1)[0].strip() not in RUN_KEYS]


# ---- one job, in this process -------------------------------------------------------------------


def train_one_seed(overrides: list[str], seed: int, name: str) -> Any:
    """Train one seed of group `name` in this process; its TrainResult. Raises what train() raises
    (TrainingDiverged, UserError, ...)."""
    from ..training.driver import train

    cfg = make_config(overrides=[*per_run_overrides(overrides), f"group={name}"], seed=seed, name=f"{name}-seed{seed}")
    return train(cfg, progress=False)


def train_job(job: SeedJob) -> JobOutcome:
    """Train one job in this process. A divergence, a UserError or another stopped run is an outcome,
    not an exception; any other exception (a bug) propagates."""
    from ..training.record import TrainingDiverged

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
    out = subprocess.run(
        [sys.executable, "-m", "nanolm.repro.executors", "--job", "-"],
        input=json.dumps(asdict(job)),
        capture_output=True,
        text=True,
        env=env,
    )
    try:
        return JobOutcome.from_dict(json.loads(out.stdout))
    except (json.JSONDecodeError, TypeError, KeyError, ValueError):  # it died before it could answer
        last = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}, no output"])[-1]
        return JobOutcome(job.seed, job.group, JobStatus.FAILED, message=f"seed {job.seed} failed: {last}")


_SLURM_TIME = re.compile(r"(?:(?P<days>\d+)-)?(?P<fields>\d+(?::\d+){0,2})")
SLURM_TIME_FORMS = "minutes (90), MM:SS, H:MM:SS (1:30:00), D-H, D-H:MM or D-H:MM:SS (1-12:00), as sbatch --time takes it"
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*")  # one partition or a comma-separated list


def slurm_minutes(text: str) -> int:
    """A SLURM time limit (`sbatch --time` forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in whole minutes,
    seconds rounded up (submitit takes minutes). UserError for another form or a limit under one minute."""
    m = _SLURM_TIME.fullmatch(text.strip())
    if m is None:
        raise UserError(f"--slurm-time {text!r}: give {SLURM_TIME_FORMS}")
    fields = [int(x) for x in m["fields"].split(":")]
    days = int(m["days"] or 0)
    if m["days"] is not None:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = (fields + [0, 0])[:3]
    elif len(fields) == 3:  # H:M:S
        hours, minutes, seconds = fields
    else:  # M, M:S
        hours, (minutes, seconds) = 0, (fields + [0])[:2]
    total_s = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total_s <= 0:
        raise UserError(f"--slurm-time {text!r}: a job needs at least a minute; give {SLURM_TIME_FORMS}")
    return -(-total_s // 60)


@dataclass(frozen=True)
class SlurmResources:
    """What each SLURM array job of a seed group or sweep asks for. One job is one run; with nproc > 1 it is
    one data-parallel training over nproc processes (SLURM tasks on one node, started by srun), each on its
    own GPU when gpus is set. None leaves the cluster's default (the partition's GPUs, its default partition)."""

    gpus: int | None = None  # GPUs per job (sbatch --gpus-per-node); 0 or nproc
    time_min: int = 60  # wall-clock limit per job, minutes (sbatch --time)
    partition: str | None = None  # sbatch --partition
    nproc: int = 1  # processes per job (sbatch --ntasks-per-node): ranks of one training

    def __post_init__(self) -> None:
        if self.gpus is not None and self.gpus < 0:
            raise UserError(f"--slurm-gpus must be >= 0, got {self.gpus}")
        if self.nproc < 1:
            raise UserError(f"--slurm-nproc must be >= 1, got {self.nproc}")
        if self.time_min < 1:
            raise UserError(f"--slurm-time must be at least a minute, got {self.time_min} min")
        if self.partition is not None and not _PARTITION.fullmatch(self.partition):
            raise UserError(
                f"--slurm-partition {self.partition!r}: a partition name is letters, digits, '_', '.' "
                f"and '-' (several: comma-separated, e.g. gpu,gpu-long)"
            )
        if self.gpus and self.gpus != self.nproc:
            raise UserError(
                f"--slurm-gpus {self.gpus} with --slurm-nproc {self.nproc}: nanolm trains on one GPU per "
                f"process, so a job needs as many GPUs as processes: give --slurm-gpus {self.nproc} "
                f"(or --slurm-nproc {self.gpus}), or --slurm-gpus 0 for processes on CPU (gloo)"
            )

    @classmethod
    def from_options(
        cls, gpus: int | None = None, time: str | None = None, partition: str | None = None, nproc: int | None = None
    ) -> SlurmResources:
        """From the command line's --slurm-* values (None: not given); the time as sbatch --time writes it."""
        return cls(gpus, 60 if time is None else slurm_minutes(time), partition, 1 if nproc is None else nproc)

    def check_config(self, cfg: Any) -> None:
        """A UserError, before anything is submitted, when a job of `cfg` could not run on these resources:
        with nproc > 1 each job is a data-parallel training, whose processes must split the batch evenly."""
        if self.nproc > 1:
            from ..distributed import per_rank_batch

            per_rank_batch(cfg.batch_size, self.nproc)

    def submitit_parameters(self, name: str) -> dict[str, Any]:
        """The keyword arguments of submitit's AutoExecutor.update_parameters for jobs named `name`."""
        params: dict[str, Any] = {"name": name, "timeout_min": self.time_min, "nodes": 1, "tasks_per_node": self.nproc}
        if self.gpus is not None:
            params["gpus_per_node"] = self.gpus
        if self.partition is not None:
            params["slurm_partition"] = self.partition
        return params


T = TypeVar("T")
R = TypeVar("R")


def export_torch_distributed_env() -> dict[str, str]:
    """In a submitit job of several tasks: set torch.distributed's env:// variables (MASTER_ADDR, MASTER_PORT,
    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) from the job's, as torchrun sets them, and return them;
    outside such a job, set nothing and return {}. CUDA_VISIBLE_DEVICES is left alone: like under torchrun,
    each process takes the GPU of its LOCAL_RANK."""
    import submitit

    try:
        tasks = submitit.JobEnvironment().num_tasks
    except RuntimeError:  # not in a submitit job (the debug executor, a test calling it directly)
        return {}
    if tasks <= 1:
        return {}
    submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    return {k: os.environ[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}


def in_slurm_task(fn: Callable[[T], R], item: T) -> R:
    """fn(item) in one task of a SLURM job, a rank of its training when the job has several tasks."""
    export_torch_distributed_env()
    return fn(item)


class SlurmExecutor:
    """One SLURM array job per seed through submitit, each with `resources`; its records go to `folder`."""

    name = "slurm"

    def __init__(self, folder: str | Path, job_name: str, resources: SlurmResources | None = None) -> None:
        self.folder, self.job_name = Path(folder), job_name
        self.resources = resources or SlurmResources()

    def run(self, jobs: Sequence[SeedJob], on_done: OnDone | None = None) -> list[JobOutcome]:
        # train_job returns a divergence or a UserError as an outcome: submitit would hand back a job's
        # exception only as a FailedJobError.
        submitted = self.submit(train_job, jobs)
        outcomes = []
        for job, handle in zip(jobs, submitted):
            outcomes.append(_slurm_outcome(job, handle))
            if on_done:
                on_done(outcomes[-1])
        return outcomes

    def submit(self, fn: Callable[[T], Any], items: Sequence[T], cluster: str = "slurm") -> list:
        """fn over items as one array job (sbatch --array, through submitit's map_array), one array task per
        item, each task with self.resources: submitit's job handles, in the order of items. `cluster` is
        submitit's: "slurm", or "local" / "debug" to try the same submission on this machine."""
        try:
            import submitit
        except ImportError:
            raise UserError("--executor slurm needs submitit: pip install 'nanolm[slurm]'") from None
        try:
            ex = submitit.AutoExecutor(folder=self.folder, cluster=cluster)
        except RuntimeError as e:  # no sbatch/srun on this machine
            raise UserError(f"--executor slurm: {e}; run it on a SLURM login node, or use --executor local") from None
        ex.update_parameters(**self.resources.submitit_parameters(self.job_name))
        return ex.map_array(in_slurm_task, [fn] * len(items), list(items))


def _slurm_outcome(job: SeedJob, handle) -> JobOutcome:
    """The job's outcome; a job that crashed or was lost is failed, with the last error line of its traceback."""
    try:
        return handle.results()[0]  # task 0 is rank 0, which records the run (one task: its only result)
    except Exception as e:  # submitit's FailedJobError / UncompletedJobError carry the job's own traceback
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Interrupt)\b", line)]
        last = (errors or lines or [type(e).__name__])[-1]
        return JobOutcome(
            job.seed,
            job.group,
            JobStatus.FAILED,
            message=f"seed {job.seed}: SLURM job {handle.job_id} failed: {last}; its logs are in {handle.paths.folder}",
        )


def make_executor(
    kind: str, jobs: int = 1, runs_dir: str | Path = "runs", name: str = "group", slurm: SlurmResources | None = None
) -> Executor:
    """The executor `kind` (one of EXECUTORS): local with `jobs` at a time, debug, or slurm with its
    records under <runs_dir>/slurm, its jobs named nanolm-<name> and each with the `slurm` resources
    (default: SlurmResources()). Resources for another executor are a UserError, not silently dropped."""
    if slurm is not None and kind != "slurm":
        raise UserError(f"--slurm-* options are for --executor slurm, not --executor {kind}: add --executor slurm, or drop them")
    if kind not in EXECUTORS:
        raise UserError(f"--executor must be local, debug or slurm, got {kind!r}")
    check_runs_root(runs_dir)  # every executor's runs land there: refused before a seed starts
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "debug":
        return DebugExecutor()
    if importlib.util.find_spec("submitit") is None:
        raise UserError("--executor slurm needs submitit: pip install 'nanolm[slurm]'")
    return SlurmExecutor(Path(runs_dir) / "slurm", f"nanolm-{name}", slurm)


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
        outcome = JobOutcome(
            job.seed, job.group, JobStatus.FAILED, message=f"seed {job.seed} failed: {type(e).__name__}: {e}".splitlines()[0]
        )
    with answer:
        answer.write(json.dumps(outcome.to_dict()) + "\n")
    return 0 if outcome.status is JobStatus.FINISHED else 1


if __name__ == "__main__":
    sys.exit(child_main())
