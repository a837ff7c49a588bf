"""The device timeline from a Kineto/Chrome trace, on synthetic traces with exact timestamps (tests/gpu_trace.py):
links, busy time, idle gaps and what the host did in them, kernel classes. No GPU needed."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from gpu_trace import ADAM, ADD, GEMM, TraceBuilder, launch_bound, reference_example
from nanolm.errors import UserError
from nanolm.profiling.measure import device as gpu
from nanolm.profiling.measure.device import analyze_device
from nanolm.profiling.trace.classify import (
    ATTENTION,
    COMMUNICATION,
    COPY_DTOD,
    COPY_DTOH,
    COPY_HTOD,
    ELEMENTWISE,
    MATMUL,
    OPTIMIZER,
    OTHER,
    classify,
    classify_name,
)
from nanolm.profiling.trace.intervals import length, union
from nanolm.profiling.trace.load import load_trace

# ---- the loader ---------------------------------------------------------------------------------------


def _one_launch(**kw) -> TraceBuilder:
    b = TraceBuilder(**kw)
    for _ in range(3):
        with b.step(), b.range("forward"):
            b.launch(GEMM, 40, op="aten::mm", call="cuLaunchKernelEx")
            b.host(100)
    return b


@pytest.mark.parametrize("how", ["correlation", "flows only", "external id only"])
def test_each_kernel_is_linked_to_its_launch_call_and_op(how):
    kw = {
        "correlation": {"correlation": True},
        "flows only": {"correlation": False, "flows": True},
        "external id only": {"correlation": False, "flows": False},
    }[how]
    trace = load_trace(_one_launch(**kw).build())
    assert len(trace.device) == 3
    for k in trace.device:
        op = trace.op(k)
        assert op is not None and op.name == "aten::mm"
        if how != "external id only":
            call = trace.launch(k)
            assert call.name == "cuLaunchKernelEx" and call.end <= k.ts


def test_a_launch_without_external_ids_finds_its_op_by_nesting():
    trace = load_trace(_one_launch(external_ids=False).build())
    assert all(trace.op(k).name == "aten::mm" for k in trace.device)


def test_gzipped_and_plain_traces_load_the_same(tmp_path):
    b = reference_example(3)
    plain, gz = b.write(tmp_path / "t.json"), b.write(tmp_path / "t.json.gz", gz=True)
    assert gzip.decompress(gz.read_bytes())[:1] == b"{"
    a, c = load_trace(plain), load_trace(gz)
    assert len(a.device) == len(c.device) == 3 * (1 + 1 + 18 + 1)  # .item()'s copy, the batch, GEMMs, AdamW
    assert [s.ts for s in a.steps] == [s.ts for s in c.steps]


def test_a_cpu_only_trace_has_no_device_lane():
    b = TraceBuilder()
    for _ in range(3):
        with b.step(), b.range("forward"):
            b.host(100, "aten::addmm")
    trace = load_trace(b.build())
    assert not trace.has_device and len(trace.steps) == 3 and trace.main_lane == (4242, 4242)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("not json at all", "is not JSON"),
        ('{"something": 1}', "no traceEvents"),
        (
            '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}',
            "no ProfilerStep ranges",
        ),
    ],
)
def test_bad_traces_are_one_clear_error(tmp_path, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError, match=problem):
        load_trace(path)


def test_a_truncated_gzip_is_named_as_such(tmp_path):
    data = gzip.compress(json.dumps(reference_example(2).build()).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated or damaged gzip"):
        load_trace(path)


def test_device_work_that_nothing_links_is_refused():
    data = _one_launch(correlation=False, external_ids=False).build()
    with pytest.raises(UserError, match="links"):
        load_trace(data)


# ---- busy ---------------------------------------------------------------------------------------------


def test_gpu_annotations_are_not_work():
    """The H200 bug (D1): Kineto's gpu_user_annotation spans cover a range's idle gaps; counted, a launch-bound
    step looked ~100% busy."""
    data = launch_bound(4).build()
    annotations = [e for e in data["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    assert annotations, "the builder projects forward/backward/optimizer ranges onto the GPU"
    trace = load_trace(data)
    d = analyze_device(trace, 1, 3)
    kernels = [e for e in data["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in kernels + annotations]
    with_annotations = length(union([(max(s, d.t0), min(e, d.t1)) for s, e in spans if e > d.t0 and s < d.t1]))
    assert with_annotations / (d.t1 - d.t0) >= 0.9  # what counting them gave
    assert d.busy_share <= 0.5
    per_step_kernel_us = 300 * 15 + 40 + 200 + 2  # 300 adds, the batch copy, AdamW, .item()'s copy
    assert d.busy_ms == pytest.approx(per_step_kernel_us / 1000, rel=1e-3)


def test_busy_is_the_union_over_streams_and_clipped_to_the_steps():
    b = TraceBuilder()
    head = b.launch(GEMM, 3_000, op=None)  # queued before the first step, running into it
    b.host(100)
    for _ in range(3):
        with b.step(), b.range("forward"):
            k1 = b.launch(GEMM, 1_000, stream=7)
            k2 = b.launch(GEMM, 1_000, stream=8)  # starts ~10 us after k1: the two overlap
            b.host(3_000)
    # the last step's work runs past the last step's end: the part after T1 is not this step's
    tail = b.launch(GEMM, 5_000, op=None)
    b.t = tail["ts"] - 100.0  # ... launched just before the step ends
    data = b.build()
    step_end = next(e for e in data["traceEvents"] if e["name"] == "ProfilerStep#2")
    step_end["dur"] = tail["ts"] + 2_000 - step_end["ts"]  # the last step ends 2 ms into that kernel
    trace = load_trace(data)
    d = analyze_device(trace)
    assert head["ts"] < d.t0 < head["ts"] + head["dur"] and tail["ts"] < d.t1 < tail["ts"] + tail["dur"]
    assert k2["ts"] < k1["ts"] + k1["dur"]  # two streams overlapping
    # an independent count: a 1 us grid over [T0, T1), every device event marked (all times are whole us here)
    grid = np.zeros(int(d.t1 - d.t0), dtype=bool)
    for e in data["traceEvents"]:
        if e.get("cat") == "kernel":
            grid[max(0, int(e["ts"] - d.t0)) : max(0, int(e["ts"] + e["dur"] - d.t0))] = True
    assert d.busy_ms * 3 * 1000 == pytest.approx(grid.sum(), abs=1e-6)
    assert d.overlap_ms == 0.0  # the same class on both streams: no overlap between classes


def test_a_cuda_graph_is_one_launch_not_a_deep_queue():
    b = TraceBuilder()
    for _ in range(3):
        with b.step(), b.range("forward"):
            b.graph(200, GEMM, 25.0, op="aten::mm")
            b.host(6_000)
    d = analyze_device(load_trace(b.build()))
    assert d.launch.max_queue_depth <= 1 and d.launch.median_launch_delay_us == pytest.approx(3.0)
    assert d.launch.kernels_per_step == 200 and d.class_ms[MATMUL] == pytest.approx(5.0)


def test_work_queued_before_the_recording_is_not_put_on_the_host():
    """A kernel whose launch the trace does not hold (launched before the recording) ends a queued gap."""
    b = TraceBuilder()
    for _ in range(3):
        with b.step(), b.range("forward"):
            b.launch(GEMM, 500, op="aten::mm")
            b.host(2_000)
    data = b.build()
    first = min((e for e in data["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    call = next(
        e
        for e in data["traceEvents"]
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == first["args"]["correlation"]
    )
    data["traceEvents"].remove(call)  # as if launched before the first recorded step
    d = analyze_device(load_trace(data))
    gap = d.gaps[0]
    assert not gap.starved and set(gap.labels) <= {gpu.KERNEL_GAPS, gpu.DEVICE_WAITS}


# ---- idle gaps ----------------------------------------------------------------------------------------


def test_a_gap_waiting_for_a_launch_is_host_starved_and_labelled_by_the_host_range():
    """Design §5.1: the gap before the add is host-starved (its launch ended after the GEMM did)."""
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            with b.range("forward"):
                b.launch(GEMM, 40, op="aten::mm")
                b.host(130)  # Python between ops: the GEMM finishes, nothing is queued
                b.launch(ADD, 4, op="aten::add")
            with b.range("between"):
                b.host(500)
    trace = load_trace(b.build())
    d = analyze_device(trace)
    starved = [g for g in d.gaps if g.starved]
    assert starved and all(not g.post_sync for g in starved)
    assert d.idle_ms[gpu.LAUNCHING] > 0 and d.idle_ms[gpu.BETWEEN] == pytest.approx(0.5, abs=0.02)


def test_queued_gaps_are_kernel_gaps_up_to_10_us_then_device_waits():
    b = TraceBuilder(delay_us=0.0)
    for _ in range(3):
        with b.step(), b.range("forward"):
            b.launch(GEMM, 1_000, op="aten::mm")
            b.launch(GEMM, 1_000, op="aten::mm")  # queued behind the first: back to back
            b.stream_free[b.stream] += 8.0  # an 8 us hole before the next: launch latency
            b.launch(GEMM, 1_000, op="aten::mm")
            b.stream_free[b.stream] += 30.0  # a 30 us hole: another stream's event, say
            b.launch(GEMM, 1_000, op="aten::mm")
            b.sync(dtoh=False)
    trace = load_trace(b.build())
    d = analyze_device(trace)
    assert d.idle_ms[gpu.KERNEL_GAPS] == pytest.approx(0.008, abs=1e-6)
    assert d.idle_ms[gpu.DEVICE_WAITS] == pytest.approx(0.030, abs=1e-6)


def test_the_reference_example_idles_between_steps_after_the_sync():
    trace = load_trace(reference_example(4).build())
    d = analyze_device(trace, 1, 3)
    assert d.busy_ms == pytest.approx((4_000 + 18 * 1_000 + 3_000 + 2) / 1000, rel=1e-6)
    assert d.idle_ms[gpu.BETWEEN] == pytest.approx(50.0, abs=0.05)
    post = [g for g in d.gaps if g.post_sync]
    assert len(post) == 3 and all(g.labels.get(gpu.BETWEEN, 0) > 49_000 for g in post)
    assert d.post_sync_ms == pytest.approx(50.0, abs=0.05)


def test_backward_launches_from_the_autograd_thread_are_launching():
    trace = load_trace(launch_bound(4).build())
    assert (4242, 4243) in trace.host
    d = analyze_device(trace, 1, 3)
    backward = [k for k in trace.device if trace.launch(k) is not None and trace.launch(k).tid == 4243]
    assert len(backward) == 4 * 150
    assert d.idle_ms[gpu.LAUNCHING] > 0.6 * d.step_ms
    assert dict(d.top_idle_ops[gpu.LAUNCHING])["backward"] > 0


def test_batch_making_mid_step_is_data_not_launching():
    """nanoGPT makes its next batch between forward and backward, outside any phase range."""
    d = analyze_device(load_trace(launch_bound(4).build()), 1, 3)
    assert d.idle_ms[gpu.STEP_DATA] == pytest.approx(0.3, abs=0.03)


def test_an_op_named_like_batch_making_in_the_model_is_not_batch_making():
    """A plain torch.profiler trace (no phase ranges) with a torch.cat in its forward, and a runner trace whose
    clip_grad_norm_ stacks the norms between backward and the optimizer: launching, not batch making."""
    plain, runner = TraceBuilder(), TraceBuilder()
    for _ in range(4):
        with plain.step():
            for _ in range(20):
                plain.launch(ADD, 15, op="aten::cat")
                plain.host(60)
        with runner.step():
            with runner.range("backward"):
                runner.launches(20, ADD, 15, op="aten::mul", gap_us=60)
            for _ in range(20):  # clip_grad_norm_: stack the per-parameter norms
                runner.launch(ADD, 15, op="aten::stack")
                runner.host(60)
            with runner.range("Optimizer.step#AdamW.step"):
                runner.launch(ADAM, 100, op="aten::_fused_adamw_")
    for b in (plain, runner):
        d = analyze_device(load_trace(b.build()), 1, 3)
        assert d.idle_ms.get(gpu.STEP_DATA, 0.0) == 0.0 and d.idle_ms[gpu.LAUNCHING] > 0.5 * d.step_ms


def test_launch_statistics():
    d = analyze_device(load_trace(launch_bound(4).build()), 1, 3)
    s = d.launch
    assert s.kernels_per_step == pytest.approx(300 + 1 + 0, abs=1)  # 300 adds + AdamW (copies are not kernels)
    assert s.median_kernel_us == 15 and s.median_launch_us == 5 and s.median_launch_delay_us == pytest.approx(3)
    assert s.max_queue_depth == 1 and s.queue_full_ms == 0


def test_gate_thresholds():
    assert gpu.gate_of(0.85) == gpu.COMPUTING and gpu.gate_of(0.8499) == gpu.MIXED
    assert gpu.gate_of(0.60) == gpu.MIXED and gpu.gate_of(0.5999) == gpu.WAITING


# ---- kernel classes -----------------------------------------------------------------------------------

KERNEL_TABLE = [  # design §3.3: names seen on Hopper and Ampere
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", MATMUL),
    ("nvjet_tss_64x64_64x6_1x1_v_bz_splitK_TNT", MATMUL),
    ("nvjet_sm90_hss_320x128_64x3_2x1_v_bz_NNT", MATMUL),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        MATMUL,
    ),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(cublasSplitKParams<float>)", MATMUL),
    ("void gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false, false>", MATMUL),
    ("void gemmSN_NN_kernel<float, 256, 4, 2, 8, 4, 4, false>", MATMUL),
    ("void dot_kernel<float, 128, 0, cublasDotParams<float> >", MATMUL),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>", MATMUL),
    ("triton_tem_fused_mm_0", MATMUL),
    ("triton_tem_fused_addmm_gelu_3", MATMUL),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", ATTENTION),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128", ATTENTION),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t> >", ATTENTION),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64>>", ATTENTION),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", ATTENTION),
    ("fmha_cutlassB_bf16_aligned_64x128_k64_sm80", ATTENTION),
    ("triton_poi_fused_add_gelu_3", ELEMENTWISE),
    ("triton_red_fused_native_layer_norm_backward_7", ELEMENTWISE),
    ("triton_per_fused__log_softmax_nll_loss_forward_2", ELEMENTWISE),
    (ADD, ELEMENTWISE),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", ELEMENTWISE),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float> > >", ELEMENTWISE),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>", ELEMENTWISE),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", ELEMENTWISE),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>", ELEMENTWISE),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>", ELEMENTWISE),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<int, unsigned int, 3, 128, 1>", ELEMENTWISE),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<L2NormFunctor<float, 1, 1> >", ELEMENTWISE),
    (ADAM, OPTIMIZER),
    ("triton_for_fused__foreach_addcdiv_1", OPTIMIZER),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", COMMUNICATION),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t", COMMUNICATION),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >  /* broadcast */",
        ELEMENTWISE,
    ),
    ("triton_poi_fused__scaled_dot_product_flash_attention_transpose_5", ELEMENTWISE),  # Inductor's prefix first
    ("some_kernel_nobody_named", OTHER),
]


@pytest.mark.parametrize("name, expected", KERNEL_TABLE)
def test_kernel_names_are_classified(name, expected):
    assert classify_name(name) == expected


def test_copies_by_direction():
    assert classify_name("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy") == COPY_HTOD
    assert classify_name("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy") == COPY_DTOH
    assert classify_name("Memcpy DtoD (Device -> Device)", "gpu_memcpy") == COPY_DTOD
    assert classify_name("Memset (Device)", "gpu_memset") == COPY_DTOD


def test_the_launching_op_decides_before_the_name():
    b = TraceBuilder()
    for _ in range(3):
        with b.step(), b.range("forward"):
            b.launch("some_kernel_nobody_named", 50, op="aten::mm")  # a future cuBLAS family
            b.launch("some_kernel_nobody_named", 50, op="aten::_scaled_dot_product_cudnn_attention")
            b.launch(ADD, 50, op="aten::add")
        with b.range("Optimizer.step#AdamW.step"):
            b.launch("some_kernel_nobody_named", 50, op="aten::_foreach_mul_")
    trace = load_trace(b.build())
    classes = [classify(trace, k) for k in trace.device]
    assert classes[:4] == [MATMUL, ATTENTION, ELEMENTWISE, OPTIMIZER]


def test_steps_are_cut_into_windows_the_same_way_wherever_a_trace_is_read():
    """(first, count) windows, worked by hand: 7 steps in windows of 3 are 0-2 and 3-5; the live recording
    (partial=True) also keeps step 6, which it measured before it stopped; a window never exceeds the steps."""
    from nanolm.profiling.trace.load import step_groups

    assert step_groups(7, 3) == [(0, 3), (3, 3)]
    assert step_groups(7, 3, partial=True) == [(0, 3), (3, 3), (6, 1)]
    assert step_groups(6, 3, partial=True) == [(0, 3), (3, 3)]
    assert step_groups(2, 3) == step_groups(2, 3, partial=True) == [(0, 2)]
    assert step_groups(0, 3, partial=True) == []


@pytest.mark.parametrize(
    "name, short",
    [
        # real names from an H200 trace (tests/fixtures/gpu/), cut here to what decides the short name
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float, float, float, "
            "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, at::native::BUnaryFunctor<float, "
            "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)",
            "vectorized_elementwise_kernel<MulFunctor>",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
            "(at::native::ADAM_MODE)1, false>, float const*, double>(at::native::(anonymous namespace)::"
            "FusedOptimizerTensorListMetadata<4>, double)",
            "multi_tensor_apply_kernel<FusedAdamMathFunctor>",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::plus<float>, "
            "float>(at::native::(anonymous namespace)::TensorListMetadata<1>, float)",
            "multi_tensor_apply_kernel<BinaryOpScalarFunctor, plus>",
        ),
        (
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
            "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
            "unsigned int, float, 4, 4> >(at::native::ReduceOp<float>)",
            "reduce_kernel<sum_functor>",
        ),
        (
            "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, unsigned int)",
            "compute_dot_do_o_specialized",
        ),
        (
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false>"
            "(cublasLt::cublasSplitKParams<float>, float const*)",
            "splitKreduce_kernel",
        ),
        # not C++ signatures: as they are
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
        ("triton_poi_fused__unsafe_view_gelu_6", "triton_poi_fused__unsafe_view_gelu_6"),
        ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pinned -> Device)"),
    ],
)
def test_a_kernels_short_name_keeps_what_it_computes(name, short):
    from nanolm.profiling.trace.classify import short_name

    assert short_name(name) == short
