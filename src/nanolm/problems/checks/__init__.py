"""The tests of each problem, run on the learner's module in the grading process.

A check is a function ``fn(module, seed)`` that returns when the learner's code behaves and raises
``Failed`` (an AssertionError) with a one-line message naming the symptom otherwise. Each draws its
shapes, models and cases from the seed, so an answer that special-cases the visible examples fails.
These modules import torch and numpy; the CLI never imports them (only the grading process does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

CheckFn = Callable[[ModuleType, int], None]


@dataclass
class Context:
    """What the grading passes to the checks besides the learner's module: a pooled problem's variant
    (the learner's draw, from the state file) and the problem's name (a checks module shared by several
    problems), set by nanolm.problems.runner before the checks run."""

    variant: str = ""
    problem: str = ""
    asking: str = ""  # the call a check is making of the learner's code, named when that call raises


CONTEXT = Context()


class Failed(AssertionError):
    """A wrong answer: the message says what was observed, never how to fix it."""


@dataclass(frozen=True)
class Check:
    name: str
    fn: CheckFn

    @property
    def title(self) -> str:
        """The first line of the check's docstring: what it verifies, for the report."""
        doc = (self.fn.__doc__ or self.name).strip()
        return doc.splitlines()[0]


def check(registry: list[Check]) -> Callable[[CheckFn], CheckFn]:
    """Decorator adding a check function to `registry`, in the order of definition."""

    def add(fn: CheckFn) -> CheckFn:
        registry.append(Check(fn.__name__.removeprefix("check_"), fn))
        return fn

    return add


def asking(what: str) -> None:
    """Name the call the check makes next (e.g. "count_solutions(-3, [2, 5])"): if the learner's code raises
    there, the failed check's message names it. Reset before each check."""
    CONTEXT.asking = what


def require(condition: bool, message: str) -> None:
    """Raise Failed(message) unless condition holds."""
    if not condition:
        raise Failed(message)
