"""``nanolm profile --isolate``: the input pipeline alone and the model alone, each measured, so that
"input-bound" or "model-bound" rests on two measurements instead of an inference from phase ranges.

- The input pipeline alone: a fresh iterator over the training DataLoader (as configured: workers,
  pin_memory), warm-up batches dropped (worker start-up), then one step's batches at a time, timed; no
  model runs.
- The model alone: one training step (forward, backward, optimizer step, zero_grad) on a batch that is
  already there, timed; no loader runs. For a profiled script, the batch is its first real one, captured
  at the model's first outermost forward after its first optimizer step and replayed (`ReplayCapture`);
  for nanolm's own training, synthetic token batches of the training shape through `Trainer.step`.

Both are timed like the profiler's windows: `warmup` steps dropped, then `repeat` runs of `active`
steps; the mean step of each run, and the median run and min–max over the runs. The two parts' runs
alternate, so a change in the machine's load reaches both alike. Nothing here runs under the profiler:
the callers measure after the profiled windows (runner.py, profile.py). Both are unprofiled times, so
they are compared with the unprofiled step (the step clock's U, clock.py); only when the clock has
none, with the profiled step, and the explanation says which."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from ...errors import UserError
from ..measure.clock import rate_step_ms
from ..report import Isolation, ProfileReport, Stat
from .session import Window

INPUT_BOUND, MODEL_BOUND, NEITHER = "input-bound", "model-bound", "neither alone"


# One alone takes at least this share of the step (and more than the other) to bound it.
BOUND_SHARE = 0.5


# Plain values a replayed forward may take besides tensors (flags, sizes, names).
PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def time_interleaved(parts: list[Callable[[], object]], window: Window, cuda: bool) -> list[Stat]:
    """ms per call of each part (already warmed up): window.repeat rounds, in each one run of window.active
    calls of every part in turn, so that a change in the machine's load between runs reaches the parts
    alike; per part, each run's mean, and the median run and min–max over runs. On CUDA the device is
    synchronized around each run, so queued kernels are counted where they ran."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    runs: list[list[float]] = [[] for _ in parts]
    for _ in range(window.repeat):
        for part, out in zip(parts, runs):
            sync()
            t0 = time.perf_counter()
            for _ in range(window.active):
                part()
            sync()
            out.append((time.perf_counter() - t0) * 1000 / window.active)
    # The profiled step's "median" is its median window, the upper middle one for an even count
    # (summarize_windows); the same here, so that shares of it compare like with like.
    return [Stat(sorted(r)[len(r) // 2], min(r), max(r)) for r in runs]


def warm_up(part: Callable[[], object], calls: int) -> None:
    """Calls left out of the timing: allocator, autotuning, compilation, worker start-up."""
    for _ in range(calls):
        part()


class EmptyLoader(Exception):
    """A DataLoader that yields nothing from a fresh iterator."""


class Batches:
    """The batches of a DataLoader, restarted with a fresh iterator when an epoch ends (counted in
    `restarts`: each restart's worker start-up lands in the timed batch)."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader, self.restarts = loader, 0
        self._it: Iterator = iter(loader)

    def next(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self.restarts += 1
            self._it = iter(self.loader)
            try:
                return next(self._it)
            except StopIteration:
                raise EmptyLoader("it yields no batches when iterated again (an iterable dataset that is used up?)") from None


def loader_step(
    next_batch: Callable[[], Any], batches_per_step: int, move: Callable[[Any], object] | None = None
) -> Callable[[], None]:
    """One step of the input pipeline alone: `batches_per_step` batches, each passed to `move` (what training
    does to a batch before the model; nanolm: the copy to the device)."""

    def one_step() -> None:
        for _ in range(batches_per_step):
            batch = next_batch()
            if move is not None:
                move(batch)

    return one_step


def loader_warmup(window: Window, workers: int, batches_per_step: int) -> int:
    """Steps of the loader left out: the window's warm-up, and at least one batch per worker (start-up)."""
    return max(1, window.warmup, -(-workers // batches_per_step))


def describe_loader(
    workers: int, pin_memory: bool, batch_size: int | None, window: Window, warmup_steps: int, batches_per_step: int
) -> str:
    """What the input pipeline alone iterated, in words."""
    size = f", batch_size={batch_size}" if batch_size is not None else ""
    return (
        f"DataLoader(num_workers={workers}, pin_memory={pin_memory}{size}) iterated alone from a fresh "
        f"iterator: {warmup_steps * batches_per_step} warm-up batches dropped, then {window.repeat} × "
        f"{window.active * batches_per_step} batches ({batches_per_step} a step)"
    )


def decide_bound(
    step_ms: float, input_ms: float | None, model_ms: float, input_name: str, step_name: str = "unprofiled"
) -> tuple[str, str]:
    """(bound, one sentence) from the step, the input alone (None: not measured) and the model alone, all ms
    per step. The step is the unprofiled one (the step clock's U) like the two measured alone; step_name
    says which it is ("profiled" only where U was not measured). Input-bound: the input alone takes at
    least BOUND_SHARE of the step and no less than the model; model-bound: the model alone takes at least
    BOUND_SHARE and more than the input; else neither."""
    step_ms = max(step_ms, 1e-9)  # a report's step is > 0 (ProfileReport.problems); never divide by 0
    model_share = model_ms / step_ms
    model_part = f"the model alone {model_ms:.2f} ms ({model_share:.0%})"
    if input_ms is None:
        head = f"of the {step_ms:.2f} ms {step_name} step, {model_part}; the input could not be measured alone"
        if model_share >= BOUND_SHARE:
            return MODEL_BOUND, f"{head}: the step is mostly the model's own work"
        return NEITHER, f"{head}, and the rest of the step is outside the model"
    input_share = input_ms / step_ms
    numbers = (
        f"{input_name} takes {input_ms:.2f} ms a step ({input_share:.0%} of the {step_ms:.2f} ms {step_name} "
        f"step) and {model_part}"
    )
    if input_share >= BOUND_SHARE and input_ms >= model_ms:
        return INPUT_BOUND, f"{numbers}: the step waits for its data; a faster model would not make it faster"
    if model_share >= BOUND_SHARE and model_ms > input_ms:
        return MODEL_BOUND, f"{numbers}: the step is the model's own work; faster data would not make it faster"
    if input_share + model_share < BOUND_SHARE:
        why = "most of the step goes elsewhere (between steps, syncs, logging)"
    else:
        why = "the data is hidden behind compute (loader workers) or both take a part; neither alone sets the step"
    return NEITHER, f"{numbers}: {why}"


def _isolation(
    step_ms: float,
    loader: tuple[Stat, str] | None,
    model: tuple[Stat, str],
    no_loader_why: str,
    between_ms: float | None = None,
    step_name: str = "unprofiled",
) -> Isolation:
    """The Isolation of two measurements against the step (ms; step_name: "unprofiled" or "profiled"); without a
    loader, the between-steps phase stands in for the input."""
    model_ms, model_what = model
    if loader is not None:
        input_ms, name = loader[0].median, "the input pipeline alone"
    elif between_ms is not None:
        input_ms = between_ms
        name = "the time between steps, where the script makes its batches (an upper bound: logging too),"
    else:
        input_ms, name = None, ""
    bound, explanation = decide_bound(step_ms, input_ms, model_ms.median, name, step_name)
    loader_what = loader[1] if loader is not None else no_loader_why
    if loader is None and between_ms is not None:
        loader_what += f"; the between-steps phase ({between_ms:.2f} ms a step) is the evidence instead"
    return Isolation(step_ms, loader[0] if loader is not None else None, model_ms, loader_what, model_what, bound, explanation)


class NotReplayable(Exception):
    """A value of the captured forward's arguments that cannot be cloned and passed again."""


def clone_value(value: Any, where: str) -> Any:
    """A detached copy of a forward's argument: tensors cloned, plain values kept, containers of them
    rebuilt as their own type; anything else is NotReplayable (saying which argument and its type)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(clone_value(v, f"{where}.{f}") for f, v in zip(value._fields, value)))
    if isinstance(value, (tuple, list)):
        return type(value)(clone_value(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, Mapping):
        items = {k: clone_value(v, f"{where}[{k!r}]") for k, v in value.items()}
        try:
            return items if type(value) is dict else type(value)(items)
        except Exception as e:  # noqa: BLE001 - a mapping type that cannot be rebuilt from its items
            raise NotReplayable(f"{where} is a {type(value).__name__} that cannot be rebuilt from its items ({e})") from None
    raise NotReplayable(f"{where} is a {type(value).__module__}.{type(value).__qualname__}, not a tensor or a plain value")


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a forward's output (tuples, lists, dicts and dict-like model outputs)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _tensors(v)


def _graded(output: Any) -> list[torch.Tensor]:
    """The output's floating tensors that require grad: what a backward can start from."""
    return [t for t in _tensors(output) if t.is_floating_point() and t.requires_grad]


def loss_of(output: Any) -> tuple[torch.Tensor | None, bool]:
    """What to call backward on: (the output's scalar loss, True) when it holds a floating 0-d tensor that
    requires grad (nanoGPT returns (logits, loss)); else (the float sum of its floating tensors that require
    grad, False): a stand-in of the same cost order for a loss the script computes outside the model;
    (None, False) when the output holds none."""
    graded = _graded(output)
    scalar = next((t for t in graded if t.dim() == 0), None)
    if scalar is not None:
        return scalar, True
    if not graded:
        return None, False
    return sum(t.float().sum() for t in graded), False


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')} {list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_shape(v) for v in value) + ")"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in value.items()) + "}"
    return repr(value) if len(repr(value)) < 20 else type(value).__name__


class ReplayCapture:
    """What --isolate replays, taken while the profiled script runs (installed by runner.py; its own global
    hooks, removed by `uninstall`). The model is the outermost module of the first forward, with gradients
    on, after the script's first optimizer step, whose parameters an optimizer updates (so a loss module
    or a frozen encoder is not taken for it); the batch is that forward's arguments, cloned; the loader is
    the DataLoader iterated last before it; forwards_per_step counts that model's outermost forwards up to
    the next optimizer step (gradient accumulation). After that step the forward hooks are removed, so the
    rest of the run pays nothing for them."""

    def __init__(self) -> None:
        self.optimizers: list[torch.optim.Optimizer] = []
        self.model: torch.nn.Module | None = None
        self.args: tuple = ()
        self.kwargs: dict = {}
        self.training = True
        self.autocast: tuple[str, torch.dtype] | None = None  # (device type, dtype) the forward ran under
        self.loader: torch.utils.data.DataLoader | None = None
        self.forwards_per_step = 0
        self.scalar_loss = False  # the forward returned its own loss (else: a stand-in, see loss_of)
        self.problem: str | None = None  # why the captured forward cannot be replayed
        self.steps = 0
        self._params: set[int] = set()
        self._last_loader: torch.utils.data.DataLoader | None = None
        self._depth = 0
        self._done = False
        self._forward_handles: list = []
        self._handles: list = []
        self._restore: list = []

    def install(self) -> ReplayCapture:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._forward_handles = [
            register_module_forward_pre_hook(self._pre),
            # always_call: a forward that raises still leaves its depth
            register_module_forward_hook(self._post, with_kwargs=True, always_call=True),
        ]
        self._handles = [register_optimizer_step_post_hook(self._after_step)]
        original = torch.utils.data.DataLoader.__iter__
        capture = self

        def dataloader_iter(loader):
            capture._last_loader = loader
            return original(loader)

        torch.utils.data.DataLoader.__iter__ = dataloader_iter
        self._restore.append((torch.utils.data.DataLoader, "__iter__", original))
        return self

    def uninstall(self) -> None:
        """Remove the hooks (before any hooks installed earlier are removed: the DataLoader wrapper wraps theirs)."""
        for handle in self._forward_handles + self._handles:
            handle.remove()
        self._forward_handles = self._handles = []
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore = []

    def _after_step(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        if all(o is not optimizer for o in self.optimizers):
            self.optimizers.append(optimizer)
            self._params |= {id(p) for group in optimizer.param_groups for p in group["params"]}
        if self.model is not None or self.problem is not None:  # the step of the captured forward is over
            self._done = True
            for handle in self._forward_handles:
                handle.remove()
            self._forward_handles = []

    def _pre(self, module, args) -> None:
        self._depth += 1

    def _post(self, module, args, kwargs, output) -> None:
        self._depth -= 1
        if self._depth or self._done or not self.steps or not torch.is_grad_enabled() or output is None:
            return  # output None: the forward raised (always_call), or returns nothing to train on
        if self.model is not None:
            if module is self.model:  # another micro-batch of the same step: gradient accumulation
                self.forwards_per_step += 1
            return
        if any(id(p) in self._params for p in module.parameters()):
            self._capture(module, args, kwargs, output)

    def _capture(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        self.model, self.training, self.loader = module, module.training, self._last_loader
        self.forwards_per_step = 1
        device = next(module.parameters()).device.type
        if torch.is_autocast_enabled(device):
            self.autocast = (device, torch.get_autocast_dtype(device))
        try:
            self.args = tuple(clone_value(a, f"argument {i + 1}") for i, a in enumerate(args))
            self.kwargs = {k: clone_value(v, f"keyword argument {k}") for k, v in kwargs.items()}
        except NotReplayable as e:
            self.problem = f"the forward of {type(module).__name__} cannot be called again: its {e}"
            self._done = True
            return
        graded = _graded(output)  # no loss computed here: this forward may be inside a measured step
        self.scalar_loss = any(t.dim() == 0 for t in graded)
        if not graded:
            self.problem = (
                f"the forward of {type(module).__name__} returned no floating tensor that requires grad "
                f"({_shape(output)}): there is nothing to call backward on"
            )
            self._done = True

    def refusal(self) -> str | None:
        """Why the script's steps cannot be replayed, or None when they can."""
        if not self.optimizers:
            return "the script took no optimizer step: there is no training step to replay"
        if self.problem is not None:
            return self.problem
        if self.model is None:
            return (
                "no nn.Module forward with gradients ran between the script's optimizer steps on parameters "
                "its optimizer updates (a functional model, or a model called outside the steps): there is no "
                "model to replay the first batch through"
            )
        return None

    def replay_step(self) -> None:
        """One training step on the captured batch: forwards_per_step forwards and backwards (under the
        forward's own autocast), each optimizer that updates the model steps, gradients zeroed."""
        ctx = torch.autocast(self.autocast[0], self.autocast[1]) if self.autocast else contextlib.nullcontext()
        for _ in range(max(1, self.forwards_per_step)):
            with ctx:
                output = self.model(*self.args, **self.kwargs)
            loss, _ = loss_of(output)
            loss.backward()
        for optimizer in self.optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


class _LoaderFailed(Exception):
    """The script's DataLoader raised while it was timed (wraps its error)."""


def _failed_loader(error: BaseException) -> str:
    cause = error.__cause__ if isinstance(error, _LoaderFailed) else error
    detail = (str(cause).strip().splitlines() or [""])[0][:200]
    why = (
        detail
        if isinstance(cause, EmptyLoader)
        else f"it failed when iterated again after the script was stopped ({type(cause).__name__}: {detail})"
    )
    return f"the script's DataLoader could not be timed alone: {why}"


def _script_loader(capture: ReplayCapture, window: Window) -> tuple[Callable[[], None], str]:
    """One step of the script's DataLoader alone from a fresh iterator (warmed up), and what it iterates; its
    errors come out as _LoaderFailed."""
    loader, per_step = capture.loader, max(1, capture.forwards_per_step)
    try:
        batches = Batches(loader)
    except Exception as e:  # noqa: BLE001 - e.g. a file the script's `with` closed when it was stopped
        raise _LoaderFailed() from e
    step = loader_step(batches.next, per_step)

    def guarded() -> None:
        try:
            step()
        except Exception as e:  # noqa: BLE001 - the script's dataset, failing on its own
            raise _LoaderFailed() from e

    warmup = loader_warmup(window, loader.num_workers, per_step)
    warm_up(guarded, warmup)
    what = describe_loader(loader.num_workers, loader.pin_memory, loader.batch_size, window, warmup, per_step)
    return guarded, what + "; no model, and no copy to the device (the script's own, inside its step)"


def isolate_script(capture: ReplayCapture, report: ProfileReport, window: Window, cuda: bool) -> Isolation:
    """--isolate for a profiled script, after its run (the profiler stopped, the hooks removed): the model
    alone on the replayed first batch, and its DataLoader alone, their runs interleaved. A UserError saying
    why when the steps cannot be replayed. The replay changes the model's weights: the script has finished
    with them by then."""
    why = capture.refusal()
    if why is not None:
        raise UserError(f"--isolate: {why}")
    model = capture.model
    model.train(capture.training)
    no_loader = (
        "no DataLoader: the script makes its batches itself (a get_batch function, say), which cannot be run without the script"
    )
    parts: list[Callable[[], object]] = [capture.replay_step]
    loader_what = None
    try:
        warm_up(capture.replay_step, max(1, window.warmup))
        if capture.loader is not None:
            try:
                loader_part, loader_what = _script_loader(capture, window)
                parts.append(loader_part)
            except _LoaderFailed as e:
                no_loader = _failed_loader(e)
        try:
            stats = time_interleaved(parts, window, cuda)
        except _LoaderFailed as e:  # mid-way: the model is timed on its own instead
            no_loader, parts = _failed_loader(e), parts[:1]
            stats = time_interleaved(parts, window, cuda)
    except Exception as e:  # noqa: BLE001 - the script's model, failing on its own batch replayed
        detail = (str(e).strip().splitlines() or [""])[0][:200]
        raise UserError(
            f"--isolate: the first batch could not be replayed through {type(model).__name__}: {type(e).__name__}: {detail}"
        ) from None
    loader = (stats[1], loader_what) if len(parts) > 1 else None
    between = next((p.ms.median for p in report.phases if p.phase == "between"), None)
    step_name = "unprofiled" if report.unprofiled_step_ms is not None else "profiled"
    return _isolation(rate_step_ms(report), loader, (stats[0], _replay_what(capture, window)), no_loader, between, step_name)


def _replay_what(capture: ReplayCapture, window: Window) -> str:
    """What the model alone replayed, in words."""
    batch = ", ".join([_shape(a) for a in capture.args] + [f"{k}={_shape(v)}" for k, v in capture.kwargs.items()])
    names = ", ".join(f"{type(o).__name__}.step" for o in capture.optimizers)
    accum = (
        f"{capture.forwards_per_step} forwards and backwards a step (gradient accumulation), "
        if capture.forwards_per_step > 1
        else ""
    )
    loss = (
        "on the loss it returns"
        if capture.scalar_loss
        else ("on the float sum of its output, a stand-in of the same cost order: the script computes its loss outside the model")
    )
    return (
        f"{type(capture.model).__name__} on the script's first real batch ({batch}) replayed: forward, backward "
        f"({loss}), {accum}{names} and zero_grad; no loader; {window.repeat} × {window.active} steps after "
        f"{max(1, window.warmup)} warm-up"
    )


def isolate_training(cfg, device: torch.device, step_ms: float, window: Window, unprofiled: bool = True) -> Isolation:
    """--isolate for nanolm's training: the Trainer's batch iterator alone (the same data path as training:
    load_data, its DataLoader, the copy to the device), and Trainer.step alone on synthetic token batches
    of the training shape [batch_size, block_size] from an iterator that loads nothing. A fresh Trainer of
    the same config: the profiled run's was discarded with it. step_ms: the unprofiled step (U), or the
    profiled one when unprofiled is False (the clock measured no U)."""
    from ...data import load_data
    from ...training.trainer import Trainer

    data = load_data(cfg)
    trainer = Trainer(cfg, data, cfg.model_config(data.tokenizer.vocab_size), device)
    trainer.model.train()
    A, B, T = cfg.grad_accum, cfg.batch_size, trainer.model.cfg.block_size
    warmup = loader_warmup(window, cfg.num_workers, A)
    batches = trainer.batches(0, warmup + window.active * window.repeat)  # exactly the steps drawn

    def move(batch: tuple[torch.Tensor, torch.Tensor]) -> None:  # as Trainer.step's data phase
        x, y = batch
        x.to(device, non_blocking=trainer.pin), y.to(device, non_blocking=trainer.pin)

    load = loader_step(lambda: next(batches), A, move)
    warm_up(load, warmup)
    loader_what = (
        "the Trainer's batch iterator: "
        + describe_loader(cfg.num_workers, trainer.pin, B, window, warmup, A)
        + ", each copied to the device as training does; no model"
    )
    vocab = trainer.model.cfg.vocab_size
    x = torch.randint(0, vocab, (B, T), device=device)
    synthetic = itertools.repeat((x, torch.randint(0, vocab, (B, T), device=device)))  # loads nothing

    def model() -> None:
        trainer.step(1, synthetic)  # the step number only sets the lr

    warm_up(model, max(1, window.warmup))
    loader_ms, model_ms = time_interleaved([load, model], window, device.type == "cuda")
    clip = "gradient clipping, " if cfg.grad_clip else ""
    model_what = (
        f"Trainer.step on synthetic token batches [{B}, {T}] (random ids below {vocab}, already on "
        f"{device.type}): {A} forward and backward a step, {clip}AdamW.step and zero_grad; no "
        f"loader; {window.repeat} × {window.active} steps after {max(1, window.warmup)} warm-up"
    )
    return _isolation(
        step_ms, (loader_ms, loader_what), (model_ms, model_what), "", step_name="unprofiled" if unprofiled else "profiled"
    )
