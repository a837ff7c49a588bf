"""gamblers_ruin: the probability of ruin, from the recurrence's closed form and by simulation.

Read instructions.md, then fill in the functions. Check with: nanolm problems check gamblers_ruin
"""


def ruin_probability(p: float, start: int, target: int) -> float:
    """P(reach 0 before target), starting at `start`, winning each unit bet with probability p."""
    raise NotImplementedError("ruin_probability")


def simulate_ruin(p: float, start: int, target: int, n_walks: int, seed: int) -> tuple[float, float, float]:
    """(estimate, low, high): the share of n_walks simulated walks that are ruined, and its 95% interval."""
    raise NotImplementedError("simulate_ruin")
