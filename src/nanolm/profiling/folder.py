"""A folder of rank traces (one per rank of a torchrun, FSDP or DDP job, any names), analysed rank by rank in worker
processes, and the ranks side by side: the same RanksReport `nanolm profile --nproc` gives, from saved files.

Each rank is its own process (``jobs`` at a time), so the memory is about jobs × one rank's, and the ranks meet
only as their reports (a few kB each): the cross-rank table is built from those. A rank's report is also the unit of
work for a job too big for one machine: ``nanolm profile analyze RANK_TRACE --summary-out DIR/rankN.json`` anywhere
(one array task per rank), then ``nanolm profile analyze DIR`` merges the folder of summaries without reading a
trace.

A rank is named by the trace's ``distributedInfo.rank`` (Kineto writes it for a distributed job), else by the last
number in its file name (``rank3.json``, ``worker_3.pt.trace.json.gz``), else by its place in name order."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import UserError
from .assemble import AnalyzeOptions, analyze_trace
from .judge.ranks import merge_ranks
from .report import ProfileReport, RanksReport
from .trace.load import available_memory, expected_peak_bytes, unpacked_size
from .trace.stream import file_blocks

TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_HEAD = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_HEAD_BYTES = 1 << 20  # Kineto writes distributedInfo before the events: within the first megabyte


@dataclass
class RankFile:
    """One rank's file in the folder: a trace, or the report of one (`report`)."""

    rank: int
    path: Path
    report: bool = False


def rank_files(folder: Path) -> tuple[list[RankFile], list[str]]:
    """(the folder's rank files by rank, notes on how the ranks were named). A UserError when it holds no trace or
    report, or mixes them."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if not files:
        raise UserError(f"folder {folder} holds no trace (.json or .json.gz); give a folder of one torch.profiler trace per rank")
    heads = {p: _head(p) for p in files}
    kinds = {p: _kind(heads[p]) for p in files}
    give = "give a folder of rank traces, or of the summaries nanolm profile analyze RANK_TRACE --summary-out wrote"
    for p in files:
        if kinds[p] == "empty":
            raise UserError(f"{p.name} in folder {folder} is empty or cannot be read (unpacked); remove it, or {give}")
    reports = [p for p in files if kinds[p] == "summary"]
    others = [p for p in files if kinds[p] == "other"]
    if others:
        raise UserError(f"{others[0].name} in folder {folder} is neither a rank trace nor a summary; remove it, or {give}")
    if reports and len(reports) < len(files):
        trace = next(p for p in files if kinds[p] == "trace")
        raise UserError(f"folder {folder} mixes rank traces ({trace.name}) and summaries ({reports[0].name}); {give}")
    notes: list[str] = []
    ranks = [_rank_in(heads[p]) for p in files]
    if None in ranks or len(set(ranks)) < len(ranks):
        ranks = [_number_in(p.name) for p in files]
        if None in ranks or len(set(ranks)) < len(ranks):
            ranks = list(range(len(files)))
            notes.append("the ranks are the files in name order: neither distributedInfo nor the names tell them apart")
        else:
            notes.append("the ranks are read from the file names (the traces have no distributedInfo rank)")
    out = [RankFile(r, p, bool(reports)) for r, p in zip(ranks, files, strict=True)]
    return sorted(out, key=lambda f: f.rank), notes


def analyze_folder(
    folder: Path,
    options: AnalyzeOptions | None = None,
    jobs: int | None = None,
    on_done: Callable[[int, int], None] | None = None,
) -> RanksReport:
    """Every rank's report and the ranks side by side (module docstring). jobs: worker processes (None: the cores;
    fewer where the free memory holds fewer ranks at once); on_done(done, total) after each rank."""
    files, notes = rank_files(folder)
    options = replace(options or AnalyzeOptions(), keep_communication=True)
    if files[0].report:
        if options.steps is not None:
            raise UserError(
                f"folder {folder} holds summaries, each already of its own steps; --steps chooses steps of traces: "
                "give it to each rank's analyze --summary-out, or leave it out"
            )
        reports = [_read_report(f.path) for f in files]
    else:
        jobs = _jobs_that_fit(files, jobs or os.cpu_count() or 1, notes, options.steps is not None)
        reports = _analyze_each(files, options, jobs, on_done)
    merged = merge_ranks(reports, f"folder {folder}", [f.rank for f in files])
    merged.notes = notes + merged.notes
    return merged


def _analyze_each(files: list[RankFile], options: AnalyzeOptions, jobs: int, on_done) -> list[ProfileReport]:
    """Each rank's report, `jobs` ranks at a time in processes of their own (one, in this process, for jobs=1)."""
    if jobs == 1 or len(files) == 1:
        out = []
        for i, f in enumerate(files):
            out.append(_report_from(f, _analyze_one(str(f.path), options)))
            if on_done:
                on_done(i + 1, len(files))
        return out
    results: dict[int, dict] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending = {pool.submit(_analyze_one, str(f.path), options): i for i, f in enumerate(files)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                i = pending.pop(future)
                try:
                    results[i] = future.result()
                except Exception as e:  # a worker killed (out of memory) or failing: one line naming the rank
                    pool.shutdown(cancel_futures=True)
                    raise UserError(
                        f"rank {files[i].rank} ({files[i].path.name}) could not be analysed ({e.__class__.__name__}: "
                        f"{e}); try --jobs 1, or a few of its steps with --steps A:B"
                    ) from None
                if "error" in results[i]:
                    pool.shutdown(cancel_futures=True)
                    _report_from(files[i], results[i])  # raises the rank's one line now, not after every rank
                if on_done:
                    on_done(len(results), len(files))
    return [_report_from(f, results[i]) for i, f in enumerate(files)]


def _analyze_one(path: str, options: AnalyzeOptions) -> dict:
    """A worker's answer for one rank: its report as plain JSON values, or the one line that refused it."""
    try:
        return {"report": analyze_trace(path, options).to_dict()}
    except UserError as e:
        return {"error": str(e)}


def _report_from(f: RankFile, answer: dict) -> ProfileReport:
    if "error" in answer:
        raise UserError(f"rank {f.rank} ({f.path.name}): {answer['error']}")
    return ProfileReport.from_dict(answer["report"])


def _read_report(path: Path) -> ProfileReport:
    """A rank's summary (``profile analyze RANK_TRACE --summary-out``); a UserError for anything else."""
    try:
        report = ProfileReport.from_dict(json.loads(path.read_text()))
        _ = report.step_ms.median + 0.0, [float(ms) for ms in report.window_step_ms]  # what merge_ranks reads
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(
            f"{path} is not a rank's summary ({e.__class__.__name__}); give a folder of the summaries nanolm profile "
            "analyze RANK_TRACE --summary-out wrote, or of the rank traces"
        ) from None
    if report.window_step_ms and not report.window_exposed_ms:  # --json leaves the windows' communication out
        raise UserError(
            f"{path} is a report without its windows' communication (written by --json); write each rank's with "
            "nanolm profile analyze RANK_TRACE --summary-out FILE"
        )
    return report


def _jobs_that_fit(files: list[RankFile], jobs: int, notes: list[str], steps_given: bool = False) -> int:
    """jobs, or fewer where the free memory holds fewer ranks at once (the largest ranks together); a UserError
    when not even one fits. With a --steps range, a rank's need is the least any range needs (its device
    activities): each worker checks its own range's once its steps are known."""
    needs = sorted((expected_peak_bytes(unpacked_size(f.path), 0.0 if steps_given else 1.0) for f in files), reverse=True)
    free = available_memory()
    jobs = max(1, min(jobs, len(files)))
    if free is None:
        return jobs
    fit = jobs
    while fit > 1 and sum(needs[:fit]) > free:
        fit -= 1
    if needs[0] > free:
        largest = max(files, key=lambda f: unpacked_size(f.path))
        some_steps = "" if steps_given else "analyse a few of its steps with --steps A:B, or "
        raise UserError(
            f"rank trace {largest.path} needs about {needs[0] / 1e9:.1f} GB of memory"
            f"{' for any range of its steps' if steps_given else ''} and this machine has {free / 1e9:.1f} GB free; "
            f"{some_steps}analyse each rank on a machine of its own (nanolm profile analyze RANK_TRACE --summary-out "
            "DIR/rankN.json, then nanolm profile analyze DIR)"
        )
    if fit < jobs:
        notes.append(f"{fit} ranks at a time, not {jobs}: the free memory ({free / 1e9:.1f} GB) holds no more")
    return fit


def _head(path: Path) -> bytes:
    """The file's first megabyte (unpacked where it is gzipped); what of it can be read."""
    out = b""
    try:
        for block in file_blocks(path, 1 << 16):
            out += block
            if len(out) >= _HEAD_BYTES:
                break
    except (OSError, EOFError, zlib.error):  # a damaged file is named when it is analysed
        pass
    return out[:_HEAD_BYTES]


def _kind(head: bytes) -> str:
    """What a file's first megabyte says it is: "trace", "summary" (a ProfileReport's JSON), "empty" (nothing could be
    read), or "other"."""
    if not head.strip():
        return "empty"
    if b'"traceEvents"' in head:
        return "trace"
    if head.lstrip().startswith(b"{") and b'"steps_measured"' in head and b'"step_ms"' in head:
        return "summary"
    return "other"


def _rank_in(head: bytes) -> int | None:
    found = _RANK_IN_HEAD.search(head)
    return int(found.group(1)) if found else None


def _number_in(name: str) -> int | None:
    numbers = re.findall(r"\d+", name.removesuffix(".gz").removesuffix(".json"))
    return int(numbers[-1]) if numbers else None
