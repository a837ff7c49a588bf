"""The figure of a sweep: returned, not saved (save it with nanolm.plots.save_figure).

One parameter: the per-seed results, the posterior mean of the mean function ± 2σ, the optimum with its
credible interval, and the values suggested next. Two parameters: contour plots of the posterior mean and
of its σ, with the grid values run, the optimum and the suggestions marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..plots import pyplot
from .sweep_analysis import SweepAnalysis, format_value

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def sweep_figure(analysis: SweepAnalysis) -> Figure:
    """The sweep's figure: a curve with a band for one parameter, two contour plots for two."""
    if len(analysis.params) == 1:
        return _figure_1d(analysis)
    return _figure_2d(analysis)


def _title(a: SweepAnalysis) -> str:
    best = ", ".join(f"{p}={format_value(v)}" for p, v in a.optimum.at.items())
    noise = (
        f"seed noise std {a.noise.measured_std:.3g} measured, {a.noise.fitted_std:.3g} fitted"
        if a.noise.measured
        else "noise not measured (one seed per value)"
    )
    return f"{a.metric}: optimum {best}; {noise}"


def _figure_1d(a: SweepAnalysis) -> Figure:
    fig, ax = pyplot().subplots(figsize=(8, 4.5))
    x = np.array([g[0] for g in a.grid])
    mean, std = np.array(a.mean), np.array(a.std)
    ax.fill_between(x, mean - 2 * std, mean + 2 * std, color="C0", alpha=0.2, label="mean function ± 2σ")
    ax.plot(x, mean, color="C0", label="posterior mean")
    seeds_x = [p.at[0] for p in a.points for _ in p.results]
    seeds_y = [r for p in a.points for r in p.results]
    ax.scatter(seeds_x, seeds_y, s=14, color="k", zorder=3, label="one seed")
    diverged = [p.at[0] for p in a.points if p.diverged]
    if diverged:
        top = max(seeds_y)
        ax.scatter(diverged, [top] * len(diverged), marker="x", color="C3", zorder=3, label="diverged seed(s)")
    (param,) = a.params
    lo, hi = a.optimum.at_interval[param]
    ax.axvspan(lo, hi, color="C2", alpha=0.12, label=f"optimum, {100 * a.credible:g}% interval")
    ax.axvline(a.optimum.at[param], color="C2", lw=1.5)
    for i, s in enumerate(a.next):
        ax.axvline(s.at[param], color="C1", ls="--", lw=1, label="next (expected improvement)" if i == 0 else None)
    if a.log[0]:
        ax.set_xscale("log")
    ax.set_xlabel(param)
    ax.set_ylabel(a.metric)
    ax.set_title(_title(a), fontsize=9)
    ax.legend(fontsize=8)
    return fig


def _figure_2d(a: SweepAnalysis) -> Figure:
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4.5))
    n1, n2 = a.grid_shape
    grid = np.array(a.grid)
    gx, gy = grid[:, 0].reshape(n1, n2), grid[:, 1].reshape(n1, n2)
    run = np.array([p.at for p in a.points if p.results])
    for ax, values, title in (
        (axes[0], a.mean, f"posterior mean of {a.metric}"),
        (axes[1], a.std, "its σ (seed noise excluded)"),
    ):
        filled = ax.contourf(gx, gy, np.array(values).reshape(n1, n2), levels=20, cmap="viridis")
        fig.colorbar(filled, ax=ax)
        ax.scatter(run[:, 0], run[:, 1], s=16, color="w", edgecolors="k", zorder=3, label="values run")
        p1, p2 = a.params
        ax.scatter([a.optimum.at[p1]], [a.optimum.at[p2]], marker="*", s=160, color="C3", zorder=4, label="optimum")
        if a.next:
            ax.scatter(
                [s.at[p1] for s in a.next],
                [s.at[p2] for s in a.next],
                marker="x",
                color="C1",
                zorder=4,
                label="next (expected improvement)",
            )
        if a.log[0]:
            ax.set_xscale("log")
        if a.log[1]:
            ax.set_yscale("log")
        ax.set_xlabel(p1)
        ax.set_ylabel(p2)
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle(_title(a), fontsize=9)
    return fig
