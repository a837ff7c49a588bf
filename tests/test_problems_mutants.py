"""nanolm problems: the graders' own test. Every problem's mutants (tests/problems_mutants/<problem>/*.py, the
plausible wrong solutions a learner writes, each naming its mistake) are graded by the real grading
process, one process per problem, and each must fail a check whose message names the mistake; every
shipped reference solution must pass (nanolm.problems.selftest, `nanolm problems selftest`).

The quick problems run here; linear_probe (its checks fit hundreds of probes per file) and
bottleneck (it times training scripts) are slow tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from nanolm.cli import run
from nanolm.cli.problems import problems
from nanolm.problems.registry import PROBLEMS, plant
from nanolm.problems.selftest import MUTANTS_DIR, find_mutants_dir, load, score

ROOT = Path(__file__).resolve().parents[1] / MUTANTS_DIR
MUTANTS = load(ROOT)
SLOW = {"linear_probe", "bottleneck"}

# the concrete mistakes the issue names, by problem: each has its mutant
REQUIRED = {
    "logit_lens": {"no_final_norm", "norm_without_gain", "layernorm_statistics", "reads_resid_mid", "one_layer_late"},
    "linear_probe": {
        "scored_on_train",
        "standardized_with_all",
        "tuned_on_held_out",
        "unseeded_split",
        "not_stratified",
        "per_cell_accuracy",
    },
    "mfu": {"total_parameters", "two_n", "four_n", "peak_in_tflops"},
    "seed_noise": {"mean_alone"},
    "dfa_to_rnn": {"drifts_on_long_strings"},
    "find_and_fix_1": {"fix_drops_ln1", "fix_loss_sum"},
    "find_and_fix_3": {"fix_residual_lost", "fix_mlp_dropout_off"},
}


def code(path: Path) -> str:
    """A mutant's source without its header."""
    lines = path.read_text().splitlines(keepends=True)
    return "".join(lines[next(i for i, ln in enumerate(lines) if not ln.startswith("#")) :])


def test_every_problem_has_its_mutants():
    assert set(MUTANTS) == set(PROBLEMS)
    for name, mutants in MUTANTS.items():
        problem = PROBLEMS[name]
        names = {m.name for m in mutants}
        assert REQUIRED.get(name, set()) <= names, (name, REQUIRED[name] - names)
        assert all(m.mistake and m.expect for m in mutants)
        for m in mutants:  # each one is wrong somewhere: its code, or (a pooled problem) its report
            if code(m.path) == problem.reference(m.variant or None):
                report = tomllib.loads(
                    m.path.with_suffix(".toml").read_text().replace("{before_ms}", "1").replace("{after_ms}", "1")
                )
                reference = tomllib.loads(problem.pool_path(m.variant, "_report.toml").read_text())
                fields = ("bottleneck", "evidence", "change")
                assert any(report[f] != reference[f] for f in fields) or (report["before_ms"], report["after_ms"]) != (1, 1), (
                    m.path
                )
        if problem.bugs:  # one mutant per planted bug left in (kept equal to the bug), and fixes that break elsewhere
            for k, bug in enumerate(problem.bugs, 1):
                m = next(m for m in mutants if m.name == f"bug{k}_{bug.check}")
                assert code(m.path) == plant(problem.reference(), [bug]), f"{m.path} is not bug {k} alone any more"
            assert len([m for m in mutants if m.name.startswith("fix_")]) >= 6, name
        else:
            assert len(mutants) >= 6, name
        if problem.pool:
            assert all(m.variant in problem.pool and m.path.with_suffix(".toml").is_file() for m in mutants)


def killed(name: str) -> None:
    s = score(name, MUTANTS[name], seed=0)
    assert s.reference == "solved", f"{name}'s reference solution fails: {s.reference_message}"
    survivors = [f"{v.name} ({v.mistake}): {v.message}" for v in s.mutants if not v.killed]
    assert not survivors, "\n".join(survivors)
    assert s.killed == s.total == len(MUTANTS[name])


@pytest.mark.parametrize("name", sorted(set(PROBLEMS) - SLOW))
def test_every_mutant_is_killed(name):
    killed(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_every_mutant_is_killed_slow(name):
    killed(name)


def cli(argv: list[str], capfd) -> tuple[int, str, str]:
    capfd.readouterr()
    with pytest.raises(SystemExit) as exc:
        run(problems, argv, "nanolm")
    out = capfd.readouterr()
    return exc.value.code, out.out, out.err


def test_selftest_command_prints_the_score_and_fails_on_a_survivor(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("COLUMNS", "200")
    code_, out, _ = cli(["selftest", "stars_and_bars", "mfu", "--json"], capfd)
    rows = {r["problem"]: r for r in json.loads(out)}
    assert code_ == 0 and set(rows) == {"stars_and_bars", "mfu"}
    assert rows["mfu"]["killed"] == rows["mfu"]["total"] == len(MUTANTS["mfu"]) and rows["mfu"]["ok"]
    assert all(v["killed"] and v["by"] and v["message"] for v in rows["stars_and_bars"]["mutants"])

    # a folder of mutants with a survivor (the reference itself) and one whose message misses its words
    folder = tmp_path / "mutants" / "stars_and_bars"
    folder.mkdir(parents=True)
    (folder / "right.py").write_text("# mutant: nothing wrong\n# expect: anything\n" + PROBLEMS["stars_and_bars"].reference())
    (folder / "quiet.py").write_text(
        "# mutant: returns 0\n# expect: no such words\ndef count_solutions(n, upper):\n    return 0\n"
    )
    code_, out, _ = cli(["selftest", "--mutants", str(tmp_path / "mutants")], capfd)
    assert code_ == 1 and "0/2" in out and "0 of 2 mutants killed" in out
    assert "stars_and_bars/right survived" in out and "graded as solved" in out
    assert "stars_and_bars/quiet survived" in out and "no message holds 'no such words'" in out


def test_selftest_bad_input_is_one_line_and_exit_2(tmp_path, capfd):
    for argv, words in (
        (["selftest", "--mutants", str(tmp_path / "nope")], "no such folder"),
        (["selftest", "logit_lense"], "unknown problem"),
    ):
        code_, _, err = cli(argv, capfd)
        assert code_ == 2 and len(err.splitlines()) == 1 and words in err and "Traceback" not in err, err
    (tmp_path / "m" / "mfu").mkdir(parents=True)
    (tmp_path / "m" / "mfu" / "bare.py").write_text("def mfu(n, t, p):\n    return 0\n")
    code_, _, err = cli(["selftest", "--mutants", str(tmp_path / "m")], capfd)
    assert code_ == 2 and "# mutant:" in err and "bare.py" in err
    (tmp_path / "m2" / "not_a_problem").mkdir(parents=True)
    code_, _, err = cli(["selftest", "--mutants", str(tmp_path / "m2")], capfd)
    assert code_ == 2 and "no problem 'not_a_problem'" in err


def test_the_mutants_are_found_from_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the checkout: found beside the package (an editable install)
    assert find_mutants_dir() == ROOT
