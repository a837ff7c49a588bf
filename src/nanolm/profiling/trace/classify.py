"""What kind of work an operator, a kernel, a copy is: operator categories, then GPU activity classes.

Operator categories: what kind of work an operator (or a GPU kernel) is.

An operator's category comes first from where it ran (inside a host-device sync, inside the optimizer
step, inside the DataLoader's ``__next__`` or a ``data`` phase, between one optimizer step and the next
forward), then from its name.

A host-device sync has one definition, shared by this table and the list of sync call sites
(nanolm.profiling.record.syncs): a call from the script's own code that makes the host wait for the device
(``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, printing or formatting a tensor, a tensor used as a
bool/float/int, ``torch.cuda.synchronize()``). SyncWatch marks each such call with a ``sync`` range while it
records; the category "host-device sync" is the self time inside those ranges, and its calls are the
ranges (the sync calls), not the operators they ran. Torch's own reads of its CPU-side values (AdamW's
step counter ``.item()``) are not syncs, so an operator's name alone never makes it one.

Communication: torch.distributed's collectives, as the profiler names them (``c10d::allreduce_``, gloo's
``gloo:all_reduce``, NCCL's ``nccl:all_reduce`` and ``ncclDevKernel_*`` kernels, ``record_param_comms``). The
main thread's waits for them are no operator; nanolm.profiling.measure.comm finds them and moves them from host
overhead into this category.

What a GPU activity is (``classify``): the class of a kernel, copy or memset, on Hopper and Ampere, decided in
this order:

1. ``gpu_memcpy`` by direction (host to device, device to host, device to device) and ``gpu_memset``;
2. NCCL kernels (``^nccl``, ``ncclDevKernel``, ``ncclKernel``): communication. A C++ kernel whose name holds
   "broadcast" (an elementwise functor) is *not* communication;
3. the op that launched it, through the trace's links (correlation -> launch call -> External id ->
   ``cpu_op``): a matmul op (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``) makes it a matmul
   whatever its name (``nvjet_*`` on Hopper, names not known today), scaled-dot-product attention ops make
   it attention, the optimizer's step (``Optimizer.step#...``, ``_fused_adam``, ``_foreach_*``) the optimizer;
4. its name (``KERNEL_RULES``: cuBLAS ``nvjet``/``xmma_gemm``/``gemv``/``splitKreduce``, CUTLASS, cuDNN and
   flash attention, Inductor's ``triton_{poi,red,per,spl,for,tem}_*``, ATen elementwise/reduce/norm kernels);
5. an unknown name under a matmul op (``aten::matmul``, ``aten::linear``) is a matmul; else "other".

``short_name`` gives a C++ kernel's name as a person reads it in a table (the trace and the JSON keep the whole).
"""

from __future__ import annotations

import re
from functools import lru_cache

from .load import Event, Trace

MATMUL = "matmul/GEMM"


ATTENTION = "attention"


ELEMENTWISE = "elementwise & normalization"


COPY = "memory copy/transfer"


OPTIMIZER = "optimizer"


DATA = "data loading"


BETWEEN = "between steps (data, logging)"


SYNC = "host-device sync"


COMMUNICATION = "communication"


HOST = "host overhead (Python, between ops)"


OTHER = "other"


CATEGORIES = [MATMUL, ATTENTION, ELEMENTWISE, COPY, OPTIMIZER, DATA, BETWEEN, SYNC, COMMUNICATION, HOST, OTHER]


COMPUTE = {MATMUL, ATTENTION, ELEMENTWISE, OPTIMIZER}


_RULES: list[tuple[str, re.Pattern]] = [
    (
        COMMUNICATION,
        re.compile(
            r"nccl|c10d|gloo|all_?reduce|all_?gather|reduce_scatter|broadcast|alltoall|barrier"
            r"|record_param_comms",
            re.I,
        ),
    ),
    # DDP's reducer copying gradients into its buckets, scaling them, and back (torch 2.13's names)
    # CUDA runtime and driver calls on the host: launching work (their device side is the GPU table's)
    (
        HOST,
        re.compile(
            r"^(cuda|cu)(LaunchKernel|LaunchKernelEx|LaunchKernelExC|GraphLaunch|MemcpyAsync|MemsetAsync"
            r"|StreamWaitEvent|EventRecord|EventQuery|GetDevice|SetDevice|PointerGetAttributes|FuncGetAttributes"
            r"|ModuleGetFunction|OccupancyMaxActiveBlocksPerMultiprocessor\w*)$"
        ),
    ),
    (COPY, re.compile(r"^torch\.distributed\.ddp\.reducer::|^torch::distributed::reducer::")),
    (ATTENTION, re.compile(r"scaled_dot_product|flash|attention|fmha|_efficient_attention", re.I)),
    (
        MATMUL,
        re.compile(
            r"aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|mv|dot|einsum)$|gemm|cublas|cutlass|xmma"
            r"|sgemm|hgemm|wgmma|_mm_",
            re.I,
        ),
    ),
    (OPTIMIZER, re.compile(r"^Optimizer\.|_fused_adam|_foreach_|multi_tensor_apply", re.I)),
    (COPY, re.compile(r"aten::(copy_|_to_copy|to|contiguous|clone|_pin_memory|pin_memory)$|Memcpy|Memset|cudaMemcpy", re.I)),
    (
        ELEMENTWISE,
        re.compile(
            r"aten::(add|sub|mul|div|gelu|relu|silu|sigmoid|tanh|exp|log|pow|sqrt|rsqrt|neg|abs|clamp"
            r"|clamp_min|threshold|where|masked_fill|softmax|_softmax|log_softmax|_log_softmax|layer_norm"
            r"|native_layer_norm|rms_norm|_fused_rms_norm|dropout|native_dropout|mean|sum|var|cat|stack"
            r"|nll_loss|nll_loss_forward|cross_entropy_loss|embedding|embedding_dense_backward|index_select"
            r"|gather|scatter|cumsum|max|min|argmax|topk|fill_|zero_|lerp|addcmul|addcdiv|sign|norm"
            r"|linalg_vector_norm|erf|cos|sin|square|reciprocal|maximum|minimum|eq|ne|lt|gt|le|ge)(_|\w*backward\w*)?$"
            r"|elementwise|vectorized|reduce_kernel|softmax|layer_norm|norm_kernel|_backward_data",
            re.I,
        ),
    ),
]


# Ranges that only mark a region: their self time is the host's time between the ops they contain.
_ANNOTATION = re.compile(
    r"^(ProfilerStep|data$|forward$|backward$|optimizer$|sync$|between$|nanolm\."
    r"|autograd::engine::evaluate_function|DistributedDataParallel\."
    r"|enumerate\(DataLoader\)|Optimizer\.|## |Torch-Compiled Region|CompiledFunction)"
)


@lru_cache(maxsize=16384)
def categorize(name: str, context: str | None = None, in_sync: bool = False) -> str:
    """The category of an operator called `name`, run inside a phase/region named `context`
    (`in_sync`: inside a host-device sync call of the script's own code)."""
    if in_sync:
        return SYNC
    if context == "optimizer":
        return OPTIMIZER
    if context == "data":
        return DATA
    if context == "between":
        return BETWEEN
    for category, pattern in _RULES:
        if pattern.search(name):
            return category
    return OTHER


def is_annotation(name: str) -> bool:
    """True for record_function ranges and framework wrappers, whose self time is host overhead."""
    return bool(_ANNOTATION.match(name))


COPY_HTOD = "copy host→device"


COPY_DTOH = "copy device→host"


COPY_DTOD = "copy device→device, memset"


DEVICE_CLASSES = [MATMUL, ATTENTION, ELEMENTWISE, OPTIMIZER, COPY_HTOD, COPY_DTOH, COPY_DTOD, COMMUNICATION, OTHER]


COMPUTE_CLASSES = {MATMUL, ATTENTION}


MEMORY_CLASSES = {ELEMENTWISE, OPTIMIZER, COPY_DTOD}


TRANSFER_CLASSES = {COPY_HTOD, COPY_DTOH}


_NCCL = re.compile(r"^nccl|ncclDevKernel|ncclKernel")


_MATMUL_OP = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|_scaled_mm|_addmm_activation|_int_mm)$")


_MATMUL_PARENT = re.compile(r"^aten::(matmul|linear|einsum|tensordot)$")


_ATTENTION_OP = re.compile(
    r"^aten::(_scaled_dot_product_|scaled_dot_product_attention|_flash_attention_"
    r"|_efficient_attention_|_cudnn_attention_)"
)


_OPTIMIZER_OP = re.compile(r"^Optimizer\.step#|^aten::_fused_(adam|adamw|sgd|adagrad)|^aten::_foreach_(?!norm)")


KERNEL_RULES: list[tuple[str, re.Pattern]] = [
    # Inductor's kernels say what they are first (triton_{poi,red,per,spl}_... keep the fused ops' names after it,
    # "scaled_dot_product" among them): pointwise and reductions before any name inside them
    (ELEMENTWISE, re.compile(r"^triton_(poi|red|per|spl)_")),
    (ATTENTION, re.compile(r"sdpa|flash|fmha|FlashAttn|attention|flex_|_attn", re.I)),
    (
        MATMUL,
        re.compile(
            r"nvjet|xmma_gemm|gemm|cutlass|splitKreduce|gemv|dot_kernel|cublas|wgmma"
            r"|^triton_tem_.*mm|^triton_b?mm|_mm_|matmul",
            re.I,
        ),
    ),
    (ELEMENTWISE, re.compile(r"L2Norm", re.I)),  # clip_grad_norm_'s foreach norm: memory-bound, not the optimizer
    (OPTIMIZER, re.compile(r"multi_tensor_apply|^triton_for_|Adam|adam_", re.I)),
    (
        ELEMENTWISE,
        re.compile(
            r"^triton_(poi|red|per|spl)_|elementwise|reduce_kernel|reduce|norm|softmax|nll_loss"
            r"|index|embedding|CatArray|distribution|dropout|scatter|gather|fill|copy|cross_entropy"
            r"|gelu|silu|relu|arange|where|cumsum|sort|topk|unrolled|vectorized|Functor",
            re.I,
        ),
    ),
]


@lru_cache(maxsize=4096)
def classify_name(name: str, cat: str = "kernel") -> str:
    """The class of a device activity from its category and name alone (steps 1, 2 and 4)."""
    if cat == "gpu_memcpy":
        return COPY_HTOD if "HtoD" in name else COPY_DTOH if "DtoH" in name else COPY_DTOD
    if cat == "gpu_memset":
        return COPY_DTOD
    if _NCCL.search(name):
        return COMMUNICATION
    for cls, pattern in KERNEL_RULES:
        if pattern.search(name):
            return cls
    return OTHER


def _ops_outward(trace: Trace, k: Event) -> list[Event]:
    op = trace.op(k)
    return op.ancestors() if op is not None else []


def classify(trace: Trace, k: Event) -> str:
    """The class of device activity `k`, from its launching op first, then its name (module docstring)."""
    if k.cat != "kernel" or _NCCL.search(k.name):
        return classify_name(k.name, k.cat)
    return _by_op_then_name(tuple(o.name for o in _ops_outward(trace, k)), k.name, k.cat)


@lru_cache(maxsize=16384)
def _by_op_then_name(ops: tuple[str, ...], name: str, cat: str) -> str:
    """Steps 3 to 5 of the module docstring, from the launching op's name and its parents' (innermost first)."""
    if ops:
        if _MATMUL_OP.search(ops[0]):
            return MATMUL
        if any(_ATTENTION_OP.search(o) for o in ops):
            return ATTENTION  # the math fallback's bmm and softmax inside SDPA are attention
        if any(_OPTIMIZER_OP.search(o) for o in ops):
            return OPTIMIZER
    by_name = classify_name(name, cat)
    if by_name == OTHER and any(_MATMUL_OP.search(o) or _MATMUL_PARENT.search(o) for o in ops):
        return MATMUL
    return by_name


# What a C++ kernel does is in its template arguments: the functor, the ATen kernel or the std op it runs.
_WHAT = re.compile(
    r"std::(plus|minus|multiplies|divides)\b|\b([A-Za-z_]\w*(?:Functor|_functor|_kernel_cuda|_kernel_impl|"
    r"_kernel|_scalar))\b"
)


_WRAPPERS = {"BinaryFunctor", "BUnaryFunctor", "UnaryFunctor", "gpu_kernel_impl", "gpu_kernel_impl_nocast"}


def short_name(name: str, parts: int = 2) -> str:
    """A kernel's name without its C++ signature: the function's own name (no namespaces, no arguments) and, in
    angle brackets, up to `parts` names from its template arguments that say what it computes.
    ``void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float, float, float,
    at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, ...)`` is
    ``vectorized_elementwise_kernel<MulFunctor>``. Names that are not C++ signatures (Triton's, cuBLAS's
    ``nvjet_*``, "Memcpy HtoD (Pinned -> Device)") are returned as they are."""
    if not (name.startswith("void ") or "::" in name) or not re.search(r"[<(]", name):
        return name
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    cut = re.search(r"[<(]", text)
    function = text[: cut.start()].rsplit("::", 1)[-1].strip()
    args = _template_args(text[cut.start() :]) if text[cut.start()] == "<" else ""
    found: list[str] = []
    for m in _WHAT.finditer(args):
        what = m.group(1) or m.group(2)
        if what not in _WRAPPERS and what != function and what not in found:
            found.append(what)
    return f"{function}<{', '.join(found[:parts])}>" if found else function


def _template_args(text: str) -> str:
    """The text inside the angle brackets that open `text` (to their matching close)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0:
            return text[1:i]
    return text[1:]
