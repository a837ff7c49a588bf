"""The peak a device reaches, measured on it: a timed matmul per dtype (``measure_peak``, ``nanolm peak``), once a
process (``cached_peak``), bf16 against float32 for the bf16 fix (``bf16_vs_float32``), and the facts of the
device a live run's verdict needs (``live_facts``). The only part of MFU that runs torch; the formulas and the
datasheet are nanolm.profiling.measure.mfu."""

from __future__ import annotations

import functools
import math
import time

import torch

from ...device import resolve_device
from ...errors import UserError
from ..judge.host import DeviceFacts
from ..measure.mfu import Peak

_DTYPES: dict[str, tuple[torch.dtype, str]] = {
    "float32": (torch.float32, "float32"),
    "fp32": (torch.float32, "float32"),
    "float": (torch.float32, "float32"),
    "tf32": (torch.float32, "tf32"),
    "bfloat16": (torch.bfloat16, "bfloat16"),
    "bf16": (torch.bfloat16, "bfloat16"),
    "float16": (torch.float16, "float16"),
    "fp16": (torch.float16, "float16"),
    "half": (torch.float16, "float16"),
}


def _resolve_dtype(dtype: torch.dtype | str) -> tuple[torch.dtype, str]:
    """(torch dtype, label); the label "tf32" is float32 with TF32 matmuls allowed."""
    key = str(dtype).replace("torch.", "").lower()
    if key not in _DTYPES:
        raise UserError(f"cannot measure a matmul peak in dtype {dtype!r}; use one of float32, tf32, bfloat16, float16")
    return _DTYPES[key]


def _resolve_device(device: torch.device | str) -> torch.device:
    """A device that can run a matmul here: cpu, cuda or mps when available, or auto (the best of them);
    nanolm.device.resolve_device, its fixes written with --device."""
    return resolve_device(device, "--device ")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return device.type


def _time_mm(a: torch.Tensor, b: torch.Tensor, device: torch.device, inner: int = 1) -> float:
    """Seconds for `inner` matmuls a @ b, synchronized on both sides."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(inner):
        torch.mm(a, b)
    _sync(device)
    return time.perf_counter() - t0


def measure_peak(
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = torch.float32,
    n: int | None = None,
    reps: int = 5,
    budget_s: float = 2.0,
) -> Peak:
    """Achievable matmul FLOP/s on `device` in `dtype`, timed with square n×n torch.mm (2·n³ FLOPs each).

    With n given, that one size: the best of `reps` timed reps after warm-up. Otherwise sizes double from
    256 up to 2048 on a CPU or 8192 on a GPU, stopping early when the next size would not fit the budget
    (bf16 on a CPU without bf16 units can be 100× slower than float32), and the peak is the best rate of
    any size (a CPU can run a cache-sized matmul faster than a 2048² one). About `budget_s` seconds per size
    at most; each timed rep holds enough matmuls to last ~10 ms, so launch latency does not count on a GPU."""
    dev = _resolve_device(device)
    torch_dtype, label = _resolve_dtype(dtype)
    if n is not None and n < 1:
        raise UserError(f"matrix size n must be a positive integer, got {n}")
    if reps < 1:
        raise UserError(f"reps must be a positive integer, got {reps}")
    target = n or (2048 if dev.type == "cpu" else 8192)
    per_matmul_s = max(budget_s, 1e-3) / 3  # room for a warm-up and at least two timed reps
    old_precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if label == "tf32" else "highest")
    gen = torch.Generator().manual_seed(0)

    def rate_at(size: int) -> float:
        """Best FLOP/s of square size×size matmuls, after a warm-up run."""
        a = torch.randn(size, size, generator=gen).to(dev, torch_dtype)
        b = torch.randn(size, size, generator=gen).to(dev, torch_dtype)
        first = _time_mm(a, b, dev)  # kernel selection, allocator: not representative
        seconds = first if first > per_matmul_s else min(first, _time_mm(a, b, dev))
        inner = max(1, min(100, math.ceil(0.01 / max(seconds, 1e-9))))
        n_reps = max(2, min(reps, int(budget_s / 2 / max(seconds * inner, 1e-9))))
        best = min(_time_mm(a, b, dev, inner) / inner for _ in range(n_reps))
        return 2 * size**3 / max(best, 1e-12)

    try:
        size = target if n is not None else min(256, target)
        try:
            rate = rate_at(size)
        except RuntimeError as e:
            raise UserError(f"matmul in {label} does not run on {dev.type}: {str(e).splitlines()[0]}") from None
        best_rate, best_n = rate, size
        while size < target:
            nxt = min(target, size * 2)
            if 2 * nxt**3 / rate > per_matmul_s:
                break
            size = nxt
            rate = rate_at(size)
            if rate > best_rate:
                best_rate, best_n = rate, size
    finally:
        torch.set_float32_matmul_precision(old_precision)
    return Peak(_device_name(dev), best_rate, label, "measured", n=best_n)


@functools.cache
def cached_peak(device_type: str, dtype: str) -> Peak:
    """measure_peak(device_type, dtype) with its defaults, measured once per process."""
    return measure_peak(device_type, dtype)


def bf16_vs_float32(device_type: str) -> tuple[bool, str]:
    """Whether bf16 matmuls are faster than float32 on this kind of device, and the evidence: a CUDA GPU's
    bf16 support (tensor cores), else the measured peaks of both dtypes (cached per process)."""
    if device_type == "cuda":
        supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return supported, "this GPU " + ("supports" if supported else "does not support") + " bf16"
    try:
        bf16 = cached_peak(device_type, "bfloat16")
    except UserError:  # bf16 matmul does not run here
        return False, f"bf16 matmul does not run on {device_type}"
    fp32 = cached_peak(device_type, "float32")
    faster = bf16.flops_per_s > fp32.flops_per_s
    return faster, (
        f"measured matmul peak on {device_type}: bfloat16 {bf16.flops_per_s / 1e9:,.1f} GFLOP/s, "
        f"float32 {fp32.flops_per_s / 1e9:,.1f} GFLOP/s"
    )


def _matmul_runs(dev: torch.device, dtype: torch.dtype) -> bool:
    try:
        a = torch.ones(8, 8, dtype=dtype, device=dev)
        torch.mm(a, a)
        _sync(dev)
        return True
    except RuntimeError:
        return False


def measure_peaks(device: torch.device | str = "cpu", budget_s: float = 2.0) -> list[Peak]:
    """The measured matmul peak in each dtype this device runs: float32 and bfloat16 on a CPU (bfloat16 only
    if its matmul runs); float32, tf32 (compute capability 8.0 and up), bfloat16 and float16 on CUDA."""
    dev = _resolve_device(device)
    if dev.type == "cuda":
        labels = ["float32"]
        if torch.cuda.get_device_capability(dev) >= (8, 0):
            labels.append("tf32")
        if torch.cuda.is_bf16_supported():
            labels.append("bfloat16")
        labels.append("float16")
    else:
        labels = ["float32"] + (["bfloat16"] if _matmul_runs(dev, torch.bfloat16) else [])
    return [measure_peak(dev, label, budget_s=budget_s) for label in labels]


def gpu_bf16_peak() -> float | None:
    """The GPU's bf16 matmul peak, FLOP/s, measured once a process; None when it cannot be (a GPU without bf16,
    out of memory): the GPU answer then stands without its compute projection."""
    try:
        return cached_peak("cuda", "bfloat16").flops_per_s
    except Exception:  # noqa: BLE001 - any failure to measure leaves the projection out, never the report
        return None


def live_facts(device_type: str) -> DeviceFacts:
    """The facts of this machine's device for the verdict of steps it just ran: its cores, and bf16 timed against
    float32 on it when a bf16 fix is first considered."""
    return DeviceFacts.here(device_type, bf16_probe=bf16_vs_float32)
