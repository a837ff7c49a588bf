"""Find host-device syncs by their call sites.

While active, SyncWatch wraps the tensor methods that make the host wait for the device
(``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, printing or formatting a tensor, using a tensor
as a Python bool/float/int) and ``torch.cuda.synchronize``, and records the first caller outside
torch and outside this package: file, line, and the source text. The same calls are found on a CPU,
where they cost nothing, and reported there as what would be a sync on a GPU.

This is nanolm's one definition of a host-device sync: each recorded call also runs inside a
``sync`` profiler range, so the operator table's "host-device sync" category (categories.py) is the
time inside exactly these calls, and its calls per step are these calls."""

from __future__ import annotations

import linecache
import os
import sys
import threading
from collections import Counter

import torch
from torch.profiler import record_function

from ..report import SyncSite

# Tensor method -> how the report names it.
WATCHED = {
    "item": ".item()",
    "tolist": ".tolist()",
    "cpu": ".cpu()",
    "numpy": ".numpy()",
    "__repr__": "printing a tensor",
    "__str__": "printing a tensor",
    "__format__": "formatting a tensor",
    "__bool__": "a tensor used as a bool",
    "__float__": "float(tensor)",
    "__int__": "int(tensor)",
}


_TORCH_DIR = os.path.dirname(torch.__file__)


_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def _display_path(path: str) -> str:
    """Relative to the working directory when the file is under it, else as it is."""
    if path.startswith("<"):
        return path
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _caller() -> tuple[str, str, str] | None:
    """(file:line, function, source) of the first frame outside torch and outside nanolm.profiling,
    or None when torch itself made the call (AdamW reads its CPU step counters with .item(): that is
    torch's business, not a sync the user wrote)."""
    frame = sys._getframe(2)
    if frame.f_code.co_filename.startswith(_TORCH_DIR):
        return None
    while frame is not None:
        path = frame.f_code.co_filename
        if not (path.startswith(_TORCH_DIR) or path.startswith(_OWN_DIR) or path.startswith("<frozen")):
            return (
                f"{_display_path(path)}:{frame.f_lineno}",
                frame.f_code.co_name,
                linecache.getline(path, frame.f_lineno).strip(),
            )
        frame = frame.f_back
    return None


class SyncWatch:
    """Records sync call sites while `recording` is True; install() / uninstall() wrap and restore."""

    def __init__(self) -> None:
        self.recording = False
        self.counts: Counter[tuple[str, str, str, str]] = Counter()
        self._originals: dict[tuple[object, str], object] = {}
        self._local = threading.local()

    def _wrap(self, owner: object, name: str, kind: str) -> None:
        original = getattr(owner, name)
        watch = self

        def wrapper(*args, **kwargs):
            depth = getattr(watch._local, "depth", 0)
            site = None
            if watch.recording and depth == 0:  # printing calls .item() inside: count the outer call only
                site = _caller()
                if site is not None:
                    watch.counts[(kind, *site)] += 1
            watch._local.depth = depth + 1
            try:
                if site is None:
                    return original(*args, **kwargs)
                with record_function("sync"):  # the operator table's "host-device sync" is the time in here
                    return original(*args, **kwargs)
            finally:
                watch._local.depth = depth

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        self._originals[(owner, name)] = original
        setattr(owner, name, wrapper)

    def install(self) -> SyncWatch:
        for name, kind in WATCHED.items():
            self._wrap(torch.Tensor, name, kind)
        self._wrap(torch.cuda, "synchronize", "torch.cuda.synchronize()")
        return self

    def uninstall(self) -> None:
        for (owner, name), original in self._originals.items():
            setattr(owner, name, original)
        self._originals.clear()

    def sites(self, steps: int) -> list[SyncSite]:
        """Recorded sites, most frequent first; per_step over `steps` measured steps."""
        return [SyncSite(kind, loc, fn, code, n, n / max(steps, 1)) for (kind, loc, fn, code), n in self.counts.most_common()]
