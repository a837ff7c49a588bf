"""Many host stretches cut by label at once: ``Labeler.cut_many(segments)`` is ``[labeler.cut(a, b) for a, b in
segments]`` over numpy arrays, equal to the last bit (the op names per label collected too, where the labeler
collects them).

A stretch [a, b] is cut at every host event boundary inside it; each piece takes the label in effect at its middle.
Here every piece of every stretch is laid out in one array: the innermost main-lane event at each middle is one
search of the lane's innermost timeline, its ranges' label one lookup per timeline entry, and what depends on the
time itself (a phase range the tree did not nest, batch making outside the phases) a search of those ranges. Only
time the autograd lane decides (inside ``backward``) is asked piece by piece. Each stretch's sums are added piece by
piece in order (np.bincount adds in index order), so the floats are those of cut's own loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_PHASES_BACK = 8  # Labeler._phase_at looks this many phase ranges back


@dataclass(frozen=True)
class Names:
    """The labels the labeler resolves (measure/device.py owns them) and its eventless threshold, us."""

    other_step: str
    between: str
    step_data: str
    launching: str
    eventless_us: float


def cut_many(lab: Any, segments: list[tuple[float, float]], n: Names) -> list[tuple[dict, dict, dict]]:
    """[lab.cut(a, b) for a, b in segments] as plain dicts (module docstring); lab: a measure.device.Labeler."""
    if not segments:
        return []
    a = np.array([s for s, _ in segments], np.float64)
    b = np.array([e for _, e in segments], np.float64)
    lo = np.searchsorted(lab.bounds, a, "right")
    inner = np.maximum(np.searchsorted(lab.bounds, b, "left") - lo, 0)  # bounds strictly inside each stretch
    pieces = inner + 1
    first = np.cumsum(pieces) - pieces  # each stretch's first piece
    seg = np.repeat(np.arange(len(segments)), pieces)
    k = np.arange(len(seg)) - first[seg]  # a piece's place in its stretch
    at = lo[seg] + k  # the bound a piece starts at (k > 0) and the one it ends at (k < inner)
    bounds = lab.bounds
    s = np.where(k == 0, a[seg], bounds[np.minimum(at - 1, len(bounds) - 1)])
    e = np.where(k == inner[seg], b[seg], bounds[np.minimum(at, len(bounds) - 1)])
    keep = e > s
    seg, s, e = seg[keep], s[keep], e[keep]
    mid = (s + e) / 2
    names: list[str] = []
    code, inner = _label_codes(lab, mid, names, n)
    width = e - s
    if lab.ops is not None:  # the innermost main-lane event's name per label, added piece by piece as cut does
        for c, event, us in zip(code.tolist(), inner, width.tolist(), strict=True):
            if event is not None:
                lab.ops[names[c]][event.name] += us
    started = np.searchsorted(lab.starts, e, "left") - np.searchsorted(lab.starts, s, "left")
    key = seg * len(names) + code
    return _per_stretch(len(segments), len(names), names, key, width, started, n.eventless_us)


def _label_codes(lab: Any, mid: np.ndarray, names: list[str], n: Names) -> tuple[np.ndarray, list]:
    """(each piece's final label, lab._resolve(lab._chain_label(innermost), mid), as a code into `names`; each
    piece's innermost main-lane event, None where the lane is idle)."""
    index: dict[str, int] = {}

    def code_of(label: str) -> int:
        if label not in index:
            index[label] = len(names)
            names.append(label)
        return index[label]

    lab.trace.innermost(lab.lane, 0.0)  # the lane's innermost timeline, built once
    times, events = lab.trace._timelines[lab.lane]
    at = np.searchsorted(np.asarray(times, np.float64), mid, "right") - 1
    entries, inverse = np.unique(at, return_inverse=True)
    chain = np.array([code_of(lab._chain_label(events[i] if i >= 0 else None)) for i in entries.tolist()], np.int64)
    code = chain[inverse]
    code = _with_phases(lab, mid, code, [code_of(n.other_step), code_of(n.between)], code_of)
    other = code == code_of(n.other_step)
    if other.any():
        code[other] = np.where(_data_like(lab, mid[other]), code_of(n.step_data), code_of(n.launching))
    backward = np.flatnonzero(code == code_of("backward"))
    for i in backward.tolist():
        code[i] = code_of(lab._autograd_label(float(mid[i])))
    inner = [events[i] if i >= 0 else None for i in at.tolist()] if lab.ops is not None else []
    return code, inner


def _with_phases(lab: Any, mid: np.ndarray, code: np.ndarray, open_codes: list[int], code_of) -> np.ndarray:
    """code, where a piece's label is _OTHER_STEP or BETWEEN and a phase range holds its middle, that phase's label
    (Labeler._phase_at: the latest-starting of the last few ranges to start at or before it)."""
    if not lab._phases:
        return code
    ask = np.flatnonzero(np.isin(code, open_codes))
    if not len(ask):
        return code
    starts = np.asarray(lab._phase_starts, np.float64)
    ends = np.array([p[1] for p in lab._phases], np.float64)
    labels = np.array([code_of(lab.phase_label(p[2])) for p in lab._phases], np.int64)
    t = mid[ask]
    last = np.searchsorted(starts, t, "right") - 1
    found = np.full(len(t), -1, np.int64)
    for back in range(_PHASES_BACK):
        j = last - back
        ok = (found < 0) & (j >= 0)
        jj = np.where(ok, j, 0)
        hit = ok & (starts[jj] <= t) & (t < ends[jj])
        found[hit] = labels[jj[hit]]
    code = code.copy()
    code[ask[found >= 0]] = found[found >= 0]
    return code


def _data_like(lab: Any, t: np.ndarray) -> np.ndarray:
    """Labeler._data_like_at at each time: inside a run of step code that makes batches."""
    runs = lab._runs
    if not runs:
        return np.zeros(len(t), bool)
    starts = np.array([r[0] for r in runs], np.float64)
    ends = np.array([r[1] for r in runs], np.float64)
    flags = np.array([bool(r[2]) for r in runs], bool)
    i = np.searchsorted(starts, t, "right") - 1
    ii = np.maximum(i, 0)
    return (i >= 0) & (starts[ii] <= t) & (t < ends[ii]) & flags[ii]


def _per_stretch(
    n: int, width_of_key: int, names: list[str], key, width, started, eventless_us: float
) -> list[tuple[dict, dict, dict]]:
    """(labels, counts, eventless) of each stretch from its pieces' keys (stretch × label), widths and events started,
    each dict's keys in the order its pieces first give them."""
    uniq, first_at, inverse = np.unique(key, return_index=True, return_inverse=True)
    us = np.bincount(inverse, weights=width, minlength=len(uniq))
    count = np.bincount(inverse, weights=started, minlength=len(uniq))
    quiet = (started == 0) & (width >= eventless_us)
    quiet_us = np.bincount(inverse[quiet], weights=width[quiet], minlength=len(uniq))
    quiet_first = np.full(len(uniq), len(key), np.int64)
    np.minimum.at(quiet_first, inverse[quiet], np.flatnonzero(quiet))
    out: list[tuple[dict, dict, dict]] = [({}, {}, {}) for _ in range(n)]
    order = np.argsort(first_at, kind="stable")  # within a stretch, the order its pieces first give each label
    for j in order.tolist():
        k = int(uniq[j])
        labels, counts, _ = out[k // width_of_key]
        name = names[k % width_of_key]
        labels[name] = float(us[j])
        counts[name] = int(count[j])
    for j in np.argsort(quiet_first, kind="stable").tolist():
        if quiet_first[j] == len(key):
            break
        k = int(uniq[j])
        out[k // width_of_key][2][names[k % width_of_key]] = float(quiet_us[j])
    return out
