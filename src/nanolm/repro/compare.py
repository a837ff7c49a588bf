"""``nanolm compare``: two seed groups, checked for comparability, then the noise-aware verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import check_key
from ..errors import UserError
from .seeds import IGNORED_KEYS, Group, load_group
from .stats import Comparison, compare_groups


@dataclass
class GroupComparison:
    group_a: str
    group_b: str
    metric: str
    comparison: Comparison
    config_differences: dict[str, tuple[object, object]]  # key -> (A's value, B's value)
    warnings: list[str] = field(default_factory=list)


def _config(group: Group) -> dict:
    return {k: v for k, v in group.configs[0].items() if k not in IGNORED_KEYS}


def compare_run_groups(
    a: str,
    b: str,
    metric: str = "val_loss",
    higher_is_better: bool = False,
    declared: list[str] | None = None,
    runs_dir: str | Path = "runs",
) -> GroupComparison:
    for key in declared or []:
        check_key(key, "--change")
    ga, gb = load_group(a, runs_dir), load_group(b, runs_dir)
    # The baseline's spread is the noise every verdict is measured against, so it needs two runs; a
    # single candidate run is legal and gets the verdict "too few seeds" (the reference example).
    if len(ga.runs) < 2:
        raise UserError(
            f"baseline group {ga.name!r} has {len(ga.runs)} finished run, so its seed noise is unknown; "
            f"measure it first: nanolm seeds --n 3 --name {ga.name}"
        )
    for g in (ga, gb):
        if metric not in g.metrics:
            raise UserError(f"metric {metric!r} is missing in group {g.name!r}; it has: {', '.join(g.metrics)}")
    versions = set(ga.data_versions) | set(gb.data_versions)
    if len(versions) > 1:
        raise UserError(
            f"the groups trained on different data ({'; '.join(sorted(versions))}); "
            "compare groups trained on the same data version"
        )
    ca, cb = _config(ga), _config(gb)
    differences = {k: (ca.get(k), cb.get(k)) for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)}
    warnings = [f"skipped {line}" for line in dict.fromkeys(ga.skipped + gb.skipped)]
    if a == b:
        warnings.append(
            f"group {a!r} is compared with itself: the verdict can only be 'within noise'; "
            "give the baseline and the candidate groups"
        )
    for g in (ga, gb):
        if g.excluded:
            warnings.append(
                f"group {g.name!r} leaves out {len(g.excluded)} run(s) that did not finish, so its "
                f"{len(g.runs)} seeds may look better than the config is: {'; '.join(g.excluded)}"
            )
        if g.mixed:
            warnings.append(f"group {g.name!r} mixes configs, so its spread is not seed noise alone: {'; '.join(g.mixed)}")
    undeclared = {k: v for k, v in differences.items() if k not in (declared or [])}
    if declared is not None and len(undeclared) > (0 if declared else 1):
        listed = "; ".join(f"{k}: {va!r} vs {vb!r}" for k, (va, vb) in undeclared.items())
        warnings.append(f"the configs differ in more than the declared change: {listed}")
    comparison = compare_groups(ga.metrics[metric].values, gb.metrics[metric].values, higher_is_better)
    return GroupComparison(a, b, metric, comparison, differences, warnings)
