"""Dyck-(k, m): balanced strings of k bracket types nested at most m deep.

Tokens: open type i is i (0 ≤ i < k), close type i is k + i, END is 2k: an alphabet of 2k + 1 symbols.
Shown as ( [ { < and ) ] } > for k ≤ 4, else as (1 )1 (2 )2 ...; END is $.

Generator (Hewitt et al., 2020, "RNNs can generate bounded hierarchical languages with optimal
memory"): with an empty stack, END with probability p_end, else open a type drawn from open_probs;
below depth m, open (a type from open_probs) or close the top with probability ½ each; at depth m,
close. A generated sequence ends with END.

The language recognized: w or w END, where w is balanced and its depth never exceeds m (m=None:
unbounded, Dyck-k). Next-token sets follow the same definition: after a prefix, the symbols that
keep it a prefix of some word of the language.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import UserError

OPEN_CHARS, CLOSE_CHARS, END_CHAR = "([{<", ")]}>", "$"


def check_km(k: int, m: int | None = None) -> None:
    """UserError unless k (and m, when given) are positive integers."""
    if not isinstance(k, (int, np.integer)) or k <= 0:
        raise UserError(f"k (the number of bracket types) must be a positive integer, got {k}")
    if m is not None and (not isinstance(m, (int, np.integer)) or m <= 0):
        raise UserError(f"m (the maximum depth) must be a positive integer, got {m}")


def vocab_size(k: int) -> int:
    """2k + 1: k open, k close, END."""
    return 2 * k + 1


@functools.lru_cache(maxsize=8)
def _symbol_names(k: int) -> tuple[str, ...]:
    return tuple(symbol_names(k))


def symbol_names(k: int) -> list[str]:
    """Display names of the 2k + 1 tokens, in token order."""
    if k <= len(OPEN_CHARS):
        return [*OPEN_CHARS[:k], *CLOSE_CHARS[:k], END_CHAR]
    return [*(f"({i + 1}" for i in range(k)), *(f"){i + 1}" for i in range(k)), END_CHAR]


def to_string(tokens: Sequence[int], k: int) -> str:
    names = _symbol_names(k)
    return ("" if k <= len(OPEN_CHARS) else " ").join(names[t] for t in tokens)


def from_string(text: str, k: int) -> list[int]:
    """Parse the display form (characters for k ≤ 4, space-separated names otherwise)."""
    names = symbol_names(k)
    index = {s: i for i, s in enumerate(names)}
    parts = list(text.replace(" ", "")) if k <= len(OPEN_CHARS) else text.split()
    bad = [p for p in parts if p not in index]
    if bad:
        raise UserError(f"{bad[0]!r} is not a Dyck-{k} symbol; the symbols are {' '.join(names)}")
    return [index[p] for p in parts]


# ---- generator -----------------------------------------------------------------------------------


def generate(
    k: int,
    m: int,
    n: int,
    seed: int | np.random.Generator = 0,
    p_end: float = 0.5,
    open_probs: Sequence[float] | None = None,
    max_len: int | None = None,
    min_depth: int = 0,
    max_tries: int | None = None,
) -> list[list[int]]:
    """n sequences of Dyck-(k, m), each ending with END (token 2k).

    max_len: resample sequences longer than this (END included). min_depth: resample sequences whose
    maximum depth is below it (min_depth = m gives sequences that reach depth m exactly)."""
    check_km(k, m)
    if n < 0:
        raise UserError(f"the number of sequences must be >= 0, got {n}")
    if not 0.0 < p_end <= 1.0:
        raise UserError(f"--p-end (the probability of END at depth 0) must be in (0, 1], got {p_end}; e.g. --p-end 0.5")
    if not 0 <= min_depth <= m:
        raise UserError(f"min_depth must be between 0 and m={m}, got {min_depth}")
    if max_len is not None and max_len < 2 * min_depth + 1:
        raise UserError(f"max_len={max_len} is too short for depth {min_depth}: it needs at least {2 * min_depth + 1} tokens")
    probs = np.full(k, 1.0 / k) if open_probs is None else np.asarray(open_probs, dtype=float)
    if probs.shape != (k,) or (probs < 0).any() or probs.sum() <= 0:
        raise UserError(f"open_probs must be {k} non-negative weights with a positive sum, got {list(probs)}")
    cum = np.cumsum(probs / probs.sum())
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    out: list[list[int]] = []
    tries, limit = 0, max_tries if max_tries is not None else 1000 * max(n, 1) + 10_000
    budget = [MAX_SAMPLED_TOKENS]  # every token drawn, kept or rejected: a bound on the time spent
    while len(out) < n:
        tries += 1
        if tries > limit:
            raise UserError(
                f"could not generate {n} sequences of depth >= {min_depth} and length <= {max_len} in "
                f"{limit} tries; raise --max-len or --p-end"
            )
        seq, deepest = _sample_sequence(rng, k, m, cum, p_end, max_len, budget)
        if seq and deepest >= min_depth:
            out.append(seq)
    return out


MAX_SAMPLED_TOKENS = 10_000_000  # about 20 s of sampling; settings that need more will not finish soon


def _sample_sequence(
    rng: np.random.Generator, k: int, m: int, cum: np.ndarray, p_end: float, max_len: int | None, budget: list[int]
) -> tuple[list[int], int]:
    """One random walk over stacks of depth <= m, ending with END at depth 0: (tokens, deepest depth);
    empty tokens when it passed max_len. Spends `budget[0]` tokens, and refuses to go on when it runs out."""
    end = 2 * k
    seq: list[int] = []
    stack: list[int] = []
    deepest = 0
    while True:
        if max_len is not None and len(seq) >= max_len:  # too long already: reject early
            return [], deepest
        budget[0] -= 1
        if budget[0] < 0:
            raise UserError(
                f"sampling stopped after {MAX_SAMPLED_TOKENS:,} tokens: with m={m} and p_end={p_end} the "
                "strings are too long to finish; raise --p-end, lower --m, or give --max-len"
            )
        if not stack:
            if rng.random() < p_end:
                seq.append(end)
                return seq, deepest
            action_open = True
        elif len(stack) >= m:
            action_open = False
        else:
            action_open = rng.random() < 0.5
        if action_open:
            t = min(int(np.searchsorted(cum, rng.random(), side="right")), k - 1)
            stack.append(t)
            seq.append(t)
            deepest = max(deepest, len(stack))
        else:
            seq.append(k + stack.pop())


# ---- recognizer, labels, depth ---------------------------------------------------------------------


def recognize(tokens: Sequence[int], k: int, m: int | None = None) -> bool:
    """Is tokens a word of Dyck-(k, m) (m=None: Dyck-k): balanced, depth ≤ m, END only as the last
    token (optional)?"""
    check_km(k, m)
    end = 2 * k
    stack: list[int] = []
    n = len(tokens)
    for i, t in enumerate(tokens):
        if t == end:
            if i != n - 1:
                return False
            break
        if 0 <= t < k:
            stack.append(t)
            if m is not None and len(stack) > m:
                return False
        elif k <= t < end:
            if not stack or stack.pop() != t - k:
                return False
        else:
            return False
    return not stack


def next_token_sets(tokens: Sequence[int], k: int, m: int | None = None) -> np.ndarray:
    """[len(tokens) + 1, 2k + 1] bool: row t is the set of symbols that may follow tokens[:t] (a
    multi-hot over k open, k close, END). Empty after END or after a prefix that is already invalid."""
    check_km(k, m)
    end = 2 * k
    out = np.zeros((len(tokens) + 1, 2 * k + 1), dtype=bool)
    stack: list[int] = []
    alive = True
    for t in range(len(tokens) + 1):
        if alive:
            if m is None or len(stack) < m:
                out[t, :k] = True  # any open type
            if stack:
                out[t, k + stack[-1]] = True  # close the top
            else:
                out[t, end] = True
        if t == len(tokens):
            break
        tok = tokens[t]
        allowed = alive and 0 <= tok <= end and bool(out[t, tok])
        if not allowed or tok == end:
            alive = False  # an invalid prefix has no continuation, and nothing follows END
        elif tok < k:
            stack.append(tok)
        else:
            stack.pop()
    return out


def depth_profile(tokens: Sequence[int], k: int) -> np.ndarray:
    """[len(tokens) + 1] int: the stack depth after each prefix (opens minus closes; END adds 0)."""
    steps = np.array([1 if 0 <= t < k else -1 if k <= t < 2 * k else 0 for t in tokens], dtype=np.int64)
    return np.concatenate(([0], np.cumsum(steps)))


def max_depth(tokens: Sequence[int], k: int) -> int:
    return int(depth_profile(tokens, k).max())


@dataclass
class DepthStats:
    sequences: int
    mean_length: float  # tokens, END included
    max_length: int
    mean_max_depth: float
    max_depth_counts: dict[int, int] = field(default_factory=dict)  # maximum depth -> sequences
    position_depth_counts: dict[int, int] = field(default_factory=dict)  # depth after a token -> tokens


def depth_stats(seqs: Sequence[Sequence[int]], k: int) -> DepthStats:
    """How deep and how long a set of sequences is."""
    check_km(k)
    if not seqs:
        return DepthStats(0, 0.0, 0, 0.0)
    lengths = [len(s) for s in seqs]
    profiles = [depth_profile(s, k) for s in seqs]
    maxima = [int(p.max()) for p in profiles]
    per_pos = np.concatenate([p[1:] for p in profiles]) if any(len(s) for s in seqs) else np.zeros(0, dtype=np.int64)
    md, mc = np.unique(maxima, return_counts=True)
    pd, pc = np.unique(per_pos, return_counts=True)
    return DepthStats(
        sequences=len(seqs),
        mean_length=float(np.mean(lengths)),
        max_length=max(lengths),
        mean_max_depth=float(np.mean(maxima)),
        max_depth_counts={int(d): int(c) for d, c in zip(md, mc)},
        position_depth_counts={int(d): int(c) for d, c in zip(pd, pc)},
    )
