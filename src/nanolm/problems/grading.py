"""Grading a learner's file in a separate process: ``python -m nanolm.problems.runner`` with a time
limit on its whole process group, run on a temporary copy of the learner's folder (the path passed as
an argument, no shell), the result read back as JSON. nanolm.problems.sandbox says what is promised.

A harness error (the file is missing, does not import, lacks a function, or the grading ran past
the time limit) is told apart from a wrong answer: the first is ``status == "error"`` with one
line in ``error``, the second ``status == "not solved"`` with the failing checks' messages.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .registry import Problem
from .runner import RESULT_MARK
from .sandbox import copy_folder, kill_group

DEFAULT_TIMEOUT_S = 120.0


@dataclass
class TestResult:
    name: str
    title: str
    passed: bool
    message: str = ""  # why it failed: the symptom, one line


@dataclass
class CheckResult:
    problem: str
    file: str
    seed: int
    status: str  # "solved", "not solved" or "error"
    tests: list[TestResult] = field(default_factory=list)
    error: str = ""  # one line when status == "error"
    error_kind: str = ""  # missing, syntax, import, interface, timeout, crash
    bugs: int = 0  # find-and-fix problems: the number of planted bugs (one check each, the first ones)
    seconds: float = 0.0
    note: str = ""  # one line beside the result (a timed problem: the time taken against its limit)

    @property
    def passed(self) -> int:
        return sum(t.passed for t in self.tests)

    @property
    def total(self) -> int:
        return len(self.tests)

    @property
    def bugs_fixed(self) -> int:
        """Find-and-fix: the planted bugs' checks that pass (the first `bugs` checks)."""
        return sum(t.passed for t in self.tests[: self.bugs])

    @property
    def exit_code(self) -> int:
        """0 solved, 1 not yet solved, 2 the harness could not grade."""
        return {"solved": 0, "not solved": 1}.get(self.status, 2)

    def summary(self) -> str:
        """One line: what this check found."""
        if self.status == "error":
            return f"{self.problem}: not graded: {self.error}"
        if self.bugs:
            return f"{self.problem}: {self.bugs_fixed} of {self.bugs} bugs fixed, {self.passed} of {self.total} checks pass" + (
                " — solved" if self.status == "solved" else ""
            )
        return f"{self.problem}: {self.passed} of {self.total} checks pass" + (" — solved" if self.status == "solved" else "")


def new_seed() -> int:
    """A fresh seed per check, so an answer fitted to one draw of the tests fails the next."""
    return secrets.randbelow(2**31)


def _env(cache: Path | None = None, tmp: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if cache is not None:  # libraries' caches go where the learner's code may write (nanolm.problems.sandbox)
        env["XDG_CACHE_HOME"] = str(cache)
    if tmp is not None:  # the grading's own temporary folder: the machine's /tmp (where a repo may live) is not it
        env["TMPDIR"] = str(tmp)
    return env


def _errored(problem: Problem, path: Path, seed: int, kind: str, message: str, seconds: float = 0.0) -> CheckResult:
    return CheckResult(
        problem.name, str(path), seed, "error", error=message, error_kind=kind, bugs=len(problem.bugs), seconds=seconds
    )


def _from_json(problem: Problem, row: dict, seed: int, seconds: float) -> CheckResult:
    path = Path(row["file"])
    if "error" in row:
        return _errored(problem, path, seed, row["error"]["kind"], row["error"]["message"], seconds)
    tests = [TestResult(t["name"], t["title"], bool(t["passed"]), t["message"]) for t in row["tests"]]
    status = "solved" if tests and all(t.passed for t in tests) else "not solved"
    return CheckResult(problem.name, str(path), seed, status, tests, bugs=len(problem.bugs), seconds=seconds)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no message"


def _tail(log: Path, limit: int = 8192) -> str:
    """The last `limit` bytes of the grading process's output (it may have printed megabytes)."""
    with open(log, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
        return f.read().decode("utf-8", "replace")


def _run(cmd: list[str], cwd: Path, log: Path, timeout: float) -> tuple[str | None, int]:
    """(the runner's stdout, or None past the time limit; its exit code): run in a new session, so that
    the whole process group (every child the learner's code started) is killed at the limit and after."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=_env(cwd / "cache", cwd / "tmp"),
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.communicate()
            return None, proc.returncode
        finally:
            kill_group(proc.pid)
    return out.decode("utf-8", "replace"), proc.returncode


def grade_files(
    problem: Problem, paths: list[Path], seed: int | None = None, timeout: float = DEFAULT_TIMEOUT_S, variant: str = ""
) -> list[CheckResult]:
    """Grade each file in one grading process (one interpreter start-up for all of them), each in a fresh
    temporary copy of its folder (nanolm.problems.sandbox: the learner's folder is never written)."""
    seed = new_seed() if seed is None else seed
    paths = [Path(p) for p in paths]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        return [
            _errored(problem, p, seed, "missing", f"{p} does not exist")
            if p in missing
            else _errored(problem, p, seed, "missing", "not graded: another file is missing")
            for p in paths
        ]
    with tempfile.TemporaryDirectory(prefix="nanolm-grading-") as tmp:
        root = Path(tmp)
        copies = [copy_folder(p, root / str(i)) for i, p in enumerate(paths)]
        (root / "cache").mkdir()
        (root / "tmp").mkdir()
        cmd = [
            sys.executable,
            "-m",
            "nanolm.problems.runner",
            problem.name,
            *map(str, copies),
            "--seed",
            str(seed),
            "--protect",
            str(root.resolve()),
            "--writable",
            str((root / "cache").resolve()),
            "--writable",
            str((root / "tmp").resolve()),
        ]
        for folder in dict.fromkeys(p.resolve().parent for p in paths):
            cmd += ["--protect", str(folder)]
        if variant:
            cmd += ["--variant", variant]
        t0 = time.monotonic()
        out, code = _run(cmd, root, root / "output.log", timeout)
        seconds = time.monotonic() - t0
        if out is None:
            msg = (
                f"grading stopped after the {timeout:g} s time limit: the code ran too long "
                "(an infinite loop, or far too much work)"
            )
            return [_errored(problem, p, seed, "timeout", msg, seconds) for p in paths]
        result = next((ln[len(RESULT_MARK) :] for ln in reversed(out.splitlines()) if ln.startswith(RESULT_MARK)), None)
        if result is None:
            msg = f"the grading process ended (exit code {code}) without a result: {_last_line(_tail(root / 'output.log'))}"
            return [_errored(problem, p, seed, "crash", msg, seconds) for p in paths]
    rows = json.loads(result)["results"]
    return [_from_json(problem, {**row, "file": str(p)}, seed, seconds / len(paths)) for p, row in zip(paths, rows)]


def grade(
    problem: Problem, path: Path, seed: int | None = None, timeout: float = DEFAULT_TIMEOUT_S, variant: str = ""
) -> CheckResult:
    """Grade one learner file in a separate process (`variant`: a pooled problem's draw)."""
    return grade_files(problem, [path], seed, timeout, variant)[0]
