"""``nanolm demo``: the main job of ``make demo``. Train the tiny preset on the embedded corpus,
sample from it, then profile a few of its training steps (where the time goes, and MFU)."""

from __future__ import annotations

from dataclasses import dataclass

from .config import make_config
from .profiling.analysis import ProfileReport
from .sampling import Completion, complete
from .train import TrainResult, train


@dataclass
class DemoResult:
    train: TrainResult
    samples: list[Completion]
    profile: ProfileReport | None


def run_demo(overrides: list[str], prompts: list[str], progress: bool = True, profile: bool = True) -> DemoResult:
    from .profiling.profile import profile_training
    from .profiling.session import Window

    cfg = make_config(overrides=overrides, name="demo")
    result = train(cfg, progress=progress)
    samples = complete(result.run_dir, prompts, max_new_tokens=20, seed=0)
    report = (profile_training(overrides, Window(wait=1, warmup=1, active=3, repeat=3),
                               trace=result.run_dir / "profile-trace.json") if profile else None)
    return DemoResult(result, samples, report)
