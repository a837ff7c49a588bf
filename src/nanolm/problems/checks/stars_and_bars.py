"""stars_and_bars: bounded integer solutions of x_1 + … + x_k = n, against enumeration and an exact DP."""

from __future__ import annotations

import itertools
import math
import random
from types import ModuleType

from . import Check, asking, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)


def brute_force(n: int, upper: list[int]) -> int:
    return sum(1 for xs in itertools.product(*(range(u + 1) for u in upper)) if sum(xs) == n)


def by_dp(n: int, upper: list[int]) -> int:
    """Exact count by dynamic programming over the variables (Python ints)."""
    if n < 0:
        return 0
    ways = [1] + [0] * n
    for u in upper:
        prefix = list(itertools.accumulate(ways, initial=0))
        ways = [prefix[s + 1] - prefix[max(0, s - u)] for s in range(n + 1)]
    return ways[n]


def _diagnosis(n: int, upper: list[int], got: int, want: int) -> str:
    """What a wrong count is, when it is a classic slip."""
    k = len(upper)
    if want and got != want and abs(got - want) < 1e-12 * abs(want):
        return " (off by a little: a float's 53 bits rounded the count; exact integers are needed)"
    if k and n >= 0 and got == math.comb(n + k - 1, k - 1):
        return " (the count without upper bounds: plain stars and bars)"
    if k and n >= 0 and got == math.comb(n + k - 1, k):
        return " (that is C(n + k - 1, k): n stars and k - 1 bars give C(n + k - 1, k - 1))"
    if k and got == by_dp(n, [u - 1 for u in upper]):
        return " (the count with x_i < upper[i]: the bounds taken as exclusive)"
    return ""


def _compare(mod: ModuleType, n: int, upper: list[int], want: int) -> None:
    what = f"count_solutions({n}, {upper})"
    asking(what)
    got = mod.count_solutions(n, list(upper))
    require(
        isinstance(got, int) and not isinstance(got, bool),
        f"{what} returned {got!r} ({type(got).__name__}); counts this large need exact integers",
    )
    require(got == want, f"{what}: you returned {got}, there are {want}{_diagnosis(n, upper, got, want)}")


@_check
def check_small_cases(mod: ModuleType, seed: int) -> None:
    """Random small cases, against enumerating every tuple."""
    rng = random.Random(seed)
    for _ in range(40):
        upper = [rng.randint(0, 6) for _ in range(rng.randint(1, 4))]
        n = rng.randint(0, sum(upper) + 2)
        _compare(mod, n, upper, brute_force(n, upper))


@_check
def check_edge_cases(mod: ModuleType, seed: int) -> None:
    """n < 0, n above the sum of the bounds, zero bounds, one variable, no variables."""
    rng = random.Random(seed)
    upper = [rng.randint(0, 5) for _ in range(rng.randint(1, 4))]
    for n, up in (
        (-rng.randint(1, 5), upper),
        (sum(upper) + rng.randint(1, 5), upper),
        (0, [0, 0, 0]),
        (1, [0, 0]),
        (rng.randint(0, 9), [9]),
        (rng.randint(10, 20), [9]),
        (0, []),
        (3, []),
    ):
        _compare(mod, n, up, by_dp(n, up))


@_check
def check_exact_large(mod: ModuleType, seed: int) -> None:
    """Large cases (counts beyond a float's 53 bits), exactly."""
    rng = random.Random(seed)
    for _ in range(10):
        upper = [rng.randint(5, 200) for _ in range(rng.randint(8, 12))]
        n = rng.randint(sum(upper) // 3, 2 * sum(upper) // 3)
        _compare(mod, n, upper, by_dp(n, upper))


@_check
def check_unbounded(mod: ModuleType, seed: int) -> None:
    """Bounds that never bind give plain stars and bars, C(n + k - 1, k - 1)."""
    rng = random.Random(seed)
    for _ in range(10):
        k, n = rng.randint(1, 10), rng.randint(0, 500)
        _compare(mod, n, [n + rng.randint(0, 3)] * k, math.comb(n + k - 1, k - 1))
