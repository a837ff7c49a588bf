"""Interpretability: a common view of nanolm and Hugging Face models, the logit and tuned lenses,
and linear probes with controls and interventions."""

from .lens import LensResult, logit_lens
from .tuned_lens import TunedLens, evaluate_lenses, train_tuned_lens
from .view import ModelView, load_view, view_of

__all__ = ["LensResult", "ModelView", "TunedLens", "evaluate_lenses", "load_view", "logit_lens", "train_tuned_lens",
           "view_of"]
