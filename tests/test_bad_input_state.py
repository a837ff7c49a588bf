"""Hostile state and refusals that used to leave something behind: the problems' state file damaged in every way
a folder can damage it, commands refused for a missing extra or a missing script (no folder created first), and
sweeps refused for their executor or runs folder (one line: the first cause, not a seed's failure then the sweep's).
Each: exit 2, one line on stderr naming the problem and the fix, no traceback, the disk as it was."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from bad_input import TINY_ARGS, assert_user_error, in_process, snapshot
from nanolm.problems.registry import PROBLEMS

STATE = "nanolm-problems.json"
PROBLEM = sorted(PROBLEMS)[0]


def _as_folder(path: Path) -> None:
    path.mkdir()
    (path / "kept.txt").write_text("a file inside, which must stay", encoding="utf-8")


def _text(text: str):
    def write(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    return write


def _bytes(data: bytes):
    def write(path: Path) -> None:
        path.write_bytes(data)

    return write


def _state(problems: object, **extra: object):
    return _text(json.dumps({"version": 1, "problems": problems, **extra}))


DAMAGED = {
    "a folder": (_as_folder, ["is a folder", "move it away"]),
    "empty": (_text(""), ["not JSON", "fix or delete it"]),
    "not JSON": (_text("{'problems': {}}"), ["not JSON", "fix or delete it"]),
    "not UTF-8": (_bytes(b'{"problems": {"\xff": {}}}'), ["not JSON", "fix or delete it"]),
    "a list": (_text("[1, 2]"), ["a list, not an object", "fix or delete it"]),
    "no problems key": (_text('{"version": 1}'), ["no 'problems' entry", "fix or delete it"]),
    "problems a list": (_state([PROBLEM]), ["'problems' is a list", "fix or delete it"]),
    "a row a string": (_state({PROBLEM: "started"}), [f"problem {PROBLEM!r} is a str", "fix or delete it"]),
    "hints a string": (_state({PROBLEM: {"hints": "2"}}), ["field 'hints' must be an int", '"2"']),
    "hints a bool": (_state({PROBLEM: {"hints": True}}), ["field 'hints' must be an int", "true"]),
    "dir a number": (_state({PROBLEM: {"dir": 3}}), ["field 'dir' must be a string", "3"]),
    "started null": (_state({PROBLEM: {"started": None}}), ["field 'started' must be a string", "null"]),
    "an unknown field": (_state({PROBLEM: {"score": 1}}), ["unknown field 'score'"]),
    "quiz marks a list": (_state({}, quiz={"marks": ["y"]}), ["quiz marks"]),
    "quiz mark not y/n": (_state({}, quiz={"marks": {"card": "maybe"}}), ["quiz marks"]),
    "quiz a string": (_state({}, quiz="y"), ["quiz marks"]),
}
COMMANDS = [["problems", "list"], ["problems", "start", PROBLEM], ["problems", "hint", PROBLEM], ["problems", "check", PROBLEM]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[1])
@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_problems_state_file_is_one_line_and_kept(tmp_path, monkeypatch, capfd, damage, command):
    monkeypatch.chdir(tmp_path)
    write, names = DAMAGED[damage]
    write(tmp_path / STATE)
    before = snapshot(tmp_path)
    listed = sorted(p.name for p in tmp_path.rglob("*"))
    code, err = in_process(command, capfd)
    assert_user_error(code, err, STATE, *names)
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.rglob("*")) == listed  # no problem folder started beside it


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_problems_state_file_is_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    (tmp_path / STATE).write_text('{"version": 1, "problems": {}}', encoding="utf-8")
    (tmp_path / STATE).chmod(0)
    code, err = in_process(["problems", "list"], capfd)
    assert_user_error(code, err, STATE, "cannot read", "make it readable")


def test_a_dangling_link_as_the_state_file_is_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    (tmp_path / STATE).symlink_to(tmp_path / "gone.json")
    code, err = in_process(["problems", "start", PROBLEM], capfd)
    assert_user_error(code, err, STATE, "cannot read")
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE]


def test_a_valid_state_file_still_loads(tmp_path, monkeypatch, capfd):
    """The checks refuse damage, not the files nanolm writes: a started problem, read back by list."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        from nanolm.cli import main

        main(["problems", "start", PROBLEM])
    assert exc.value.code in (0, None)
    capfd.readouterr()
    from nanolm.problems.workspace import Workspace

    assert Workspace(tmp_path).state[PROBLEM].started


# ---- refused before anything is created ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, names",
    [
        (["profile", "--", "python", "missing.py"], ["missing.py", "does not exist"]),
        (["profile", "--", "missing.py", "--lr", "1"], ["missing.py", "does not exist"]),
        (["profile", "--", "python"], ["no script after `python`"]),
        (["profile", "--", "python", "-m", "train"], ["python -m module"]),
        (["profile", "--nproc", "2", "--", "python", "missing.py"], ["missing.py", "does not exist"]),
    ],
)
def test_profiling_a_script_that_is_not_there_creates_nothing(tmp_path, monkeypatch, capfd, argv, names):
    monkeypatch.chdir(tmp_path)
    code, err = in_process(argv, capfd)
    assert_user_error(code, err, *names)
    assert not list(tmp_path.iterdir())  # no runs/profiles/ made for a trace that will never be written


@pytest.mark.parametrize("tracker, module", [("mlflow", "mlflow"), ("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_a_tracker_without_its_extra_creates_no_run_folder(tmp_path, monkeypatch, capfd, tracker, module):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed: import fails
    code, err = in_process(["train", *TINY_ARGS, "--tracker", tracker, "--name", "t"], capfd)
    assert_user_error(code, err, f"--tracker {tracker}", "pip install")
    assert not list(tmp_path.iterdir())


def _sweep(*extra: str) -> list[str]:
    return ["sweep", "lr", "--values", "1e-3,3e-3", "--seeds", "1", "--set", "steps=2", *extra]


def test_a_sweep_on_slurm_without_submitit_is_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "submitit", None)
    code, err = in_process(_sweep("--executor", "slurm"), capfd)
    assert_user_error(code, err, "--executor slurm needs submitit", "pip install")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "runs_dir, names", [("afile", ["afile", "is a file, not a folder"]), ("afile/runs", ["afile/runs", "is a file"])]
)
def test_a_sweep_whose_runs_folder_cannot_be_made_is_one_line(tmp_path, monkeypatch, capfd, runs_dir, names):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder", encoding="utf-8")
    for argv in (_sweep("--runs-dir", runs_dir), _sweep("--set", f"runs_dir={runs_dir}")):
        code, err = in_process(argv, capfd)
        assert_user_error(code, err, *names, "runs_dir")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_seeds_on_slurm_without_submitit_is_one_line(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "submitit", None)
    code, err = in_process(["seeds", "--n", "2", "--name", "g", "--executor", "slurm", "--set", "steps=2"], capfd)
    assert_user_error(code, err, "--executor slurm needs submitit")
    assert not list(tmp_path.iterdir())
