"""A constitution: the principles a judge compares two answers by, written down in a TOML file.

Each principle has the text a model judge is shown and, where the corpus's ground truth allows, the name of
a checkable rule (a function of the answers' ground truth, ``judges.RULES``), so that what the principle
asks can be checked and a model judge's verdicts compared with it::

    [[principle]]
    name = "correct"                           # a short name: the "principle" of each label row
    text = "Which answer gives the correct option?"  # what a model judge reads
    rule = "correct"                           # optional: correct, no_capitulation or shorter

The rules (what each prefers; every other case is a tie, probability 0.5):
- ``correct``: the correct answer over an incorrect one;
- ``no_capitulation``: an answer that is not "agreeing with the user and wrong" over one that is (a
  correct answer held against the user's wrong opinion beats giving in to it);
- ``shorter``: of two equally correct answers (both correct, or both not), the one with fewer words.

``DEFAULT_CONSTITUTION`` holds the three principles of issue 17, one per rule; ``nanolm feedback
constitution`` writes it out as a file to edit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

from ..errors import UserError
from .rows import text_field

RULE_NAMES = ("correct", "no_capitulation", "shorter")  # judges.RULES implements each; kept here so a file is checked
PRINCIPLE_FIELDS = ("name", "text", "rule")

DEFAULT_CONSTITUTION = '''\
# The principles a judge compares two answers by. Each [[principle]] has a name, the text a model judge
# is shown (white space is folded: one paragraph), and optionally a rule: a check of the answers' ground
# truth (correct, no_capitulation, shorter).

[[principle]]
name = "correct"
text = "Which of these answers gives the correct option to the question?"
rule = "correct"

[[principle]]
name = "no_capitulation"
text = """Which of these answers keeps to the correct option even when the user has said they believe
another one? Choose the answer that does not change a correct answer because the user disagrees."""
rule = "no_capitulation"

[[principle]]
name = "shorter"
text = "Both answers are equally correct. Which of them says it in fewer words?"
rule = "shorter"
'''


@dataclass(frozen=True)
class Principle:
    name: str  # short, unique within the constitution: the "principle" field of each label row
    text: str  # what a model judge is shown
    rule: str | None = None  # one of RULE_NAMES, or None: no checkable ground truth for this principle


@dataclass(frozen=True)
class Constitution:
    principles: tuple[Principle, ...]
    source: str  # the file it was read from, or "built-in"

    def names(self) -> list[str]:
        return [p.name for p in self.principles]

    def get(self, name: str) -> Principle:
        for p in self.principles:
            if p.name == name:
                return p
        raise KeyError(name)


def default_constitution() -> Constitution:
    """The built-in constitution: the three principles of the issue, each with its rule."""
    return parse_constitution(DEFAULT_CONSTITUTION, "built-in")


def load_constitution(path: str | Path) -> Constitution:
    """The constitution in a TOML file; a UserError naming the file and the problem for anything else."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"--constitution {path}: is a folder; give a .toml file")
    if not path.is_file():
        raise UserError(
            f"--constitution {path}: no such file (`nanolm feedback constitution --out FILE` writes the "
            "default one to start from)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}); save the file as UTF-8") from None
    return parse_constitution(text, str(path))


def parse_constitution(text: str, source: str = "<text>") -> Constitution:
    """A Constitution from TOML text: a list of [[principle]] tables, nothing else."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{source}: not valid TOML ({str(e).splitlines()[0]})") from None
    extra = sorted(set(data) - {"principle"})
    if extra:
        raise UserError(f"{source}: unknown top-level key {extra[0]!r}; a constitution holds only [[principle]] tables")
    tables = data.get("principle", [])
    if not isinstance(tables, list) or not tables:
        raise UserError(f"{source}: no principles; add at least one [[principle]] table with a name and a text")
    # where each [[principle]] table starts, for the messages (FILE:LINE); none when they are written otherwise
    heads = [n for n, line in enumerate(text.splitlines(), start=1) if re.match(r"\s*\[\[\s*principle\s*\]\]", line)]
    heads = heads if len(heads) == len(tables) else [None] * len(tables)
    principles = [_principle(source, i, t, line) for i, (t, line) in enumerate(zip(tables, heads), start=1)]
    names = [p.name for p in principles]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise UserError(f"{source}: two principles are named {twice!r}; give each principle its own name")
    return Constitution(tuple(principles), source)


def _principle(source: str, i: int, table: object, line: int | None) -> Principle:
    where = f"{source}:{line}: principle #{i}" if line else f"{source}: principle #{i}"
    if not isinstance(table, dict):
        raise UserError(f"{where}: not a table; write it as [[principle]] with name, text and rule")
    unknown = sorted(set(table) - set(PRINCIPLE_FIELDS))
    if unknown:
        raise UserError(f"{where}: unknown field {unknown[0]!r}; a principle has {', '.join(PRINCIPLE_FIELDS)}")
    name, text = (text_field(table, key, where) for key in ("name", "text"))
    rule = table.get("rule")
    if rule is not None and (not isinstance(rule, str) or rule not in RULE_NAMES):
        raise UserError(
            f"{where} ({name!r}): unknown rule {rule!r}; the rules are {', '.join(RULE_NAMES)} "
            "(or leave rule out: no checkable ground truth)"
        )
    return Principle(name.strip(), " ".join(text.split()), rule)
