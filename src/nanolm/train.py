"""Training: AdamW with warmup + cosine LR, gradient clipping and accumulation, periodic eval,
bf16 autocast on CUDA, optional torch.compile; every run recorded and resumable bit for bit.

The loop never syncs with the device on an ordinary step: per-step losses and gradient norms stay
on the device and are checked for NaN/inf when the loop logs, evaluates or checkpoints, which is
also when the run is stopped on divergence (naming the first bad step)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import record_function

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
from .data import eval_batches, load_data, window_loader
from .errors import RunStopped, UserError
from .model import GPT
from .repro.seed import seed_everything, seed_worker
from .runs import (
    METRICS,
    MetricsLog,
    command_line,
    environment_info,
    git_info,
    new_run_dir,
    read_manifest,
    write_manifest,
)
from .trackers import make_tracker

# Keys that may change when a run is resumed: they do not change what is computed.
RESUMABLE_CHANGES = {"steps", "tracker", "eval_every", "log_every", "ckpt_every", "keep_checkpoints", "num_workers",
                     "pin_memory", "device", "compile", "runs_dir"}


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
    status: str  # "finished" or "stopped" (at stop_at)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is not a torch device; use auto, cpu, cuda or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available here; use --set device=cpu")
    return device


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
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tps]} tok/s"),
                                    TimeElapsedColumn(), console=Console(stderr=True), transient=False)
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


def _check_resume(run_dir: Path, cfg: TrainConfig | None) -> tuple[TrainConfig, Checkpoint, dict]:
    """The run's config (with allowed changes from cfg), its latest checkpoint and its manifest."""
    manifest = read_manifest(run_dir)
    ckpt = read_checkpoint(run_dir)
    saved = config_from_dict(manifest["config"])
    if cfg is None:
        return saved, ckpt, manifest
    changed = {k: (getattr(saved, k), getattr(cfg, k)) for k in saved.to_dict()
               if getattr(saved, k) != getattr(cfg, k) and k not in RESUMABLE_CHANGES
               and not (k == "data" and saved.data and cfg.data and Path(saved.data).resolve() == Path(cfg.data).resolve())}
    if changed:
        key, (old, new) = next(iter(changed.items()))
        raise UserError(f"config mismatch on resume: {key} is {old!r} in {run_dir.name} but {new!r} now; "
                        "resume with the run's own config, or start a new run")
    return cfg, ckpt, manifest


def train(cfg: TrainConfig | None = None, resume: str | Path | None = None, stop_at: int | None = None,
          progress: bool = True, on_step: Callable[[int], None] | None = None) -> TrainResult:
    """Train (or resume) a run and return its final numbers.

    cfg: the config (validated); with resume, only the keys in RESUMABLE_CHANGES may differ.
    stop_at: checkpoint and stop after this step (the run stays resumable), as a preemption would.
    on_step: called with the step number after every optimizer step (the profiler's hook)."""
    manifest: dict
    ckpt: Checkpoint | None = None
    if resume is not None:
        run_dir = Path(resume)
        try:
            cfg, ckpt, manifest = _check_resume(run_dir, cfg)
            _ = (int(ckpt.state["step"]), ckpt.state["data"]["sha256"], ckpt.state["data"]["version"],
                 ckpt.state["rng"])  # every field the resume reads, present and of the right kind
            cfg.validate()
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"--resume {run_dir}: its manifest or checkpoint state was edited or is damaged "
                            f"({type(e).__name__}: {e}); resume an intact run, or start a new one") from None
        if int(ckpt.state["step"]) < 0:
            raise UserError(f"--resume {run_dir}: the checkpoint says step {ckpt.state['step']}; resume an intact run")
    elif cfg is None:
        cfg = TrainConfig().validate()
    device = resolve_device(cfg.device)
    data = load_data(cfg)  # first: a bad data file is reported before anything else happens
    determinism = seed_everything(cfg.seed, cfg.deterministic)
    model_cfg = cfg.model_config(data.tokenizer.vocab_size)

    if ckpt is not None:
        if ckpt.state["data"]["sha256"] != data.sha256 or ckpt.state["data"]["version"] != data.version:
            raise UserError(f"data mismatch on resume: the run trained on {ckpt.state['data']['version']} "
                            f"(sha256 {ckpt.state['data']['sha256'][:12]}), the data now is {data.version} "
                            f"(sha256 {data.sha256[:12]}); resume with the same data")
        if ckpt.tokenizer.to_dict() != data.tokenizer.to_dict():
            raise UserError(f"vocabulary mismatch on resume: the checkpoint's tokenizer "
                            f"({ckpt.tokenizer.kind}, {ckpt.tokenizer.vocab_size} tokens) differs from the data's "
                            f"({data.tokenizer.kind}, {data.tokenizer.vocab_size} tokens)")
        if ckpt.model_config != model_cfg:
            raise UserError(f"config mismatch on resume: the checkpoint's model is {ckpt.model_config}, "
                            f"the config asks for {model_cfg}")

    start = int(ckpt.state["step"]) if ckpt is not None else 0
    last = min(cfg.steps, stop_at) if stop_at is not None else cfg.steps
    if last <= start:
        raise UserError(f"nothing to train: the run is at step {start} and would stop at step {last}; "
                        "raise steps with --set steps=N")
    T, B, A = model_cfg.block_size, cfg.batch_size, cfg.grad_accum
    # Before anything is written: a split shorter than the context is a UserError here.
    val_set = eval_batches(data.val, T, B, cfg.eval_batches, seed=0)
    train_set = eval_batches(data.train, T, B, cfg.eval_batches, seed=1)
    model = GPT(model_cfg).to(device)
    optimizer = build_optimizer(model, cfg, device)
    if ckpt is not None:
        load_weights(ckpt, model)
        load_optimizer(ckpt, optimizer)
        try:
            set_rng_state(ckpt.state["rng"])
        except (RuntimeError, TypeError, ValueError) as e:
            raise UserError(f"--resume {run_dir}: the checkpoint's RNG state is damaged ({e}); resume an intact "
                            "run, or start a new one") from None
        manifest.setdefault("resumes", []).append({"from_step": start, "command": command_line(),
                                                    "git": git_info()})
    else:
        run_dir = new_run_dir(cfg.runs_dir, cfg.name)
        manifest = {
            "name": cfg.name, "run_dir": str(run_dir), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "status": "running", "command": command_line(), "config": cfg.to_dict(),
            "model_config": model_cfg.to_dict(), "n_params": model.num_params(),
            "n_params_non_embedding": model.num_params(exclude_embeddings=True),
            "seed": cfg.seed, "determinism": determinism, "git": git_info(), "data": data.describe(),
            "unigram_entropy": data.unigram_entropy(),
            "environment": environment_info(torch.cuda.get_device_name(device) if device.type == "cuda" else device.type),
        }
    # Read (and, on resume, trim) the metrics before the manifest says "running": a damaged log stops here.
    metrics = MetricsLog(run_dir / METRICS, keep_through_step=start if ckpt is not None else None)
    manifest["status"] = "running"
    tracker = make_tracker(cfg.tracker)
    tracker.start(run_dir, manifest)
    write_manifest(run_dir, manifest)

    dtype = autocast_dtype(cfg.autocast, device)
    fwd = torch.compile(model) if cfg.compile else model
    pin = cfg.pin_memory if cfg.pin_memory is not None else device.type == "cuda"
    loader = window_loader(data.train, T, B, seed=cfg.seed, start=start * A * B, n_batches=(last - start) * A,
                           num_workers=cfg.num_workers, pin_memory=pin)
    if cfg.num_workers:
        loader.worker_init_fn = seed_worker
    batches: Iterator = iter(loader)
    tokens_per_step = A * B * T

    def checkpoint_state(step: int) -> dict:
        return {"data_position": step * A * B, "config": cfg.to_dict(), "model_config": model_cfg.to_dict(),
                "rng": rng_state(), "data": {"version": data.version, "sha256": data.sha256}}

    pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (step, loss, grad norm) not yet checked

    def check_pending() -> float | None:
        """Raise on the first non-finite loss or gradient norm; return the newest loss."""
        if not pending:
            return None
        with record_function("sync"):
            values = torch.stack([torch.stack((loss, norm)) for _, loss, norm in pending]).cpu()  # one sync
        bad = (~torch.isfinite(values)).any(dim=1).nonzero()
        if len(bad):
            step = pending[int(bad[0])][0]
            what = "loss" if not math.isfinite(float(values[int(bad[0]), 0])) else "gradient norm"
            manifest["status"] = "diverged"
            manifest["final"] = {"step": step, "diverged_at": step}
            write_manifest(run_dir, manifest)
            tracker.finish("diverged")
            raise TrainingDiverged(f"{what} became {float(values[int(bad[0])].sum())} at step {step}; the run "
                                   f"stopped and the last good checkpoint stays in {run_dir / 'checkpoints'}; "
                                   "try a lower lr or more warmup")
        newest = float(values[-1, 0])
        pending.clear()
        return newest

    bar = Progress(progress, cfg.steps, start)
    t0 = t_log = time.perf_counter()
    tokens_since_log = 0
    completed = start  # the last step whose optimizer update is done
    model.train()
    try:
        for step in range(start + 1, last + 1):
            lr = lr_at(step - 1, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            step_loss = torch.zeros((), device=device)
            for _ in range(A):
                with record_function("data"):
                    x, y = next(batches)
                    x, y = x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)
                with record_function("forward"), autocast(device, dtype):
                    _, loss = fwd(x, y)
                    loss = loss / A
                with record_function("backward"):
                    loss.backward()
                step_loss += loss.detach()
            with record_function("optimizer"):
                norm = (torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip) if cfg.grad_clip
                        else torch.zeros((), device=device))
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            completed = step
            pending.append((step, step_loss, norm.detach().float()))
            tokens_since_log += tokens_per_step
            if on_step is not None:
                on_step(step)

            is_eval = step % cfg.eval_every == 0 or step == cfg.steps
            is_ckpt = step % cfg.ckpt_every == 0 or step == last
            if step % cfg.log_every == 0 or is_eval or is_ckpt:
                loss_now = check_pending()
                now = time.perf_counter()
                tps = tokens_since_log / max(now - t_log, 1e-9)
                row = {"step": step, "train_loss": loss_now, "lr": lr, "tokens": step * tokens_per_step,
                       "tokens_per_s": round(tps, 1), "elapsed_s": round(now - t0, 3)}
                if is_eval:
                    row["val_loss"] = evaluate(fwd, val_set, device, dtype)
                    row["train_eval_loss"] = evaluate(fwd, train_set, device, dtype)
                metrics.append(row)
                tracker.log(step, {k: v for k, v in row.items() if k != "step" and isinstance(v, float)})
                bar.update(step, loss_now, tps)
                t_log, tokens_since_log = time.perf_counter(), 0
            if is_ckpt:
                save_checkpoint(run_dir, step, model, optimizer, data.tokenizer, checkpoint_state(step),
                                cfg.keep_checkpoints)
    except KeyboardInterrupt:
        bar.close()
        if completed > start:
            check_pending()
            save_checkpoint(run_dir, completed, model, optimizer, data.tokenizer, checkpoint_state(completed),
                            cfg.keep_checkpoints)
        manifest["status"] = "interrupted"
        write_manifest(run_dir, manifest)
        tracker.finish("interrupted")
        raise TrainingInterrupted(f"interrupted; checkpoint at step {completed} in {run_dir}; "
                                  f"continue with: nanolm train --resume {run_dir}") from None
    finally:
        bar.close()

    seconds = time.perf_counter() - t0
    val_loss = evaluate(fwd, val_set, device, dtype)
    train_loss = evaluate(fwd, train_set, device, dtype)
    if not (math.isfinite(val_loss) and math.isfinite(train_loss)):  # the weights went non-finite at the last step
        manifest["status"] = "diverged"
        manifest["final"] = {"step": last, "diverged_at": last}
        write_manifest(run_dir, manifest)
        tracker.finish("diverged")
        raise TrainingDiverged(f"the final evaluation gave val loss {val_loss} at step {last}; the weights are not "
                               f"finite; try a lower lr or more warmup")
    status = "finished" if last == cfg.steps else "stopped"
    tokens_run = (last - start) * tokens_per_step
    result = TrainResult(run_dir, last, train_loss, val_loss, data.unigram_entropy(),
                         tokens_run / max(seconds, 1e-9), seconds, status)
    manifest["status"] = status
    manifest["final"] = {"step": last, "train_loss": train_loss, "val_loss": val_loss,
                         "tokens_per_s": round(result.tokens_per_s, 1), "seconds": round(seconds, 2)}
    write_manifest(run_dir, manifest)
    tracker.log(last, {"final_val_loss": val_loss, "final_train_loss": train_loss})
    tracker.finish(status)
    return result
