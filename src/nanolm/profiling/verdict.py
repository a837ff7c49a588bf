"""The verdict: which bottleneck, the numbers behind it, and the next fixes, cheapest first.

Rules, checked in this order (the first that holds is the bottleneck; later ones that also hold
are listed as lesser findings):
1. input-bound: the data phase takes >= 30% of the step.
2. host-sync-bound: the loop syncs with the device at least once per step (on a GPU: and the
   syncs block a measurable share; on a CPU they cost nothing, and are reported as what would be
   a sync on a GPU).
3. launch/overhead-bound: many operators (>= 300 per step) and the host's own time (Python between
   ops, plus operators whose calls average under 20 us, i.e. dispatch rather than work) is >= 50%
   of the step; on a GPU, also when the device is idle >= 40% of the step.
4. memory-bound: elementwise and normalization kernels outweigh matmul and attention and take >= 40%.
5. compute-bound: otherwise (matmul and attention lead); MFU says how far from the peak it runs.

The fixes follow the device the steps ran on (DeviceFacts): bf16 autocast only where bf16 is faster
than float32 there (a CUDA GPU that supports bf16; elsewhere the measured matmul peaks of both dtypes,
measured once per process), pin_memory only with a GPU, and num_workers no more than the CPU cores this
process may use, less one for the training loop (at most 8).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .analysis import Bottleneck, CategoryRow, PhaseRow, Verdict
from .categories import ATTENTION, ELEMENTWISE, HOST, MATMUL, SYNC
from .syncs import SyncSite

FIX_ORDER = ["remove syncs", "data loader", "bf16 autocast", "torch.compile", "larger batch"]
MAX_WORKERS = 8


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class DeviceFacts:
    """What the advice depends on, from the device that ran the steps."""

    type: str = "cpu"  # "cpu", "cuda", "mps"
    cores: int = 1
    bf16_faster: bool | None = None  # None: measure when a bf16 fix is first considered
    bf16_evidence: str = ""

    @classmethod
    def here(cls, device_type: str) -> DeviceFacts:
        return cls(device_type, usable_cores())

    @property
    def gpu(self) -> bool:
        return self.type == "cuda"

    def bf16_helps(self) -> bool:
        if self.bf16_faster is None:
            from .mfu import bf16_vs_float32

            self.bf16_faster, self.bf16_evidence = bf16_vs_float32(self.type)
        return self.bf16_faster

    def workers(self) -> tuple[int, int]:
        """The num_workers range worth trying: 2 (or fewer) up to the cores less one, at most MAX_WORKERS."""
        high = max(1, min(MAX_WORKERS, self.cores - 1))
        return min(2, high), high


def _share(categories: list[CategoryRow], *names: str) -> float:
    return sum(r.share for r in categories if r.category in names)


def _phase(phases: list[PhaseRow], name: str) -> PhaseRow | None:
    return next((p for p in phases if p.phase == name), None)


def fixes_for(kinds: list[str], settings: dict, facts: DeviceFacts) -> tuple[list[str], list[str]]:
    """The fixes named in kinds, in the fixed cheapest-first order, without those already in place; and
    the fixes left out because this device would not gain from them (with the measurement)."""
    low, high = facts.workers()
    workers = f"num_workers={low}..{high}" if low < high else f"num_workers={high}"
    text = {
        "remove syncs": "remove the per-step syncs: keep the loss on the device (loss.detach()) and read it every N steps",
        "data loader": (f"load data in parallel: DataLoader({workers}"
                        + (", pin_memory=True" if facts.gpu and not settings.get("pin_memory") else "")
                        + f"; {facts.cores} CPU core{'s' if facts.cores != 1 else ''} here), and move heavy "
                        "per-item work out of __getitem__ (precompute or cache it)"),
        "bf16 autocast": "run forward and backward under torch.autocast(dtype=torch.bfloat16)",
        "torch.compile": "torch.compile the model, which fuses small elementwise ops into fewer kernels",
        "larger batch": "use a larger batch (or fewer, larger ops) so each launch does more work",
    }
    in_place = {
        "data loader": bool(settings.get("num_workers")) and (not facts.gpu or bool(settings.get("pin_memory"))),
        "bf16 autocast": bool(settings.get("autocast")),
        "torch.compile": bool(settings.get("compile")),
    }
    wanted = [k for k in FIX_ORDER if k in kinds and not in_place.get(k, False)]
    left_out = []
    if "bf16 autocast" in wanted and not facts.bf16_helps():
        wanted.remove("bf16 autocast")
        left_out.append(f"bf16 autocast: it would be slower here ({facts.bf16_evidence})")
    return [text[k] for k in wanted], left_out


def decide(phases: list[PhaseRow], categories: list[CategoryRow], syncs: list[SyncSite], ops_per_step: float,
           tiny_op_share: float, step_ms: float, device_busy: float | None, settings: dict,
           facts: DeviceFacts | None = None) -> Verdict:
    on_gpu = device_busy is not None
    facts = facts or DeviceFacts.here("cuda" if on_gpu else "cpu")
    data = _phase(phases, "data")
    data_share = data.share if data else 0.0
    syncs_per_step = sum(s.per_step for s in syncs)
    compute = _share(categories, MATMUL, ATTENTION)
    elementwise = _share(categories, ELEMENTWISE)
    host = _share(categories, HOST)
    sync_blocked = _share(categories, SYNC)
    overhead = host + tiny_op_share
    idle = on_gpu and device_busy is not None and device_busy < 0.6

    findings: list[tuple[Bottleneck, str, list[str], list[str]]] = []
    if data_share >= 0.3:
        findings.append((Bottleneck.INPUT,
                         f"the step waits for data: loading takes {data_share:.0%} of each step",
                         [f"data phase {data.ms.median:.1f} ms of a {step_ms:.1f} ms step ({data_share:.0%})",
                          f"DataLoader num_workers={settings.get('num_workers', 'unknown')}"],
                         ["data loader", "larger batch"]))
    if syncs_per_step >= 1:
        cost = (f"syncs block {sync_blocked:.0%} of the step" if on_gpu
                else "on this CPU they cost nothing, but each would be a sync on a GPU: the host waits for the queue to drain")
        findings.append((Bottleneck.HOST_SYNC,
                         f"the loop makes the host wait for the device {syncs_per_step:.0f} time(s) per step",
                         [f"{s.kind} at {s.location} ({s.per_step:.1f}/step): {s.code}" for s in syncs[:3]]
                         + [cost], ["remove syncs"]))
    if (ops_per_step >= 300 and overhead >= 0.5) or idle:
        evidence = [f"{ops_per_step:.0f} operators per step; calls shorter than 20 us and Python between ops take "
                    f"{overhead:.0%} of the time", f"matmul + attention only {compute:.0%}"]
        if on_gpu:
            evidence.append(f"the GPU is busy {device_busy:.0%} of the step and idle the rest")
        findings.append((Bottleneck.LAUNCH_OVERHEAD,
                         "the step is many small operations: per-op overhead, not math, takes the time",
                         evidence, ["torch.compile", "larger batch"]))
    if elementwise >= 0.4 and elementwise > compute:
        findings.append((Bottleneck.MEMORY,
                         "small memory-bound kernels (elementwise, normalization) take more time than the matmuls",
                         [f"elementwise & normalization {elementwise:.0%} vs matmul + attention {compute:.0%}"],
                         ["bf16 autocast", "torch.compile"]))
    findings.append((Bottleneck.COMPUTE,
                     "the hardware is computing: matmuls and attention take most of the step",
                     [f"matmul + attention {compute:.0%} of the step's self time, elementwise {elementwise:.0%}, "
                      f"host overhead {host:.0%}"],
                     ["bf16 autocast", "torch.compile", "larger batch"]))
    bottleneck, headline, evidence, kinds = findings[0]
    if syncs_per_step >= 1 and "remove syncs" not in kinds:
        kinds = ["remove syncs", *kinds]
    also = [f"{name.value}: {line}" for name, line, _, _ in findings[1:-1]]
    fixes, left_out = fixes_for(kinds, settings, facts)
    return Verdict(bottleneck, headline, evidence, fixes, also, left_out)
