"""``nanolm profile``, ``profile compare``, ``mfu`` and ``peak``: thin commands over nanolm.profiling."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError
from ..runs.artifacts import PROFILES
from .output import (
    INTEGER,
    MAX_PROCESSES,
    Count,
    StepSlice,
    check_report,
    console,
    count,
    default_output,
    emit,
    finite,
    json_option,
    progress_bar,
    report_option,
    runs_dir_option,
    set_option,
    write_run_report,
)

# The run's config keys a profile does not take: the throwaway run's own bookkeeping (where it goes, the trackers
# it must not log to, the groups it does not belong to)
NOT_PROFILED = ("name", "group", "experiment", "runs_dir", "tracker")
# --wait, --warmup, --active and --repeat stop at 64 bits here; nanolm.profiling.record.session.Window refuses more than its
# MAX_STEPS (1000) steps and MAX_REPEAT (100) windows in its own words ("--wait 5000 is too many steps (at most
# 1000)") before anything runs. A trace's group (analyze --group) stops at the same 1000 steps.
MAX_WINDOW_STEPS = 1000
MAX_CORES = 65_536  # CPU cores of one machine


def window_options(f):
    f = click.option(
        "--windows",
        "windows_schedule",
        type=click.Choice(["one", "separate"]),
        default="one",
        show_default=True,
        help="one: the windows recorded back to back in one recording, split after the "
        "run (no profiler stop between them); separate: a start and a stop around each window.",
    )(f)
    f = click.option(
        "--repeat",
        type=INTEGER,
        default=3,
        show_default=True,
        help="Measured windows (median and min–max over them; at most 100).",
    )(f)
    f = click.option("--active", type=INTEGER, default=3, show_default=True, help="Measured steps per window (at most 1000).")(f)
    f = click.option(
        "--warmup",
        type=INTEGER,
        default=1,
        show_default=True,
        help="Profiler warm-up steps per window (not measured; at most 1000).",
    )(f)
    return click.option(
        "--wait", type=INTEGER, default=1, show_default=True, help="Steps skipped before each window (at most 1000)."
    )(f)


class _ProfileCommand(click.Command):
    """Remembers whether the command line ended in a bare `--` (click drops the `--` itself)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["nothing_after_dashes"] = "--" in args and not args[args.index("--") + 1 :]
        return super().parse_args(ctx, args)


@click.command(cls=_ProfileCommand, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@set_option
@window_options
@click.option(
    "--trace",
    type=click.Path(path_type=Path),
    help="Chrome/Perfetto trace of the last window (gzipped when large); default: "
    "runs/profiles/<time>-trace.json, so nothing lands in the working folder.",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the whole report as JSON here.")
@click.option("--measure-peak", is_flag=True, help="Measure the device's matmul peak instead of the datasheet value.")
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the trace (more overhead).")
@click.option("--run-to-end", is_flag=True, help="Let a profiled script run to completion after the window.")
@click.option("--tokens-per-step", type=Count(min=1), help="Tokens per step of a profiled script, for 6N·tokens/s.")
@click.option(
    "--wall-seconds",
    type=finite(),
    default=10.0,
    show_default=True,
    help="A script with no optimizer step by then gets a wall-clock window of these first seconds.",
)
@click.option(
    "--expect",
    "expect_tokens",
    type=finite(),
    metavar="TOKENS_PER_S",
    help="The throughput you expected: the report sets it beside the measured one and says where the missing time goes.",
)
@click.option(
    "--expect-mfu", type=finite(), metavar="MFU", help="Or the MFU you expected, in (0, 1]: expected tokens/s = peak × MFU / 6N."
)
@click.option(
    "--isolate",
    is_flag=True,
    help="Also measure the input pipeline alone (no model) and the model alone on replayed batches "
    "(no loader): input-bound or model-bound by two measurements.",
)
@click.option(
    "--nproc",
    type=count(MAX_PROCESSES, "ranks one machine runs here", min=None),
    metavar="N",
    help="Data-parallel: run N ranks with torch's elastic launcher (torchrun) and profile each; a script "
    "must join the process group itself (torchrun-style). One trace per rank.",
)
@click.option(
    "--run",
    "run_ref",
    metavar="RUN",
    help="Profile this nanolm run's training: its config (with --set on top), trained afresh in a throwaway "
    "folder (the run's checkpoints and metrics are left as they are), and keep the profile in the run: "
    "RUN/profiles/<time>.json and <time>-trace.json, where nanolm report reads it (with --nproc: rank "
    "0's report).",
)
@runs_dir_option
@report_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def profile(
    set_: tuple[str, ...],
    wait: int,
    warmup: int,
    active: int,
    repeat: int,
    windows_schedule: str,
    trace: Path,
    json_path: Path | None,
    measure_peak: bool,
    with_stack: bool,
    run_to_end: bool,
    tokens_per_step: int | None,
    wall_seconds: float,
    expect_tokens: float | None,
    expect_mfu: float | None,
    isolate: bool,
    nproc: int | None,
    run_ref: str | None,
    runs_dir: str,
    report: bool,
    command: tuple[str, ...],
) -> int | None:
    """Where a training step's time goes: phases, operators, syncs, a verdict and MFU.

    \b
    nanolm profile [--set key=value ...]          profile nanolm's own training steps
    nanolm profile --run RUN [--report]           ... with RUN's config; the profile kept in RUN/profiles/
    nanolm profile -- python train.py ARGS        profile someone else's script, unchanged
    nanolm profile --nproc 2 -- train.py ARGS     each rank of a torchrun-style (DDP) script
    nanolm profile --nproc 2 [--set key=value]    each rank of nanolm's own data-parallel training
    nanolm profile compare BEFORE.json AFTER.json --why "..."
    nanolm profile analyze TRACE.json[.gz]        the full report from a recorded torch.profiler trace

    When a profiled script fails on its own (a non-zero exit; an uncaught error is 1), the report is
    still printed and written, and the command then exits with the script's exit code.
    """
    if command and command[0] == "compare":
        return profile_compare.main(args=list(command[1:]), prog_name="nanolm profile compare", standalone_mode=False)
    if command and command[0] == "analyze":
        return profile_analyze.main(args=list(command[1:]), prog_name="nanolm profile analyze", standalone_mode=False)
    if click.get_current_context().meta.get("nothing_after_dashes"):
        raise UserError(
            "nothing after --: give the command to profile (nanolm profile -- python train.py ARGS), "
            "or leave out -- to profile nanolm's own training"
        )
    from ..io import check_writable_file
    from ..profiling.judge.expect import Expected
    from ..profiling.record.session import Window, check_trace_path
    from ..profiling.record.training import profile_script, profile_training, script_argv
    from ..profiling.show.terminal import print_report

    window = Window(wait, warmup, active, repeat, separate=windows_schedule == "separate")
    expected = Expected.given(expect_tokens, expect_mfu)  # checked before anything runs
    run_dir, set_ = _profiled_run(run_ref, runs_dir, command, set_)
    _check_overrides(set_, command)
    check_report(report, run_dir, "no run is profiled: give --run RUN to profile a run's training and keep the profile in it")

    if command:
        script_argv(list(command))  # a missing script is refused before anything is created on disk
    if nproc is not None:
        _check_ranks(nproc, isolate, expected, bool(command))  # before anything is created on disk
    saved = _run_profile_path(run_dir) if run_dir is not None else None
    if saved is not None and trace is None:  # the trace beside the profile, where the run's page links it
        trace = saved.with_name(f"{saved.stem}-trace.json")
    trace = check_trace_path(trace or default_output(PROFILES, "trace.json"))  # never the working folder
    if json_path is not None:
        check_writable_file(json_path, "--json", "report.json")
        if nproc is not None:
            from ..profiling.record.ranks import rank_file

            for rank in range(nproc):
                check_writable_file(rank_file(json_path, rank), "--json", "report.json")
    if nproc is not None:
        code = _profile_ranks(
            list(command),
            list(set_),
            nproc,
            window,
            trace,
            json_path,
            run_to_end,
            tokens_per_step,
            measure_peak,
            with_stack,
            wall_seconds,
            saved,
        )
        if report:
            write_run_report(run_dir)
        return code
    if command:
        result = profile_script(
            list(command),
            window,
            trace,
            run_to_end,
            tokens_per_step,
            measure_peak,
            with_stack,
            wall_seconds,
            expected=expected,
            isolate=isolate,
        )
    else:
        result = profile_training(list(set_), window, trace, measure_peak, with_stack, expected=expected, isolate=isolate)
    # Not emit(): the report is always printed; --json FILE writes it to a file, not to stdout.
    print_report(result, console())
    _write_profile(result, json_path, saved)
    if report:
        write_run_report(run_dir)
    if result.script_exit_code:  # the script failed on its own: so does the command, once the report is out
        console().print(f"the script exited with code {result.script_exit_code}; nanolm profile exits with it too")
        return result.script_exit_code
    return None


def _check_ranks(nproc: int, isolate: bool, expected: object, script: bool) -> None:
    from ..profiling.record.ranks import check_ranks

    for given, flag in ((isolate, "--isolate"), (expected is not None, "--expect/--expect-mfu")):
        if given:
            raise UserError(f"{flag} works on one process; leave it out with --nproc, or profile one process")
    if script:  # nanolm's own training is checked against its config's device (profile_training_ranks)
        check_ranks(nproc)


def _write_profile(result, json_path: Path | None, saved: Path | None) -> None:
    """The report at --json FILE, and kept in the run (--run) at `saved`: the same file (to_dict as it is, which
    nanolm profile compare and the run's page read back)."""
    from ..io import atomic_write_json

    if json_path is not None:
        atomic_write_json(json_path, result.to_dict())
        console().print(f"report written to {json_path}")
    if saved is not None:
        atomic_write_json(saved, result.to_dict())
        console().print(f"profile kept in the run: {saved}")


def _profiled_run(
    run_ref: str | None, runs_dir: str, command: tuple[str, ...], overrides: tuple[str, ...]
) -> tuple[Path | None, tuple[str, ...]]:
    """(the run --run names, the config overrides to profile): RUN's own config as key=value overrides, then the
    --set ones on top; (None, --set) without --run."""
    from ..runs import read_manifest, resolve_run

    if run_ref is None:
        return None, overrides
    if command:
        raise UserError(
            "--run profiles nanolm's own training with the run's config; a script is profiled as it is: "
            "leave out --run (and write its report with --json FILE)"
        )
    run_dir = resolve_run(run_ref, runs_dir)
    config = read_manifest(run_dir).config
    own = tuple(f"{k}={'none' if v is None else v}" for k, v in config.items() if k not in NOT_PROFILED)
    return run_dir, (*own, *overrides)


def _check_overrides(overrides: tuple[str, ...], command: tuple[str, ...]) -> None:
    """Profiling nanolm's own training: each --set value read (a key it lacks, a number that is not finite or past
    64 bits: one line) before the trace's folder is made."""
    if not command:
        from ..config import check_finite, parse_overrides

        check_finite(parse_overrides(list(overrides)))


def _run_profile_path(run_dir: Path) -> Path:
    """RUN/profiles/<time>.json (a new name each time: the page compares the newest two), checked writable now."""
    from ..io import check_writable_file

    return check_writable_file(PROFILES.timestamped(run_dir), "--run", "profile.json")


def _profile_ranks(
    command: list[str],
    overrides: list[str],
    nproc: int,
    window,
    trace: Path,
    json_path: Path | None,
    run_to_end: bool,
    tokens_per_step: int | None,
    measure_peak: bool,
    with_stack: bool,
    wall_seconds: float,
    saved: Path | None = None,
) -> int | None:
    """--nproc N: one profile per rank, the ranks side by side, the straggler and the merged verdict."""
    from ..io import atomic_write_json
    from ..profiling.record import ranks
    from ..profiling.show.terminal import print_ranks_report

    if command:
        merged = ranks.profile_script_ranks(
            command, nproc, window, trace, run_to_end, tokens_per_step, measure_peak, with_stack, wall_seconds
        )
    else:
        merged = ranks.profile_training_ranks(overrides, nproc, window, trace, measure_peak, with_stack)
    print_ranks_report(merged, console())
    if json_path is not None:  # the whole, and each rank's report alone (for nanolm profile compare)
        atomic_write_json(json_path, merged.to_dict())
        for rank, report in enumerate(merged.reports):
            atomic_write_json(ranks.rank_file(json_path, rank), report.to_dict())
        console().print(f"report written to {json_path}; each rank's to {ranks.rank_file(json_path, '<N>')}")
    if saved is not None and merged.reports:  # the run's page reads one profile: rank 0's
        atomic_write_json(saved, merged.reports[0].to_dict())
        console().print(f"rank 0's profile kept in the run: {saved}")
    if merged.script_exit_code:
        console().print(f"a rank's script exited with code {merged.script_exit_code}; nanolm profile exits with it too")
        return merged.script_exit_code
    return None


@click.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--why", help="What changed between the two runs.")
@click.option(
    "--log",
    "log_path",
    type=click.Path(path_type=Path),
    help="Also add this change as a row of a Markdown before / after / why table kept in this file.",
)
@json_option
def profile_compare(before: Path, after: Path, why: str | None, log_path: Path | None, json_out: bool) -> None:
    """Before / after / why table of two profile reports (nanolm profile --json FILE).

    Each change is "better" or "worse" only beyond the run-to-run spread of the repeated windows;
    otherwise "within noise"."""
    from ..profiling.compare import append_to_log, compare_reports
    from ..profiling.show.terminal import print_comparison

    comparison = compare_reports(before, after, why)
    if log_path is not None:
        append_to_log(comparison, log_path)
    emit(comparison, lambda c: print_comparison(c, console()), json_out)
    if log_path is not None and not json_out:
        console().print(f"row added to the before / after / why table in {log_path}")


@click.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--truth",
    type=click.Path(path_type=Path),
    help="A JSON file of what the trace cannot hold (unprofiled_ms, settings, cores, matmul_flops, peak_tflops).",
)
@click.option(
    "--unprofiled-ms",
    type=finite(min=0, min_open=True),
    help="The step without the profiler, ms: the report's figures are then for it.",
)
@click.option(
    "--group",
    type=count(MAX_WINDOW_STEPS, "steps of a profiler window here"),
    default=3,
    show_default=True,
    help="Steps per group (a window): the median group makes the tables.",
)
@click.option(
    "--cores",
    type=count(MAX_CORES, "CPU cores of one machine here"),
    help="CPU cores of the machine that ran it (prefetch projections).",
)
@click.option(
    "--matmul-flops",
    type=finite(min=0, min_open=True),
    help="GPU traces: matmul + attention FLOPs of one step, for achieved TFLOP/s and the compute projection.",
)
@click.option(
    "--peak-tflops", type=finite(min=0, min_open=True), help="GPU traces: the measured bf16 matmul peak (nanolm peak), TFLOP/s."
)
@click.option(
    "--steps",
    type=StepSlice(),
    help="Only ProfilerStep#A up to #B (B left out; A: and :B also): the host events outside them are skipped as "
    "the file is read (every device activity is kept), so a few steps of a long trace take far less memory.",
)
@click.option(
    "--jobs",
    type=count(MAX_PROCESSES, "worker processes"),
    help="A folder of rank traces: ranks analysed at a time, each in a process of its own (default: the cores; "
    "fewer where the free memory holds fewer).",
)
@click.option(
    "--summary-out",
    type=click.Path(path_type=Path),
    help="One rank's trace: write its summary here (the report with each window's communication), for "
    "nanolm profile analyze DIR to merge a folder of them.",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the whole report as JSON here.")
def profile_analyze(
    trace: Path,
    truth: Path | None,
    unprofiled_ms: float | None,
    group: int,
    cores: int | None,
    matmul_flops: float | None,
    peak_tflops: float | None,
    steps: tuple[int | None, int | None] | None,
    jobs: int | None,
    summary_out: Path | None,
    json_path: Path | None,
) -> None:
    """The full report from a trace torch.profiler wrote (export_chrome_trace, the TensorBoard plugin's
    files, nanolm profile --trace), plain or gzipped: on a GPU trace, "is the GPU computing or waiting?"
    from the device timeline, first."""
    from ..io import atomic_write_json, check_writable_file
    from ..profiling.assemble import AnalyzeOptions, analyze_trace, options_from_truth, read_truth
    from ..profiling.show.terminal import print_report

    if json_path is not None:
        check_writable_file(json_path, "--json", "report.json")
    if summary_out is not None:
        if trace.is_dir():
            raise UserError("--summary-out is for one rank's trace, not a folder; give one trace, or leave it out")
        check_writable_file(summary_out, "--summary-out", "rank0.json")
    if jobs is not None and not trace.is_dir():
        raise UserError("--jobs is for a folder of rank traces; one trace is analysed in this process: leave it out")
    options = AnalyzeOptions(group, unprofiled_ms, cores, matmul_flops, peak_tflops)
    if truth is not None:
        options = options_from_truth(read_truth(truth), options)
    options.steps = steps
    if trace.is_dir():
        _analyze_rank_folder(trace, options, jobs, json_path)
        return
    options.keep_communication = summary_out is not None
    result = analyze_trace(trace, options)
    if summary_out is not None:
        atomic_write_json(summary_out, result.to_dict())
        console().print(f"this rank's summary written to {summary_out}: nanolm profile analyze on its folder merges them")
    print_report(result, console())
    if json_path is not None:
        atomic_write_json(json_path, result.to_dict())
        console().print(f"report written to {json_path}")


def _analyze_rank_folder(folder: Path, options, jobs: int | None, json_path: Path | None) -> None:
    """profile analyze DIR: the ranks side by side, as --nproc prints them; --json: the whole and each rank's report."""
    from ..io import atomic_write_json
    from ..profiling.folder import analyze_folder
    from ..profiling.record.ranks import rank_file
    from ..profiling.show.terminal import print_ranks_report

    with progress_bar("ranks analysed") as advance:
        merged = analyze_folder(folder, options, jobs, advance)
    print_ranks_report(merged, console())
    if json_path is not None:
        atomic_write_json(json_path, merged.to_dict())
        for row, report in zip(merged.rows, merged.reports, strict=True):
            atomic_write_json(rank_file(json_path, row.rank), report.to_dict())
        console().print(f"report written to {json_path}; each rank's to {rank_file(json_path, '<N>')}")


@click.command()
@click.option("--params", type=finite(), help="Parameters N (non-embedding), e.g. 1.24e8.")
@click.option("--preset", help="Take N from a nanolm preset instead (gpt2-124m, small, tiny).")
@click.option("--tokens-per-s", type=finite(), required=True, help="Training throughput, tokens/s.")
@click.option("--device", help="Device name for the datasheet peak (h100, a100, ...).")
@click.option("--peak-tflops", type=finite(), help="Or give the peak directly, TFLOP/s.")
@json_option
def mfu(
    params: float | None, preset: str | None, tokens_per_s: float, device: str | None, peak_tflops: float | None, json_out: bool
) -> None:
    """MFU offline: 6·N·tokens/s over the device's peak."""
    from ..profiling.measure.mfu import compute_mfu

    if (params is None) == (preset is None):
        raise UserError("give exactly one of --params N or --preset NAME")
    params, shape = (params, {}) if preset is None else _preset_size(preset)
    peak = _given_peak(device, peak_tflops)
    emit(compute_mfu(params, tokens_per_s, peak, **shape), _print_mfu, json_out)


def _preset_size(preset: str) -> tuple[float, dict]:
    """A preset's N (non-embedding parameters) and shape (n_layer, d_model, seq_len: the attention term)."""
    from ..corpus import corpus_words
    from ..model import GPT, PRESETS, preset_config
    from ..tokenizers import WordTokenizer

    try:  # the preset's own vocabulary, else the embedded corpus's (what it trains on by default)
        vocab = PRESETS[preset].get("vocab_size") if preset in PRESETS else None
        cfg = preset_config(preset, vocab_size=vocab or WordTokenizer(corpus_words()).vocab_size)
    except ValueError as e:
        raise UserError(str(e)) from None
    params = float(GPT(cfg).num_params(exclude_embeddings=True))
    return params, {"n_layer": cfg.n_layer, "d_model": cfg.d_model, "seq_len": cfg.block_size}


def _given_peak(device: str | None, peak_tflops: float | None):
    """The peak from --peak-tflops, else from the datasheet of --device."""
    from ..profiling.measure.mfu import Peak, lookup_peak

    if peak_tflops is not None:
        return Peak("given", peak_tflops * 1e12, "bf16", "given")
    if device is not None:
        return lookup_peak(device)
    raise UserError("give --device NAME (e.g. h100) or --peak-tflops X")


def _print_mfu(report) -> None:
    console().print(
        f"6 · {report.n_params:.3g} · {report.tokens_per_s:.3g} = {report.flops_per_s:.3g} FLOP/s over "
        f"{report.peak_flops_per_s:.3g} ({report.peak_source}) → MFU {report.mfu:.1%}"
        + (f"; with attention 12·L·d·T: {report.mfu_with_attention:.1%}" if report.mfu_with_attention else "")
    )


@click.command()
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, mps or auto.")
@json_option
def peak(device: str, json_out: bool) -> None:
    """Measure this device's achievable matmul FLOP/s in each dtype it supports."""
    from ..profiling.record.peak import measure_peaks

    emit(measure_peaks(device), lambda peaks: _print_peaks(peaks, peaks[0].name), json_out)


def _print_peaks(peaks: list, device: str) -> None:
    from rich.table import Table

    table = Table(title=f"measured matmul peak on {device}")
    table.add_column("dtype")
    table.add_column("TFLOP/s", justify="right")
    for p in peaks:
        table.add_row(str(p.dtype).replace("torch.", ""), f"{p.flops_per_s / 1e12:.3f}")
    console().print(table)
