"""Sparse autoencoders: train on a model's activations, evaluate with exactly defined metrics, splice into
the model, read features, and measure them against the corpus's ground-truth labels.

    from nanolm.interp.sae import train_sae, evaluate_sae, load_sae, spliced

Names load on first use."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "SAEConfig": "model",
    "SparseAutoencoder": "model",
    "load_sae": "model",
    "spliced": "model",
    "ActivationStore": "store",
    "store_from_tensor": "store",
    "TrainSettings": "train",
    "TrainResult": "train",
    "fit_sae": "train",
    "geometric_median": "train",
    "train_sae": "pipeline",
    "texts_for": "pipeline",
    "load_sae_for": "pipeline",
    "check_same_model": "pipeline",
    "SAEEval": "metrics",
    "evaluate_sae": "metrics",
    "fvu": "metrics",
    "l0": "metrics",
    "ce_recovered": "metrics",
    "density_figure": "metrics",
    "SweepResult": "sweep",
    "sweep_sae": "sweep",
    "sweep_figure": "sweep",
    "MonoResult": "mono",
    "MonoRow": "mono",
    "monosemanticity": "mono",
    "mono_figure": "mono",
    "read_features": "features",
    "FeatureReport": "features",
    "Feature": "features",
    "direct_effect": "features",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
