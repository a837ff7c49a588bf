"""Reproducibility: seeding, determinism, seed noise and noise-aware comparisons."""

from .seed import seed_everything, seed_worker

__all__ = ["seed_everything", "seed_worker"]
