"""Per-job SLURM resources (--slurm-gpus, --slurm-time, --slurm-partition, --slurm-nproc) for seed groups,
experiments and sweeps: the time limit read as sbatch reads it, the sbatch script submitit writes for the
array job (checked on a stand-in `sbatch` that keeps the script: no SLURM here), one training over the
tasks of a job (torch.distributed's env:// variables, on submitit's local cluster), and bad input as one
line with exit code 2."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from conftest import TINY
from nanolm.errors import UserError
from nanolm.repro import executors
from nanolm.repro.executors import JobOutcome, JobStatus, SlurmExecutor, SlurmResources, make_executor, slurm_minutes

# sbatch --time forms and their minutes, worked by hand (seconds round up: submitit takes whole minutes)
TIMES = {
    "90": 90,  # minutes
    "45:30": 46,  # minutes:seconds = 45.5 min
    "1:30:00": 90,  # hours:minutes:seconds
    "2-0": 2880,  # days-hours
    "1-12": 36 * 60,
    "1-12:30": 36 * 60 + 30,  # days-hours:minutes
    "0-0:0:59": 1,  # days-hours:minutes:seconds
    " 120 ": 120,
}


@pytest.mark.parametrize("text,minutes", TIMES.items())
def test_slurm_time_forms_in_minutes(text, minutes):
    assert slurm_minutes(text) == minutes


@pytest.mark.parametrize("text", ["1h", "90m", "1.5", "", "-5", "1:2:3:4", "1-", "0", "0:00", "1-2:3:4:5", "INFINITE"])
def test_a_time_sbatch_would_not_take_is_one_line(text):
    with pytest.raises(UserError, match=r"^--slurm-time .*: .*give minutes \(90\)[^\n]*$"):
        slurm_minutes(text)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"gpus": -1}, "--slurm-gpus must be >= 0, got -1"),
        ({"nproc": 0}, "--slurm-nproc must be >= 1, got 0"),
        ({"gpus": 4, "nproc": 2}, "--slurm-gpus 4 with --slurm-nproc 2: .* give --slurm-gpus 2"),
        ({"gpus": 1, "nproc": 2}, "--slurm-gpus 1 with --slurm-nproc 2"),
        ({"partition": "gpu long"}, "--slurm-partition 'gpu long': a partition name is"),
        ({"partition": "gpu;rm"}, "--slurm-partition 'gpu;rm'"),
        ({"time_min": 0}, "--slurm-time must be at least a minute"),
    ],
)
def test_resources_that_cannot_run_are_refused(kwargs, message):
    with pytest.raises(UserError, match=message):
        SlurmResources(**kwargs)


def test_resources_as_submitit_parameters():
    assert SlurmResources().submitit_parameters("nanolm-g") == {
        "name": "nanolm-g",
        "timeout_min": 60,
        "nodes": 1,
        "tasks_per_node": 1,
    }
    res = SlurmResources.from_options(gpus=2, time="1-00:30", partition="gpu,gpu-long", nproc=2)
    assert res == SlurmResources(gpus=2, time_min=24 * 60 + 30, partition="gpu,gpu-long", nproc=2)
    assert res.submitit_parameters("n") == {
        "name": "n",
        "timeout_min": 1470,
        "nodes": 1,
        "tasks_per_node": 2,
        "gpus_per_node": 2,
        "slurm_partition": "gpu,gpu-long",
    }
    assert SlurmResources(gpus=0, nproc=3).submitit_parameters("n")["gpus_per_node"] == 0  # CPU ranks (gloo)


def test_resources_for_another_executor_are_refused(tmp_path):
    for kind in ("local", "debug"):
        with pytest.raises(UserError, match=f"--slurm-\\* options are for --executor slurm, not --executor {kind}"):
            make_executor(kind, runs_dir=tmp_path, slurm=SlurmResources(gpus=1))
    slurm = make_executor("slurm", runs_dir=tmp_path, name="g", slurm=SlurmResources(nproc=2))
    assert isinstance(slurm, SlurmExecutor) and slurm.resources.nproc == 2
    assert make_executor("slurm", runs_dir=tmp_path).resources == SlurmResources()  # 60 min, 1 process


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """`srun` and `sbatch` stand-ins on PATH: sbatch keeps each script it is given and answers as SLURM does.
    Returns the folder of kept scripts."""
    pytest.importorskip("submitit", reason="the slurm extra is not installed")
    bin_dir, kept = tmp_path / "fake-bin", tmp_path / "sbatch-scripts"
    bin_dir.mkdir()
    kept.mkdir()
    for name, body in {"srun": "exit 0", "sbatch": f'cp "$1" "{kept}/$(date +%s%N).sh"\necho "Submitted batch job 4242"'}.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return kept


def sbatch_flags(script: str) -> dict[str, str]:
    """The #SBATCH --key=value lines of a submission script."""
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", script, flags=re.M))


def test_the_array_job_asks_slurm_for_the_resources(tmp_path, fake_slurm):
    res = SlurmResources(gpus=2, time_min=90, partition="gpu", nproc=2)
    handles = SlurmExecutor(tmp_path / "slurm", "nanolm-grp", res).submit(str.upper, ["a", "b", "c"])
    assert [h.job_id for h in handles] == ["4242_0", "4242_1", "4242_2"]  # one array job, one task per item
    [script] = [p.read_text() for p in fake_slurm.iterdir()]  # a single sbatch call
    flags = sbatch_flags(script)
    assert {k: flags[k] for k in ("job-name", "time", "partition", "gpus-per-node", "ntasks-per-node", "nodes", "array")} == {
        "job-name": "nanolm-grp",
        "time": "90",
        "partition": "gpu",
        "gpus-per-node": "2",
        "ntasks-per-node": "2",
        "nodes": "1",
        "array": "0-2%3",
    }
    assert re.search(r"^srun .*-m submitit\.core\._submit", script, flags=re.M)  # the tasks are started by srun

    SlurmExecutor(tmp_path / "plain", "nanolm-p").submit(str.upper, ["a", "b"])
    plain = sbatch_flags(max(fake_slurm.iterdir(), key=lambda p: p.name).read_text())
    assert plain["time"] == "60" and plain["ntasks-per-node"] == "1" and plain["array"] == "0-1%2"
    assert "gpus-per-node" not in plain and "partition" not in plain  # the cluster's defaults


def test_seeds_and_experiment_pass_the_options_to_sbatch(tmp_path, fake_slurm, monkeypatch, cli):
    """The CLI's --slurm-* options reach the sbatch script of `nanolm seeds` and `nanolm experiment run`. The
    jobs never run here: each is answered as failed, which the command reports as one line, exit code 2."""

    def submitted(job, handle):
        return JobOutcome(job.seed, job.group, JobStatus.FAILED, message=f"seed {job.seed}: submitted as {handle.job_id}")

    monkeypatch.setattr(executors, "_slurm_outcome", submitted)
    out = cli(
        "seeds",
        "--n",
        "3",
        "--name",
        "grp",
        "--executor",
        "slurm",
        "--slurm-gpus",
        "1",
        "--slurm-time",
        "2:00:00",
        "--slurm-partition",
        "a100",
        "--set",
        f"runs_dir={tmp_path / 'runs'}",
        *(f"--set={kv}" for kv in TINY),
        cwd=tmp_path,
    )
    assert out.returncode == 2 and out.stderr == "nanolm: error: seed 1337: submitted as 4242_0\n"
    flags = sbatch_flags(next(fake_slurm.iterdir()).read_text())
    assert (flags["job-name"], flags["time"], flags["partition"], flags["gpus-per-node"], flags["array"]) == (
        "nanolm-grp",
        "120",
        "a100",
        "1",
        "0-2%3",
    )
    assert (tmp_path / "runs" / "slurm").is_dir()  # submitit's records beside the runs

    for script in fake_slurm.iterdir():
        script.unlink()
    exp = tmp_path / "exp.toml"
    exp.write_text(
        'idea = "x"\nseeds = 3\n[common]\n' + "\n".join(TINY) + f'\nruns_dir = "{tmp_path / "eruns"}"\n'
        '[baseline]\n[candidate]\nlr = 1e-2\n[[scales]]\nname = "s"\n'
    )
    out = cli("experiment", "run", str(exp), "--executor", "slurm", "--slurm-nproc", "2", "--slurm-gpus", "0", cwd=tmp_path)
    assert out.returncode == 2 and "submitted as 4242_0" in out.stderr
    flags = sbatch_flags(next(fake_slurm.iterdir()).read_text())
    assert (flags["job-name"], flags["ntasks-per-node"], flags["gpus-per-node"], flags["array"]) == (
        "nanolm-x",
        "2",
        "0",
        "0-5%6",
    )  # 2 arms x 3 seeds


@pytest.mark.parametrize(
    "args,message",
    [
        (["--slurm-gpus", "1"], "--slurm-gpus: for --executor slurm only (got --executor local)"),
        (
            ["--executor", "debug", "--slurm-time", "10", "--slurm-nproc", "2"],
            "--slurm-time, --slurm-nproc: for --executor slurm only (got --executor debug)",
        ),
        (["--executor", "slurm", "--slurm-time", "1h"], "--slurm-time '1h': give minutes (90)"),
        (["--executor", "slurm", "--slurm-gpus", "-2"], "--slurm-gpus must be >= 0, got -2"),
        (["--executor", "slurm", "--slurm-gpus", "two"], "Invalid value for '--slurm-gpus'"),
        (["--executor", "slurm", "--slurm-gpus", "2", "--slurm-nproc", "4"], "--slurm-gpus 2 with --slurm-nproc 4"),
        (
            ["--executor", "slurm", "--slurm-nproc", "2", "--set", "batch_size=7"],
            "batch_size 7 does not split evenly over 2 processes",
        ),  # each job a 2-process training: refused before submitting
    ],
)
def test_bad_slurm_options_are_one_line_and_exit_2(tmp_path, cli, args, message):
    out = cli("seeds", "--name", "g", "--set", f"runs_dir={tmp_path / 'runs'}", *args, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("nanolm: error: ") and message in out.stderr and out.stderr.count("\n") == 1
    assert not (tmp_path / "runs").exists()  # refused before anything was made


def test_each_task_of_a_job_is_a_rank_of_one_training(tmp_path):
    """On submitit's local cluster (real processes, as srun starts them), each of a job's --slurm-nproc tasks
    gets torch.distributed's env:// variables, as torchrun sets them; a one-task job gets none."""
    pytest.importorskip("submitit", reason="the slurm extra is not installed")
    variables = "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"
    [two] = SlurmExecutor(tmp_path / "two", "t", SlurmResources(nproc=2)).submit(os.path.expandvars, [variables], cluster="local")
    task0, task1 = (value.split() for value in two.results())
    assert task0[:4] == ["0", "2", "0", "2"] and task1[:4] == ["1", "2", "1", "2"]
    assert task0[4:] == task1[4:] and task0[5].isdigit()  # both ranks meet at one address and port
    [one] = SlurmExecutor(tmp_path / "one", "t").submit(os.path.expandvars, ["$WORLD_SIZE"], cluster="debug")
    assert one.results() == ["$WORLD_SIZE"]  # not set: one process, no process group


def test_outside_a_submitit_job_nothing_is_exported(monkeypatch):
    pytest.importorskip("submitit", reason="the slurm extra is not installed")
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert executors.export_torch_distributed_env() == {} and "RANK" not in os.environ


@pytest.mark.slow
def test_a_seed_group_of_two_process_trainings_through_submitit(tmp_path, monkeypatch):
    """`nanolm seeds --executor slurm --slurm-nproc 2 --slurm-gpus 0` end to end on submitit's local cluster: one
    array job, each job one 2-rank data-parallel training (gloo) whose rank 0 alone records the run. ~30 s."""
    submitit = pytest.importorskip("submitit", reason="the slurm extra is not installed")
    from nanolm.repro.seeds import run_seeds

    real = submitit.AutoExecutor
    monkeypatch.setattr(submitit, "AutoExecutor", lambda folder, cluster=None, **kw: real(folder=folder, cluster="local", **kw))
    overrides = [*TINY, "steps=6", "eval_every=6", "ckpt_every=6", f"runs_dir={tmp_path}"]
    result = run_seeds(overrides, n=2, name="ddp", executor="slurm", slurm=SlurmResources(gpus=0, nproc=2))
    assert result.group.seeds == [1337, 1338]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "slurm") == sorted(r.name for r in result.group.runs)
    for run in result.group.runs:
        recorded = json.loads((run / "manifest.json").read_text())["distributed"]
        assert (recorded["world_size"], recorded["backend"]) == (2, "gloo")
        assert [r["rank"] for r in recorded["ranks"]] == [0, 1]
