"""nanolm.runs.artifacts: the one home of a run's results. Each kind finds the files it declares (and not
hidden ones), traces a file back to its run, names new files without overwriting, and no other module
spells a result's folder."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import nanolm
from nanolm.runs import artifacts
from nanolm.runs.artifacts import ARTIFACTS, FEEDBACK, PROFILES, SAE, Artifact, is_hf_model, is_run

SRC = Path(nanolm.__file__).parent


def _run(tmp_path: Path, name: str = "run") -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema": 1}))
    return run


def test_each_kind_has_a_folder_of_its_own_and_roles_inside_it():
    folders = [k.folder for k in ARTIFACTS]
    assert len(set(folders)) == len(folders)
    for kind in ARTIFACTS:
        assert re.fullmatch(r"[a-z_]+", kind.folder) and kind.written_by.startswith("nanolm ")
        for role, glob in kind.files.items():
            assert kind.pattern(role) == f"{kind.folder}/{glob}" and not glob.startswith("/")


def test_find_returns_a_roles_files_sorted_and_leaves_out_hidden_and_other_roles(tmp_path):
    run = _run(tmp_path)
    for name in ("b/cfg.json", "a/cfg.json", "a/eval.json", "sweep-L1.json", ".c/cfg.json", "a/.cfg.json"):
        path = run / "sae" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    (run / "sae" / "d" / "cfg.json").mkdir(parents=True)  # a folder named like a file is not a file
    assert SAE.find(run, "cfg") == [run / "sae/a/cfg.json", run / "sae/b/cfg.json"]
    assert SAE.find(run, "sweep") == [run / "sae/sweep-L1.json"]
    assert SAE.find(tmp_path / "nowhere", "cfg") == []
    with pytest.raises(KeyError):
        SAE.find(run, "no-such-role")


def test_a_file_or_a_results_folder_is_traced_to_its_run(tmp_path):
    run = _run(tmp_path)
    labels = FEEDBACK.path(run, "x-labels.jsonl", create=True)
    labels.write_text("")
    assert FEEDBACK.run_holding(labels) == run.resolve()
    assert SAE.run_holding(run / "sae" / "L1-resid") == run.resolve()  # an SAE's own folder, RUN/sae/NAME
    assert SAE.run_holding(labels) is None  # a feedback file is not an SAE's
    stray = tmp_path / "not-a-run" / "feedback"
    stray.mkdir(parents=True)
    assert FEEDBACK.run_holding(stray / "x.jsonl") is None  # a folder named feedback, but no run above it


def test_timestamped_names_never_reuse_a_stem_a_profile_or_its_trace_has(tmp_path, monkeypatch):
    run = _run(tmp_path)
    monkeypatch.setattr(artifacts.time, "strftime", lambda fmt: "20261204-101010")
    first = PROFILES.timestamped(run)
    assert first == run / "profiles" / "20261204-101010.json"
    (run / "profiles" / "20261204-101010-trace.json.gz").write_text("")  # the trace alone takes the stem
    second = PROFILES.timestamped(run)
    assert second.name == "20261204-101010-1.json"
    second.write_text("{}")
    assert PROFILES.timestamped(run).name == "20261204-101010-2.json"


def test_loose_results_go_under_runs_never_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(artifacts.time, "strftime", lambda fmt: "T")
    a = FEEDBACK.loose("pairs.jsonl")
    assert a == Path("runs/feedback/T-pairs.jsonl") and a.parent.is_dir()
    a.write_text("")
    assert FEEDBACK.loose("pairs.jsonl") == Path("runs/feedback/T-pairs-1.jsonl")


def test_a_run_and_a_hugging_face_folder_are_told_apart(tmp_path):
    run, hf, both = _run(tmp_path), tmp_path / "hf", _run(tmp_path, "both")
    hf.mkdir()
    for folder in (hf, both):
        (folder / "config.json").write_text("{}")
    assert is_run(run) and not is_hf_model(run)
    assert is_hf_model(hf) and not is_run(hf)
    assert is_run(both) and not is_hf_model(both)  # a run that also has a config.json is a run


def _string_literals(path: Path) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def second_places(root: Path) -> list[str]:
    """Where a module under root (nanolm.runs left out) spells a result's folder: a string starting with it
    ("probes/*.json", "sae/") or a call of the folder-name helper."""
    starts = tuple(f"{k.folder}/" for k in ARTIFACTS)
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "runs" and path.parent.parent == root:
            continue
        rel = path.relative_to(root)
        found += [f"{rel}:{line}: {text!r}" for line, text in _string_literals(path) if text.startswith(starts)]
        found += [f"{rel}: calls artifact_dir" for _ in re.finditer(r"\bartifact_dir\(", path.read_text(encoding="utf-8"))]
    return found


def test_no_other_module_spells_where_a_result_lives():
    """The measure of issue 32: one place knows a result's folder (nanolm.runs.artifacts)."""
    assert second_places(SRC) == []


def test_the_scan_sees_a_second_place_and_leaves_nanolm_runs_alone(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "artifacts.py").write_text('X = "steering/*.json"\n')  # the one home: allowed
    (tmp_path / "cli.py").write_text('GLOB = "steering/*.json"\nd = artifact_dir(run, "sae")\n"""sae/ in a docstring"""\n')
    assert second_places(tmp_path) == [
        "cli.py:1: 'steering/*.json'",
        "cli.py:3: 'sae/ in a docstring'",
        "cli.py: calls artifact_dir",
    ]
    assert isinstance(SAE, Artifact)
