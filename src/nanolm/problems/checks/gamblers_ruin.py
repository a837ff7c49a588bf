"""gamblers_ruin: the closed form on random (p, start, target), the simulation and its interval."""

from __future__ import annotations

import math
import random
from types import ModuleType

from . import Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)


def ruin(p: float, start: int, target: int) -> float:
    """P(reach 0 before target | start), the closed form of the recurrence, computed without overflow."""
    if start <= 0:
        return 1.0
    if start >= target:
        return 0.0
    if p == 0.5:
        return 1.0 - start / target
    r = (1.0 - p) / p
    if r < 1.0:
        return (r**start - r**target) / (1.0 - r**target)
    s = 1.0 / r
    return (1.0 - s ** (target - start)) / (1.0 - s**target)


def _number(got: object, what: str) -> float:
    require(isinstance(got, (int, float)) and not isinstance(got, bool), f"{what}: you returned {got!r}, not a number")
    require(math.isfinite(float(got)), f"{what}: you returned {got!r}")
    return float(got)


def _compare(mod: ModuleType, p: float, start: int, target: int, tol: float = 1e-9) -> None:
    what = f"ruin_probability(p={p:.6g}, start={start}, target={target})"
    try:
        value = mod.ruin_probability(p, start, target)
    except ArithmeticError as e:  # overflow, division by zero: name the case that caused it
        raise AssertionError(f"{what} raised {type(e).__name__}: {e}") from None
    got, want = _number(value, what), ruin(p, start, target)
    if abs(got - want) > tol:
        flipped = ruin(1 - p, start, target)
        note = " (the probability of ruin of a player who wins with probability 1 - p)" if abs(got - flipped) <= tol else ""
        if abs(got - (1 - want)) <= tol:
            note = " (the probability of reaching the target instead)"
        raise AssertionError(f"{what}: you returned {got:.10g}, expected {want:.10g}{note}")


@_check
def check_fair_game(mod: ModuleType, seed: int) -> None:
    """p = 1/2: ruin with probability 1 - start/target."""
    rng = random.Random(seed)
    for _ in range(10):
        target = rng.randint(2, 100)
        _compare(mod, 0.5, rng.randint(1, target - 1), target)


@_check
def check_closed_form(mod: ModuleType, seed: int) -> None:
    """Random p, start and target, including the ends (start 0 and start = target)."""
    rng = random.Random(seed)
    for _ in range(30):
        target = rng.randint(1, 60)
        _compare(mod, rng.choice([rng.uniform(0.05, 0.95), rng.uniform(0.45, 0.55)]), rng.randint(0, target), target)


@_check
def check_long_games(mod: ModuleType, seed: int) -> None:
    """Targets in the thousands: no overflow, no NaN."""
    rng = random.Random(seed)
    for _ in range(10):
        target = rng.randint(500, 3000)
        _compare(mod, rng.uniform(0.3, 0.7), rng.randint(1, target - 1), target)


def _sim_cases(seed: int) -> list[tuple[float, int, int]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(8):
        target = rng.randint(3, 12)
        cases.append((rng.uniform(0.35, 0.65), rng.randint(1, target - 1), target))
    return cases


def _simulate(mod: ModuleType, p: float, start: int, target: int, n: int, seed: int) -> tuple[float, float, float]:
    out = mod.simulate_ruin(p, start, target, n, seed)
    what = f"simulate_ruin({p:.3f}, {start}, {target}, {n}, seed={seed})"
    require(isinstance(out, (tuple, list)) and len(out) == 3, f"{what} returned {out!r}; return (estimate, low, high)")
    est, low, high = (_number(x, what) for x in out)
    return est, low, high


N_WALKS = 4000


@_check
def check_simulation(mod: ModuleType, seed: int) -> None:
    """The simulated estimate agrees with the closed form within its sampling error."""
    for i, (p, start, target) in enumerate(_sim_cases(seed)):
        est, _, _ = _simulate(mod, p, start, target, N_WALKS, seed + i)
        want = ruin(p, start, target)
        se = math.sqrt(want * (1 - want) / N_WALKS)
        require(
            abs(est - want) <= 4.5 * se + 1e-9,
            f"simulating {N_WALKS} walks (p={p:.3f}, start={start}, target={target}) estimated {est:.4f}; the closed "
            f"form gives {want:.4f}, {abs(est - want) / se:.1f} standard errors away",
        )


@_check
def check_interval(mod: ModuleType, seed: int) -> None:
    """The 95% interval holds the estimate, has the binomial width, and covers the truth."""
    covered = 0
    cases = _sim_cases(seed + 1)
    for i, (p, start, target) in enumerate(cases):
        est, low, high = _simulate(mod, p, start, target, N_WALKS, seed + 100 + i)
        require(low <= est <= high, f"the interval [{low:.4f}, {high:.4f}] does not hold the estimate {est:.4f}")
        width = 2 * 1.96 * math.sqrt(max(est * (1 - est), 1e-12) / N_WALKS)
        require(
            0.7 * width <= high - low <= 1.4 * width,
            f"with {N_WALKS} walks and estimate {est:.4f} the interval is {high - low:.4f} wide; a 95% interval for "
            f"a proportion is about {width:.4f}",
        )
        covered += low <= ruin(p, start, target) <= high
    require(covered >= len(cases) // 2, f"the interval covered the closed-form value in only {covered} of {len(cases)} cases")


@_check
def check_seeded(mod: ModuleType, seed: int) -> None:
    """The same seed gives the same estimate; another seed, another."""
    p, start, target = _sim_cases(seed)[0]
    a = _simulate(mod, p, start, target, 2000, seed)
    for _ in range(3):  # three times: an unseeded simulation repeats an estimate by chance about once in 80 calls
        b = _simulate(mod, p, start, target, 2000, seed)
        require(a == b, f"simulate_ruin with the same seed gave {a[0]:.4f} and then {b[0]:.4f}")
    others = {_simulate(mod, p, start, target, 2000, seed + s)[0] for s in range(1, 5)}
    require(len(others | {a[0]}) > 1, "five seeds gave the same estimate: the seed does not drive the simulation")
