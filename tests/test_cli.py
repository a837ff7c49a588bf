"""The CLI's happy paths: train, runs, runs show and sample, as a user types them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import TINY


def nanolm(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}  # rich wraps tables to the terminal width
    return subprocess.run([sys.executable, "-m", "nanolm", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_train_runs_show_and_sample(tmp_path):
    sets = [a for kv in [*TINY, "steps=100", "eval_every=100", "ckpt_every=100", "lr=1e-2"] for a in ("--set", kv)]
    out = nanolm("train", *sets, "--name", "cli", "-q", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "finished" and result["step"] == 100
    assert result["val_loss"] < result["unigram_entropy"]

    listed = nanolm("runs", "--json", cwd=tmp_path)
    assert [r["name"] for r in json.loads(listed.stdout)] == ["cli"]
    table = nanolm("runs", cwd=tmp_path)
    assert "finished" in table.stdout and "100/100" in table.stdout  # one data version: no data column

    shown = json.loads(nanolm("runs", "show", "cli", cwd=tmp_path).stdout)
    assert shown["config"]["steps"] == 100 and shown["final"]["step"] == 100

    sampled = nanolm("sample", "cli", "-p", "two plus two equals", "-n", "5", "--json", cwd=tmp_path)
    assert sampled.returncode == 0, sampled.stderr
    [completion] = json.loads(sampled.stdout)
    assert completion["prompt"] == "two plus two equals" and completion["unknown_words"] == []
    assert 1 <= len(completion["completion"].split()) <= 5


def test_every_command_has_help(tmp_path):
    for cmd in (
        ["--help"],
        ["train", "--help"],
        ["sample", "--help"],
        ["runs", "--help"],
        ["runs", "show", "--help"],
        ["demo", "--help"],
        ["lens", "--help"],
        ["lens", "train", "--help"],
        ["lens", "eval", "--help"],
        ["probe", "--help"],
    ):
        out = nanolm(*cmd, cwd=tmp_path)
        assert out.returncode == 0 and "Usage:" in out.stdout, cmd


def test_repro_check_from_the_command_line(tmp_path):
    sets = [a for kv in [*TINY, f"runs_dir={tmp_path / 'runs'}"] for a in ("--set", kv)]
    out = nanolm("repro", "check", *sets, "--steps", "3", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["identical"] is True and result["steps"] == 3 and result["first_divergent_step"] is None
    text = nanolm("repro", "check", *sets, "--steps", "2", cwd=tmp_path)
    assert "identical: 2 steps" in text.stdout


def test_train_tracker_flag_logs_to_tensorboard(tmp_path):
    sets = [a for kv in [*TINY, "steps=4", "eval_every=4", "ckpt_every=4", "log_every=1"] for a in ("--set", kv)]
    out = nanolm("train", *sets, "--tracker", "tensorboard", "-q", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run_dir = tmp_path / json.loads(out.stdout)["run_dir"]  # a relative path is relative to cwd
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["tracker"] == "tensorboard"
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*")), "no TensorBoard event file written"


def test_the_cli_starts_without_importing_torch(tmp_path):
    code = "import sys, nanolm.cli; sys.exit(1 if 'torch' in sys.modules else 0)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, "importing nanolm.cli pulled in torch: keep heavy imports inside the commands"


def test_runs_table_fits_80_columns_and_tells_the_truth(tmp_path, cli, monkeypatch):
    """A stopped run shows the steps it did of its target, a resumed one its new target, a run with an
    unreadable manifest is listed (and warned about) rather than hidden, and nothing wraps at 80 columns."""
    from nanolm.config import make_config
    from nanolm.train import train

    runs = tmp_path / "runs"
    cfg = make_config(
        overrides=[*TINY, f"runs_dir={runs}", "steps=4", "ckpt_every=2", "eval_every=4"], name="a-rather-long-run-name"
    )
    stopped = train(cfg, stop_at=2, progress=False).run_dir
    longer = train(
        make_config(overrides=[*TINY, f"runs_dir={runs}", "steps=3", "ckpt_every=3", "eval_every=3"], name="short"),
        progress=False,
    ).run_dir
    train(
        make_config(overrides=[*TINY, f"runs_dir={runs}", "steps=5", "ckpt_every=5", "eval_every=5"], name="short"),
        resume=longer,
        progress=False,
    )
    (runs / "broken").mkdir()
    (runs / "broken" / "manifest.json").write_text("{not json")
    monkeypatch.setenv("COLUMNS", "80")
    out = cli("runs", "--runs-dir", str(runs), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80, out.stdout
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line.strip().startswith(("2", "broken"))}
    assert stopped.name in rows, out.stdout
    assert rows[stopped.name][1:3] == ["stopped", "2/4"], out.stdout
    assert rows[longer.name][1:3] == ["finished", "5/5"], out.stdout
    assert rows["broken"][1] == "unreadable", out.stdout
    assert "nanolm: warning: broken: " in out.stderr and "corrupt manifest" in out.stderr
