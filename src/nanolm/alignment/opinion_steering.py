"""Steering the flip rate: a direction for "follow the user's opinion", and sycophancy measured with it added.

The direction is CAA's (Rimsky/Panickssery et al.): for questions asked with a wrong user opinion, the
residual stream at the answer token when the answer is the user's option, minus the same when it is the
correct option, averaged over questions (interp.steering.build_directions on these pairs; rescaled to the
mean residual norm at the layer, so α = 1 adds a vector as long as the residual). Adding α·v̂ at every
position of every prompt, then measuring as nanolm.alignment.sycophancy.measure does, gives the flip rate
as a function of α: positive α should raise it, negative α lower it, if the direction is what the model
uses to follow opinions.

The direction is built from other questions than those measured (the corpus's questions of another seed),
so the flip rate is not read on the texts that made the vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..interp.steering import ContrastSet, DirectionInfo, build_directions, join_option
from ..interp.view import ModelView
from ..records import Record
from .questions import QuestionSet
from .stats import MeanEstimate, Rate
from .sycophancy import measure


def opinion_contrast(qs: QuestionSet) -> ContrastSet:
    """The pairs of every question asked with a wrong opinion: its prompt followed by the user's option
    (positive: following the opinion) and by the correct option (negative)."""
    pairs = [
        (q.prompts["wrong"], q.options[q.wrong_opinion], q.options[q.correct])
        for q in qs.questions
        if "wrong" in q.prompts and q.wrong_opinion is not None and q.correct is not None
    ]
    return ContrastSet(
        "opinion",
        "follows the user",
        "correct",
        [join_option(p, a) for p, a, _ in pairs],
        [join_option(p, b) for p, _, b in pairs],
        pairs,
        qs.source,
    )


@dataclass
class SteeredFlip:
    """Sycophancy with α·v̂ added: one row of the table."""

    alpha: float
    added_norm: float  # ‖α·v̂‖, residual units
    accuracy: Rate  # no opinion
    wrong_accuracy: Rate  # with the wrong opinion
    flip_rate: Rate | None  # flipped to wrong / correct without an opinion (at this α)
    flip_probability: MeanEstimate | None
    are_you_sure: Rate | None


@dataclass
class FlipSteering(Record):
    direction: DirectionInfo
    questions: int  # measured at each α
    rows: list[SteeredFlip]


def steer_flip_rate(
    view: ModelView, qs: QuestionSet, direction_qs: QuestionSet, layer: str, alphas: Sequence[float], batch_size: int = 64
) -> FlipSteering:
    """The flip rate (and the rest of the measure) of qs at each α, the opinion direction built from
    direction_qs at layer added at every position of every prompt."""
    d = build_directions(view, "opinion", [layer], contrast=opinion_contrast(direction_qs))
    direction = next(iter(d.values()))
    unit = direction.unit  # [D]
    rows = []
    for alpha in alphas:
        add = (alpha * unit).detach()

        def shift(x: torch.Tensor, add: torch.Tensor = add) -> torch.Tensor:
            return x + add.to(x.dtype)

        with view.hooks({direction.info.hook: shift} if alpha else {}):
            r = measure(view, qs, knows=False, batch_size=batch_size)
        rows.append(
            SteeredFlip(
                alpha,
                direction.info.added_norm(alpha),
                r.accuracy["none"],
                r.accuracy["wrong"],
                r.flip_rate,
                r.flip_probability,
                r.are_you_sure,
            )
        )
    return FlipSteering(direction.info, len(qs.questions), rows)
