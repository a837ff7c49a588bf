# mutant: counts in floating point, rounded: wrong beyond 2^53
# expect: exact integers
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""stars_and_bars: integer solutions of x_1 + ... + x_k = n with 0 <= x_i <= upper[i]."""

from itertools import combinations
from math import comb


def count_solutions(n: int, upper: list[int]) -> int:
    """Inclusion-exclusion over the set S of variables pushed past their bound: force x_i >= upper[i] + 1
    for i in S (subtract those amounts from n), count the rest by stars and bars, alternate signs.
    Subsets with the same total excess are grouped, so the work is over distinct sums, not 2^k subsets."""
    k = len(upper)
    if n < 0:
        return 0
    if k == 0:
        return 1 if n == 0 else 0
    excess: dict[int, int] = {0: 1}  # total excess -> signed number of subsets with it
    for u in upper:
        nxt = dict(excess)
        for e, c in excess.items():
            if e + u + 1 <= n:
                nxt[e + u + 1] = nxt.get(e + u + 1, 0) - c
        excess = nxt
    return round(sum(c * float(comb(n - e + k - 1, k - 1)) for e, c in excess.items()))


def count_solutions_by_subsets(n: int, upper: list[int]) -> int:
    """The same, written as the textbook sum over every subset (2^k terms)."""
    k = len(upper)
    if n < 0 or k == 0:
        return int(n == 0 and k == 0)
    total = 0
    for size in range(k + 1):
        for subset in combinations(range(k), size):
            rest = n - sum(upper[i] + 1 for i in subset)
            if rest >= 0:
                total += (-1) ** size * comb(rest + k - 1, k - 1)
    return total
