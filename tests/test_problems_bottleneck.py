"""nanolm problems: bottleneck, the pooled problem. Each learner draws one outsider script with one planted
bottleneck; they name it in report.toml with its evidence, fix a copy, and report the step time before
and after, which the grader measures itself (so made-up numbers fail).

The reference (the fixed script and report shipped beside each pool script) passes for every script
of the pool; its before/after numbers are replaced by this machine's measurement, since step times vary
by machine. Checks run in-process (runner.grade_file); one test runs the real grading process."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from nanolm.cli import run
from nanolm.cli.problems import problems
from nanolm.problems.checks import bottleneck as checks
from nanolm.problems.registry import PROBLEMS
from nanolm.problems.runner import grade_file
from nanolm.problems.workspace import STATE_FILE, Workspace

PROBLEM = PROBLEMS["bottleneck"]
POOL = list(PROBLEM.pool)


def failed(result: dict) -> list[str]:
    assert "error" not in result, result
    return [t["name"] for t in result["tests"] if not t["passed"]]


def toml_text(report: dict) -> str:
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in report.items())


def reference_report(variant: str) -> dict:
    return tomllib.loads(PROBLEM.pool_path(variant, "_report.toml").read_text())


def answer(tmp_path: Path, variant: str, tag: str, fixed: str | None = None, **report) -> Path:
    """A learner's folder: train_fixed.py (default: the reference fix) and report.toml (the reference
    report, its numbers measured here, with `report`'s fields replaced)."""
    folder = tmp_path / f"{variant}_{tag}"
    folder.mkdir()
    path = folder / PROBLEM.file
    path.write_text(PROBLEM.reference(variant) if fixed is None else fixed)
    r = reference_report(variant)
    if fixed is None:
        r["before_ms"] = round(checks.measure(PROBLEM.pool_path(variant))["ms"], 2)
        r["after_ms"] = round(checks.measure(path)["ms"], 2)
    r.update(report)
    (folder / "report.toml").write_text(toml_text(r))
    return path


def grade(path: Path, variant: str, seed: int = 0) -> dict:
    return grade_file(PROBLEM, path, seed, abs(hash((str(path), seed))) % 10**6, variant)


def cli(argv: list[str], capfd) -> tuple[int, str, str]:
    capfd.readouterr()
    with pytest.raises(SystemExit) as exc:
        run(problems, argv, "nanolm")
    out = capfd.readouterr()
    return exc.value.code, out.out, out.err


def draws() -> dict[str, int]:
    """A draw seed for each script of the pool."""
    found: dict[str, int] = {}
    for d in range(200):
        v = random.Random(d).choice(POOL)
        found.setdefault(v, d)
    assert set(found) == set(POOL)
    return found


def test_pool_is_consistent():
    assert 3 <= len(POOL) <= 4 and set(POOL) == set(checks.PLANTED)
    vocabulary = set(checks.VOCABULARY)
    for v in POOL:
        assert PROBLEM.starter(v) != PROBLEM.reference(v)
        assert "--steps" in PROBLEM.starter(v) and "def main" in PROBLEM.reference(v)
        r = reference_report(v)
        assert r["bottleneck"] == checks.PLANTED[v].value and r["bottleneck"] in vocabulary
        assert set(r) == {"bottleneck", "evidence", "change", "before_ms", "after_ms"}
        # the scripts do not say what is planted: no "planted", "bottleneck" or the finding's name
        assert not re.search(r"planted|bottleneck|-bound", PROBLEM.starter(v), re.I), v


@pytest.mark.parametrize("variant", POOL)
def test_start_writes_the_drawn_script_and_the_template_fails_every_check(variant, tmp_path):
    ws = Workspace(tmp_path)
    started = ws.start("bottleneck", draw=draws()[variant])
    folder = tmp_path / "bottleneck"
    assert sorted(p.name for p in folder.iterdir()) == ["instructions.md", "report.toml", "train.py", "train_fixed.py"]
    assert len(started.files) == 4 and not any("fixed" in p.name and "report" in p.name for p in folder.iterdir())
    assert (folder / "train.py").read_text() == (folder / "train_fixed.py").read_text() == PROBLEM.starter(variant)
    state = json.loads((tmp_path / STATE_FILE).read_text())["problems"]["bottleneck"]
    assert state["variant"] == variant and state["draw"] == draws()[variant] and state["timed"] == 0
    result = grade(folder / "train_fixed.py", variant)
    assert failed(result) == PROBLEM.check_names()  # fast: nothing changed, nothing is timed
    messages = {t["name"]: t["message"] for t in result["tests"]}
    assert "not one of the profiler's findings" in messages["bottleneck"]
    assert "the script as given" in messages["faster"] and "positive number" in messages["measured"]


def test_start_refuses_to_overwrite_and_reset_keeps_the_draw(tmp_path):
    ws = Workspace(tmp_path)
    ws.start("bottleneck", draw=draws()["tiny_ops"])
    fixed = tmp_path / "bottleneck" / "train_fixed.py"
    fixed.write_text("my work\n")
    ws.reset("bottleneck")
    assert fixed.read_text() == PROBLEM.starter("tiny_ops")
    ws2 = Workspace(tmp_path)
    ws2.state["bottleneck"].dir = "other"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "train.py").write_text("theirs\n")
    with pytest.raises(Exception, match="already exists"):
        ws2.start("bottleneck", "other")
    assert (tmp_path / "other" / "train.py").read_text() == "theirs\n"


def test_reference_passes_and_mistakes_fail_their_check_only(tmp_path):
    """One script of the pool (the quickest to time): the reference passes; a wrong name fails only
    `bottleneck`; invented numbers fail only `measured`; no evidence figure fails only `evidence`."""
    v = "tiny_ops"
    assert failed(grade(answer(tmp_path, v, "ref"), v)) == []
    assert failed(grade(answer(tmp_path, v, "name", bottleneck="compute-bound"), v)) == ["bottleneck"]
    assert failed(grade(answer(tmp_path, v, "typo", bottleneck="overhead"), v)) == ["bottleneck"]
    ref = answer(tmp_path, v, "ref2")
    before, after = checks.measure(PROBLEM.pool_path(v))["ms"], checks.measure(ref)["ms"]
    for tag, b, a in (("made_up", 100.0, 10.0), ("low", before / 2, after), ("high", before, after * 2)):
        path = answer(tmp_path, v, tag, fixed=ref.read_text(), before_ms=round(b, 3), after_ms=round(a, 3))
        result = grade(path, v)
        assert failed(result) == ["measured"], (tag, result)
        assert "the grader measured" in result["tests"][-1]["message"]
    no_figure = answer(
        tmp_path,
        v,
        "vague",
        fixed=ref.read_text(),
        evidence="the profile says so",
        before_ms=round(before, 2),
        after_ms=round(after, 2),
    )
    assert failed(grade(no_figure, v)) == ["evidence"]


@pytest.mark.slow
def test_a_fix_that_is_not_faster_or_stops_training_fails(tmp_path):
    v = "tiny_ops"
    original = PROBLEM.starter(v)
    commented = answer(tmp_path, v, "comment", fixed=original + "\n# faster now\n", before_ms=3.0, after_ms=3.0)
    assert "faster" in failed(grade(commented, v))
    no_step = original.replace("        opt.step()\n", "        if i < 5:\n            opt.step()\n")
    result = grade(answer(tmp_path, v, "no_step", fixed=no_step, before_ms=3.0, after_ms=1.0), v)
    assert "still_trains" in failed(result)


def test_timed_start_and_check_in_the_grading_process(tmp_path, monkeypatch, capfd):
    """`start --timed 15` records the limit; `check` runs the real grading process with the drawn script
    and shows the time taken against the limit, without failing on it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli(["start", "bottleneck", "--timed", "15"], capfd)
    assert code == 0 and "report.toml" in out and "train.py" in out
    state = json.loads((tmp_path / STATE_FILE).read_text())["problems"]["bottleneck"]
    assert state["timed"] == 15 and state["variant"] in POOL
    code, out, _ = cli(["check", "bottleneck", "--seed", "0"], capfd)
    assert code == 1 and "0 of 5 checks pass" in out and "within the 15 min limit" in out
    code, out, _ = cli(["check", "bottleneck", "--seed", "0", "--json"], capfd)
    assert json.loads(out)["note"].startswith("timed: time so far:")


@pytest.mark.slow
@pytest.mark.parametrize("variant", POOL)
def test_reference_passes_for_every_script_of_the_pool(variant, tmp_path):
    assert failed(grade(answer(tmp_path, variant, "ref"), variant, seed=1)) == []
    assert failed(grade(answer(tmp_path, variant, "wrong", bottleneck="memory-bound"), variant)) == ["bottleneck"]
    path = answer(tmp_path, variant, "made_up", fixed=PROBLEM.reference(variant), before_ms=500.0, after_ms=0.5)
    assert failed(grade(path, variant)) == ["measured"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", POOL)
def test_the_profiler_names_the_planted_bottleneck(variant, tmp_path):
    """What the learner is graded against is what `nanolm profile` says (on one thread, as instructed)."""
    (tmp_path / "train.py").write_text(PROBLEM.starter(variant))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    code = "import sys; from nanolm.cli import main; sys.argv[0] = 'nanolm'; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "profile", "--json", "before.json", "--", sys.executable, "train.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict = json.loads((tmp_path / "before.json").read_text())["verdict"]
    assert verdict["bottleneck"] == checks.PLANTED[variant].value, verdict
