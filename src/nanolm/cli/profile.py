"""``nanolm profile``, ``profile compare``, ``mfu`` and ``peak``: thin commands over nanolm.profiling."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError
from .output import console, json_option, print_json, set_option


def window_options(f):
    f = click.option("--repeat", default=3, show_default=True, help="Measured windows (median and min–max over them).")(f)
    f = click.option("--active", default=3, show_default=True, help="Measured steps per window.")(f)
    f = click.option("--warmup", default=1, show_default=True, help="Profiler warm-up steps per window (not measured).")(f)
    return click.option("--wait", default=1, show_default=True, help="Steps skipped before each window.")(f)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@set_option
@window_options
@click.option("--trace", type=click.Path(path_type=Path), default="profile-trace.json", show_default=True,
              help="Chrome/Perfetto trace of the last window (gzipped when large).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the whole report as JSON here.")
@click.option("--measure-peak", is_flag=True, help="Measure the device's matmul peak instead of the datasheet value.")
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the trace (more overhead).")
@click.option("--run-to-end", is_flag=True, help="Let a profiled script run to completion after the window.")
@click.option("--tokens-per-step", type=click.IntRange(min=1), help="Tokens per step of a profiled script, for 6N·tokens/s.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def profile(set_: tuple[str, ...], wait: int, warmup: int, active: int, repeat: int, trace: Path, json_path: Path | None,
            measure_peak: bool, with_stack: bool, run_to_end: bool, tokens_per_step: int | None,
            command: tuple[str, ...]) -> None:
    """Where a training step's time goes: phases, operators, syncs, a verdict and MFU.

    \b
    nanolm profile [--set key=value ...]          profile nanolm's own training steps
    nanolm profile -- python train.py ARGS        profile someone else's script, unchanged
    nanolm profile compare BEFORE.json AFTER.json --why "..."
    """
    if command and command[0] == "compare":
        return profile_compare.main(args=list(command[1:]), prog_name="nanolm profile compare", standalone_mode=False)
    from ..profiling.profile import profile_script, profile_training
    from ..profiling.render import print_report
    from ..profiling.session import Window, check_trace_path

    window = Window(wait, warmup, active, repeat)
    from ..io import check_writable_file

    check_trace_path(trace)
    if json_path is not None:
        check_writable_file(json_path, "--json", "report.json")
    if command:
        report = profile_script(list(command), window, trace, run_to_end, tokens_per_step, measure_peak, with_stack)
    else:
        report = profile_training(list(set_), window, trace, measure_peak, with_stack)
    print_report(report, console())
    if json_path is not None:
        from ..io import atomic_write_json

        atomic_write_json(json_path, report.to_dict())
        console().print(f"report written to {json_path}")
    return None


@click.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--why", help="What changed between the two runs.")
@json_option
def profile_compare(before: Path, after: Path, why: str | None, json_out: bool) -> None:
    """Before / after / why table of two profile reports (nanolm profile --json FILE)."""
    from ..profiling.compare import compare_reports
    from ..profiling.render import print_comparison

    comparison = compare_reports(before, after, why)
    if json_out:
        print_json(comparison)
        return
    print_comparison(comparison, console())


@click.command()
@click.option("--params", type=float, help="Parameters N (non-embedding), e.g. 1.24e8.")
@click.option("--preset", help="Take N from a nanolm preset instead (gpt2-124m, small, tiny).")
@click.option("--tokens-per-s", type=float, required=True, help="Training throughput, tokens/s.")
@click.option("--device", help="Device name for the datasheet peak (h100, a100, ...).")
@click.option("--peak-tflops", type=float, help="Or give the peak directly, TFLOP/s.")
@json_option
def mfu(params: float | None, preset: str | None, tokens_per_s: float, device: str | None, peak_tflops: float | None,
        json_out: bool) -> None:
    """MFU offline: 6·N·tokens/s over the device's peak."""
    from ..model import GPT, preset_config
    from ..profiling.mfu import Peak, compute_mfu, lookup_peak

    if (params is None) == (preset is None):
        raise UserError("give exactly one of --params N or --preset NAME")
    layers = d_model = seq = None
    if preset is not None:
        from ..corpus import corpus_words
        from ..model import PRESETS
        from ..tokenizers import WordTokenizer

        try:  # the preset's own vocabulary, else the embedded corpus's (what it trains on by default)
            vocab = PRESETS[preset].get("vocab_size") if preset in PRESETS else None
            cfg = preset_config(preset, vocab_size=vocab or WordTokenizer(corpus_words()).vocab_size)
        except ValueError as e:
            raise UserError(str(e)) from None
        params = float(GPT(cfg).num_params(exclude_embeddings=True))
        layers, d_model, seq = cfg.n_layer, cfg.d_model, cfg.block_size
    if peak_tflops is not None:
        peak = Peak("given", peak_tflops * 1e12, "bf16", "given")
    elif device is not None:
        peak = lookup_peak(device)
    else:
        raise UserError("give --device NAME (e.g. h100) or --peak-tflops X")
    report = compute_mfu(params, tokens_per_s, peak, n_layer=layers, d_model=d_model, seq_len=seq)
    if json_out:
        print_json(report)
        return
    console().print(f"6 · {params:.3g} · {tokens_per_s:.3g} = {report.flops_per_s:.3g} FLOP/s over "
                     f"{peak.flops_per_s:.3g} ({peak.name}, {peak.source}) → MFU {report.mfu:.1%}"
                     + (f"; with attention 12·L·d·T: {report.mfu_with_attention:.1%}" if report.mfu_with_attention else ""))


@click.command()
@click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto.")
@json_option
def peak(device: str, json_out: bool) -> None:
    """Measure this device's achievable matmul FLOP/s in each dtype it supports."""
    from ..profiling.mfu import measure_peaks
    from ..train import resolve_device

    peaks = measure_peaks(resolve_device(device).type)
    if json_out:
        print_json(peaks)
        return
    from rich.table import Table

    table = Table(title=f"measured matmul peak on {device}")
    table.add_column("dtype")
    table.add_column("TFLOP/s", justify="right")
    for p in peaks:
        table.add_row(str(p.dtype).replace("torch.", ""), f"{p.flops_per_s / 1e12:.3f}")
    console().print(table)


