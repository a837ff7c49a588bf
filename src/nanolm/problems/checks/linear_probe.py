"""linear_probe: held-out accuracy of a logistic-regression probe, on data with a known answer.

The later checks find out which examples the learner's split holds out (``held_out_rows``: on data one
feature separates with a wide margin, moving a single example across the boundary costs held-out
accuracy exactly when that example is held out), then check that the split is stratified, that the
held-out examples never influence the fit (changing only their activations leaves train accuracy as it
was), and that over many random-label draws mean held-out accuracy stays at chance within its interval."""

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
    for s in range(3):
        X, y = separable(seed * 10 + s)
        frac = float(rng.choice([0.2, 0.25, 0.3, 0.4]))
        out = _report(mod, X, y, frac, seed + s)
        n_train, n_test = int(out["n_train"]), int(out["n_test"])
        require(n_train + n_test == len(y), f"n_train + n_test = {n_train + n_test}, but there are {len(y)} examples")
        require(abs(n_test - frac * len(y)) <= 1, f"with test_fraction={frac} of {len(y)} examples, n_test is {n_test}")
        k = float(out["held_out_accuracy"]) * n_test
        require(
            abs(k - round(k)) < 1e-6,
            f"held-out accuracy {out['held_out_accuracy']} times the {n_test} held-out "
            f"examples is {k:.3f}, which is not a count of examples: accuracy must count "
            "whole examples, each right or wrong",
        )


@_check
def check_learns_signal(mod: ModuleType, seed: int) -> None:
    """On activations with a linear feature, held-out accuracy is high."""
    for s in range(3):
        X, y = separable(seed * 10 + s)
        acc = float(_report(mod, X, y, 0.25, seed)["held_out_accuracy"])
        require(
            acc >= 0.9,
            f"on {len(y)} examples whose label is a linear function of the activations "
            f"({X.shape[1]} dimensions), held-out accuracy is {acc:.2f}",
        )


@_check
def check_held_out(mod: ModuleType, seed: int) -> None:
    """On random labels (60 examples, 64 dimensions) held-out accuracy is at chance, ≈ 0.5."""
    accs = [float(_report(mod, *random_labels(seed * 10 + s), 0.25, seed + s)["held_out_accuracy"]) for s in range(8)]
    mean = float(np.mean(accs))
    require(
        0.3 <= mean <= 0.7,
        f"on 60 examples in 64 dimensions with random labels, your held-out accuracy averages "
        f"{mean:.2f} over 8 draws; nothing can be learned there, so examples the probe never saw "
        "are at chance (≈ 0.5), while the examples it was fit to are all right",
    )


@_check
def check_train_accuracy(mod: ModuleType, seed: int) -> None:
    """train_accuracy is measured on the train split (random labels in 64 dimensions: ≈ 1.0)."""
    X, y = random_labels(seed)
    out = _report(mod, X, y, 0.25, seed)
    train = float(out["train_accuracy"])
    require(
        train >= 0.9,
        f"on 60 examples in 64 dimensions with random labels, train accuracy is {train:.2f}; "
        "45 points in 64 dimensions can always be split by a hyperplane",
    )


@_check
def check_seeded(mod: ModuleType, seed: int) -> None:
    """The same seed gives the same result; other seeds split differently."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 5))
    y = (X[:, 0] + rng.normal(scale=1.0, size=120) > 0).astype(int)
    a = _report(mod, X, y, 0.25, seed)
    for _ in range(3):  # three times: two unseeded splits can score alike by chance
        b = _report(mod, X, y, 0.25, seed)
        for key in ("held_out_accuracy", "train_accuracy"):
            require(
                math.isclose(float(a[key]), float(b[key])),
                f"the same seed gave {key.replace('_', ' ')} {float(a[key]):.4f} and then {float(b[key]):.4f}",
            )
    others = {round(float(_report(mod, X, y, 0.25, seed + s)["held_out_accuracy"]), 6) for s in range(1, 9)}
    require(
        len(others) > 1,
        "eight different seeds gave the same held-out accuracy on noisy labels: "
        "the seed does not change which examples are held out",
    )


def _labels(rng: np.random.Generator, n: int, positives: int) -> np.ndarray:
    return rng.permutation(np.arange(n) < positives).astype(int)


def held_out_rows(mod: ModuleType, y: np.ndarray, test_fraction: float, seed: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Which of `rows` (default: all) the learner's split holds out for these labels and seed: on data whose
    one feature gives the label with a wide margin, example i moved across the boundary is missed on the
    held-out part exactly when it is held out (the split may depend on the labels, not on the activations)."""
    rng = np.random.default_rng(seed + 7)
    X = ((2 * y - 1) * 6.0 + rng.normal(scale=0.3, size=len(y)))[:, None]  # one feature: nothing else to fit
    base = _report(mod, X, y, test_fraction, seed)
    require(
        float(base["held_out_accuracy"]) == 1.0,
        f"on {len(y)} examples whose one feature gives the label with a wide margin, held-out accuracy is "
        f"{float(base['held_out_accuracy']):.2f}, not 1.0",
    )
    rows = np.arange(len(y)) if rows is None else rows
    held = np.zeros(len(rows), dtype=bool)
    for j, i in enumerate(rows):
        moved = X.copy()
        moved[i, 0] = -moved[i, 0]
        held[j] = float(_report(mod, moved, y, test_fraction, seed)["held_out_accuracy"]) < 1.0
    return held


@_check
def check_stratified(mod: ModuleType, seed: int) -> None:
    """The split is stratified: the held-out part keeps each class's share."""
    rng = np.random.default_rng(seed + 11)
    n, frac = 40, 0.25
    for trial, positives in enumerate(rng.permutation([8, 12, 16, 8, 12, 16])):  # frac · positives: whole numbers
        y = _labels(rng, n, int(positives))
        held = int(held_out_rows(mod, y, frac, seed + trial, np.flatnonzero(y == 1)).sum())
        want = round(frac * positives)
        require(
            held == want,
            f"with {positives} of {n} examples in class 1 and test_fraction={frac}, the held-out part "
            f"holds {held} of them where a stratified split holds {want}: the split is not stratified "
            "by label",
        )


def _noisy(seed: int, y: np.ndarray) -> np.ndarray:
    """20 dimensions, a weak signal in the first: train accuracy depends on every detail of the fit."""
    rng = np.random.default_rng(seed + 13)
    X = rng.normal(size=(len(y), 20))
    X[:, 0] += 0.8 * (2 * y - 1)
    return X


@_check
def check_held_out_unseen(mod: ModuleType, seed: int) -> None:
    """The held-out examples never influence the fit: changing only their activations leaves train accuracy."""
    rng = np.random.default_rng(seed + 17)
    n, frac = 40, 0.25
    y = _labels(rng, n, 20)
    held = held_out_rows(mod, y, frac, seed)
    require(
        int(held.sum()) == round(frac * n) or abs(int(held.sum()) - frac * n) <= 1,
        f"moving one example at a time across the boundary, {int(held.sum())} examples turned out held out where "
        f"n_test is about {frac * n:g}: the split changes with the activations, not only with the seed and labels",
    )
    X = _noisy(seed, y)
    base, again = _report(mod, X, y, frac, seed), _report(mod, X, y, frac, seed)
    require(
        math.isclose(float(base["train_accuracy"]), float(again["train_accuracy"]), abs_tol=1e-12),
        f"two calls on the same examples with the same seed gave train accuracy {float(base['train_accuracy']):.3f} "
        f"and {float(again['train_accuracy']):.3f}: the fit is not determined by the data and the seed",
    )
    k = int(held.sum())
    changes = (
        ("multiplied by 1000", lambda h: h * 1000.0),
        ("shifted by 50", lambda h: h + 50.0),
        ("replaced by noise", lambda h: rng.normal(size=h.shape)),
        ("negated", lambda h: -h),
    )
    for what, change in changes:
        moved = X.copy()
        moved[held] = change(moved[held])
        out = _report(mod, moved, y, frac, seed)
        before, after = float(base["train_accuracy"]), float(out["train_accuracy"])
        require(
            math.isclose(before, after, abs_tol=1e-12),
            f"with the {k} held-out examples' activations {what} (and nothing else changed), train accuracy went from "
            f"{before:.3f} to {after:.3f}: the held-out examples influenced the fit",
        )


N_DRAWS = 100
Z_LIMIT = 3.3  # one-sided, ≈ 1 honest probe in 2000 fails by chance


@_check
def check_chance_interval(mod: ModuleType, seed: int) -> None:
    """Over 100 random-label draws, mean held-out accuracy is at chance within its 99.95% interval."""
    rng = np.random.default_rng(seed + 19)
    accs = []
    for s in range(N_DRAWS):
        y = _labels(rng, 80, 40)
        accs.append(float(_report(mod, rng.normal(size=(80, 10)), y, 0.5, seed + s)["held_out_accuracy"]))
    mean, se = float(np.mean(accs)), float(np.std(accs, ddof=1)) / math.sqrt(N_DRAWS)
    z = (mean - 0.5) / max(se, 1e-12)
    require(
        z <= Z_LIMIT,
        f"over {N_DRAWS} draws of random labels (80 examples, 10 dimensions, half held out), mean "
        f"held-out accuracy is {mean:.3f} ± {se:.3f}, {z:.1f} standard errors above chance (0.5): the "
        "held-out examples helped choose the probe",
    )
