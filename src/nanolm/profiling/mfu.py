"""MFU (model FLOPs utilization): the FLOP/s a training run's model math needs, over the FLOP/s the device
can do at best. Functions here return data; nothing prints.

    model FLOP/s = 6 · N · tokens/s                      (N non-embedding parameters; forward 2N + backward 4N)
                 = (6 · N + 12 · L · d · T) · tokens/s   with the attention scores and values (PaLM appendix B,
                                                         nanoGPT's estimate_mfu; L layers, width d, context T)
    MFU          = model FLOP/s / peak FLOP/s

The peak comes from a datasheet (dense, no 2:4 sparsity; bf16 tensor cores, or fp16 where the device has no
bf16) by device name, or is measured here with one large square matmul (`measure_peak`): what this device
reaches in practice in a given dtype, which is the honest yardstick on a CPU or a device not in the table.

Reference example: 6 · 1.24e8 · 2e5 = 1.49e14 FLOP/s over 9.89e14 (H100 SXM) = 15.0% MFU.
"""

from __future__ import annotations

import functools
import math
import re
import time
from dataclasses import dataclass

import torch

from ..device import resolve_device
from ..errors import UserError


@dataclass
class Peak:
    """A device's peak: FLOP/s in a dtype, from where (``datasheet``, ``measured`` or ``given``)."""

    name: str
    flops_per_s: float
    dtype: str  # "bfloat16", "float16", "float32", "tf32", or as given
    source: str
    n: int | None = None  # measured: the square matmul size that gave the peak


@dataclass(frozen=True)
class DatasheetEntry:
    name: str
    tflops: float  # dense (no sparsity) tensor-core TFLOP/s in `dtype`
    dtype: str
    aliases: tuple[str, ...]  # short names for --device
    pattern: str  # regex over the lower-cased torch.cuda.get_device_name() string


# Most specific first: the first pattern that matches a full device name wins.
DATASHEET: tuple[DatasheetEntry, ...] = (
    DatasheetEntry("H100 PCIe", 756, "bfloat16", ("h100-pcie",), r"\bh100\b.*\bpcie\b"),
    DatasheetEntry("H100 NVL", 835, "bfloat16", ("h100-nvl",), r"\bh100\b.*\bnvl\b"),
    DatasheetEntry("H100 SXM", 989, "bfloat16", ("h100", "h100-sxm"), r"\bh100\b"),
    DatasheetEntry("H200 NVL", 835, "bfloat16", ("h200-nvl",), r"\bh200\b.*\bnvl\b"),
    DatasheetEntry("H200", 989, "bfloat16", ("h200", "h200-sxm"), r"\bh200\b"),
    DatasheetEntry("GH200", 989, "bfloat16", ("gh200",), r"\bgh200\b"),
    DatasheetEntry("B200", 2250, "bfloat16", ("b200",), r"\bb200\b"),
    DatasheetEntry("A100", 312, "bfloat16", ("a100", "a100-sxm", "a100-pcie"), r"\ba100\b"),
    DatasheetEntry("A10", 125, "bfloat16", ("a10",), r"\ba10\b"),  # not the A10G: \b stops at "a10g"
    DatasheetEntry("L4", 121, "bfloat16", ("l4",), r"\bl4\b"),
    DatasheetEntry("L40S", 362, "bfloat16", ("l40s",), r"\bl40s\b"),
    DatasheetEntry("L40", 181, "bfloat16", ("l40",), r"\bl40\b"),
    DatasheetEntry("RTX 4090", 165, "bfloat16", ("4090", "rtx4090", "rtx-4090"), r"\b4090\b(?!\s*(d|laptop|mobile)\b)"),
    DatasheetEntry("RTX 3090", 71, "bfloat16", ("3090", "rtx3090", "rtx-3090"), r"\b3090\b(?!\s*(ti|laptop|mobile)\b)"),
    DatasheetEntry("V100S", 130, "float16", ("v100s",), r"\bv100s\b"),
    DatasheetEntry("V100 PCIe", 112, "float16", ("v100-pcie",), r"\bv100\b.*\bpcie\b"),
    DatasheetEntry("V100 SXM2", 125, "float16", ("v100", "v100-sxm2"), r"\bv100\b"),
    DatasheetEntry("T4", 65, "float16", ("t4",), r"\bt4\b"),
    DatasheetEntry("MI300X", 1307, "bfloat16", ("mi300x",), r"\bmi300x\b"),
    DatasheetEntry("MI325X", 1307, "bfloat16", ("mi325x",), r"\bmi325x\b"),
)

_ALIASES: dict[str, DatasheetEntry] = {alias: e for e in DATASHEET for alias in e.aliases}


def known_devices() -> list[str]:
    """The datasheet's devices as 'alias (name)', in table order."""
    return [f"{e.aliases[0]} ({e.name})" for e in DATASHEET]


def lookup_peak(name: str) -> Peak:
    """The datasheet peak of a device: a short alias ("h100", "a100", "4090") or a full
    torch.cuda.get_device_name() string ("NVIDIA H100 80GB HBM3" -> H100 SXM)."""
    text = str(name or "").strip().lower()
    entry = _ALIASES.get(re.sub(r"[\s_]+", "-", text))
    if entry is None:
        entry = next((e for e in DATASHEET if re.search(e.pattern, text)), None) if text else None
    if entry is None:
        raise UserError(f"unknown device {name!r}: no datasheet peak for it; known devices: {', '.join(known_devices())}; use "
                        "one of these names, give the peak with --peak-tflops, or measure this machine's with --measure-peak")
    return Peak(entry.name, entry.tflops * 1e12, entry.dtype, "datasheet")


# ---- measured peak -------------------------------------------------------------------------------

_DTYPES: dict[str, tuple[torch.dtype, str]] = {
    "float32": (torch.float32, "float32"), "fp32": (torch.float32, "float32"), "float": (torch.float32, "float32"),
    "tf32": (torch.float32, "tf32"),
    "bfloat16": (torch.bfloat16, "bfloat16"), "bf16": (torch.bfloat16, "bfloat16"),
    "float16": (torch.float16, "float16"), "fp16": (torch.float16, "float16"), "half": (torch.float16, "float16"),
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


def measure_peak(device: torch.device | str = "cpu", dtype: torch.dtype | str = torch.float32, n: int | None = None,
                 reps: int = 5, budget_s: float = 2.0) -> Peak:
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
    return faster, (f"measured matmul peak on {device_type}: bfloat16 {bf16.flops_per_s / 1e9:,.1f} GFLOP/s, "
                    f"float32 {fp32.flops_per_s / 1e9:,.1f} GFLOP/s")


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


# ---- model FLOPs and MFU -------------------------------------------------------------------------

def _positive(value: float | None, what: str, fix: str) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{what} must be a positive number, got {value!r}; {fix}") from None
    if not (math.isfinite(x) and x > 0):
        raise UserError(f"{what} must be a positive finite number, got {value!r}; {fix}")
    return x


def model_flops_per_s(n_params: float, tokens_per_s: float) -> float:
    """6 · N · tokens/s: training FLOP/s of a model with N (non-embedding) parameters."""
    n = _positive(n_params, "the parameter count N", "give --params as e.g. 1.24e8")
    t = _positive(tokens_per_s, "tokens/s", "give --tokens-per-s as e.g. 2e5")
    flops = 6.0 * n * t
    if not math.isfinite(flops):  # name the factor that is out of range
        what, value, fix = (("--tokens-per-s", t, "give the measured tokens/s, e.g. 2e5") if t >= n else
                            ("--params", n, "give the parameter count N, e.g. 1.24e8"))
        raise UserError(f"{what} {value:g} is out of range: 6 · N · tokens/s overflows a float; {fix}")
    return flops


def model_flops_per_s_with_attention(n_params: float, n_layer: int, d_model: int, seq_len: int,
                                     tokens_per_s: float) -> float:
    """(6 · N + 12 · L · d · T) · tokens/s: with the attention scores and values (PaLM appendix B, nanoGPT)."""
    n_layer = _positive(n_layer, "n_layer", "give the model's layer count")
    d_model = _positive(d_model, "d_model", "give the model's width")
    seq_len = _positive(seq_len, "the sequence length T", "give the context length trained on")
    return model_flops_per_s(n_params, tokens_per_s) + 12.0 * n_layer * d_model * seq_len * float(tokens_per_s)


def mfu(achieved_flops_per_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization: achieved model FLOP/s over the peak (a fraction, 0.15 = 15%)."""
    peak = _positive(peak_flops_per_s, "the peak FLOP/s", "give --peak-tflops as e.g. 989 or a known --device")
    achieved = float(achieved_flops_per_s)
    if not (math.isfinite(achieved) and achieved >= 0):
        raise UserError(f"achieved FLOP/s must be a non-negative finite number, got {achieved_flops_per_s!r}")
    return achieved / peak


@dataclass
class MFUReport:
    n_params: float
    tokens_per_s: float
    flops_per_token: float  # 6N
    flops_per_s: float  # 6N · tokens/s
    peak_name: str
    peak_dtype: str
    peak_source: str
    peak_flops_per_s: float
    mfu: float
    flops_per_token_with_attention: float | None = None  # 6N + 12·L·d·T
    flops_per_s_with_attention: float | None = None
    mfu_with_attention: float | None = None
    n_layer: int | None = None
    d_model: int | None = None
    seq_len: int | None = None


def compute_mfu(n_params: float, tokens_per_s: float, peak: Peak, n_layer: int | None = None, d_model: int | None = None,
                seq_len: int | None = None) -> MFUReport:
    """MFU from 6N; also with the attention term when the model's shape (n_layer, d_model, seq_len) is given."""
    flops = model_flops_per_s(n_params, tokens_per_s)
    report = MFUReport(
        n_params=float(n_params), tokens_per_s=float(tokens_per_s), flops_per_token=6.0 * float(n_params),
        flops_per_s=flops, peak_name=peak.name, peak_dtype=str(peak.dtype).replace("torch.", ""),
        peak_source=peak.source, peak_flops_per_s=float(peak.flops_per_s), mfu=mfu(flops, peak.flops_per_s))
    shape = {"n_layer": n_layer, "d_model": d_model, "seq_len": seq_len}
    given = [k for k, v in shape.items() if v is not None]
    if given and len(given) < len(shape):
        missing = [k for k in shape if k not in given]
        raise UserError(f"the attention term needs n_layer, d_model and seq_len together; missing {', '.join(missing)}")
    if given:
        with_attention = model_flops_per_s_with_attention(n_params, n_layer, d_model, seq_len, tokens_per_s)
        report.flops_per_s_with_attention = with_attention
        report.flops_per_token_with_attention = 6.0 * float(n_params) + 12.0 * float(n_layer) * float(d_model) * float(seq_len)
        report.mfu_with_attention = mfu(with_attention, peak.flops_per_s)
        report.n_layer, report.d_model, report.seq_len = int(n_layer), int(d_model), int(seq_len)
    _check_at_most_the_peak(report)
    return report


def _check_at_most_the_peak(report: MFUReport) -> None:
    """No run computes faster than its device's peak: an MFU over 100% means an input is wrong."""
    worst, what, flops = max((report.mfu, "6N·tokens/s", report.flops_per_s),
                             (report.mfu_with_attention or 0.0, "with the attention term", report.flops_per_s_with_attention))
    if worst > 1.0:
        raise UserError(
            f"MFU {worst * 100:.4g}% ({what}) is over 100%: {flops:.3g} model FLOP/s is more than the peak "
            f"{report.peak_flops_per_s:.3g} FLOP/s of {report.peak_name}; likely the peak is wrong (another --device, "
            "or --peak-tflops in the dtype the run uses) or N or tokens/s is (N counts non-embedding parameters; "
            "tokens/s is of the devices the peak is for)")
