"""Linear probes (Alain & Bengio 2016) done so that their numbers mean something.

For each layer: scikit-learn's LogisticRegression on a stratified, seeded train split of the
activations, scored on the held-out split, beside
- the majority-class rate (what always guessing the commonest label gets),
- a control task (Hewitt & Liang 2019): the same probe and hyperparameters on labels reassigned
  at random per example or per word type; selectivity = accuracy − control accuracy,
- the train accuracy, which proves nothing on its own: with n_train ≤ d a linear probe fits even
  random labels (the reference's 60 examples in 64 dimensions).

High held-out accuracy says a feature is linearly readable, not that the model uses it; only an
intervention says that (interventions.py).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..records import Record
from ..stats import wilson_interval
from .activations import collect
from .view import ModelView

FEATURES = ("tense", "sentiment")


@dataclass
class LabelledSet:
    """Texts with a label each; optionally the next token a feature should govern (target) and its
    wrong alternative (contrast), which the intervention measures."""

    name: str  # a built-in feature's name, or a file's stem: "my.csv" -> "my", "tense.v2.jsonl" -> "tense.v2"
    texts: list[str]
    labels: list[str]
    targets: list[str] | None = None
    contrasts: list[str] | None = None
    source: str = ""  # the file it was read from; "" for a built-in set

    @property
    def classes(self) -> list[str]:
        return sorted(set(self.labels))


def feature_title(name: str, source: str = "") -> str:
    """How a feature is named in titles: tense, or "my" (my.csv) for a file's (the name quoted, so a
    short stem does not read as a cut-off sentence)."""
    return f'"{name}" ({Path(source).name})' if source else name


def feature_dataset(feature: str, n: int = 400, seed: int = 0) -> LabelledSet:
    """A built-in labelled set ("tense", "sentiment") or a user's CSV/JSONL file with columns
    text and label (and optionally target, contrast)."""
    from ..corpus import other_tense, sentiment_dataset, tense_dataset

    if feature == "tense":
        items = tense_dataset(n, seed)
        # the prefix ends at the pronoun of the second clause; its next word must agree in tense
        return LabelledSet(
            "tense",
            [i.prefix for i in items],
            [i.label for i in items],
            [i.target for i in items],
            [other_tense(i.target) for i in items],
        )
    if feature == "sentiment":
        items = sentiment_dataset(n, seed)
        return LabelledSet("sentiment", [i.text for i in items], [i.label for i in items])
    path = Path(feature)
    if path.suffix.lower() in (".csv", ".jsonl", ".json") and path.is_file():
        return read_labelled_file(path)
    if path.suffix.lower() in (".csv", ".jsonl", ".json"):
        raise UserError(f"--feature {feature}: no such file")
    raise UserError(
        f"unknown feature {feature!r}; built-in features: {', '.join(FEATURES)}, "
        "or give a CSV/JSONL file with text and label columns"
    )


def read_labelled_file(path: Path) -> LabelledSet:
    """A CSV (header row) or JSONL (one object per line) file of text, label and optionally target and
    contrast; every malformed row is a UserError naming the file and the line."""
    try:
        rows, columns = _read_rows(path)
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}); save the file as UTF-8") from None
    for col in ("text", "label"):
        if col not in columns:
            raise UserError(f"{path}: no {col!r} column (columns: {', '.join(columns) or 'none'}); give columns text and label")
    if not rows:
        raise UserError(f"{path}: no rows")
    optional = [c for c in ("target", "contrast") if c in columns]
    for line, row in rows:
        for col in ("text", "label", *optional):
            if row.get(col) is None or str(row[col]).strip() == "":
                raise UserError(f"{path}:{line}: no {col!r} value; every row needs one (or drop the {col!r} column)")
    opt = {c: [str(r[c]) for _, r in rows] if c in optional else None for c in ("target", "contrast")}
    return LabelledSet(
        path.stem,
        [str(r["text"]) for _, r in rows],
        [str(r["label"]) for _, r in rows],
        opt["target"],
        opt["contrast"],
        str(path),
    )


def _read_rows(path: Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """([(line number, row)], column names) of a CSV or JSONL file."""
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            return [(reader.line_num, row) for row in reader], columns
    if path.suffix.lower() == ".json":
        raise UserError(
            f'{path}: give JSON Lines (.jsonl: one object per line, e.g. {{"text": "...", "label": "..."}}), not a .json file'
        )
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict):
            raise UserError(
                f'{path}:{i}: not a JSON object; give one object per line, {{"text": "...", "label": "..."}}'
            ) from None
        rows.append((i, row))
    return rows, sorted({k for _, r in rows for k in r})


def parse_layers(spec: str, view: ModelView) -> list[str]:
    """ "all" (embed and every block), or a comma-separated list such as embed,0,3 (checked)."""
    if spec == "all":
        return view.layer_labels()
    layers = []
    for part in spec.split(","):
        part = part.strip()
        view.resid_name(part)  # raises a UserError naming the valid range
        layers.append("embed" if part in ("embed", "-1") else str(int(part)))
    return layers


# ---- the probe -----------------------------------------------------------------------------


def make_probe(C: float = 1.0, seed: int = 0):
    """Standardize, then L2-regularized logistic regression (scikit-learn)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000, random_state=seed))


def split_indices(
    y: np.ndarray, test_size: float, seed: int, groups: list[str] | None = None, unit: str = "example"
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified, seeded (train, test) indices; a UserError when the labels are too few to give
    every class a place on both sides. With groups (the texts), equal groups land on the same side:
    a held-out text that also sits in the train split would be memorized, not generalized to."""
    if groups is not None and len(set(groups)) < len(groups):
        first: dict[str, int] = {}
        for i, g in enumerate(groups):
            first.setdefault(g, i)
        reps = np.array(list(first.values()))  # one example per distinct text
        train_reps, test_reps = split_indices(y[reps], test_size, seed, unit="distinct text")
        side = {groups[reps[j]]: "train" for j in train_reps} | {groups[reps[j]]: "test" for j in test_reps}
        idx = np.arange(len(y))
        return idx[[side[g] == "train" for g in groups]], idx[[side[g] == "test" for g in groups]]
    from sklearn.model_selection import train_test_split

    classes, counts = np.unique(y, return_counts=True)
    if counts.min() < 2:
        rare = classes[counts.argmin()].item()
        raise UserError(
            f"label {rare!r} has a single {unit}; a held-out probe needs at least 2 per class "
            f"(one to train on, one to test{'; a repeated text stays on one side' if unit != 'example' else ''}"
            "): add examples or drop that label"
        )

    def fits(n: int) -> bool:  # every class on both sides; scikit-learn rounds the test share up
        return len(classes) <= math.ceil(test_size * n) <= n - len(classes)

    if not fits(len(y)):
        n_test = math.ceil(test_size * len(y))
        enough = next(n for n in range(len(y) + 1, 10 * len(classes) + 100) if fits(n))
        raise UserError(
            f"{len(y)} {unit}s split {len(y) - n_test}/{n_test} cannot hold all {len(classes)} labels on "
            f"both sides; give at least {enough} {unit}s"
        )
    idx = np.arange(len(y))
    train, test = train_test_split(idx, test_size=test_size, random_state=seed, stratify=y)
    return np.sort(train), np.sort(test)


def control_labels(y: np.ndarray, kind: str, types: np.ndarray | None, seed: int) -> np.ndarray:
    """Hewitt & Liang's control task. "example": the labels shuffled across examples (class
    balance kept). "type": each word type (here: the token at the probed position) gets one label
    drawn at random from the label distribution, so a probe can only succeed by memorizing types."""
    rng = np.random.default_rng(seed)
    if kind == "example":
        return rng.permutation(y)
    if kind == "type":
        if types is None:
            raise ValueError("a per-type control needs the word types")
        uniq = np.unique(types)
        mapping = dict(zip(uniq.tolist(), rng.choice(y, size=len(uniq)).tolist()))
        return np.array([mapping[t] for t in types.tolist()])
    raise UserError(f"--control {kind!r}: give 'example' or 'type'")


@dataclass
class LayerProbe:
    layer: str
    n_train: int
    n_test: int
    dim: int
    train_accuracy: float
    accuracy: float  # held-out
    accuracy_ci: tuple[float, float]  # 95% Wilson interval of the held-out accuracy
    majority: float  # held-out rate of the train split's commonest class
    control_accuracy: float  # held-out accuracy on control labels
    selectivity: float  # accuracy − control_accuracy
    warnings: list[str] = field(default_factory=list)


def probe_layer(
    X: np.ndarray,
    y: np.ndarray,
    layer: str = "",
    test_size: float = 0.25,
    seed: int = 0,
    C: float = 1.0,
    control: np.ndarray | None = None,
    groups: list[str] | None = None,
) -> LayerProbe:
    """Fit and score one probe on activations X [N, D] with labels y [N] (and control labels); equal
    groups (texts) stay on one side of the split."""
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise UserError(f"the labels have a single class ({classes[0].item()!r}); a probe needs at least two")
    train, test = split_indices(y, test_size, seed, groups)
    probe = make_probe(C, seed).fit(X[train], y[train])
    correct = int((probe.predict(X[test]) == y[test]).sum())
    acc = correct / len(test)
    train_acc = float((probe.predict(X[train]) == y[train]).mean())
    values, train_counts = np.unique(y[train], return_counts=True)
    majority = float((y[test] == values[train_counts.argmax()]).mean())
    control_acc = acc
    if control is not None:
        if len(np.unique(control[train])) < 2:  # every type drew the same label: a constant predicts it
            control_acc = float((control[test] == control[train][0]).mean())
        else:
            cprobe = make_probe(C, seed).fit(X[train], control[train])
            control_acc = float((cprobe.predict(X[test]) == control[test]).mean())
    ci = wilson_interval(correct, len(test))
    warnings = []
    if len(train) <= X.shape[1]:
        warnings.append(
            f"layer {layer}: n_train = {len(train)} ≤ dimension {X.shape[1]}: a linear probe can fit even "
            f"random labels here (train accuracy {train_acc:.2f} proves nothing); use more examples"
        )
    if ci[0] <= majority <= ci[1]:
        warnings.append(
            f"layer {layer}: held-out accuracy {acc:.2f} (95% CI {ci[0]:.2f}–{ci[1]:.2f}) is within "
            f"noise of the majority rate {majority:.2f}: no evidence the feature is readable here"
        )
    return LayerProbe(
        layer, len(train), len(test), X.shape[1], train_acc, acc, ci, majority, control_acc, acc - control_acc, warnings
    )


# ---- the result of an intervention (interventions.py runs it; a ProbeResult with --intervene holds it) ----

MIN_EFFECT_NATS = 0.05  # the smallest change in the mean loss that counts: a 5% change in the token's probability


class Verdict(str, Enum):
    """Does erasing the feature change the measure more than random edits of the same size do?"""

    USED = "used"
    NOT_SHOWN = "not shown to be used"

    def __str__(self) -> str:
        return self.value


@dataclass
class InterventionResult:
    layer: str
    method: str  # "leace" or "projection"
    rank: int  # directions removed
    measure: str  # what base/erased are
    base: float  # the measure without any edit
    erased: float  # with the feature erased
    delta: float  # erased − base
    random_deltas: list[float]  # the same measure's change when erasing random directions
    preference_base: float | None  # fraction of held-out texts whose target beats its contrast
    preference_erased: float | None
    probe_accuracy_after: float  # held-out accuracy of a fresh probe on erased activations
    majority: float
    verdict: Verdict
    reason: str  # the verdict's numbers, one line: "erasing it raises the loss by ..."
    edit_norm: float  # mean ‖x − erased(x)‖ over the fitted activations (the random edits move exactly as far)
    scored: int  # held-out texts measured (those whose target and contrast differ in some token)
    p_value: float = 1.0  # (1 + random edits whose change is at least as large) / (n_random + 1)
    min_effect: float = MIN_EFFECT_NATS  # the effect-size floor the verdict applied, nats

    @property
    def random_mean(self) -> float:
        return float(np.mean(self.random_deltas))

    @property
    def random_std(self) -> float:
        return float(np.std(self.random_deltas, ddof=1)) if len(self.random_deltas) > 1 else 0.0


@dataclass
class ProbeResult(Record):
    model: str
    feature: str
    classes: list[str]
    n: int
    position: str
    control: str
    layers: list[LayerProbe]
    intervention: InterventionResult | None = None  # with --intervene: the erasure's effect (interventions.py)
    source: str = ""  # the feature's file, "" for a built-in feature

    @classmethod
    def hint_names(cls) -> dict[str, type]:
        return {"InterventionResult": InterventionResult}

    @property
    def best(self) -> LayerProbe:
        """The layer with the highest selectivity."""
        return max(self.layers, key=lambda p: p.selectivity)

    @property
    def warnings(self) -> list[str]:
        return [w for p in self.layers for w in p.warnings]


def probe(
    view: ModelView,
    data: LabelledSet,
    layers: list[str] | None = None,
    position: str = "last",
    control: str = "example",
    test_size: float = 0.25,
    seed: int = 0,
    C: float = 1.0,
) -> ProbeResult:
    """Probe every layer (default: the embedding output and every block) for data's labels."""
    if len(set(data.labels)) < 2:
        raise UserError(f"{data.name}: the labels have a single class ({data.labels[0]!r}); a probe needs two or more")
    if position not in ("last", "mean"):
        raise UserError(f"--position {position!r}: give 'last' or 'mean'")
    layers = layers or view.layer_labels()
    names = {layer: view.resid_name(layer) for layer in layers}
    acts = collect(view, data.texts, list(names.values()), pool=position)
    y = np.array(data.labels)
    ctrl = control_labels(y, control, acts.last_token.numpy(), seed)
    results = [probe_layer(acts[names[layer]].numpy(), y, layer, test_size, seed, C, ctrl, data.texts) for layer in layers]
    return ProbeResult(view.name, data.name, data.classes, len(y), position, control, results, source=data.source)


def probe_figure(result: ProbeResult) -> Any:
    """A matplotlib Figure: held-out accuracy per layer with its CI, train accuracy, control accuracy
    and the majority rate. Nothing is written; save it with nanolm.plots.save_figure."""
    from ..plots import pyplot

    fig, ax = pyplot().subplots(figsize=(7, 4))
    x = np.arange(len(result.layers))
    acc = np.array([p.accuracy for p in result.layers])
    lo = np.array([p.accuracy_ci[0] for p in result.layers])
    hi = np.array([p.accuracy_ci[1] for p in result.layers])
    ax.plot(x, acc, "o-", label="held-out accuracy")
    ax.fill_between(x, lo, hi, alpha=0.2, label="95% CI")
    ax.plot(x, [p.train_accuracy for p in result.layers], "--", color="gray", label="train accuracy")
    ax.plot(x, [p.control_accuracy for p in result.layers], "s:", label=f"control task ({result.control})")
    ax.plot(x, [p.majority for p in result.layers], color="k", lw=1, label="majority class")
    ax.set_xticks(x, [p.layer for p in result.layers])
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel("layer (residual stream after it)")
    ax.set_ylabel("accuracy")
    where = "last token" if result.position == "last" else "mean over tokens"
    ax.set_title(f"linear probe for {feature_title(result.feature, result.source)}: {result.n} examples, {where}")
    ax.legend(fontsize=8, loc="lower right")
    return fig
