"""Interpretability: a common view of nanolm and Hugging Face models, the logit and tuned lenses,
and linear probes with controls and interventions."""

from .intervene import InterventionResult, intervene
from .lens import LensResult, LensSummary, lens_summary, logit_lens
from .probe import LabelledSet, ProbeResult, feature_dataset, probe
from .tuned_lens import TunedLens, evaluate_lenses, train_tuned_lens
from .view import ModelView, edit_activation, load_view, run_with_cache, view_of

__all__ = ["InterventionResult", "LabelledSet", "LensResult", "LensSummary", "ModelView", "ProbeResult", "TunedLens",
           "edit_activation", "evaluate_lenses", "feature_dataset", "intervene", "lens_summary", "load_view",
           "logit_lens", "probe", "run_with_cache", "train_tuned_lens", "view_of"]
