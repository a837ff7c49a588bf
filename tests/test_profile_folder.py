"""nanolm profile analyze DIR: a folder of rank traces, each rank analysed in a process of its own, the ranks side by
side (the slowest, the spread, a straggler, communication exposed per rank) as --nproc gives them; a folder of the
ranks' reports merged without reading a trace; bad folders one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_trace import reference_example
from nanolm.errors import UserError
from nanolm.profiling.folder import analyze_folder, rank_files

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def rank_trace(rank: int, data_ms: float, allreduce_ms: float, steps: int = 6) -> dict:
    """The reference example's step with `data_ms` of batch making, then an all-reduce kernel of `allreduce_ms` on
    the compute stream (all of it exposed: no compute kernel runs beside it)."""
    b = reference_example(steps=0)
    for _ in range(steps):
        with b.step():
            with b.range("between"):
                b.sync()
                b.host(data_ms * 1000)
            with b.range("forward"):
                b.launches(6, "ampere_sgemm_128x64_nn", 1_000, op="aten::mm")
            with b.range("backward"):
                b.launches(12, "ampere_sgemm_128x64_nn", 1_000, op="aten::mm")
                b.launch(NCCL, allreduce_ms * 1000, op="c10d::allreduce_")
    data = b.build()
    data["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    return data


def planted(folder: Path, slow_rank: int, world: int, names=None, numbers=None) -> Path:
    """`world` ranks; `slow_rank` (a position) makes its batch 15 ms slower, the others wait those 15 ms in the
    all-reduce. numbers: the ranks the traces' distributedInfo gives (0, 1, ... unless given)."""
    folder.mkdir(exist_ok=True)
    for r in range(world):
        slow = r == slow_rank
        data = rank_trace(numbers[r] if numbers else r, 65.0 if slow else 50.0, 0.5 if slow else 15.5)
        name = names[r] if names else f"trace_{'xyzw'[r]}.json"  # the names do not say the rank
        (folder / name).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("world, slow", [(2, 1), (4, 2)])
def test_a_folder_of_ranks_names_the_planted_straggler_and_the_exposed_all_reduce(world, slow, tmp_path):
    merged = analyze_folder(planted(tmp_path / "ranks", slow, world), jobs=2)
    assert [row.rank for row in merged.rows] == list(range(world))  # from distributedInfo, not the names
    assert merged.straggler == slow and merged.slowest_rank == slow
    for row in merged.rows:
        waited = 0.5 if row.rank == slow else 15.5
        assert row.exposed_ms == pytest.approx(waited, abs=0.3)  # the all-reduce kernel, all of it exposed
        assert row.in_flight_ms == pytest.approx(waited, abs=0.3)
    # the slow rank's own work is 15 ms more a step: its batch; the steps themselves are alike
    fast = next(row for row in merged.rows if row.rank != slow)
    assert merged.rows[slow].work_ms - fast.work_ms == pytest.approx(15.0, abs=0.5)
    assert abs(merged.rows[slow].step_ms - fast.step_ms) < 1.0


def test_worker_processes_give_the_reports_one_process_gives(tmp_path):
    folder = planted(tmp_path / "ranks", 1, 2)
    many, one = analyze_folder(folder, jobs=2), analyze_folder(folder, jobs=1)
    assert [r.to_dict() for r in many.reports] == [r.to_dict() for r in one.reports]
    assert many.to_dict() == one.to_dict()


def test_a_folder_of_the_ranks_reports_merges_as_the_traces_do(tmp_path, cli):
    """Each rank analysed on its own (anywhere: one array task per rank), then the folder of reports merged."""
    folder = planted(tmp_path / "ranks", 1, 2)
    reports = tmp_path / "reports"
    reports.mkdir()
    for f in rank_files(folder)[0]:
        result = cli("profile", "analyze", str(f.path), "--summary-out", str(reports / f"rank{f.rank}.json"), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    from_traces, from_reports = analyze_folder(folder, jobs=1), analyze_folder(reports)
    steps = cli("profile", "analyze", str(reports), "--steps", "2:4", cwd=tmp_path)  # summaries' steps are theirs
    assert steps.returncode == 2 and "holds summaries, each already of its own steps" in steps.stderr
    jobs = cli("profile", "analyze", str(next(folder.iterdir())), "--jobs", "2", cwd=tmp_path)
    assert jobs.returncode == 2 and "--jobs is for a folder of rank traces" in jobs.stderr
    assert [r.to_dict() for r in from_reports.reports] != []
    assert from_reports.straggler == from_traces.straggler == 1
    assert [row.exposed_ms for row in from_reports.rows] == pytest.approx([row.exposed_ms for row in from_traces.rows])
    plain = tmp_path / "plain"
    plain.mkdir()
    result = cli("profile", "analyze", str(next(folder.iterdir())), "--json", str(plain / "rank0.json"), cwd=tmp_path)
    assert result.returncode == 0
    with pytest.raises(UserError, match="without its windows' communication .* --summary-out"):
        analyze_folder(plain)


def test_ranks_from_the_names_else_the_name_order(tmp_path):
    folder = tmp_path / "named"
    planted(folder, 0, 2, names=["worker_7.json", "worker_3.json"])
    for p in folder.iterdir():  # no distributedInfo: the names say the rank
        data = json.loads(p.read_text())
        del data["distributedInfo"]
        p.write_text(json.dumps(data))
    files, notes = rank_files(folder)
    assert [(f.rank, f.path.name) for f in files] == [(3, "worker_3.json"), (7, "worker_7.json")]
    assert "file names" in notes[0]
    for p in folder.iterdir():
        p.rename(folder / p.name.replace("worker_7", "a").replace("worker_3", "b"))
    files, notes = rank_files(folder)
    assert [(f.rank, f.path.name) for f in files] == [(0, "a.json"), (1, "b.json")] and "name order" in notes[0]


def test_a_folder_that_is_not_one_of_ranks_is_one_line(tmp_path, cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="holds no trace"):
        rank_files(empty)
    mixed = planted(tmp_path / "mixed", 1, 2)
    (mixed / "notes.json").write_text('{"a": 1}')
    result = cli("profile", "analyze", str(mixed), cwd=tmp_path)
    assert result.returncode == 2 and "notes.json in folder" in result.stderr
    assert "is neither a rank trace nor a summary" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    (mixed / "notes.json").write_text("")  # a rank the profiler never finished writing: said as empty
    with pytest.raises(UserError, match=r"notes.json in folder .* is empty or cannot be read"):
        rank_files(mixed)
    (mixed / "notes.json").write_bytes(b"\x1f\x8b\x08garbage")  # a gzip file that does not unpack
    with pytest.raises(UserError, match=r"is empty or cannot be read \(unpacked\)"):
        rank_files(mixed)
    (mixed / "notes.json").unlink()
    a_summary = mixed / "rank9.json"
    a_summary.write_text(json.dumps(analyze_folder(mixed, jobs=1).reports[0].to_dict()))
    with pytest.raises(UserError, match=r"mixes rank traces \(trace_x.json\) and summaries \(rank9.json\)"):
        rank_files(mixed)


def test_the_command_prints_the_ranks_and_writes_each_report(tmp_path, cli):
    folder = planted(tmp_path / "ranks", 1, 2)
    out = tmp_path / "out.json"
    result = cli("profile", "analyze", str(folder), "--jobs", "1", "--json", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "saved traces, one per rank" in result.stdout and "straggler: rank 1" in result.stdout
    merged = json.loads(out.read_text())
    assert merged["straggler"] == 1
    assert {p.name for p in tmp_path.glob("out-rank*.json")} == {"out-rank0.json", "out-rank1.json"}


def test_a_folder_of_some_ranks_of_a_job_names_them_by_their_own_numbers(tmp_path, cli):
    """Ranks 4 and 6 of a job (not 0 and 1): the straggler, the slowest and every table say the traces' own ranks."""
    folder = planted(tmp_path / "ranks", 1, 2, numbers=[4, 6])
    merged = analyze_folder(folder, jobs=1)
    assert merged.ranks == [4, 6] and merged.straggler == 6 and merged.slowest_rank == 6 and merged.fastest_rank == 4
    assert merged.verdict.headline.startswith("rank 6 (the straggler)")
    assert "rank 4: " in merged.verdict.also[0]
    result = cli("profile", "analyze", str(folder), "--jobs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "straggler: rank 6" in result.stdout and "rank 6, the slowest, in detail" in result.stdout
    assert "rank 4 in flight ms" in " ".join(result.stdout.split())


def test_the_ranks_at_once_are_what_the_free_memory_holds_and_a_range_needs_less(tmp_path, monkeypatch):
    from nanolm.profiling import folder as folder_module
    from nanolm.profiling.trace.load import expected_peak_bytes, unpacked_size

    files, _ = rank_files(planted(tmp_path / "ranks", 1, 4))
    every = expected_peak_bytes(unpacked_size(files[0].path))
    device_only = expected_peak_bytes(unpacked_size(files[0].path), 0.0)
    monkeypatch.setattr(folder_module, "available_memory", lambda: 2 * every + 1)
    notes: list[str] = []
    assert folder_module._jobs_that_fit(files, 4, notes) == 2 and "2 ranks at a time, not 4" in notes[0]
    monkeypatch.setattr(folder_module, "available_memory", lambda: (device_only + every) // 2)
    with pytest.raises(UserError, match="--steps A:B"):
        folder_module._jobs_that_fit(files, 4, [])
    assert folder_module._jobs_that_fit(files, 4, [], steps_given=True) == 1  # a range's least need fits once
