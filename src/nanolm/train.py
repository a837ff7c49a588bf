"""Training: AdamW with warmup + cosine LR, gradient clipping and accumulation, periodic eval,
bf16 autocast on CUDA, optional torch.compile; every run recorded and resumable bit for bit.

The loop never syncs with the device on an ordinary step: per-step losses and gradient norms stay
on the device and are checked for NaN/inf when the loop logs, evaluates or checkpoints, which is
also when the run is stopped on divergence (naming the first bad step)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from .allocator import reuse_freed_memory
from .checkpoint import (
    Checkpoint,
    load_optimizer,
    load_weights,
    read_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from .config import TrainConfig, config_from_dict
from .data import TokenData, eval_batches, load_data, window_loader
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


def resolve_device(name: str, option: str = "--set device=") -> torch.device:
    """The torch device a config or option names, once it is known to compute here; else a UserError
    whose fix is written with `option` (``--set device=`` for training, ``--device `` for nanolm peak)."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is not a torch device; use {option}auto, cpu, cuda or mps") from None
    if device.type not in ("cpu", "cuda", "mps"):  # meta, xla, ...: tensors there hold no numbers to train
        raise UserError(f"device {name!r} cannot train or measure anything here; use {option}cpu (or cuda, mps)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available here; use {option}cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UserError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                        f"use {option}cuda:0")
    if device.type == "mps" and not _mps_available():
        raise UserError(f"device {name!r} requested but MPS (Apple's GPU) is not available here; use {option}cpu")
    return device


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def autocast_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    """bf16 on CUDA when auto (and when the GPU supports it); None means full precision."""
    if mode == "none" or (mode == "auto" and device.type != "cuda"):
        return None
    if mode == "auto" and not torch.cuda.is_bf16_supported():
        return None
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


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
    was_training = model.training
    model.eval()
    total = torch.zeros((), device=device)
    for x, y in batches:
        with autocast(device, dtype):
            _, loss = model(x.to(device), y.to(device))
        total += loss.float()
    model.train(was_training)
    return float(total) / len(batches)


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
    here, and each is written before the tracker hears of it."""

    def __init__(self, run_dir: Path, manifest: Manifest, metrics: MetricsLog, tracker: Tracker) -> None:
        self.run_dir, self.manifest, self.metrics, self.tracker = run_dir, manifest, metrics, tracker

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

    def start(self) -> None:
        self.manifest.status, self.manifest.final = RunStatus.RUNNING, None  # a resumed run's old final is over
        self.tracker.start(self.run_dir, self.manifest)
        write_manifest(self.run_dir, self.manifest)

    def checkpointed(self, step: int) -> None:
        """A checkpoint at `step` is complete: where a resume (after any crash) starts."""
        self.manifest.checkpoint_step = step
        write_manifest(self.run_dir, self.manifest)

    def log(self, row: dict) -> None:
        """One metrics row (step, losses, lr, throughput) to metrics.jsonl and the tracker."""
        self.metrics.append(row)
        self.tracker.log(row["step"], {k: v for k, v in row.items() if k != "step" and isinstance(v, float)})

    def finish(self, status: RunStatus, final: RunFinal) -> None:
        self._end(status, final)
        self.tracker.log(final.step, {"final_val_loss": final.val_loss, "final_train_loss": final.train_loss})
        self.tracker.finish(status.value)

    def diverged(self, step: int, message: str) -> TrainingDiverged:
        """Record the divergence at `step`; returns the error for the caller to raise."""
        self._end(RunStatus.DIVERGED, RunFinal(step=step, diverged_at=step))
        self.tracker.finish(RunStatus.DIVERGED.value)
        return TrainingDiverged(message)

    def interrupted(self, step: int, why: str = "interrupted") -> TrainingInterrupted:
        """Record the interruption (Ctrl-C, SIGTERM) after the checkpoint at `step`; the error to raise."""
        self._end(RunStatus.INTERRUPTED, self.manifest.final)
        self.tracker.finish(RunStatus.INTERRUPTED.value)
        saved = f"checkpoint at step {step}" if step else "no step was completed, so no checkpoint"
        return TrainingInterrupted(f"{why}; {saved} in {self.run_dir}; continue with: nanolm train --resume {self.run_dir}")

    def failed_to_write(self, error: OSError) -> RunStopped:
        """A write failed (disk full, folder made read-only): the run stops, resumable from its last complete checkpoint."""
        kept = (f"the checkpoint at step {self.manifest.checkpoint_step} is intact" if self.manifest.checkpoint_step
                else "no checkpoint was complete")
        # The disk that refused the checkpoint may refuse the manifest too; the checkpoint is what counts.
        with contextlib.suppress(OSError, UserError):
            self._end(RunStatus.INTERRUPTED, self.manifest.final)
        self.tracker.finish(RunStatus.INTERRUPTED.value)
        return RunStopped(f"could not write to {self.run_dir}: {error.strerror or error}; {kept}; free space (or "
                          f"make the folder writable), then continue with: nanolm train --resume {self.run_dir}")

    def _end(self, status: RunStatus, final: RunFinal | None) -> None:
        self.manifest.status, self.manifest.final = status, final
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
    steps, and a NaN is still traced to the first step that had it."""

    def __init__(self) -> None:
        self.items: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self.last_logged: float | None = None  # the newest loss a flush returned, for the progress bar

    def add(self, step: int, loss: torch.Tensor, norm: torch.Tensor) -> None:
        self.items.append((step, loss, norm))

    def flush(self) -> float | None:
        """The newest loss, or None when nothing is pending; NonFiniteStep on the first bad step."""
        if not self.items:
            return None
        with record_function("sync"):
            values = torch.stack([torch.stack((loss, norm)) for _, loss, norm in self.items]).cpu()  # one sync
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
    gradient accumulation), `evaluate` runs the fixed eval batches, `checkpoint` saves all a resume needs."""

    def __init__(self, cfg: TrainConfig, data: TokenData, model_cfg: GPTConfig, device: torch.device) -> None:
        self.cfg, self.data, self.device = cfg, data, device
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
        self.pin = cfg.pin_memory if cfg.pin_memory is not None else device.type == "cuda"
        self.tokens_per_step = cfg.grad_accum * B * T

    def restore(self, ckpt: Checkpoint, run_dir: Path) -> None:
        """Weights, optimizer state and every RNG from a checkpoint."""
        load_weights(ckpt, self.model)
        load_optimizer(ckpt, self.optimizer)
        try:
            set_rng_state(ckpt.state["rng"])
        except (RuntimeError, TypeError, ValueError) as e:
            raise UserError(f"--resume {run_dir}: the checkpoint's RNG state is damaged ({e}); resume an intact "
                            "run, or start a new one") from None

    def batches(self, start: int, last: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The training batches of steps start+1 .. last: the same samples whatever the resume point."""
        A, B = self.cfg.grad_accum, self.cfg.batch_size
        loader = window_loader(self.data.train, self.model.cfg.block_size, B, seed=self.cfg.seed, start=start * A * B,
                               n_batches=(last - start) * A, num_workers=self.cfg.num_workers, pin_memory=self.pin)
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
        for _ in range(A):
            with record_function("data"):
                x, y = next(batches)
                x, y = x.to(self.device, non_blocking=self.pin), y.to(self.device, non_blocking=self.pin)
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

    def evaluate(self) -> tuple[float, float]:
        """(val loss, train loss) on the fixed eval batches, nats/token."""
        return (evaluate(self.fwd, self.val_set, self.device, self.dtype),
                evaluate(self.fwd, self.train_set, self.device, self.dtype))

    def checkpoint(self, record: RunRecord, step: int) -> None:
        """Everything a resume needs at `step`, written atomically; the manifest then points at it."""
        A, B = self.cfg.grad_accum, self.cfg.batch_size
        state = {"data_position": step * A * B, "config": self.cfg.to_dict(), "model_config": self.model.cfg.to_dict(),
                 "rng": rng_state(), "data": {"version": self.data.version, "sha256": self.data.sha256}}
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
          on_note: Callable[[str], None] | None = None) -> TrainResult:
    """Train (or resume) a run and return its final numbers.

    cfg: the config (validated); with resume, only the keys in RESUMABLE_CHANGES may differ.
    stop_at: checkpoint and stop after this step (the run stays resumable), as a preemption would.
    on_step: called with the step number after every optimizer step (the profiler's hook).
    on_note: called, before the first step, with each thing the user should know (a resume that moves
    the lr schedule, a missing metrics log); the notes are also in the result."""
    ckpt: Checkpoint | None = None
    if resume is not None:
        cfg, ckpt, manifest = _resume_config(Path(resume), cfg)
    elif cfg is None:
        cfg = TrainConfig().validate()
    if cfg.data:  # recorded absolute: a resume from another folder must still find the file
        cfg = dataclasses.replace(cfg, data=str(Path(cfg.data).resolve()))
    device = resolve_device(cfg.device)
    data = load_data(cfg)  # first: a bad data file is reported before anything else happens
    determinism = seed_everything(cfg.seed, cfg.deterministic)
    model_cfg = cfg.model_config(data.tokenizer.vocab_size)
    if ckpt is not None:
        _check_checkpoint_matches(ckpt, data, data.tokenizer, model_cfg)
        _check_manifest_model(Path(resume), manifest, ckpt)
    start = int(ckpt.state["step"]) if ckpt is not None else 0
    last = _last_step(cfg, start, stop_at)
    trainer = Trainer(cfg, data, model_cfg, device)
    notes: list[str] = []
    if ckpt is not None:
        trainer.restore(ckpt, Path(resume))
        record = RunRecord.resume(Path(resume), manifest, cfg, start, notes, trainer.kernels_compiled)
    else:
        # Which code computed the numbers: compiled kernels round differently from eager ones.
        determinism = {**determinism, "compiled_kernels": trainer.kernels_compiled}
        record = RunRecord.create(cfg, trainer.model, data, determinism, device)
    for note in notes if on_note is not None else []:
        on_note(note)
    record.start()
    seconds = _run_steps(trainer, record, start, last, progress, on_step)
    result = _finish(trainer, record, start, last, seconds)
    result.notes = notes
    return result


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
            raise Terminated("terminated (SIGTERM)" if self.signal == signal.SIGTERM else "interrupted")

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


def _run_steps(trainer: Trainer, record: RunRecord, start: int, last: int, progress: bool,
               on_step: Callable[[int], None] | None) -> float:
    """Steps start+1 .. last with logging, evaluation and checkpoints; the seconds they took.
    A non-finite loss is recorded as a divergence; Ctrl-C or SIGTERM checkpoints the last completed step."""
    cfg = trainer.cfg
    batches, pending = trainer.batches(start, last), PendingLosses()
    bar = Progress(progress, cfg.steps, start)
    t0 = t_log = t_ckpt = time.perf_counter()
    tokens_since_log, completed = 0, start  # completed: the last step whose optimizer update is done
    in_step = False
    trainer.model.train()
    try:
        with StopRequests() as stops:
            for step in range(start + 1, last + 1):
                in_step = True  # a second Ctrl-C can land inside the update: then no checkpoint of it
                lr, loss, norm = trainer.step(step, batches)
                completed, in_step = step, False
                pending.add(step, loss, norm)
                tokens_since_log += trainer.tokens_per_step
                if on_step is not None:
                    on_step(step)
                now = time.perf_counter()
                is_eval = step % cfg.eval_every == 0 or step == cfg.steps
                is_ckpt = step % cfg.ckpt_every == 0 or step == last or now - t_ckpt >= cfg.ckpt_seconds
                if step % cfg.log_every == 0 or is_eval or is_ckpt:
                    row = {"step": step, "train_loss": pending.flush(), "lr": lr,
                           "tokens": step * trainer.tokens_per_step,
                           "tokens_per_s": round(tokens_since_log / max(now - t_log, 1e-9), 1),
                           "elapsed_s": round(now - t0, 3)}
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
                stops.check()
    except NonFiniteStep as e:
        raise record.diverged(e.step, f"{e}; the run stopped and the last good checkpoint stays in "
                                      f"{record.run_dir / 'checkpoints'}; try a lower lr or more warmup") from None
    except (KeyboardInterrupt, Terminated) as e:
        bar.close()
        if in_step:  # cut inside an optimizer update: the weights are half-way; the last checkpoint stands
            raise record.interrupted(record.manifest.checkpoint_step or 0, "interrupted inside a step") from None
        with _writes(record):
            _checkpoint_on_interrupt(trainer, record, pending, start, completed)
        raise record.interrupted(completed, str(e) or "interrupted") from None
    finally:
        bar.close()
    return time.perf_counter() - t0


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


def _finish(trainer: Trainer, record: RunRecord, start: int, last: int, seconds: float) -> TrainResult:
    """The final evaluation, recorded as finished or stopped (or diverged, when the weights went non-finite)."""
    val_loss, train_loss = trainer.evaluate()
    if not (math.isfinite(val_loss) and math.isfinite(train_loss)):  # the weights went non-finite at the last step
        raise record.diverged(last, f"the final evaluation gave val loss {val_loss} at step {last}; the weights are "
                                    "not finite; try a lower lr or more warmup")
    status = RunStatus.FINISHED if last == trainer.cfg.steps else RunStatus.STOPPED
    tokens_per_s = (last - start) * trainer.tokens_per_step / max(seconds, 1e-9)
    record.finish(status, RunFinal(step=last, train_loss=train_loss, val_loss=val_loss,
                                   tokens_per_s=round(tokens_per_s, 1), seconds=round(seconds, 2)))
    return TrainResult(record.run_dir, last, train_loss, val_loss, trainer.data.unigram_entropy(), tokens_per_s,
                       seconds, status)
