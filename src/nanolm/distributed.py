"""Data-parallel training's process group (torch.distributed), and the launcher behind ``nanolm train --nproc N``.

Where this process sits comes from the launcher's environment: torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) or, under SLURM's srun, SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
the job's node list. The backend is gloo on CPU and NCCL on CUDA (one GPU per rank, cuda:LOCAL_RANK). Every
collective has a timeout (NANOLM_DIST_TIMEOUT_S, default 300 s), so a rank that died or hangs ends the run
with an error instead of a hang. The few collectives training needs are here: a mean, a vote (a stop asked
on any rank is a stop on all), a gather and a broadcast. `launch` starts N copies of a nanolm command through
torch.distributed's elastic launcher, the engine of torchrun.

One process (no launcher variables) is a world of one: nothing is initialized, every collective returns its
input, and training computes exactly what it did before data parallelism existed.

On CPU each rank runs one thread (torch.set_num_threads(1)) unless OMP_NUM_THREADS says otherwise (or, under
srun, SLURM_CPUS_PER_TASK): N ranks of several threads each would fight for the same cores."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from .errors import UserError

TIMEOUT_ENV = "NANOLM_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0  # a collective waiting longer than this for a peer raises: the peer is dead or stuck
BACKENDS = ("auto", "gloo", "nccl")
PEER_LOST_EXIT = 3  # the exit code of a rank that stopped because another rank failed (see LaunchFailed.root_cause)


# ---- where this process sits -------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in a multi-process launch, as its launcher described it."""

    rank: int  # 0 .. world_size-1
    world_size: int  # processes in the whole job
    local_rank: int  # this process's index on its machine: its GPU is cuda:local_rank
    local_world_size: int  # processes on this machine
    launcher: str  # "torchrun" (its variables; also nanolm train --nproc) or "slurm" (srun)
    master_addr: str | None = None  # slurm: the host of rank 0's rendezvous store (torchrun's are read by env://)
    master_port: int | None = None
    run_id: str | None = None  # the launch's id: torchrun's run id, or SLURM job.step


def _int_var(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None:
        if default is None:
            raise UserError(
                f"{name} is not set, but the other launcher variables are; start the ranks with torchrun "
                "(or nanolm train --nproc N, or srun), which sets them all"
            )
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise UserError(f"{name}={raw!r} is not a whole number; start the ranks with torchrun or srun, which set it") from None


def launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """Where this process sits in a launch of several processes, or None when it runs alone (no launcher
    variables, or a world of one). torchrun's variables win over SLURM's, so torchrun inside a SLURM job
    works; SLURM's count only under srun (SLURM_STEP_ID set): a batch script's own shell is not a rank."""
    env = os.environ if environ is None else environ
    if "RANK" in env or "WORLD_SIZE" in env:
        world = _int_var(env, "WORLD_SIZE")
        if world <= 1:
            return None
        rank = _int_var(env, "RANK")
        local = _int_var(env, "LOCAL_RANK", 0)
        launch = LaunchEnv(
            rank,
            world,
            local,
            _int_var(env, "LOCAL_WORLD_SIZE", world),
            "torchrun",
            env.get("MASTER_ADDR"),
            _int_var(env, "MASTER_PORT", 0) or None,
            env.get("TORCHELASTIC_RUN_ID"),
        )
    elif "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        world = _int_var(env, "SLURM_STEP_NUM_TASKS", _int_var(env, "SLURM_NTASKS", 1))
        if world <= 1:
            return None
        nodes = max(1, _int_var(env, "SLURM_STEP_NUM_NODES", _int_var(env, "SLURM_JOB_NUM_NODES", 1)))
        job, step = env.get("SLURM_JOB_ID", "0"), env.get("SLURM_STEP_ID", "0")
        launch = LaunchEnv(
            _int_var(env, "SLURM_PROCID"),
            world,
            _int_var(env, "SLURM_LOCALID", 0),
            -(-world // nodes),
            "slurm",
            env.get("MASTER_ADDR") or _slurm_first_host(env),
            _int_var(env, "MASTER_PORT", 0) or _slurm_port(job, step),
            f"{job}.{step}",
        )
    else:
        return None
    if not 0 <= launch.rank < launch.world_size or launch.local_rank < 0:
        raise UserError(
            f"rank {launch.rank} of a world of {launch.world_size} (local rank {launch.local_rank}) is "
            f"not a place in it; start the ranks with torchrun or srun, which number them"
        )
    return launch


def _slurm_first_host(env: Mapping[str, str]) -> str:
    """The first host of the step's (or job's) node list: where rank 0 listens."""
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    if nodes and not any(c in nodes for c in "[,"):
        return nodes.strip()
    try:  # node lists such as "gpu[01-04],cpu7": submitit (the slurm extra) parses them as SLURM does
        from submitit.slurm.slurm import _parse_node_list
    except ImportError:
        _parse_node_list = None
    if nodes and _parse_node_list is not None:
        return _parse_node_list(nodes)[0]
    raise UserError(
        f"under srun, rank 0's host is needed: export MASTER_ADDR=$(scontrol show hostnames "
        f'"$SLURM_JOB_NODELIST" | head -n 1) in the batch script (node list {nodes!r}), '
        "or pip install 'nanolm[slurm]'"
    )


def _slurm_port(job: str, step: str) -> int:
    """A port every rank of one srun step computes alike (20000..59999), different for another job or step."""
    return random.Random(f"{job}.{step}").randrange(20000, 60000)


# ---- checks a launcher (or a user) makes before anything starts ---------------------------------


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask, as taskset or SLURM set it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_nproc(nproc: int, device_type: str) -> int:
    """nproc, once this machine can run that many ranks: one GPU each on CUDA, one core each on a CPU."""
    if nproc <= 0:
        raise UserError(f"--nproc {nproc}: give a number of processes >= 1, e.g. --nproc 2")
    if device_type == "cuda":
        gpus = torch.cuda.device_count()
        if nproc > gpus:
            raise UserError(
                f"--nproc {nproc}: this machine has {gpus} GPU(s) and each rank needs its own; "
                f"use --nproc {max(gpus, 1)} or fewer"
            )
    elif device_type == "cpu":
        cores = cpu_cores()
        if nproc > cores:
            raise UserError(
                f"--nproc {nproc}: this machine has {cores} core(s) for this process, and each rank "
                f"needs its own; use --nproc {cores} or fewer"
            )
    else:
        raise UserError(
            f"--nproc {nproc}: data-parallel training runs on CPU (gloo) or CUDA (NCCL), not on "
            f"{device_type}; set --set device=cpu or cuda"
        )
    return nproc


def resolve_backend(backend: str, device_type: str) -> str:
    """gloo or nccl: auto picks NCCL for CUDA and gloo for CPU; NCCL without GPUs is a UserError."""
    if backend not in BACKENDS:
        raise UserError(f"--backend {backend!r}: use auto, gloo or nccl")
    if device_type not in ("cpu", "cuda"):
        raise UserError(
            f"data-parallel training runs on CPU (gloo) or CUDA (NCCL), not on {device_type}; set --set device=cpu or cuda"
        )
    if backend == "auto":
        backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl" and not (torch.cuda.is_available() and dist.is_nccl_available()):
        raise UserError(
            "--backend nccl needs CUDA GPUs and a torch built with NCCL; this machine has neither; use --backend gloo (CPU)"
        )
    if backend == "nccl" and device_type != "cuda":
        raise UserError(
            "--backend nccl moves CUDA tensors only, and the run's device is cpu; use --backend gloo, or --set device=cuda"
        )
    if backend == "gloo" and not dist.is_gloo_available():
        raise UserError("--backend gloo: this torch was built without gloo; use --backend nccl on GPUs")
    return backend


def per_rank_batch(batch_size: int, world_size: int) -> int:
    """Each rank's share of the config's batch_size (the global batch of one micro-step); a world size that
    does not divide it is a UserError."""
    if batch_size % world_size:
        lower, upper = batch_size // world_size * world_size, -(-batch_size // world_size) * world_size
        fits = [str(n) for n in range(2, min(batch_size, 16) + 1) if batch_size % n == 0][:4]
        raise UserError(
            f"batch_size {batch_size} does not split evenly over {world_size} processes (it is the global "
            f"batch; each rank takes batch_size / processes); use --set batch_size={lower or upper} or "
            f"{upper}, or a process count that divides it ({', '.join(fits) or '1'})"
        )
    return batch_size // world_size


def timeout_seconds(environ: Mapping[str, str] | None = None) -> float:
    """How long a collective waits for a peer before it raises (NANOLM_DIST_TIMEOUT_S, default 300 s)."""
    raw = (os.environ if environ is None else environ).get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise UserError(f"{TIMEOUT_ENV}={raw!r}: give seconds > 0, e.g. {TIMEOUT_ENV}=300")
    return value


# ---- the process group --------------------------------------------------------------------------


@dataclass
class Dist:
    """This process's rank in the training's world, and the collectives training uses. A world of one
    (the default) has no process group: every collective returns its input."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # gloo or nccl; None for one process
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # this rank's device
    launcher: str = "single"  # single, torchrun or slurm
    run_id: str | None = None
    timeout_s: float | None = None
    threads: int = field(default_factory=torch.get_num_threads)
    control: Any = None  # the group for CPU-side votes and gathers: the default group under gloo, a gloo one under NCCL
    owns_group: bool = False  # this object initialized the process group, so teardown destroys it

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes the run's files and prints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """tensor, in place, replaced by its mean over the ranks (a sum, then a division: exact for 2 ranks)."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            tensor.div_(self.world_size)
        return tensor

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """tensor, in place, replaced by its sum over the ranks."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def vote(self, *flags: bool) -> tuple[bool, ...]:
        """Each flag, true when it is true on any rank: so every rank stops, or checkpoints, at the same step
        (one small all-reduce on the CPU; no device sync)."""
        if not self.distributed:
            return tuple(bool(f) for f in flags)
        votes = torch.tensor([int(bool(f)) for f in flags], dtype=torch.int32)
        dist.all_reduce(votes, op=dist.ReduceOp.MAX, group=self.control)
        return tuple(bool(v) for v in votes.tolist())

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's obj (JSON-like values), in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's obj, on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def agree_or_raise(self, error: UserError | None) -> None:
        """Raise, on every rank, the UserError any rank had (rank 0's first): a check that failed on one
        rank stops them all with its line, instead of leaving the others waiting for it."""
        messages = self.gather(None if error is None else str(error))
        failed = [(r, m) for r, m in enumerate(messages) if m is not None]
        if failed:
            rank, message = failed[0]
            same = all(m == message for _, m in failed) and len(failed) == self.world_size
            raise UserError(message if same else f"rank {rank}: {message}")

    def rank_info(self) -> dict:
        """This rank as the manifest records it."""
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "device": str(self.device),
            "threads": torch.get_num_threads(),
        }

    def describe(self, ranks: list[dict]) -> dict:
        """The manifest's ``distributed`` entry: world size, backend, launcher and every rank."""
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "launcher": self.launcher,
            "run_id": self.run_id,
            "timeout_s": self.timeout_s,
            "ranks": ranks,
        }


_CONTROL_GROUPS: dict[int, Any] = {}  # a gloo group for votes beside someone else's NCCL group, made once


def existing_group(device_type: str = "cpu") -> Dist | None:
    """The Dist of a process group someone else initialized (a notebook, a profiler), or None; on CUDA its
    device is the current one (the caller set it). Under NCCL its first call on each rank makes a gloo group
    for the votes (a collective: every rank must call it)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    backend = str(dist.get_backend())
    local = _int_var(os.environ, "LOCAL_RANK", 0)
    cuda = (device_type == "cuda" or backend == "nccl") and torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    control = None
    if backend != "gloo":
        key = id(dist.group.WORLD)
        if key not in _CONTROL_GROUPS:
            _CONTROL_GROUPS[key] = dist.new_group(backend="gloo")
        control = _CONTROL_GROUPS[key]
    launch = launch_env()
    return Dist(
        dist.get_rank(),
        dist.get_world_size(),
        local,
        backend,
        device,
        launch.launcher if launch else "torchrun",
        launch.run_id if launch else None,
        None,
        torch.get_num_threads(),
        control,
        owns_group=False,
    )


def setup(
    device_type: str, backend: str = "auto", timeout_s: float | None = None, environ: Mapping[str, str] | None = None
) -> Dist:
    """Join the launch this process belongs to (see launch_env) and return its Dist; a world of one when it
    was started alone. An existing process group (someone else's) is used as it is.

    device_type: "cpu" or "cuda" (the run's device; on CUDA rank r uses cuda:LOCAL_RANK and sets it current).
    backend: auto (NCCL on CUDA, gloo on CPU), gloo or nccl. timeout_s: how long a collective waits for a
    peer (default: timeout_seconds())."""
    existing = existing_group(device_type)
    if existing is not None:
        return existing
    launch = launch_env(environ)
    if launch is None:
        return Dist(device=torch.device(device_type))
    backend = resolve_backend(backend, device_type)
    env = os.environ if environ is None else environ
    device = torch.device("cpu")
    if device_type == "cuda":
        device = torch.device("cuda", rank_gpu(launch))
        torch.cuda.set_device(device)
    elif "OMP_NUM_THREADS" not in env:
        # One core per rank (N ranks of many threads would fight over the same cores), or the cores SLURM gave
        # each task (srun --cpus-per-task).
        torch.set_num_threads(max(1, _int_var(env, "SLURM_CPUS_PER_TASK", 1)) if launch.launcher == "slurm" else 1)
    timeout = timeout_s if timeout_s is not None else timeout_seconds(environ)
    _init_group(launch, backend, device, timeout)
    control = None if backend == "gloo" else dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
    return Dist(
        launch.rank,
        launch.world_size,
        launch.local_rank,
        backend,
        device,
        launch.launcher,
        launch.run_id,
        timeout,
        torch.get_num_threads(),
        control,
        owns_group=True,
    )


def rank_gpu(launch: LaunchEnv) -> int:
    """The CUDA device index of a rank: cuda:LOCAL_RANK when the machine's GPUs are all visible (torchrun,
    srun --gpus-per-node), cuda:0 when each rank sees only its own (srun --gpus-per-task=1)."""
    gpus = torch.cuda.device_count()
    if launch.local_rank < gpus:
        return launch.local_rank
    if gpus == 1:
        return 0
    raise UserError(
        f"rank {launch.rank} has local rank {launch.local_rank}, but this machine shows it {gpus} GPU(s); "
        "start at most one process per GPU on each machine"
    )


def _init_group(launch: LaunchEnv, backend: str, device: torch.device, timeout: float) -> None:
    kwargs: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout)}
    if device.type == "cuda":
        kwargs["device_id"] = device
    if launch.launcher == "slurm":  # srun sets no MASTER_*: rank 0 listens on the first host
        kwargs.update(
            init_method=f"tcp://{launch.master_addr}:{launch.master_port}", rank=launch.rank, world_size=launch.world_size
        )
    # torchrun: env:// reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (its agent's store)
    # torch.distributed.nn.functional binds group.WORLD into its functions' default arguments when it is first
    # imported (DDP's constructor imports it). Imported after this init, it would hold the group for the rest of
    # the process: destroy_process_group() could not stop gloo's worker threads, and one still freeing a
    # collective's tensors while the interpreter exits aborts the rank ("terminate called without an active
    # exception", about 1 run in 50). Imported before the group exists, its defaults are None.
    import torch.distributed.nn.functional  # noqa: F401

    try:
        dist.init_process_group(**kwargs)
    except (RuntimeError, ValueError) as e:
        where = f"{launch.master_addr}:{launch.master_port}" if launch.master_addr else "the launcher's store"
        raise UserError(
            f"rank {launch.rank} of {launch.world_size} could not join the process group at {where} "
            f"({_first_line(e)}); check that every rank was started and MASTER_ADDR/MASTER_PORT "
            "name a reachable host and a free port"
        ) from None


def teardown(d: Dist) -> None:
    """Leave the process group this Dist created (a world of one, or someone else's group: nothing), once gloo's
    threads have let go of the communication hooks' callbacks (AllReduceTimer)."""
    if not settle_hook_callbacks():
        print(
            f"nanolm: warning: rank {d.rank}: gloo still holds a communication hook's callback after 30 s; "
            "leaving the process group anyway",
            file=sys.stderr,
        )
    if d.owns_group and dist.is_initialized():
        with contextlib.suppress(RuntimeError, ValueError):  # after a peer died the group may be broken already
            dist.destroy_process_group()
        d.owns_group = False


@contextlib.contextmanager
def process_group(device_type: str, backend: str = "auto", timeout_s: float | None = None) -> Iterator[Dist]:
    """setup(...) for the block, teardown after it (also after an error)."""
    d = setup(device_type, backend, timeout_s)
    try:
        yield d
    finally:
        teardown(d)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def is_peer_failure(e: BaseException) -> bool:
    """Whether an error came from a collective whose peer died, hung past the timeout, or closed its end: gloo
    and NCCL raise these as RuntimeError (or torch.distributed.DistError) with the transport's words."""
    if isinstance(e, getattr(dist, "DistError", ())):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and any(
        w in text
        for w in (
            "gloo",
            "Gloo",
            "NCCL",
            "Connection reset",
            "Connection closed",
            "connection closed",
            "timed out",
            "Timed out",
            "ProcessGroup",
            "Broken pipe",
        )
    )


def peer_failure_line(e: BaseException) -> str:
    """A one-line account of a collective's failure, for the run's error message."""
    line = _first_line(e).split("] ", 1)[-1]  # gloo prefixes the C++ source line: "[.../pair.cc:537] Read error ..."
    return line.split(". This is typically caused", 1)[0].rstrip(".")


# ---- DDP ------------------------------------------------------------------------------------------


class AllReduceTimer:
    """A DDP communication hook that does what DDP's default one does (divide each gradient bucket by the
    world size, then all-reduce it: the mean) and adds up, per rank, the seconds from handing a bucket to
    the collective to its result: the time in all-reduce, waiting for the slower rank included. Used on
    gloo (CPU), where the result's arrival is a host event; on NCCL the future completes when the work is
    queued on the GPU, so it would not time anything."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.calls = 0
        self._spans: list[tuple[float, float]] = []  # (hand-off, result) of each bucket, perf_counter seconds
        self._lock = threading.Lock()  # the callback runs on gloo's thread; buckets can finish on several

    def hook(self, state, bucket):  # unannotated: DDP compares annotations with its own types, literally
        """The hook DDP calls with each bucket (a torch.distributed.GradBucket) of gradients ready for the
        all-reduce; returns the future of the averaged bucket."""
        start = time.perf_counter()
        tensor = bucket.buffer().div_(self.world_size)
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            with self._lock:
                self._spans.append((start, time.perf_counter()))
                self.calls += 1
            return f.value()[0]

        hold_until_released(done)
        return future.then(done)

    def take(self) -> float:
        """The seconds during which at least one all-reduce was in flight since the last take (and reset):
        the union of the buckets' spans, since gloo runs a step's buckets concurrently and a sum would count
        their overlap twice."""
        with self._lock:
            spans, self._spans = sorted(self._spans), []
        return union_seconds(spans)


# gloo's thread drops a hook's Python callback (taking the GIL) a moment after the future it completes is seen done.
# Freeing DDP's reducer frees the process group, whose destructor joins those threads while holding the GIL: with
# a callback not yet dropped, neither can go on, and the rank hangs for good (a loaded 2-core machine, about one
# profiled 2-rank run in ten). So the callbacks are counted until gloo lets go, and teardown waits for that.
_held_callbacks = 0
_held_lock = threading.Lock()


def _released() -> None:
    global _held_callbacks
    with _held_lock:
        _held_callbacks -= 1


def hold_until_released(callback: Callable) -> None:
    """Count `callback` as held by gloo until the last reference to it goes (weakref.finalize)."""
    global _held_callbacks
    with _held_lock:
        _held_callbacks += 1
    weakref.finalize(callback, _released)


def held_callbacks() -> int:
    """Communication hook callbacks that some thread still holds."""
    with _held_lock:
        return _held_callbacks


def settle_hook_callbacks(timeout_s: float = 30.0) -> bool:
    """Wait, without the GIL (sleeping), until no thread holds a hook's callback; False: still held at the timeout."""
    deadline = time.monotonic() + timeout_s
    while held_callbacks() > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals, sorted by start."""
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def wrap_ddp(model: torch.nn.Module, d: Dist) -> tuple[torch.nn.Module, AllReduceTimer | None]:
    """(model wrapped in DistributedDataParallel, its all-reduce timer on gloo or None). Rank 0's weights are
    broadcast to the others here. Buffers are not re-synced before each forward: nanolm's (RoPE tables)
    are computed, the same on every rank."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(
        model, device_ids=[d.device.index] if d.device.type == "cuda" else None, forward_sync_buffers=False
    )
    timer = None
    if d.backend == "gloo":
        timer = AllReduceTimer(d.world_size)
        ddp.register_comm_hook(None, timer.hook)
    return ddp, timer


# ---- the launcher (torch.distributed's elastic agent, as torchrun uses it) ------------------------


@dataclass(frozen=True)
class RankFailure:
    """One rank that ended badly."""

    rank: int
    local_rank: int
    pid: int
    exitcode: int  # negative: killed by that signal

    @property
    def how(self) -> str:
        if self.exitcode < 0:
            try:
                return f"was killed by {signal.Signals(-self.exitcode).name}"
            except ValueError:
                return f"was killed by signal {-self.exitcode}"
        if self.exitcode == PEER_LOST_EXIT:
            return "stopped because another rank failed"
        return f"exited with code {self.exitcode}"


class LaunchFailed(Exception):
    """Some rank of a launch ended badly; the launcher stopped the others."""

    def __init__(self, failures: list[RankFailure], run_id: str) -> None:
        self.failures, self.run_id = sorted(failures, key=lambda f: f.rank), run_id
        super().__init__(f"rank {self.root_cause.rank} (pid {self.root_cause.pid}) {self.root_cause.how}")

    @property
    def root_cause(self) -> RankFailure:
        """The rank whose failure stopped the others: not one the launcher terminated (SIGTERM), nor one that
        only lost its peer (PEER_LOST_EXIT)."""

        def secondary(f: RankFailure) -> bool:
            return f.exitcode in (PEER_LOST_EXIT, -signal.SIGTERM)

        return next((f for f in self.failures if not secondary(f)), self.failures[0])

    @property
    def interrupted(self) -> bool:
        """Every rank stopped on a stop request (Ctrl-C, SIGTERM) and checkpointed (exit 130)."""
        return all(f.exitcode == 130 for f in self.failures)


class LaunchStopped(Exception):
    """The launcher itself was stopped by a signal (Ctrl-C, SIGTERM): it passed the signal to the ranks."""

    def __init__(self, signum: int, run_id: str) -> None:
        self.signum, self.run_id = signum, run_id
        super().__init__(f"stopped by {signal.Signals(signum).name}")


LAUNCHED_BY_ENV = "NANOLM_LAUNCHED_BY"  # set to "nanolm" in the ranks `launch` starts


def launched_by_nanolm() -> bool:
    """Whether this process is a rank that nanolm's own launcher started (which reports a failed rank itself)."""
    return os.environ.get(LAUNCHED_BY_ENV) == "nanolm"


@contextlib.contextmanager
def _launcher_quiet_and_marked() -> Iterator[None]:
    """The elastic agent's own log lines (its config, each worker's exit, the signal it passes on) stay out of
    the user's way (what matters is said once, from LaunchFailed), and the ranks it starts know who started
    them (they inherit this process's environment)."""
    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher"))
    ]
    levels = [logger.level for logger in loggers]
    previous = os.environ.get(LAUNCHED_BY_ENV)
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    os.environ[LAUNCHED_BY_ENV] = "nanolm"
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if previous is None:
            os.environ.pop(LAUNCHED_BY_ENV, None)
        else:
            os.environ[LAUNCHED_BY_ENV] = previous


def launch(nproc: int, args: Sequence[str], run_id: str | None = None, module: str = "nanolm") -> str:
    """Run ``python -m <module> <args>`` as `nproc` ranks on this machine with torch.distributed's elastic
    launcher (what ``torchrun --standalone --nproc-per-node nproc -m <module> <args>`` runs): each rank gets
    RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT and TORCHELASTIC_RUN_ID = run_id; their output goes
    to this terminal. No restarts: when a rank fails the launcher stops the others (SIGTERM, then SIGKILL
    after TORCH_ELASTIC_SHUTDOWN_TIMEOUT, default 30 s) and this raises LaunchFailed. A Ctrl-C or SIGTERM to
    this process is passed to the ranks (they checkpoint and stop), then LaunchStopped is raised.
    Returns the run id."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    run_id = run_id or uuid.uuid4().hex
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=run_id,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        start_method="spawn",
    )
    with _launcher_quiet_and_marked():
        try:
            elastic_launch(config, sys.executable)("-u", "-m", module, *args)
        except ChildFailedError as e:
            failures = [RankFailure(rank, f.local_rank, f.pid, f.exitcode) for rank, f in e.failures.items()]
            raise LaunchFailed(failures, run_id) from None
        except Exception as e:
            signalled = _signal_behind(e, SignalException)
            if signalled is None:
                raise
            raise LaunchStopped(int(signalled.sigval), run_id) from None
    return run_id


def _signal_behind(error: BaseException, signal_type: type[BaseException]) -> BaseException | None:
    """The `signal_type` exception that `error` is or was raised while handling, else None. A signal that lands
    inside torch's metrics wrapper (torch/distributed/elastic/metrics/api.py: the handler raises inside
    ``start = time.time()``) surfaces as an UnboundLocalError for ``start`` whose context is the signal."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, signal_type):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
