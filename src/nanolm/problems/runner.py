"""The grading process: ``python -m nanolm.problems.runner PROBLEM FILE... --seed N``.

Loads each learner file (a temporary copy of its folder, made by nanolm.problems.grading) as a module,
runs the problem's checks on it, and prints one line, ``NANOLM-PROBLEMS-RESULT {json}``, on the stdout it
was started with; whatever the learner's code prints (file descriptor 1 included) goes to stderr, capped
per check. A file that cannot be loaded (syntax error, an exception at import, a missing function) is
reported as a harness error, apart from the checks. nanolm.problems.sandbox says what the code may not
do while it is graded (the network, the working folder, its own files, the reference solutions).

The same functions grade in-process (``load_learner``, ``run_checks``) for the tests of the problems.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

from .checks import CONTEXT, Check
from .registry import Problem, get_problem
from .sandbox import CappedStream, Guard

RESULT_MARK = "NANOLM-PROBLEMS-RESULT "


class LoadError(Exception):
    """The learner's file could not be graded: `kind` is "syntax", "import" or "interface"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _where(path: Path, tb) -> str:
    """' (line N of FILE, in FUNC)' for the innermost frame of the traceback inside the learner's file."""
    frames = [f for f in traceback.extract_tb(tb) if Path(f.filename).resolve() == path.resolve()]
    if not frames:
        return ""
    f = frames[-1]
    return f" (line {f.lineno} of {path.name}" + (f", in {f.name})" if f.name != "<module>" else ")")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_learner(path: Path, problem: Problem, module_name: str = "learner_solution") -> ModuleType:
    """Import the learner's file as a module; LoadError (one line) when it cannot be."""
    path = Path(path)
    if not path.is_file():
        raise LoadError("missing", f"{path} does not exist")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise LoadError("import", f"{path.name} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise LoadError("syntax", f"{path.name}, line {e.lineno}: SyntaxError: {_one_line(e.msg)}") from None
    except BaseException as e:  # anything the learner's module-level code raises (SystemExit too)
        kind = type(e).__name__
        where = _where(path, e.__traceback__)
        raise LoadError("import", f"{path.name} failed to import: {kind}: {_one_line(e)}{where}") from None
    missing = [n for n in problem.entry if not hasattr(module, n)]
    if missing:
        raise LoadError(
            "interface",
            f"{path.name} defines no {', '.join(missing)}; the checks call "
            f"{', '.join(problem.entry)} (keep their names and signatures)",
        )
    return module


def checks_for(problem: Problem) -> list[Check]:
    """The problem's checks, in the order the registry names them."""
    table = importlib.import_module(f"{__package__}.checks.{problem.checks}").CHECKS
    by_name = {c.name: c for c in table}
    return [by_name[n] for n in problem.check_names()]


OUTPUT: list[CappedStream] = []  # the grading process's capped stdout and stderr (none in-process)


def _reset_output() -> None:
    for stream in OUTPUT:
        stream.reset()


def run_one(check: Check, module: ModuleType, seed: int, path: Path) -> dict:
    """{name, title, passed, message} of one check; an exception in the learner's code is a failed check."""
    _reset_output()
    CONTEXT.asking = ""
    try:
        check.fn(module, seed)
    except AssertionError as e:
        return {"name": check.name, "title": check.title, "passed": False, "message": _one_line(e)}
    except NotImplementedError as e:
        return {
            "name": check.name,
            "title": check.title,
            "passed": False,
            "message": _one_line(
                f"not written yet (NotImplementedError{': ' + str(e) if str(e) else ''}{_where(path, e.__traceback__)})"
            ),
        }
    except (Exception, SystemExit) as e:  # the learner's code raised (or exited): a wrong answer, with where
        call = f"{CONTEXT.asking} " if CONTEXT.asking else ""
        return {
            "name": check.name,
            "title": check.title,
            "passed": False,
            "message": _one_line(f"{call}raised {type(e).__name__}: {e}{_where(path, e.__traceback__)}"),
        }
    return {"name": check.name, "title": check.title, "passed": True, "message": ""}


def run_checks(problem: Problem, module: ModuleType, seed: int, path: Path) -> list[dict]:
    return [run_one(c, module, seed, path) for c in checks_for(problem)]


def grade_file(problem: Problem, path: Path, seed: int, index: int = 0, variant: str = "") -> dict:
    """{"file", "tests"} or {"file", "error": {"kind", "message"}} for one learner file; `variant`: a pooled
    problem's draw (nanolm.problems.checks.CONTEXT)."""
    CONTEXT.variant, CONTEXT.problem = variant, problem.name
    _reset_output()
    try:
        module = load_learner(path, problem, f"learner_solution_{index}")
    except LoadError as e:
        return {"file": str(path), "error": {"kind": e.kind, "message": str(e)}}
    return {"file": str(path), "tests": run_checks(problem, module, seed, path)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nanolm.problems.runner")
    parser.add_argument("problem")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--variant", default="", help="a pooled problem's variant (the learner's draw)")
    parser.add_argument(
        "--protect", action="append", default=[], type=Path, help="a folder the learner's code may not write in (repeated)"
    )
    parser.add_argument(
        "--writable",
        action="append",
        default=[],
        type=Path,
        help="a folder inside a protected one that the learner's code may write in (repeated)",
    )
    args = parser.parse_args(argv)
    problem = get_problem(args.problem)
    files = [Path(f).resolve() for f in args.files]
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the result's own channel (not inherited by children)
    os.dup2(2, 1)  # what the learner's code writes to stdout, even by file descriptor, goes to stderr
    prepare = getattr(importlib.import_module(f"{__package__}.checks.{problem.checks}"), "prepare", None)
    if prepare is not None:  # what the checks read before the guard is on (a reference solution)
        prepare(problem)
    checks_for(problem)
    package = Path(__file__).resolve().parents[1]
    guard = Guard([*args.protect, package], package / "problems" / "files", args.writable)
    sys.addaudithook(guard)
    OUTPUT[:] = [CappedStream(sys.stderr), CappedStream(sys.stderr)]
    sys.stdout, sys.stderr = OUTPUT
    results = []
    for i, path in enumerate(files):
        guard.enter(path.parent)
        sys.path.insert(0, str(path.parent))  # the learner's own helper modules, beside their file
        try:
            results.append(grade_file(problem, path, args.seed, i, args.variant))
        finally:
            sys.path.remove(str(path.parent))
    guard.active = False
    out.write("\n" + RESULT_MARK + json.dumps({"results": results}) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
