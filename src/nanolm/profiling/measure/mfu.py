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

import math
import re
from dataclasses import dataclass

from ...errors import UserError
from ...flops import training_flops_per_token
from ..report import MFU


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
        raise UserError(
            f"unknown device {name!r}: no datasheet peak for it; known devices: {', '.join(known_devices())}; use "
            "one of these names, give the peak with --peak-tflops, or measure this machine's with --measure-peak"
        )
    return Peak(entry.name, entry.tflops * 1e12, entry.dtype, "datasheet")


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
    flops = training_flops_per_token(n) * t
    if not math.isfinite(flops):  # name the factor that is out of range
        what, value, fix = (
            ("--tokens-per-s", t, "give the measured tokens/s, e.g. 2e5")
            if t >= n
            else ("--params", n, "give the parameter count N, e.g. 1.24e8")
        )
        raise UserError(f"{what} {value:g} is out of range: 6 · N · tokens/s overflows a float; {fix}")
    return flops


def model_flops_per_s_with_attention(n_params: float, n_layer: int, d_model: int, seq_len: int, tokens_per_s: float) -> float:
    """(6 · N + 12 · L · d · T) · tokens/s: with the attention scores and values (PaLM appendix B, nanoGPT)."""
    n_layer = _positive(n_layer, "n_layer", "give the model's layer count")
    d_model = _positive(d_model, "d_model", "give the model's width")
    seq_len = _positive(seq_len, "the sequence length T", "give the context length trained on")
    model_flops_per_s(n_params, tokens_per_s)  # its range checks on N and tokens/s
    return training_flops_per_token(float(n_params), n_layer, d_model, seq_len) * float(tokens_per_s)


def mfu(achieved_flops_per_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization: achieved model FLOP/s over the peak (a fraction, 0.15 = 15%)."""
    peak = _positive(peak_flops_per_s, "the peak FLOP/s", "give --peak-tflops as e.g. 989 or a known --device")
    achieved = float(achieved_flops_per_s)
    if not (math.isfinite(achieved) and achieved >= 0):
        raise UserError(f"achieved FLOP/s must be a non-negative finite number, got {achieved_flops_per_s!r}")
    return achieved / peak


def peak_source(peak: Peak) -> str:
    """Where a peak came from and what it is of: "datasheet: H100 SXM bf16", "measured: cpu float32"."""
    return f"{peak.source}: {peak.name} {str(peak.dtype).replace('torch.', '')}"


def compute_mfu(
    n_params: float,
    tokens_per_s: float,
    peak: Peak,
    n_layer: int | None = None,
    d_model: int | None = None,
    seq_len: int | None = None,
) -> MFU:
    """MFU from 6N; also with the attention term when the model's shape (n_layer, d_model, seq_len) is given."""
    flops = model_flops_per_s(n_params, tokens_per_s)
    report = MFU(
        n_params=float(n_params),
        tokens_per_s=float(tokens_per_s),
        flops_per_s=flops,
        flops_per_s_with_attention=None,
        peak_flops_per_s=float(peak.flops_per_s),
        peak_source=peak_source(peak),
        mfu=mfu(flops, peak.flops_per_s),
        mfu_with_attention=None,
        method="6N·tokens/s",
        flops_per_token=training_flops_per_token(float(n_params)),
    )
    shape = {"n_layer": n_layer, "d_model": d_model, "seq_len": seq_len}
    given = [k for k, v in shape.items() if v is not None]
    if given and len(given) < len(shape):
        missing = [k for k in shape if k not in given]
        raise UserError(f"the attention term needs n_layer, d_model and seq_len together; missing {', '.join(missing)}")
    if given:
        with_attention = model_flops_per_s_with_attention(n_params, n_layer, d_model, seq_len, tokens_per_s)
        report.flops_per_s_with_attention = with_attention
        report.flops_per_token_with_attention = training_flops_per_token(float(n_params), n_layer, d_model, seq_len)
        report.mfu_with_attention = mfu(with_attention, peak.flops_per_s)
        report.n_layer, report.d_model, report.seq_len = int(n_layer), int(d_model), int(seq_len)
    _check_at_most_the_peak(report)
    return report


def _check_at_most_the_peak(report: MFU) -> None:
    """No run computes faster than its device's peak: an MFU over 100% means an input is wrong."""
    worst, what, flops = max(
        (report.mfu, "6N·tokens/s", report.flops_per_s),
        (report.mfu_with_attention or 0.0, "with the attention term", report.flops_per_s_with_attention),
    )
    if worst > 1.0:
        raise UserError(
            f"MFU {worst * 100:.4g}% ({what}) is over 100%: {flops:.3g} model FLOP/s is more than the peak "
            f"{report.peak_flops_per_s:.3g} FLOP/s ({report.peak_source}); likely the peak is wrong (another --device, "
            "or --peak-tflops in the dtype the run uses) or N or tokens/s is (N counts non-embedding parameters; "
            "tokens/s is of the devices the peak is for)"
        )
