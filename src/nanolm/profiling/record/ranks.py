"""``nanolm profile --nproc N``: one profile per rank of a data-parallel run, and what they say together.

The ranks are started by torch's elastic launcher (nanolm.distributed.launch: what ``torchrun --standalone
--nproc-per-node N`` runs), each running nanolm.profiling.record.script --per-rank around the user's torchrun-style
script (which joins the process group itself, from torchrun's environment). Each rank profiles itself with
torch.profiler and writes its report JSON, its trace and its profiler log into a staging folder; this process
reads them, works out the ranks together (RanksReport), and moves the traces into place: one Chrome/Perfetto
trace per rank (``<trace>-rank0.json`` ...), plus ``<trace>-ranks.json`` with every rank in one timeline.

Together:

- each rank's own work is its step less its exposed communication (nanolm.profiling.measure.comm): in a synchronous
  data-parallel step every rank's step is as long as the slowest one's, and a faster rank spends the
  difference waiting in the collectives, so the step times alone cannot tell the ranks apart;
- the ranks are compared window by window (every rank measures the same steps): a rank's work is the median
  over the windows; the slowest rank has the most, the spread is its work less the fastest rank's, and it is
  a straggler when, in every window, it is the slowest by at least STRAGGLER_SHARE of the step. A busy machine
  makes one rank or another slower now and then; a straggler is slower every time;
- the merged verdict is the slowest rank's: every rank's step waits for it, so what limits it limits the run.
  The other ranks' verdicts are listed beside it (a rank that waits for a straggler is communication-bound)."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from ...errors import UserError
from ..judge.ranks import merge_ranks
from ..report import ProfileReport, RanksReport
from . import pythonpath_with_nanolm
from .session import GZIP_ABOVE_BYTES, Window, check_trace_path, commit_trace, with_committed_trace

ONE_THREAD = "1"  # each rank runs its operators on one thread (gloo on CPU: one process per core)


def rank_file(final: Path, rank: int | str) -> Path:
    """profile-trace.json -> profile-trace-rank0.json (the suffixes kept)."""
    stem, dot, rest = final.name.partition(".")
    return final.with_name(f"{stem}-rank{rank}{dot}{rest}")


def ranks_file(final: Path) -> Path:
    """profile-trace.json -> profile-trace-ranks.json: every rank in one timeline."""
    return rank_file(final, "s")


@contextlib.contextmanager
def _rank_environment() -> Iterator[None]:
    """The ranks inherit this process's environment: for the launch, nanolm's source on PYTHONPATH (as for a
    single profiled script) and one operator thread per rank unless the user set OMP_NUM_THREADS."""
    updates = {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", ONE_THREAD),
        "PYTHONPATH": pythonpath_with_nanolm(os.environ.get("PYTHONPATH")),
    }
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_ranks(nproc: int, module: str, args: list[str]) -> str | None:
    """Run `python -m module ARGS` as `nproc` ranks with torch's elastic launcher (nanolm.distributed.launch:
    what torchrun --standalone runs); None when every rank ended well, else what went wrong, in a line. A
    rank whose script fails exits non-zero (runner --per-rank), and the launcher then stops the others."""
    from ...distributed import LaunchFailed, LaunchStopped, launch

    with _rank_environment():
        try:
            launch(nproc, args, module=module)
        except (LaunchFailed, LaunchStopped) as e:
            return str(e)
    return None


def read_rank_reports(folder: Path, nproc: int, failure: str | None, what: str) -> list[ProfileReport]:
    """Each rank's report from the staging folder; a UserError naming the ranks that wrote none, or the
    first error a rank reported."""
    results: dict[int, dict] = {}
    for rank in range(nproc):
        path = folder / f"report-rank{rank}.json"
        if path.is_file():
            with contextlib.suppress(ValueError):
                results[rank] = json.loads(path.read_text())
    for rank, result in sorted(results.items()):
        if "error" in result:
            raise UserError(f"rank {rank}: {result['error']}")
    failed = []
    for rank, result in sorted(results.items()):
        report = result["report"]
        if report.get("script_exit_code"):
            why = report["script_error"] or f"exit code {report['script_exit_code']}"
            failed.append(f"rank {rank}'s script failed: {why}")
    missing = [r for r in range(nproc) if r not in results]
    if missing:
        why = f"; {'; '.join(failed)}" if failed else ""
        raise UserError(
            f"profiling {what} with --nproc {nproc} produced no report for rank{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(str, missing))} ({failure or 'no rank failed'}){why}; the output above says why"
        )
    return [ProfileReport.from_dict(results[r]["report"]) for r in range(nproc)]


class RankStaging:
    """Where the ranks write (a hidden folder beside the final trace, so that moving a trace into place is a
    rename; a temporary folder without a trace), and moving their traces and logs into place."""

    def __init__(self, trace: Path | None) -> None:
        self.trace = trace
        if trace is not None:
            self.folder = trace.with_name(f".{trace.name}.{os.getpid()}.ranks")
            self.folder.mkdir()
        else:
            self.folder = Path(tempfile.mkdtemp(prefix="nanolm-profile-ranks-"))

    def paths(self) -> dict[str, Path | None]:
        """The runner's per-rank paths ("{rank}" is filled in by each rank)."""
        return {
            "report": self.folder / "report-rank{rank}.json",
            "log": self.folder / "profiler-rank{rank}.log",
            "trace": self.folder / "trace-rank{rank}.json" if self.trace is not None else None,
        }

    def commit(self, merged: RanksReport) -> None:
        """Each rank's trace and log into place, then the timeline of all ranks."""
        if self.trace is None:
            return
        for rank, (report, row) in enumerate(zip(merged.reports, merged.rows, strict=True)):
            staged_log = Path(report.profiler_log) if report.profiler_log else self.folder / f"profiler-rank{rank}.log"
            merged.reports[rank] = with_committed_trace(report, report.trace_path, rank_file(self.trace, rank), staged_log)
            row.trace_path = merged.reports[rank].trace_path
        merged.merged_trace = merge_traces([r.trace_path for r in merged.reports], ranks_file(self.trace), self.folder)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def merge_traces(paths: list[str | None], final: Path, staging: Path) -> str | None:
    """One Chrome/Perfetto trace holding every rank's events, each rank's processes named "rank N: ..." (the ranks ran on
    this machine, so their clocks are one clock); gzipped when large, like the ranks' own. None when a rank has
    no trace."""
    if not paths or any(p is None for p in paths):
        return None
    events, base = [], None
    for rank, path in enumerate(paths):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            trace = json.load(f)
        base = base if base is not None else {k: v for k, v in trace.items() if k != "traceEvents"}
        for e in trace.get("traceEvents", []):
            if e.get("ph") == "M" and e.get("name") == "process_name":  # "rank 0: python", "rank 1: GPU 1" ...
                e = {**e, "args": {**e.get("args", {}), "name": f"rank {rank}: {e.get('args', {}).get('name', '')}"}}
            elif e.get("ph") == "M" and e.get("name") == "process_sort_index":
                e = {**e, "args": {**e.get("args", {}), "sort_index": rank}}
            if isinstance(e.get("pid"), str):  # the profiler's own "Spans" rows: one per rank
                e = {**e, "pid": f"{e['pid']} (rank {rank})"}
            events.append(e)
    staged = staging / "trace-ranks.json"
    staged.write_text(json.dumps({**(base or {}), "distributedInfo": {"world_size": len(paths)}, "traceEvents": events}))
    if staged.stat().st_size > GZIP_ABOVE_BYTES:
        gz = staged.with_name(staged.name + ".gz")
        with open(staged, "rb") as src, gzip.open(gz, "wb") as dst:
            shutil.copyfileobj(src, dst)
        staged.unlink()
        staged = gz
    return commit_trace(staged, final)[0]


def check_ranks(nproc: int, device_type: str | None = None) -> int:
    """`nproc` once this machine can run that many ranks on `device_type` ("cuda": one per GPU, "cpu": one per
    core; None: a script's guess, GPUs where there are any); a UserError if not."""
    from ...distributed import check_nproc

    if isinstance(nproc, bool) or not isinstance(nproc, int):
        raise UserError(f"--nproc must be a whole number of processes, e.g. --nproc 2; got {nproc!r}")
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    return check_nproc(nproc, device_type)


def profile_script_ranks(
    command: list[str],
    nproc: int,
    window: Window | None = None,
    trace: str | Path | None = None,
    run_to_end: bool = False,
    tokens_per_step: int | None = None,
    measure_peak: bool = False,
    with_stack: bool = False,
    wall_seconds: float = 10.0,
) -> RanksReport:
    """Profile an unmodified torchrun-style script on `nproc` ranks (each rank profiles itself; see the module's
    docstring). The script joins the process group itself from torchrun's environment (init_process_group())."""
    from .training import MAX_WALL_SECONDS, script_argv

    window = window or Window()
    check_ranks(nproc)
    argv = script_argv(command)
    trace_path = check_trace_path(trace)
    if trace_path is not None:
        for rank in range(nproc):
            check_trace_path(rank_file(trace_path, rank))
    if not (isinstance(wall_seconds, (int, float)) and 0 < wall_seconds <= MAX_WALL_SECONDS):
        raise UserError(f"--wall-seconds must be a number of seconds in (0, {MAX_WALL_SECONDS:g}], got {wall_seconds!r}")
    staging = RankStaging(trace_path)
    try:
        paths = staging.paths()
        args = [
            "--per-rank",
            "--report",
            str(paths["report"]),
            "--log",
            str(paths["log"]),
            "--wait",
            str(window.wait),
            "--warmup",
            str(window.warmup),
            "--active",
            str(window.active),
            "--repeat",
            str(window.repeat),
            "--wall-seconds",
            str(wall_seconds),
            "--windows",
            "separate" if window.separate else "one",
        ]
        if paths["trace"] is not None:
            args += ["--trace", str(paths["trace"])]
        args += [
            flag
            for flag, on in (("--run-to-end", run_to_end), ("--measure-peak", measure_peak), ("--with-stack", with_stack))
            if on
        ]
        if tokens_per_step:
            args += ["--tokens-per-step", str(tokens_per_step)]
        failure = run_ranks(nproc, "nanolm.profiling.record.script", [*args, "--", *argv])
        reports = read_rank_reports(staging.folder, nproc, failure, argv[0])
        merged = merge_ranks(reports, reports[0].target)
        staging.commit(merged)
    finally:
        staging.close()
    return merged


def profile_training_ranks(
    overrides: list[str],
    nproc: int,
    window: Window | None = None,
    trace: str | Path | None = None,
    measure_peak: bool = False,
    with_stack: bool = False,
) -> RanksReport:
    """Profile nanolm's own data-parallel training (the config from `overrides`) on `nproc` ranks: each rank
    runs profile_training as a rank of the run (DDP, gloo on CPU, NCCL on CUDA: nanolm train --nproc's
    training), in a throwaway run folder they share; see the module's docstring for the rest."""
    from ...config import make_config
    from ...device import resolve_device
    from ...training.launch import check_launch

    window = window or Window()
    cfg = make_config(overrides=list(overrides))
    check_ranks(nproc, resolve_device(cfg.device).type)  # the config's device: --set device=cpu on a GPU machine
    check_launch(cfg, nproc)  # a bad config or batch is refused before any rank
    trace_path = check_trace_path(trace)
    if trace_path is not None:
        for rank in range(nproc):
            check_trace_path(rank_file(trace_path, rank))
    staging = RankStaging(trace_path)
    try:
        paths = staging.paths()
        runs = staging.folder / "runs"
        runs.mkdir()
        args = [
            "--report",
            str(paths["report"]),
            "--runs-dir",
            str(runs),
            "--wait",
            str(window.wait),
            "--warmup",
            str(window.warmup),
            "--active",
            str(window.active),
            "--repeat",
            str(window.repeat),
            "--windows",
            "separate" if window.separate else "one",
        ]
        if paths["trace"] is not None:
            args += ["--trace", str(paths["trace"])]
        args += [flag for flag, on in (("--measure-peak", measure_peak), ("--with-stack", with_stack)) if on]
        failure = run_ranks(nproc, "nanolm.profiling.record.ranks", [*args, "--", *overrides])
        reports = read_rank_reports(staging.folder, nproc, failure, "nanolm training")
        merged = merge_ranks(reports, reports[0].target)
        staging.commit(merged)
    finally:
        staging.close()
    return merged


def rank_main(argv: list[str] | None = None) -> None:
    """One rank of profile_training_ranks (``python -m nanolm.profiling.record.ranks``, started by the launcher):
    profile this rank's training steps and write its report ("{rank}" in the paths' file names is this rank)."""
    import argparse

    from .script import per_rank_path
    from .training import profile_training

    parser = argparse.ArgumentParser(prog="python -m nanolm.profiling.record.ranks")
    parser.add_argument("--report", required=True)
    parser.add_argument("--runs-dir", required=True)
    parser.add_argument("--trace")
    for name in ("wait", "warmup", "active", "repeat"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--windows", choices=["one", "separate"], default="one")
    parser.add_argument("--measure-peak", action="store_true")
    parser.add_argument("--with-stack", action="store_true")
    parser.add_argument("overrides", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    report_path = Path(per_rank_path(args.report))
    trace = per_rank_path(args.trace)
    # Every rank stops at the same step: none may measure more windows on its own (Window.extend).
    window = Window(args.wait, args.warmup, args.active, args.repeat, extend=False, separate=args.windows == "separate")
    try:
        report = profile_training(overrides, window, trace, args.measure_peak, args.with_stack, runs_dir=Path(args.runs_dir))
        result = {"report": report.to_dict()}
    except UserError as e:
        result = {"error": str(e)}
    report_path.write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if "error" in result else 0)  # a failed rank makes the launcher stop the others


if __name__ == "__main__":
    rank_main()
