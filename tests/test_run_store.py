"""The run store: the typed manifest every reader uses, artifact folders, the weights fingerprint, and
the one place a run's status changes (RunRecord)."""

from __future__ import annotations

import json

import pytest
import torch

from nanolm.errors import RunStopped, UserError
from nanolm.runs import (
    MANIFEST_SCHEMA,
    Manifest,
    RunFinal,
    RunStatus,
    artifact_dir,
    list_runs,
    read_manifest,
    same_fingerprint,
    weights_fingerprint,
    write_manifest,
)
from nanolm.train import RunRecord, TrainingDiverged, TrainingInterrupted, train


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from conftest import tiny_config

    return train(tiny_config(tmp_path_factory.mktemp("store"), "steps=3", "eval_every=3", "ckpt_every=3"), progress=False).run_dir


def test_manifest_round_trips_the_file_training_wrote(finished_run):
    raw = json.loads((finished_run / "manifest.json").read_text())
    m = read_manifest(finished_run)
    assert m.to_dict() == raw  # every key, every value, nothing added or lost
    assert raw["schema"] == MANIFEST_SCHEMA and m.status is RunStatus.FINISHED
    assert m.final.step == 3 and set(m.final.metrics()) == {"train_loss", "val_loss", "tokens_per_s", "seconds"}
    assert m.data_version == raw["data"]["version"] and m.data_sha256 == raw["data"]["sha256"]


def test_unknown_keys_survive_a_rewrite(tmp_path, finished_run):
    raw = json.loads((finished_run / "manifest.json").read_text())
    run = tmp_path / "copy"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({**raw, "written_by_a_newer_version": {"x": 1}}))
    m = read_manifest(run)
    assert m.extra == {"written_by_a_newer_version": {"x": 1}}
    write_manifest(run, m)
    assert json.loads((run / "manifest.json").read_text())["written_by_a_newer_version"] == {"x": 1}


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("seed", "7", "seed is str"),
        ("final", {"val_loss": 1.0}, "final has no step"),
        ("status", "sleeping", "unknown status 'sleeping'"),
        ("final", {"step": 3, "val_loss": "low"}, "final val_loss is not a number"),
        ("git", [], "git is list"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_line_naming_the_key(tmp_path, finished_run, key, value, named):
    raw = json.loads((finished_run / "manifest.json").read_text())
    run = tmp_path / "edited"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({**raw, key: value}))
    with pytest.raises(UserError, match="corrupt manifest") as e:
        read_manifest(run)
    assert named in str(e.value) and "\n" not in str(e.value)
    [listed] = list_runs(tmp_path)  # shown in the listing with what is wrong, not hidden and not a crash
    assert listed.path == run and listed.status == "unreadable" and named in listed.problem


def test_artifact_dir_is_a_folder_inside_the_run(tmp_path):
    assert artifact_dir(tmp_path, "tuned_lens") == tmp_path / "tuned_lens"
    assert not (tmp_path / "tuned_lens").exists()  # looking for an artifact makes no folder
    assert artifact_dir(tmp_path, "tuned_lens", create=True) == tmp_path / "tuned_lens" and (tmp_path / "tuned_lens").is_dir()
    assert artifact_dir(tmp_path, "tuned_lens", create=True) == tmp_path / "tuned_lens"  # a second call finds it
    for bad in ("../escape", "a/b", ""):
        with pytest.raises(ValueError):
            artifact_dir(tmp_path, bad)


def test_weights_fingerprint_tells_models_apart_and_survives_moves():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 100, generator=g)
    assert same_fingerprint(weights_fingerprint(w), weights_fingerprint(w.clone().double()))
    shuffled = w[:, torch.randperm(100, generator=g)]  # same values, other columns: another model
    assert not same_fingerprint(weights_fingerprint(w), weights_fingerprint(shuffled))
    nudged = w.clone()
    nudged[3, 7] += 1e-2
    assert not same_fingerprint(weights_fingerprint(w), weights_fingerprint(nudged))
    # By hand: the sum of w[i, j] * (1 + j / (n - 1)), in float64.
    ramp = 1 + torch.arange(100, dtype=torch.float64) / 99
    assert weights_fingerprint(w) == pytest.approx(float((w.double() * ramp).sum()), rel=1e-12)


class RecordingTracker:
    def __init__(self, run_dir):
        self.run_dir, self.calls = run_dir, []

    def start(self, run_dir, manifest):
        self.calls.append(("start", read_manifest(run_dir).status if (run_dir / "manifest.json").exists() else None))

    def log(self, step, metrics):
        self.calls.append(("log", step))

    def finish(self, status):
        # The manifest on disk already says how the run ended when the tracker hears of it.
        self.calls.append(("finish", status, read_manifest(self.run_dir).status.value))


def test_run_record_owns_every_status_change(tmp_path):
    from nanolm.runs import MetricsLog

    run = tmp_path / "run"
    run.mkdir()
    manifest = Manifest(name="r", run_dir=str(run), config={"steps": 10})
    tracker = RecordingTracker(run)
    record = RunRecord(run, manifest, MetricsLog(run / "metrics.jsonl"), tracker)
    record.start()
    assert read_manifest(run).status is RunStatus.RUNNING
    record.log({"step": 1, "train_loss": 2.0})
    error = record.diverged(4, "loss became nan at step 4")
    assert isinstance(error, TrainingDiverged) and isinstance(error, RunStopped) and not isinstance(error, UserError)
    m = read_manifest(run)
    assert m.status is RunStatus.DIVERGED and m.final == RunFinal(step=4, diverged_at=4)
    assert tracker.calls[-1] == ("finish", "diverged", "diverged")

    record.start()
    stop = record.interrupted(6)
    assert isinstance(stop, TrainingInterrupted) and stop.exit_code == 130 and "--resume" in str(stop)
    assert read_manifest(run).status is RunStatus.INTERRUPTED

    record.start()
    record.finish(RunStatus.FINISHED, RunFinal(step=10, train_loss=1.5, val_loss=1.6, tokens_per_s=100.0, seconds=1.0))
    m = read_manifest(run)
    assert m.status is RunStatus.FINISHED and m.final.val_loss == 1.6
    assert tracker.calls[-1] == ("finish", "finished", "finished")
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[0]) == {"step": 1, "train_loss": 2.0}
