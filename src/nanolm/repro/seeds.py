"""``nanolm seeds``: one config on N seeds, as a group of runs, and the group's seed noise.

Executors (nanolm.repro.executors): "local" (parallel processes, --jobs at a time, each with
cores/jobs threads so they do not fight over cores), "debug" (in this process, one after another)
and "slurm" (submitit; the `slurm` extra). Runs record their group in the manifest (config key
`group`)."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import MAX_NAME, make_config
from ..errors import UserError
from ..runs import Manifest, RunStatus, is_run, read_manifest, read_metrics
from .executors import EXECUTORS, JobOutcome, JobStatus, SeedJob, SlurmResources, make_executor

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FINAL_METRICS = ("val_loss", "train_loss", "tokens_per_s", "seconds")  # what a finished run's manifest records
# Keys that differ between runs of one group, or between groups, without changing what is compared.
IGNORED_KEYS = {
    "name",
    "group",
    "seed",
    "experiment",
    "runs_dir",
    "num_workers",
    "pin_memory",
    "compile",
    "eval_every",
    "log_every",
    "ckpt_every",
    "ckpt_seconds",
    "keep_checkpoints",
    "tracker",
}


@dataclass
class MetricStats:
    metric: str
    values: list[float]  # one per seed, in seed order
    mean: float
    std: float | None  # sample std (ddof=1); None with one value
    min: float
    max: float
    spread: float  # max - min


@dataclass
class Group:
    name: str
    runs: list[Path]
    seeds: list[int]
    metrics: dict[str, MetricStats]
    data_versions: list[str]  # per run: version, and the content hash where recorded
    configs: list[dict]
    skipped: list[str] = field(default_factory=list)  # run folders under runs_dir that could not be read
    excluded: list[str] = field(default_factory=list)  # the group's runs that did not finish (diverged, ...)
    mixed: list[str] = field(default_factory=list)  # config keys on which the group's runs disagree


@dataclass
class SeedsResult:
    group: Group
    seconds: float
    executor: str
    jobs: int
    runs_dir: Path

    @property
    def plot_path(self) -> Path:
        """Where the group's figure (group_figure) belongs: <runs_dir>/group-<name>.png."""
        return self.runs_dir / f"group-{self.group.name}.png"


def metric_stats(metric: str, values: list[float]) -> MetricStats:
    return MetricStats(
        metric,
        values,
        statistics.fmean(values),
        statistics.stdev(values) if len(values) > 1 else None,
        min(values),
        max(values),
        max(values) - min(values),
    )


def _group_members(
    root: Path,
    name: str,
    statuses: tuple[str, ...] = ("finished",),
) -> tuple[list[tuple[int, Path, Manifest]], list[str], list[str], list[str]]:
    """(seed, folder, manifest) of the runs of group `name` with one of `statuses`; the names of all groups
    seen; one line per run folder that could not be read (skipped, not fatal: one bad folder must not hide
    the rest); and one line per run of the group left out for its status."""
    found, groups, skipped, excluded = [], set(), [], []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if not is_run(path):
            continue
        try:
            m = read_manifest(path)
        except UserError as e:
            skipped.append(str(e))
            continue
        cfg = m.config
        if cfg.get("group") is not None:
            groups.add(str(cfg["group"]))
        if cfg.get("group") != name:
            continue
        if m.status not in statuses:
            if m.status != RunStatus.RUNNING:  # a run still training is not news
                at = m.final.diverged_at if m.final is not None else None
                excluded.append(f"{path.name}: {m.status}" + (f" at step {at}" if at is not None else ""))
            continue
        if not (isinstance(cfg.get("seed"), int) and m.data_version is not None):
            skipped.append(f"{path}: manifest lacks a seed or a data version")
            continue
        found.append((cfg["seed"], path, m))
    return found, sorted(groups), skipped, excluded


def _mixed_keys(configs: list[dict]) -> list[str]:
    """'key: v1 (n runs), v2 (m runs)' for each compared config key on which the runs disagree."""
    out = []
    for key in sorted({k for c in configs for k in c} - IGNORED_KEYS):
        values = [repr(c.get(key)) for c in configs]
        if len(set(values)) > 1:
            counts = {v: values.count(v) for v in dict.fromkeys(values)}
            out.append(f"{key}: " + ", ".join(f"{v} ({n} run{'s' if n > 1 else ''})" for v, n in counts.items()))
    return out


def _data_identity(manifest: Manifest) -> str:
    """The data version, with the content hash where the run recorded one (a file's version is its name)."""
    sha = manifest.data_sha256
    return f"{manifest.data_version} (sha256 {sha[:12]})" if sha else str(manifest.data_version)


def load_group(name: str, runs_dir: str | Path = "runs") -> Group:
    """The finished runs of group `name` under runs_dir, in seed order."""
    root = Path(runs_dir)
    found, groups, skipped, excluded = _group_members(root, name)
    if not found:
        raise UserError(
            f"no finished runs in group {name!r} under {root}/; groups there: {', '.join(groups) or 'none'} "
            f"(make one with: nanolm seeds --name {name})"
        )
    found.sort(key=lambda t: (t[0], t[1].name))
    seen: dict[int, Path] = {}
    for seed, path, _ in found:
        if seed in seen:
            raise UserError(
                f"group {name!r} has seed {seed} twice ({seen[seed].name} and {path.name}), which would count "
                f"one seed's noise twice: delete one of the two folders, or give the new runs another --name"
            )
        seen[seed] = path
    metrics = {}
    finals = [m.final.metrics() if m.final is not None else {} for _, _, m in found]
    for metric in sorted({k for final in finals for k in final}):
        values = [final[metric] for final in finals if metric in final]
        if len(values) == len(found):
            metrics[metric] = metric_stats(metric, values)
    configs = [m.config for _, _, m in found]
    return Group(
        name,
        [p for _, p, _ in found],
        [s for s, _, _ in found],
        metrics,
        [_data_identity(m) for _, _, m in found],
        configs,
        skipped,
        excluded,
        _mixed_keys(configs),
    )


def existing_seeds(name: str, runs_dir: str | Path = "runs", statuses: tuple[str, ...] = ("finished",)) -> list[int]:
    """Seeds that group `name` already has runs with one of `statuses` for."""
    return sorted({seed for seed, _, _ in _group_members(Path(runs_dir), name, statuses)[0]})


def check_group_name(name: str, option: str = "--name") -> str:
    """name, once it is usable in run folder and file names."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise UserError(
            f"{option} {name!r}: a group name is letters, digits, '.', '_' and '-' (it names folders "
            f"and files), e.g. {option} baseline"
        )
    longest = MAX_NAME - len("-seed") - 20  # room for the seed's digits in each run's name
    if len(name) > longest:
        raise UserError(
            f"{option}: a group name of {len(name)} characters is too long (each run's folder is named "
            f"after it); use at most {longest}, e.g. {option} baseline"
        )
    return name


def run_seeds(
    overrides: list[str],
    n: int,
    name: str,
    jobs: int = 1,
    executor: str = "local",
    on_done: Callable[[int, str | None], None] | None = None,
    slurm: SlurmResources | None = None,
) -> SeedsResult:
    """Train the config of `overrides` on seeds base, base+1, ..., base+n-1 (base = its seed, from
    `--set seed=`) as group `name`. A seed that diverges is recorded and shown (on_done gets None for
    its run folder); the sweep goes on. A seed that fails otherwise is a UserError, once the seeds
    already running have ended. `slurm`: each SLURM job's resources (executor "slurm" only). Writes no
    figure: see group_figure and SeedsResult.plot_path."""
    _check_sweep(n, name, jobs, executor)
    cfg = make_config(overrides=overrides)  # validate before starting anything
    seeds = [cfg.seed + i for i in range(n)]
    taken = sorted(set(seeds) & set(existing_seeds(name, cfg.runs_dir, ("finished", "diverged"))))
    if taken:
        raise UserError(
            f"group {name!r} already has runs for seed(s) {', '.join(map(str, taken))}; a seed counted twice "
            f"is not noise: pick another --name, or start after them with --set seed={max(taken) + 1}"
        )
    if slurm is not None:
        slurm.check_config(cfg)  # here, not in a job that waited in the queue
    runner = make_executor(executor, jobs, cfg.runs_dir, name, slurm)  # refused before anything starts
    prepare_trackers(cfg)
    start = time.perf_counter()

    diverged: list[str] = []

    def finished(outcome: JobOutcome) -> None:
        outcome.raise_if_failed()
        if outcome.status is JobStatus.DIVERGED:  # its manifest says diverged; the group lists it as excluded
            diverged.append(outcome.message or f"seed {outcome.seed} diverged")
        if on_done:
            on_done(outcome.seed, outcome.run_dir)

    runner.run([SeedJob(list(overrides), s, name) for s in seeds], finished)
    seconds = time.perf_counter() - start
    if len(diverged) == n:
        raise UserError(f"all {n} seeds diverged ({diverged[0]})")
    return SeedsResult(load_group(name, cfg.runs_dir), seconds, executor, jobs, Path(cfg.runs_dir))


def _check_sweep(n: int, name: str, jobs: int, executor: str) -> None:
    check_group_name(name)
    if n < 1:
        raise UserError(f"--n must be >= 1, got {n}")
    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    if executor not in EXECUTORS:
        raise UserError(f"--executor must be local, debug or slurm, got {executor!r}")


def prepare_trackers(cfg) -> None:
    """Create what parallel runs would otherwise race to create (MLflow's SQLite store and experiment)."""
    if cfg.tracker == "mlflow":
        from ..trackers import MlflowTracker

        MlflowTracker.prepare(cfg.runs_dir, cfg.experiment)


def group_figure(group: Group, metric: str = "val_loss") -> Figure:
    """The final metric of each seed as a strip, and the training-loss curves with a min–max band
    (save it with nanolm.plots.save_figure)."""
    import numpy as np

    from ..plots import pyplot

    fig, (left, right) = pyplot().subplots(1, 2, figsize=(10, 4))
    if metric in group.metrics:
        stats = group.metrics[metric]
        x = np.random.default_rng(0).uniform(-0.05, 0.05, len(stats.values))
        left.scatter(x, stats.values, zorder=3)
        left.axhline(stats.mean, color="k", lw=1, label=f"mean {stats.mean:.4f}")
        left.axhspan(stats.min, stats.max, color="C0", alpha=0.15, label=f"spread {stats.spread:.4f}")
        left.set_xlim(-0.5, 0.5)
        left.set_xticks([])
        left.set_ylabel(metric)
        left.legend()
    left.set_title(f"{group.name}: final {metric}, {len(group.runs)} seeds")
    curves = [{r["step"]: r["train_loss"] for r in read_metrics(run) if r.get("train_loss") is not None} for run in group.runs]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    if steps:
        values = np.array([[c[s] for s in steps] for c in curves])
        right.plot(steps, values.mean(0), label="mean")
        right.fill_between(steps, values.min(0), values.max(0), alpha=0.3, label="min–max over seeds")
        right.legend()
    right.set_xlabel("step")
    right.set_ylabel("train loss")
    right.set_title("loss curves")
    return fig
