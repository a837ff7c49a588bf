"""``nanolm demo``: the main job of ``make demo``. Train the tiny preset on the embedded corpus,
sample from it, check what it learned of the corpus's arithmetic (the reference document's logit-lens
example is "two plus two equals"), then profile a few of its training steps (where the time goes, and MFU). The
profile is kept in the run, RUN/profiles/<time>.json with its trace beside it, as ``nanolm profile --run RUN``
keeps one, so the run's page (``nanolm report RUN``) shows it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .checkpoint import load_trained_model
from .config import make_config
from .corpus import arithmetic_facts
from .io import atomic_write_json
from .model import GPT
from .profiling.report import ProfileReport
from .runs import PROFILES
from .sampling import Completion, complete
from .tokenizers import Tokenizer
from .train import TrainResult, train


@dataclass
class ArithmeticCheck:
    """Greedy answers to every arithmetic fact of the corpus, each read at a line's start as in training."""

    facts: int
    right: int
    wrong_examples: list[tuple[str, str, str]]  # (prompt, right answer, the model's answer), up to 5
    example: tuple[str, str, str]  # "two plus two equals": (prompt, right answer, the model's answer)

    @property
    def accuracy(self) -> float:
        return self.right / self.facts


@dataclass
class DemoResult:
    train: TrainResult
    samples: list[Completion]
    arithmetic: ArithmeticCheck
    profile: ProfileReport | None
    profile_path: Path | None = None  # where the profile is kept in the run (RUN/profiles/<time>.json)


@torch.no_grad()
def check_arithmetic(model: GPT, tokenizer: Tokenizer, example: str = "two plus two equals") -> ArithmeticCheck:
    """The model's greedy next word after each fact's prompt ("three plus four equals"), against the answer."""
    facts = arithmetic_facts()
    start = [tokenizer.eos_id] if tokenizer.eos_id is not None else []  # a line starts after <eos>
    x = torch.tensor([start + tokenizer.encode(f.prompt) for f in facts], device=next(model.parameters()).device)
    got = [tokenizer.decode([int(i)]).strip() for i in model(x)[0][:, -1].argmax(-1)]  # all prompts: 4 words
    answers = {f.prompt: (f.answer, g) for f, g in zip(facts, got)}
    wrong = [(p, want, g) for p, (want, g) in answers.items() if g != want]
    return ArithmeticCheck(len(facts), len(facts) - len(wrong), wrong[:5], (example, *answers[example]))


def run_demo(overrides: list[str], prompts: list[str], progress: bool = True, profile: bool = True) -> DemoResult:
    from .profiling.record.session import Window
    from .profiling.record.training import profile_training

    cfg = make_config(overrides=overrides, name="demo")
    result = train(cfg, progress=progress)
    samples = complete(result.run_dir, prompts, max_new_tokens=20, seed=0)
    model, tokenizer, _ = load_trained_model(result.run_dir)
    arithmetic = check_arithmetic(model, tokenizer)
    if not profile:
        return DemoResult(result, samples, arithmetic, None)
    kept = PROFILES.timestamped(result.run_dir)  # where the run's page reads its profiles
    report = profile_training(
        overrides, Window(wait=1, warmup=1, active=3, repeat=3), trace=kept.with_name(f"{kept.stem}-trace.json")
    )
    atomic_write_json(kept, report.to_dict())
    return DemoResult(result, samples, arithmetic, report, kept)
