"""stars_and_bars: integer solutions of x_1 + ... + x_k = n with 0 <= x_i <= upper[i].

Read instructions.md, then fill in the function. Check with: nanolm problems check stars_and_bars
"""


def count_solutions(n: int, upper: list[int]) -> int:
    """The number of integer tuples (x_1, ..., x_k), 0 <= x_i <= upper[i], that sum to n (k = len(upper))."""
    raise NotImplementedError("count_solutions")
