"""Kill criteria written in advance: an experiment file names the idea, the baseline and candidate
configs, the metric, the seeds, the scales and the rule, before any run. ``experiment run`` trains
what is missing (reusing finished runs); ``experiment verdict`` says KEEP or KILL with the evidence.

    idea = "a higher learning rate"
    metric = "val_loss"                 # lower is better unless higher_is_better = true
    seeds = 3                           # or a list: [1, 2, 3]
    rule = "close if the effect is smaller than the noise at two scales"
    kill_if_no_effect_at = 2            # KILL when this many scales show no effect beyond noise
    [common]                            # config keys for every run
    steps = 200
    [baseline]
    lr = 3e-3
    [candidate]
    lr = 1e-2
    [[scales]]
    name = "d64"
    d_model = 64
    [[scales]]
    name = "d128"
    d_model = 128
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from ..config import make_config, read_toml
from ..errors import UserError
from .compare import compare_run_groups
from .executors import RUN_KEYS, JobOutcome, JobStatus, SeedJob, SlurmResources, make_executor
from .seeds import FINAL_METRICS, existing_seeds, load_group, prepare_trackers
from .stats import Verdict

KEYS = {
    "idea",
    "metric",
    "higher_is_better",
    "seeds",
    "rule",
    "kill_if_no_effect_at",
    "common",
    "baseline",
    "candidate",
    "scales",
}


@dataclass
class Experiment:
    path: Path
    idea: str
    slug: str  # the idea as a name: runs record it, groups start with it
    metric: str
    higher_is_better: bool
    seeds: list[int]
    rule: str
    kill_if_no_effect_at: int
    common: dict
    baseline: dict
    candidate: dict
    scales: list[tuple[str, dict]]

    def group(self, scale: str, arm: str) -> str:
        """The group's name carries a hash of its config: edit the file, and new runs are made, not stale ones reused."""
        config = dict(self.scales)[scale]
        digest = hashlib.sha256(json.dumps(self.overrides(config, arm)).encode()).hexdigest()[:8]
        return f"{self.slug}-{scale}-{arm}-{digest}"

    def overrides(self, scale: dict, arm: str) -> list[str]:
        values = {**self.common, **scale, **(self.baseline if arm == "baseline" else self.candidate), "experiment": self.slug}
        return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]


def _field(raw: dict, key: str, types: type | tuple[type, ...], default, path: Path, want: str):
    """raw[key] (or default) when it has one of `types`; a UserError naming the key and `want` otherwise."""
    value = raw.get(key, default)
    types = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):  # TOML's true is not a number
        raise UserError(f"experiment file {path}: {key} = {value!r} should be {want}")
    return value


def _table(raw: dict, key: str, path: Path, default=None) -> dict:
    return _field(raw, key, dict, {} if default is None else default, path, f"a table of config keys ([{key}])")


def _scales(raw: dict, path: Path) -> list[tuple[str, dict]]:
    items = _field(raw, "scales", list, [{"name": "base"}], path, "an array of tables ([[scales]] with a name)") or [
        {"name": "base"}
    ]
    scales = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise UserError(f"experiment file {path}: scales entry #{i + 1} is {item!r}; each is a [[scales]] table")
        config = dict(item)
        scales.append((str(config.pop("name", f"scale{i}")), config))
    names = [n for n, _ in scales]
    if len(set(names)) < len(names):
        raise UserError(
            f"experiment file {path}: two scales share the name {next(n for n in names if names.count(n) > 1)!r};"
            " give each [[scales]] its own name"
        )
    return scales


def _seed_list(raw: dict, path: Path) -> list[int]:
    seeds = _field(raw, "seeds", (int, list), 3, path, "a number of seeds (3) or a list of seeds ([1, 2, 3])")
    seeds = list(range(1, seeds + 1)) if isinstance(seeds, int) else seeds
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds) or len(set(seeds)) < len(seeds):
        raise UserError(f"experiment file {path}: seeds = {seeds!r} should be distinct whole numbers")
    if len(seeds) < 3:
        raise UserError(f"experiment file {path}: {len(seeds)} seeds; a verdict needs at least 3 a side")
    return seeds


def load_experiment(path: str | Path) -> Experiment:
    path = Path(path)
    raw = read_toml(path, "experiment file")
    unknown = set(raw) - KEYS
    if unknown:
        raise UserError(f"experiment file {path}: unknown key {sorted(unknown)[0]!r}; known: {', '.join(sorted(KEYS))}")
    for key in ("idea", "baseline", "candidate"):
        if key not in raw:
            raise UserError(f"experiment file {path}: missing {key!r} (an experiment names its idea, baseline and candidate)")
    idea = _field(raw, "idea", str, None, path, "a short text naming the idea")
    slug = re.sub(r"[^a-z0-9]+", "-", idea.lower()).strip("-")[:40]
    if not slug:
        raise UserError(f"experiment file {path}: idea = {idea!r} has no letters or digits to name the runs by")
    scales = _scales(raw, path)
    tables = [(f"[{k}]", raw.get(k)) for k in ("common", "baseline", "candidate")] + [(f"[[scales]] {n!r}", c) for n, c in scales]
    for where, table in tables:
        for key in (*RUN_KEYS, "experiment"):
            if isinstance(table, dict) and key in table:
                raise UserError(
                    f"experiment file {path}: {where} sets {key!r}, which the experiment sets for each run "
                    f"(seeds come from 'seeds = ...'); remove it"
                )
    metric = _field(raw, "metric", str, "val_loss", path, 'a metric name such as "val_loss"')
    if metric not in FINAL_METRICS:
        raise UserError(
            f"experiment file {path}: metric = {metric!r} is not a metric runs record; choose one of {', '.join(FINAL_METRICS)}"
        )
    exp = Experiment(
        path,
        idea,
        slug,
        metric,
        _field(raw, "higher_is_better", bool, False, path, "true or false"),
        _seed_list(raw, path),
        _field(raw, "rule", str, "close if the effect is smaller than the noise at every scale", path, "a text"),
        _field(raw, "kill_if_no_effect_at", int, len(scales), path, "a whole number of scales"),
        _table(raw, "common", path),
        _table(raw, "baseline", path),
        _table(raw, "candidate", path),
        scales,
    )
    if not 1 <= exp.kill_if_no_effect_at <= len(scales):
        raise UserError(
            f"experiment file {path}: kill_if_no_effect_at = {exp.kill_if_no_effect_at} should be between 1 "
            f"and the number of scales ({len(scales)})"
        )
    for _, scale in exp.scales:  # every config must be valid before anything runs
        for arm in ("baseline", "candidate"):
            make_config(overrides=exp.overrides(scale, arm))
    return exp


@dataclass
class ExperimentRun:
    ran: list[tuple[str, int]] = field(default_factory=list)  # (group, seed) trained now
    reused: list[tuple[str, int]] = field(default_factory=list)  # (group, seed) found finished (or diverged)
    diverged: list[tuple[str, int]] = field(default_factory=list)  # (group, seed) trained now that diverged


def run_experiment(
    path: str | Path,
    jobs: int = 1,
    on_done: Callable[[str, int, JobStatus], None] | None = None,
    executor: str = "local",
    slurm: SlurmResources | None = None,
) -> ExperimentRun:
    """Train the runs the experiment lacks with `executor` (local: `jobs` at a time in child processes;
    slurm: one array job, each job with the `slurm` resources); on_done(group, seed, JobStatus.FINISHED
    or DIVERGED) as each ends. A run that fails otherwise is a UserError, once the runs already started
    have ended."""
    exp = load_experiment(path)
    runs_dir = None
    result = ExperimentRun()
    todo: list[SeedJob] = []
    for name, scale in exp.scales:
        for arm in ("baseline", "candidate"):
            overrides = exp.overrides(scale, arm)
            group = exp.group(name, arm)
            cfg = make_config(overrides=overrides)
            if slurm is not None:
                slurm.check_config(cfg)  # before anything is submitted
            runs_dir = runs_dir or cfg.runs_dir  # where the SLURM executor keeps its job records
            prepare_trackers(cfg)
            # A diverged seed is a result (evidence against its config), not a run to retry forever.
            done = set(existing_seeds(group, cfg.runs_dir, ("finished", "diverged")))
            for seed in exp.seeds:
                if seed in done:
                    result.reused.append((group, seed))
                else:
                    todo.append(SeedJob(overrides, seed, group))

    def finished(outcome: JobOutcome) -> None:
        outcome.raise_if_failed()
        if on_done:
            on_done(outcome.group, outcome.seed, outcome.status)

    runner = make_executor(executor, jobs, runs_dir or "runs", exp.slug, slurm)
    for outcome in runner.run(todo, finished) if todo else []:  # in the order of todo
        result.ran.append((outcome.group, outcome.seed))
        if outcome.status is JobStatus.DIVERGED:
            result.diverged.append((outcome.group, outcome.seed))
    return result


class Decision(str, Enum):
    KEEP = "KEEP"
    KILL = "KILL"

    def __str__(self) -> str:  # the text, also in f-strings, on every Python version
        return self.value


@dataclass
class ScaleVerdict:
    scale: str
    mean_baseline: float
    mean_candidate: float | None  # None when the candidate diverged on some seed
    diff: float | None
    verdict: Verdict  # compare_groups' verdict, or WORSE_DIVERGED
    reason: str


@dataclass
class ExperimentVerdict:
    idea: str
    rule: str
    decision: Decision
    reason: str
    scales: list[ScaleVerdict]
    warnings: list[str] = field(default_factory=list)  # from the comparisons, e.g. run folders skipped


def experiment_verdict(path: str | Path) -> ExperimentVerdict:
    exp = load_experiment(path)
    rows, warnings = [], []
    for name, scale in exp.scales:
        runs_dir = make_config(overrides=exp.overrides(scale, "baseline")).runs_dir
        diverged = {}
        for arm in ("baseline", "candidate"):
            group = exp.group(name, arm)
            finished = set(existing_seeds(group, runs_dir))
            diverged[arm] = sorted(set(exp.seeds) & set(existing_seeds(group, runs_dir, ("diverged",))) - finished)
            missing = sorted(set(exp.seeds) - finished - set(diverged[arm]))
            if missing:
                raise UserError(
                    f"experiment {exp.path}: scale {name!r}, {arm}: no finished runs for seed(s) "
                    f"{', '.join(map(str, missing))}; train them first: nanolm experiment run {exp.path}"
                )
        if diverged["baseline"]:
            raise UserError(
                f"experiment {exp.path}: scale {name!r}: the baseline diverged on seed(s) "
                f"{', '.join(map(str, diverged['baseline']))}, so there is no noise to measure against; "
                f"fix the baseline config (a lower lr, more warmup) and delete those runs"
            )
        if diverged["candidate"]:  # a config that blows up on some seeds has no effect worth keeping
            base = load_group(exp.group(name, "baseline"), runs_dir).metrics[exp.metric]
            rows.append(
                ScaleVerdict(
                    name,
                    base.mean,
                    None,
                    None,
                    Verdict.WORSE_DIVERGED,
                    f"the candidate diverged on seed(s) {', '.join(map(str, diverged['candidate']))}",
                )
            )
            continue
        compared = compare_run_groups(
            exp.group(name, "baseline"), exp.group(name, "candidate"), exp.metric, exp.higher_is_better, None, runs_dir
        )
        warnings += compared.warnings
        c = compared.comparison
        rows.append(ScaleVerdict(name, c.mean_a, c.mean_b, c.diff, c.verdict, c.reason))
    no_effect = [r.scale for r in rows if r.verdict is not Verdict.BETTER]
    kill = len(no_effect) >= exp.kill_if_no_effect_at
    reason = (
        f"no effect beyond noise at {len(no_effect)} of {len(rows)} scales ({', '.join(no_effect)}); "
        f"the rule kills at {exp.kill_if_no_effect_at}"
        if kill
        else f"better beyond noise at {len(rows) - len(no_effect)} of {len(rows)} scales; the rule kills only when "
        f"{exp.kill_if_no_effect_at} show no effect"
    )
    return ExperimentVerdict(
        exp.idea, exp.rule, Decision.KILL if kill else Decision.KEEP, reason, rows, list(dict.fromkeys(warnings))
    )
