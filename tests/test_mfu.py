"""MFU: hand-worked numbers, datasheet names as torch reports them, the measured matmul peak against an
independent timing, and bad input refused with a message naming the fix."""

from __future__ import annotations

import math
import time

import pytest
import torch

from nanolm.errors import UserError
from nanolm.profiling.measure.mfu import (
    DATASHEET,
    Peak,
    compute_mfu,
    lookup_peak,
    mfu,
    model_flops_per_s,
    model_flops_per_s_with_attention,
)
from nanolm.profiling.record.peak import measure_peak, measure_peaks


def test_reference_example_by_hand():
    # 6 · 1.24e8 · 2e5 = 1.488e14 FLOP/s over an H100 SXM's 989 dense bf16 TFLOP/s.
    assert model_flops_per_s(1.24e8, 2e5) == pytest.approx(1.488e14)
    report = compute_mfu(1.24e8, 2e5, lookup_peak("h100"))
    assert report.flops_per_s == pytest.approx(1.488e14)
    assert report.peak_flops_per_s == 9.89e14 and report.peak_source == "datasheet: H100 SXM bfloat16"
    assert round(report.mfu, 3) == 0.150
    assert report.mfu == pytest.approx(1.488e14 / 9.89e14)
    assert report.mfu_with_attention is None and report.flops_per_s_with_attention is None


def test_attention_term_by_hand():
    # N = 1000, L = 2, d = 8, T = 4: 6N = 6000 and 12·L·d·T = 12·2·8·4 = 768 FLOPs per token.
    assert model_flops_per_s_with_attention(1000, 2, 8, 4, 10) == pytest.approx(67_680)
    report = compute_mfu(1000, 10, Peak("toy", 1e6, "float32", "given"), n_layer=2, d_model=8, seq_len=4)
    assert report.flops_per_token == 6000 and report.flops_per_token_with_attention == 6768
    assert report.flops_per_s == pytest.approx(60_000) and report.flops_per_s_with_attention == pytest.approx(67_680)
    assert report.mfu == pytest.approx(0.06) and report.mfu_with_attention == pytest.approx(0.06768)
    assert mfu(5e13, 1e14) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("name", "expected", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756),
        ("NVIDIA H100 NVL", "H100 NVL", 835),
        ("NVIDIA H200", "H200", 989),
        ("NVIDIA A100-SXM4-80GB", "A100", 312),
        ("NVIDIA A100 80GB PCIe", "A100", 312),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 165),
        ("AMD Instinct MI300X", "MI300X", 1307),
        ("NVIDIA L4", "L4", 121),
        ("NVIDIA L40S", "L40S", 362),
        ("Tesla V100-SXM2-16GB", "V100 SXM2", 125),
        ("h100", "H100 SXM", 989),
        ("h100-pcie", "H100 PCIe", 756),
        ("H100 PCIe", "H100 PCIe", 756),
        ("a100", "A100", 312),
        ("h200", "H200", 989),
        ("l4", "L4", 121),
        ("4090", "RTX 4090", 165),
        ("mi300x", "MI300X", 1307),
    ],
)
def test_device_names_as_torch_reports_them(name, expected, tflops):
    peak = lookup_peak(name)
    assert (peak.name, peak.flops_per_s, peak.source) == (expected, tflops * 1e12, "datasheet")


@pytest.mark.parametrize("name", ["tpu9", "NVIDIA A10G", "NVIDIA GeForce RTX 4090 Laptop GPU", "", "a1000"])
def test_unknown_device_lists_the_known_names(name):
    with pytest.raises(UserError) as e:
        lookup_peak(name)
    msg = str(e.value)
    assert "\n" not in msg and repr(name) in msg and "--measure-peak" in msg
    for entry in DATASHEET:
        assert entry.aliases[0] in msg and entry.name in msg


def test_aliases_are_unambiguous():
    aliases = [a for e in DATASHEET for a in e.aliases]
    assert len(aliases) == len(set(aliases))
    for entry in DATASHEET:  # each table name finds its own row
        assert lookup_peak(entry.name).name == entry.name


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((0, 2e5), "parameter count"),
        ((-1e8, 2e5), "parameter count"),
        ((1e8, 0), "tokens/s"),
        ((1e8, -5), "tokens/s"),
        ((float("nan"), 2e5), "parameter count"),
        ((1e8, float("inf")), "tokens/s"),
    ],
)
def test_non_positive_inputs_are_refused(args, needle):
    with pytest.raises(UserError, match=needle):
        compute_mfu(*args, lookup_peak("h100"))
    with pytest.raises(UserError, match=needle):
        model_flops_per_s(*args)


def test_bad_peak_and_partial_shape_are_refused():
    with pytest.raises(UserError, match="peak"):
        compute_mfu(1e8, 1e5, Peak("given", 0.0, "bf16", "given"))
    with pytest.raises(UserError, match="seq_len"):
        compute_mfu(1e8, 1e5, lookup_peak("h100"), n_layer=12, d_model=768)
    with pytest.raises(UserError, match="n_layer"):
        compute_mfu(1e8, 1e5, lookup_peak("h100"), n_layer=0, d_model=768, seq_len=1024)


def _best_matmul_flops(n: int = 1024, reps: int = 5) -> float:
    """An independent timing of one big fp32 matmul on this CPU."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def test_measured_cpu_peak_is_a_sane_matmul_rate():
    t0 = time.perf_counter()
    peak = measure_peak("cpu", torch.float32)
    elapsed = time.perf_counter() - t0
    assert peak.source == "measured" and peak.dtype == "float32" and peak.name.startswith("cpu")
    assert math.isfinite(peak.flops_per_s) and peak.flops_per_s > 0
    independent = _best_matmul_flops()
    # Loose: a shared machine is noisy, and sizes differ; a unit or timing bug is off by 1000x.
    assert independent / 20 < peak.flops_per_s < independent * 20, (peak.flops_per_s, independent)
    assert peak.n in (256, 512, 1024, 2048)
    assert elapsed < 30


def test_measure_peak_small_and_each_dtype():
    peak = measure_peak("cpu", "float32", n=128, reps=2, budget_s=0.2)
    assert peak.flops_per_s > 0 and peak.n == 128
    peaks = measure_peaks("cpu", budget_s=0.3)
    assert peaks[0].dtype == "float32" and all(p.flops_per_s > 0 and p.source == "measured" for p in peaks)
    assert {p.dtype for p in peaks} <= {"float32", "bfloat16"}


def test_measure_peak_refuses_bad_input():
    with pytest.raises(UserError, match="int8"):
        measure_peak("cpu", "int8")
    with pytest.raises(UserError, match="positive"):
        measure_peak("cpu", torch.float32, n=0)
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA"):
            measure_peak("cuda")
