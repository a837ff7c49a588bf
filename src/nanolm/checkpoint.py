"""Checkpoints without pickle: safetensors for the weights and the optimizer's tensors, JSON for
everything else (config, tokenizer, step, data position, RNG states).

Layout: ``<run>/checkpoints/step_0000400/{model,optimizer}.safetensors, state.json, tokenizer.json``
and ``<run>/checkpoints/latest`` naming the newest. A checkpoint is written into a temporary
folder and renamed into place, then ``latest`` is replaced atomically: a crash at any moment
leaves the previous checkpoint whole and ``latest`` pointing at a complete one."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model

from .errors import UserError
from .io import atomic_write_json, atomic_write_text, default_file_mode, read_json
from .model import GPT, GPTConfig
from .tensorfile import check_tensors_match_config, module_shapes, shapes_in_file
from .tokenizers import Tokenizer, tokenizer_from_dict

FORMAT = "nanolm-checkpoint-v1"
TENSOR_FILES = ("model.safetensors", "optimizer.safetensors")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_file(ckpt: Checkpoint, name: str, what: str) -> None:
    """A tensor file whose bytes changed since it was written is corrupt, even if it still parses."""
    expected = ckpt.state.get("sha256", {}).get(name)
    path = ckpt.path / name
    if expected is not None and path.is_file() and file_sha256(path) != expected:
        raise UserError(
            f"{path}: {what} (sha256 differs from the one recorded when it was written); "
            "resume from an earlier checkpoint or retrain"
        )


# ---- RNG states as JSON -----------------------------------------------------------------------


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.cpu().numpy().tobytes()).decode("ascii")


def _unb64(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8).clone()


def rng_state() -> dict:
    """Every generator's state, JSON-serializable."""
    np_state = np.random.get_state()
    state = {
        "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": _b64(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_unb64(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


# ---- optimizer state as flat tensors + JSON ---------------------------------------------------


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list]:
    """({"state.<param index>.<key>": tensor}, param_groups as JSON-able lists)."""
    sd = optimizer.state_dict()
    tensors = {
        f"state.{pid}.{key}": value.contiguous()
        for pid, st in sd["state"].items()
        for key, value in st.items()
        if torch.is_tensor(value)
    }
    return tensors, sd["param_groups"]


def optimizer_state_dict(tensors: dict[str, torch.Tensor], param_groups: list) -> dict:
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    return {"state": state, "param_groups": param_groups}


# ---- save / load ------------------------------------------------------------------------------


def save_checkpoint(
    run_dir: Path, step: int, model: GPT, optimizer: torch.optim.Optimizer, tokenizer: Tokenizer, state: dict, keep: int = 2
) -> Path:
    """Write checkpoint step_<step> atomically, point ``latest`` at it, keep the newest `keep`."""
    root = run_dir / "checkpoints"
    root.mkdir(exist_ok=True)
    final = root / f"step_{step:07d}"
    tmp = root / f".tmp-step_{step:07d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save_model(model, str(tmp / "model.safetensors"))  # handles tied W_E / W_U
        tensors, groups = optimizer_tensors(optimizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        for name in TENSOR_FILES:  # safetensors writes 0o600; the run's other files follow the umask
            os.chmod(tmp / name, default_file_mode())
        atomic_write_json(tmp / "tokenizer.json", tokenizer.to_dict())
        digests = {name: file_sha256(tmp / name) for name in TENSOR_FILES}
        atomic_write_json(
            tmp / "state.json", {**state, "format": FORMAT, "step": step, "optimizer_param_groups": groups, "sha256": digests}
        )
        if final.exists():  # left by a run that died after this step; this one replaces it
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(root / "latest", final.name + "\n")
    old = sorted(p for p in root.glob("step_*") if p.is_dir() and p != final)
    for p in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint folder for a run folder (its latest) or a checkpoint folder itself."""
    path = Path(path)
    if (path / "state.json").is_file():
        return path
    latest = path / "checkpoints" / "latest"
    if latest.is_file():
        ckpt = path / "checkpoints" / latest.read_text().strip()
        if (ckpt / "state.json").is_file():
            return ckpt
        raise UserError(f"{path}: checkpoints/latest names {ckpt.name}, which is missing or incomplete")
    raise UserError(f"{path}: no checkpoint found (no checkpoints/latest); train first, or give a checkpoint folder")


@dataclass
class Checkpoint:
    path: Path
    state: dict  # state.json: step, data_position, config, model_config, rng, ...
    tokenizer: Tokenizer
    model_config: GPTConfig


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The JSON half of a checkpoint, validated; the tensors are loaded by the load_* functions."""
    ckpt = find_checkpoint(path)
    try:
        state = read_json(ckpt / "state.json")
        tokenizer = tokenizer_from_dict(read_json(ckpt / "tokenizer.json"))
        model_config = GPTConfig(**state["model_config"])
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
        raise UserError(
            f"{ckpt}: corrupt checkpoint ({type(e).__name__}: {e}); resume from an earlier checkpoint folder or retrain"
        ) from None
    if state.get("format") != FORMAT:
        raise UserError(f"{ckpt}: not a {FORMAT} checkpoint (format={state.get('format')!r})")
    return Checkpoint(ckpt, state, tokenizer, model_config)


def check_weights_fit(ckpt: Checkpoint, expected: dict[str, tuple[int, ...]] | None = None) -> None:
    """A UserError naming both numbers when model.safetensors' tensors are not the shapes of the model
    state.json describes (or of `expected`: the model about to take them); only the header is read."""
    path = ckpt.path / "model.safetensors"
    try:
        found = shapes_in_file(path)
    except (OSError, SafetensorError, ValueError) as e:
        raise UserError(
            f"{ckpt.path}: corrupt checkpoint weights ({str(e).splitlines()[0]}); resume from an earlier checkpoint or retrain"
        ) from None
    if expected is None:
        expected = module_shapes(lambda: GPT(ckpt.model_config))
    # A tied W_U is saved once (safetensors keeps one name of tensors that share memory): missing names are
    # load_model's to report; a tensor of the wrong shape is this check's.
    shared = {name: shape for name, shape in expected.items() if name in found}
    described = f"state.json's model_config ({ckpt.model_config.sizes()})"
    check_tensors_match_config(path, found, shared, described, "resume from an earlier checkpoint or retrain")


def load_weights(ckpt: Checkpoint, model: GPT) -> None:
    verify_file(ckpt, "model.safetensors", "corrupt checkpoint weights")
    check_weights_fit(ckpt, {name: tuple(t.shape) for name, t in model.state_dict().items()})
    try:
        missing, unexpected = load_model(model, str(ckpt.path / "model.safetensors"), strict=False)
    except (OSError, SafetensorError, RuntimeError, ValueError) as e:
        raise UserError(
            f"{ckpt.path}: corrupt checkpoint weights ({str(e).splitlines()[0]}); resume from an earlier checkpoint or retrain"
        ) from None
    if missing or unexpected:
        raise UserError(
            f"{ckpt.path}: weights do not match the model (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise UserError(
            f"{ckpt.path}: corrupt checkpoint weights (NaN or inf in {bad[0]}); resume from an earlier checkpoint or retrain"
        )


def load_optimizer(ckpt: Checkpoint, optimizer: torch.optim.Optimizer) -> None:
    verify_file(ckpt, "optimizer.safetensors", "corrupt optimizer state")
    try:
        tensors = load_file(str(ckpt.path / "optimizer.safetensors"))
        optimizer.load_state_dict(optimizer_state_dict(tensors, ckpt.state["optimizer_param_groups"]))
    except (OSError, SafetensorError, RuntimeError, ValueError, KeyError) as e:
        raise UserError(
            f"{ckpt.path}: corrupt optimizer state ({str(e).splitlines()[0]}); resume from an earlier checkpoint or retrain"
        ) from None
    bad = [name for name, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        raise UserError(
            f"{ckpt.path}: corrupt optimizer state (NaN or inf in {bad[0]}); resume from an earlier checkpoint or retrain"
        )


def load_trained_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, Tokenizer, Checkpoint]:
    """(model in eval mode, its tokenizer, the checkpoint) from a run or checkpoint folder."""
    ckpt = read_checkpoint(path)
    check_weights_fit(ckpt)  # before the model is built at state.json's size
    model = GPT(ckpt.model_config)
    load_weights(ckpt, model)
    return model.to(device).eval(), ckpt.tokenizer, ckpt
