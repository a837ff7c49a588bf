"""seed_noise: "result" or "noise" on groups of seeds drawn with a planted truth, against the rules of
nanolm.repro.stats.compare_groups (what `nanolm compare` runs). Draws where a rule sits on its edge,
so that two honest bootstraps could disagree, are drawn again."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from types import ModuleType

import numpy as np

from ...repro.stats import MIN_SEEDS, compare_groups
from . import Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)

ALPHA = 0.05
Groups = tuple[list[float], list[float]]


def rules(a: list[float], b: list[float]) -> tuple[str, bool]:
    """(the verdict by compare_groups' rules, "result" or "noise"; whether it is clear: no rule near its edge
    could change it)."""
    if len(a) < MIN_SEEDS or len(b) < MIN_SEEDS:
        return "noise", True
    c = compare_groups(a, b, n_boot=10000, seed=0, alpha=ALPHA)
    if c.welch_p is None:
        return "noise", True
    spread = max(c.spread_a, c.spread_b)
    width = max(c.ci_high - c.ci_low, 1e-300)
    checks = [  # (passes, near its edge)
        (c.welch_p < ALPHA, ALPHA / 1.1 < c.welch_p < ALPHA * 1.1),  # exact: no resampling
        (c.ci_excludes_zero, min(abs(c.ci_low), abs(c.ci_high)) < 0.1 * width),
        (c.seed_spread_rule, abs(abs(c.diff) - spread) < 0.05 * max(spread, 1e-300)),
    ]
    verdict = "result" if all(ok for ok, _ in checks) else "noise"
    flips = [(ok, not ok) if near else (ok,) for ok, near in checks]
    clear = all(("result" if all(combo) else "noise") == verdict for combo in itertools.product(*flips))
    return verdict, clear


def _scale(rng: random.Random) -> tuple[float, float]:
    """A metric's level and its seed-to-seed standard deviation: losses near 3, accuracies near 80, ..."""
    loc = rng.choice([rng.uniform(1.5, 5.0), rng.uniform(20.0, 95.0), rng.uniform(0.01, 0.3)])
    return loc, loc * rng.uniform(0.002, 0.02)


def _draw(nrng: np.random.Generator, n: int, loc: float, sigma: float) -> list[float]:
    return [round(float(x), 12) for x in nrng.normal(loc, sigma, n)]


def _fmt(xs: list[float], limit: int = 6) -> str:
    shown = ", ".join(f"{x:.6g}" for x in xs[:limit])
    return f"[{shown}]" if len(xs) <= limit else f"[{shown}, … {len(xs)} seeds]"


def _ask(mod: ModuleType, a: list[float], b: list[float]) -> str:
    got = mod.decide(list(a), list(b))
    require(got in ("result", "noise"), f'decide({_fmt(a)}, {_fmt(b)}) returned {got!r}; return "result" or "noise"')
    return got


def _explain(a: list[float], b: list[float]) -> str:
    if len(a) < MIN_SEEDS or len(b) < MIN_SEEDS:
        return f"{len(a)} baseline and {len(b)} candidate seeds"
    c = compare_groups(a, b, n_boot=10000, seed=0, alpha=ALPHA)
    p = "undefined" if c.welch_p is None else f"{c.welch_p:.3g}"
    return (
        f"Welch p={p}, 95% bootstrap CI of the difference [{c.ci_low:.4g}, {c.ci_high:.4g}], |difference| "
        f"{abs(c.diff):.4g} vs spreads {c.spread_a:.4g} (baseline) and {c.spread_b:.4g} (candidate)"
    )


def _grade(mod: ModuleType, cases: list[tuple[Groups, str]], what: str) -> None:
    for (a, b), want in cases:
        got = _ask(mod, a, b)
        require(
            got == want,
            f"{what}: decide returned {got!r}, the truth is {want!r} ({_explain(a, b)}); baseline={_fmt(a)}, candidate={_fmt(b)}",
        )


def _planted(
    seed: int,
    n_cases: int,
    draw: Callable[[random.Random, np.random.Generator], Groups],
    want: str | None = None,
    keep: Callable[[Groups], bool] = lambda g: True,
) -> list[tuple[Groups, str]]:
    """n_cases draws whose verdict by the rules is clear (and equal to `want` when given)."""
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    cases: list[tuple[Groups, str]] = []
    for _ in range(200 * n_cases):
        groups = draw(rng, nrng)
        verdict, clear = rules(*groups)
        if clear and (want is None or verdict == want) and keep(groups):
            cases.append((groups, verdict))
            if len(cases) == n_cases:
                return cases
    raise RuntimeError(f"could not draw {n_cases} clear cases (seed {seed})")  # a bug in the check, not the answer


@_check
def check_reference_example(mod: ModuleType, seed: int) -> None:
    """The reference document's numbers: within noise, and one run is too few."""
    rng = random.Random(seed)
    k, shift = rng.choice([1.0, 10.0, 0.1]), rng.uniform(-1, 1)
    base = [round(k * (x + shift), 10) for x in (3.21, 3.25, 3.23)]
    cases = [
        ((base, [round(k * (x + shift), 10) for x in (3.22, 3.24, 3.20)]), "noise"),
        ((base, [round(k * (3.22 + shift), 10)]), "noise"),
        ((base, [round(k * (x + shift), 10) for x in (3.05, 3.07, 3.06)]), "result"),
    ]
    _grade(mod, cases, "the reference document's example")


@_check
def check_edge_cases(mod: ModuleType, seed: int) -> None:
    """Fewer than 3 seeds a side is never a result, 3 a side can be; groups with no variation are not one."""
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    cases = []
    for n_a, n_b in ((1, 5), (2, 4), (5, 2), (2, 2), (rng.randint(3, 6), 1)):
        loc, sigma = _scale(rng)
        effect = rng.choice([-1, 1]) * rng.uniform(20, 40) * sigma
        cases.append(((_draw(nrng, n_a, loc, sigma), _draw(nrng, n_b, loc + effect, sigma)), "noise"))
    loc, sigma = _scale(rng)
    cases.append(((_draw(nrng, 3, loc, sigma), _draw(nrng, 3, loc + rng.choice([-1, 1]) * 30 * sigma, sigma)), "result"))
    x, y = round(rng.uniform(1, 5), 6), round(rng.uniform(6, 9), 6)
    cases.append((([x] * 3, [y] * rng.randint(3, 5)), "noise"))  # no variation: Welch's test is undefined
    for (a, b), want in cases:
        if rules(a, b)[0] != want:  # the planted truth must be compare_groups' own verdict
            raise RuntimeError(f"edge case {a} vs {b}: compare_groups disagrees with the planted {want!r}")
    _grade(mod, cases, "edge case")


def _noise(rng: random.Random, nrng: np.random.Generator) -> Groups:
    loc, sigma = _scale(rng)
    return _draw(nrng, rng.randint(3, 10), loc, sigma), _draw(nrng, rng.randint(3, 10), loc, sigma)


@_check
def check_pure_noise(mod: ModuleType, seed: int) -> None:
    """Both groups from one distribution: noise."""
    _grade(mod, _planted(seed + 1, 12, _noise, "noise"), "pure seed noise (both groups drawn from one distribution)")


def _effect(rng: random.Random, nrng: np.random.Generator) -> Groups:
    loc, sigma = _scale(rng)
    effect = rng.choice([-1, 1]) * rng.uniform(8, 14) * sigma
    return _draw(nrng, rng.randint(3, 8), loc, sigma), _draw(nrng, rng.randint(3, 8), loc + effect, sigma)


@_check
def check_real_effect(mod: ModuleType, seed: int) -> None:
    """A real effect of 8-14 seed standard deviations, better or worse: a result."""
    _grade(mod, _planted(seed + 2, 12, _effect, "result"), "a real effect of 8-14 seed standard deviations")


def _swallowed(rng: random.Random, nrng: np.random.Generator) -> Groups:
    loc, sigma = _scale(rng)
    effect = rng.choice([-1, 1]) * rng.uniform(1.0, 1.6) * sigma
    return _draw(nrng, rng.randint(20, 40), loc, sigma), _draw(nrng, rng.randint(20, 40), loc + effect, sigma)


def _significant(groups: Groups) -> bool:
    c = compare_groups(*groups, n_boot=2000, seed=0)
    return c.welch_p is not None and c.welch_p < ALPHA / 5 and c.ci_excludes_zero


@_check
def check_spread_rule(mod: ModuleType, seed: int) -> None:
    """Many seeds, a small real effect: the t-test finds it, the spread across seeds swallows it: noise."""
    _grade(
        mod,
        _planted(seed + 3, 6, _swallowed, "noise", _significant),
        "a difference the t-test and the bootstrap find but the seed spread swallows",
    )


def _one_noisy(rng: random.Random, nrng: np.random.Generator) -> Groups:
    loc, sigma = _scale(rng)
    ratio = rng.uniform(6, 10)
    effect = rng.choice([-1, 1]) * rng.uniform(10, 14) * sigma
    tight, noisy = _draw(nrng, rng.randint(5, 8), loc, sigma), _draw(nrng, rng.randint(9, 14), loc + effect, sigma * ratio)
    return (tight, noisy) if rng.random() < 0.5 else (noisy, tight)


def _beyond_one_spread(groups: Groups) -> bool:
    a, b = (np.asarray(g) for g in groups)
    return _significant(groups) and abs(b.mean() - a.mean()) > min(np.ptp(a), np.ptp(b))


@_check
def check_either_spread(mod: ModuleType, seed: int) -> None:
    """One group far noisier: a difference beyond the tight group's spread but within the noisy one's is noise."""
    _grade(
        mod,
        _planted(seed + 4, 8, _one_noisy, "noise", _beyond_one_spread),
        "a difference beyond one group's spread but within the other's",
    )


def _skewed(rng: random.Random, nrng: np.random.Generator) -> Groups:
    """Three seeds a side, each group with one outlying seed, the means just beyond the spread apart."""
    loc, sigma = _scale(rng)

    def group(center: float, n: int) -> list[float]:
        xs = nrng.normal(0, 0.05 * sigma, n)
        xs[rng.randrange(n)] += rng.choice([-1, 1]) * sigma * rng.uniform(2, 4)
        return [round(float(x), 12) for x in center + xs - xs.mean()]

    a, b = group(loc, 3), group(loc, 3)
    spread = max(np.ptp(a), np.ptp(b))
    shift = float(rng.choice([-1, 1]) * spread * rng.uniform(1.06, 1.2))
    return a, [x + shift for x in b]


def _beyond_spread_not_significant(groups: Groups) -> bool:
    c = compare_groups(*groups, n_boot=2000, seed=0)
    return c.seed_spread_rule and c.welch_p is not None and c.welch_p > 1.2 * ALPHA


@_check
def check_welch_rule(mod: ModuleType, seed: int) -> None:
    """A few seeds with an outlier: beyond the spread, but Welch's test finds nothing: noise."""
    _grade(
        mod,
        _planted(seed + 6, 6, _skewed, "noise", _beyond_spread_not_significant),
        "a difference beyond the seed spread that Welch's test does not find",
    )


def _mixed(rng: random.Random, nrng: np.random.Generator) -> Groups:
    loc, sigma = _scale(rng)
    effect = rng.choice([-1, 1]) * rng.choice([0.0, rng.uniform(0, 4), rng.uniform(4, 12)]) * sigma
    return (
        _draw(nrng, rng.randint(3, 12), loc, sigma),
        _draw(nrng, rng.randint(3, 12), loc + effect, sigma * rng.uniform(0.5, 2.5)),
    )


@_check
def check_agrees_with_compare(mod: ModuleType, seed: int) -> None:
    """Random groups, effects from none to large: the same verdict as `nanolm compare`."""
    _grade(mod, _planted(seed + 5, 24, _mixed), "a random draw")
