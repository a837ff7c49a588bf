"""``nanolm sweep``: a hyper-parameter grid trained on several seeds per value, and a Gaussian process
whose observation noise is the measured seed noise, so the "best" setting comes with an honest uncertainty.

Two halves, usable apart:

- here, the driver: ``sweep_spec`` validates what the user typed into a ``SweepSpec``; ``run_sweep`` trains
  the grid through the repro executors (local, debug, SLURM), one seed group per grid value (group
  ``<name>-<param>-<value>``, runs ``<group>-seed<S>``), reusing the finished runs a previous sweep of the
  same name left, collects each seed's final metric and analyses them; ``write_sweep`` / ``read_sweep``:
  the sweep.json a report reads;
- ``sweep_analysis``: ``analyse_sweep`` (pure: numbers in, dataclass out; no training), the noise-aware
  GP, its optimum, the neighbour checks and the expected-improvement suggestions, and the result
  dataclasses. Its public names are re-exported here, so ``from nanolm.research.sweep import
  analyse_sweep, SweepPoint`` keeps working."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import check_key, key_types, make_config, parse_overrides
from ..errors import UserError
from ..io import atomic_write_json, to_jsonable
from ..records import Record
from ..repro.executors import EXECUTORS, JobOutcome, SeedJob, SlurmResources, make_executor, per_run_overrides
from ..repro.seeds import FINAL_METRICS, IGNORED_KEYS, check_group_name, existing_seeds, load_group, prepare_trackers

# the analysis's public names, re-exported for the callers that import them from here (no __all__: the API page
# documents them once, under sweep_analysis)
from .sweep_analysis import (  # noqa: F401
    CREDIBLE,
    FINE_1D,
    FINE_2D,
    LENGTH_BOUNDS,
    N_SAMPLES,
    NOISE_FREEDOM,
    NOISIER_ALPHA,
    Distinction,
    NeighbourCheck,
    NoiseEstimate,
    NoisierGroup,
    Optimum,
    Suggestion,
    SweepAnalysis,
    SweepPoint,
    analyse_sweep,
    expected_improvement,
    fit_gp,
    format_value,
    latent,
    noisier_groups,
    pooled_noise,
)

NOT_SWEPT = {"seed"} | IGNORED_KEYS  # the seed is the noise; the rest change nothing a sweep could measure


# ---- what a sweep is --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: one or two numeric config keys, each with at least two distinct values."""

    params: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]  # per parameter, sorted ascending (ints stay ints)
    log: tuple[bool, ...]  # per parameter: fit and plot in log10(value)
    integer: tuple[bool, ...]  # per parameter: the key takes whole numbers (suggestions are rounded)
    seeds: int = 3
    metric: str = "val_loss"
    maximize: bool = False
    next_k: int = 3
    name: str = "sweep"

    @property
    def points(self) -> list[tuple[float, ...]]:
        """Every grid point, the first parameter varying slowest."""
        if len(self.params) == 1:
            return [(v,) for v in self.values[0]]
        return [(a, b) for a in self.values[0] for b in self.values[1]]

    @property
    def sweep_id(self) -> str:
        """<name>-<param>[-<param2>]: the sweep's folder under <runs_dir>/sweeps/."""
        return "-".join((self.name, *self.params))

    def group(self, point: Sequence[float]) -> str:
        """The seed group of one grid point: <name>-<param>-<value>[-<param2>-<value2>]."""
        return "-".join([self.name, *(f"{p}-{format_value(v)}" for p, v in zip(self.params, point))])


def _numeric_type(key: str) -> type:
    """int or float: the type config key `key` takes; a UserError for keys a sweep cannot vary."""
    check_key(key, "sweep")
    if key in NOT_SWEPT:
        why = (
            "the seeds are the noise the sweep measures (use --seeds)"
            if key == "seed"
            else "it changes nothing a sweep could measure"
        )
        raise UserError(f"sweep: {key!r} cannot be swept: {why}; sweep e.g. lr, warmup_steps or weight_decay")
    allowed = list(key_types(key))
    if allowed == [float]:
        return float
    if allowed == [int]:
        return int
    names = " or ".join(getattr(t, "__name__", str(t)) for t in allowed)
    raise UserError(
        f"sweep: {key!r} is a {names} key; a sweep needs a numeric (int or float) key such as lr, warmup_steps or d_model"
    )


def parse_values(key: str, values: str | Sequence[object], option: str = "--values") -> tuple[float, ...]:
    """The values of `key` ("1e-4,3e-4,1e-3" or a list), typed like the config key, distinct, sorted."""
    kind = _numeric_type(key)
    items = [v.strip() for v in values.split(",")] if isinstance(values, str) else [str(v).strip() for v in values]
    items = [v for v in items if v]
    out: list[float] = []
    for text in items:
        try:
            value = parse_overrides([f"{key}={text}"])[key]
        except UserError:
            raise UserError(
                f"{option}: {text!r} is not a valid {kind.__name__} for {key}; "
                f"e.g. {option} {'1e-4,3e-4,1e-3' if kind is float else '2,4,8'}"
            ) from None
        if value is None or not math.isfinite(value):  # type: ignore[arg-type]
            raise UserError(f"{option}: {text!r} is not a finite number; a sweep value of {key} is a {kind.__name__}")
        out.append(value)  # type: ignore[arg-type]
    if len(set(out)) < len(out):
        twice = next(v for v in out if out.count(v) > 1)
        raise UserError(f"{option}: {format_value(twice)} is given twice; each value once (add seeds with --seeds)")
    if len(out) < 2:
        raise UserError(
            f"{option}: {len(out)} value(s) for {key}; a sweep needs at least two, comma-separated, "
            f"e.g. {option} {'1e-4,3e-4,1e-3' if kind is float else '2,4,8'}"
        )
    return tuple(sorted(out))


def sweep_spec(
    param: str,
    values: str | Sequence[object],
    log: bool = False,
    seeds: int = 3,
    param2: str | None = None,
    values2: str | Sequence[object] | None = None,
    log2: bool = False,
    metric: str = "val_loss",
    maximize: bool = False,
    next_k: int = 3,
    name: str = "sweep",
) -> SweepSpec:
    """A SweepSpec from what a user types; every mistake is a one-line UserError, before anything runs."""
    params = [param]
    parsed = [parse_values(param, values, "--values")]
    logs = [log]
    if (param2 is None) != (values2 is None):
        raise UserError("--param2 and --values2 go together: give both for a 2-D sweep, or neither")
    if param2 is not None:
        if param2 == param:
            raise UserError(f"--param2 {param2} is the first parameter again; a 2-D sweep varies two different keys")
        params.append(param2)
        parsed.append(parse_values(param2, values2, "--values2"))  # type: ignore[arg-type]
        logs.append(log2)
    for p, vs, lg, option in zip(params, parsed, logs, ("--log", "--log2")):
        if lg and min(vs) <= 0:
            raise UserError(
                f"{option}: {p} has the value {format_value(min(vs))}, and a log scale needs values > 0; "
                f"drop {option} or the value"
            )
    if seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {seeds}; use 3 to measure the seed noise")
    if next_k < 0:
        raise UserError(f"--next must be >= 0, got {next_k}")
    if metric not in FINAL_METRICS:
        raise UserError(f"--metric {metric!r} is not a final metric runs record; choose one of {', '.join(FINAL_METRICS)}")
    check_group_name(name)
    integer = tuple(_numeric_type(p) is int for p in params)
    spec = SweepSpec(tuple(params), tuple(parsed), tuple(logs), integer, seeds, metric, maximize, next_k, name)
    groups: dict[str, tuple[float, ...]] = {}
    for point in spec.points:
        group = check_group_name(spec.group(point), "--name")
        if group in groups:  # 4 significant digits name the runs
            raise UserError(
                f"values {groups[group]} and {point} both name their runs {group!r}; space them further "
                "apart (4 significant digits tell values apart)"
            )
        groups[group] = point
    return spec


# ---- running the grid -------------------------------------------------------------------------------


@dataclass
class SweepResult(Record):
    name: str  # the sweep's id: <name>-<param>[-<param2>]
    folder: Path  # <runs_dir>/sweeps/<name>: sweep.json (and the CLI's sweep.png)
    analysis: SweepAnalysis
    overrides: list[str]  # the --set overrides every run shares
    seeds: list[int]
    executor: str
    jobs: int
    trained: int  # runs trained now
    reused: int  # finished or diverged runs found from an earlier sweep of the same name
    seconds: float

    @property
    def json_path(self) -> Path:
        return self.folder / "sweep.json"

    @property
    def plot_path(self) -> Path:
        return self.folder / "sweep.png"


OnRun = Callable[[int, int, JobOutcome], None]  # (runs done, runs to train, the outcome)


def _check_reusable(group: str, expected: dict, runs_dir: str) -> None:
    """A UserError when group's finished runs were trained with another config than this sweep's."""
    if not existing_seeds(group, runs_dir):
        return
    for config in load_group(group, runs_dir).configs:
        differ = [
            f"{k}: {config[k]!r} there, {expected[k]!r} now"
            for k in sorted(set(config) & set(expected))
            if k not in IGNORED_KEYS and config[k] != expected[k]
        ]
        if differ:
            raise UserError(
                f"group {group!r} already has runs with another config ({'; '.join(differ[:3])}); "
                "give this sweep another --name, or delete those runs"
            )


def _point_overrides(spec: SweepSpec, base: list[str], point: Sequence[float]) -> list[str]:
    return [*base, *(f"{p}={v!r}" for p, v in zip(spec.params, point))]


def _collect(spec: SweepSpec, point: Sequence[float], seeds: list[int], runs_dir: str) -> SweepPoint:
    group = spec.group(point)
    finished = set(existing_seeds(group, runs_dir))
    diverged = sorted(set(seeds) & set(existing_seeds(group, runs_dir, ("diverged",))) - finished)
    if not finished & set(seeds):
        return SweepPoint(tuple(point), group, [], [], diverged)
    g = load_group(group, runs_dir)
    if spec.metric not in g.metrics:
        raise UserError(f"metric {spec.metric!r} is missing in group {group!r}; it has: {', '.join(g.metrics)}")
    chosen = [i for i, s in enumerate(g.seeds) if s in seeds]
    return SweepPoint(
        tuple(point),
        group,
        [g.seeds[i] for i in chosen],
        [g.metrics[spec.metric].values[i] for i in chosen],
        diverged,
        [str(g.runs[i]) for i in chosen],
    )


def run_sweep(
    spec: SweepSpec,
    overrides: Sequence[str] = (),
    executor: str = "local",
    jobs: int = 1,
    on_run: OnRun | None = None,
    on_start: Callable[[int, int], None] | None = None,
    slurm: SlurmResources | None = None,
) -> SweepResult:
    """Train every grid point of `spec` on seeds S..S+n-1 (S from --set seed=, default 1337) through the
    executor, reusing finished (and diverged) runs of the same groups, then analyse. on_start(runs to
    train, runs reused) once everything is validated; on_run as each run ends; `slurm`: each SLURM job's
    resources (executor "slurm" only). A diverged run is recorded and left out of the fit; a run that fails
    otherwise is a UserError once the running ones end. Writes nothing but the runs: see write_sweep."""
    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    if executor not in EXECUTORS:
        raise UserError(f"--executor must be local, debug or slurm, got {executor!r}")
    base = list(overrides)
    keys = [kv.split("=", 1)[0].strip() for kv in base]
    for p, option in zip(spec.params, ("--values", "--values2")):
        if p in keys:
            raise UserError(f"--set {p}=... sets a parameter the sweep varies; give its values with {option} only")
    cfg = make_config(overrides=base)  # validate before starting anything
    if slurm is not None and executor != "slurm":
        raise UserError(f"SLURM resources are for --executor slurm, not --executor {executor}")
    seeds = [cfg.seed + i for i in range(spec.seeds)]
    per_run = per_run_overrides(base)
    todo: list[SeedJob] = []
    reused = 0
    for point in spec.points:
        group = spec.group(point)
        point_overrides = _point_overrides(spec, per_run, point)
        try:
            point_cfg = make_config(overrides=[*point_overrides, f"group={group}"])
            if slurm is not None:
                slurm.check_config(point_cfg)  # before anything is submitted
            expected = point_cfg.to_dict()
        except UserError as e:
            value = ", ".join(f"{p}={format_value(v)}" for p, v in zip(spec.params, point))
            raise UserError(f"sweep value {value}: {e}") from None
        _check_reusable(group, expected, cfg.runs_dir)
        done = set(existing_seeds(group, cfg.runs_dir, ("finished", "diverged")))
        reused += len(done & set(seeds))
        todo += [SeedJob(point_overrides, s, group) for s in seeds if s not in done]
    todo.sort(key=lambda job: seeds.index(job.seed))  # every value's first seed before any value's second
    runner = make_executor(executor, jobs, cfg.runs_dir, spec.sweep_id, slurm)  # refused before anything starts
    prepare_trackers(cfg)
    if on_start:
        on_start(len(todo), reused)
    start = time.perf_counter()
    count = 0

    def finished(outcome: JobOutcome) -> None:
        nonlocal count
        outcome.raise_if_failed()
        count += 1
        if on_run:
            on_run(count, len(todo), outcome)

    if todo:
        runner.run(todo, finished)
    seconds = time.perf_counter() - start
    points = [_collect(spec, point, seeds, cfg.runs_dir) for point in spec.points]
    analysis = analyse_sweep(spec.params, points, spec.log, spec.maximize, spec.next_k, spec.metric, spec.integer)
    return SweepResult(
        spec.sweep_id,
        Path(cfg.runs_dir) / "sweeps" / spec.sweep_id,
        analysis,
        base,
        seeds,
        executor,
        jobs,
        len(todo),
        reused,
        seconds,
    )


def sweep_record(result: SweepResult) -> dict:
    """The sweep as plain JSON values: what sweep.json holds (version 1) and --json prints."""
    record = {
        "version": 1,
        "name": result.name,
        "folder": result.folder,
        "plot": "sweep.png",
        "overrides": result.overrides,
        "seeds": result.seeds,
        "executor": result.executor,
        "jobs": result.jobs,
        "trained": result.trained,
        "reused": result.reused,
        "seconds": result.seconds,
        "analysis": asdict(result.analysis),
    }
    for point, raw in zip(result.analysis.points, record["analysis"]["points"]):
        raw.update(mean=point.mean, std=point.std)
    return to_jsonable(record)


def write_sweep(result: SweepResult) -> Path:
    """Write <folder>/sweep.json atomically (a report reads it); its path."""
    result.folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(result.json_path, sweep_record(result))
    return result.json_path


def read_sweep(folder: str | Path) -> dict:
    """A sweep folder's sweep.json, as written by write_sweep."""
    path = Path(folder) / "sweep.json"
    if not path.is_file():
        raise UserError(f"{folder}: no sweep.json; run nanolm sweep first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
