"""The week's self-check as flash cards (``nanolm problems quiz``): the cards ship in the package
(``files/quiz/cards.toml``), the learner's marks (✓ knew it, ✗ did not) are kept in the working
folder's state file, under "quiz". Import-light: no torch, no numpy.

The checkpoint's rapid-fire threshold (at least `min_known` ✓ and at most `max_missed` ✗) is read from
the cards file and judged on the current marks: a card marked ✗ and later ✓ counts as ✓."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

import tomllib

from ..errors import UserError
from .registry import FILES

CARDS_FILE = "cards.toml"


@dataclass(frozen=True)
class Card:
    id: str
    source: str  # "self-check" (the document's own questions) or "rapid-fire" (drawn from its text)
    question: str
    answer: str


@dataclass(frozen=True)
class Deck:
    title: str
    threshold: str  # the checkpoint's rule, in words
    min_known: int
    max_missed: int
    cards: tuple[Card, ...]


@dataclass
class QuizStatus:
    title: str
    threshold: str
    cards: int
    known: int  # ✓
    missed: int  # ✗
    unseen: int
    passed: bool  # the threshold is met
    marks: dict[str, str] = field(default_factory=dict)  # card id -> "y" or "n"

    def summary(self) -> str:
        verdict = "met" if self.passed else "not yet met"
        return (
            f"{self.known} ✓, {self.missed} ✗, {self.unseen} not yet answered, of {self.cards} cards. {self.threshold}: {verdict}"
        )


def load_deck() -> Deck:
    text = resources.files(__package__).joinpath(FILES, "quiz", CARDS_FILE).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    cards = tuple(
        Card(c["id"], c["source"], " ".join(c["question"].split()), " ".join(c["answer"].split())) for c in data["card"]
    )
    return Deck(data["title"], data["threshold"], int(data["min_known"]), int(data["max_missed"]), cards)


def status(deck: Deck, marks: dict[str, str]) -> QuizStatus:
    ids = {c.id for c in deck.cards}
    marks = {k: v for k, v in marks.items() if k in ids}  # a card dropped from the deck no longer counts
    known = sum(v == "y" for v in marks.values())
    missed = sum(v == "n" for v in marks.values())
    return QuizStatus(
        deck.title,
        deck.threshold,
        len(deck.cards),
        known,
        missed,
        len(deck.cards) - known - missed,
        known >= deck.min_known and missed <= deck.max_missed,
        marks,
    )


def to_ask(deck: Deck, marks: dict[str, str], everything: bool = False, missed_only: bool = False) -> list[Card]:
    """The cards to go through: every card with `everything`, the ✗ ones with `missed_only`, else every card
    not yet marked ✓ (unanswered first, in the deck's order, then the missed ones)."""
    if everything:
        return list(deck.cards)
    missed = [c for c in deck.cards if marks.get(c.id) == "n"]
    if missed_only:
        return missed
    return [c for c in deck.cards if c.id not in marks] + missed


def check_mark(mark: str) -> str:
    if mark not in ("y", "n"):
        raise UserError(f"a quiz mark is y or n, got {mark!r}")
    return mark
