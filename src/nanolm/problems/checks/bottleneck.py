"""bottleneck: the learner profiles a training script with one planted bottleneck (drawn per learner from
the pool in files/bottleneck/pool/), names it in report.toml with its evidence, one change and the step
time before and after, and writes the fixed script. The grader times both scripts itself, step for step
(nanolm.problems.checks.step_timer in a subprocess with a time limit), so made-up numbers fail."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import tomllib

from ...profiling.report import Bottleneck
from ..registry import PROBLEMS
from . import CONTEXT, Check, Failed, check, require
from .step_timer import MARK

CHECKS: list[Check] = []
_check = check(CHECKS)

REPORT = "report.toml"
# the finding `nanolm profile` names first for each script of the pool (on a CPU and on a GPU)
PLANTED = {"slow_data": Bottleneck.INPUT, "tiny_ops": Bottleneck.LAUNCH_OVERHEAD, "get_batch": Bottleneck.INPUT}
VOCABULARY = tuple(b.value for b in Bottleneck)
STEPS = 30  # steps each script runs under the grader's timer
SKIP = 3  # first step intervals left out (warm-up)
MIN_SPEEDUP = 1.25  # "measurably faster": the fixed script's median step at most 1/1.25 of the original's
TOLERANCE = 1.5  # the report's before/after milliseconds within this factor of the grader's
TIME_LIMIT_S = 25.0  # per timed run (RUNS runs of the original and of the fix fit the 120 s grading limit)

_measured: dict[str, dict] = {}  # a script's code -> the timer's result: each script is timed once per process


def _variant() -> str:
    variant = CONTEXT.variant
    if variant not in PLANTED:
        raise Failed(
            f"no script of the pool was drawn for this check (variant {variant!r}); "
            "start the problem with `nanolm problems start bottleneck`"
        )
    return variant


def original_path(variant: str) -> Path:
    return PROBLEMS["bottleneck"].pool_path(variant)


def report(mod: ModuleType) -> dict:
    """The learner's report.toml, beside their fixed script."""
    path = Path(mod.__file__).parent / REPORT
    require(path.is_file(), f"{REPORT} is missing beside {Path(mod.__file__).name}: the report is part of the answer")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise Failed(f"{REPORT} is not valid TOML: {e}") from None


RUNS = 2  # each script is timed this many times and the faster run kept: a busy machine only slows a run


def measure(path: Path) -> dict:
    """{"ms": median ms per step, "steps": steps run, "losses": [...], "params": parameters the optimizer steps} of
    the script at `path`, run for STEPS steps, RUNS times: the run with the lower median is kept (another process
    on the machine can only slow a run down, so the faster one is the nearer to the script's own speed)."""
    path = Path(path).resolve()
    key = "\n".join(_code(path.read_text(encoding="utf-8")))  # comments aside: they change nothing to time
    if key not in _measured:
        _measured[key] = min((_run_timer(path) for _ in range(RUNS)), key=lambda r: r["ms"])
    return _measured[key]


def _run_timer(path: Path) -> dict:
    """One run of the step timer over the script (module docstring of step_timer)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "nanolm.problems.checks.step_timer", str(path), str(STEPS)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=TIME_LIMIT_S, env=env, cwd=path.parent, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise Failed(f"{path.name} ran past {TIME_LIMIT_S:g} s for {STEPS} steps") from None
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise Failed(f"{path.name} --steps {STEPS} ended without a result: {tail[-1] if tail else 'no message'}")
    data = json.loads(line[len(MARK) :])
    require(not data["error"], f"{path.name} --steps {STEPS}: {data['error']}")
    times = data["times"]
    gaps = [1000.0 * (b - a) for a, b in zip(times, times[1:])][SKIP:]
    require(len(gaps) >= 5, f"{path.name} --steps {STEPS} ran {len(times)} optimizer steps; too few to time")
    return {"ms": statistics.median(gaps), "steps": len(times), "losses": data["losses"], "params": data.get("params", 0)}


def _code(text: str) -> list[str]:
    """The script's lines but comments and blank lines."""
    return [ln.rstrip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _pair(mod: ModuleType) -> tuple[dict, dict]:
    variant = _variant()
    fixed = Path(mod.__file__)
    require(
        _code(fixed.read_text(encoding="utf-8")) != _code(original_path(variant).read_text(encoding="utf-8")),
        f"{fixed.name} is the script as given (comments and blank lines aside): no change to measure",
    )
    return measure(original_path(variant)), measure(fixed)


@_check
def check_bottleneck(mod: ModuleType, seed: int) -> None:
    """The bottleneck named is the one planted in your script (the profiler's finding names)."""
    named = str(report(mod).get("bottleneck", "")).strip()
    require(named in VOCABULARY, f"bottleneck = {named!r} is not one of the profiler's findings: {', '.join(VOCABULARY)}")
    require(
        named == PLANTED[_variant()].value,
        f"bottleneck = {named!r}: that is not what limits this script's steps (read the verdict and its shares)",
    )


_FIGURE = re.compile(r"\d+(?:\.\d+)?\s*(?:ms|%)")


@_check
def check_evidence(mod: ModuleType, seed: int) -> None:
    """The evidence names a measured figure (ms per step or a share in %), and one change is described."""
    r = report(mod)
    evidence, change = str(r.get("evidence", "")).strip(), str(r.get("change", "")).strip()
    require(
        bool(_FIGURE.search(evidence)),
        f"evidence = {evidence[:80]!r} names no measured figure "
        "(milliseconds per step or a share of the step, e.g. '41 ms of 45 ms (91%)')",
    )
    require(len(change.split()) >= 3, f"change = {change[:80]!r}: describe the one change you made, in a sentence")


@_check
def check_faster(mod: ModuleType, seed: int) -> None:
    """Your fixed script is measurably faster, step for step, than the original (the grader times both)."""
    before, after = _pair(mod)
    require(
        after["ms"] * MIN_SPEEDUP <= before["ms"],
        f"the grader measured {before['ms']:.2f} ms per step before and {after['ms']:.2f} ms after "
        f"({before['ms'] / after['ms']:.2f}×): less than {MIN_SPEEDUP}× faster",
    )


@_check
def check_still_trains(mod: ModuleType, seed: int) -> None:
    """Your fixed script still trains the same model: every step runs, the loss is finite and goes down."""
    before, after = _pair(mod)
    require(
        after["params"] == before["params"],
        f"the fixed script's optimizer steps {after['params']} parameters where "
        f"the original's steps {before['params']}: it trains another model",
    )
    losses = after["losses"]
    require(after["steps"] == STEPS, f"--steps {STEPS} ran {after['steps']} optimizer steps")
    require(len(losses) >= STEPS, f"--steps {STEPS} called backward on a scalar loss {len(losses)} times")
    require(all(math.isfinite(x) for x in losses), "the loss is not finite in some step")
    third = len(losses) // 3
    first, last = statistics.fmean(losses[:third]), statistics.fmean(losses[-third:])
    require(
        last < first, f"the loss does not go down: {first:.4g} over the first {third} steps, {last:.4g} over the last {third}"
    )


def _ms(r: dict, key: str) -> float:
    value = r.get(key)
    require(
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0,
        f"{key} = {value!r}: write the milliseconds per step you measured, a positive number",
    )
    return float(value)


@_check
def check_measured(mod: ModuleType, seed: int) -> None:
    """Your before_ms and after_ms are what the grader measures too (within a factor 1.5)."""
    r = report(mod)
    claimed = _ms(r, "before_ms"), _ms(r, "after_ms")
    before, after = _pair(mod)
    for key, mine, theirs in (("before_ms", claimed[0], before["ms"]), ("after_ms", claimed[1], after["ms"])):
        require(
            1 / TOLERANCE <= mine / theirs <= TOLERANCE,
            f"{key} = {mine:g}, but the grader measured {theirs:.2f} ms per step ({mine / theirs:.2f}×)",
        )
