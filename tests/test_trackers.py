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
    run = client.get_run(manifest.trackers["mlflow_run_id"])
    assert run.data.params["steps"] == "6" and run.data.params["d_model"] == "32"
    assert run.data.tags["data_version"] == manifest.data["version"]
    assert run.data.tags["git_commit"] == str(manifest.git["commit"])
    history = client.get_metric_history(run.info.run_id, "train_loss")
    local = [(r["step"], r["train_loss"]) for r in read_metrics(result.run_dir)]
    assert [m.step for m in history] == [s for s, _ in local]
    assert [m.value for m in history] == pytest.approx([v for _, v in local])
    assert run.info.status == "FINISHED"
    assert client.get_metric_history(run.info.run_id, "val_loss")[-1].value == pytest.approx(
        [r for r in read_metrics(result.run_dir) if "val_loss" in r][-1]["val_loss"]
    )


def test_tensorboard_reads_back_scalars(tiny):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = train(tiny("steps=4", "eval_every=4", "ckpt_every=4", "log_every=1", "tracker=tensorboard"), progress=False)
    acc = EventAccumulator(str(result.run_dir / "tensorboard"))
    acc.Reload()
    scalars = acc.Scalars("train_loss")
    local = read_metrics(result.run_dir)
    assert [e.step for e in scalars] == [r["step"] for r in local]
    assert [e.value for e in scalars] == pytest.approx([r["train_loss"] for r in local])


def wandb_records(path) -> list:
    """The protobuf records of an offline .wandb file: a 7-byte header, then LevelDB-style log
    records (crc32c 4 bytes, length 2, type 1: 1 full, 2 first, 3 middle, 4 last) in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    pos, block, buf, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
    return out


def records_once_written(path, timeout_s: float = 60.0) -> list:
    """wandb's service process writes the log after run.finish() returns; wait for its exit record."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            records = wandb_records(path)
        except Exception:  # a record caught half-written; read again
            if time.monotonic() > deadline:
                raise
            records = []
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def test_wandb_offline_run_reads_back_config_and_metrics(tiny, monkeypatch):
    import json

    monkeypatch.setenv("WANDB_MODE", "offline")
    result = train(tiny("steps=4", "eval_every=4", "ckpt_every=4", "log_every=2", "tracker=wandb"), progress=False)
    manifest = read_manifest(result.run_dir)
    run_id = manifest.trackers["wandb_run_id"]
    files = list((result.run_dir.parent / "wandb").glob(f"offline-run-*-{run_id}/*.wandb"))
    assert len(files) == 1
    records = records_once_written(files[0])
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == run_id

    def key(item) -> str:  # wandb writes either key or nested_key
        return item.key or "/".join(item.nested_key)

    config = {key(item): json.loads(item.value_json) for item in run.config.update}
    assert config["lr"] == manifest.config["lr"] and config["steps"] == 4
    history = [
        {key(i): json.loads(i.value_json) for i in r.history.item} for r in records if r.WhichOneof("record_type") == "history"
    ]
    logged = {h["_step"]: h["train_loss"] for h in history if "train_loss" in h}
    local = {r["step"]: r["train_loss"] for r in read_metrics(result.run_dir) if r.get("train_loss") is not None}
    assert logged == pytest.approx(local) and sorted(logged) == [2, 4]


def test_unknown_tracker_is_refused(tiny):
    with pytest.raises(UserError, match="tracker must be"):
        tiny("tracker=neptune")
