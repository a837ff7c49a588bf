"""The C allocator's policy for a training process: keep freed memory for the next step (Linux, glibc).

A training step on a CPU allocates and frees the same large activations every step ([B, T, 4D] floats:
25 MB each at the small preset). glibc's malloc serves requests above its mmap threshold with fresh
mmap'd pages and, when freed memory at the top of the heap exceeds its trim threshold, hands it back to
the kernel; either way the next step's tensors are fresh pages, and the kernel zeroes each 4 KiB page at
its first touch. Measured at the small preset: 10,000-35,000 page faults a step with glibc's defaults,
1,000-4,000 with this policy, and 4-8% less time a step (bench/train_throughput.py --reuse-freed-memory).

The policy: serve requests up to glibc's largest mmap threshold (32 MiB on 64-bit) from the heap, and
keep up to 2 GiB of freed heap memory instead of returning it. Both thresholds have to be set: a fixed
trim threshold alone switches off glibc's adaptive mmap threshold and sends every large request to mmap.
The process's peak memory is unchanged (a step's tensors were going to be allocated again); what it
returns to the kernel between steps is not. PyTorch's CPU tuning guides reach the same end by preloading
jemalloc or tcmalloc; this needs nothing installed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's largest accepted value on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD_BYTES = 2**31 - 1  # mallopt takes an int


@functools.cache
def reuse_freed_memory() -> bool:
    """Set the policy above for this process, once; True where it was set (Linux with glibc), else False
    (macOS, Windows, musl: their allocators are left alone). Changes no computed number."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # no C library by that name, or one without mallopt (musl)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # Order matters only in that both are set: each call returns 1 on success.
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
