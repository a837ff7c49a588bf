"""Time as sorted, disjoint intervals (us, the profiler's clock): the one union, intersection and difference every
busy, overlap and idle figure of the profiler is made from."""

from __future__ import annotations

import numpy as np

Interval = tuple[float, float]  # microseconds, the profiler's clock


def union(intervals: list[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The time in both (each sorted and disjoint, as union() returns)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The time in `a` and not in `b` (each sorted and disjoint)."""
    out, j = [], 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k, start = j, s
        while k < len(b) and b[k][0] < e:
            if b[k][0] > start:
                out.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if start < e:
            out.append((start, e))
    return out


def length(intervals: list[Interval]) -> float:
    return sum(e - s for s, e in intervals)


def union_of(starts: np.ndarray, ends: np.ndarray) -> list[Interval]:
    """intervals.union of the intervals (starts[i], ends[i]), us: the same sorted, disjoint list, by array sorts."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if not len(s):
        return []
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)  # the latest end so far: a new interval starts past it
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, len(s) - 1]
    return list(zip(s[first].tolist(), reach[last].tolist(), strict=True))
