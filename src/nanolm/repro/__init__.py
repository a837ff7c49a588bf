"""Reproducibility: seeding, determinism, seed noise and noise-aware comparisons.

Names load on first use, so ``python -m nanolm.repro.bisect`` (run once per commit by
``git bisect``) does not pay for importing torch."""

from __future__ import annotations

from typing import Any

__all__ = ["seed_everything", "seed_worker"]


def __getattr__(name: str) -> Any:
    if name in __all__:  # seeding is core (training needs it); repro re-exports it where users look for it
        from .. import seeding

        return getattr(seeding, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
