"""linear_probe: logistic regression on activations, scored on examples it was not fit to.

Read instructions.md, then fill in the function. Check with: nanolm problems check linear_probe
"""

import numpy as np


def linear_probe(X: np.ndarray, y: np.ndarray, test_fraction: float = 0.25, seed: int = 0) -> dict:
    """X [N, D] activations, y [N] labels (0 or 1).
    Returns {"train_accuracy", "held_out_accuracy", "n_train", "n_test"}."""
    raise NotImplementedError("linear_probe")
