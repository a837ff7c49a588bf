"""``nanolm repro check``: train the same config twice with the same seed and compare the loss
curves and the final weights bit for bit."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

import torch

from ..checkpoint import load_trained_model
from ..config import make_config
from ..device import autocast_dtype, resolve_device
from ..runs import read_metrics
from ..training.driver import train


@dataclass
class ReproCheck:
    identical: bool
    steps: int
    first_divergent_step: int | None  # first step whose training loss differs
    loss_a: float | None  # at that step, in the two runs
    loss_b: float | None
    tensor: str | None  # the final weight with the largest |difference|
    max_abs_diff: float  # of that tensor
    tensors_differing: int
    causes: list[str] = field(default_factory=list)  # where to look, most likely first


def likely_causes(overrides: dict, autocast_on: bool = False) -> list[str]:
    """The usual causes of a nondeterministic run, those this config makes likely first; autocast_on:
    the runs trained under autocast (what config autocast="auto" means depends on the device)."""
    causes = []
    if overrides.get("deterministic") is not True:  # "warn" still runs the nondeterministic kernels
        causes.append(
            "nondeterministic kernels (atomic adds in another order): rerun with --deterministic, "
            "which sets torch.use_deterministic_algorithms(True)"
        )
    if overrides.get("num_workers"):
        causes.append(
            f"data order with {overrides['num_workers']} DataLoader workers: seed each worker "
            "(worker_init_fn) and give the loader its own torch.Generator"
        )
    if autocast_on:
        causes.append("autocast / reduced precision: bf16 sums in a different order differ in the last bits")
    causes.append(
        "an unseeded generator in the data path or the model (numpy.random.default_rng() without a "
        "seed, random.Random(), torch.Generator() without manual_seed)"
    )
    return causes


def repro_check(overrides: list[str] | None = None, steps: int = 20, progress: bool = False) -> ReproCheck:
    """Train twice (same config, same seed) and compare every step's loss and the final weights."""
    cfg_overrides = [*(overrides or []), f"steps={steps}", "log_every=1", f"eval_every={steps}", f"ckpt_every={steps}"]
    with tempfile.TemporaryDirectory(prefix="nanolm-repro-") as tmp:
        runs = []
        for name in ("repro-a", "repro-b"):
            cfg = make_config(overrides=[*cfg_overrides, f"runs_dir={tmp}"], name=name)
            runs.append(train(cfg, progress=progress).run_dir)
        curves = [{r["step"]: r.get("train_loss") for r in read_metrics(run)} for run in runs]
        models = [load_trained_model(run)[0] for run in runs]
    # A step logged by one run and not the other is a divergence too (None differs from any loss).
    first = next(
        (
            (s, curves[0].get(s), curves[1].get(s))
            for s in sorted(set(curves[0]) | set(curves[1]))
            if curves[0].get(s) != curves[1].get(s)
        ),
        None,
    )
    diffs = {
        name: float((p.double() - q.double()).abs().max())
        for (name, p), (_, q) in zip(models[0].state_dict().items(), models[1].state_dict().items())
        if not torch.equal(p, q)
    }
    worst = max(diffs, key=diffs.get) if diffs else None
    identical = first is None and not diffs
    autocast_on = autocast_dtype(cfg.autocast, resolve_device(cfg.device)) is not None
    return ReproCheck(
        identical,
        steps,
        first[0] if first else None,
        first[1] if first else None,
        first[2] if first else None,
        worst,
        diffs.get(worst, 0.0) if worst else 0.0,
        len(diffs),
        [] if identical else likely_causes(cfg.to_dict(), autocast_on),
    )
