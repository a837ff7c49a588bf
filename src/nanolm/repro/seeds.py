"""``nanolm seeds``: one config on N seeds, as a group of runs, and the group's seed noise.

Executors: "local" (parallel processes, --jobs at a time, each with cores/jobs threads so they do
not fight over cores), "debug" (in this process, one after another) and "slurm" (submitit; the
`slurm` extra). Runs record their group in the manifest (config key `group`)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..config import make_config
from ..errors import UserError
from ..runs import read_manifest, read_metrics

FINAL_METRICS = ("val_loss", "train_loss", "tokens_per_s", "seconds")  # what a finished run's manifest records
# Keys that differ between runs of one group, or between groups, without changing what is compared.
IGNORED_KEYS = {"name", "group", "seed", "experiment", "runs_dir", "num_workers", "pin_memory", "compile",
                "eval_every", "log_every", "ckpt_every", "keep_checkpoints", "tracker"}
RUN_KEYS = ("seed", "name", "group")  # set per run by `seeds` and `experiment`: an override of them is dropped


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
    plot: Path | None
    seconds: float
    executor: str
    jobs: int


def metric_stats(metric: str, values: list[float]) -> MetricStats:
    return MetricStats(metric, values, statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None,
                       min(values), max(values), max(values) - min(values))


def _group_members(root: Path, name: str, statuses: tuple[str, ...] = ("finished",),
                   ) -> tuple[list[tuple[int, Path, dict]], list[str], list[str], list[str]]:
    """(seed, folder, manifest) of the runs of group `name` with one of `statuses`; the names of all groups
    seen; one line per run folder that could not be read (skipped, not fatal: one bad folder must not hide
    the rest); and one line per run of the group left out for its status."""
    found, groups, skipped, excluded = [], set(), [], []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if not (path / "manifest.json").is_file():
            continue
        try:
            m = read_manifest(path)
        except UserError as e:
            skipped.append(str(e))
            continue
        cfg = m["config"]
        if cfg.get("group") is not None:
            groups.add(str(cfg["group"]))
        if cfg.get("group") != name:
            continue
        if m.get("status") not in statuses:
            if m.get("status") != "running":  # a run still training is not news
                at = (m.get("final") or {}).get("diverged_at") if isinstance(m.get("final"), dict) else None
                excluded.append(f"{path.name}: {m.get('status')}" + (f" at step {at}" if at is not None else ""))
            continue
        data, final = m.get("data"), m.get("final")
        if not (isinstance(cfg.get("seed"), int) and isinstance(data, dict) and isinstance(data.get("version"), str)
                and isinstance(data.get("sha256") or "", str) and isinstance(final or {}, dict)):
            skipped.append(f"{path}: manifest lacks a seed, a data version or a final-metrics object")
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


def _data_identity(manifest: dict) -> str:
    """The data version, with the content hash where the run recorded one (a file's version is its name)."""
    data = manifest["data"]
    return f"{data['version']} (sha256 {data['sha256'][:12]})" if data.get("sha256") else data["version"]


def load_group(name: str, runs_dir: str | Path = "runs") -> Group:
    """The finished runs of group `name` under runs_dir, in seed order."""
    root = Path(runs_dir)
    found, groups, skipped, excluded = _group_members(root, name)
    if not found:
        raise UserError(f"no finished runs in group {name!r} under {root}/; groups there: {', '.join(groups) or 'none'} "
                        f"(make one with: nanolm seeds --name {name})")
    found.sort(key=lambda t: (t[0], t[1].name))
    seen: dict[int, Path] = {}
    for seed, path, _ in found:
        if seed in seen:
            raise UserError(f"group {name!r} has seed {seed} twice ({seen[seed].name} and {path.name}), which would count "
                            f"one seed's noise twice: delete one of the two folders, or give the new runs another --name")
        seen[seed] = path
    metrics = {}
    for metric in sorted({k for _, _, m in found for k, v in (m.get("final") or {}).items() if isinstance(v, float)}):
        values = [m["final"][metric] for _, _, m in found if isinstance((m.get("final") or {}).get(metric), float)]
        if len(values) == len(found):
            metrics[metric] = metric_stats(metric, values)
    configs = [m["config"] for _, _, m in found]
    return Group(name, [p for _, p, _ in found], [s for s, _, _ in found], metrics,
                 [_data_identity(m) for _, _, m in found], configs, skipped, excluded, _mixed_keys(configs))


def existing_seeds(name: str, runs_dir: str | Path = "runs", statuses: tuple[str, ...] = ("finished",)) -> list[int]:
    """Seeds that group `name` already has runs with one of `statuses` for."""
    return sorted({seed for seed, _, _ in _group_members(Path(runs_dir), name, statuses)[0]})


def per_run_overrides(overrides: list[str]) -> list[str]:
    """overrides without seed, name and group, which each run of a group gets from its executor."""
    return [kv for kv in overrides if kv.split("=", 1)[0].strip() not in RUN_KEYS]


class SeedDiverged(UserError):
    """One seed's training diverged: a result about the config, not a failure of the sweep."""


def _threads_per_job(jobs: int) -> int:
    return max(1, (os.cpu_count() or 1) // jobs)


def _train_subprocess(overrides: list[str], seed: int, name: str, threads: int) -> str:
    sets = [a for kv in per_run_overrides(overrides) for a in ("--set", kv)]
    cmd = [sys.executable, "-m", "nanolm", "train", *sets, "--seed", str(seed), "--name", f"{name}-seed{seed}",
           "--set", f"group={name}", "--quiet", "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(threads))}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        if out.returncode == 1 and "became" in last:  # TrainingDiverged's exit code and message
            raise SeedDiverged(f"seed {seed} diverged: {last.removeprefix('nanolm: error: ')}")
        raise UserError(f"seed {seed} failed: {last}")
    return json.loads(out.stdout)["run_dir"]


def train_one_seed(overrides: list[str], seed: int, name: str) -> str:
    """Train one seed in this process (the debug and slurm executors' job); returns the run folder."""
    from ..train import TrainingDiverged, train

    cfg = make_config(overrides=[*per_run_overrides(overrides), f"group={name}"], seed=seed, name=f"{name}-seed{seed}")
    try:
        return str(train(cfg, progress=False).run_dir)
    except TrainingDiverged as e:
        raise SeedDiverged(f"seed {seed} diverged: {e}") from None


def check_group_name(name: str, option: str = "--name") -> str:
    """name, once it is usable in run folder and file names."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name or ""):
        raise UserError(f"{option} {name!r}: a group name is letters, digits, '.', '_' and '-' (it names folders "
                        f"and files), e.g. {option} baseline")
    return name


def run_seeds(overrides: list[str], n: int, name: str, jobs: int = 1, executor: str = "local",
              on_done: Callable[[int, str | None], None] | None = None) -> SeedsResult:
    """Train the config of `overrides` on seeds base, base+1, ..., base+n-1 (base = its seed, from
    `--set seed=`) as group `name`. A seed that diverges is recorded and shown (on_done gets None for
    its run folder); the sweep goes on."""
    check_group_name(name)
    if n < 1:
        raise UserError(f"--n must be >= 1, got {n}")
    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    if executor not in ("local", "debug", "slurm"):
        raise UserError(f"--executor must be local, debug or slurm, got {executor!r}")
    cfg = make_config(overrides=overrides)  # validate before starting anything
    seeds = [cfg.seed + i for i in range(n)]
    taken = sorted(set(seeds) & set(existing_seeds(name, cfg.runs_dir, ("finished", "diverged"))))
    if taken:
        raise UserError(f"group {name!r} already has runs for seed(s) {', '.join(map(str, taken))}; a seed counted twice "
                        f"is not noise: pick another --name, or start after them with --set seed={max(taken) + 1}")
    prepare_trackers(cfg)
    start = time.perf_counter()

    diverged: list[str] = []

    def finished(seed: int, result: Callable[[], str]) -> None:
        try:
            run_dir: str | None = result()
        except SeedDiverged as e:
            run_dir = None  # its manifest says diverged; the group lists it as excluded
            diverged.append(str(e))
        if on_done:
            on_done(seed, run_dir)

    if executor == "local":
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_train_subprocess, overrides, s, name, _threads_per_job(jobs)): s for s in seeds}
            for future in as_completed(futures):
                finished(futures[future], future.result)
    elif executor == "debug":
        for s in seeds:
            finished(s, lambda s=s: train_one_seed(overrides, s, name))
    else:
        for s, job in zip(seeds, _submit_slurm(cfg, overrides, seeds, name)):
            finished(s, lambda s=s, job=job: _slurm_result(s, job))
    seconds = time.perf_counter() - start
    if len(diverged) == n:
        raise UserError(f"all {n} seeds diverged ({diverged[0]})")
    group = load_group(name, cfg.runs_dir)
    plot = plot_group(group, Path(cfg.runs_dir) / f"group-{name}.png")
    return SeedsResult(group, plot, seconds, executor, jobs)


def _submit_slurm(cfg, overrides: list[str], seeds: list[int], name: str) -> list:
    try:
        import submitit
    except ImportError:
        raise UserError("--executor slurm needs submitit: pip install 'nanolm[slurm]'") from None
    try:
        ex = submitit.AutoExecutor(folder=Path(cfg.runs_dir) / "slurm", cluster="slurm")
    except RuntimeError as e:  # no sbatch/srun on this machine
        raise UserError(f"--executor slurm: {e}; run it on a SLURM login node, or use --executor local") from None
    ex.update_parameters(timeout_min=60, name=f"nanolm-{name}")
    return ex.map_array(slurm_job, [overrides] * len(seeds), seeds, [name] * len(seeds))


def slurm_job(overrides: list[str], seed: int, name: str) -> dict:
    """One seed as a SLURM job: {"run_dir": ...}, or {"diverged": message}. A divergence is returned,
    not raised, because submitit hands back a job's exception only as a FailedJobError."""
    try:
        return {"run_dir": train_one_seed(overrides, seed, name)}
    except SeedDiverged as e:
        return {"diverged": str(e)}


def _slurm_result(seed: int, job) -> str:
    """The job's run folder (SeedDiverged when it diverged); any other failure as one line."""
    try:
        outcome = job.result()
    except Exception as e:  # submitit's FailedJobError / UncompletedJobError carry the job's own traceback
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Interrupt)\b", line)]
        last = (errors or lines or [type(e).__name__])[-1]
        raise UserError(f"seed {seed}: SLURM job {job.job_id} failed: {last}; its logs are in {job.paths.folder}") from None
    if "diverged" in outcome:
        raise SeedDiverged(outcome["diverged"])
    return outcome["run_dir"]


def prepare_trackers(cfg) -> None:
    """Create what parallel runs would otherwise race to create (MLflow's SQLite store and experiment)."""
    if cfg.tracker == "mlflow":
        from ..trackers import MlflowTracker

        MlflowTracker.prepare(cfg.runs_dir, cfg.experiment)


def plot_group(group: Group, path: Path, metric: str = "val_loss") -> Path:
    """A PNG: the final metric of each seed as a strip, and the training-loss curves with a min–max band."""
    import numpy as np

    from ..plots import pyplot, save_figure

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
    curves = [{r["step"]: r["train_loss"] for r in read_metrics(run) if r.get("train_loss") is not None}
              for run in group.runs]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    if steps:
        values = np.array([[c[s] for s in steps] for c in curves])
        right.plot(steps, values.mean(0), label="mean")
        right.fill_between(steps, values.min(0), values.max(0), alpha=0.3, label="min–max over seeds")
        right.legend()
    right.set_xlabel("step")
    right.set_ylabel("train loss")
    right.set_title("loss curves")
    return save_figure(fig, path)
