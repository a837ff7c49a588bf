"""Devices: the torch device a name stands for (once it is known to compute here), and the autocast dtype a
run uses on it. Training, the profiler and every command with a ``--device`` option resolve names here, so a
device that is missing or cannot compute is refused with the same words everywhere, each naming its own option."""

from __future__ import annotations

import contextlib

import torch

from .errors import UserError


def mps_available() -> bool:
    """Whether Apple's GPU (MPS) computes here."""
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def resolve_device(name: str | torch.device, option: str = "--set device=") -> torch.device:
    """The torch device a config or option names, once it is known to compute here; else a UserError
    whose fix is written with `option` (``--set device=`` for training, ``--device `` for nanolm peak).
    ``auto`` is CUDA, then MPS, then the CPU."""
    if str(name) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise UserError(f"device {str(name)!r} is not a torch device; use {option}auto, cpu, cuda or mps") from None
    if device.type not in ("cpu", "cuda", "mps"):  # meta, xla, ...: tensors there hold no numbers to train
        raise UserError(f"device {str(name)!r} cannot train or measure anything here; use {option}cpu (or cuda, mps)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(
            f"device {str(name)!r} requested but CUDA is not available here (torch sees no CUDA GPU); use {option}cpu"
        )
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UserError(f"device {str(name)!r}: this machine has {torch.cuda.device_count()} CUDA device(s); use {option}cuda:0")
    if device.type == "mps" and not mps_available():
        raise UserError(f"device {str(name)!r} requested but MPS (Apple's GPU) is not available here; use {option}cpu")
    return device


def autocast_dtype(mode: str, device: torch.device) -> torch.dtype | None:
    """bf16 on CUDA when auto (and when the GPU supports it); None means full precision."""
    if mode == "none" or (mode == "auto" and device.type != "cuda"):
        return None
    if mode == "auto" and not torch.cuda.is_bf16_supported():
        return None
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """torch.autocast to dtype on device, or nothing when dtype is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
