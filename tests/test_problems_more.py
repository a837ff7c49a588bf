"""nanolm problems, the later additions: seed_noise and dfa_to_rnn (starter fails every check, reference
passes every check, classic wrong answers and answers fitted to one draw fail a fresh draw) and the
week's flash cards (`nanolm problems quiz`, driven through click's CliRunner with its input).

Checks run in-process (runner.grade_file, the grading process's own function); one test runs the real
grading process, all files of a problem in one run."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from nanolm.cli.problems import problems
from nanolm.problems.grading import grade_files
from nanolm.problems.quiz import load_deck
from nanolm.problems.registry import PROBLEMS
from nanolm.problems.runner import checks_for, grade_file
from nanolm.problems.workspace import STATE_FILE, Workspace
from test_problems import one_thread  # noqa: F401  (an autouse fixture: one thread, as grading runs)

NEW = ["seed_noise", "dfa_to_rnn"]
REFERENCE_DOC = (
    Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "week22-infrastructure-and-research-craft.txt"
)


def failed(result: dict) -> list[str]:
    assert "error" not in result, result
    return [t["name"] for t in result["tests"] if not t["passed"]]


def grade_text(tmp_path: Path, name: str, source: str, seed: int = 0, tag: str = "x") -> dict:
    f = tmp_path / f"{name}_{tag}.py"
    f.write_text(source)
    return grade_file(PROBLEMS[name], f, seed, abs(hash((name, tag, seed))) % 10**6)


def patched(name: str, find: str, replace: str) -> str:
    source = PROBLEMS[name].reference()
    assert source.count(find) == 1, find
    return source.replace(find, replace)


# ---- the problems --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW)
def test_reference_passes_and_starter_fails_every_check(name, tmp_path):
    problem = PROBLEMS[name]
    assert problem.instructions().startswith(f"# {name}") and len(problem.hints()) >= 3
    for seed in (0, 1):
        assert failed(grade_file(problem, problem.reference_path, seed, seed)) == []
        starter = grade_text(tmp_path, name, problem.starter(), seed, "starter")
        assert failed(starter) == problem.check_names()
        assert all("not written yet" in t["message"] for t in starter["tests"])


# (problem, find, replace, the checks that fail): classic wrong answers, at seed 0
MISTAKES = [
    ("seed_noise", "and beyond_spread", "", {"spread_rule", "either_spread"}),  # the t-test alone
    ("seed_noise", "max(np.ptp(a), np.ptp(b))", "np.ptp(a)", {"either_spread"}),  # the baseline's spread alone
    (
        "seed_noise",
        "p is not None and p < ALPHA and (lo > 0 or hi < 0) and beyond_spread",
        "beyond_spread",
        {"edge_cases", "welch_rule"},
    ),  # the spread rule alone
    ("seed_noise", "MIN_SEEDS = 3", "MIN_SEEDS = 1", {"edge_cases"}),
    (
        "dfa_to_rnn",
        "W_hh[unit(dfa.start, c), start_unit]",
        "W_hh[unit(0, c), start_unit]",
        {"random_dfas", "start_state"},
    ),  # assumes the start state is state 0
    ("dfa_to_rnn", "w_out[start_unit] = float(dfa.start in dfa.accepting)", "pass", {"parity", "start_state"}),
    ("dfa_to_rnn", "b[unit(q, a)] = -1.0", "b[unit(q, a)] = -0.5", {"parity", "random_dfas"}),  # no AND
    ("dfa_to_rnn", "H = n * m + 1", "H = n * m + 2", {"interface"}),
]


@pytest.mark.parametrize("name, find, replace, must_fail", MISTAKES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISTAKES)])
def test_classic_mistakes_fail(name, find, replace, must_fail, tmp_path):
    result = grade_text(tmp_path, name, patched(name, find, replace), 0, "mistake")
    fails = set(failed(result))
    assert must_fail <= fails, result
    for t in result["tests"]:
        assert "\n" not in t["message"] and "Traceback" not in t["message"]


def test_seed_noise_messages_name_the_truth_and_the_numbers(tmp_path):
    result = grade_text(tmp_path, "seed_noise", patched("seed_noise", "and beyond_spread", ""), 0, "msg")
    message = next(t["message"] for t in result["tests"] if t["name"] == "spread_rule")
    assert "returned 'result', the truth is 'noise'" in message and "Welch p=" in message and "spreads" in message


def _recorded_decisions(seed: int) -> dict:
    """Every (baseline, candidate) the seed_noise checks ask at `seed`, with the reference's answer."""
    reference = importlib.import_module("nanolm.problems.checks.seed_noise")
    spec = importlib.util.spec_from_file_location("sn_ref", PROBLEMS["seed_noise"].reference_path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    table: dict = {}

    def decide(a, b):
        table[(tuple(a), tuple(b))] = ref.decide(a, b)
        return table[(tuple(a), tuple(b))]

    for c in reference.CHECKS:
        c.fn(SimpleNamespace(decide=decide), seed)
    return table


def test_answers_fitted_to_one_draw_fail_a_fresh_one(tmp_path):
    """A lookup table of one seed's right answers passes that seed and fails the next draw."""
    table = _recorded_decisions(0)
    source = f"TABLE = {table!r}\n\ndef decide(a, b):\n    return TABLE.get((tuple(a), tuple(b)), 'noise')\n"
    assert failed(grade_text(tmp_path, "seed_noise", source, 0, "memo")) == []
    assert len(failed(grade_text(tmp_path, "seed_noise", source, 5, "memo"))) >= 2

    checks = importlib.import_module("nanolm.problems.checks.dfa_to_rnn")
    ref = importlib.util.module_from_spec(
        spec := importlib.util.spec_from_file_location("dr_ref", PROBLEMS["dfa_to_rnn"].reference_path)
    )
    spec.loader.exec_module(ref)
    memo = {
        (d.delta, d.start, tuple(sorted(d.accepting))): {k: v.tolist() for k, v in ref.dfa_to_rnn(d).items()}
        for d in checks.random_dfas(0)
    }
    source = (
        f"import numpy as np\nMEMO = {memo!r}\n\ndef dfa_to_rnn(dfa):\n"
        "    key = (dfa.delta, dfa.start, tuple(sorted(dfa.accepting)))\n"
        "    if key in MEMO:\n        return {k: np.array(v) for k, v in MEMO[key].items()}\n"
        "    H = dfa.n_states * dfa.n_symbols + 1\n"
        "    return {'W_ih': np.zeros((H, dfa.n_symbols)), 'W_hh': np.zeros((H, H)), 'b': np.zeros(H),\n"
        "            'h0': np.zeros(H), 'w_out': np.zeros(H)}\n"
    )
    f = tmp_path / "memo_dfa.py"
    f.write_text(source)
    problem = PROBLEMS["dfa_to_rnn"]
    random_check = next(c for c in checks_for(problem) if c.name == "random_dfas")
    module = SimpleNamespace(dfa_to_rnn=lambda dfa: _load(f).dfa_to_rnn(dfa))
    random_check.fn(module, 0)  # the memorized draw passes
    assert "random_dfas" in failed(grade_file(problem, f, 5, 7))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("memo_dfa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_grading_process_grades_the_new_problems(tmp_path):
    """One grading process per problem: the reference solved, the starter not, at a fresh seed."""
    for name in NEW:
        problem = PROBLEMS[name]
        starter = tmp_path / f"{name}_starter.py"
        starter.write_text(problem.starter())
        solved, unsolved = grade_files(problem, [problem.reference_path, starter], timeout=120)
        assert solved.status == "solved" and solved.passed == len(problem.check_names()), solved
        assert unsolved.status == "not solved" and unsolved.passed == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_reference_passes_on_many_draws(name):
    problem = PROBLEMS[name]
    for seed in range(2, 22):
        assert failed(grade_file(problem, problem.reference_path, seed, seed)) == [], seed


# ---- the quiz ------------------------------------------------------------------------------------


def test_the_deck_holds_the_self_check_and_reaches_the_threshold():
    deck = load_deck()
    assert len({c.id for c in deck.cards}) == len(deck.cards) >= deck.min_known + deck.max_missed
    assert (deck.min_known, deck.max_missed) == (20, 3) and "20 ✓" in deck.threshold and "3 ✗" in deck.threshold
    assert {c.source for c in deck.cards} == {"self-check", "rapid-fire"}
    assert all(len(c.question) > 20 and len(c.answer) > 60 for c in deck.cards)
    self_check = [c.question for c in deck.cards if c.source == "self-check"]
    assert len(self_check) == 8
    if REFERENCE_DOC.is_file():  # every self-check question of the document has its card
        text = REFERENCE_DOC.read_text(encoding="utf-8")
        block = text[text.index("\nSelf-check\n") : text.index("\nMock interviews")]
        asked = " ".join(self_check).lower()
        for keyword in (
            "synchronize",
            "cpu-bound",
            "dyck",
            "rmsnorm",
            "0.98",
            "sycophancy",
            "reward hacking",
            "constitutional ai",
        ):
            assert keyword in block.lower() and keyword in asked, keyword


def quiz(tmp_path: Path, args: list[str], keys: str = "") -> tuple[int, str]:
    result = CliRunner().invoke(problems, ["quiz", *args], input=keys, catch_exceptions=False)
    return result.exit_code, result.output


def marks(tmp_path: Path) -> dict:
    return json.loads((tmp_path / STATE_FILE).read_text())["quiz"]["marks"]


def test_quiz_shows_the_answer_on_enter_and_keeps_the_marks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    deck = load_deck()
    first, second, third = deck.cards[:3]
    code, out = quiz(tmp_path, [], "\ny\n\nn\nq\n")
    assert code == 0
    assert first.question in out and first.answer in out and second.answer in out
    assert third.question in out and third.answer not in out  # stopped before the answer
    assert out.index(first.question) < out.index("Enter shows the answer:") < out.index(first.answer)
    assert marks(tmp_path) == {first.id: "y", second.id: "n"}
    assert "1 ✓, 1 ✗" in out and "at least 20 ✓ and at most 3 ✗" in out and "not yet met" in out

    # the next round asks the unanswered cards first, then the missed one; end of input keeps the marks
    code, out = quiz(tmp_path, ["--limit", "2"], "\ny\n")
    assert code == 0 and third.question in out and first.question not in out
    assert marks(tmp_path) == {first.id: "y", second.id: "n", third.id: "y"}

    code, out = quiz(tmp_path, ["--missed"], "\ny\n")
    assert second.question in out and first.question not in out and third.question not in out
    assert marks(tmp_path)[second.id] == "y"

    code, out = quiz(tmp_path, ["--status", "--json"])
    status = json.loads(out)
    assert (status["known"], status["missed"], status["cards"], status["passed"]) == (3, 0, len(deck.cards), False)


def test_quiz_threshold_met_and_reset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    n = len(load_deck().cards)
    keys = "\ny\n" * (n - 3) + "\nn\n" * 3
    code, out = quiz(tmp_path, [], keys)
    assert code == 0 and f"{n - 3} ✓, 3 ✗, 0 not yet answered" in out and out.rstrip().endswith(": met")
    code, out = quiz(tmp_path, ["--missed"], "\nn\n" * 3)  # still 3 ✗: met
    assert json.loads(quiz(tmp_path, ["--status", "--json"])[1])["passed"] is True
    code, out = quiz(tmp_path, [], "\nn\n")  # the missed ones again; a fourth ✗ is one too many
    assert json.loads(quiz(tmp_path, ["--status", "--json"])[1])["passed"] is True  # a ✗ again is still 3 ✗
    code, out = quiz(tmp_path, ["--all", "--limit", "1"], "\nn\n")
    status = json.loads(quiz(tmp_path, ["--status", "--json"])[1])
    assert (status["missed"], status["passed"]) == (4, False)
    code, out = quiz(tmp_path, ["--reset", "--status"])
    assert code == 0 and f"0 ✓, 0 ✗, {n} not yet answered" in out
    assert "quiz" not in json.loads((tmp_path / STATE_FILE).read_text())
    ws = Workspace(tmp_path)  # problems' progress and the quiz share the state file without losing either
    ws.start("stars_and_bars")
    ws.mark_card(load_deck().cards[0].id, "y")
    again = Workspace(tmp_path)
    assert again.quiz == {load_deck().cards[0].id: "y"} and again.state["stars_and_bars"].started


def test_quiz_bad_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(problems, ["quiz", "--all", "--missed"])
    assert result.exit_code != 0 and "give one of them" in str(result.exception or result.output)
    result = CliRunner().invoke(problems, ["quiz", "--json"])
    assert result.exit_code != 0 and "--status" in str(result.exception or result.output)
    code, out = quiz(tmp_path, [], "\nmaybe\ny\nq\n")  # a mark other than y/n/q is asked again
    assert code == 0 and "is not one of" in out and len(marks(tmp_path)) == 1
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 1, "problems": {}, "quiz": {"marks": {"x": "maybe"}}}))
    result = CliRunner().invoke(problems, ["quiz", "--status"])
    assert result.exit_code != 0 and STATE_FILE in str(result.exception or result.output)


def test_quiz_cards_ship_with_the_package():
    import tomllib

    globs = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["nanolm.problems"]
    root = Path(importlib.import_module("nanolm.problems").__file__).parent
    shipped = {p for g in globs for p in root.glob(g)}
    assert root / "files" / "quiz" / "cards.toml" in shipped
    for name in NEW:
        for f in ("instructions.md", "hints.md", "reference.py", "starter.py"):
            assert root / "files" / name / f in shipped, (name, f)
