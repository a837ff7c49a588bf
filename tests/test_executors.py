"""nanolm.repro.executors: a local job's child answers with one JSON object (finished, diverged or
failed), never prose to be parsed; the executors hand back structured outcomes in job order."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from conftest import TINY
from nanolm.errors import UserError
from nanolm.repro import executors
from nanolm.repro.executors import (
    DebugExecutor,
    JobOutcome,
    JobStatus,
    LocalExecutor,
    SeedJob,
    SlurmExecutor,
    make_executor,
)
from nanolm.repro.seeds import run_seeds

SHORT = [*TINY, "steps=4", "eval_every=4", "ckpt_every=4"]
BLOWUP = ["lr=1e9", "grad_clip=0", "warmup_steps=0"]


def child(job: SeedJob) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nanolm.repro.executors", "--job", "-"],
        input=json.dumps(asdict(job)),
        capture_output=True,
        text=True,
    )


def test_the_child_answers_with_one_json_object_whatever_the_outcome(tmp_path):
    runs = f"runs_dir={tmp_path}"
    ok = child(SeedJob([*SHORT, runs, "seed=99", "name=ignored"], 7, "g"))
    answer = json.loads(ok.stdout)  # the whole of stdout is the answer
    assert ok.returncode == 0 and answer["status"] == "finished" and answer["seed"] == 7 and answer["group"] == "g"
    manifest = json.loads((Path(answer["run_dir"]) / "manifest.json").read_text())
    assert manifest["config"]["seed"] == 7 and manifest["config"]["group"] == "g"  # the job's, not the overrides'
    assert answer["run_dir"].endswith("-g-seed7") and answer["final"]["val_loss"] == manifest["final"]["val_loss"]

    diverged = json.loads(child(SeedJob([*SHORT, runs, *BLOWUP], 8, "g")).stdout)
    assert diverged["status"] == "diverged" and diverged["run_dir"] is None
    assert diverged["message"].startswith("seed 8 diverged: loss became nan")

    failed = json.loads(child(SeedJob([*SHORT, runs, "data=/no/such/file.txt"], 9, "g")).stdout)
    assert failed["status"] == "failed" and failed["message"].startswith("seed 9 failed: --data /no/such/file.txt")
    assert "\n" not in failed["message"]


def test_a_child_that_dies_without_answering_is_failed_with_its_last_words(monkeypatch):
    def dead(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, -9, "", "Traceback (most recent call last):\n  ...\nMemoryError: out\n")

    monkeypatch.setattr(executors.subprocess, "run", dead)
    outcome = executors.run_child(SeedJob([], 3, "g"), threads=1)
    assert outcome == JobOutcome(3, "g", JobStatus.FAILED, message="seed 3 failed: MemoryError: out")
    with pytest.raises(UserError, match=r"^seed 3 failed: MemoryError: out$"):
        outcome.raise_if_failed()


def test_each_child_gets_its_share_of_the_cores(monkeypatch):
    seen = []

    def answer(cmd, input, env, **kwargs):
        job = json.loads(input)
        seen.append(env["OMP_NUM_THREADS"])
        return subprocess.CompletedProcess(cmd, 0, json.dumps({**job, "status": "finished", "run_dir": "r"}), "")

    monkeypatch.setattr(executors.subprocess, "run", answer)
    monkeypatch.setattr(executors.os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    done = []
    jobs = [SeedJob(["lr=1e-3"], s, "g") for s in (1, 2, 3)]
    outcomes = LocalExecutor(jobs=2).run(jobs, done.append)
    assert seen == ["4"] * 3 and sorted(o.seed for o in done) == [1, 2, 3]
    assert [o.seed for o in outcomes] == [1, 2, 3] and all(o.status is JobStatus.FINISHED for o in outcomes)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's own setting wins
    seen.clear()
    LocalExecutor(jobs=2).run(jobs[:1])
    assert seen == ["1"]


def test_a_user_error_in_a_local_child_is_one_line_from_run_seeds(tmp_path):
    with pytest.raises(UserError, match=r"^seed 1337 failed: --data /no/such/file.txt: no such file[^\n]*$"):
        run_seeds([*SHORT, f"runs_dir={tmp_path}", "data=/no/such/file.txt"], n=2, name="bad", executor="local")


def test_the_debug_executor_returns_outcomes_in_process(tmp_path):
    runs = f"runs_dir={tmp_path}"
    outcomes = DebugExecutor().run(
        [
            SeedJob([*SHORT, runs], 1, "d"),
            SeedJob([*SHORT, runs, *BLOWUP], 2, "d"),
            SeedJob([*SHORT, runs, "data=/no/such/file.txt"], 3, "d"),
        ]
    )
    assert [o.status for o in outcomes] == [JobStatus.FINISHED, JobStatus.DIVERGED, JobStatus.FAILED]
    assert outcomes[0].run_dir.endswith("-d-seed1") and "val_loss" in outcomes[0].final
    assert outcomes[2].message.startswith("seed 3 failed: --data")


def test_outcomes_and_statuses_round_trip_as_their_strings():
    outcome = JobOutcome(1, "g", JobStatus.DIVERGED, message="seed 1 diverged: loss became nan at step 2")
    d = json.loads(json.dumps(outcome.to_dict()))
    assert d["status"] == "diverged" and JobOutcome.from_dict(d) == outcome
    assert [s.value for s in JobStatus] == ["finished", "diverged", "failed"]
    assert f"{JobStatus.FAILED}" == str(JobStatus.FAILED) == "failed"
    outcome.raise_if_failed()  # not failed: nothing to raise


def test_make_executor(tmp_path):
    assert isinstance(make_executor("local", 3), LocalExecutor) and make_executor("local", 3).jobs == 3
    assert isinstance(make_executor("debug"), DebugExecutor)
    slurm = make_executor("slurm", runs_dir=tmp_path, name="grp")
    assert isinstance(slurm, SlurmExecutor) and slurm.folder == tmp_path / "slurm" and slurm.job_name == "nanolm-grp"
    with pytest.raises(UserError, match="--executor must be local, debug or slurm, got 'ray'"):
        make_executor("ray")
    with pytest.raises(UserError, match="--jobs must be >= 1"):
        LocalExecutor(0)
