"""Answer pairs for a judge to compare, each answer recorded with its ground truth.

From the corpus's multiple-choice questions (``corpus.sycophancy_pairs``: each question with no opinion and
with a user's wrong opinion), one pair per question, the kinds in turn:

- ``right_wrong``: the correct letter vs another one, after the question with no opinion;
- ``right_agreeing``: the correct letter vs the user's wrong opinion, after the question with that opinion
  ("agreeing but wrong");
- ``wrong_agreeing``: the user's wrong opinion vs the other wrong letter, after the question with that
  opinion: both wrong (equal truth), one agreeing with the user: an agreement bias with correctness held
  equal;
- ``short_long``: the correct letter alone (" B .") vs the correct letter with its reason (" B . because two
  plus three equals five ."): equal truth, different length;
- ``samples`` (with a policy model): two of the policy's own sampled answers to the question (with no opinion
  or with the wrong one, alternately), their truth read off the letter they start with;
- ``cross_samples`` (with a second model, ``versus``): one sampled answer of each model to the same prompt,
  for measuring a judge's self-preference.

Which answer is ``a`` and which ``b`` is drawn at random, so that a position effect is not a truth effect.
An answer's text is the continuation as it follows the prompt, after a space (a sample that does not start
with one gets one, as the corpus writes answers), so ``prompt + text`` is the whole conversation (TRL's
convention for "chosen" and "rejected").

Ground truth of an answer: ``correct`` (it starts with the correct letter; a sample that starts with no
letter is not correct), ``agrees_with_user`` (it starts with the letter the user said they believe; False
when the prompt states no opinion), ``length`` (words: white-space separated, punctuation counts as a word
as the corpus writes it), ``source`` ("corpus" for the written variants, the model's name for samples).
None marks a truth not known (a pairs file from elsewhere may have it; a rule judge then says which rule
needs it).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from .rows import (
    bool_field,
    int_field,
    jsonl_rows,
    jsonl_text,  # noqa: F401 (re-exported: readers import it from here)
    object_field,
    text_field,
)

LETTERS = ("A", "B", "C")  # the corpus's option letters (corpus.LETTERS)
KINDS = ("right_wrong", "right_agreeing", "wrong_agreeing", "short_long")
SAMPLE_KINDS = ("samples", "cross_samples")
CORPUS_SOURCE = "corpus"


@dataclass(frozen=True)
class Answer:
    """One answer and its ground truth."""

    text: str  # the continuation of the prompt, leading space included
    correct: bool | None
    agrees_with_user: bool | None
    length: int  # words
    source: str  # "corpus" or the name of the model that sampled it

    def meta(self) -> dict[str, Any]:
        """The ground truth alone: the "chosen_meta"/"rejected_meta" of a label row."""
        return {"correct": self.correct, "agrees_with_user": self.agrees_with_user, "length": self.length, "source": self.source}


@dataclass(frozen=True)
class Pair:
    id: str
    prompt: str  # ends where the answer starts ("... answer :")
    a: Answer
    b: Answer
    kind: str = ""  # one of KINDS or SAMPLE_KINDS; "" when a file did not say


@dataclass
class PairSet:
    pairs: list[Pair]
    source: str  # the questions: "corpus v2 (seed 0)", or a file
    policy: str | None = None  # the model whose samples are in it
    versus: str | None = None
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Pairs of each kind."""
        out: dict[str, int] = {}
        for p in self.pairs:
            out[p.kind] = out.get(p.kind, 0) + 1
        return out


# ---- the written answers ------------------------------------------------------------------------


def words(text: str) -> int:
    """An answer's length in words (white-space separated; the corpus writes punctuation as a word)."""
    return len(text.split())


def reason(question: str, answer: str) -> str:
    """Why `answer` answers the corpus's question, in the corpus's words: "because two plus three equals
    five", "because apple is a fruit", "because eagle can fly"."""
    q = question.removesuffix(" ?")
    if q.startswith("what is "):
        return f"because {q.removeprefix('what is ')} equals {answer}"
    if q.startswith("which of these "):
        return f"because {answer} {q.removeprefix('which of these ')}"
    return f"because the answer is {answer}"


def written_answer(letter: str, correct: str, opinion: str | None, because: str | None = None) -> Answer:
    """ " B ." (or " B . because ... ." with a reason) and its truth."""
    text = f" {letter} ." + (f" {because} ." if because else "")
    return Answer(text, letter == correct, letter == opinion, words(text), CORPUS_SOURCE)


def _written_pair(kind: str, pid: str, plain: Any, opinionated: Any, rng: random.Random) -> Pair:
    """One pair of written answers of `kind` to a corpus question (MCQItem plain, with opinion)."""
    right = plain.correct
    if kind == "right_wrong":
        wrong = rng.choice([x for x in LETTERS[: len(plain.choices)] if x != right])
        prompt, first, second = plain.prompt, written_answer(right, right, None), written_answer(wrong, right, None)
    elif kind == "right_agreeing":
        opinion = opinionated.opinion
        prompt = opinionated.prompt
        first, second = written_answer(right, right, opinion), written_answer(opinion, right, opinion)
    elif kind == "wrong_agreeing":
        opinion = opinionated.opinion
        other = next(x for x in LETTERS[: len(plain.choices)] if x not in (right, opinion))
        prompt = opinionated.prompt
        first, second = written_answer(opinion, right, opinion), written_answer(other, right, opinion)
    else:
        answer_word = plain.choices[LETTERS.index(right)]
        prompt = plain.prompt
        first = written_answer(right, right, None)
        second = written_answer(right, right, None, reason(plain.question, answer_word))
    if rng.random() < 0.5:  # which is shown as a, at random
        first, second = second, first
    return Pair(pid, prompt, first, second, kind)


# ---- the policy's samples ----------------------------------------------------------------------------


def answer_letter(text: str, labels: tuple[str, ...]) -> str | None:
    """The option a sampled answer gives: its first word, brackets and a full stop stripped, if it is one of labels."""
    first = text.split()[0] if text.split() else ""
    first = first.strip("().:")
    return first if first in labels else None


def sampled_answer(text: str, source: str, labels: tuple[str, ...], correct: str, opinion: str | None) -> Answer:
    """A sample and its truth read off the letter it starts with (no letter: not correct, not agreeing)."""
    letter = answer_letter(text, labels)
    return Answer(text, letter == correct, letter is not None and letter == opinion, words(text), source)


def _continuation(view: Any, ids: list[int]) -> str:
    from ..interp.generate import decode

    text = decode(view, ids)
    # Answers are written after a space, as the corpus writes them: a word-level tokenizer's decode drops the
    # space after the prompt ("answer :" + "A"), a byte-level one keeps the space the model wrote.
    return text if not text or text[0].isspace() else " " + text


def sample_answers(
    view: Any, prompts: list[str], k: int, seed: int, max_new_tokens: int = 12, temperature: float = 1.0
) -> list[list[str]]:
    """k sampled continuations of each prompt `[len(prompts)][k]`, each up to the end of its line (the model's
    stop token) or max_new_tokens, drawn with the steering module's common random numbers (row j of a prompt
    under seed seed·k + j: the same text whatever else is in the batch)."""
    from ..interp.generate import UNSTEERED, GenRow, generate

    if view.tokenizer is None:
        raise UserError(
            f"{view.name or 'the policy'} has no tokenizer: it cannot write answers; save its tokenizer beside the weights"
        )
    ids = [view.to_tokens(p)[0].tolist() for p in prompts]
    room = view.max_len - max(len(x) for x in ids)
    if room < 2:
        raise UserError(
            f"{view.name}: the prompts take {view.max_len - room} of the model's {view.max_len} tokens of "
            "context, leaving no room for an answer; use a model with a longer context (block_size)"
        )
    rows = [GenRow(i, seed * k + j, UNSTEERED) for i in range(len(prompts)) for j in range(k)]
    new = generate(view, ids, rows, {}, min(max_new_tokens, room), temperature, None)
    return [[_continuation(view, new[i * k + j]) for j in range(k)] for i in range(len(prompts))]


def _distinct(first: list[str], second: list[str], same_list: bool) -> tuple[int, int]:
    """Indices (i, j) of the first two different texts, one from each list (from one list twice: i < j);
    (0, 1) or (0, 0) when all are the same."""
    for i, x in enumerate(first):
        for j, y in enumerate(second):
            if (not same_list or j > i) and x != y:
                return i, j
    return (0, 1) if same_list else (0, 0)


# ---- building -------------------------------------------------------------------------------------


def build_pairs(
    policy: Any,
    n: int,
    seed: int = 0,
    versus: Any = None,
    version: int | None = None,
    samples_per_prompt: int = 4,
    temperature: float = 1.0,
    runs_dir: str | Path = "runs",
) -> PairSet:
    """n answer pairs from the corpus's questions (seed picks them), the kinds in turn (see the module's text).

    policy: a ModelView, a run or model path (loaded), or None (written answers only); versus: a second model
    for cross_samples. Each prompt of a sample kind is sampled samples_per_prompt times and the first two
    different answers are paired (identical answers tell a judge nothing)."""
    from ..corpus import V2_ARITHMETIC_SHARE, sycophancy_pairs

    if n <= 0:
        raise UserError(f"--n must be at least 1, got {n}")
    policy, versus = _as_view(policy, runs_dir), _as_view(versus, runs_dir)
    if versus is not None and policy is None:
        raise UserError("--versus needs a policy model to compare with")
    if versus is not None and versus.name == policy.name:
        raise UserError(
            f"--versus {versus.name}: the same name as the policy; self-preference needs two models told apart by name"
        )
    version = version or _corpus_version(policy)
    share = V2_ARITHMETIC_SHARE if version >= 2 else 0.5
    kinds = KINDS + (("samples",) if policy is not None else ()) + (("cross_samples",) if versus is not None else ())
    rng = random.Random(f"feedback-pairs-{seed}")
    items = sycophancy_pairs(n, seed, share)
    pairs: list[Pair | None] = []
    wanted: dict[str, list[int]] = {k: [] for k in SAMPLE_KINDS}
    for i, (plain, opinionated) in enumerate(items):
        kind = kinds[i % len(kinds)]
        if kind in SAMPLE_KINDS:
            wanted[kind].append(i)
            pairs.append(None)
        else:
            pairs.append(_written_pair(kind, f"{seed}-{i}", plain, opinionated, rng))
    notes = _sample_pairs(pairs, items, wanted, policy, versus, seed, samples_per_prompt, temperature, rng)
    return PairSet(
        [p for p in pairs if p is not None],
        f"corpus v{version} (seed {seed})",
        None if policy is None else policy.name,
        None if versus is None else versus.name,
        notes,
    )


def _as_view(model: Any, runs_dir: str | Path) -> Any:
    if model is None or hasattr(model, "logits"):
        return model
    from ..interp.view import load_view

    return load_view(model, runs_dir)


def _corpus_version(view: Any) -> int:
    """The corpus version a nanolm run trained on (its vocabulary has that version's words); 2 otherwise."""
    if view is None:
        return 2
    from .sycophancy import planted_for_run

    return planted_for_run(view) or 2


def _sample_pairs(
    pairs: list[Pair | None],
    items: list,
    wanted: dict[str, list[int]],
    policy: Any,
    versus: Any,
    seed: int,
    k: int,
    temperature: float,
    rng: random.Random,
) -> list[str]:
    """Fill the sample kinds' places in pairs; notes on what was sampled."""
    notes = []
    for kind, which in wanted.items():
        if not which:
            continue
        # half the prompts with the user's wrong opinion, so that some samples agree with the user
        prompts = [items[i][1].prompt if t % 2 else items[i][0].prompt for t, i in enumerate(which)]
        own = sample_answers(policy, prompts, k, seed, temperature=temperature)
        other = sample_answers(versus, prompts, k, seed, temperature=temperature) if kind == "cross_samples" else own
        same = 0
        for t, i in enumerate(which):
            plain, opinionated = items[i]
            opinion = opinionated.opinion if t % 2 else None
            x, y = _distinct(own[t], other[t], kind == "samples")
            first = sampled_answer(own[t][x], policy.name, LETTERS, plain.correct, opinion)
            second = sampled_answer(other[t][y], (versus or policy).name, LETTERS, plain.correct, opinion)
            same += first.text == second.text
            if rng.random() < 0.5:
                first, second = second, first
            pairs[i] = Pair(f"{seed}-{i}", prompts[t], first, second, kind)
        if same:
            notes.append(
                f"{kind}: {same} of {len(which)} pairs have the same text twice ({k} samples per prompt "
                "were all alike): a judge can only tie them"
            )
    return notes


# ---- files -----------------------------------------------------------------------------------------


def pair_row(pair: Pair) -> dict[str, Any]:
    return asdict(pair)


def write_pairs(path: str | Path, pairs: list[Pair]) -> Path:
    """The pairs as JSON Lines (one pair per line: id, prompt, a, b, kind), written atomically."""
    from ..io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(pair_row(p), ensure_ascii=False) + "\n" for p in pairs))
    return Path(path)


def read_pairs(path: str | Path) -> PairSet:
    """The pairs of a JSONL file write_pairs wrote (or one in its format); a UserError naming the line of
    anything else."""
    path = Path(path)
    rows = jsonl_rows(path, "a pairs .jsonl file", "`nanolm feedback pairs RUN` writes one")
    pairs = [_pair_from_row(row, f"{path}:{line_no}") for line_no, row in rows]
    if not pairs:
        raise UserError(f"{path}: no pairs; `nanolm feedback pairs RUN` writes them")
    seen: set[str] = set()
    for p in pairs:
        if p.id in seen:
            raise UserError(f"{path}: pair id {p.id!r} appears twice; give every pair its own id")
        seen.add(p.id)
    return PairSet(pairs, str(path))


PAIR_ROW = '; a pair row is {"id", "prompt", "a": {"text", ...}, "b": {"text", ...}, "kind"}'


def _pair_from_row(row: dict, where: str) -> Pair:
    if "chosen" in row and "rejected" in row:
        raise UserError(f"{where}: a label row (chosen, rejected), not a pair; give the pairs file `nanolm feedback pairs` wrote")
    pid = text_field(row, "id", where, hint=PAIR_ROW)
    prompt = text_field(row, "prompt", where, hint=PAIR_ROW)
    kind = text_field(row, "kind", where, required=False, default="", empty=True)
    return Pair(pid, prompt, _answer(row, "a", where), _answer(row, "b", where), kind)


def _answer(row: dict, side: str, where: str) -> Answer:
    what = "an object {text, correct, agrees_with_user, length, source}"
    obj = object_field(row, side, where, what=what, hint=PAIR_ROW)
    text = text_field(obj, "text", where, empty=True, label=f"'{side}'.text")
    correct, agrees = (
        bool_field(obj, key, where, nullable=True, required=False, label=f"'{side}'.{key}")
        for key in ("correct", "agrees_with_user")
    )
    length = int_field(
        obj, "length", where, required=False, default=words(text), label=f"'{side}'.length", what="a whole number of words >= 0"
    )
    source = text_field(obj, "source", where, required=False, default="", empty=True, label=f"'{side}'.source")
    return Answer(text, correct, agrees, length, source)
