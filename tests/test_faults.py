"""Faults and hostile input during training: a signal, a kill, a full disk, an edited run folder. The
promise: one clear line, nothing lost that a checkpoint had, and a recorded status that tells the truth."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nanolm.errors import RunStopped, UserError
from nanolm.runs import RunStatus, list_runs, read_manifest, resolve_run
from nanolm.train import train

# Slow enough per step that a signal lands mid-run, small enough to start in a second or two.
SLOW = [
    "n_layer=2",
    "n_head=2",
    "d_model=64",
    "block_size=32",
    "batch_size=16",
    "corpus_lines=3000",
    "eval_batches=1",
    "warmup_steps=2",
    "steps=100000",
    "eval_every=100000",
    "ckpt_every=100000",
    "log_every=5",
]


def start_training(tmp_path: Path, *sets: str) -> subprocess.Popen:
    args = [a for kv in [*SLOW, f"runs_dir={tmp_path / 'runs'}", *sets] for a in ("--set", kv)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "nanolm", "train", *args, "--name", "victim", "-q"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for_steps(tmp_path: Path, steps: int, timeout: float = 90) -> Path:
    """The run folder, once its metrics log reaches `steps`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for metrics in (tmp_path / "runs").glob("*/metrics.jsonl"):
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            if rows and rows[-1]["step"] >= steps:
                return metrics.parent
        time.sleep(0.2)
    raise AssertionError(f"the run did not reach step {steps} in {timeout} s")


def test_sigterm_checkpoints_marks_interrupted_and_says_how_to_resume(tmp_path):
    proc = start_training(tmp_path)
    try:
        run = wait_for_steps(tmp_path, 10)
        proc.send_signal(signal.SIGTERM)  # what timeout, kill, SLURM preemption and docker stop send
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "terminated (SIGTERM)" in lines[0] and f"--resume {run}" in lines[0], err
    m = read_manifest(run)
    assert m.status is RunStatus.INTERRUPTED and m.checkpoint_step >= 10
    assert (run / "checkpoints" / f"step_{m.checkpoint_step:07d}" / "model.safetensors").is_file()
    assert f"checkpoint at step {m.checkpoint_step}" in lines[0]


def test_kill_9_shows_as_died_and_a_timed_checkpoint_keeps_the_progress(tmp_path):
    proc = start_training(tmp_path, "ckpt_seconds=0.5")
    try:
        run = wait_for_steps(tmp_path, 10)
        deadline = time.monotonic() + 30
        while read_manifest(run).checkpoint_step is None and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.kill()  # SIGKILL: no handler runs
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    m = read_manifest(run)
    assert m.status is RunStatus.RUNNING  # what the file says: the process could not update it
    assert m.owner["pid"] == proc.pid
    [summary] = list_runs(tmp_path / "runs")
    assert summary.status == "died" and summary.step == m.checkpoint_step >= 1
    # The timed checkpoint is whole: the run resumes from it (from `latest`, which a kill between the
    # checkpoint's rename and the manifest's update can leave one checkpoint ahead of the manifest).
    from nanolm.checkpoint import read_checkpoint

    at = int(read_checkpoint(run).state["step"])
    assert at >= m.checkpoint_step
    result = train(None, resume=run, stop_at=at + 2, progress=False)
    assert result.step == at + 2 and read_manifest(run).status is RunStatus.STOPPED


def test_a_full_disk_stops_with_one_line_and_keeps_the_last_checkpoint(tiny, monkeypatch):
    import nanolm.checkpoint as checkpoint

    real, calls = checkpoint.save_file, []

    def fills_up(tensors, path, *args, **kwargs):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_file", fills_up)
    with pytest.raises(RunStopped) as e:
        train(tiny("steps=6", "ckpt_every=2", "eval_every=6"), progress=False)
    message = str(e.value)
    assert "No space left on device" in message and "the checkpoint at step 2 is intact" in message
    assert "\n" not in message and not isinstance(e.value, UserError)
    [run] = [r.path for r in list_runs(tiny().runs_dir)]
    assert read_manifest(run).status is RunStatus.INTERRUPTED
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_0000002"]  # no temp left
    monkeypatch.setattr(checkpoint, "save_file", real)
    assert train(None, resume=run, progress=False).step == 6


def test_nothing_is_created_when_the_tracker_or_the_device_cannot_work(tiny, monkeypatch):
    import nanolm.trackers as trackers

    def missing(module, name):
        raise UserError(f"--tracker {name} needs its extra: pip install 'nanolm[{name}]'")

    monkeypatch.setattr(trackers, "_need", missing)
    monkeypatch.setattr(trackers.MlflowTracker, "__init__", lambda self: trackers._need("mlflow", "mlflow"))
    runs = Path(tiny().runs_dir)
    with pytest.raises(UserError, match="needs its extra"):
        train(tiny("steps=2", "tracker=mlflow"), progress=False)
    for device in ("meta", "mps", "cuda:7", "tpu"):
        with pytest.raises(UserError, match="device") as e:
            train(tiny("steps=2", f"device={device}"), progress=False)
        assert "--set device=cpu" in str(e.value) or "--set device=auto" in str(e.value), str(e.value)
    assert not runs.exists() or list(runs.iterdir()) == []


def test_names_and_numbers_that_cannot_work_are_refused_before_anything_is_written(tiny):
    with pytest.raises(UserError, match="name must be 1 to 100 characters"):
        tiny("steps=2", name="x" * 300)
    with pytest.raises(UserError, match=r"steps='1.5' is not a valid int"):
        tiny("steps=1.5")
    assert tiny("steps=1e3").steps == 1000
    with pytest.raises(UserError, match="--stop-at -1: the run is at step 0"):
        train(tiny("steps=2"), stop_at=-1, progress=False)
    assert not Path(tiny().runs_dir).exists()


def test_a_read_only_runs_folder_is_one_line(tiny, monkeypatch):
    real_mkdir = Path.mkdir

    def refuse(self, *args, **kwargs):
        if self.parent.name == "runs":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(UserError, match=r"cannot create a run folder in .*runs: Permission denied; set runs_dir"):
        train(tiny("steps=2"), progress=False)


def test_resume_with_more_steps_says_the_lr_moves_and_records_it(tiny):
    first = train(tiny("steps=20", "ckpt_every=20", "eval_every=20", "warmup_steps=2"), progress=False)
    notes = []
    longer = tiny("steps=40", "ckpt_every=20", "eval_every=20", "warmup_steps=2")
    result = train(longer, resume=first.run_dir, progress=False, on_note=notes.append)
    assert result.step == 40 and result.notes == notes
    [note] = notes
    assert "steps changed 20 -> 40" in note and "40-step cosine schedule" in note
    m = read_manifest(first.run_dir)
    assert m.config["steps"] == 40  # the listing shows 40/40, not 40/20
    entry = m.resumes[-1]
    assert entry["changed"] == {"steps": [20, 40]}
    # By hand: step 20 (the last taken) used the 20-step cosine at 17/18 of its way down (2 warmup steps);
    # step 21 uses the 40-step one at 18/38 of its way: the lr jumps back up.
    import math

    lr, floor = longer.lr, longer.lr * longer.min_lr_ratio

    def cosine(progress: float) -> float:
        return floor + 0.5 * (lr - floor) * (1 + math.cos(math.pi * progress))

    assert entry["lr_schedule"]["lr_before"] == pytest.approx(cosine(17 / 18))
    assert entry["lr_schedule"]["lr_after"] == pytest.approx(cosine(18 / 38))
    [summary] = list_runs(longer.runs_dir)
    assert (summary.step, summary.steps) == (40, 40)


def test_an_edited_or_moved_run_folder_on_resume(tiny, tmp_path):
    part = train(tiny("steps=6", "ckpt_every=3", "eval_every=6"), stop_at=3, progress=False)
    moved = tmp_path / "elsewhere"
    part.run_dir.rename(moved)
    (moved / "metrics.jsonl").unlink()
    raw = json.loads((moved / "manifest.json").read_text())
    edited = {**raw, "model_config": {**raw["model_config"], "n_layer": 7}}
    (moved / "manifest.json").write_text(json.dumps(edited))
    with pytest.raises(UserError, match="the manifest's model_config was edited \\(n_layer: 7 in the manifest, 2 in"):
        train(None, resume=moved, progress=False)
    (moved / "manifest.json").write_text(json.dumps(raw))
    notes = []
    train(None, resume=moved, progress=False, on_note=notes.append)
    assert any("metrics.jsonl is missing" in n for n in notes)
    assert read_manifest(moved).run_dir == str(moved)  # the folder's place now, not where it was made


def test_a_data_file_run_resumes_from_another_folder(tiny, tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    (tmp_path / "here" / "text.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    monkeypatch.chdir(tmp_path / "here")
    part = train(tiny("steps=4", "ckpt_every=2", "eval_every=4", data="text.txt"), stop_at=2, progress=False)
    assert read_manifest(part.run_dir).config["data"] == str(tmp_path / "here" / "text.txt")
    monkeypatch.chdir(tmp_path / "there")
    assert train(None, resume=part.run_dir, progress=False).step == 4


def test_two_runs_of_one_name_are_ambiguous_and_listed(tiny):
    from nanolm.runs import new_run_dir

    a = train(tiny("steps=1", "ckpt_every=1", "eval_every=1", name="same"), progress=False)
    runs_dir = a.run_dir.parent
    b = new_run_dir(runs_dir, "same")  # what a second run started in the same second gets
    stamp = a.run_dir.name.removesuffix("-same")
    b = b.rename(runs_dir / f"{stamp}-same-1")
    (b / "manifest.json").write_text((a.run_dir / "manifest.json").read_text())
    with pytest.raises(UserError, match="run 'same' is ambiguous: 2 runs match") as e:
        resolve_run("same", runs_dir)
    assert a.run_dir.name in str(e.value) and b.name in str(e.value)
    assert resolve_run(b.name, runs_dir) == b and resolve_run(a.run_dir.name, runs_dir) == a.run_dir


def test_checkpoint_files_follow_the_umask(tiny):
    run = train(tiny("steps=1", "ckpt_every=1", "eval_every=1"), progress=False).run_dir
    umask = os.umask(0)
    os.umask(umask)
    ckpt = next((run / "checkpoints").glob("step_*"))
    modes = {p.name: p.stat().st_mode & 0o777 for p in ckpt.iterdir()}
    assert set(modes.values()) == {0o666 & ~umask}, modes


def test_review_findings_stay_fixed(tiny, tmp_path, monkeypatch):
    """Found by a review: null objects in a manifest, a name ending in -3, an lr note during warm-up, a
    stale final while a resumed run trains, and resuming a run its owner is still training."""
    import dataclasses

    from nanolm.runs import owner_info, write_manifest
    from nanolm.train import RunRecord, _schedule_note

    first = train(tiny("steps=4", "ckpt_every=2", "eval_every=4"), stop_at=2, progress=False)
    raw = json.loads((first.run_dir / "manifest.json").read_text())
    (first.run_dir / "manifest.json").write_text(json.dumps({**raw, "git": None, "owner": None}))
    assert read_manifest(first.run_dir).git == {} and list_runs(first.run_dir.parent)[0].status == "stopped"

    runs = tmp_path / "names"
    for name in ("20260101-000000-lr", "20260101-000001-lr-3"):
        (runs / name).mkdir(parents=True)
        (runs / name / "manifest.json").write_text(json.dumps({"config": {}}))
    assert resolve_run("lr", runs).name == "20260101-000000-lr"
    assert resolve_run("lr-3", runs).name == "20260101-000001-lr-3"

    cfg = tiny("steps=1000", "warmup_steps=100")
    notes: list[str] = []
    _schedule_note(cfg.to_dict(), cfg, 5, notes)  # same length, inside the warm-up: nothing moved
    _schedule_note(dataclasses.replace(cfg, steps=500).to_dict(), cfg, 5, notes)  # warm-up is the same too
    assert notes == []

    m = read_manifest(first.run_dir)
    record = RunRecord(first.run_dir, m, None, type("T", (), {"start": lambda *a: None})())
    record.start()
    assert read_manifest(first.run_dir).final is None  # not the old run's numbers while it trains again

    m = read_manifest(first.run_dir)
    m.owner = owner_info()  # this very process "is training it"
    write_manifest(first.run_dir, m)
    with pytest.raises(UserError, match="is still training it"):
        train(None, resume=first.run_dir, progress=False)


def test_a_failing_job_cancels_the_queued_ones(monkeypatch):
    from nanolm.repro import executors

    started = []

    def fails(job, threads):
        started.append(job.seed)
        return executors.JobOutcome(job.seed, job.group, executors.JobStatus.FAILED, None, {}, "planted failure")

    monkeypatch.setattr(executors, "run_child", fails)
    jobs = [executors.SeedJob([], s, "g") for s in range(6)]
    with pytest.raises(UserError, match="planted failure"):
        executors.LocalExecutor(1).run(jobs, lambda outcome: outcome.raise_if_failed())
    assert len(started) < 6, started
