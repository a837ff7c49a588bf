"""Rich rendering of a report's GPU part: the gate sentence first, then where the step's time goes on the GPU."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .analysis import ProfileReport
from .kernels import short_name
from .layout import fit


def print_gpu(report: ProfileReport, console: Console) -> None:
    """The answer to "is the GPU computing or waiting?" and the GPU table (rows add up to the step)."""
    g = report.gpu
    if g is None:
        return
    console.print(f"[bold]{escape(g.gate_sentence)}[/bold]")
    if report.unprofiled_step_ms is not None and report.profiled_over_unprofiled is not None:
        added = report.profiled_over_unprofiled - 1
        console.print(f"unprofiled {report.unprofiled_step_ms.median:.1f} ms; profiled {g.profiled_step_ms:.1f} ms: "
                      + (f"the profiler added {added:.0%}" if added > 0.02 else "the profiler added next to nothing"))
    table = Table(title=f"where a step's time goes on the GPU (ms per {g.basis} step; adds up to the step)")
    for col, just in (("GPU", "left"), ("ms/step", "right"), ("share", "right"), ("top kernels / host ops", "left")):
        table.add_column(col, justify=just, overflow="fold")
    for row in g.rows:
        name = row.name if row.kind != "busy" else f"busy: {row.name}"
        table.add_row(escape(name), f"{row.ms:.2f}", f"{row.share:.0%}", escape("; ".join(short_name(n) for n in row.top)))
    table.add_row("[bold]step[/bold]", f"{g.step_ms:.2f}", "100%", "")
    console.print(fit(table, console))  # a list of the rows where the terminal is too narrow for it
    stats = [f"{g.kernels_per_step:.0f} kernels a step"]
    if g.median_kernel_us is not None:
        stats.append(f"median kernel {g.median_kernel_us:.0f} µs")
    if g.median_launch_us is not None:
        stats.append(f"median launch call {g.median_launch_us:.0f} µs")
    if g.median_launch_delay_us is not None:
        stats.append(f"median launch→start {g.median_launch_delay_us:.0f} µs")
    stats.append(f"deepest queue {g.max_queue_depth}")
    if g.host_blocked_ms:
        stats.append(f"host blocked {g.host_blocked_ms:.1f} ms a step"
                     + (f" ({g.queue_full_ms:.1f} ms 'Command Buffer Full': the GPU's queue was full)"
                        if g.queue_full_ms else ""))
    if g.matmul_tflops is not None:
        stats.append(f"matmul kernels at {g.matmul_tflops:.0f} TFLOP/s")
    console.print("launches: " + "; ".join(stats))
    if g.top_other:
        console.print("unclassified kernels: " + escape(", ".join(f"{short_name(n)} ({ms:.2f} ms)" for n, ms in g.top_other)))
    for note in g.notes:
        console.print(f"note: {escape(note)}")
    console.print()
