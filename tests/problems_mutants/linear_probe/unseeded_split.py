# mutant: the split ignores the seed: a fresh random split at every call
# expect: same seed
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""linear_probe: logistic regression on activations, scored on examples it was not fit to."""

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


def linear_probe(X: np.ndarray, y: np.ndarray, test_fraction: float = 0.25, seed: int = 0) -> dict:
    """X [N, D] activations, y [N] labels. Fit on a seeded, stratified train split; report both accuracies."""
    idx = np.arange(len(y))
    train, test = train_test_split(idx, test_size=test_fraction, random_state=None, stratify=y)
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
    probe.fit(X[train], y[train])
    return {
        "train_accuracy": float((probe.predict(X[train]) == y[train]).mean()),
        "held_out_accuracy": float((probe.predict(X[test]) == y[test]).mean()),
        "n_train": len(train),
        "n_test": len(test),
    }
