"""A recorded trace's window numbers over columns: what ``analyze_window(host_events(trace, t0, t1))`` gives, to the
last bit, without a Python object per event.

The host events the window analysis reads (``cpu_op``, ``user_annotation`` and runtime calls: what torch's
``events()`` holds) are laid out once per trace as numpy columns (HostColumns): start, end, duration, a name code,
and the nearest such event around each one. A window is a slice of each lane, found by bisection. Its tree (an
event whose nearest enclosing event starts before the window is one of the window's roots), self times, phase
contexts and categories are array operations, level by level of the tree. Every sum is taken in the order the
object path takes it (``np.bincount`` and ``np.subtract.at`` add in index order; the walk order is the tree's
reversed post-order), so the floats are the same, not merely close: the golden reports check it byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.classify import SYNC, categorize, is_annotation
from ..trace.intervals import length, union, union_of
from ..trace.load import Event, Trace
from .comm import (
    CommStats,
    backend_of,
    calls_by_kind,
    collective_kind,
    comm_window,
    device_comm,
    is_communication,
    kind_ms_in,
    main_thread,
)
from .host import (
    CONTAINER,
    PHASES,
    VIEW_CATS,
    EventView,
    WindowStats,
    analyze_window,
    annotation_category,
    host_events,
    phase_of,
)

_CONTAINER = PHASES.index(CONTAINER)


@dataclass
class HostColumns:
    """The trace's view events (module docstring) as columns: lanes one after another in ``trace.host``'s order,
    each lane by start. Times in us."""

    events: list[Event]
    ts: np.ndarray  # float64 [n]
    end: np.ndarray  # float64 [n], ts + dur as the events compute it
    dur: np.ndarray  # float64 [n]
    name: np.ndarray  # int64 [n], codes into `names`
    parent: np.ndarray  # int64 [n], index of the nearest view event around it; -1: none
    lanes: list[tuple[int, int]]  # [lo, hi) of each lane
    names: list[str]
    phase: np.ndarray  # int64 [names], PHASES index of the phase a name marks; -1: none
    is_sync: np.ndarray  # bool [names], the name is nanolm's "sync" range
    is_step: np.ndarray  # bool [names], a ProfilerStep range
    is_comm: np.ndarray  # bool [names], a collective


@dataclass
class DeviceColumns:
    """The trace's device activities (``trace.device``, by start) as columns. Times in us."""

    events: list[Event]
    ts: np.ndarray  # float64 [n]
    end: np.ndarray  # float64 [n]
    name: np.ndarray  # int64 [n], codes into `names`
    names: list[str]
    is_comm: np.ndarray  # bool [names]
    category: np.ndarray  # int64 [names], codes into `categories`: each name's operator category (categorize)
    categories: list[str]
    longest: float  # the longest activity's duration, us


def host_columns(trace: Trace) -> HostColumns:
    """The trace's HostColumns, built on first use and kept with the trace."""
    if "host_columns" not in trace.derived:
        trace.derived["host_columns"] = _build_host_columns(trace)
    return trace.derived["host_columns"]


def device_columns(trace: Trace) -> DeviceColumns:
    """The trace's DeviceColumns, built on first use and kept with the trace."""
    if "device_columns" not in trace.derived:
        events = trace.device
        n = len(events)
        name, names = _name_codes(events)
        ts = np.fromiter((e.ts for e in events), np.float64, n)
        end = np.fromiter((e.end for e in events), np.float64, n)
        kinds = [categorize(s) for s in names]
        categories = sorted(set(kinds))
        code = {c: i for i, c in enumerate(categories)}
        trace.derived["device_columns"] = DeviceColumns(
            events,
            ts,
            end,
            name,
            names,
            np.array([is_communication(s) for s in names], bool),
            np.array([code[k] for k in kinds], np.int64),
            categories,
            float(np.max(end - ts)) if n else 0.0,
        )
    return trace.derived["device_columns"]


def _name_codes(events: list[Event]) -> tuple[np.ndarray, list[str]]:
    """(each event's name as a code [n], the names in the order of their codes)."""
    codes: dict[str, int] = {}
    name = np.fromiter((codes.setdefault(e.name, len(codes)) for e in events), np.int64, len(events))
    return name, list(codes)


def _build_host_columns(trace: Trace) -> HostColumns:
    events: list[Event] = []
    parent: list[int] = []
    lanes: list[tuple[int, int]] = []
    for lane_events in trace.host.values():
        lo = len(events)
        above: dict[int, int] = {}  # id(event with children) -> index of the nearest view event at or above it
        for e in lane_events:
            up = above[id(e.parent)] if e.parent is not None else -1  # a parent comes before its children (_nest)
            if e.cat in VIEW_CATS:
                parent.append(up)
                up = len(events)
                events.append(e)
            if e.children:
                above[id(e)] = up
        lanes.append((lo, len(events)))
    n = len(events)
    name, names = _name_codes(events)
    phase_codes = {p: i for i, p in enumerate(PHASES)}
    ts = np.fromiter((e.ts for e in events), np.float64, n)
    dur = np.fromiter((e.dur for e in events), np.float64, n)
    return HostColumns(
        events,
        ts,
        ts + dur,  # Event.end's sum, in the same float64
        dur,
        name,
        np.array(parent, np.int64),
        lanes,
        names,
        np.array([phase_codes.get(phase_of(s), -1) for s in names], np.int64),
        np.array([s == "sync" for s in names], bool),
        np.array([s.startswith("ProfilerStep") for s in names], bool),
        np.array([is_communication(s) for s in names], bool),
    )


def _in_order(keys: np.ndarray, weights: np.ndarray, labels: list) -> dict:
    """{labels[k]: the sum of the weights of key k, added in array order}, keys in the order they first appear."""
    if not len(keys):
        return {}
    sums = np.bincount(keys, weights=weights, minlength=len(labels))
    uniq, first = np.unique(keys, return_index=True)
    return {labels[k]: float(sums[k]) for k in uniq[np.argsort(first)].tolist()}


def trace_window_stats(trace: Trace, t0: float, t1: float) -> WindowStats:
    """The numbers of the window [t0, t1) of a recorded trace (us): analyze_window(host_events(trace, t0, t1)),
    equal to the last bit (module docstring)."""
    h, d = host_columns(trace), device_columns(trace)
    w = _window_tree(h, t0, t1)
    da = int(np.searchsorted(d.ts, t0))
    db = max(da, int(np.searchsorted(d.ts, t1)))
    collective_on_device = bool(d.is_comm[d.name[da:db]].any())
    if h.is_comm[w.name].any() and not collective_on_device:  # collectives on the host only (gloo): the object
        return analyze_window(host_events(trace, t0, t1))  # path's own case, which reads every host event
    step = h.is_step[w.name]
    n = max(int(step.sum()), 1)
    phase_ms, category_ms, category_calls, ops = _host_tables(h, w, n)
    busy = device_cat = None
    if db > da:
        busy = length(union_of(d.ts[da:db], d.end[da:db])) / 1000.0 / n
        device_cat = _in_order(d.category[d.name[da:db]], (d.end[da:db] - d.ts[da:db]) / 1000.0 / n, d.categories)
    # the device branch of comm_window moves no host wait into communication (wait_by_category is the CPU's)
    comm = _device_comm(h, d, w, (da, db), n) if collective_on_device else None
    step_ms = sum((w.end[step] - w.ts[step]).tolist()) / 1000.0 / n
    return WindowStats(int(step.sum()), step_ms, phase_ms, category_ms, category_calls, ops, busy, device_cat, comm)


@dataclass
class _Window:
    """A window's host events, in window order (lanes one after another, each by start): a pre-order of its tree."""

    idx: np.ndarray  # int64 [m], their indices in HostColumns
    parent: np.ndarray  # int64 [m], the window's index of the nearest view event around each; -1: a root
    ts: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    name: np.ndarray
    depth: np.ndarray  # int64 [m], 0 for a root
    levels: list[np.ndarray]  # window indices by depth in the tree


def _window_tree(h: HostColumns, t0: float, t1: float) -> _Window:
    """The view events starting in [t0, t1): a slice of each lane; an event whose parent starts before t0 is a
    root (host_events leaves such a parent out)."""
    segments = []
    for lo, hi in h.lanes:
        a = lo + int(np.searchsorted(h.ts[lo:hi], t0))
        segments.append((a, max(a, lo + int(np.searchsorted(h.ts[lo:hi], t1)))))  # t1 < t0: an empty window
    sizes = np.array([b - a for a, b in segments], np.int64)
    first = np.array([a for a, _ in segments], np.int64)
    idx = np.concatenate([np.arange(a, b) for a, b in segments]) if segments else np.zeros(0, np.int64)
    # a parent in the window is in the same lane slice: its window index is its global one less the slice's shift
    shift = np.repeat(first - (np.cumsum(sizes) - sizes), sizes)
    up = h.parent[idx]
    parent = np.where(up >= np.repeat(first, sizes), up - shift, -1)
    depth, levels = _levels(parent)
    return _Window(idx, parent, h.ts[idx], h.end[idx], h.dur[idx], h.name[idx], depth, levels)


def _host_tables(h: HostColumns, w: _Window, n: int) -> tuple[dict, dict, dict, dict]:
    """(phase ms, category self ms, category calls, ops) per step, as analyze_window's walk adds them up."""
    context, in_sync = _contexts(h, w.name, w.parent, w.levels)
    phase = h.phase[w.name]
    counted = (phase >= 0) & ((context == -1) | (context == _CONTAINER)) & (phase != context)
    self_us = w.dur.copy()
    has = w.parent >= 0
    np.subtract.at(self_us, w.parent[has], w.dur[has])  # children in window order, as host_events subtracts them
    walk = _walk_order(w)

    phase_ms: dict[str, float] = {}
    for i in walk[counted[walk]].tolist():
        ms = (float(w.end[i]) - float(w.ts[i])) / 1000.0 / n
        key = PHASES[phase[i]]
        phase_ms[key] = phase_ms.get(key, 0.0) + ms
        if context[i] == _CONTAINER:  # a phase inside the time between steps is taken out of it
            phase_ms[CONTAINER] = phase_ms.get(CONTAINER, 0.0) - ms

    name = w.name[walk]
    cats, category, annotation = _categories(h, name, context[walk], in_sync[walk])
    self_ms = self_us[walk] / 1000.0 / n
    # calls: a sync range counts one sync call, then an op its category's; a key's calls add 1/n each, in walk order
    sync = cats.index(SYNC) if SYNC in cats else -1
    sync_call = h.is_sync[name] & ~in_sync[walk]
    op_call = ~annotation & (category != sync)
    positions = np.r_[2 * np.flatnonzero(sync_call), 2 * np.flatnonzero(op_call) + 1]
    keys = np.r_[np.full(int(sync_call.sum()), sync), category[op_call]].astype(np.int64)
    keys = keys[np.argsort(positions, kind="stable")]
    return (
        phase_ms,
        _in_order(category, self_ms, cats),
        _in_order(keys, np.full(len(keys), 1 / n), cats),
        _ops(h, name[~annotation], category[~annotation], self_ms[~annotation], cats, n),
    )


def _levels(parent: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """(each event's depth in the window's tree, the events by depth: levels[0] the roots, levels[d] those d events
    down (indices))."""
    depth = np.zeros(len(parent), np.int64)
    up = parent.copy()
    while True:
        has = up >= 0
        if not has.any():
            break
        depth[has] += 1
        up[has] = parent[up[has]]
    order = np.argsort(depth, kind="stable")
    counts = np.bincount(depth) if len(depth) else np.zeros(0, np.int64)
    return depth, np.split(order, np.cumsum(counts)[:-1]) if len(counts) else []


def _contexts(h: HostColumns, name: np.ndarray, parent: np.ndarray, levels: list) -> tuple[np.ndarray, np.ndarray]:
    """(the phase each event is inside (PHASES index, -1: none), whether it is inside a sync range), as
    host._context_walk passes them down: a phase range counts when no phase encloses it, or only the container."""
    context = np.full(len(name), -1, np.int64)
    in_sync = np.zeros(len(name), bool)
    for nodes in levels[1:]:
        up = parent[nodes]
        own, around = h.phase[name[up]], context[up]
        counted = (own >= 0) & ((around == -1) | (around == _CONTAINER)) & (own != around)
        context[nodes] = np.where(counted, own, around)
        in_sync[nodes] = in_sync[up] | h.is_sync[name[up]]
    return context, in_sync


def _walk_order(w: _Window) -> np.ndarray:
    """The order _context_walk visits the window's events (a stack: roots and children taken last first): the
    reverse of the tree's post-order, i.e. by subtree end descending, then by depth. The window order is a
    pre-order (a lane by start, parents first), so a subtree is the run of events from its root to its end."""
    size = np.ones(len(w.idx), np.int64)
    for nodes in reversed(w.levels[1:]):
        np.add.at(size, w.parent[nodes], size[nodes])
    return np.lexsort((w.depth, -(np.arange(len(w.idx)) + size)))


def _categories(h: HostColumns, name: np.ndarray, context: np.ndarray, in_sync: np.ndarray):
    """(category labels, each event's category code, whether it is a marking range), for events in walk order:
    categorize's answer, or annotation_category's for a marking range, asked once per distinct case."""
    key = (name * (len(PHASES) + 1) + context + 1) * 2 + in_sync
    cases, inverse = np.unique(key, return_inverse=True)
    labels: list[str] = []
    case_code, case_annotation = [], []
    for k in cases.tolist():
        s, c = h.names[k // ((len(PHASES) + 1) * 2)], (k // 2) % (len(PHASES) + 1) - 1
        ctx, sync = (PHASES[c] if c >= 0 else None), bool(k % 2)
        mark = is_annotation(s)
        cat = annotation_category(s, ctx, sync) if mark else categorize(s, ctx, sync)
        if cat not in labels:
            labels.append(cat)
        case_code.append(labels.index(cat))
        case_annotation.append(mark)
    return labels, np.array(case_code, np.int64)[inverse], np.array(case_annotation, bool)[inverse]


def _ops(h: HostColumns, name: np.ndarray, category: np.ndarray, self_ms: np.ndarray, cats: list, n: int) -> dict:
    """(name, category) -> (calls per step, self ms per step), in the order the walk first meets each."""
    if not len(name):
        return {}
    key = name * len(cats) + category
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    calls = np.bincount(inverse, weights=np.full(len(key), 1 / n))
    ms = np.bincount(inverse, weights=self_ms)
    out = {}
    for j in np.argsort(first).tolist():
        k = int(uniq[j])
        out[(h.names[k // len(cats)], cats[k % len(cats)])] = (float(calls[j]), float(ms[j]))
    return out


_HELD = EventView.__new__(EventView)  # the parent given to a view that is not a root: which one, the branch never reads


def _device_comm(h: HostColumns, d: DeviceColumns, w: _Window, device: tuple[int, int], n: int) -> CommStats | None:
    """comm_window's device branch on columns: the window's ProfilerStep ranges on the main thread, its collectives
    on the host and the device, and the union of the other device activities. Where no step on the main thread has
    a length (the roots then stand for the steps), the views comm_window reads are made instead (_device_comm_views)."""
    step_views = [EventView(h.events[int(w.idx[i])]) for i in np.flatnonzero(h.is_step[w.name]).tolist()]
    main = main_thread(step_views)
    on_main = [(v.time_range.start, v.time_range.end) for v in step_views if v.thread == main]
    if not any(b > a for a, b in on_main):
        return _device_comm_views(h, d, w, device, n)
    a, b = device
    comm = d.is_comm[d.name[a:b]]
    cpu = w.idx[h.is_comm[w.name]]  # the host's collectives, in the window's order
    dev = a + np.flatnonzero(comm)
    if not len(cpu) and not len(dev):
        return None
    steps = union(on_main)
    per_step = 1 / max(n, 1)
    cpu_names = [h.names[c] for c in h.name[cpu].tolist()]
    dev_names = [d.names[c] for c in d.name[dev].tolist()]
    called = [
        name
        for name, tid in zip(cpu_names, (h.events[i].tid for i in cpu.tolist()), strict=True)
        if tid == main and name.startswith("c10d::")
    ]
    calls = calls_by_kind(called or dev_names or cpu_names, per_step)
    kinds = [collective_kind(name) for name in cpu_names + dev_names]
    ts = np.concatenate([h.ts[cpu], d.ts[dev]])
    end = np.concatenate([h.end[cpu], d.end[dev]])
    flight = {}
    for kind in dict.fromkeys(k for k in kinds if k is not None):
        mine = np.array([k == kind for k in kinds], bool)
        flight[kind] = union_of(ts[mine], end[mine])
    return device_comm(
        union_of(d.ts[dev], d.end[dev]),
        union_of(d.ts[a:b][~comm], d.end[a:b][~comm]),
        steps,
        1 / (1000.0 * max(n, 1)),
        calls,
        kind_ms_in(flight, steps, per_step),
        backend_of(list(dict.fromkeys(cpu_names + dev_names))),
    )


def _device_comm_views(h: HostColumns, d: DeviceColumns, w: _Window, device: tuple[int, int], n: int) -> CommStats | None:
    """comm_window on the views its device branch reads: the window's ProfilerStep ranges and collectives on the
    host and its roots (standing for the steps), the collectives on the device, and the union of the other device
    activities."""
    step, roots = h.is_step[w.name], w.parent < 0
    keep = step | h.is_comm[w.name] | roots
    views = []
    for i in np.flatnonzero(keep).tolist():
        view = EventView(h.events[int(w.idx[i])])
        if not roots[i]:
            view.cpu_parent = _HELD
        views.append(view)
    a, b = device
    comm = d.is_comm[d.name[a:b]]
    collectives = [EventView(d.events[a + i], device=True) for i in np.flatnonzero(comm).tolist()]
    compute = union_of(d.ts[a:b][~comm], d.end[a:b][~comm])
    return comm_window(views, collectives, [], n, compute=compute)
