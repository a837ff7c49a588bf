"""nanolm problems: the problems' own correctness (every starter fails every check, a find-and-fix starter
every bug's, every reference passes every check, each planted bug fails its own check and no other bug's),
classic wrong answers
failing with their symptom, and the harness (a separate grading process, harness errors apart from
wrong answers, the state file, the CLI's bad input: one line, exit 2, 1 for "not yet solved").

Checks run in-process here (runner.grade_file, the grading process's own function) to save the
interpreter start-up; the harness tests run the real grading process, several files per run."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nanolm.cli import run
from nanolm.cli.problems import check_json, problems
from nanolm.problems.grading import grade_files
from nanolm.problems.registry import CHECK_NAMES, PROBLEMS, plant
from nanolm.problems.runner import checks_for, grade_file
from nanolm.problems.workspace import STATE_FILE, Workspace, check, watch

SEEDS = (0, 1)
FIND_AND_FIX = [n for n, p in PROBLEMS.items() if p.bugs]


@pytest.fixture(autouse=True)
def one_thread():
    """One thread, as the grading process runs (OMP_NUM_THREADS=1): the checks' many tiny fits and forward
    passes are slower, not faster, on a pool of threads fighting for a busy machine's cores."""
    import torch
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(threads)


def failed(result: dict) -> list[str]:
    assert "error" not in result, result
    return [t["name"] for t in result["tests"] if not t["passed"]]


def grade_text(tmp_path: Path, name: str, source: str, seed: int = 0, tag: str = "x") -> dict:
    f = tmp_path / f"{name}_{tag}.py"
    f.write_text(source)
    return grade_file(PROBLEMS[name], f, seed, abs(hash((name, tag, seed))) % 10**6)


def cli(argv: list[str], capfd) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `nanolm problems ARGV`, errors shown as nanolm.cli.main shows them."""
    capfd.readouterr()
    with pytest.raises(SystemExit) as exc:
        run(problems, argv, "nanolm")
    out = capfd.readouterr()
    return exc.value.code, out.out, out.err


def assert_one_line_error(code: int, err: str, *names: str, exit_code: int = 2) -> None:
    assert code == exit_code, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanolm: error: "), err
    for name in names:
        assert name in lines[0], (name, err)


# ---- the problems themselves ---------------------------------------------------------------------


def test_registry_is_consistent():
    for name, problem in PROBLEMS.items():
        assert problem.instructions().startswith(f"# {name}")
        assert len(problem.hints()) >= 3
        assert problem.starter() != problem.reference()
        if problem.bugs:
            plant(problem.reference(), problem.bugs)  # each patch's text occurs exactly once
            assert len(problem.bugs) in (5, 6) and len({b.check for b in problem.bugs}) == len(problem.bugs)
        else:  # the names the CLI lists without importing torch are the checks module's own
            module = importlib.import_module(f"nanolm.problems.checks.{problem.checks}")
            assert tuple(c.name for c in module.CHECKS) == CHECK_NAMES[problem.checks]
        assert [c.name for c in checks_for(problem)] == problem.check_names()


@pytest.mark.parametrize("name", [n for n, p in PROBLEMS.items() if not p.pool])  # pooled: test_problems_bottleneck
def test_reference_passes_and_starter_fails_every_check(name, tmp_path):
    problem = PROBLEMS[name]
    for seed in SEEDS:
        assert failed(grade_file(problem, problem.reference_path, seed, seed)) == []
        fails = failed(grade_text(tmp_path, name, problem.starter(), seed, "starter"))
        if problem.bugs:  # every planted bug's check; the whole block's other checks as the bugs affect them
            assert fails[: len(problem.bugs)] == [b.check for b in problem.bugs] and "matches_reference" in fails
        else:
            assert fails == problem.check_names()


@pytest.mark.parametrize("name", FIND_AND_FIX)
def test_each_planted_bug_fails_its_own_check_only(name, tmp_path):
    """Fixing every bug but bug k fails check k and no other bug's check, for every k (the whole block's
    checks, run by every find-and-fix problem, may fail with it: the block is not the original yet)."""
    problem = PROBLEMS[name]
    bug_checks = {b.check for b in problem.bugs}
    assert problem.check_names()[: len(problem.bugs)] == [b.check for b in problem.bugs]
    assert "matches_reference" in problem.check_names() and "norm" in problem.check_names()
    for k, bug in enumerate(problem.bugs):
        only_k = plant(problem.reference(), [bug])
        for seed in SEEDS:
            fails = failed(grade_text(tmp_path, name, only_k, seed, f"only{k}"))
            assert [c for c in fails if c in bug_checks] == [bug.check], (name, k, seed, fails)


def test_find_and_fix_messages_describe_symptoms_not_fixes(tmp_path):
    for name in FIND_AND_FIX:
        result = grade_text(tmp_path, name, PROBLEMS[name].starter(), 0, "starter")
        for t in (t for t in result["tests"] if not t["passed"]):
            assert t["message"] and "\n" not in t["message"]
            assert not any(w in t["message"].lower() for w in ("fix", "you should", "replace", "transpose(")), t
    msg = grade_text(tmp_path, "find_and_fix_1", PROBLEMS["find_and_fix_1"].starter())["tests"][0]["message"]
    assert "output depends on position" in msg


def patched(name: str, find: str, replace: str) -> str:
    source = PROBLEMS[name].reference()
    assert source.count(find) == 1, find
    return source.replace(find, replace)


# (problem, find, replace, the only check that fails, words its message holds): classic wrong answers
MISTAKES = [
    ("logit_lens", "model.unembed(model.ln_final(resid))", "model.unembed(resid)", "final_norm", "raw residual stream"),
    ("logit_lens", 'names = ["blocks.0.hook_resid_pre"] + ', "names = ", "shape", "expected"),
    (
        "linear_probe",
        '"held_out_accuracy": float((probe.predict(X[test]) == y[test]).mean())',
        '"held_out_accuracy": float((probe.predict(X[train]) == y[train]).mean())',
        "held_out",
        "random labels",
    ),
    (
        "mfu",
        "return 6.0 * n_params * tokens_per_s / peak_flops_per_s",
        "return 100 * 6.0 * n_params * tokens_per_s / peak_flops_per_s",
        "reference_numbers",
        "percentage",
    ),
    (
        "gamblers_ruin",
        "    if r < 1.0:\n        return (r**start",
        "    if True:\n        return (r**start",
        "long_games",
        "target",
    ),
    (
        "stars_and_bars",
        "return sum(c * comb(n - e + k - 1, k - 1) for e, c in excess.items())",
        "return round(sum(c * float(comb(n - e + k - 1, k - 1)) for e, c in excess.items()))",
        "exact_large",
        "you returned",
    ),
]


# mistakes that fail exactly one check: the one naming them
ONLY = {("logit_lens", "final_norm"), ("gamblers_ruin", "long_games")}


@pytest.mark.parametrize("name, find, replace, check_name, words", MISTAKES, ids=[f"{m[0]}-{m[3]}" for m in MISTAKES])
def test_classic_mistakes_fail_with_their_symptom(name, find, replace, check_name, words, tmp_path):
    result = grade_text(tmp_path, name, patched(name, find, replace), 0, "mistake")
    fails = failed(result)
    assert check_name in fails, result
    if (name, check_name) in ONLY:
        assert fails == [check_name], result
    message = next(t["message"] for t in result["tests"] if t["name"] == check_name)
    assert words in message, message


def test_special_casing_the_visible_example_fails(tmp_path):
    """The reference document's numbers are in the instructions; an answer that returns them fails."""
    source = patched("mfu", "return 6.0 * n_params * tokens_per_s / peak_flops_per_s", "return 0.150303")
    assert failed(grade_text(tmp_path, "mfu", source)) == ["random_variants", "model_params"]
    # a logit lens fitted to one model's answers fails on the next draw
    checks = importlib.import_module("nanolm.problems.checks.logit_lens")
    model, tokens = checks.random_model(0)
    memorized = checks.lens_top1(model, tokens).tolist()
    source = f"import torch\n\ndef logit_lens(model, tokens):\n    return torch.tensor({memorized})\n"
    assert len(failed(grade_text(tmp_path, "logit_lens", source, seed=5))) == 4


# ---- the harness: a separate grading process -----------------------------------------------------

LEARNER_FILES = {
    "right": None,  # the reference
    "wrong": "def count_solutions(n, upper):\n    return 1\n",
    "syntax": "def count_solutions(n, upper)\n    return 1\n",
    "import": "import math\nx = 1 / 0\n",
    "interface": "def count(n, upper):\n    return 1\n",
    "exits": "import sys\nsys.exit(3)\n",
    "prints": "print('hello from the learner')\nfrom itertools import combinations\n" + "",
}


def test_grading_process_tells_harness_errors_from_wrong_answers(tmp_path):
    problem = PROBLEMS["stars_and_bars"]
    paths = []
    for kind, text in LEARNER_FILES.items():
        p = tmp_path / f"{kind}.py"
        p.write_text(
            problem.reference()
            if kind in ("right", "prints") and text is None
            else (text + problem.reference() if kind == "prints" else text)
        )
        paths.append(p)
    results = dict(zip(LEARNER_FILES, grade_files(problem, paths, seed=3, timeout=60)))
    assert results["right"].status == "solved" and results["right"].exit_code == 0
    assert results["prints"].status == "solved"  # what the learner prints does not corrupt the result
    assert results["wrong"].status == "not solved" and results["wrong"].exit_code == 1
    assert results["wrong"].passed < results["wrong"].total
    for kind in ("syntax", "import", "interface", "exits"):
        r = results[kind]
        assert r.status == "error" and r.exit_code == 2 and "\n" not in r.error, r
    assert results["syntax"].error_kind == "syntax" and "line 1" in results["syntax"].error
    assert results["import"].error_kind == "import" and "ZeroDivisionError" in results["import"].error
    assert "line 2" in results["import"].error
    assert results["interface"].error_kind == "interface" and "count_solutions" in results["interface"].error
    assert results["exits"].error_kind == "import" and "SystemExit" in results["exits"].error
    missing = grade_files(problem, [tmp_path / "nope.py"], seed=0)[0]
    assert missing.error_kind == "missing" and missing.exit_code == 2


def test_infinite_loop_is_a_timeout(tmp_path):
    p = tmp_path / "loop.py"
    p.write_text("def count_solutions(n, upper):\n    while True:\n        pass\n")
    r = grade_files(PROBLEMS["stars_and_bars"], [p], seed=0, timeout=4)[0]
    assert r.status == "error" and r.error_kind == "timeout" and "time limit" in r.error


# ---- the working folder and the CLI --------------------------------------------------------------


def test_a_session_start_check_hint_solution_reset(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = cli(["start", "stars_and_bars"], capfd)
    assert code == 0 and sorted(p.name for p in (tmp_path / "stars_and_bars").iterdir()) == [
        "instructions.md",
        "stars_and_bars.py",
    ]
    learner = tmp_path / "stars_and_bars" / "stars_and_bars.py"
    assert "NotImplementedError" in learner.read_text()
    assert not any("reference" in p.name for p in tmp_path.rglob("*"))  # the solution is not written

    code, out, err = cli(["check", "stars_and_bars", "--seed", "1"], capfd)
    assert code == 1 and "0 of 4 checks pass" in out and "not written yet" in out

    code, out, _ = cli(["hint", "stars_and_bars"], capfd)
    assert code == 0 and "hint 1 of 3" in out
    code, out, _ = cli(["hint", "stars_and_bars", "--json"], capfd)
    assert json.loads(out)["number"] == 2

    assert_one_line_error(*cli(["solution", "stars_and_bars"], capfd)[::2], "not solved")

    learner.write_text(PROBLEMS["stars_and_bars"].reference())
    code, out, _ = cli(["check", "stars_and_bars", "--seed", "1", "--json"], capfd)
    from_cli = json.loads(out)
    assert code == 0 and from_cli["status"] == "solved" and from_cli["exit_code"] == 0
    from_lib = check_json(check("stars_and_bars", tmp_path, seed=1))  # the same result as a function
    for r in (from_cli, from_lib):
        r.pop("seconds")
    assert from_cli == from_lib

    state = json.loads((tmp_path / STATE_FILE).read_text())["problems"]["stars_and_bars"]
    assert state["solved"] and state["hints"] == 2 and state["checks"] == 3

    code, out, _ = cli(["solution", "stars_and_bars"], capfd)
    assert code == 0 and out == PROBLEMS["stars_and_bars"].reference()

    code, out, _ = cli(["list", "--json"], capfd)
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["stars_and_bars"]["status"] == "solved" and rows["logit_lens"]["status"] == "not started"
    assert set(rows) == set(PROBLEMS)

    code, out, _ = cli(["reset", "stars_and_bars"], capfd)
    assert (
        code == 0
        and (tmp_path / "stars_and_bars" / "stars_and_bars.py.bak").read_text() == PROBLEMS["stars_and_bars"].reference()
    )
    assert "NotImplementedError" in learner.read_text()
    assert not Workspace(tmp_path).state["stars_and_bars"].solved


def test_find_and_fix_reports_bugs_fixed(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    cli(["start", "find_and_fix_2", "--dir", "ff"], capfd)
    problem = PROBLEMS["find_and_fix_2"]
    (tmp_path / "ff" / "block.py").write_text(plant(problem.reference(), problem.bugs[:2]))
    code, out, _ = cli(["check", "find_and_fix_2", "--seed", "0"], capfd)
    assert code == 1 and "4 of 6 bugs fixed" in out and "bug 1 (causal)" in out and "bug 2 (weights_sum)" in out
    assert "✓ matches_reference" not in out and "✗ matches_reference" in out  # the whole block: not labelled a bug
    assert f"of {len(problem.check_names())} checks pass" in out


def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(*cli(["start", "logit_lense"], capfd)[::2], "unknown problem", "logit_lens, linear_probe")
    assert_one_line_error(*cli(["check", "mfu"], capfd)[::2], "not started", "nanolm problems start mfu")
    assert_one_line_error(*cli(["hint", "nope"], capfd)[::2], "known problems")
    assert_one_line_error(*cli(["reset", "mfu"], capfd)[::2], "not started")
    assert_one_line_error(*cli(["watch"], capfd)[::2], "nothing to watch")

    assert cli(["start", "mfu"], capfd)[0] == 0
    learner = tmp_path / "mfu" / "mfu.py"
    learner.write_text("my work\n")
    assert_one_line_error(*cli(["start", "mfu"], capfd)[::2], "already exists")
    assert learner.read_text() == "my work\n"  # not overwritten

    learner.write_text("def mfu(:\n")
    assert_one_line_error(*cli(["check", "mfu"], capfd)[::2], "SyntaxError", "line 1")
    learner.write_text("import time\nwhile True:\n    time.sleep(0.01)\n")
    assert_one_line_error(*cli(["check", "mfu", "--timeout", "3"], capfd)[::2], "time limit")
    learner.unlink()
    assert_one_line_error(*cli(["check", "mfu"], capfd)[::2], "missing", "reset mfu")

    (tmp_path / STATE_FILE).write_text("{not json")
    assert_one_line_error(*cli(["list"], capfd)[::2], STATE_FILE)


def test_bad_input_in_a_real_process(tmp_path):
    code = (
        "import sys; from nanolm.cli import run; from nanolm.cli.problems import problems; run(problems, sys.argv[1:], 'nanolm')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "solution", "mfu"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert_one_line_error(proc.returncode, proc.stderr, "not solved")


def test_watch_rechecks_on_save(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    ws = Workspace(tmp_path)
    ws.start("stars_and_bars")
    learner = tmp_path / "stars_and_bars" / "stars_and_bars.py"
    saves = iter([PROBLEMS["stars_and_bars"].starter() + "\n# saved, still unsolved\n", PROBLEMS["stars_and_bars"].reference()])

    def save_next(_interval: float) -> None:  # what the learner does between two polls
        learner.write_text(next(saves))

    results = list(watch(ws, ["stars_and_bars"], interval=0.01, seed=0, sleep=save_next))
    assert [r.status for r in results] == ["not solved", "not solved", "solved"]

    ws.start("mfu")
    assert [r.problem for r in watch(ws, ws.watched(), once=True, seed=0, sleep=save_next)] == ["mfu"]
    code, out, _ = cli(["watch", "mfu", "--max-checks", "1", "--seed", "0"], capfd)
    assert code == 1 and "0 of 5 checks pass" in out


def test_problem_files_ship_with_the_package():
    """pyproject's package-data holds every problem's files (CI installs the package fresh)."""
    import tomllib

    globs = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["nanolm.problems"]
    root = Path(importlib.import_module("nanolm.problems").__file__).parent
    shipped = {p for g in globs for p in root.glob(g)}
    for problem in PROBLEMS.values():
        for f in (
            ("instructions.md", "hints.md")
            + (() if problem.pool else ("reference.py",))
            + (() if problem.bugs or problem.pool else ("starter.py",))
        ):
            assert root / "files" / problem.name / f in shipped, (problem.name, f)
        if problem.pool:  # the report template, then each script as given, its reference fix and report
            assert root / "files" / problem.name / "report.toml" in shipped, problem.name
        for v in problem.pool:
            for suffix in (".py", "_fixed.py", "_report.toml"):
                assert problem.pool_path(v, suffix) in shipped, (problem.name, v, suffix)
