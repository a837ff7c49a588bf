"""Seed every random number generator a training run touches, and optionally make torch
deterministic. Returns what it set, for the run's manifest."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool | str = False) -> dict:
    """Seed Python's random, numpy and torch (every device); deterministic=True makes torch raise on
    nondeterministic ops, "warn" only warns. CUBLAS_WORKSPACE_CONFIG is set before any cuBLAS call
    needs it (cuBLAS reads it when its handle is created)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    settings: dict = {"seed": seed, "python_random": True, "numpy": True, "torch": True, "deterministic": deterministic}
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=deterministic == "warn")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        settings["CUBLAS_WORKSPACE_CONFIG"] = os.environ["CUBLAS_WORKSPACE_CONFIG"]
    else:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False
    settings["cudnn_deterministic"] = torch.backends.cudnn.deterministic
    settings["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    return settings


def seed_worker(worker_id: int) -> None:
    """DataLoader worker_init_fn: derive numpy's and random's seeds from torch's per-worker seed."""
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)
