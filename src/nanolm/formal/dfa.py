"""Deterministic finite automata: run, minimize (Hopcroft), compare, combine, build, read and write.

A DFA here is complete: every state has exactly one transition on every symbol. States and symbols
have names (strings) for files and messages; the transition table works on indices.

JSON format (``load_dfa`` / ``save_dfa``)::

    {
      "name": "div3",                                  (optional)
      "alphabet": ["0", "1"],
      "states": ["r0", "r1", "r2"],
      "start": "r0",
      "accepting": ["r0"],
      "transitions": {"r0": {"0": "r0", "1": "r1"},
                      "r1": {"0": "r2", "1": "r0"},
                      "r2": {"0": "r1", "1": "r2"}}
    }

Bad files (a missing transition, a symbol outside the alphabet, duplicate states or symbols, an
unknown start or target state, duplicate JSON keys) raise ``UserError``; unreachable states only
warn (``UnreachableStatesWarning``), since the language is still well defined.
"""

from __future__ import annotations

import json
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..io import atomic_write_text

Word = str | Sequence[str]  # a str is read one character per symbol


class UnreachableStatesWarning(UserWarning):
    """A DFA file has states no string reaches from the start state."""


@dataclass(frozen=True)
class DFA:
    """A complete DFA. `delta[q][a]` is the state after reading symbol index a in state index q."""

    states: tuple[str, ...]
    alphabet: tuple[str, ...]
    delta: tuple[tuple[int, ...], ...]  # [n_states][n_symbols] -> state index
    start: int
    accepting: frozenset[int]
    name: str = ""

    def __post_init__(self) -> None:
        n, m = len(self.states), len(self.alphabet)
        # Programming errors, not user input (files go through from_dict, which explains itself).
        if n == 0 or m == 0:
            raise ValueError("a DFA needs at least one state and one symbol")
        if len(self.delta) != n or any(len(row) != m for row in self.delta):
            raise ValueError(f"delta must be {n} rows of {m} targets")
        if any(not 0 <= t < n for row in self.delta for t in row):
            raise ValueError("delta has a target outside the states")
        if not 0 <= self.start < n or any(not 0 <= q < n for q in self.accepting):
            raise ValueError("start or accepting state outside the states")

    # ---- basics --------------------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        return len(self.states)

    @property
    def n_symbols(self) -> int:
        return len(self.alphabet)

    @property
    def transitions(self) -> dict[tuple[str, str], str]:
        """{(state, symbol): next state}, by name."""
        return {
            (self.states[q], a): self.states[self.delta[q][i]] for q in range(self.n_states) for i, a in enumerate(self.alphabet)
        }

    def encode(self, word: Word) -> list[int]:
        """Symbol indices of word; a str is split into characters."""
        index = {a: i for i, a in enumerate(self.alphabet)}
        out = []
        for a in word:
            if a not in index:
                raise UserError(f"symbol {a!r} is not in the alphabet {list(self.alphabet)}")
            out.append(index[a])
        return out

    def run_indices(self, symbols: Iterable[int]) -> int:
        """The state index reached from the start on symbol indices."""
        q = self.start
        for a in symbols:
            q = self.delta[q][a]
        return q

    def run(self, word: Word) -> str:
        """The name of the state reached from the start on word."""
        return self.states[self.run_indices(self.encode(word))]

    def accepts(self, word: Word) -> bool:
        return self.run_indices(self.encode(word)) in self.accepting

    def accepts_indices(self, symbols: Iterable[int]) -> bool:
        return self.run_indices(symbols) in self.accepting

    # ---- structure -----------------------------------------------------------------------------
    def reachable(self) -> list[int]:
        """State indices reachable from the start, in breadth-first order."""
        seen, order, queue = {self.start}, [self.start], deque([self.start])
        while queue:
            q = queue.popleft()
            for t in self.delta[q]:
                if t not in seen:
                    seen.add(t)
                    order.append(t)
                    queue.append(t)
        return order

    def unreachable(self) -> list[str]:
        """Names of the states no string reaches."""
        seen = set(self.reachable())
        return [s for q, s in enumerate(self.states) if q not in seen]

    def trim(self) -> DFA:
        """The same language without unreachable states (states renumbered in BFS order)."""
        order = self.reachable()
        if len(order) == self.n_states and order == list(range(self.n_states)):
            return self
        return self._renumber(order, [[q] for q in order])

    def _renumber(self, reps: list[int], blocks: list[list[int]], block_of: dict[int, int] | None = None) -> DFA:
        """A DFA whose state i is blocks[i] (named after reps[i]); block_of maps old -> new."""
        if block_of is None:
            block_of = {q: i for i, b in enumerate(blocks) for q in b}
        delta = tuple(tuple(block_of[t] for t in self.delta[r]) for r in reps)
        return DFA(
            states=tuple(self.states[r] for r in reps),
            alphabet=self.alphabet,
            delta=delta,
            start=block_of[self.start],
            accepting=frozenset(block_of[r] for r in reps if r in self.accepting),
            name=self.name,
        )

    def minimize(self) -> DFA:
        """The minimal DFA of the same language (unreachable states dropped, then Hopcroft's
        partition refinement). States are numbered in BFS order from the start and each is named
        after one of its members, so equal languages give identical transition tables."""
        return minimize_with_blocks(self)[0]

    def complement(self) -> DFA:
        return DFA(
            self.states,
            self.alphabet,
            self.delta,
            self.start,
            frozenset(range(self.n_states)) - self.accepting,
            name=f"not {self.name}".strip(),
        )

    def product(self, other: DFA, accept: Callable[[bool, bool], bool], name: str = "") -> DFA:
        """The product automaton over reachable state pairs; a pair accepts when
        accept(self accepts, other accepts). Symbols are matched by name."""
        perm = _align_alphabets(self, other)
        index: dict[tuple[int, int], int] = {(self.start, other.start): 0}
        pairs = [(self.start, other.start)]
        delta: list[tuple[int, ...]] = []
        i = 0
        while i < len(pairs):  # pairs grows while we walk it: a BFS without a separate queue
            p, q = pairs[i]
            row = []
            for a in range(self.n_symbols):
                nxt = (self.delta[p][a], other.delta[q][perm[a]])
                if nxt not in index:
                    index[nxt] = len(pairs)
                    pairs.append(nxt)
                row.append(index[nxt])
            delta.append(tuple(row))
            i += 1
        acc = frozenset(j for j, (p, q) in enumerate(pairs) if accept(p in self.accepting, q in other.accepting))
        names = tuple(f"({self.states[p]},{other.states[q]})" for p, q in pairs)
        return DFA(names, self.alphabet, tuple(delta), 0, acc, name=name)

    def intersection(self, other: DFA) -> DFA:
        return self.product(other, lambda x, y: x and y, name=f"{self.name} and {other.name}")

    def union(self, other: DFA) -> DFA:
        return self.product(other, lambda x, y: x or y, name=f"{self.name} or {other.name}")

    def symmetric_difference(self, other: DFA) -> DFA:
        return self.product(other, lambda x, y: x != y, name=f"{self.name} xor {other.name}")

    def counterexample(self, other: DFA) -> str | tuple[str, ...] | None:
        """A shortest word accepted by exactly one of the two DFAs, or None when the languages are
        equal (BFS over reachable state pairs of the product). The word is a str when every symbol
        is one character, else a tuple of symbols."""
        perm = _align_alphabets(self, other)
        start = (self.start, other.start)
        parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
        queue = deque([start])
        while queue:
            p, q = queue.popleft()
            if (p in self.accepting) != (q in other.accepting):
                word: list[str] = []
                node: tuple[int, int] = (p, q)
                while parent[node] is not None:
                    node, a = parent[node]  # type: ignore[misc]
                    word.append(self.alphabet[a])
                word.reverse()
                return "".join(word) if all(len(a) == 1 for a in self.alphabet) else tuple(word)
            for a in range(self.n_symbols):
                nxt = (self.delta[p][a], other.delta[q][perm[a]])
                if nxt not in parent:
                    parent[nxt] = ((p, q), a)
                    queue.append(nxt)
        return None

    def equivalent(self, other: DFA) -> bool:
        """Same language (over the same alphabet)?"""
        return self.counterexample(other) is None

    # ---- files ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out: dict = {"name": self.name} if self.name else {}
        out.update(
            {
                "alphabet": list(self.alphabet),
                "states": list(self.states),
                "start": self.states[self.start],
                "accepting": [self.states[q] for q in sorted(self.accepting)],
                "transitions": {
                    self.states[q]: {a: self.states[self.delta[q][i]] for i, a in enumerate(self.alphabet)}
                    for q in range(self.n_states)
                },
            }
        )
        return out

    @classmethod
    def from_dict(cls, data: object, source: str = "DFA") -> DFA:
        """Validate a parsed JSON object; every problem is a UserError naming it and the fix."""
        if not isinstance(data, dict):
            raise UserError(f"{source}: expected a JSON object with keys alphabet, states, start, accepting, transitions")
        _check_keys(data, source)
        alphabet = _names(data["alphabet"], "alphabet", "symbol", source)
        long = [a for a in alphabet if len(a) != 1]
        if long:
            raise UserError(
                f"{source}: symbol {long[0]!r} in 'alphabet' is {len(long[0])} characters; words are read "
                "one character per symbol, so each symbol must be a single character"
            )
        states = _names(data["states"], "states", "state", source)
        state_index = {s: i for i, s in enumerate(states)}
        start = data["start"]
        if not isinstance(start, str) or start not in state_index:
            raise UserError(f"{source}: start state {start!r} is not among the states; use one of {_short(states)}")
        accepting = data["accepting"]
        if not isinstance(accepting, list):
            raise UserError(f"{source}: 'accepting' must be a list of state names")
        for s in accepting:
            if not isinstance(s, str) or s not in state_index:
                raise UserError(f"{source}: accepting state {s!r} is not among the states; add it to 'states' or remove it")
        delta = _transition_table(data["transitions"], states, alphabet, source)
        name = data.get("name", "")
        return cls(
            states=tuple(states),
            alphabet=tuple(alphabet),
            delta=tuple(delta),
            start=state_index[start],
            accepting=frozenset(state_index[s] for s in accepting),
            name=name if isinstance(name, str) else "",
        )


_DFA_KEYS = ("alphabet", "states", "start", "accepting", "transitions")


def _check_keys(data: dict, source: str) -> None:
    missing = [k for k in _DFA_KEYS if k not in data]
    if missing:
        raise UserError(f"{source}: missing key {missing[0]!r}; a DFA file needs {', '.join(_DFA_KEYS)}")
    unknown = [k for k in data if k not in (*_DFA_KEYS, "name", "comment")]
    if unknown:
        raise UserError(f"{source}: unknown key {unknown[0]!r}; the keys are {', '.join(_DFA_KEYS)} (and name, comment)")


def _transition_table(trans: object, states: list[str], alphabet: list[str], source: str) -> list[tuple[int, ...]]:
    """delta[q][a] as state indices, from {state: {symbol: next state}}; every problem named."""
    state_index = {s: i for i, s in enumerate(states)}
    if not isinstance(trans, dict):
        raise UserError(f"{source}: 'transitions' must be an object {{state: {{symbol: next state}}}}")
    for s, row in trans.items():
        if s not in state_index:
            raise UserError(f"{source}: transitions from {s!r}, which is not among the states; add it to 'states'")
        if not isinstance(row, dict):
            raise UserError(f"{source}: transitions of state {s!r} must be an object {{symbol: next state}}")
        for a, t in row.items():
            if a not in alphabet:
                raise UserError(
                    f"{source}: transition from state {s!r} on symbol {a!r}, which is not in the alphabet "
                    f"{_short(alphabet)}; add the symbol to 'alphabet' or remove the transition"
                )
            if not isinstance(t, str) or t not in state_index:
                raise UserError(
                    f"{source}: transition from state {s!r} on {a!r} goes to {t!r}, which is not among "
                    f"the states; add it to 'states'"
                )
    delta = []
    for s in states:
        row = trans.get(s, {})
        for a in alphabet:
            if a not in row:
                raise UserError(
                    f"{source}: missing transition from state {s!r} on symbol {a!r}; every state needs "
                    f"one transition per symbol (add a dead state if the string should be rejected)"
                )
        delta.append(tuple(state_index[row[a]] for a in alphabet))
    return delta


def minimize_with_blocks(dfa: DFA) -> tuple[DFA, list[list[str]]]:
    """(minimal DFA, for each of its states the names of the original states merged into it)."""
    d = dfa.trim()
    n, m = d.n_states, d.n_symbols
    inverse: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(m)]  # inverse[a][q] = {p: δ(p,a)=q}
    for p in range(n):
        for a in range(m):
            inverse[a][d.delta[p][a]].append(p)
    blocks, block_of = _hopcroft(d, inverse)
    order = _bfs_block_order(d, block_of)
    new_blocks = [sorted(blocks[b]) for b in order]
    minimal = d._renumber([b[0] for b in new_blocks], new_blocks)
    return minimal, [[d.states[q] for q in b] for b in new_blocks]


def _hopcroft(d: DFA, inverse: list[list[list[int]]]) -> tuple[list[set[int]], list[int]]:
    """The coarsest partition of d's states that respects acceptance and transitions: (blocks, block_of)."""
    n, m = d.n_states, d.n_symbols
    acc = set(d.accepting)
    blocks: list[set[int]] = [b for b in (acc, set(range(n)) - acc) if b]
    block_of = [0] * n  # block_of[q] = index into blocks
    for i, b in enumerate(blocks):
        for q in b:
            block_of[q] = i
    # Hopcroft: a set W of splitter blocks; splitting on the smaller half is enough. Each split moves its
    # smaller side into a new block and costs only the predecessors touched, so a state moves O(log n)
    # times and the whole is O(m n log n).
    work = {min(range(len(blocks)), key=lambda i: len(blocks[i]))} if len(blocks) == 2 else set()
    while work:
        splitter = list(blocks[work.pop()])
        for a in range(m):
            touched: dict[int, list[int]] = {}  # block -> its states that go into the splitter on a
            for q in splitter:
                for p in inverse[a][q]:
                    touched.setdefault(block_of[p], []).append(p)
            for b, inside in touched.items():
                if len(inside) == len(blocks[b]):
                    continue
                if 2 * len(inside) <= len(blocks[b]):
                    small = set(inside)
                    blocks[b] -= small
                else:
                    small = blocks[b] - set(inside)  # under twice len(inside): still paid for by the touched states
                    blocks[b] = set(inside)
                blocks.append(small)
                for q in small:
                    block_of[q] = len(blocks) - 1
                # If b was waiting, both halves now are; if not, the smaller one is enough.
                work.add(len(blocks) - 1)
    return blocks, block_of


def _bfs_block_order(d: DFA, block_of: list[int]) -> list[int]:
    """The blocks in BFS order from the start, so the minimal DFA's numbering is canonical."""
    blocks: dict[int, list[int]] = {}
    for q, b in enumerate(block_of):
        blocks.setdefault(b, []).append(q)
    order, seen = [block_of[d.start]], {block_of[d.start]}
    i = 0
    while i < len(order):
        rep = min(blocks[order[i]])
        for t in d.delta[rep]:
            if block_of[t] not in seen:
                seen.add(block_of[t])
                order.append(block_of[t])
        i += 1
    return order


def _align_alphabets(x: DFA, y: DFA) -> list[int]:
    """perm[a] = index in y of x's symbol a; the alphabets must be equal as sets."""
    if set(x.alphabet) != set(y.alphabet):
        raise UserError(
            f"the two DFAs have different alphabets {_short(list(x.alphabet))} and {_short(list(y.alphabet))}; "
            "compare DFAs over the same symbols"
        )
    where = {a: i for i, a in enumerate(y.alphabet)}
    return [where[a] for a in x.alphabet]


def _names(value: object, key: str, what: str, source: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise UserError(f"{source}: '{key}' must be a non-empty list of {what} names")
    seen: set[str] = set()
    for v in value:
        if not isinstance(v, str) or not v:
            raise UserError(f"{source}: '{key}' has {v!r}; every {what} name must be a non-empty string")
        if v in seen:
            raise UserError(f"{source}: duplicate {what} {v!r} in '{key}'; each {what} must be listed once")
        seen.add(v)
    return list(value)


def _short(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(s) for s in names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]"


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise UserError(f"duplicate key {k!r} in the JSON; a state's transitions and each symbol may appear once")
        out[k] = v
    return out


def load_dfa(path: str | Path) -> DFA:
    """Read and validate a DFA file; unreachable states give an UnreachableStatesWarning."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"DFA file {str(path)!r} does not exist; make one with: nanolm dfa build parity -o dfa.json") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read DFA file {str(path)!r}: {e}") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    dfa = DFA.from_dict(data, source=str(path))
    lost = dfa.unreachable()
    if lost:
        warnings.warn(
            f"{path}: {len(lost)} unreachable state(s) {_short(lost)}: no string reaches them from the start; "
            "they are ignored by minimize and cost units in the RNN",
            UnreachableStatesWarning,
            stacklevel=2,
        )
    return dfa


def save_dfa(dfa: DFA, path: str | Path) -> Path:
    """Write dfa as JSON (atomically)."""
    atomic_write_text(path, json.dumps(dfa.to_dict(), indent=2) + "\n")
    return Path(path)


# ---- builders ------------------------------------------------------------------------------------


def parity(symbol: str = "1", alphabet: Sequence[str] = ("0", "1")) -> DFA:
    """Strings with an even number of `symbol` (2 states, minimal)."""
    if symbol not in alphabet:
        raise UserError(f"parity: symbol {symbol!r} is not in the alphabet {list(alphabet)}")
    a = list(alphabet).index(symbol)
    delta = tuple(tuple((q ^ 1) if i == a else q for i in range(len(alphabet))) for q in (0, 1))
    return DFA(("even", "odd"), tuple(alphabet), delta, 0, frozenset({0}), name=f"even number of {symbol}")


def divisible_by(k: int) -> DFA:
    """Binary numbers, most significant bit first, divisible by k (the empty string is 0).
    State r is the value so far mod k: r --b--> (2r + b) mod k. Minimal for odd k; for k = 2^j·o
    with o odd the minimal DFA has fewer states."""
    if k <= 0:
        raise UserError(f"divisible_by: k must be a positive integer, got {k}")
    delta = tuple(tuple((2 * r + b) % k for b in (0, 1)) for r in range(k))
    return DFA(tuple(f"r{r}" for r in range(k)), ("0", "1"), delta, 0, frozenset({0}), name=f"binary divisible by {k}")


def contains(pattern: Word, alphabet: Sequence[str] = ("a", "b")) -> DFA:
    """Strings that contain `pattern` as a substring: the KMP automaton, len(pattern) + 1 states
    (minimal); state i = the longest prefix of the pattern that is a suffix of the input so far."""
    pat = list(pattern)
    if not pat:
        raise UserError("contains: the pattern must be non-empty")
    bad = [a for a in pat if a not in alphabet]
    if bad:
        raise UserError(f"contains: pattern symbol {bad[0]!r} is not in the alphabet {list(alphabet)}")
    n = len(pat)
    delta = []
    for q in range(n + 1):
        row = []
        for a in alphabet:
            if q == n:
                row.append(n)  # found: stay accepting
                continue
            s = pat[:q] + [a]  # longest suffix of s that is a prefix of pat
            j = min(len(s), n)
            while j > 0 and s[len(s) - j :] != pat[:j]:
                j -= 1
            row.append(j)
        delta.append(tuple(row))
    return DFA(
        tuple(f"m{q}" for q in range(n + 1)),
        tuple(alphabet),
        tuple(delta),
        0,
        frozenset({n}),
        name=f"contains {''.join(pat) if all(len(a) == 1 for a in pat) else pat}",
    )


MAX_RANDOM_TRANSITIONS = 4_000_000  # ~10 s and ~1 GB of Python tuples to build, minimize and save


def random_dfa(n_states: int, seed: int, alphabet: Sequence[str] = ("a", "b"), p_accept: float = 0.5) -> DFA:
    """A uniformly random complete DFA with n_states (start 0); some states may be unreachable."""
    import numpy as np

    if n_states <= 0:
        raise UserError(f"random_dfa: n_states must be a positive integer, got {n_states}")
    if n_states * len(alphabet) > MAX_RANDOM_TRANSITIONS:
        raise UserError(
            f"--states {n_states:,}: a DFA of {n_states * len(alphabet):,} transitions is more than the "
            f"{MAX_RANDOM_TRANSITIONS:,} built at most (it would take minutes and gigabytes); use --states "
            f"{MAX_RANDOM_TRANSITIONS // len(alphabet):,} or less"
        )
    rng = np.random.default_rng(seed)
    delta = tuple(tuple(int(t) for t in rng.integers(0, n_states, size=len(alphabet))) for _ in range(n_states))
    accepting = frozenset(int(q) for q in np.flatnonzero(rng.random(n_states) < p_accept))
    return DFA(
        tuple(f"q{q}" for q in range(n_states)),
        tuple(alphabet),
        delta,
        0,
        accepting,
        name=f"random {n_states} states, seed {seed}",
    )
