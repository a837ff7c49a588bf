"""Interpretability: a common view of nanolm and Hugging Face models, the logit and tuned lenses,
and linear probes with controls and interventions.

Names load on first use, so importing the package (as the CLI does) costs no torch."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "Activations": "activations",
    "TokenActivations": "activations",
    "collect": "activations",
    "iter_token_activations": "activations",
    "token_activations": "activations",
    "InterventionResult": "probes",
    "Verdict": "probes",
    "intervene": "interventions",
    "LensResult": "lens",
    "LensSummary": "lens",
    "lens_summary": "lens",
    "logit_lens": "lens",
    "LabelledSet": "probes",
    "ProbeResult": "probes",
    "feature_dataset": "probes",
    "probe": "probes",
    "TunedLens": "tuned_lens",
    "evaluate_lenses": "tuned_lens",
    "train_tuned_lens": "tuned_lens",
    "ModelView": "view",
    "edit_activation": "view",
    "load_view": "view",
    "run_with_cache": "view",
    "view_of": "view",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
