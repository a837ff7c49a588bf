"""Operator categories: what kind of work an operator (or a GPU kernel) is.

An operator's category comes first from where it ran (inside a host-device sync, inside the optimizer
step, inside the DataLoader's ``__next__`` or a ``data`` phase, between one optimizer step and the next
forward), then from its name.

A host-device sync has one definition, shared by this table and the list of sync call sites
(nanolm.profiling.syncs): a call from the script's own code that makes the host wait for the device
(``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, printing or formatting a tensor, a tensor used as a
bool/float/int, ``torch.cuda.synchronize()``). SyncWatch marks each such call with a ``sync`` range while it
records; the category "host-device sync" is the self time inside those ranges, and its calls are the
ranges (the sync calls), not the operators they ran. Torch's own reads of its CPU-side values (AdamW's
step counter ``.item()``) are not syncs, so an operator's name alone never makes it one.

Communication: torch.distributed's collectives, as the profiler names them (``c10d::allreduce_``, gloo's
``gloo:all_reduce``, NCCL's ``nccl:all_reduce`` and ``ncclDevKernel_*`` kernels, ``record_param_comms``). The
main thread's waits for them are no operator; nanolm.profiling.comm finds them and moves them from host
overhead into this category."""

from __future__ import annotations

import re
from functools import lru_cache

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
    (COMMUNICATION, re.compile(r"nccl|c10d|gloo|all_?reduce|all_?gather|reduce_scatter|broadcast|alltoall|barrier"
                               r"|record_param_comms", re.I)),
    # DDP's reducer copying gradients into its buckets, scaling them, and back (torch 2.13's names)
    # CUDA runtime and driver calls on the host: launching work (their device side is the GPU table's)
    (HOST, re.compile(r"^(cuda|cu)(LaunchKernel|LaunchKernelEx|LaunchKernelExC|GraphLaunch|MemcpyAsync|MemsetAsync"
                      r"|StreamWaitEvent|EventRecord|EventQuery|GetDevice|SetDevice|PointerGetAttributes|FuncGetAttributes"
                      r"|ModuleGetFunction|OccupancyMaxActiveBlocksPerMultiprocessor\w*)$")),
    (COPY, re.compile(r"^torch\.distributed\.ddp\.reducer::|^torch::distributed::reducer::")),
    (ATTENTION, re.compile(r"scaled_dot_product|flash|attention|fmha|_efficient_attention", re.I)),
    (MATMUL, re.compile(r"aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|mv|dot|einsum)$|gemm|cublas|cutlass|xmma"
                        r"|sgemm|hgemm|wgmma|_mm_", re.I)),
    (OPTIMIZER, re.compile(r"^Optimizer\.|_fused_adam|_foreach_|multi_tensor_apply", re.I)),
    (COPY, re.compile(r"aten::(copy_|_to_copy|to|contiguous|clone|_pin_memory|pin_memory)$|Memcpy|Memset|cudaMemcpy", re.I)),
    (ELEMENTWISE, re.compile(r"aten::(add|sub|mul|div|gelu|relu|silu|sigmoid|tanh|exp|log|pow|sqrt|rsqrt|neg|abs|clamp"
                             r"|clamp_min|threshold|where|masked_fill|softmax|_softmax|log_softmax|_log_softmax|layer_norm"
                             r"|native_layer_norm|rms_norm|_fused_rms_norm|dropout|native_dropout|mean|sum|var|cat|stack"
                             r"|nll_loss|nll_loss_forward|cross_entropy_loss|embedding|embedding_dense_backward|index_select"
                             r"|gather|scatter|cumsum|max|min|argmax|topk|fill_|zero_|lerp|addcmul|addcdiv|sign|norm"
                             r"|linalg_vector_norm|erf|cos|sin|square|reciprocal|maximum|minimum|eq|ne|lt|gt|le|ge)(_|\w*backward\w*)?$"
                             r"|elementwise|vectorized|reduce_kernel|softmax|layer_norm|norm_kernel|_backward_data", re.I)),
]

# Ranges that only mark a region: their self time is the host's time between the ops they contain.
_ANNOTATION = re.compile(r"^(ProfilerStep|data$|forward$|backward$|optimizer$|sync$|between$|nanolm\."
                         r"|autograd::engine::evaluate_function|DistributedDataParallel\."
                         r"|enumerate\(DataLoader\)|Optimizer\.|## |Torch-Compiled Region|CompiledFunction)")


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
