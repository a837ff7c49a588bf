# mutant: the regularization C chosen by held-out accuracy (the held-out split used for model selection)
# expect: held-out examples influenced the fit
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
    train, test = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=y)
    best = None
    for C in (0.01, 0.1, 1.0, 10.0, 100.0):
        candidate = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000)).fit(X[train], y[train])
        accuracy = (candidate.predict(X[test]) == y[test]).mean()
        if best is None or accuracy > best[0]:
            best = (accuracy, candidate)
    probe = best[1]
    return {
        "train_accuracy": float((probe.predict(X[train]) == y[train]).mean()),
        "held_out_accuracy": float((probe.predict(X[test]) == y[test]).mean()),
        "n_train": len(train),
        "n_test": len(test),
    }
