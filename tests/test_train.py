"""Training: the loss falls, a resumed run equals the uninterrupted one bit for bit, divergence
stops the run at the right step with the last good checkpoint intact, and runs are recorded."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import torch

from nanolm.checkpoint import find_checkpoint, load_trained_model, read_checkpoint
from nanolm.config import TrainConfig
from nanolm.runs import list_runs, read_manifest, read_metrics, resolve_run
from nanolm.train import TrainingDiverged, lr_at, train


def test_loss_falls_far_below_the_unigram_baseline(tiny):
    cfg = tiny("steps=250", "eval_every=250", "ckpt_every=250", "lr=1e-2", "batch_size=16", "log_every=1")
    result = train(cfg, progress=False)
    rows = read_metrics(result.run_dir)
    vocab = read_checkpoint(result.run_dir).tokenizer.vocab_size
    assert rows[0]["train_loss"] > 0.9 * math.log(vocab)  # starts near uniform
    assert result.val_loss < 0.75 * result.unigram_entropy
    assert result.status == "finished" and result.step == 250


def test_resume_is_bitwise_identical_to_the_uninterrupted_run(tiny):
    overrides = ("steps=12", "log_every=1", "eval_every=6", "ckpt_every=100", "dropout=0.1")
    full = train(tiny(*overrides, name="full", deterministic=True), progress=False)
    part = train(tiny(*overrides, name="part", deterministic=True), stop_at=5, progress=False)
    assert part.status == "stopped" and read_checkpoint(part.run_dir).state["step"] == 5
    resumed = train(resume=part.run_dir, progress=False)
    assert resumed.status == "finished"
    losses_full = [(r["step"], r["train_loss"], r.get("val_loss")) for r in read_metrics(full.run_dir)]
    losses_resumed = [(r["step"], r["train_loss"], r.get("val_loss")) for r in read_metrics(part.run_dir)]
    assert [s for s, *_ in losses_resumed] == list(range(1, 13))
    assert losses_full == losses_resumed  # floats compared exactly
    a, _, _ = load_trained_model(full.run_dir)
    b, _, _ = load_trained_model(part.run_dir)
    for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(p, q), name
    assert read_manifest(part.run_dir).resumes[0]["from_step"] == 5


def test_a_run_resumes_as_the_model_it_is_when_its_preset_changes(tiny, monkeypatch):
    """gpt2-124m tied W_U on 2026-12-04; a run trained before, its config saying tie_embeddings=None ("the preset's"),
    still resumes as the untied model its checkpoint holds, by the CLI's path and the library's."""
    from nanolm import model as model_module
    from nanolm.train import merged_config

    part = train(tiny("steps=6", "ckpt_every=100", name="old"), stop_at=3, progress=False)
    assert read_manifest(part.run_dir).config["tie_embeddings"] is None
    monkeypatch.setitem(model_module.PRESETS, "tiny", {**model_module.PRESETS["tiny"], "tie_embeddings": True})
    assert merged_config(part.run_dir).tie_embeddings is False
    resumed = train(resume=part.run_dir, progress=False)
    assert resumed.status == "finished"
    trained, _, _ = load_trained_model(part.run_dir)
    assert trained.cfg.tie_embeddings is False and trained.unembed.weight is not trained.embed.weight


def test_divergence_names_the_step_and_keeps_the_last_good_checkpoint(tiny, monkeypatch):
    import torch.nn.functional as F

    real = F.cross_entropy
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 7 else loss  # the 7th training step

    monkeypatch.setattr(F, "cross_entropy", poisoned)
    cfg = tiny("steps=10", "ckpt_every=5", "eval_every=100", "log_every=100")
    with pytest.raises(TrainingDiverged, match="at step 7"):
        train(cfg, progress=False)
    run = list_runs(cfg.runs_dir)[0]
    assert run.status == "diverged"
    ckpt = find_checkpoint(run.path)
    assert ckpt.name == "step_0000005"
    model, _, _ = load_trained_model(run.path)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_lr_schedule_warms_up_then_follows_the_cosine():
    cfg = TrainConfig(lr=1.0, warmup_steps=10, steps=110, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(60, cfg) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the decay
    assert lr_at(110, cfg) == pytest.approx(0.1)


def test_manifest_records_config_commit_data_and_versions(tiny, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env={**env, "PATH": "/usr/bin:/bin"}
        ).stdout.strip()

    git("init", "-q")
    (repo / "f.txt").write_text("a")
    git("add", "f.txt")
    git("commit", "-qm", "c")
    monkeypatch.chdir(repo)
    clean = train(tiny("steps=2", "eval_every=2", "ckpt_every=2"), progress=False)
    m = read_manifest(clean.run_dir)
    assert m.git == {"commit": git("rev-parse", "HEAD"), "dirty": False, "diff_sha256": None}
    assert m.config["steps"] == 2 and m.seed == 1337
    assert m.data["version"].startswith("nanolm-corpus-v1") and len(m.data["sha256"]) == 64
    assert m.environment["torch"] == torch.__version__ and m.status == "finished"
    assert m.n_params > m.n_params_non_embedding > 0
    (repo / "f.txt").write_text("b")
    dirty = train(tiny("steps=2", "eval_every=2", "ckpt_every=2"), progress=False)
    assert read_manifest(dirty.run_dir).git["dirty"] is True
    assert read_manifest(dirty.run_dir).git["diff_sha256"]
    assert resolve_run(clean.run_dir.name, clean.run_dir.parent) == clean.run_dir


def test_checkpoint_is_safetensors_and_json_and_keeps_the_newest(tiny):
    result = train(tiny("steps=6", "ckpt_every=2", "keep_checkpoints=2", "eval_every=6"), progress=False)
    root = result.run_dir / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_0000004", "step_0000006"]
    files = sorted(p.name for p in (root / "step_0000006").iterdir())
    assert files == ["model.safetensors", "optimizer.safetensors", "state.json", "tokenizer.json"]
    state = json.loads((root / "step_0000006" / "state.json").read_text())
    assert state["step"] == 6 and state["data_position"] == 6 * 8
    assert not list(result.run_dir.rglob("*.tmp"))


def test_atomic_write_keeps_the_old_file_when_the_rename_fails(tmp_path, monkeypatch):
    import os

    from nanolm.io import atomic_write_json

    path = tmp_path / "m.json"
    atomic_write_json(path, {"v": 1})

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        atomic_write_json(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_a_silently_changed_weight_file_is_caught_by_its_recorded_hash(tiny):
    from nanolm.errors import UserError

    result = train(tiny("steps=2", "eval_every=2", "ckpt_every=2"), progress=False)
    path = find_checkpoint(result.run_dir) / "model.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x01  # a low mantissa bit of the last weight: still a finite float, still a valid file
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="sha256 differs"):
        load_trained_model(result.run_dir)


def test_the_steady_step_leaves_warm_up_and_bookkeeping_out():
    from nanolm.train import steady_step_s

    # 2 slow warm-up steps (compile), then 1 ms steps, with a logging step (None) now and then
    periods = [5.0, 3.0] + [0.001, None, 0.001, 0.0012, 0.0009, None, 0.001, 0.0011]
    assert steady_step_s(periods) == 0.001
    assert steady_step_s([5.0, 3.0, 0.001, None]) is None  # fewer than 3 clean steps: no steady figure
    # a long run skips its first 10 steps, a fifth of a 30-step run its first 6
    assert steady_step_s([9.0] * 10 + [0.002] * 40) == 0.002
    assert steady_step_s([9.0] * 6 + [0.002] * 24) == 0.002
