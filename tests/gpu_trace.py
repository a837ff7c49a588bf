"""A builder of synthetic Kineto/Chrome GPU traces with exact timestamps (microseconds), for the profiler's
GPU tests: one host lane launching kernels onto a device stream, the way torch.profiler records a CUDA run.

    b = TraceBuilder()
    with b.step():
        with b.range("between"):
            b.host(50_000, "get_batch")          # the host busy 50 ms, the GPU idle
        with b.range("forward"):
            b.launch("nvjet_tst_128x64_TNN", 6_000, op="aten::mm")
        b.sync()                                  # .item(): waits until the stream is empty
    trace = b.build()                             # the JSON object torch's export_chrome_trace writes

A kernel starts at max(its launch call's end + delay_us, the end of the previous kernel on its stream),
which is how a CUDA stream runs them; a sync call lasts until its stream is empty."""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanolm.profiling.measure.host import WindowSummary
    from nanolm.profiling.report import ProfileReport


class TraceBuilder:
    def __init__(
        self,
        pid: int = 4242,
        tid: int = 4242,
        device: int = 0,
        stream: int = 7,
        start_us: float = 1000.0,
        delay_us: float = 3.0,
        launch_us: float = 5.0,
        flows: bool = False,
        correlation: bool = True,
        external_ids: bool = True,
        queue_limit: int | None = None,
    ) -> None:
        self.pid, self.tid, self.device, self.stream = pid, tid, device, stream
        self.t = start_us
        self.delay_us, self.launch_us = delay_us, launch_us
        self.flows, self.correlation, self.external_ids = flows, correlation, external_ids
        self.events: list[dict] = []
        self.stream_free: dict[int, float] = {}
        self._ext = 0
        self._corr = 500
        self._steps = 0
        self._range_kernels: list[list[float]] = []  # open ranges' (first kernel start, last kernel end)
        self.queue_limit = queue_limit  # launches beyond this many queued block in "Command Buffer Full"
        self._starts: list[float] = []  # every activity's start

    @contextlib.contextmanager
    def lane(self, tid: int):
        """Launch from another host thread (autograd's backward thread) inside this block."""
        saved, self.tid = self.tid, tid
        try:
            yield
        finally:
            self.tid = saved

    # -- host --
    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def _x(self, cat: str, name: str, ts: float, dur: float, args: dict | None = None, pid=None, tid=None) -> dict:
        event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid if pid is None else pid,
            "tid": self.tid if tid is None else tid,
            "ts": ts,
            "dur": dur,
            "args": dict(args or {}),
        }
        self.events.append(event)
        return event

    def host(self, us: float, name: str | None = None, cat: str = "cpu_op") -> None:
        """The host busy for `us` (inside an op called `name`, or Python between ops when None)."""
        if name is not None:
            self._x(cat, name, self.t, us, {"External id": self._next_ext()})
        self.t += us

    @contextlib.contextmanager
    def range(self, name: str, cat: str = "user_annotation", device_annotation: bool = True):
        start, ext = self.t, self._next_ext()
        event = self._x(cat, name, start, 0.0, {"External id": ext})
        self._range_kernels.append([float("inf"), float("-inf")])
        try:
            yield
        finally:
            self.t += 1.0  # the range's own exit
            event["dur"] = self.t - start
            first, last = self._range_kernels.pop()
            if self._range_kernels:
                outer = self._range_kernels[-1]
                outer[0], outer[1] = min(outer[0], first), max(outer[1], last)
            if device_annotation and last > first and cat == "user_annotation" and not name.startswith("ProfilerStep"):
                self._x("gpu_user_annotation", name, first, last - first, {"External id": ext}, pid=self.device, tid=self.stream)

    @contextlib.contextmanager
    def step(self):
        with self.range(f"ProfilerStep#{self._steps}"):
            yield
        self._steps += 1

    # -- device --
    def launch(
        self,
        kernel: str,
        kernel_us: float,
        op: str | None = "aten::mm",
        launch_us: float | None = None,
        call: str = "cudaLaunchKernel",
        stream: int | None = None,
        cat: str = "kernel",
        op_us: float = 2.0,
        extra_args: dict | None = None,
    ) -> dict:
        """An op (when `op`) whose launch call enqueues one device activity; the host moves past the op."""
        stream = self.stream if stream is None else stream
        launch_us = self.launch_us if launch_us is None else launch_us
        self._wait_for_queue(launch_us + (op_us if op is not None else 0.0))
        ext = self._next_ext()
        op_start = self.t
        if op is not None:
            self._x("cpu_op", op, op_start, op_us + launch_us + op_us, {"External id": ext})
            self.t += op_us
        self._corr += 1
        corr = self._corr
        call_args = {"correlation": corr} if self.correlation else {}
        if self.external_ids:
            call_args["External id"] = ext
        self._x(
            "cuda_driver" if call.startswith("cu") and not call.startswith("cuda") else "cuda_runtime",
            call,
            self.t,
            launch_us,
            call_args,
        )
        call_end = self.t + launch_us
        if self.flows:
            self.events.append(
                {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": self.pid, "tid": self.tid, "ts": self.t}
            )
        start = max(call_end + self.delay_us, self.stream_free.get(stream, 0.0))
        args = {
            "device": self.device,
            "stream": stream,
            **({"correlation": corr} if self.correlation else {}),
            **({"External id": ext} if self.external_ids else {}),
            **(extra_args or {}),
        }
        kernel_event = self._x(cat, kernel, start, kernel_us, args, pid=self.device, tid=stream)
        if self.flows:
            self.events.append(
                {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": self.device, "tid": stream, "ts": start, "bp": "e"}
            )
        self.stream_free[stream] = start + kernel_us
        self._starts.append(start)
        for r in self._range_kernels:
            r[0], r[1] = min(r[0], start), max(r[1], start + kernel_us)
        self.t = call_end + (op_us if op is not None else 0.0)
        return kernel_event

    def _wait_for_queue(self, ahead_us: float) -> None:
        """With a queue limit: block (a "Command Buffer Full" record) until the queue has room."""
        if self.queue_limit is None:
            return
        pending = sorted(s for s in self._starts if s > self.t + ahead_us)
        if len(pending) >= self.queue_limit:
            room_at = pending[len(pending) - self.queue_limit]
            self.overhead(room_at - ahead_us - self.t + 1.0)

    def graph(self, n: int, kernel: str, kernel_us: float, op: str | None = None, launch_us: float = 10.0) -> None:
        """A CUDA graph replay: one cudaGraphLaunch whose `n` kernels all carry its correlation, back to back."""
        self._corr += 1
        corr, ext = self._corr, self._next_ext()
        if op is not None:
            self._x("cpu_op", op, self.t, launch_us + 2.0, {"External id": ext})
            self.t += 1.0
        self._x("cuda_runtime", "cudaGraphLaunch", self.t, launch_us, {"correlation": corr, "External id": ext})
        self.t += launch_us
        start = max(self.t + self.delay_us, self.stream_free.get(self.stream, 0.0))
        for _ in range(n):
            self._x(
                "kernel",
                kernel,
                start,
                kernel_us,
                {"device": self.device, "stream": self.stream, "correlation": corr, "External id": ext},
                pid=self.device,
                tid=self.stream,
            )
            self._starts.append(start)
            start += kernel_us
        self.stream_free[self.stream] = start
        self.t += 1.0 if op is not None else 0.0

    def launches(self, n: int, kernel: str, kernel_us: float, gap_us: float = 0.0, **kw) -> None:
        for _ in range(n):
            self.launch(kernel, kernel_us, **kw)
            self.t += gap_us

    def drained_at(self) -> float:
        return max(self.stream_free.values(), default=self.t)

    def sync(
        self,
        call: str = "cudaStreamSynchronize",
        op: str | None = "aten::_local_scalar_dense",
        in_range: bool = True,
        dtoh: bool = True,
        tail_us: float = 2.0,
    ) -> None:
        """`.item()`: a DtoH copy of 4 bytes, then the host blocked until the stream is empty."""
        ctx = self.range("sync", device_annotation=False) if in_range else contextlib.nullcontext()
        with ctx:
            start = self.t
            ext = self._next_ext()
            op_event = self._x("cpu_op", op, start, 0.0, {"External id": ext}) if op else None
            self.t += 1.0
            if dtoh:
                self.launch(
                    "Memcpy DtoH (Device -> Pageable)",
                    2.0,
                    op=None,
                    call="cudaMemcpyAsync",
                    cat="gpu_memcpy",
                    extra_args={"bytes": 4},
                )
            self._corr += 1
            end = max(self.t + tail_us, self.drained_at() + tail_us)
            self._x("cuda_runtime", call, self.t, end - self.t, {"correlation": self._corr, "External id": ext})
            self.t = end + 1.0
            if op_event is not None:
                op_event["dur"] = self.t - start

    def overhead(self, us: float, name: str = "Command Buffer Full") -> None:
        self._x("overhead", name, self.t, us, {})
        self.t += us

    def build(self) -> dict:
        return {
            "schemaVersion": 1,
            "displayTimeUnit": "ms",
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9}],
            "traceEvents": sorted(self.events, key=lambda e: e["ts"]),
        }

    def write(self, path: Path, gz: bool = False) -> Path:
        data = json.dumps(self.build()).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        return path


# ---- three planted scenarios (design §6), each as an exact timeline ---------------------------------------

GEMM = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT"
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)


def reference_example(steps: int = 4, data_us: float = 50_000.0) -> TraceBuilder:
    """The reference document's step on a GPU: the host makes each batch (50 ms, GPU idle), copies it (4 ms),
    launches 18 ms of GEMMs and 3 ms of AdamW, then `.item()` waits for all of it (busy 25 ms a step)."""
    b = TraceBuilder()
    for _ in range(steps):
        with b.step():
            with b.range("between"):
                b.sync()
                b.host(data_us)
                b.launch("Memcpy HtoD (Pinned -> Device)", 4_000, op="aten::_to_copy", call="cudaMemcpyAsync", cat="gpu_memcpy")
            with b.range("forward"):
                b.launches(6, GEMM, 1_000, op="aten::mm")
            with b.range("backward"):
                b.launches(12, GEMM, 1_000, op="aten::mm")
            with b.range("Optimizer.step#AdamW.step"):
                b.launch(ADAM, 3_000, op="aten::_fused_adamw_")
    return b


def launch_bound(steps: int = 4, python_us: float = 50.0) -> TraceBuilder:
    """nanoGPT eager-like: 150 small kernels forward and 150 backward (autograd's thread), each 15 us on the GPU
    behind ~60 us of host time; a batch made mid-step (stack, pin, copy) and `.item()` each step."""
    b = TraceBuilder()
    for _ in range(steps):
        with b.step():
            with b.range("between"):
                b.sync()
            with b.range("forward"):
                for _ in range(150):
                    b.launch(ADD, 15, op="aten::add")
                    b.host(python_us)
            b.host(300, "aten::stack")  # nanoGPT's get_batch, between forward and backward
            b.launch("Memcpy HtoD (Pinned -> Device)", 40, op="aten::_to_copy", call="cudaMemcpyAsync", cat="gpu_memcpy")
            with b.range("backward"), b.lane(4243):
                for _ in range(150):
                    b.launch(ADD, 15, op="aten::mul")
                    b.host(python_us)
            with b.range("Optimizer.step#AdamW.step"):
                b.launch(ADAM, 200, op="aten::_fused_adamw_")
    return b


def compute_bound(steps: int = 8, queue_limit: int = 64) -> TraceBuilder:
    """gpt2-124m compiled-like: long GEMMs and Inductor kernels launched fast; the host blocks on a full queue."""
    b = TraceBuilder(queue_limit=queue_limit)
    for _ in range(steps):
        with b.step():
            with b.range("forward"):
                for _ in range(40):
                    b.launch(GEMM, 500, op="aten::mm")
                    b.launch("triton_poi_fused_add_gelu_3", 100, op="triton_poi_fused_add_gelu_3", call="cuLaunchKernel")
            with b.range("backward"), b.lane(4243):
                for _ in range(40):
                    b.launch(GEMM, 500, op="aten::mm")
                    b.launch(GEMM, 500, op="aten::mm")
                    b.launch(
                        "triton_red_fused_native_layer_norm_backward_7",
                        100,
                        op="triton_red_fused_native_layer_norm_backward_7",
                        call="cuLaunchKernel",
                    )
            with b.range("Optimizer.step#AdamW.step"):
                b.launch(
                    "triton_for_fused__foreach_addcdiv_1", 1_000, op="triton_for_fused__foreach_addcdiv_1", call="cuLaunchKernel"
                )
    return b


def window_summary_of(host: ProfileReport) -> WindowSummary:
    """The one-window summary a live session would have made of the steps `host` (analyze_trace's report) measured:
    its numbers stand in for the host-side measurements, with no device lane and no communication."""
    from nanolm.profiling.measure.host import WindowSummary

    return WindowSummary(
        step_ms=host.step_ms,
        phases=host.phases,
        categories=host.categories,
        top_ops=host.top_ops,
        communication=None,
        window_step_ms=host.window_step_ms,
        window_exposed_ms=[],
        ops_per_step=host.ops_per_step,
        device_busy=None,
        steps_measured=host.steps_measured,
    )
