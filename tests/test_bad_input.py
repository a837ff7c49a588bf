"""Bad input, as a user types it: each mistake ends as one line on stderr naming the problem and
the fix, exit code 2, no traceback, and nothing on disk written or overwritten.

Each kind of mistake runs the real command in a subprocess at least once; the variations go through
``nanolm.cli.main`` in this process with file-descriptor capture (capfd sees whatever reaches fd 2,
Rust or C messages included), which saves the ~2.5 s of importing torch per case."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from bad_input import TEXT_B, TINY_ARGS, assert_user_error, in_process, nanolm, run_of, snapshot
from nanolm.cli import main

# ---- --data ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "empty", "not-utf8", "too-short"])
def test_bad_data_file(tmp_path, capfd, monkeypatch, kind):
    path = tmp_path / f"{kind}.txt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "not-utf8":
        path.write_bytes("café au lait\n".encode("latin-1") * 50)
    elif kind == "too-short":
        path.write_bytes(b"abc\n")  # fewer tokens than the context of 16 + 1
    if kind == "missing":
        out = nanolm("train", "--data", path.name, *TINY_ARGS, cwd=tmp_path)
        code, err = out.returncode, out.stderr
    else:
        monkeypatch.chdir(tmp_path)
        code, err = in_process(["train", "--data", path.name, *TINY_ARGS], capfd)
    line = assert_user_error(code, err, *([path.name] if kind != "too-short" else []))
    expected = {"missing": "no such file", "empty": "empty", "not-utf8": "UTF-8", "too-short": "block_size"}[kind]
    assert expected in line
    assert not (tmp_path / "runs").exists()  # no run folder is started for bad data


# ---- config keys and values ------------------------------------------------------------------------


def test_unknown_key_subprocess(tmp_path):
    out = nanolm("train", "--set", "nosuchkey=1", "-q", cwd=tmp_path)
    line = assert_user_error(out.returncode, out.stderr, "nosuchkey")
    assert "known keys" in line and "lr" in line
    assert not (tmp_path / "runs").exists()


def test_unknown_key_in_toml(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flat.toml").write_text("lr = 1e-3\nnosuchkey = 1\n")
    (tmp_path / "table.toml").write_text("[train]\nsteps = 10\nalso_unknown = true\n")
    for file, key in (("flat.toml", "nosuchkey"), ("table.toml", "also_unknown")):
        code, err = in_process(["train", "--config", file, "-q"], capfd)
        assert "known keys" in assert_user_error(code, err, key)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "override, key",
    [
        ("lr=0", "lr"),
        ("lr=-1e-3", "lr"),
        ("batch_size=-1", "batch_size"),
        ("batch_size=0", "batch_size"),
        ("steps=0", "steps"),
        ("steps=-5", "steps"),
    ],
)
def test_non_positive_values(tmp_path, capfd, monkeypatch, override, key):
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["train", "--set", override, "-q"], capfd)
    line = assert_user_error(code, err, key, "> 0")
    assert f"--set {key}=" in line  # names the fix
    assert not (tmp_path / "runs").exists()


def test_non_positive_value_subprocess(tmp_path):
    out = nanolm("train", "--set", "lr=0", "-q", cwd=tmp_path)
    assert_user_error(out.returncode, out.stderr, "lr")


# ---- --resume of something that is not a run -------------------------------------------------------


def test_resume_folder_that_is_not_a_run(tmp_path, capfd, monkeypatch):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("not a run\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text(json.dumps({"name": "another tool's manifest"}))
    before = snapshot(tmp_path)
    out = nanolm("train", "--resume", "notes", "-q", cwd=tmp_path)
    assert "not a nanolm run" in assert_user_error(out.returncode, out.stderr, "notes")
    monkeypatch.chdir(tmp_path)
    for folder in ("notes", "other", "does-not-exist"):
        code, err = in_process(["train", "--resume", folder, "--set", "steps=8", "-q"], capfd)
        expected = "not found (no such folder" if folder == "does-not-exist" else "not a nanolm run"
        assert expected in assert_user_error(code, err, folder)
        code, err = in_process(["sample", folder], capfd)
        assert_user_error(code, err, folder)
    assert snapshot(tmp_path) == before


# ---- corrupt checkpoints -----------------------------------------------------------------------------


def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"\x8f\x00garbage, not safetensors" * 200)
    elif how == "nan":  # a valid header, every tensor value NaN: loads, but is not a model
        (header_len,) = struct.unpack("<Q", data[:8])
        body = 8 + header_len
        path.write_bytes(data[:body] + b"\xff" * (len(data) - body))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "garbage", "nan"])
def test_corrupt_checkpoint(workdir, capfd, monkeypatch, how):
    run = run_of(workdir, "words")
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    corrupt(latest / "model.safetensors", how)
    before = snapshot(run)
    resume = ["train", "--resume", str(run.relative_to(workdir)), "--set", "steps=8", "-q"]
    sample = ["sample", "words", "-p", "two plus two", "-n", "3"]
    monkeypatch.chdir(workdir)
    for argv in (resume, sample):
        if (how, argv[0]) in (("truncated", "train"), ("garbage", "sample")):
            out = nanolm(*argv, cwd=workdir)
            code, err = out.returncode, out.stderr
        else:
            code, err = in_process(argv, capfd)
        line = assert_user_error(code, err, latest.name, "corrupt checkpoint")
        assert "retrain" in line
        assert snapshot(run) == before


def test_corrupt_optimizer_state(workdir, capfd, monkeypatch):
    run = run_of(workdir, "words")
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    corrupt(latest / "optimizer.safetensors", "nan")
    before = snapshot(run)
    monkeypatch.chdir(workdir)
    code, err = in_process(["train", "--resume", str(run), "--set", "steps=8", "-q"], capfd)
    assert_user_error(code, err, latest.name, "corrupt optimizer state")
    assert snapshot(run) == before


# ---- mismatches on resume ----------------------------------------------------------------------------


def test_config_mismatch_on_resume(workdir):
    run = run_of(workdir, "words")
    before = snapshot(run)
    out = nanolm("train", "--resume", str(run), "--set", "n_layer=2", "--set", "steps=8", "-q", cwd=workdir)
    line = assert_user_error(out.returncode, out.stderr, "config mismatch", "n_layer")
    assert "new run" in line
    assert snapshot(run) == before


def test_other_data_file_on_resume(workdir, capfd, monkeypatch):
    run = run_of(workdir, "bytes")
    (workdir / "b.txt").write_text(TEXT_B, encoding="utf-8")
    before = snapshot(run)
    monkeypatch.chdir(workdir)
    code, err = in_process(["train", "--resume", str(run), "--data", "b.txt", "--set", "steps=8", "-q"], capfd)
    assert_user_error(code, err, "mismatch", "data", "b.txt")
    assert snapshot(run) == before


def test_data_file_changed_on_resume(workdir, capfd, monkeypatch):
    """Same file name, new content: the data's hash differs from the one the run trained on. (The run
    records its file's absolute path; this copy of the folder names its own a.txt with --data.)"""
    run = run_of(workdir, "bytes")
    (workdir / "a.txt").write_text(TEXT_B, encoding="utf-8")
    before = snapshot(run)
    out = nanolm("train", "--resume", str(run), "--data", "a.txt", "-q", cwd=workdir)
    assert "same data" in assert_user_error(out.returncode, out.stderr, "data mismatch", "a.txt")
    monkeypatch.chdir(workdir)
    code, err = in_process(["train", "--resume", str(run), "--data", "a.txt", "--set", "steps=8", "-q"], capfd)
    assert "same data" in assert_user_error(code, err, "data mismatch", "a.txt")
    assert snapshot(run) == before


def test_word_run_resumed_on_a_data_file(workdir, capfd, monkeypatch):
    """A run on the embedded corpus (word tokens) resumed on a text file (byte tokens)."""
    run = run_of(workdir, "words")
    before = snapshot(run)
    monkeypatch.chdir(workdir)
    code, err = in_process(["train", "--resume", str(run), "--data", "a.txt", "--set", "steps=8", "-q"], capfd)
    assert_user_error(code, err, "mismatch", "data", "a.txt")
    assert snapshot(run) == before


# ---- sampling ----------------------------------------------------------------------------------------


def test_prompt_with_unknown_words(workdir, capfd, monkeypatch):
    run = run_of(workdir, "words")
    before = snapshot(run)
    out = nanolm("sample", "words", "-p", "the zyzzyva was qwxlerb", "-n", "3", cwd=workdir)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    warnings = out.stderr.splitlines()
    assert len(warnings) == 2 and all("<unk>" in w and w.startswith("nanolm: warning:") for w in warnings), out.stderr
    assert "zyzzyva" in warnings[0] and "qwxlerb" in warnings[1]
    assert out.stdout.startswith("the zyzzyva was qwxlerb")

    monkeypatch.chdir(workdir)
    capfd.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["sample", "words", "-p", "the zyzzyva was", "-n", "3", "--json"])
    out = capfd.readouterr()
    assert exc.value.code == 0, out.err
    [completion] = json.loads(out.out)  # the warning goes to stderr, the JSON stays clean
    assert completion["unknown_words"] == ["zyzzyva"]
    assert out.err.splitlines() == ["nanolm: warning: 'zyzzyva' is not in the vocabulary; it was read as <unk>"]
    assert snapshot(run) == before


def test_sample_bad_options(workdir, capfd, monkeypatch):
    monkeypatch.chdir(workdir)
    for args, name in ((["--top-k", "0"], "--top-k"), (["--top-k", "-1"], "--top-k"), (["-n", "0"], "--tokens")):
        code, err = in_process(["sample", "words", *args], capfd)
        assert_user_error(code, err, name)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["dyck", "generate", "--k", "abc"], ["'--k'", "'abc' is not a valid integer", "nanolm dyck generate --help"]),
        (["train", "--nosuch"], ["No such option '--nosuch'", "nanolm train --help"]),
        (["compare"], ["Missing argument 'GROUP_A'", "nanolm compare --help"]),
        (["frobnicate"], ["No such command 'frobnicate'", "nanolm --help"]),
    ],
)
def test_usage_errors_are_one_line_with_where_to_look(argv, names, capfd):
    assert_user_error(*in_process(argv, capfd), *names)


@pytest.mark.parametrize("argv", [[], ["experiment"], ["dfa"]])
def test_a_bare_command_group_shows_its_help_not_an_error(argv, capfd):
    code, err = in_process(argv, capfd)
    assert "Usage: nanolm" in err and "Commands:" in err and "nanolm: error" not in err, err


# ---- damaged run files, odd numbers -------------------------------------------------------------------


def test_damaged_resume_files_are_one_line_and_leave_the_run_as_it_was(workdir, capfd, monkeypatch):
    monkeypatch.chdir(workdir)
    run = run_of(workdir, "words")
    manifest = json.loads((run / "manifest.json").read_text())
    edited = {**manifest, "config": {**manifest["config"], "steps": "abc"}}
    (run / "manifest.json").write_text(json.dumps(edited))
    before = snapshot(run)
    assert_user_error(*in_process(["train", "--resume", str(run), "-q"], capfd), "--resume", "edited or is damaged")
    assert snapshot(run) == before
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text() + "{cut sh\n")
    before = snapshot(run)
    assert_user_error(
        *in_process(["train", "--resume", str(run), "--set", "steps=6", "-q"], capfd), "metrics.jsonl", "not a JSON object"
    )
    assert snapshot(run) == before  # the manifest was not rewritten to "running" first


def test_odd_numbers_are_one_line(workdir, capfd, monkeypatch):
    monkeypatch.chdir(workdir)
    assert_user_error(*in_process(["train", *TINY_ARGS, "--set", "beta1=2"], capfd), "beta1 must be in [0, 1)")
    run = str(run_of(workdir, "words"))
    assert_user_error(*in_process(["sample", run, "--temperature", "nan"], capfd), "--temperature")
    assert_user_error(*in_process(["sample", run, "--seed", str(2**70)], capfd), "--seed")
    assert_user_error(*in_process(["profile", "--tokens-per-step", "-512", "--", "python", "x.py"], capfd), "--tokens-per-step")


def test_a_run_whose_weights_blow_up_at_the_last_step_is_diverged_and_json_has_no_nan(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "train",
                *TINY_ARGS,
                "--set",
                "steps=1",
                "--set",
                "lr=1e300",
                "--set",
                "warmup_steps=0",
                "--set",
                "grad_clip=0",
                "--json",
            ]
        )
    out = capfd.readouterr()
    assert exc.value.code == 1 and "the weights are not finite" in out.err
    [manifest] = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/manifest.json")]
    assert manifest["status"] == "diverged"
    capfd.readouterr()
    with pytest.raises(SystemExit):
        main(["runs", "--json"])
    listing = capfd.readouterr().out
    assert "NaN" not in listing and "Infinity" not in listing
    json.loads(listing)


def test_profile_compare_refuses_a_report_with_impossible_step_times(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    report = {"step_ms": {"median": 0.0, "min": 0.0, "max": 0.0}}
    (tmp_path / "a.json").write_text(json.dumps(report))
    assert_user_error(*in_process(["profile", "compare", "a.json", "a.json"], capfd), "a.json")


def test_profile_expectations_that_cannot_be_are_one_line(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("raise SystemExit('must not run')\n")
    for args, name in (
        (["--expect", "0"], "--expect"),
        (["--expect", "-3"], "--expect"),
        (["--expect", "abc"], "--expect"),
        (["--expect-mfu", "1.5"], "--expect-mfu"),
        (["--expect-mfu", "0"], "--expect-mfu"),
        (["--expect-mfu", "nan"], "--expect-mfu"),
        (["--expect", "100", "--expect-mfu", "0.4"], "not both"),
    ):
        assert_user_error(*in_process(["profile", *args, "--", "python", "x.py"], capfd), name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.py"]  # refused before anything ran or was written
