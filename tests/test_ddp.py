"""Data-parallel training (nanolm.distributed, train --nproc, torchrun, srun): 2 gloo processes on the CPU
compute what 1 process computes at the same global batch, each rank reads its own part of the sample stream,
rank 0 writes the one run record, and a rank that dies or hangs ends the run with a line, the last
checkpoint intact and resumable. The launches are real processes (a few seconds each to start torch)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from conftest import TINY
from nanolm import distributed
from nanolm.config import make_config
from nanolm.data import RandomWindows, ReadReceipt, load_data, rank_samples, window_loader
from nanolm.distributed import Dist, LaunchFailed, RankFailure, launch_env
from nanolm.errors import UserError
from nanolm.runs import RunStatus, read_manifest, read_metrics
from nanolm.train import _launch_failure, intact_checkpoint_step, train

# 20 logged steps, checkpoints at 10 and 20, deterministic: the run every launch here repeats.
DDP = [*TINY, "steps=20", "log_every=1", "eval_every=10", "ckpt_every=10"]
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"


def set_args(*overrides: str) -> list[str]:
    return [a for kv in overrides for a in ("--set", kv)]


def env_one_thread(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_STEP_ID")
    }
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def run_nanolm(args: list[str], cwd: Path, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nanolm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env_one_thread(**env),
    )


def only_run(runs: Path) -> Path:
    folders = [p for p in runs.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders  # the run record is written once, by rank 0
    return folders[0]


def losses(run: Path) -> list[tuple]:
    """Every logged number that is computed (not timed), per row."""
    return [(r["step"], r["train_loss"], r["lr"], r.get("val_loss"), r.get("train_eval_loss")) for r in read_metrics(run)]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> Path:
    """A 2-process run of DDP, deterministic, started by nanolm train --nproc 2."""
    tmp = tmp_path_factory.mktemp("ddp")
    done = run_nanolm(["train", "--nproc", "2", "--deterministic", "-q", *set_args(*DDP, f"runs_dir={tmp / 'runs'}")], tmp)
    assert done.returncode == 0, done.stderr
    return only_run(tmp / "runs")


# ---- two ranks against one --------------------------------------------------------------------------


def test_two_ranks_compute_what_one_rank_computes_at_the_same_global_batch(ddp_run, tmp_path):
    one = train(make_config(overrides=[*DDP, f"runs_dir={tmp_path / 'runs'}"], deterministic=True), progress=False)
    two, single = read_metrics(ddp_run), read_metrics(one.run_dir)
    assert [r["step"] for r in two] == [r["step"] for r in single] == list(range(1, 21))
    for a, b in zip(two, single):  # the gradient all-reduce is a mean: the same update, up to float rounding
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5), a["step"]
        assert a["lr"] == b["lr"]
        if "val_loss" in b:
            assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)
            assert a["train_eval_loss"] == pytest.approx(b["train_eval_loss"], rel=1e-5)
    # and the model moved: 20 steps took the loss well below where it started
    assert single[-1]["train_loss"] < single[0]["train_loss"] - 0.3
    final = read_manifest(ddp_run).final
    assert final.val_loss == pytest.approx(one.val_loss, rel=1e-5)


def test_rank_zero_writes_the_one_run_record_with_world_size_backend_and_ranks(ddp_run):
    m = read_manifest(ddp_run)
    assert m.status is RunStatus.FINISHED and m.checkpoint_step == 20
    d = m.distributed
    assert d["world_size"] == 2 and d["backend"] == "gloo" and d["launcher"] == "torchrun" and d["run_id"]
    assert [r["rank"] for r in d["ranks"]] == [0, 1] and len({r["pid"] for r in d["ranks"]}) == 2
    assert all(r["threads"] == 1 and r["device"] == "cpu" for r in d["ranks"])  # one thread per rank
    assert m.owner["pid"] == d["ranks"][0]["pid"]
    steps = [r["step"] for r in read_metrics(ddp_run)]
    assert steps == sorted(set(steps))  # each row once: only rank 0 logs
    state = json.loads((ddp_run / "checkpoints" / "step_0000020" / "state.json").read_text())
    assert state["world_size"] == 2 and len(state["rng_ranks"]) == 2 and state["data_position"] == 20 * 8
    # the metrics carry the measured communication: rank 0's seconds in gradient all-reduce
    assert all(0 <= r["allreduce_share"] <= 1 and r["allreduce_s"] >= 0 for r in read_metrics(ddp_run))


def _digest(window: torch.Tensor) -> int:
    """blake2b-64 of one window's int64 token ids, written here again from its definition."""
    return int.from_bytes(hashlib.blake2b(window.to(torch.int64).numpy().tobytes(), digest_size=8).digest(), "little")


def test_each_rank_read_its_own_disjoint_half_of_every_batch(ddp_run):
    """The receipts the ranks recorded (count and a sum of per-sample hashes) against the samples the
    specification gives each rank: global batch m is samples 8m..8m+7, rank r reads 8m+4r..8m+4r+3."""
    cfg = make_config(overrides=DDP)
    windows = RandomWindows(load_data(cfg).train, 16, cfg.seed)
    expected = {}
    for r in (0, 1):
        indices = [8 * m + 4 * r + j for m in range(20) for j in range(4)]
        expected[r] = (indices, sum(_digest(windows[i][0]) for i in indices) % 2**64)
    assert not set(expected[0][0]) & set(expected[1][0])  # the specification's shards are disjoint...
    assert sorted(expected[0][0] + expected[1][0]) == list(range(160))  # ...and together the 1-process stream
    reads = {r["rank"]: r["read"] for r in read_manifest(ddp_run).distributed["ranks"]}
    for r in (0, 1):
        assert reads[r]["samples"] == 80 and reads[r]["steps"] == [1, 20]
        assert int(reads[r]["digest"], 16) == expected[r][1], f"rank {r} read other samples than its shard"
    assert reads[0]["digest"] != reads[1]["digest"]


@pytest.mark.slow
def test_same_seed_and_world_size_repeat_bit_for_bit_also_under_torchrun(ddp_run, tmp_path):
    """The same run started by hand with torchrun (-m nanolm train) gives the same numbers, bit for bit."""
    runs = tmp_path / "runs"
    done = subprocess.run(
        [
            TORCHRUN,
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "nanolm",
            "train",
            "--deterministic",
            "-q",
            *set_args(*DDP, f"runs_dir={runs}"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=env_one_thread(),
    )
    assert done.returncode == 0, done.stderr
    again = only_run(runs)
    assert losses(again) == losses(ddp_run)
    assert read_manifest(again).distributed["world_size"] == 2


# ---- a rank that dies, or hangs ---------------------------------------------------------------------

VICTIM = """
import os, signal, sys, time
from nanolm.config import make_config
from nanolm.train import train

cfg = make_config(overrides={overrides!r}, deterministic=True)

def on_step(step):
    if os.environ["RANK"] == "1" and step == 13:  # after the checkpoint at step 10
        {action}

train(cfg, progress=False, on_step=on_step)
"""
DIE = "os.kill(os.getpid(), signal.SIGKILL)"
# Stuck in a step, yet ended by the launcher's SIGTERM once rank 0 has given up on it (a rank stopped with
# SIGSTOP would be sent SIGKILL only after torchrun's 30 s grace period).
HANG = "signal.signal(signal.SIGTERM, signal.SIG_DFL); time.sleep(600)"


def run_victim(tmp_path: Path, action: str, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    """torchrun of a script (a user's, calling nanolm.train.train) that trains the DDP run; rank 1 does
    `action` at step 13."""
    script = tmp_path / "victim.py"
    script.write_text(textwrap.dedent(VICTIM.format(overrides=[*DDP, f"runs_dir={tmp_path / 'runs'}"], action=action)))
    done = subprocess.run(
        [TORCHRUN, "--standalone", "--nproc-per-node", "2", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
        env=env_one_thread(**env),
    )
    return done, only_run(tmp_path / "runs")


def rank_lost_line(stderr: str) -> str:
    """The RankLost error's line (the script's traceback ends with it)."""
    said = [line for line in stderr.splitlines() if "RankLost: " in line]
    assert len(said) == 1, stderr
    return said[0].split("RankLost: ", 1)[1]


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_with_a_line_and_the_last_checkpoint_resumes_it(ddp_run, tmp_path):
    done, run = run_victim(tmp_path, DIE)
    assert done.returncode != 0
    line = rank_lost_line(done.stderr)
    assert line.startswith("rank 0 lost contact with the other ranks (") and "Connection" in line
    assert "the checkpoint at step 10" in line and f"nanolm train --nproc 2 --resume {run}" in line
    m = read_manifest(run)
    assert m.status is RunStatus.INTERRUPTED and m.checkpoint_step == 10
    assert intact_checkpoint_step(run) == 10  # tensor files whole: their hashes match the recorded ones
    resumed = run_nanolm(["train", "--nproc", "2", "--resume", str(run), "-q"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    # the resumed run continues exactly where the uninterrupted one went
    assert losses(run) == losses(ddp_run)
    assert read_manifest(run).status is RunStatus.FINISHED


@pytest.mark.slow
def test_a_hung_rank_ends_the_run_at_the_process_group_timeout(tmp_path):
    done, run = run_victim(tmp_path, HANG, NANOLM_DIST_TIMEOUT_S="3")
    assert done.returncode != 0
    line = rank_lost_line(done.stderr)
    assert "Timed out waiting 3000ms" in line and "hung past the 3 s timeout" in line
    assert read_manifest(run).status is RunStatus.INTERRUPTED
    assert read_manifest(run).checkpoint_step == 10 and intact_checkpoint_step(run) == 10


@pytest.mark.slow
def test_sigterm_to_the_launcher_checkpoints_every_rank_at_the_same_step(tmp_path):
    """What SLURM preemption or `timeout` sends: passed to the ranks, which vote, checkpoint one step, and
    say once how to continue."""
    sets = set_args(
        *TINY, "steps=100000", "eval_every=100000", "ckpt_every=100000", "log_every=5", f"runs_dir={tmp_path / 'runs'}"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanolm", "train", "--nproc", "2", "-q", *sets],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_one_thread(),
    )
    try:
        deadline = time.monotonic() + 120
        while not any(len(read_metrics(p)) >= 2 for p in (tmp_path / "runs").glob("*/")):
            assert time.monotonic() < deadline and proc.poll() is None, "the run did not start logging"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    run = only_run(tmp_path / "runs")
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1, err
    m = read_manifest(run)
    assert m.status is RunStatus.INTERRUPTED and m.checkpoint_step >= 10
    assert lines[0] == (
        f"nanolm: error: terminated (SIGTERM); checkpoint at step {m.checkpoint_step} in {run}; "
        f"continue with: nanolm train --nproc 2 --resume {run}"
    )
    assert intact_checkpoint_step(run) == m.checkpoint_step


def test_the_launcher_names_the_rank_that_was_killed_and_the_intact_checkpoint(tiny, tmp_path):
    run = train(tiny("steps=4", "ckpt_every=2"), progress=False).run_dir
    killed = LaunchFailed([RankFailure(0, 0, 111, 3), RankFailure(1, 1, 222, -9)], "id")
    error = _launch_failure(killed, run, 2)
    assert not error.said_by_rank and error.exit_code == 1
    line = str(error)
    assert line.startswith("rank 1 (pid 222) was killed by SIGKILL; rank 0 lost contact with it")
    assert f"the checkpoint at step 4 in {run} is intact; continue with: nanolm train --nproc 2 --resume {run}" in line
    # a checkpoint whose weights changed after they were written is not called intact
    (run / "checkpoints" / "step_0000004" / "model.safetensors").write_bytes(b"garbage")
    assert "no intact checkpoint" in str(_launch_failure(killed, run, 2))
    # a rank that printed its own error (exit 2: bad input) is not repeated
    said = _launch_failure(LaunchFailed([RankFailure(0, 0, 1, 2), RankFailure(1, 1, 2, -15)], "id"), run, 2)
    assert said.said_by_rank and said.exit_code == 2


# ---- the pieces, without processes ------------------------------------------------------------------


def test_rank_shards_split_every_global_batch_and_add_up_to_the_one_process_stream():
    tokens = torch.arange(500) % 97
    ds = RandomWindows(tokens, 8, seed=5)
    for world in (1, 2, 4):
        shards = [list(rank_samples(24, 3, 8, r, world)) for r in range(world)]
        assert sorted(i for s in shards for i in s) == list(range(24, 48))
        assert all(len(s) == 3 * 8 // world for s in shards)
        loaders = [
            list(window_loader(tokens, 8, 8, seed=5, start=24, n_batches=3, rank=r, world_size=world)) for r in range(world)
        ]
        for m in range(3):  # global batch m, put back together from the ranks' parts, in rank order
            x = torch.cat([loaders[r][m][0] for r in range(world)])
            assert torch.equal(x, torch.stack([ds[i][0] for i in range(24 + 8 * m, 32 + 8 * m)]))


def test_read_receipts_add_up_over_disjoint_ranks_and_not_over_repeated_reads():
    x = torch.arange(64).view(8, 8)
    whole, a, b, twice = ReadReceipt(), ReadReceipt(), ReadReceipt(), ReadReceipt()
    whole.add(x)
    a.add(x[:4])
    b.add(x[4:])
    twice.add(x[:4])
    twice.add(x[:4])
    assert (a.digest + b.digest) % 2**64 == whole.digest and a.samples + b.samples == whole.samples == 8
    assert twice.digest != whole.digest
    assert whole.digest == sum(_digest(row) for row in x) % 2**64


def test_launch_env_reads_torchrun_and_srun_and_nothing_else():
    assert launch_env({}) is None
    assert launch_env({"RANK": "0", "WORLD_SIZE": "1"}) is None  # a world of one is one process
    tr = launch_env(
        {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "h",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "abc",
        }
    )
    assert (tr.rank, tr.world_size, tr.local_rank, tr.launcher, tr.run_id) == (1, 2, 1, "torchrun", "abc")
    slurm = {
        "SLURM_PROCID": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "gpu7",
    }
    s = launch_env(slurm)
    assert (s.rank, s.world_size, s.local_rank, s.local_world_size, s.launcher) == (3, 4, 1, 2, "slurm")
    assert s.master_addr == "gpu7" and 20000 <= s.master_port < 60000 and s.run_id == "77.0"
    assert launch_env({**slurm, "SLURM_PROCID": "0"}).master_port == s.master_port  # every rank agrees
    assert launch_env({**slurm, "MASTER_ADDR": "x", "MASTER_PORT": "1234"}).master_port == 1234
    # the batch script's own shell (no srun step) is not a rank
    assert launch_env({k: v for k, v in slurm.items() if k != "SLURM_STEP_ID"}) is None
    pytest.importorskip("submitit", reason="the slurm extra parses bracketed node lists")
    assert launch_env({**slurm, "SLURM_JOB_NODELIST": "node[03-04],gpu1"}).master_addr == "node03"


@pytest.mark.parametrize(
    "env, words",
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not a whole number"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 of a world of 2"),
        ({"WORLD_SIZE": "2"}, "RANK is not set"),
    ],
)
def test_launch_env_refuses_broken_variables(env, words):
    with pytest.raises(UserError, match=words):
        launch_env(env)


def test_checks_before_a_launch():
    with pytest.raises(UserError, match="give a number of processes >= 1"):
        distributed.check_nproc(0, "cpu")
    with pytest.raises(UserError, match="core"):
        distributed.check_nproc(distributed.cpu_cores() + 1, "cpu")
    assert distributed.check_nproc(min(2, distributed.cpu_cores()), "cpu") >= 1
    assert distributed.resolve_backend("auto", "cpu") == "gloo"
    with pytest.raises(UserError, match="--backend nccl"):
        distributed.resolve_backend("nccl", "cpu")
    with pytest.raises(UserError, match="does not split evenly over 3"):
        distributed.per_rank_batch(8, 3)
    assert distributed.per_rank_batch(8, 2) == 4
    with pytest.raises(UserError, match="NANOLM_DIST_TIMEOUT_S"):
        distributed.timeout_seconds({"NANOLM_DIST_TIMEOUT_S": "0"})


def test_a_world_of_one_has_no_process_group_and_collectives_return_their_input():
    d = distributed.setup("cpu", environ={})
    assert not d.distributed and d.is_main and not torch.distributed.is_initialized()
    t = torch.tensor([1.5, 2.5])
    assert d.mean_(t) is t and torch.equal(t, torch.tensor([1.5, 2.5]))
    assert d.vote(True, False) == (True, False) and d.gather({"a": 1}) == [{"a": 1}] and d.broadcast(3) == 3
    with pytest.raises(UserError, match="bad"):
        d.agree_or_raise(UserError("bad"))
    distributed.teardown(d)
    assert isinstance(d, Dist)


def test_train_uses_a_process_group_someone_else_opened_and_leaves_it_open(tiny):
    """A profiler or a notebook may open the group itself (to gather per-rank results afterwards)."""
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    try:
        d = distributed.setup("cpu")
        assert not d.owns_group and d.backend == "gloo" and not d.distributed
        result = train(tiny("steps=2"), progress=False)
        assert torch.distributed.is_initialized() and (result.rank, result.world_size) == (0, 1)
    finally:
        torch.distributed.destroy_process_group()


def test_teardown_waits_until_gloo_lets_go_of_the_hooks_callbacks():
    """The profiled 2-rank run that hung: freeing DDP's reducer joins gloo's threads with the GIL held, and a
    thread still dropping the timer's callback needs the GIL. Teardown waits until every callback is released."""
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Linear(4, 2)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        timer = distributed.AllReduceTimer(1)
        ddp.register_comm_hook(None, timer.hook)
        for _ in range(3):
            ddp(torch.randn(8, 4)).sum().backward()
        assert timer.calls == 3
        assert distributed.settle_hook_callbacks(timeout_s=10.0) and distributed.held_callbacks() == 0
    finally:
        torch.distributed.destroy_process_group()

    def callback() -> None:
        pass

    distributed.hold_until_released(callback)
    assert distributed.held_callbacks() == 1
    assert not distributed.settle_hook_callbacks(timeout_s=0.05)  # still held: the wait ends at its timeout
    del callback
    assert distributed.settle_hook_callbacks(timeout_s=1.0) and distributed.held_callbacks() == 0


# ---- bad input: one line, exit code 2, nothing started or written -----------------------------------


def one_error_line(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("nanolm: error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "nproc, words",
    [
        ("0", "give a number of processes >= 1"),
        ("-2", "give a number of processes >= 1"),
        (str(distributed.cpu_cores() + 1), "core(s) for this process"),
    ],
)
def test_nproc_out_of_range_is_refused(cli, tmp_path, nproc, words):
    done = cli("train", "--nproc", nproc, *set_args(*TINY, "runs_dir=runs"), cwd=tmp_path)
    assert words in one_error_line(done)
    assert not (tmp_path / "runs").exists()


def test_a_world_size_that_does_not_divide_the_batch_is_refused(cli, tmp_path):
    done = cli("train", "--nproc", "2", *set_args(*TINY, "batch_size=7", "runs_dir=runs"), cwd=tmp_path)
    assert "batch_size 7 does not split evenly over 2 processes" in one_error_line(done)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpus_is_refused(cli, tmp_path):
    done = cli("train", "--nproc", "2", "--backend", "nccl", *set_args(*TINY, "runs_dir=runs"), cwd=tmp_path)
    assert "--backend nccl" in one_error_line(done) and "use --backend gloo" in done.stderr


def test_resuming_with_another_world_size_is_refused(cli, tiny, tmp_path):
    run = train(tiny("steps=2"), progress=False).run_dir
    before = (run / "manifest.json").read_text()
    done = cli("train", "--nproc", "2", "--resume", str(run), "--set", "steps=4", cwd=tmp_path)
    line = one_error_line(done)
    assert "trained by 1 process(es) and this is 2" in line and f"nanolm train --resume {run}" in line
    assert (run / "manifest.json").read_text() == before


def test_nproc_inside_a_launch_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    done = cli("train", "--nproc", "2", *set_args(*TINY, "runs_dir=runs"), cwd=tmp_path)
    assert "already a rank of a launch" in one_error_line(done)


def test_all_reduce_time_is_the_union_of_the_buckets_spans():
    import numpy as np

    from nanolm.distributed import AllReduceTimer, union_seconds

    rng = np.random.default_rng(0)
    for _ in range(20):  # against a brute-force count on a fine grid
        starts = rng.uniform(0, 10, 6)
        spans = sorted((float(a), float(a + rng.uniform(0, 3))) for a in starts)
        grid = np.linspace(0, 14, 140_001)
        covered = np.zeros_like(grid, dtype=bool)
        for a, b in spans:
            covered |= (grid >= a) & (grid < b)
        assert union_seconds(spans) == pytest.approx(covered.mean() * 14, abs=1e-3)
    timer = AllReduceTimer(2)
    timer._spans = [(0.0, 3.0), (1.0, 2.0), (2.5, 4.0), (6.0, 7.0)]  # two buckets overlapping: counted once
    assert timer.take() == pytest.approx(5.0) and timer.take() == 0.0


_TEARDOWN_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    from nanolm import distributed

    def threads():  # the OS threads of this process, C++ ones (gloo's workers and event loop) included
        return len(os.listdir("/proc/self/task"))

    torch.ones(2, 2) @ torch.ones(2, 2)  # any lazily started pool exists before the first count
    alone = threads()
    d = distributed.setup("cpu")
    ddp, _ = distributed.wrap_ddp(torch.nn.Linear(4, 4), d)
    ddp(torch.randn(2, 4)).sum().backward()
    d.agree_or_raise(None)  # an all_gather_object, as at the end of a run
    del ddp
    joined = threads()
    distributed.teardown(d)
    with open(f"threads-rank{d.rank}.txt", "w") as f:  # a file each: the two ranks' stdout lines can interleave
        f.write(f"{alone} {joined} {threads()}")
""")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc (Linux)")
def test_teardown_stops_the_groups_threads_so_no_rank_can_abort_at_exit(tmp_path):
    """After DDP and a last collective, teardown leaves no gloo thread running: a worker still freeing a
    collective's tensors while Python exits aborts the rank (a CI run failed so, 1 launch in ~50). The group
    is only destroyed if nothing else holds it; torch.distributed.nn.functional's defaults did."""
    script = tmp_path / "teardown.py"
    script.write_text(_TEARDOWN_SCRIPT)
    done = subprocess.run(
        [TORCHRUN, "--standalone", "--nproc-per-node", "2", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env_one_thread(),
    )
    assert done.returncode == 0, done.stderr
    counts = [tuple(map(int, p.read_text().split())) for p in sorted(tmp_path.glob("threads-rank*.txt"))]
    assert len(counts) == 2, done.stdout
    for alone, joined, after in counts:
        assert joined > alone  # the group's threads were running (the check can see them)...
        assert after == alone  # ...and are gone after teardown


@pytest.mark.parametrize("inside_torchs_metrics_wrapper", [False, True])
def test_a_signal_to_the_launcher_is_said_as_stopped_wherever_it_lands(monkeypatch, inside_torchs_metrics_wrapper):
    """torch's metrics wrapper assigns ``start = time.time()`` inside its try; a SIGTERM landing on that line
    surfaces as an UnboundLocalError whose context is the SignalException (seen once in CI)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.launcher import api

    def launcher(config, entrypoint):
        def run(*args):
            signalled = SignalException("got signal: 15", sigval=signal.SIGTERM)
            if not inside_torchs_metrics_wrapper:
                raise signalled
            try:
                raise signalled
            except SignalException:
                raise UnboundLocalError("cannot access local variable 'start'")  # noqa: B904 (as torch raises it)

        return run

    monkeypatch.setattr(api, "elastic_launch", launcher)
    with pytest.raises(distributed.LaunchStopped) as stopped:
        distributed.launch(2, ["train"], run_id="r1")
    assert stopped.value.signum == signal.SIGTERM and stopped.value.run_id == "r1"


def test_an_error_with_no_signal_behind_it_is_not_taken_for_a_stop(monkeypatch):
    from torch.distributed.launcher import api

    def launcher(config, entrypoint):
        def run(*args):
            raise UnboundLocalError("a bug, not a signal")

        return run

    monkeypatch.setattr(api, "elastic_launch", launcher)
    with pytest.raises(UnboundLocalError, match="a bug"):
        distributed.launch(2, ["train"], run_id="r1")
