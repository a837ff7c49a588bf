"""``nanolm problems selftest``: the graders' own test, by mutation testing.

Every problem keeps plausible wrong solutions, its *mutants*, in a nanolm checkout's
``tests/problems_mutants/<problem>/*.py``. Each starts with a header:

    # mutant: the lens skips the final norm: W_U times the raw residual stream
    # expect: raw residual stream

``mutant`` names the mistake; each ``expect`` line is a phrase (case-insensitive) that one failing check's
message must hold, so that the learner reads what went wrong. A pooled problem's mutant (bottleneck) adds
``# variant: NAME`` and keeps its report beside it as ``<name>.toml``, where ``{before_ms}`` and
``{after_ms}`` stand for the step times measured here. A mutant is *killed* when grading it fails with such
a message (a failed check, or a file that could not be graded); the mutation score is killed / total.
Each problem's mutants, and its reference solution (which must pass), are graded in one grading process.

The mutants stay in the tests, not in the package: they are the checks' test data and change with them,
an installed nanolm has no use for them, and a wheel of near-solutions (each mutant is a reference with
one mistake) beside the starters would be clutter. So the command looks for them in the checkout it runs
from (the working folder or one above it, else the checkout holding this package), or ``--mutants DIR``.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .grading import CheckResult, grade_files
from .registry import PROBLEMS, get_problem

MUTANTS_DIR = Path("tests") / "problems_mutants"
DEFAULT_TIMEOUT_S = 600.0  # per problem: every mutant of a problem is graded in one process


@dataclass
class Mutant:
    problem: str
    name: str
    path: Path
    mistake: str
    expect: list[str]
    variant: str = ""  # a pooled problem's script


@dataclass
class Verdict:
    name: str
    mistake: str
    killed: bool
    by: str = ""  # the failing check whose message names the mistake ("not graded" for a harness error)
    message: str = ""  # that message; for a survivor, why it survived


@dataclass
class Score:
    problem: str
    killed: int
    total: int
    reference: str  # the reference solution's status: "solved" unless a check is wrong
    reference_message: str = ""
    seconds: float = 0.0
    mutants: list[Verdict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reference == "solved" and self.killed == self.total


def find_mutants_dir(given: Path | None = None) -> Path:
    """`given`, else tests/problems_mutants of the checkout around the working folder or this package."""
    if given is not None:
        if not Path(given).is_dir():
            raise UserError(f"--mutants {given}: no such folder")
        return Path(given)
    here = Path.cwd().resolve()
    package = Path(__file__).resolve().parent
    for folder in (here, *here.parents, *package.parents):
        if (folder / MUTANTS_DIR).is_dir():
            return folder / MUTANTS_DIR
    raise UserError(
        f"no mutants found: they are kept in a nanolm checkout's {MUTANTS_DIR}/; run this inside the "
        "checkout, or give --mutants DIR"
    )


def parse(path: Path, problem: str) -> Mutant:
    """A mutant file's header; a UserError naming the file when it has no mistake or no expected phrase."""
    fields: dict[str, list[str]] = {"mutant": [], "expect": [], "variant": []}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].partition(":")
        if key.strip() in fields and value.strip():
            fields[key.strip()].append(value.strip())
    if not fields["mutant"] or not fields["expect"]:
        raise UserError(f"{path}: a mutant starts with '# mutant: THE MISTAKE' and at least one '# expect: PHRASE' line")
    return Mutant(problem, path.stem, path, fields["mutant"][0], fields["expect"], (fields["variant"] or [""])[0])


def load(folder: Path, names: list[str] | None = None) -> dict[str, list[Mutant]]:
    """The mutants of each problem named (default: every problem with a folder of mutants), by problem."""
    known = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    for name in known:
        if name not in PROBLEMS:
            raise UserError(f"{folder / name}: no problem {name!r}; known problems: {', '.join(PROBLEMS)}")
    for name in names or []:
        get_problem(name)
        if name not in known:
            raise UserError(f"no mutants for {name} in {folder}")
    return {n: [parse(p, n) for p in sorted((folder / n).glob("*.py"))] for n in (names or known)}


def judge(mutant: Mutant, result: CheckResult) -> Verdict:
    """Killed when grading failed with a message holding every expected phrase."""
    want = [w.lower() for w in mutant.expect]
    if result.status == "solved":
        return Verdict(mutant.name, mutant.mistake, False, message="graded as solved: every check passes")
    failures = (
        [("not graded", result.error)]
        if result.status == "error"
        else [(t.name, t.message) for t in result.tests if not t.passed]
    )
    for name, message in failures:
        if all(w in message.lower() for w in want):
            return Verdict(mutant.name, mutant.mistake, True, name, message)
    shown = "; ".join(f"{n}: {m}" for n, m in failures)[:600]
    return Verdict(
        mutant.name,
        mutant.mistake,
        False,
        message=f"failed, but no message holds {' + '.join(map(repr, mutant.expect))} ({shown})",
    )


def _stage(folder: Path, problem_file: str, source: str, report: str | None = None) -> Path:
    folder.mkdir(parents=True)
    path = folder / problem_file
    path.write_text(source, encoding="utf-8")
    if report is not None:
        (folder / "report.toml").write_text(report, encoding="utf-8")
    return path


def _pooled(name: str, mutants: list[Mutant], tmp: Path) -> tuple[list[Path], str]:
    """A pooled problem: the reference fix and report (step times measured here), then each mutant, staged
    for one variant (the first mutant's)."""
    from .checks.bottleneck import measure

    problem = PROBLEMS[name]
    variants = {m.variant for m in mutants}
    if len(variants) != 1 or not variants <= set(problem.pool):
        raise UserError(f"{name}'s mutants must name one variant of {', '.join(problem.pool)} ('# variant: NAME')")
    variant = variants.pop()
    ref = _stage(tmp / "_reference", problem.file, problem.reference(variant))
    times = {"before_ms": round(measure(problem.pool_path(variant))["ms"], 3), "after_ms": round(measure(ref)["ms"], 3)}
    report = problem.pool_path(variant, "_report.toml").read_text(encoding="utf-8")
    lines = [f"{k} = {times[k]}" if k in times else line for line in report.splitlines() for k in [line.split("=")[0].strip()]]
    ref.with_name("report.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    paths = [ref]
    for m in mutants:
        toml = m.path.with_suffix(".toml")
        if not toml.is_file():
            raise UserError(f"{m.path}: its report {toml.name} is missing")
        text = toml.read_text(encoding="utf-8").replace("{before_ms}", str(times["before_ms"]))
        paths.append(
            _stage(
                tmp / m.name, problem.file, m.path.read_text(encoding="utf-8"), text.replace("{after_ms}", str(times["after_ms"]))
            )
        )
    return paths, variant


def score(name: str, mutants: list[Mutant], seed: int = 0, timeout: float = DEFAULT_TIMEOUT_S) -> Score:
    """Grade the problem's reference and mutants in one grading process; the score."""
    problem = get_problem(name)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"nanolm-selftest-{name}-") as d:
        tmp = Path(d)
        if problem.pool:
            paths, variant = _pooled(name, mutants, tmp)
        else:
            paths = [_stage(tmp / "_reference", problem.file, problem.reference())]
            paths += [_stage(tmp / m.name, problem.file, m.path.read_text(encoding="utf-8")) for m in mutants]
            variant = ""
        results = grade_files(problem, paths, seed, timeout, variant)
    ref, rest = results[0], results[1:]
    ref_message = ref.error or "; ".join(f"{t.name}: {t.message}" for t in ref.tests if not t.passed)
    verdicts = [judge(m, r) for m, r in zip(mutants, rest)]
    return Score(
        name, sum(v.killed for v in verdicts), len(verdicts), ref.status, ref_message, round(time.monotonic() - t0, 1), verdicts
    )


def selftest(
    names: list[str] | None = None, folder: Path | None = None, seed: int = 0, timeout: float = DEFAULT_TIMEOUT_S
) -> list[Score]:
    """The mutation score of each problem named (default: every problem with mutants)."""
    found = load(find_mutants_dir(folder), names)
    return [score(name, mutants, seed, timeout) for name, mutants in found.items()]
