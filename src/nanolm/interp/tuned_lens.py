"""The tuned lens (Belrose et al. 2023): one affine translator per layer, h -> h + A·h + b,
identity at init, trained so that final_norm(translated h) · W_U matches the model's own output
distribution (loss: KL(final ‖ lens), nats). The final layer is the output and is not translated.

Saved beside a run as ``tuned_lens/{translators.safetensors, tuned_lens.json}``: no pickle.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import UserError
from ..io import atomic_write_bytes, atomic_write_json, read_json
from ..records import Record
from ..runs import TUNED_LENS, same_fingerprint, weights_fingerprint
from ..tensorfile import check_tensors_match_config, module_shapes, shapes_in_file
from .lens import kl_from_final_log_probs, lens_summary
from .view import ModelView

WEIGHTS, META = TUNED_LENS.files["weights"], TUNED_LENS.files["meta"]


class TunedLens(nn.Module):
    """Translators for the embedding output and blocks 0..L-2 (L of them, each [D, D] + [D]); a
    nanolm.interp.lens.Lens, which the logit lens's functions take as `tuned`."""

    def __init__(self, d_model: int, n_layers: int) -> None:
        super().__init__()
        self.d_model, self.n_layers = d_model, n_layers
        self.translators = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(n_layers))
        for t in self.translators:  # A = 0, b = 0: the tuned lens starts as the logit lens
            nn.init.zeros_(t.weight)
            nn.init.zeros_(t.bias)

    def translate(self, resid: torch.Tensor) -> torch.Tensor:
        """[L+1, ..., D] -> [L+1, ..., D]; entry l gets h + A_l h + b_l, the last entry is unchanged."""
        if resid.shape[0] != self.n_layers + 1:
            raise ValueError(f"expected a stack of {self.n_layers + 1} residuals, got {resid.shape[0]}")
        w = self.translators[0].weight
        out = [h + t(h.to(w.dtype)).to(h.dtype) for h, t in zip(resid[:-1], self.translators)]
        return torch.stack([*out, resid[-1]])

    def translate_layer(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """One layer's residual [..., D] through its translator (layer < n_layers)."""
        t = self.translators[layer]
        return h + t(h.to(t.weight.dtype)).to(h.dtype)

    def save(self, folder: str | Path, meta: dict) -> Path:
        """The translators (safetensors) and meta (JSON) in folder, each file written atomically."""
        from safetensors.torch import save

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(folder / WEIGHTS, save({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}))
        atomic_write_json(folder / META, {"d_model": self.d_model, "n_layers": self.n_layers, **meta})
        return folder

    @classmethod
    def load(cls, folder: str | Path, view: ModelView | None = None) -> TunedLens:
        """The lens saved in folder; a UserError naming the file when it is missing, cut short or not a
        tuned lens, or when it was trained for another model."""
        folder = Path(folder)
        if not (folder / WEIGHTS).is_file() or not (folder / META).is_file():
            raise UserError(f"no tuned lens in {folder}; train one with: nanolm lens train RUN")
        meta = _read_meta(folder / META)
        d_model, n_layers = int(meta["d_model"]), int(meta["n_layers"])
        if view is not None and (d_model, n_layers) != (view.d_model, view.n_layers):
            raise UserError(
                f"the tuned lens in {folder} is for d_model={d_model}, {n_layers} layers; "
                f"this model has d_model={view.d_model}, {view.n_layers} layers: {_retrain(folder)}"
            )
        if (
            view is not None
            and "unembed_fingerprint" in meta
            and not same_fingerprint(meta["unembed_fingerprint"], unembed_fingerprint(view))
        ):
            raise UserError(
                f"the tuned lens in {folder} was trained on another model ({meta.get('model')!r}, whose "
                f"W_U differs from this one's, {view.name!r}): train one for it with: nanolm lens train RUN"
            )
        state = _read_weights(folder / WEIGHTS, d_model, n_layers)
        lens = cls(d_model, n_layers)
        lens.load_state_dict(state)
        return lens.to(view.device if view is not None else "cpu")


def _retrain(folder: Path) -> str:
    return f"retrain it with: nanolm lens train RUN --out {folder}"


def _read_meta(path: Path) -> dict:
    """tuned_lens.json, checked: a JSON object with positive integer d_model and n_layers."""
    try:
        meta = read_json(path)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise UserError(
            f"{path} is not valid JSON ({str(e).splitlines()[0]}): the tuned lens is damaged; {_retrain(path.parent)}"
        ) from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}; {_retrain(path.parent)}") from None
    ok = isinstance(meta, dict) and all(isinstance(meta.get(k), int) and meta[k] > 0 for k in ("d_model", "n_layers"))
    if not ok:
        raise UserError(f"{path} does not describe a tuned lens (no positive d_model and n_layers); {_retrain(path.parent)}")
    return meta


def _read_weights(path: Path, d_model: int, n_layers: int) -> dict[str, torch.Tensor]:
    """translators.safetensors, held to the shapes the meta file gives before any tensor is read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        found = shapes_in_file(path)
        expected = module_shapes(lambda: TunedLens(d_model, n_layers))
        described = f"{META} (d_model {d_model}, n_layers {n_layers})"
        check_tensors_match_config(path, found, expected, described, _retrain(path.parent))
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(
            f"{path} cannot be read as safetensors ({reason}): the tuned lens is damaged, e.g. cut short; {_retrain(path.parent)}"
        ) from None


def unembed_fingerprint(view: ModelView) -> float:
    """The fingerprint of the model's W_U (nanolm.runs.weights_fingerprint), saved with a lens."""
    return weights_fingerprint(view.unembed.weight)


def default_lens_dir(view: ModelView) -> Path:
    """Beside a nanolm run (its artifact folder RUN/tuned_lens); for another model, ./tuned_lens-<name>."""
    if view.run_dir is not None:
        return TUNED_LENS.dir(view.run_dir)
    return Path(f"tuned_lens-{view.name or view.arch}")


def check_writable_folder(folder: Path) -> None:
    """A UserError unless the lens can be saved in folder: it is a writable folder, or one that can be
    created in the nearest existing folder above it. (Its files are replaced by renaming new ones over
    them, which needs the folder's write permission only.)"""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--out {folder} is a file; the tuned lens is a folder (weights and meta): give a folder")
    if folder.is_dir():
        if not os.access(folder, os.W_OK):
            raise UserError(
                f"cannot write the tuned lens to {folder}: the folder is read-only; make it writable "
                "or give another folder with --out FOLDER"
            )
        return
    parent = folder.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(
            f"cannot create {folder}: {parent} is not a writable folder; make it writable or give "
            "another folder with --out FOLDER"
        )


# ---- data -----------------------------------------------------------------------------------


@dataclass
class LensData:
    train: torch.Tensor  # [N] token ids
    val: torch.Tensor  # [M] token ids
    source: str


def lens_data(view: ModelView, text_file: str | Path | None = None) -> LensData:
    """Tokens to train and evaluate a lens on: a nanolm run's own data (train and val splits), or a
    text file tokenized by the model's tokenizer (its last 10% is val)."""
    if text_file is None:
        if view.run_dir is None:
            raise UserError("this model has no training data nanolm knows of; give a text file with --data FILE")
        from ..config import config_from_dict
        from ..data import load_data
        from ..runs import read_manifest

        data = load_data(config_from_dict(read_manifest(view.run_dir).config))
        return LensData(data.train, data.val, data.version)
    path = Path(text_file)
    if not path.is_file():
        raise UserError(f"--data {path}: no such file; give a UTF-8 text file")
    if view.tokenizer is None:
        raise UserError(f"{view.name}: the model folder has no tokenizer files, so --data text cannot be tokenized")
    ids = torch.tensor(view.tokenizer.encode(path.read_text(encoding="utf-8")), dtype=torch.long)
    n_val = max(1, len(ids) // 10)
    return LensData(ids[:-n_val], ids[-n_val:], str(path))


def windows(tokens: torch.Tensor, block: int, batch: int, n_batches: int, seed: int) -> Iterator[torch.Tensor]:
    """n_batches batches [batch, block] of random windows of tokens."""
    if tokens.numel() <= block:
        raise UserError(f"only {tokens.numel()} tokens, fewer than a window of {block}; give more text")
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        starts = torch.randint(0, tokens.numel() - block, (batch,), generator=g)
        yield torch.stack([tokens[s : s + block] for s in starts.tolist()])


# ---- training and evaluation ----------------------------------------------------------------


@dataclass
class TunedLensTraining:
    folder: Path
    steps: int
    first_loss: float  # mean KL over layers at step 1, nats (the logit lens's, since it starts as identity)
    last_loss: float  # at the last step
    seconds: float


def train_tuned_lens(
    view: ModelView,
    data: LensData,
    steps: int = 300,
    lr: float = 1e-3,
    batch: int = 16,
    block: int | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> TunedLensTraining:
    """Fit translators with Adam on KL(final ‖ lens), averaged over layers and tokens; save them."""
    if steps <= 0:
        raise UserError(f"--steps must be > 0, got {steps}")
    if not 0 < lr < math.inf:
        raise UserError(f"--lr must be a positive number, got {lr}; e.g. --lr 1e-3")
    if batch <= 0:
        raise UserError(f"--batch must be > 0, got {batch}")
    folder = Path(out) if out is not None else default_lens_dir(view)
    check_writable_folder(folder)  # checked before training, not after
    block = min(block or view.max_len, view.max_len)
    lens = TunedLens(view.d_model, view.n_layers).to(view.device)
    frozen = [p for p in view.model.parameters() if p.requires_grad]
    for p in frozen:  # gradients flow through the final norm and W_U, but only the translators learn
        p.requires_grad_(False)
    try:
        first, loss_value, seconds = _fit(view, lens, data, steps, lr, batch, block, seed, on_step)
    finally:
        for p in frozen:
            p.requires_grad_(True)
    lens.save(
        folder,
        {
            "model": view.name,
            "arch": view.arch,
            "unembed_fingerprint": unembed_fingerprint(view),
            "data": data.source,
            "steps": steps,
            "lr": lr,
            "batch": batch,
            "block": block,
            "seed": seed,
            "final_loss": loss_value,
        },
    )
    return TunedLensTraining(folder, steps, first, loss_value, seconds)


def _fit(
    view: ModelView,
    lens: TunedLens,
    data: LensData,
    steps: int,
    lr: float,
    batch: int,
    block: int,
    seed: int,
    on_step: Callable[[int, float], None] | None,
) -> tuple[float, float, float]:
    """(first loss, last loss, seconds)"""
    opt = torch.optim.Adam(lens.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / steps)  # linear decay to 0
    t0, first, loss_value = time.perf_counter(), None, float("nan")
    for step, tokens in enumerate(windows(data.train, block, batch, steps, seed), start=1):
        with torch.no_grad():
            logits, resid = view.residual_stack(tokens.to(view.device))  # [B, T, V], [L+1, B, T, D]
            final_log_probs = torch.log_softmax(logits.float(), dim=-1)  # once, not once per layer
        opt.zero_grad(set_to_none=True)
        # The loss is a mean over layers, and layer l's term depends on translator l alone, so one
        # backward per layer gives the same gradients while holding one layer's [B, T, V] buffers
        # instead of L layers' (GPT-2 at batch 16 x 1024 tokens: each such buffer is 3.3 GB).
        loss_value = 0.0
        for layer in range(view.n_layers):
            lens_logits = view.unembed_resid(lens.translate_layer(layer, resid[layer]))  # [B, T, V]
            loss = kl_from_final_log_probs(final_log_probs, lens_logits).mean() / view.n_layers
            loss.backward()
            loss_value += float(loss.detach())
        opt.step()
        sched.step()
        first = loss_value if first is None else first
        if on_step is not None:
            on_step(step, loss_value)
    return float(first), loss_value, time.perf_counter() - t0


@dataclass
class LensEvaluation(Record):
    layers: list[str]  # "embed", "0", ..., str(L-1)
    logit_lens_kl: list[float]  # mean KL(final ‖ lens) per layer on held-out tokens, nats
    tuned_lens_kl: list[float]
    tokens: int  # held-out tokens averaged over
    data: str

    @property
    def ratios(self) -> list[float | None]:
        """tuned / logit KL per layer; None for the last layer (the output itself: both KLs are 0 by
        definition, up to float rounding) and wherever the logit lens's KL is below 1e-6 nats."""
        last = len(self.layers) - 1
        return [None if i == last or a < 1e-6 else b / a for i, (a, b) in enumerate(zip(self.logit_lens_kl, self.tuned_lens_kl))]

    def to_dict(self) -> dict:
        return {**asdict(self), "ratios": self.ratios}


@torch.no_grad()
def evaluate_lenses(
    view: ModelView,
    tuned: TunedLens,
    data: LensData,
    batches: int = 8,
    batch: int = 16,
    block: int | None = None,
    seed: int = 1234,
) -> LensEvaluation:
    """Per-layer KL to the final distribution of the logit lens and the tuned lens, on val windows."""
    block = min(block or view.max_len, view.max_len)
    logit_kl = torch.zeros(view.n_layers + 1, dtype=torch.float64)
    tuned_kl = torch.zeros_like(logit_kl)
    n = 0
    for tokens in windows(data.val, block, batch, batches, seed):
        tokens = tokens.to(view.device)
        logit_kl += lens_summary(view, tokens).kl.sum(dim=(1, 2)).double().cpu()  # [L+1]
        tuned_kl += lens_summary(view, tokens, tuned=tuned).kl.sum(dim=(1, 2)).double().cpu()
        n += tokens.numel()
    return LensEvaluation(view.layer_labels(), (logit_kl / n).tolist(), (tuned_kl / n).tolist(), n, data.source)


def lens_evaluation_figure(ev: LensEvaluation) -> Any:
    """A matplotlib Figure: KL(final ‖ lens) per layer, logit lens against tuned lens. Nothing is
    written; save it with nanolm.plots.save_figure."""
    from ..plots import pyplot

    fig, ax = pyplot().subplots(figsize=(6, 4))
    x = range(len(ev.layers))
    ax.plot(x, ev.logit_lens_kl, "o-", label="logit lens")
    ax.plot(x, ev.tuned_lens_kl, "s-", label="tuned lens")
    ax.set_xticks(list(x), ev.layers)
    ax.set_xlabel("layer (residual stream after it)")
    ax.set_ylabel("KL(final ‖ lens), nats")
    # KL >= 0, and the last layer's is 0: symlog, linear below 0.01 nats and logarithmic above, from 0 up
    # (a log axis cannot show 0; an unbounded symlog one spends half its height on negative values).
    top = max([*ev.logit_lens_kl, *ev.tuned_lens_kl, 0.01])
    ax.set_yscale("symlog", linthresh=1e-2)
    ax.set_ylim(0.0, top * 1.5)
    ax.set_title(f"lens fidelity on {ev.tokens} held-out tokens")
    ax.legend()
    return fig
