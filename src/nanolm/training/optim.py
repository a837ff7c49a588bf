"""The optimizer (AdamW, matrices decayed), the learning-rate schedule (linear warm-up, then cosine) and
whether a run compiles each block's norms and attention (compile_kernels)."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from ..config import TrainConfig
from ..errors import UserError
from ..model import GPT, GPTConfig


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
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
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
        raise UserError(
            f"compile_kernels=true, but torch.compile cannot build kernels for {device.type} here "
            "(on a CPU it needs a C++ compiler, such as g++); set compile_kernels=auto or false"
        )
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
