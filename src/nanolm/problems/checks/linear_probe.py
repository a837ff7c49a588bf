"""linear_probe: held-out accuracy of a logistic-regression probe, on data with a known answer."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np

from . import Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)

_KEYS = ("train_accuracy", "held_out_accuracy", "n_train", "n_test")


def _report(mod: ModuleType, X: np.ndarray, y: np.ndarray, test_fraction: float, seed: int) -> dict:
    out = mod.linear_probe(X.copy(), y.copy(), test_fraction=test_fraction, seed=seed)
    require(isinstance(out, dict), f"linear_probe returned {type(out).__name__}; return a dict with keys {', '.join(_KEYS)}")
    missing = [k for k in _KEYS if k not in out]
    require(not missing, f"the returned dict has no {', '.join(missing)}")
    return out


def separable(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Activations with a linear feature: y = [x·w > 0], a margin around the boundary."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(200, 400)), int(rng.integers(8, 40))
    w = rng.normal(size=d)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d)
    s = X @ w
    keep = np.abs(s) > 0.2 * s.std()
    return X[keep], (s[keep] > 0).astype(int)


def random_labels(seed: int, n: int = 60, d: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """The reference document's trap: 60 examples in 64 dimensions, labels at random (balanced)."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 2)
    return rng.normal(size=(n, d)), y


@_check
def check_split_sizes(mod: ModuleType, seed: int) -> None:
    """n_train + n_test is every example, n_test is the asked fraction, accuracy counts whole examples."""
    rng = np.random.default_rng(seed)
    X, y = separable(seed)
    frac = float(rng.choice([0.2, 0.25, 0.3, 0.4]))
    out = _report(mod, X, y, frac, seed)
    n_train, n_test = int(out["n_train"]), int(out["n_test"])
    require(n_train + n_test == len(y), f"n_train + n_test = {n_train + n_test}, but there are {len(y)} examples")
    require(abs(n_test - frac * len(y)) <= 1, f"with test_fraction={frac} of {len(y)} examples, n_test is {n_test}")
    k = float(out["held_out_accuracy"]) * n_test
    require(abs(k - round(k)) < 1e-6, f"held-out accuracy {out['held_out_accuracy']} is not a count of the {n_test} "
                                      "held-out examples")


@_check
def check_learns_signal(mod: ModuleType, seed: int) -> None:
    """On activations with a linear feature, held-out accuracy is high."""
    for s in range(3):
        X, y = separable(seed * 10 + s)
        acc = float(_report(mod, X, y, 0.25, seed)["held_out_accuracy"])
        require(acc >= 0.9, f"on {len(y)} examples whose label is a linear function of the activations "
                            f"({X.shape[1]} dimensions), held-out accuracy is {acc:.2f}")


@_check
def check_held_out(mod: ModuleType, seed: int) -> None:
    """On random labels (60 examples, 64 dimensions) held-out accuracy is at chance, ≈ 0.5."""
    accs = [float(_report(mod, *random_labels(seed * 10 + s), 0.25, seed + s)["held_out_accuracy"]) for s in range(8)]
    mean = float(np.mean(accs))
    require(0.3 <= mean <= 0.7, f"on 60 examples in 64 dimensions with random labels, your held-out accuracy averages "
                                f"{mean:.2f} over 8 draws; nothing can be learned there, so examples the probe never saw "
                                "are at chance (≈ 0.5), while the examples it was fit to are all right")


@_check
def check_train_accuracy(mod: ModuleType, seed: int) -> None:
    """train_accuracy is measured on the train split (random labels in 64 dimensions: ≈ 1.0)."""
    X, y = random_labels(seed)
    out = _report(mod, X, y, 0.25, seed)
    train = float(out["train_accuracy"])
    require(train >= 0.9, f"on 60 examples in 64 dimensions with random labels, train accuracy is {train:.2f}; "
                          "45 points in 64 dimensions can always be split by a hyperplane")


@_check
def check_seeded(mod: ModuleType, seed: int) -> None:
    """The same seed gives the same result; other seeds split differently."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 5))
    y = (X[:, 0] + rng.normal(scale=1.0, size=120) > 0).astype(int)
    a, b = _report(mod, X, y, 0.25, seed), _report(mod, X, y, 0.25, seed)
    require(math.isclose(float(a["held_out_accuracy"]), float(b["held_out_accuracy"])),
            f"the same seed gave held-out accuracies {a['held_out_accuracy']} and {b['held_out_accuracy']}")
    others = {round(float(_report(mod, X, y, 0.25, seed + s)["held_out_accuracy"]), 6) for s in range(1, 9)}
    require(len(others) > 1, "eight different seeds gave the same held-out accuracy on noisy labels: "
                             "the seed does not change which examples are held out")
