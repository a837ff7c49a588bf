"""seed_noise: is the difference between two groups of seeds a result, or seed noise?

Read instructions.md, then fill in the function. Check with: nanolm problems check seed_noise
"""


def decide(baseline: list[float], candidate: list[float]) -> str:
    """ "result" when the groups differ beyond seed noise (Welch p < 0.05, the 95% bootstrap interval of the
    difference of means excludes 0, and |difference| > the spread across seeds of either group); else "noise"."""
    raise NotImplementedError("decide")
