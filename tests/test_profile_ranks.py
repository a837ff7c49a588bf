"""nanolm profile --nproc N: each rank profiles itself; the collectives a script calls are found and put in the
communication category (counted against the calls the script plants), a planted straggler is named with its
rank, the traces open as Chrome/Perfetto JSON, and bad input is one line with exit code 2."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nanolm.profiling.measure.comm import collective_kind, intersect, length, subtract, union
from nanolm.profiling.record.ranks import profile_script_ranks, rank_file, ranks_file
from nanolm.profiling.record.session import Window
from nanolm.profiling.report import Bottleneck
from nanolm.profiling.trace.classify import COMMUNICATION, categorize

# A torchrun-style script with hand-written data parallelism, so the collectives per step are known exactly:
# one all-reduce per parameter (4: two Linear layers, weight and bias) and one barrier. Rank SLEEPER sleeps
# SLEEP_MS before each forward: a straggler the other rank waits for in the all-reduces.
PLANTED = textwrap.dedent("""
    import sys, time
    import torch, torch.distributed as dist

    sleeper, sleep_ms, steps = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        if rank == sleeper:
            time.sleep(sleep_ms / 1000)
        loss = model(torch.randn(16, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        dist.barrier()
        opt.step()
    dist.destroy_process_group()
""")
ALL_REDUCES, BARRIERS = 4, 1
SLEEP_MS = 40.0
WINDOW = Window(wait=1, warmup=1, active=3, repeat=2)


def planted_run(tmp_path, sleeper: int):
    script = tmp_path / "planted_ddp.py"
    script.write_text(PLANTED)
    return profile_script_ranks([str(script), str(sleeper), str(SLEEP_MS), "40"], 2, WINDOW, tmp_path / "trace.json")


@pytest.fixture(scope="module")
def straggler_on_rank_1(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ranks")
    return planted_run(tmp, sleeper=1), tmp


# ---- the interval arithmetic, against a grid of microseconds ------------------------------------------


def _grid(intervals, n=400):
    covered = np.zeros(n, dtype=bool)
    for s, e in intervals:
        covered[int(s) : int(e)] = True
    return covered


def test_interval_arithmetic_matches_a_grid():
    rng = random.Random(0)
    for _ in range(200):
        a = [(s, s + rng.randrange(1, 60)) for s in (rng.randrange(0, 330) for _ in range(rng.randrange(0, 8)))]
        b = [(s, s + rng.randrange(1, 60)) for s in (rng.randrange(0, 330) for _ in range(rng.randrange(0, 8)))]
        ua, ub = union(a), union(b)
        assert length(ua) == _grid(a).sum()
        assert length(intersect(ua, ub)) == (_grid(a) & _grid(b)).sum()
        assert length(subtract(ua, ub)) == (_grid(a) & ~_grid(b)).sum()
        assert all(e1 < s2 for (_, e1), (s2, _) in zip(ua, ua[1:]))  # sorted and disjoint


def test_torchs_collective_names_are_communication():
    # The names torch 2.13's profiler records for gloo and NCCL collectives (see nanolm.profiling.measure.comm).
    for name, kind in [
        ("c10d::allreduce_", "all_reduce"),
        ("gloo:all_reduce", "all_reduce"),
        ("c10d::barrier", "barrier"),
        ("gloo:barrier", "barrier"),
        ("c10d::broadcast_", "broadcast"),
        ("gloo:all_gather", "all_gather"),
        ("c10d::allgather_", "all_gather"),
        ("nccl:all_reduce", "all_reduce"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
        ("c10d::reduce_scatter_tensor_coalesced_", "reduce_scatter"),
        ("record_param_comms", None),
    ]:
        assert categorize(name) == COMMUNICATION, name
        assert collective_kind(name) == kind, name
    for name in ("aten::mm", "torch::distributed::reducer::mul_out", "aten::gather", "aten::scatter_add_"):
        assert categorize(name) != COMMUNICATION, name


def synthetic(steps: list[float], exposed: list[float]):
    """A rank's report holding only what merge_ranks reads: its windows' steps and exposed communication."""
    from nanolm.profiling.report import Communication, ProfileReport, Stat, Verdict

    median = sorted(steps)[len(steps) // 2]
    c = Communication(max(exposed), 0.5, exposed[steps.index(median)], 0.4, 0.0, 0.0, "backward", "gloo")
    return ProfileReport(
        target="t",
        device="cpu",
        scope="CPU only",
        window={},
        first_measured_step=3,
        steps_measured=3,
        step_ms=Stat.of(steps),
        phases=[],
        categories=[],
        top_ops=[],
        ops_per_step=0,
        syncs=[],
        device_busy=None,
        settings={},
        tokens_per_step=None,
        tokens_per_s=None,
        mfu=None,
        verdict=Verdict(Bottleneck.COMPUTE, "h", [], []),
        communication=c,
        window_step_ms=steps,
        window_exposed_ms=exposed,
    )


def test_a_straggler_is_slowest_in_every_window_by_a_margin():
    from nanolm.profiling.judge.ranks import merge_ranks

    # Rank 1 works 30 ms more in every window of a 50 ms step; rank 0 waits for it: a straggler.
    merged = merge_ranks([synthetic([50, 52, 51], [32, 33, 30]), synthetic([50, 52, 51], [2, 3, 2])], "t")
    assert (merged.slowest_rank, merged.straggler, merged.slowest_in_windows, merged.windows) == (1, 1, 3, 3)
    assert merged.window_spread_ms == pytest.approx([30, 30, 28]) and merged.spread_ms == pytest.approx(49 - 19)
    assert [r.work_ms for r in merged.rows] == pytest.approx([19, 49])  # median over windows of step - exposed
    # Noise: each rank the slower one now and then, by more than 10% of the step: no straggler.
    noisy = merge_ranks([synthetic([50, 50, 50], [2, 20, 2]), synthetic([50, 50, 50], [20, 2, 14])], "t")
    assert noisy.straggler is None and noisy.slowest_in_windows == 2 and noisy.slowest_rank == 0
    # Consistently slowest but by little: no straggler either.
    close = merge_ranks([synthetic([50, 50, 50], [3, 3, 3]), synthetic([50, 50, 50], [1, 1, 1])], "t")
    assert close.straggler is None and close.slowest_rank == 1 and close.spread_ms == pytest.approx(2)


# ---- two ranks, a planted straggler ------------------------------------------------------------------------


def test_each_rank_finds_the_planted_collectives(straggler_on_rank_1):
    merged, _ = straggler_on_rank_1
    assert merged.world_size == 2 and len(merged.reports) == 2 and merged.backend == "gloo"
    for report in merged.reports:
        c = report.communication
        calls = {row.kind: row.calls_per_step for row in c.collectives}
        assert calls == pytest.approx({"all_reduce": ALL_REDUCES, "barrier": BARRIERS})
        ops = {op.name: op for op in report.top_ops}
        assert ops["c10d::allreduce_"].category == COMMUNICATION
        assert ops["c10d::allreduce_"].calls_per_step == pytest.approx(ALL_REDUCES)
        cats = {row.category: row for row in report.categories}
        assert cats[COMMUNICATION].self_ms > 0
        assert 0 < c.exposed_ms <= c.in_flight_ms + 1e-6 <= report.step_ms.median * 1.05


def test_a_planted_straggler_is_named_with_its_rank(straggler_on_rank_1):
    merged, _ = straggler_on_rank_1
    assert merged.slowest_rank == 1 and merged.straggler == 1 and merged.fastest_rank == 0
    assert merged.slowest_in_windows == merged.windows == WINDOW.repeat
    # The other rank waits about the planted sleep in its collectives: its own work is that much smaller.
    assert merged.spread_ms > 0.5 * SLEEP_MS
    fast, slow = merged.reports
    assert fast.communication.exposed_ms > 0.5 * SLEEP_MS
    # ... and that wait is communication (moved out of host overhead), which is what limits rank 0
    cats = {row.category: row.self_ms for row in fast.categories}
    assert cats[COMMUNICATION] > 0.5 * SLEEP_MS
    assert fast.verdict.bottleneck is Bottleneck.COMMUNICATION
    assert slow.verdict.bottleneck is not Bottleneck.COMMUNICATION  # the straggler itself sleeps, between steps
    assert merged.verdict.bottleneck is slow.verdict.bottleneck and "rank 1" in merged.verdict.headline


def test_one_trace_per_rank_and_one_of_all_ranks(straggler_on_rank_1):
    merged, tmp = straggler_on_rank_1
    final = tmp / "trace.json"
    for rank in range(2):
        path = rank_file(final, rank)
        assert merged.reports[rank].trace_path == str(path) == merged.rows[rank].trace_path
        trace = json.loads(path.read_text())
        assert trace["distributedInfo"]["rank"] == rank
        names = {e.get("name") for e in trace["traceEvents"]}
        assert {"gloo:all_reduce", "c10d::allreduce_"} <= names
    both = json.loads(ranks_file(final).read_text())
    processes = {e["args"]["name"] for e in both["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert {"rank 0: python", "rank 1: python"} <= processes
    assert not list(tmp.glob(".*ranks")), "the staging folder is removed"


@pytest.mark.slow
def test_the_straggler_named_follows_the_planted_rank(tmp_path):
    # The control, through the command in a process of its own: the same script with rank 0 sleeping names
    # rank 0 (not whichever rank the code favours).
    script = tmp_path / "planted_ddp.py"
    script.write_text(PLANTED)
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nanolm",
            "profile",
            "--nproc",
            "2",
            "--wait",
            "1",
            "--warmup",
            "1",
            "--active",
            "3",
            "--repeat",
            "2",
            "--trace",
            str(tmp_path / "t.json"),
            "--json",
            str(tmp_path / "r.json"),
            "--",
            str(script),
            "0",
            str(SLEEP_MS),
            "40",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "r.json").read_text())
    assert merged["slowest_rank"] == 0 and merged["straggler"] == 0 and merged["spread_ms"] > 0.5 * SLEEP_MS
    assert "straggler: rank 0" in done.stdout
    assert "USDT" not in done.stderr and "profiler_start" not in done.stderr  # the profiler's own lines go to its log


@pytest.mark.slow
def test_nanolm_training_on_two_ranks_is_profiled_per_rank(tmp_path):
    # nanolm's own DDP training (what nanolm train --nproc 2 runs): DDP's gradient all-reduce is found on each rank.
    from nanolm.profiling.record.ranks import profile_training_ranks

    tiny = ["n_layer=2", "n_head=2", "d_model=64", "block_size=32", "batch_size=8", "corpus_lines=2000"]
    merged = profile_training_ranks(tiny, 2, Window(wait=1, warmup=1, active=2, repeat=2), tmp_path / "trace.json")
    assert merged.world_size == 2 and merged.backend == "gloo" and merged.target == "nanolm (preset tiny)"
    for rank, report in enumerate(merged.reports):
        kinds = {row.kind: row.calls_per_step for row in report.communication.collectives}
        assert kinds.get("all_reduce", 0) >= 1  # at least DDP's one bucket a step
        assert {row.category for row in report.categories} >= {COMMUNICATION}
        assert rank_file(tmp_path / "trace.json", rank).is_file()
        assert any("MFU is this rank's" in note for note in report.notes)
    assert merged.slowest_rank in (0, 1) and merged.spread_ms >= 0


# ---- the command ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--nproc", "0"],
        ["--nproc", "-1"],
        ["--nproc", "100000"],
        ["--nproc", "2", "--isolate"],
        ["--nproc", "2", "--expect", "1000"],
        ["--nproc", "0", "--set", "batch_size=8"],
        ["--nproc", "2", "--set", "batch_size=7"],
    ],
)
def test_bad_nproc_is_one_line_and_exit_2(cli, tmp_path, args):
    script = tmp_path / "s.py"
    script.write_text("print('never run')\n")
    command = [] if "--set" in args else ["--", str(script)]  # nanolm's own training, or a script
    shown = cli("profile", *args, "--trace", str(tmp_path / "t.json"), *command, cwd=tmp_path)
    assert shown.returncode == 2, shown
    assert len(shown.stderr.strip().splitlines()) == 1 and "Traceback" not in shown.stderr
    assert "never run" not in shown.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.py"]  # nothing written


def test_the_report_prints_the_ranks_and_is_json(straggler_on_rank_1):
    merged, _ = straggler_on_rank_1
    from rich.console import Console

    from nanolm.profiling.show.terminal import print_ranks_report

    console = Console(width=200, record=True)
    print_ranks_report(merged, console)
    text = console.export_text()
    assert "straggler: rank 1" in text and "communication-bound" in text and "all_reduce" in text
    assert "trace (rank 0)" in text and "trace (all ranks in one timeline)" in text
    as_json = json.loads(json.dumps(merged.to_dict()))
    assert as_json["straggler"] == 1 and as_json["rows"][0]["verdict"] == "communication-bound"
