"""Trackers log the same config, manifest and metrics as the local run store; read back for real."""

from __future__ import annotations

import pytest

from nanolm.errors import UserError
from nanolm.runs import read_manifest, read_metrics
from nanolm.train import train


def test_mlflow_reads_back_config_commit_data_and_metrics(tiny):
    import mlflow

    result = train(tiny("steps=6", "eval_every=3", "ckpt_every=6", "log_every=1", "tracker=mlflow"), progress=False)
    manifest = read_manifest(result.run_dir)
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{result.run_dir.parent / 'mlflow.db'}")
    run = client.get_run(manifest["trackers"]["mlflow_run_id"])
    assert run.data.params["steps"] == "6" and run.data.params["d_model"] == "32"
    assert run.data.tags["data_version"] == manifest["data"]["version"]
    assert run.data.tags["git_commit"] == str(manifest["git"]["commit"])
    history = client.get_metric_history(run.info.run_id, "train_loss")
    local = [(r["step"], r["train_loss"]) for r in read_metrics(result.run_dir)]
    assert [m.step for m in history] == [s for s, _ in local]
    assert [m.value for m in history] == pytest.approx([v for _, v in local])
    assert run.info.status == "FINISHED"
    assert client.get_metric_history(run.info.run_id, "val_loss")[-1].value == pytest.approx(
        [r for r in read_metrics(result.run_dir) if "val_loss" in r][-1]["val_loss"])


def test_tensorboard_reads_back_scalars(tiny):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = train(tiny("steps=4", "eval_every=4", "ckpt_every=4", "log_every=1", "tracker=tensorboard"), progress=False)
    acc = EventAccumulator(str(result.run_dir / "tensorboard"))
    acc.Reload()
    scalars = acc.Scalars("train_loss")
    local = read_metrics(result.run_dir)
    assert [e.step for e in scalars] == [r["step"] for r in local]
    assert [e.value for e in scalars] == pytest.approx([r["train_loss"] for r in local])


def test_wandb_offline_writes_a_local_run(tiny, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    result = train(tiny("steps=2", "eval_every=2", "ckpt_every=2", "tracker=wandb"), progress=False)
    run_id = read_manifest(result.run_dir)["trackers"]["wandb_run_id"]
    files = list((result.run_dir.parent / "wandb").glob(f"offline-run-*-{run_id}/*.wandb"))
    assert len(files) == 1 and files[0].stat().st_size > 0


def test_unknown_tracker_is_refused(tiny):
    with pytest.raises(UserError, match="tracker must be"):
        tiny("tracker=neptune")
