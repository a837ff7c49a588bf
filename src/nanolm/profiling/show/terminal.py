"""Profile reports and comparisons in the terminal (rich), for the CLI. The tables the run's page shows too (phases,
categories, operators, findings, before / after) are laid out once in nanolm.profiling.show.tables and drawn here
with nanolm.tables.to_rich; the sentences around them, and the tables only the terminal shows, are written here.
On a GPU the report's GPU part comes first: the gate sentence, then where the step's time goes on the GPU."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ...layout import fit
from ...tables import Table as Shown
from ...tables import to_rich
from ..report import Communication, Comparison, ProfileReport, RanksReport, Stat, Verdict
from .tables import (
    collectives_table,
    communication_line,
    comparison_table,
    expectation_lines,
    findings_table,
    gpu_clock_line,
    gpu_detail_lines,
    gpu_table,
    isolation_lines,
    isolation_table,
    step_tables,
    syncs_table,
)

TRACE_HINT = "open it at https://ui.perfetto.dev (drag the file in) or chrome://tracing"


def _range(s: Stat, fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(s.median)} ({fmt.format(s.min)}–{fmt.format(s.max)})"


def _table(title: str, left: list[str], right: list[str]) -> Table:
    """A table whose text columns are left-aligned and number columns right-aligned; long cells fold."""
    table = Table(title=title)
    for col in left:
        table.add_column(col, overflow="fold")
    for col in right:
        table.add_column(col, justify="right")
    return table


def _show(console: Console, table: Table) -> None:
    """The table, or its rows as a list where the console is too narrow for it (nanolm.layout)."""
    console.print(fit(table, console))


def _draw(shown: Shown, console: Console) -> None:
    """A table laid out in nanolm.profiling.show.tables (the page shows the same), drawn for the terminal. Boxed like the
    report's other tables (the GPU's, the syncs', the ranks'), so a profile reads as one; its text columns fold a
    long name (an operator's) rather than cut it short, as those tables do."""
    table = to_rich(shown)
    table.box, table.pad_edge, table.collapse_padding = box.HEAVY_HEAD, True, False
    for column in table.columns:
        if column.justify == "left":
            column.overflow = "fold"
    _show(console, table)


def print_report(report: ProfileReport, console: Console) -> None:
    """On a GPU the device's answer comes first, and the host tables second; on a CPU the host tables lead."""
    print_gpu(report, console)
    _print_tables(report, console)
    _print_communication(report.communication, console)
    _print_syncs(report, console)
    if report.verdict:
        _print_verdict(report.verdict, console)
    if report.expectation:
        _print_expectation(report, console)
    _print_isolation(report, console)
    _print_notes(report, console)


def _print_tables(report: ProfileReport, console: Console) -> None:
    console.print(f"[bold]Profiled {report.scope}.[/bold] {escape(report.target)} on {report.device}")
    w = report.window
    windows = w.get("windows", w["repeat"])
    repeated = (
        f"repeated {w['repeat']}×"
        if windows == w["repeat"]
        else f"{windows} windows (--repeat {w['repeat']}, more because the first windows disagreed)"
    )
    console.print(
        f"window: wait {w['wait']}, warmup {w['warmup']}, active {w['active']}, {repeated}; "
        f"first measured step is step {report.first_measured_step}; {report.steps_measured} steps measured; "
        f"step {_range(report.step_ms)} ms (median, min–max over windows)"
    )
    if report.unstable:
        console.print(
            f"[yellow]unstable:[/yellow] the windows disagree with each other ({escape('; '.join(report.unstable))}): "
            "the machine was busy or the step varies; treat these numbers as rough and profile again"
        )

    for table in step_tables(report):
        _draw(table, console)


def _print_syncs(report: ProfileReport, console: Console) -> None:
    table = syncs_table(report)
    if table is None:
        console.print("host-device syncs: none in the measured steps")
    else:
        _draw(table, console)


def _speedup(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}×"


def _print_verdict(v: Verdict, console: Console) -> None:
    console.print(f"\n[bold]Verdict: {v.bottleneck.value}[/bold]: {escape(v.headline)}")
    for line in v.evidence:
        console.print(f"  • {escape(line)}")
    findings = findings_table(v)
    if findings is None:  # a report written before findings were ranked
        for i, fix in enumerate(v.fixes, 1):
            console.print(f"  {i}. {escape(fix)}")
        return
    _draw(findings, console)
    step = v.findings[0].ms / v.findings[0].share if v.findings[0].share else None
    if v.together_ms is not None and step:
        how = "one replay with every fix" if v.gate else "each projection removes at most its own time"
        console.print(
            f"all of these fixed at once: a {v.together_ms:.1f} ms step ({_speedup(step / v.together_ms)} faster; {how})"
            if v.together_ms > 0
            else "all of these fixed at once: nothing measured would be left of the step"
        )
    for h in v.hazards:
        console.print(
            f"[yellow]GPU hazard[/yellow] ({escape('; '.join(h.evidence))}): {escape(h.what)}. Fix: {escape(h.fix or '-')}"
        )
    for line in v.left_out:
        console.print(f"  left out: {escape(line)}")


def _print_expectation(report: ProfileReport, console: Console) -> None:
    """ "Training is 3× slower than the estimate": the estimate, the measurement, and where the rest goes."""
    lines = expectation_lines(report)
    console.print()
    for line, head in zip(lines[:2], ("Expected", "Measured")):  # the two sentences lead with their word in bold
        console.print(f"[bold]{head}[/bold]{escape(line.removeprefix(head))}")
    for line in lines[2:]:
        console.print(escape(line))


def _print_notes(report: ProfileReport, console: Console) -> None:
    """MFU, tokens/s, notes, a script's error and where the trace went."""
    if report.mfu:
        m = report.mfu
        line = f"\nMFU {m.mfu:.1%} ({m.method}: {m.flops_per_s:.3g} FLOP/s over peak {m.peak_flops_per_s:.3g}, {m.peak_source})"
        if m.mfu_with_attention is not None:
            line += f"; with the attention term 12·L·d·T: {m.mfu_with_attention:.1%}"
        console.print(line)
    if report.tokens_per_s:
        console.print(f"tokens/s {_range(report.tokens_per_s, '{:,.0f}')}")
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    if report.script_error:
        console.print(
            f"[red]the script raised inside the window[/red]: {escape(report.script_error)} (the report covers what was captured)"
        )
    if report.trace_path:
        replaced = "".join(f" (replaced {escape(p)})" for p in report.trace_replaced)
        console.print(f"trace written to {escape(report.trace_path)}{replaced}: {TRACE_HINT}")
    if report.profiler_log:
        console.print(f"the profiler library's own messages: {escape(report.profiler_log)}")


def print_comparison(c: Comparison, console: Console) -> None:
    _draw(comparison_table(c), console)
    for warning in c.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")


def _print_isolation(report: ProfileReport, console: Console) -> None:
    """--isolate: the input pipeline alone and the model alone beside the profiled step (ms a step, share of it)."""
    table = isolation_table(report)
    if table is None:
        return
    _draw(table, console)
    *what, bound = isolation_lines(report)
    for line in what:
        console.print(escape(line))
    console.print(f"[bold]{escape(bound)}[/bold]")


def _print_communication(c: Communication | None, console: Console) -> None:
    """Collectives (torch.distributed) in the measured steps: in flight, exposed, hidden behind backward."""
    if c is None:
        return
    console.print(communication_line(c))
    table = collectives_table(c)
    if table is not None:
        _draw(table, console)


MAX_RANK_COLUMNS = 8


def print_ranks_report(merged: RanksReport, console: Console) -> None:
    """``nanolm profile --nproc N``: the ranks side by side, the straggler, the slowest rank in detail, the merged
    verdict, and where each rank's trace went."""
    how = "saved traces, one per rank" if merged.target.startswith("folder ") else "torch.distributed.run, one process each"
    console.print(
        f"[bold]Profiled {merged.world_size} ranks[/bold] ({how}"
        f"{', ' + merged.backend if merged.backend else ''}): {escape(merged.target)}"
    )
    table = _table(
        "ranks (ms per step: the median window; own work: step less exposed communication, median over the windows)",
        ["rank"],
        ["step", "own work", "comm in flight", "comm exposed", "hidden behind backward", "verdict"],
    )
    for r in merged.rows:
        mark = " (slowest)" if r.rank == merged.slowest_rank and merged.world_size > 1 else ""
        gpu = f" (GPU {r.gate}, busy {r.busy_share:.0%})" if r.gate is not None and r.busy_share is not None else ""
        table.add_row(
            f"{r.rank}{mark}",
            f"{r.step_ms:.2f}",
            f"{r.work_ms:.2f}",
            f"{r.in_flight_ms:.2f} ({r.comm_share:.0%})",
            f"{r.exposed_ms:.2f} ({r.exposed_share:.0%})",
            f"{r.overlap:.0%}",
            r.verdict + gpu,
        )
    _show(console, table)
    if merged.world_size > 1:
        slow = merged.rows[merged.position(merged.slowest_rank)]
        who = (
            f"[bold]straggler: rank {merged.straggler}[/bold]"
            if merged.straggler is not None
            else f"no straggler (rank {merged.slowest_rank} has the most work)"
        )
        each = ", ".join(f"{ms:.1f}" for ms in merged.window_spread_ms)
        console.print(
            f"{who}: own work {slow.work_ms:.2f} ms a step, {merged.spread_ms:.2f} ms more than rank "
            f"{merged.fastest_rank} (spread {merged.spread_share:.0%} of the step); the slowest in "
            f"{merged.slowest_in_windows} of {merged.windows} windows (its extra ms in each: {each}). A faster "
            "rank spends the difference waiting in the collectives: the ranks' steps are alike, their own work "
            "tells them apart"
        )
    _print_rank_collectives(merged, console)
    slowest = merged.reports[merged.position(merged.slowest_rank)]
    console.print(f"\n[bold]rank {merged.slowest_rank}{', the slowest,' if merged.world_size > 1 else ''} in detail[/bold]")
    print_gpu(slowest, console)
    _print_tables(slowest, console)
    if merged.verdict is not None:
        _print_verdict(merged.verdict, console)
    _print_rank_notes(merged, console)


def _print_rank_collectives(merged: RanksReport, console: Console) -> None:
    kinds = list(dict.fromkeys(row.kind for r in merged.reports if r.communication for row in r.communication.collectives))
    if not kinds:
        return
    few = merged.world_size <= MAX_RANK_COLUMNS
    table = _table(
        "collectives (per step)",
        ["kind"],
        [
            "calls",
            *([f"rank {r} in flight ms" for r in merged.ranks] if few else ["in flight ms, median (min–max) over ranks"]),
        ],
    )
    for kind in kinds:
        rows = [
            next((c for c in (r.communication.collectives if r.communication else []) if c.kind == kind), None)
            for r in merged.reports
        ]
        ms = [c.in_flight_ms if c else 0.0 for c in rows]
        calls = max((c.calls_per_step for c in rows if c), default=0.0)
        cells = [f"{m:.2f}" for m in ms] if few else [_range(Stat.of(ms))]
        table.add_row(kind, f"{calls:.1f}", *cells)
    _show(console, table)


def _print_rank_notes(merged: RanksReport, console: Console) -> None:
    """Notes said by every rank once, the others with their rank; then the traces."""
    for note in merged.notes:
        console.print(f"note: {escape(note)}")
    said: dict[str, list[int]] = {}
    for rank, report in zip(merged.ranks, merged.reports, strict=True):
        for note in report.notes:
            said.setdefault(note, []).append(rank)
    for note, ranks in said.items():
        who = "every rank" if len(ranks) == merged.world_size else ", ".join(f"rank {r}" for r in ranks)
        console.print(f"note ({who}): {escape(note)}")
    mfus = [f"rank {r} {report.mfu.mfu:.1%}" for r, report in zip(merged.ranks, merged.reports, strict=True) if report.mfu]
    if mfus:
        method = merged.reports[0].mfu.method if merged.reports[0].mfu else ""
        console.print(f"\nMFU ({escape(method)}): {', '.join(mfus)}")
    tokens = [report.tokens_per_s for report in merged.reports if report.tokens_per_s]
    if tokens:
        slowest = merged.position(merged.slowest_rank) if len(tokens) == merged.world_size else 0
        console.print(f"tokens/s {_range(tokens[slowest], '{:,.0f}')} (the whole run's, as the slowest rank measured it)")
    for rank, report in zip(merged.ranks, merged.reports, strict=True):
        if report.script_error:
            console.print(f"[red]rank {rank}'s script raised inside the window[/red]: {escape(report.script_error)}")
    ranked = zip(merged.ranks, merged.reports, strict=True)
    traces = [(f"rank {r}", report.trace_path) for r, report in ranked if report.trace_path]
    if merged.merged_trace:
        traces.append(("all ranks in one timeline", merged.merged_trace))
    for who, path in traces:
        console.print(f"trace ({who}): {escape(path)}")
    if traces:
        console.print(
            f"  {TRACE_HINT}; in a rank's trace, gloo's collectives are on their own thread "
            "(pt_gloo_runloop), beside the main thread's backward"
        )
    logs = [report.profiler_log for report in merged.reports if report.profiler_log]
    if logs:
        console.print(f"the profiler library's own messages: {escape(', '.join(logs))}")


def print_gpu(report: ProfileReport, console: Console) -> None:
    """The answer to "is the GPU computing or waiting?" and the GPU table (rows add up to the step)."""
    table = gpu_table(report)
    if report.gpu is None or table is None:
        return
    console.print(f"[bold]{escape(report.gpu.gate_sentence)}[/bold]")
    clocked = gpu_clock_line(report)
    if clocked:
        console.print(escape(clocked))
    _draw(table, console)
    for line in gpu_detail_lines(report):
        console.print(escape(line))
    console.print()
