"""Data-parallel ranks side by side: each rank's work (its step less its exposed communication), the slowest rank
and the spread, a straggler when its extra work is STRAGGLER_SHARE of the step or more, and the merged verdict.
Works on saved reports, however the ranks were launched (nanolm.profiling.record.ranks launches them)."""

from __future__ import annotations

import statistics
from dataclasses import replace

from ..report import ProfileReport, RankRow, RanksReport, Stat, Verdict

STRAGGLER_SHARE = 0.10  # the slowest rank is a straggler when its extra work is this share of the step or more


def window_work(report: ProfileReport) -> list[float]:
    """Each measured window's own work of a rank: its step less its exposed communication (ms per step)."""
    if not report.window_step_ms:  # a report without its windows: the median window's
        exposed = report.communication.exposed_ms if report.communication is not None else 0.0
        return [report.step_ms.median - exposed]
    exposed = report.window_exposed_ms or [0.0] * len(report.window_step_ms)
    return [step - wait for step, wait in zip(report.window_step_ms, exposed, strict=False)]


def rank_row(rank: int, report: ProfileReport, work_ms: float) -> RankRow:
    c = report.communication
    in_flight, exposed, overlap = (c.in_flight_ms, c.exposed_ms, c.overlap) if c is not None else (0.0, 0.0, 0.0)
    verdict = report.verdict
    g = report.gpu
    return RankRow(
        rank,
        report.step_ms.median,
        work_ms,
        in_flight,
        exposed,
        overlap,
        verdict.bottleneck.value if verdict else "-",
        verdict.headline if verdict else "",
        report.trace_path,
        g.gate if g is not None else None,
        g.busy_share if g is not None else None,
    )


def merge_ranks(reports: list[ProfileReport], target: str, ranks: list[int] | None = None) -> RanksReport:
    """The ranks' profiles together, window by window: the slowest rank, the spread, a straggler, the merged verdict.
    ranks: each report's rank number (None: 0, 1, ... in order; a folder's files name their own)."""
    names = list(range(len(reports))) if ranks is None else list(ranks)
    works = [window_work(r) for r in reports]
    n = min(len(w) for w in works)
    by_window = [[w[i] for w in works] for i in range(n)]  # [window][position]
    median_work = [statistics.median(w[:n]) for w in works]
    at = range(len(reports))  # positions; ties go to the lower rank
    slowest = max(at, key=lambda i: (median_work[i], -i))
    fastest = min(at, key=lambda i: (median_work[i], i))
    extra = [ws[slowest] - min(ws) for ws in by_window]  # the slowest rank's extra work, window by window
    slowest_in = sum(max(at, key=lambda i, ws=ws: (ws[i], -i)) == slowest for ws in by_window)
    rows = [rank_row(names[i], report, median_work[i]) for i, report in enumerate(reports)]
    step = Stat.of([row.step_ms for row in rows])
    spread = median_work[slowest] - median_work[fastest]
    share = spread / step.median if step.median else 0.0
    is_straggler = len(reports) > 1 and slowest_in == n and min(extra) >= STRAGGLER_SHARE * step.median
    backends = [r.communication.backend for r in reports if r.communication is not None and r.communication.backend]
    merged = RanksReport(
        target,
        len(reports),
        backends[0] if backends else None,
        rows,
        step,
        names[slowest],
        names[fastest],
        spread,
        share,
        names[slowest] if is_straggler else None,
        n,
        slowest_in,
        extra,
        reports=reports,
    )
    merged.verdict = merged_verdict(merged)
    if all(r.communication is None for r in reports):
        merged.notes.append(
            "no collective communication was recorded on any rank: does the script join the process "
            "group (torch.distributed.init_process_group) and wrap its model in DistributedDataParallel?"
        )
    codes = [r.script_exit_code for r in reports if r.script_exit_code]
    merged.script_exit_code = codes[0] if codes else None
    return merged


def merged_verdict(m: RanksReport) -> Verdict:
    """The slowest rank's verdict, said of the run: every rank's step waits for that rank."""
    own = m.reports[m.position(m.slowest_rank)].verdict
    if m.world_size == 1:
        return own
    slow = m.rows[m.position(m.slowest_rank)]
    if m.straggler is not None:
        ranks_line = (
            f"rank {m.straggler} is a straggler: its own work takes {slow.work_ms:.1f} ms a step, {m.spread_ms:.1f} ms "
            f"more than the fastest rank's ({m.spread_share:.0%} of the {m.step_ms.median:.1f} ms step), in every "
            f"one of {m.windows} windows; the other ranks spend that time waiting in the collectives"
        )
        headline = f"rank {m.straggler} (the straggler) sets every rank's step; on it, {own.headline}"
    else:
        how = (
            f"the slowest in every window, but by as little as {min(m.window_spread_ms):.1f} ms in one (under "
            f"{STRAGGLER_SHARE:.0%} of the step)"
            if m.slowest_in_windows == m.windows
            else f"the slowest in only {m.slowest_in_windows} of {m.windows} windows"
        )
        ranks_line = (
            f"no straggler: rank {m.slowest_rank} has the most work, {m.spread_ms:.1f} ms a step more than the "
            f"fastest rank ({m.spread_share:.0%} of the step), and is {how}"
        )
        headline = f"on rank {m.slowest_rank}, the slowest, {own.headline}"
    others = [f"rank {r.rank}: {r.verdict}: {r.headline}" for r in m.rows if r.rank != m.slowest_rank]
    fixes = list(own.fixes)
    if m.straggler is not None:
        fixes.insert(
            0,
            f"make rank {m.straggler} as fast as the others (its own findings below), or give it less work; "
            "the others wait for it",
        )
    return replace(own, headline=headline, evidence=[ranks_line, *own.evidence], fixes=fixes, also=[*others, *own.also])
