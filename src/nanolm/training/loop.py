"""The step loop: steps with logging, evaluation and checkpoints on schedule; per-step losses kept on the
device until a log (PendingLosses); the steady step time; stop requests (Ctrl-C, SIGTERM) taken between
steps and checkpointed; divergence and a lost rank recorded."""

from __future__ import annotations

import contextlib
import math
import signal
import statistics
import time
from collections.abc import Callable, Iterator

import torch
from torch.profiler import record_function

from ..distributed import Dist, is_peer_failure
from ..errors import UserError
from .record import RunRecord, TrainingInterrupted
from .trainer import Trainer


class Progress:
    """A rich progress bar on stderr (step, loss, tokens/s), or nothing."""

    def __init__(self, enabled: bool, total: int, start: int) -> None:
        self.bar = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn("train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[tps]} tok/s"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.task = self.bar.add_task("train", total=total, completed=start, loss="-", tps="-")
            self.bar.start()

    def update(self, step: int, loss: float | None = None, tokens_per_s: float | None = None) -> None:
        """Show `step` done, with the newest loss and the tokens/s so far when known."""
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
        """Keep one step's (loss, gradient norm), both 0-d tensors on the device."""
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


def run_steps(
    trainer: Trainer, record: RunRecord, start: int, last: int, progress: bool, on_step: Callable[[int], None] | None
) -> tuple[float, list[float | None]]:
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
            raise record.diverged(
                e.step,
                f"{e}; the run stopped and the last good checkpoint stays in "
                f"{record.run_dir / 'checkpoints'}; try a lower lr or more warmup",
            ) from None
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


def _interrupted(
    trainer: Trainer, record: RunRecord, pending: PendingLosses, start: int, completed: int, in_step: bool, e: BaseException
) -> TrainingInterrupted:
    """Checkpoint the last completed step after a stop request, and record the interruption; the error to raise.
    Cut inside an optimizer update, the weights are half-way; a data-parallel rank stopped without the vote
    (a second Ctrl-C) cannot checkpoint alone. Either way the last checkpoint stands."""
    if in_step or (trainer.dist.distributed and not isinstance(e, Terminated)):
        return record.interrupted(record.manifest.checkpoint_step or 0, "interrupted inside a step" if in_step else "interrupted")
    with _writes(record):
        _checkpoint_on_interrupt(trainer, record, pending, start, completed)
    return record.interrupted(completed, str(e) or "interrupted")


def _metrics_row(
    trainer: Trainer, pending: PendingLosses, step: int, lr: float, tokens: int, interval_s: float, elapsed_s: float
) -> dict:
    """A metrics row: the newest step's loss (the mean over the ranks), lr, throughput, and
    (data-parallel on gloo) this rank's seconds in gradient all-reduce and their share of the interval."""
    row = {
        "step": step,
        "train_loss": pending.flush(),
        "lr": lr,
        "tokens": step * trainer.tokens_per_step,
        "tokens_per_s": round(tokens / max(interval_s, 1e-9), 1),
        "elapsed_s": round(elapsed_s, 3),
    }
    comm = trainer.take_allreduce_seconds()
    if comm is not None:
        row["allreduce_s"] = round(comm, 4)
        row["allreduce_share"] = round(comm / max(interval_s, 1e-9), 4)
    return row


def _checkpoint_on_interrupt(trainer: Trainer, record: RunRecord, pending: PendingLosses, start: int, completed: int) -> None:
    """Save the last completed step, unless its loss went non-finite (then that is what is recorded)."""
    if completed <= start or record.manifest.checkpoint_step == completed:
        return
    try:
        pending.flush()
    except NonFiniteStep as e:
        raise record.diverged(
            e.step,
            f"{e}; the run stopped and the last good checkpoint stays in "
            f"{record.run_dir / 'checkpoints'}; try a lower lr or more warmup",
        ) from None
    trainer.checkpoint(record, completed)
