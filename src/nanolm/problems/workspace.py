"""The learner's working folder: the problems' folders and a state file, ``nanolm-problems.json``,
with what was started where, what is solved, and how many hints were shown. Written atomically.

Every function here returns a dataclass; nanolm.cli.problems formats them.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..errors import UserError
from ..io import atomic_write_json, atomic_write_text
from .grading import DEFAULT_TIMEOUT_S, CheckResult, grade
from .registry import PROBLEMS, get_problem

STATE_FILE = "nanolm-problems.json"
STATE_VERSION = 1


@dataclass
class ProblemState:
    dir: str = ""  # the problem's folder, relative to the working folder when inside it
    started: str = ""  # ISO time
    solved: str = ""  # ISO time of the first passing check
    hints: int = 0  # hints shown
    checks: int = 0  # checks run
    best: int = 0  # most checks passed at once
    variant: str = ""  # a pooled problem (bottleneck): the script drawn for this learner
    draw: int = 0  # the seed that drew it
    timed: int = 0  # `start --timed MINUTES`: the time limit, shown by each check (0: untimed)


@dataclass
class ProblemStatus:
    name: str
    skill: str
    points: int
    status: str  # "not started", "started", "solved"
    hints_used: int
    hints_total: int
    checks: int  # the number of checks the problem runs
    file: str = ""


@dataclass
class Started:
    problem: str
    dir: str
    files: list[str]


@dataclass
class Hint:
    problem: str
    number: int  # 1-based
    total: int
    text: str
    new: bool  # False once every hint was shown: the last one again


@dataclass
class Reset:
    problem: str
    file: str
    backup: str  # where the learner's file was kept, "" if there was none


@dataclass
class Solution:
    problem: str
    source: str
    bugs: list[str] = field(default_factory=list)  # find-and-fix: what each planted bug was


def quiz_marks(data: object) -> dict[str, str]:
    """The flash cards' marks of a state file's JSON; TypeError naming what is not as written by _save."""
    if not isinstance(data, dict):
        raise TypeError(f"its JSON is a {type(data).__name__}, not an object")
    quiz = data.get("quiz", {})
    marks = quiz.get("marks", {}) if isinstance(quiz, dict) else None
    if not isinstance(marks, dict) or not all(isinstance(k, str) and v in ("y", "n") for k, v in marks.items()):
        raise TypeError("the quiz marks must be an object of y or n")
    return dict(marks)


def problem_states(data: dict) -> dict[str, ProblemState]:
    """Each problem's ProblemState from a state file's JSON, every field of the type ProblemState declares."""
    problems = data["problems"]
    if not isinstance(problems, dict):
        raise TypeError(f"'problems' is a {type(problems).__name__}, not an object")
    kinds = {f.name: (int if f.type == "int" else str) for f in fields(ProblemState)}
    states = {}
    for name, row in problems.items():
        if not isinstance(row, dict):
            raise TypeError(f"problem {name!r} is a {type(row).__name__}, not an object")
        for key, value in row.items():
            kind = kinds.get(key)
            if kind is None:
                raise TypeError(f"problem {name!r} has an unknown field {key!r}")
            if not isinstance(value, kind) or isinstance(value, bool):
                raise TypeError(
                    f"problem {name!r}: field {key!r} must be {'an int' if kind is int else 'a string'}, "
                    f"got {json.dumps(value)[:40]}"
                )
        states[name] = ProblemState(**row)
    return states


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


class Workspace:
    """A working folder and its state file."""

    def __init__(self, root: str | Path = ".") -> None:
        self.root = Path(root)
        self.state_path = self.root / STATE_FILE
        self.quiz: dict[str, str] = {}  # the flash cards' marks: card id -> "y" or "n"
        self.state = self._load()

    # ---- state --------------------------------------------------------------------------------
    def _load(self) -> dict[str, ProblemState]:
        if not self.state_path.exists() and not self.state_path.is_symlink():
            return {}
        fix = "fix or delete it (progress is lost with it)"
        if self.state_path.is_dir():
            raise UserError(
                f"{self.state_path} is a folder, not the problems' state file; move it away (the state file is written there)"
            )
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except OSError as e:
            raise UserError(f"cannot read {self.state_path}: {e.strerror}; make it readable, or {fix}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"{self.state_path} is not a nanolm problems state file (not JSON: {e}); {fix}") from None
        try:
            self.quiz = quiz_marks(data)
            return problem_states(data)
        except (KeyError, TypeError) as e:
            reason = f"no {e} entry" if isinstance(e, KeyError) else str(e)
            raise UserError(f"{self.state_path} is not a nanolm problems state file ({reason}); {fix}") from None

    def _save(self) -> None:
        data: dict = {"version": STATE_VERSION, "problems": {n: asdict(s) for n, s in self.state.items()}}
        if self.quiz:
            data["quiz"] = {"marks": self.quiz}
        atomic_write_json(self.state_path, data)

    def _entry(self, name: str) -> ProblemState:
        return self.state.setdefault(name, ProblemState())

    # ---- paths --------------------------------------------------------------------------------
    def _rel(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path.resolve())

    def problem_dir(self, name: str) -> Path | None:
        s = self.state.get(name)
        if s is None or not s.started:
            return None
        d = Path(s.dir)
        return d if d.is_absolute() else self.root / d

    def learner_file(self, name: str) -> Path:
        """The learner's file of a started problem; a UserError when it is not started or is gone."""
        problem = get_problem(name)
        d = self.problem_dir(name)
        if d is None:
            raise UserError(f"{name} is not started; start it with: nanolm problems start {name}")
        path = d / problem.file
        if not path.is_file():
            raise UserError(f"{path} is missing; write the starter again with: nanolm problems reset {name}")
        return path

    # ---- commands -----------------------------------------------------------------------------
    def start(self, name: str, dir: str | Path | None = None, timed: int = 0, draw: int | None = None) -> Started:
        """Write the starter file and instructions.md into the problem's folder (default ./NAME) and
        nothing else (a pooled problem: the drawn script as train.py, its copy to fix and report.toml
        too); refuses to overwrite a learner's file. `timed`: minutes, shown against the time taken by
        each check; `draw`: the seed drawing a pooled problem's variant (default: fresh)."""
        problem = get_problem(name)
        target = self.root / (dir if dir is not None else name)  # a relative --dir is inside the working folder
        earlier = self.problem_dir(name)
        if earlier is not None and (earlier / problem.file).exists() and earlier.resolve() != target.resolve():
            raise UserError(
                f"{name} is already started in {earlier}; work there, or remove "
                f"{earlier / problem.file} first to start again elsewhere"
            )
        path = target / problem.file
        if path.exists():
            raise UserError(
                f"{path} already exists (your work?); nothing written. Check it with "
                f"`nanolm problems check {name}`, or start over with `nanolm problems reset {name}`"
            )
        if target.exists() and not target.is_dir():
            raise UserError(f"{target} is a file, not a folder; choose another --dir")
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create {target}: {e.strerror}; choose another --dir") from None
        extra: dict[Path, str] = {}
        variant = ""
        if problem.pool:
            draw = secrets.randbelow(2**31) if draw is None else draw
            variant = random.Random(draw).choice(problem.pool)
            extra = pool_files(problem, target, variant)
            for p in extra:
                if p.exists():
                    raise UserError(
                        f"{p} already exists (your work?); nothing written. Start over with "
                        f"`nanolm problems reset {name}`, or choose another --dir"
                    )
        atomic_write_text(path, problem.starter(variant or None))
        atomic_write_text(target / "instructions.md", problem.instructions())
        for p, text in extra.items():
            atomic_write_text(p, text)
        entry = self._entry(name)
        entry.dir, entry.started, entry.solved = self._rel(target), _now(), ""
        entry.variant, entry.draw, entry.timed = variant, draw or 0, timed
        self._save()
        return Started(name, str(target), [str(path), str(target / "instructions.md"), *map(str, extra)])

    def check(self, name: str, seed: int | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> CheckResult:
        """Grade the learner's file in a separate process; a pass marks the problem solved."""
        problem = get_problem(name)
        entry = self._entry(name)
        result = grade(problem, self.learner_file(name), seed, timeout, entry.variant)
        if entry.timed:
            result.note = timed_note(entry, result.status == "solved")
        entry.checks += 1
        entry.best = max(entry.best, result.passed)
        if result.status == "solved" and not entry.solved:
            entry.solved = _now()
        self._save()
        return result

    def hint(self, name: str) -> Hint:
        """The next hint (recorded), or the last one again once all were shown."""
        problem = get_problem(name)
        hints = problem.hints()
        entry = self._entry(name)
        new = entry.hints < len(hints)
        if new:
            entry.hints += 1
            self._save()
        return Hint(name, entry.hints, len(hints), hints[entry.hints - 1], new)

    def reset(self, name: str) -> Reset:
        """Write the starter again; the learner's file is kept beside it as FILE.bak (or .bak1, ...)."""
        problem = get_problem(name)
        d = self.problem_dir(name)
        if d is None:
            raise UserError(f"{name} is not started; there is nothing to reset (start it with: nanolm problems start {name})")
        path = d / problem.file
        backup = ""
        if path.exists():
            bak = next(
                path.with_name(f"{path.name}.bak{i or ''}")
                for i in range(1000)
                if not path.with_name(f"{path.name}.bak{i or ''}").exists()
            )
            path.replace(bak)
            backup = str(bak)
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, problem.starter(self._entry(name).variant or None))
        self._entry(name).solved = ""
        self._save()
        return Reset(name, str(path), backup)

    def solution(self, name: str) -> Solution:
        """The reference solution, once the problem is solved."""
        problem = get_problem(name)
        entry = self.state.get(name)
        if entry is None or not entry.solved:
            raise UserError(
                f"{name} is not solved yet; the solution is shown once `nanolm problems check {name}` passes "
                f"(stuck? `nanolm problems hint {name}`)"
            )
        if problem.pool and entry.variant:
            report = problem.pool_path(entry.variant, "_report.toml").read_text(encoding="utf-8")
            return Solution(name, problem.reference(entry.variant) + f"\n# ---- {REPORT_FILE} ----\n" + report)
        return Solution(name, problem.reference(), [b.what for b in problem.bugs])

    def statuses(self) -> list[ProblemStatus]:
        out = []
        for p in PROBLEMS.values():
            s = self.state.get(p.name, ProblemState())
            status = "solved" if s.solved else ("started" if s.started else "not started")
            d = self.problem_dir(p.name)
            out.append(
                ProblemStatus(
                    p.name,
                    p.skill,
                    p.points,
                    status,
                    s.hints,
                    len(p.hints()),
                    len(p.check_names()),
                    str(d / p.file) if d is not None else "",
                )
            )
        return out

    def mark_card(self, card_id: str, mark: str) -> None:
        """Record a flash card as known ("y") or not ("n"); saved at once, so a quiz left midway keeps its marks."""
        from .quiz import check_mark

        self.quiz[card_id] = check_mark(mark)
        self._save()

    def reset_quiz(self) -> None:
        self.quiz = {}
        self._save()

    def watched(self, names: list[str] | None = None) -> list[str]:
        """The problems `watch` follows: those named, else every started problem not yet solved."""
        if names:
            for n in names:
                self.learner_file(n)  # a UserError for one not started
            return list(names)
        return [n for n, s in self.state.items() if s.started and not s.solved and n in PROBLEMS]


REPORT_FILE = "report.toml"
ORIGINAL_FILE = "train.py"


def pool_files(problem, target: Path, variant: str) -> dict[Path, str]:
    """A pooled problem's files besides the one to edit: the script as given and the report template."""
    return {
        target / ORIGINAL_FILE: problem.starter(variant),
        target / REPORT_FILE: (problem.reference_path.parent.parent / REPORT_FILE).read_text(encoding="utf-8"),
    }


def _epoch(iso: str) -> float:
    return time.mktime(time.strptime(iso, "%Y-%m-%dT%H:%M:%S"))


def timed_note(entry: ProblemState, solved: bool) -> str:
    """The time since `start` against the limit of `start --timed` (informational: never fails a check)."""
    end = _epoch(entry.solved) if entry.solved else time.time()
    minutes = max(0.0, end - _epoch(entry.started)) / 60
    verdict = "within" if minutes <= entry.timed else "over"
    what = "solved after" if solved or entry.solved else "time so far:"
    return f"timed: {what} {minutes:.1f} min, {verdict} the {entry.timed} min limit"


def check(name: str, root: str | Path = ".", seed: int | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> CheckResult:
    """Grade problem `name` in the working folder `root` (what `nanolm problems check` runs)."""
    return Workspace(root).check(name, seed, timeout)


def _fingerprint(path: Path) -> str:
    """The file's content hash: a save is seen even when the clock's resolution hides the new mtime."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def watch(
    ws: Workspace,
    names: list[str],
    interval: float = 0.5,
    max_checks: int | None = None,
    once: bool = False,
    seed: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[CheckResult]:
    """Check each watched problem now, then again whenever its file changes (polling every `interval`
    seconds: file events are not relied on). Stops after `max_checks` checks, after one round with
    `once`, or when every watched problem is solved."""
    seen: dict[str, str] = {}
    done = 0
    pending = list(names)
    while pending:
        for name in list(pending):
            fp = _fingerprint(ws.problem_dir(name) / get_problem(name).file)
            if seen.get(name) == fp:
                continue
            seen[name] = fp
            result = ws.check(name, seed, timeout) if fp else None
            if result is None:
                continue
            done += 1
            yield result
            if result.status == "solved":
                pending.remove(name)
            if max_checks is not None and done >= max_checks:
                return
        if once:
            return
        if pending:
            sleep(interval)
