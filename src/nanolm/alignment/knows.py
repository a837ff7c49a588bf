"""Knows vs says: does the residual stream still hold the correct answer when the model gives in?

A linear probe (interp.probes.make_probe: standardize, then logistic regression) reads the correct
option from the residual stream at the answer position, per layer. It is trained on the no-opinion
prompts only, with cross-fitting: the questions are split into k folds (stratified by the correct option,
equal prompts kept together), and each fold is read by the probe fitted on the other folds, so no
question is read by a probe that saw it. Each fold's probe is then applied to the same questions' prompts
with a wrong user opinion. Among the answers that flipped (correct without the opinion, wrong with it),
the share where the probe still reads the correct option is "the model knew, and said otherwise".

It means something only beside
- the probe's own cross-fitted accuracy on the no-opinion prompts (a probe that cannot read the answer
  cannot say the model knew it);
- a control: the same probe fitted on shuffled labels, read against the true ones (what a probe that knows
  nothing reads on the flipped answers: chance, or the commonest class);
- the answers that held (correct with and without the opinion): the share there is what "knowing" looks
  like when the model also says it;
- the flipped questions without the opinion: what the probe read on them before the user spoke (flips
  gather on the questions the model is least sure of, where the probe may not read the answer either).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from ..interp.probes import make_probe
from .stats import Rate, rate


@dataclass
class KnowsLayer:
    layer: str  # "embed" or a block index: the residual stream after it
    probe_accuracy: Rate  # cross-fitted, on the no-opinion prompts
    control_accuracy: Rate  # the shuffled-label probe on the no-opinion prompts, against the true labels
    majority: float  # the commonest correct option's share
    wrong_prompt_accuracy: Rate  # the probe reads the correct option on the wrong-opinion prompts (all questions)
    knew_flipped: Rate  # among flipped answers: the probe reads the correct option
    flipped_without_opinion: Rate  # the same questions' no-opinion prompts: what the probe read before the opinion
    knew_held: Rate  # among answers that held: the probe reads the correct option
    control_knew_flipped: Rate  # the shuffled-label probe on the flipped answers
    reads_opinion_flipped: Rate  # among flipped answers: the probe reads the user's wrong option


@dataclass
class KnowsResult:
    layers: list[KnowsLayer]
    n: int  # questions probed
    n_flipped: int
    folds: int
    readings: dict[str, list[str]] = field(default_factory=dict)  # layer -> the probe's option per question (wrong prompt)

    @property
    def best(self) -> KnowsLayer:
        """The layer whose probe reads the correct option best on the no-opinion prompts."""
        return max(self.layers, key=lambda k: k.probe_accuracy.value)


def _folds(y: np.ndarray, groups: list[str], k: int, seed: int) -> list[np.ndarray]:
    """k test folds, stratified by y, equal groups in one fold."""
    from sklearn.model_selection import StratifiedGroupKFold

    splitter = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    return [test for _, test in splitter.split(np.zeros(len(y)), y, groups)]


def cross_fit(
    X_fit: np.ndarray, y: np.ndarray, X_apply: np.ndarray, folds: list[np.ndarray], seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(predictions on X_fit, predictions on X_apply) [N] each, row i read by the probe fitted on the
    folds that do not hold i. X_fit and X_apply [N, D] are the same questions under two prompts."""
    pred_fit = np.empty(len(y), dtype=y.dtype)
    pred_apply = np.empty(len(y), dtype=y.dtype)
    for test in folds:
        train = np.setdiff1d(np.arange(len(y)), test)
        if len(np.unique(y[train])) < 2:  # one class to learn: the probe is that constant
            pred_fit[test] = pred_apply[test] = y[train][0]
            continue
        probe = make_probe(seed=seed).fit(X_fit[train], y[train])
        pred_fit[test] = probe.predict(X_fit[test])
        pred_apply[test] = probe.predict(X_apply[test])
    return pred_fit, pred_apply


def _share(mask: np.ndarray, hit: np.ndarray) -> Rate:
    return rate(int((hit & mask).sum()), int(mask.sum()))


def knows_vs_says(
    acts_none: dict[str, np.ndarray],
    acts_wrong: dict[str, np.ndarray],
    correct: list[str],
    opinion: list[str],
    flipped: np.ndarray,
    held: np.ndarray,
    groups: list[str] | None = None,
    seed: int = 0,
    max_folds: int = 5,
) -> KnowsResult:
    """Per layer (keys of acts_none, in order): activations [N, D] at the answer position of the no-opinion
    and the wrong-opinion prompts of N questions; correct[i] the correct option's label, opinion[i] the
    wrong opinion's; flipped / held [N] bool: the model's answers flipped / held under the wrong opinion.
    A UserError when the correct options are too few of a kind to cross-fit (every class in 2 folds)."""
    y = np.array(correct)
    classes, counts = np.unique(y, return_counts=True)
    k = int(min(max_folds, counts.min(), len(set(groups or range(len(y))))))
    if len(classes) < 2 or k < 2:
        raise UserError(
            f"knows vs says: the correct options are {dict(zip(classes.tolist(), counts.tolist()))}; a probe "
            "needs two options each correct on at least 2 questions (give more questions, or --no-knows)"
        )
    folds = _folds(y, groups or [str(i) for i in range(len(y))], k, seed)
    shuffled = np.random.default_rng(seed).permutation(y)
    op = np.array(opinion)
    layers, readings = [], {}
    for layer, X in acts_none.items():
        fit, applied = cross_fit(X, y, acts_wrong[layer], folds, seed)
        ctrl_fit, ctrl_applied = cross_fit(X, shuffled, acts_wrong[layer], folds, seed)
        everyone = np.ones(len(y), dtype=bool)
        layers.append(
            KnowsLayer(
                layer,
                _share(everyone, fit == y),
                _share(everyone, ctrl_fit == y),
                float(counts.max() / len(y)),
                _share(everyone, applied == y),
                _share(flipped, applied == y),
                _share(flipped, fit == y),
                _share(held, applied == y),
                _share(flipped, ctrl_applied == y),
                _share(flipped, applied == op),
            )
        )
        readings[layer] = applied.tolist()
    return KnowsResult(layers, len(y), int(flipped.sum()), k, readings)
