"""``nanolm demo``: the main job of ``make demo``. Train the tiny preset on the embedded corpus,
then sample from it. Later parts (profile, logit lens) add their sections here."""

from __future__ import annotations

from dataclasses import dataclass

from .config import make_config
from .sampling import Completion, complete
from .train import TrainResult, train


@dataclass
class DemoResult:
    train: TrainResult
    samples: list[Completion]


def run_demo(overrides: list[str], prompts: list[str], progress: bool = True) -> DemoResult:
    cfg = make_config(overrides=overrides, name="demo")
    result = train(cfg, progress=progress)
    return DemoResult(result, complete(result.run_dir, prompts, max_new_tokens=20, seed=0))
