"""The analysis half of ``nanolm sweep``, pure (numbers in, dataclass out; no training, no files): the
result dataclasses, the noise-aware Gaussian process and what is read off its posterior.

``analyse_sweep`` fits scikit-learn's ``GaussianProcessRegressor`` with ``ConstantKernel * Matern(5/2) +
WhiteKernel`` to every per-seed point. The WhiteKernel's level starts at the pooled within-group variance of
the seeds (the seed noise, measured) and may move a factor NOISE_FREEDOM either way; the fitted level is
reported beside the measured one. From the posterior of the latent function (the mean function, seed noise
excluded) it gives the mean ± 2σ over a fine grid, the optimum with credible intervals for its location and
value (from functions sampled from the posterior), whether the best grid value is better than its neighbours
beyond noise (the ``nanolm compare`` rules on the measured seed groups), and the next values to run by
expected improvement.

x is log10(value) for a --log parameter, and each parameter is scaled to [0, 1] over the values run; the
metric is standardised (mean 0, std 1) before the fit and every number is reported back in its units.
``nanolm.research.sweep`` trains the grid and writes the result; it re-exports everything public here."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError
from ..repro.stats import Verdict, compare_groups

CREDIBLE = 0.95  # level of every credible interval
NOISE_FREEDOM = 10.0  # the fitted noise variance stays within measured / 10 ... measured * 10 (std: a factor ~3.2)
FINE_1D = 200  # fine-grid points for one parameter
FINE_2D = 40  # per axis for two (40 x 40: sampling the posterior takes an SVD of a 1600 x 1600 covariance)
LENGTH_BOUNDS = (0.1, 10.0)  # the Matern length scale, in units of the range swept
N_SAMPLES = 2000  # posterior functions drawn for the optimum's intervals


# one spelling of a value for run names (the driver's groups), tables and the notes below
def format_value(v: float) -> str:
    """A value as it appears in run names and tables: whole numbers as such, others to 4 significant digits."""
    if isinstance(v, int) or (float(v).is_integer() and abs(v) < 1e6):
        return str(int(v))
    return f"{v:.4g}".replace("+", "")


# ---- the analysis: pure, no training ----------------------------------------------------------------


@dataclass
class SweepPoint:
    """One grid value's seed group and what its seeds measured."""

    at: tuple[float, ...]  # the parameter values
    group: str
    seeds: list[int]  # seeds that finished, in order
    results: list[float]  # their final metric, one per seed
    diverged: list[int] = field(default_factory=list)  # seeds whose run diverged (no value)
    runs: list[str] = field(default_factory=list)  # the finished runs' folders

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.results)) if self.results else None

    @property
    def std(self) -> float | None:
        """Sample std across seeds (ddof=1); None with fewer than two."""
        return float(np.std(self.results, ddof=1)) if len(self.results) > 1 else None


@dataclass
class NoiseEstimate:
    """The seed noise: measured from the groups, and the level the GP settled on (both as stds, metric units)."""

    measured: bool  # False with one seed per value (or seeds that all agree): the GP then guessed it
    measured_std: float | None  # sqrt of the pooled within-group variance Σ_g Σ_i (y_gi - ȳ_g)² / Σ_g (n_g - 1)
    dof: int  # Σ_g (n_g - 1): degrees of freedom of the measured variance
    fitted_std: float  # sqrt of the fitted WhiteKernel level
    bounds_std: tuple[float, float]  # the range the fit was allowed
    at_bound: bool  # the fitted level sits at one end of that range
    note: str  # one line for the user
    noisier: list[NoisierGroup] = field(default_factory=list)  # groups whose seeds spread more than the rest's


@dataclass
class NoisierGroup:
    """A grid value whose seeds spread more than the other values' beyond chance: it enters the fit with its
    own measured variance (the GP's per-point `alpha`), and stays out of the shared noise level."""

    at: tuple[float, ...]
    group: str
    std: float  # its seeds' sample std
    p: float  # one-sided F test of its variance against the pooled variance of the other groups


@dataclass
class Optimum:
    """The best point of the posterior mean on the fine grid, and 95% credible intervals from sampled functions."""

    at: dict[str, float]
    at_interval: dict[str, tuple[float, float]]  # per parameter: quantiles of the sampled functions' best point
    value: float  # the posterior mean of the mean function there (metric units)
    value_interval: tuple[float, float]  # its credible interval there: quantiles of the sampled functions at `at`
    best_interval: tuple[float, float]  # the best value anywhere in the range: quantiles of each sampled function's best
    at_edge: bool  # the optimum lies on the edge of the range swept: the range may not contain it


@dataclass
class NeighbourCheck:
    """The best grid value's seeds against one neighbour's (A = neighbour, B = best), by `compare_groups`."""

    neighbour: dict[str, float]
    verdict: str  # a repro.stats.Verdict value
    reason: str
    diff: float  # mean(best) - mean(neighbour)


@dataclass
class Distinction:
    best: dict[str, float]  # the run grid value with the best posterior mean
    distinguishable: bool | None  # better beyond noise than every neighbour; None: too few seeds to tell
    checks: list[NeighbourCheck]
    summary: str


@dataclass
class Suggestion:
    at: dict[str, float]
    expected_improvement: float  # in metric units, of the mean function (seed noise excluded)
    mean: float
    std: float


@dataclass
class SweepAnalysis:
    params: list[str]
    log: list[bool]
    metric: str
    maximize: bool
    points: list[SweepPoint]
    noise: NoiseEstimate
    kernel: str  # the fitted kernel, in standardised units
    grid: list[list[float]]  # the fine grid: (n, d) parameter values
    grid_shape: list[int]  # (n,) or (n1, n2): the grid's layout, first parameter slowest
    mean: list[float]  # posterior mean of the mean function on the grid (metric units)
    std: list[float]  # its posterior std (seed noise excluded)
    at_points: list[tuple[float, float] | None]  # per point of `points`: (posterior mean, std); None if not fitted
    optimum: Optimum
    distinction: Distinction | None  # None when no run grid value has a measured neighbour
    next: list[Suggestion]
    notes: list[str] = field(default_factory=list)
    credible: float = CREDIBLE


def pooled_noise(points: Sequence[SweepPoint]) -> tuple[float | None, int]:
    """(pooled within-group variance, its degrees of freedom) over the groups with two or more seeds;
    (None, 0) when no group has two."""
    ss = sum(float(((np.asarray(p.results) - np.mean(p.results)) ** 2).sum()) for p in points if len(p.results) > 1)
    dof = sum(len(p.results) - 1 for p in points if len(p.results) > 1)
    return (ss / dof, dof) if dof else (None, 0)


NOISIER_ALPHA = 0.01  # family-wise level of the F tests that set a group's noise apart


def noisier_groups(points: Sequence[SweepPoint], alpha: float = NOISIER_ALPHA) -> list[NoisierGroup]:
    """The groups whose seed variance exceeds the pooled variance of the others beyond chance, largest
    first: a one-sided F test (Bonferroni over the groups with two or more seeds), repeated on the rest
    until none stands out. At most half of those groups are set apart: the rest is the shared noise."""
    from scipy.stats import f as f_dist

    left = [p for p in points if len(p.results) > 1]
    tests = len(left)
    out: list[NoisierGroup] = []
    while len(out) < tests // 2:
        top = max(left, key=lambda p: float(np.var(p.results, ddof=1)))
        rest = [p for p in left if p is not top]
        var_rest, dof_rest = pooled_noise(rest)
        if var_rest is None or dof_rest < 2:
            break
        var_top = float(np.var(top.results, ddof=1))
        p = float(f_dist.sf(var_top / var_rest, len(top.results) - 1, dof_rest)) if var_rest > 0 else 0.0
        if p >= alpha / tests:
            break
        out.append(NoisierGroup(top.at, top.group, math.sqrt(var_top), p))
        left = rest
    return out


class _Scale:
    """Parameter values <-> the GP's inputs: log10 where asked, then [0, 1] over the values run."""

    def __init__(self, points: np.ndarray, log: Sequence[bool]) -> None:
        self.logs = np.asarray(log, dtype=bool)
        x = self.to_x(points)
        self.lo, self.hi = x.min(0), x.max(0)
        self.span = np.where(self.hi > self.lo, self.hi - self.lo, 1.0)

    def to_x(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        return np.where(self.logs, np.log10(np.where(self.logs, values, 1.0)), values)

    def from_x(self, x: np.ndarray) -> np.ndarray:
        return np.where(self.logs, 10.0 ** np.where(self.logs, x, 0.0), x)

    def unit(self, values: np.ndarray) -> np.ndarray:
        return (self.to_x(values) - self.lo) / self.span

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        return self.from_x(self.lo + u * self.span)


def fit_gp(x: np.ndarray, y: np.ndarray, noise: float | None, seed: int = 0, extra: np.ndarray | float = 1e-10):
    """A GaussianProcessRegressor fitted to inputs x (n, d) in [0, 1] and standardised targets y (n,):
    ConstantKernel * Matern(5/2) + WhiteKernel. `noise` is the measured seed variance in y's units: the
    WhiteKernel starts there and stays within a factor NOISE_FREEDOM; None (not measured) lets it roam.
    `extra` (n,) is noise variance added to single points (sklearn's alpha), for groups noisier than the rest."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    if noise is None:
        white = WhiteKernel(0.1, (1e-8, 10.0))
    else:
        level = max(noise, 1e-8)
        white = WhiteKernel(level, (level / NOISE_FREEDOM, level * NOISE_FREEDOM))
    d = x.shape[1]
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern([0.5] * d, LENGTH_BOUNDS, nu=2.5) + white
    gp = GaussianProcessRegressor(kernel, alpha=extra, normalize_y=False, n_restarts_optimizer=4, random_state=seed)
    with warnings.catch_warnings():  # a hyper-parameter at its bound is reported by analyse_sweep, in words
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp.fit(x, y)
    return gp


def latent(gp):
    """The fitted GP, predicting the mean function instead of a new observation: the same posterior
    (its Cholesky factor and weights include the noise) with the WhiteKernel left out of k(x*, x*)."""
    out = copy.copy(gp)
    out.kernel_ = gp.kernel_.k1
    return out


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float, maximize: bool = False) -> np.ndarray:
    """Closed-form EI of a normal posterior N(mean, std²) over the incumbent `best`:
    (best - mean) Φ(z) + std φ(z), z = (best - mean) / std, for minimising (signs flipped to maximise);
    max(best - mean, 0) where std is 0."""
    from scipy.stats import norm

    gain = (mean - best) if maximize else (best - mean)
    std = np.asarray(std, dtype=np.float64)
    safe = np.where(std > 0, std, 1.0)
    z = gain / safe
    return np.where(std > 0, gain * norm.cdf(z) + safe * norm.pdf(z), np.maximum(gain, 0.0))


def _fine_grid(d: int) -> np.ndarray:
    """Unit-cube grid points (n, d), first coordinate slowest."""
    if d == 1:
        return np.linspace(0, 1, FINE_1D)[:, None]
    a, b = np.meshgrid(np.linspace(0, 1, FINE_2D), np.linspace(0, 1, FINE_2D), indexing="ij")
    return np.column_stack([a.ravel(), b.ravel()])


def _quantiles(values: np.ndarray, tail: float) -> tuple[float, float]:
    lo, hi = np.quantile(values, [tail, 1 - tail])
    return float(lo), float(hi)


def _on_edge(u: np.ndarray) -> bool:
    return bool(np.any((u <= 1e-9) | (u >= 1 - 1e-9)))


def _named(params: Sequence[str], values: Sequence[float]) -> dict[str, float]:
    return {p: float(v) for p, v in zip(params, values)}


def _noise_estimate(
    measured_var: float | None,
    dof: int,
    fitted_var: float,
    bounds: tuple[float, float],
    scale: float,
    identical: bool,
    noisier: list[NoisierGroup],
    params: list[str],
) -> NoiseEstimate:
    fitted_std = math.sqrt(fitted_var) * scale
    at_bound = fitted_var <= bounds[0] * 1.01 or fitted_var >= bounds[1] / 1.01
    lo, hi = (math.sqrt(b) * scale for b in bounds)
    if measured_var is None:
        why = "every seed gave the same value" if identical else "one seed per value"
        note = (
            f"noise is not measured ({why}): the GP estimated a noise std of {fitted_std:.4g} from the fit alone, "
            "which can mistake signal for noise or noise for signal; run --seeds 3 to measure it"
        )
        return NoiseEstimate(False, None, dof, fitted_std, (lo, hi), at_bound, note)
    measured_std = math.sqrt(measured_var)
    note = (
        f"seed noise: measured std {measured_std:.4g} (pooled over the groups, {dof} dof); the GP's fitted noise "
        f"std {fitted_std:.4g} (started at the measured one, allowed {lo:.3g} to {hi:.3g})"
    )
    if noisier:
        where = "; ".join(
            ", ".join(f"{p}={format_value(v)}" for p, v in zip(params, g.at)) + f" (std {g.std:.3g}, F-test p={g.p:.2g})"
            for g in noisier
        )
        note += (
            f"; the seeds spread more at {where} than elsewhere: measured apart, and fitted with their own "
            "noise (the response may be unstable there)"
        )
    if at_bound:
        note += (
            "; the fit pushed it to the end of that range: the grid values' results and their seeds' spread "
            "disagree (a bumpy response, or too few seeds to measure the noise)"
        )
    return NoiseEstimate(True, measured_std, dof, fitted_std, (lo, hi), at_bound, note, noisier)


def _neighbours(spec_values: list[list[float]], points: Sequence[SweepPoint], i: int) -> list[int]:
    """Indices of the points next to point i on the grid (one step along one parameter)."""
    index = [[vals.index(v) for vals, v in zip(spec_values, p.at)] for p in points]
    return [j for j, other in enumerate(index) if sum(abs(a - b) for a, b in zip(index[i], other)) == 1]


def _distinction(params: list[str], points: list[SweepPoint], means: np.ndarray, maximize: bool) -> Distinction | None:
    """The run grid value with the best posterior mean against each measured neighbour, by the compare rules."""
    values = [sorted({p.at[d] for p in points}) for d in range(len(params))]
    best = int(np.argmax(means) if maximize else np.argmin(means))
    near = _neighbours(values, points, best)
    if not near:
        return None
    checks = []
    for j in near:
        c = compare_groups(points[j].results, points[best].results, higher_is_better=maximize)
        checks.append(NeighbourCheck(_named(params, points[j].at), c.verdict.value, c.reason, c.diff))
    where = ", ".join(f"{p}={format_value(v)}" for p, v in zip(params, points[best].at))
    verdicts = {c.verdict for c in checks}
    names = "; ".join(
        ", ".join(f"{p}={format_value(v)}" for p, v in c.neighbour.items()) + f": {c.verdict}"
        for c in checks
        if c.verdict != Verdict.BETTER.value
    )
    distinguishable: bool | None
    if verdicts == {Verdict.BETTER.value}:
        distinguishable = True
        summary = f"{where} is better beyond noise than each of its {len(checks)} neighbour(s)"
    elif verdicts <= {Verdict.BETTER.value, Verdict.TOO_FEW.value}:
        distinguishable = None
        summary = f"too few seeds to tell whether {where} beats its neighbours beyond noise ({names}); run --seeds 3"
    else:
        distinguishable = False
        summary = f"{where} is not distinguishable from its neighbours beyond noise ({names})"
    return Distinction(_named(params, points[best].at), distinguishable, checks, summary)


def _beyond_edge(params: list[str], fitted: list[SweepPoint], scale: _Scale, u: np.ndarray, integer: Sequence[bool]) -> str:
    """'lr=0.03162' for each parameter whose coordinate of u is on the edge: one run-grid step further out."""
    out = []
    for d, p in enumerate(params):
        if 1e-9 < u[d] < 1 - 1e-9:
            continue
        log = bool(scale.logs[d])
        values = np.unique([pt.at[d] for pt in fitted]).astype(np.float64)
        x = np.log10(values) if log else values
        further = x[0] - (x[1] - x[0]) if u[d] <= 1e-9 else x[-1] + (x[-1] - x[-2])
        if not log and x[0] >= 0 > further:  # a key swept from 0 up has nothing below 0
            continue
        value = 10.0**further if log else further
        out.append(f"{p}={format_value(_round_suggestion(value, integer[d]))}")
    return " and ".join(out)


def _round_suggestion(value: float, integer: bool) -> float:
    return float(round(value)) if integer else float(f"{value:.3g}")


def _suggestions(
    scale: _Scale,
    u_grid: np.ndarray,
    mu: np.ndarray,
    sd: np.ndarray,
    best: float,
    run_u: np.ndarray,
    params: list[str],
    integer: Sequence[bool],
    k: int,
    maximize: bool,
) -> list[Suggestion]:
    """The k fine-grid values with the highest EI, each at least a quarter of the run grid's smallest step
    (per parameter) from the values run and from each other, so they are new values, not one value k times."""
    if k == 0:
        return []
    ei = expected_improvement(mu, sd, best, maximize)
    steps = []
    for d in range(run_u.shape[1]):
        distinct = np.unique(run_u[:, d])
        steps.append(np.diff(distinct).min() / 4 if len(distinct) > 1 else 0.05)
    radius = np.asarray(steps)
    taken = [tuple(u) for u in run_u]
    seen_values = {tuple(_round_suggestion(v, i) for v, i in zip(scale.from_unit(u), integer)) for u in run_u}
    out: list[Suggestion] = []
    for idx in np.argsort(-ei, kind="stable"):
        if len(out) == k or ei[idx] <= 0:
            break
        u = u_grid[idx]
        if any(np.all(np.abs(u - np.asarray(t)) < radius) for t in taken):
            continue
        rounded = tuple(_round_suggestion(v, i) for v, i in zip(scale.from_unit(u), integer))
        if rounded in seen_values:
            continue
        seen_values.add(rounded)
        taken.append(tuple(u))
        out.append(Suggestion(_named(params, rounded), float(ei[idx]), float(mu[idx]), float(sd[idx])))
    return out


def _fit_noise_aware(fitted: list[SweepPoint], scale: _Scale, params: list[str], seed: int):
    """(the fitted GP, the NoiseEstimate, the metric's mean and std the GP's targets were standardised by)."""
    at = np.array([p.at for p in fitted for _ in p.results], dtype=np.float64)
    y = np.array([r for p in fitted for r in p.results], dtype=np.float64)
    y_mean, y_scale = float(y.mean()), float(y.std()) or 1.0
    noisier = noisier_groups(fitted)
    apart = {g.group for g in noisier}
    measured_var, dof = pooled_noise([p for p in fitted if p.group not in apart])
    identical = measured_var is not None and measured_var <= 1e-12 * y_scale**2
    noise = None if measured_var is None or identical else measured_var / y_scale**2
    # a noisier group's points carry the variance it has beyond the shared level
    extra = (
        np.array(
            [
                max(float(np.var(p.results, ddof=1)) - (measured_var or 0.0), 0.0) / y_scale**2 if p.group in apart else 0.0
                for p in fitted
                for _ in p.results
            ]
        )
        + 1e-10
    )
    gp = fit_gp(scale.unit(at), (y - y_mean) / y_scale, noise, seed, extra)
    white = gp.kernel_.k2
    bounds = (white.noise_level_bounds[0], white.noise_level_bounds[1])
    noise_est = _noise_estimate(
        None if identical else measured_var, dof, float(white.noise_level), bounds, y_scale, identical, noisier, params
    )
    return gp, noise_est, y_mean, y_scale


def _optimum(
    f,
    scale: _Scale,
    u_grid: np.ndarray,
    mu: np.ndarray,
    params: list[str],
    y_mean: float,
    y_scale: float,
    maximize: bool,
    seed: int,
) -> Optimum:
    """The posterior mean's best grid point; its location's and value's intervals from N_SAMPLES functions
    drawn from the posterior of the mean function `f` (sklearn's sample_y on the fine grid)."""
    sign = -1.0 if maximize else 1.0
    with warnings.catch_warnings():  # a near-singular posterior covariance: numpy's SVD sampler copes and warns
        warnings.simplefilter("ignore", RuntimeWarning)
        samples = y_mean + y_scale * f.sample_y(u_grid, n_samples=N_SAMPLES, random_state=seed)  # (n_grid, N)
    best_idx = np.argmin(sign * samples, axis=0)
    tail = (1 - CREDIBLE) / 2
    where = scale.to_x(scale.from_unit(u_grid[best_idx]))  # (N, d) in x units (log10 where asked)
    lo_x, hi_x = np.quantile(where, [tail, 1 - tail], axis=0)
    best_values = samples[best_idx, np.arange(samples.shape[1])]
    opt = int(np.argmin(sign * mu))
    return Optimum(
        _named(params, scale.from_unit(u_grid[opt])),
        {p: (float(a), float(b)) for p, a, b in zip(params, scale.from_x(lo_x), scale.from_x(hi_x))},
        float(mu[opt]),
        _quantiles(samples[opt], tail),
        _quantiles(best_values, tail),
        _on_edge(u_grid[opt]),
    )


def _notes(
    gp,
    noise: NoiseEstimate,
    optimum: Optimum,
    points: list[SweepPoint],
    fitted: list[SweepPoint],
    scale: _Scale,
    params: list[str],
    integer: list[bool],
) -> list[str]:
    notes = [noise.note]
    length = np.atleast_1d(gp.kernel_.k1.k2.length_scale)
    if np.any(length <= LENGTH_BOUNDS[0] * 1.01):
        notes.append(
            "the response changes faster than the grid resolves (the kernel's length scale is at its lower "
            "bound): between the grid values the curve is a guess; add values in between"
        )
    if optimum.at_edge:
        further = _beyond_edge(params, fitted, scale, scale.unit(np.array([list(optimum.at.values())]))[0], integer)
        notes.append(
            "the predicted optimum is on the edge of the range swept, so the range may not contain it: "
            "extend it" + (f", e.g. with {further}" if further else "")
        )
    for p in points:
        if p.diverged:
            notes.append(
                f"{p.group}: seed(s) {', '.join(map(str, p.diverged))} diverged"
                + ("" if p.results else "; no value to fit, the fine grid spans the values that trained")
            )
    return notes


def analyse_sweep(
    params: Sequence[str],
    points: Sequence[SweepPoint],
    log: Sequence[bool] | None = None,
    maximize: bool = False,
    next_k: int = 3,
    metric: str = "val_loss",
    integer: Sequence[bool] | None = None,
    seed: int = 0,
) -> SweepAnalysis:
    """Fit the noise-aware GP to the per-seed results of `points` (grid values with no finished seed are
    listed but not fitted) and read off the posterior: mean ± σ on a fine grid, the optimum with credible
    intervals, the compare verdicts around the best grid value, and the next `next_k` values by EI."""
    params = list(params)
    log = list(log) if log is not None else [False] * len(params)
    integer = list(integer) if integer is not None else [False] * len(params)
    points = list(points)
    fitted = [p for p in points if p.results]
    if len({p.at for p in fitted}) < 2:
        raise UserError(
            f"only {len(fitted)} grid value(s) have a finished run; a sweep needs two or more to fit "
            "(lower the values that diverged, or add values)"
        )
    scale = _Scale(np.array([p.at for p in fitted]), log)
    gp, noise, y_mean, y_scale = _fit_noise_aware(fitted, scale, params, seed)
    f = latent(gp)
    u_grid = _fine_grid(len(params))
    mu_n, sd_n = f.predict(u_grid, return_std=True)
    mu, sd = y_mean + y_scale * mu_n, y_scale * sd_n
    run_u = scale.unit(np.array([p.at for p in fitted]))
    pm_n, ps_n = f.predict(run_u, return_std=True)
    point_mean = y_mean + y_scale * pm_n
    optimum = _optimum(f, scale, u_grid, mu, params, y_mean, y_scale, maximize, seed)
    distinction = _distinction(params, fitted, point_mean, maximize)
    incumbent = float(point_mean.max() if maximize else point_mean.min())
    nxt = _suggestions(scale, u_grid, mu, sd, incumbent, run_u, params, integer, next_k, maximize)
    return SweepAnalysis(
        params,
        log,
        metric,
        maximize,
        points,
        noise,
        str(gp.kernel_),
        [list(map(float, row)) for row in scale.from_unit(u_grid)],
        [FINE_1D] if len(params) == 1 else [FINE_2D, FINE_2D],
        mu.tolist(),
        sd.tolist(),
        _aligned(points, fitted, [(float(a), float(y_scale * b)) for a, b in zip(point_mean, ps_n)]),
        optimum,
        distinction,
        nxt,
        _notes(gp, noise, optimum, points, fitted, scale, params, integer),
    )


def _aligned(points: list[SweepPoint], fitted: list[SweepPoint], values: list) -> list:
    """values (one per fitted point) placed at the fitted points' places among `points`, None elsewhere."""
    by_id = {id(p): v for p, v in zip(fitted, values)}
    return [by_id.get(id(p)) for p in points]
