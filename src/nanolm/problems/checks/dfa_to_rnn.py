"""dfa_to_rnn: the learner's ReLU-RNN weights against nanolm.formal.dfa's DFAs, on every string up to a
length (all at once, one batch per length) and on long random strings (every prefix)."""

from __future__ import annotations

import math
import random
from types import ModuleType

import numpy as np

from ...formal.dfa import DFA, parity
from . import Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)

KEYS = ("W_ih", "W_hh", "b", "h0", "w_out")


def make_dfa(rng: random.Random, n: int, m: int, start: int | None = None) -> DFA:
    """A random complete DFA: n states, m symbols, a random start state and accepting set (some states may be
    unreachable); never all accepting or all rejecting."""
    delta = tuple(tuple(rng.randrange(n) for _ in range(m)) for _ in range(n))
    start = rng.randrange(n) if start is None else start
    accepting = frozenset(q for q in range(n) if rng.random() < 0.5)
    if n > 1 and len(accepting) in (0, n):
        accepting = frozenset({rng.randrange(n)})
    alphabet = tuple("abc"[:m])
    return DFA(tuple(f"q{q}" for q in range(n)), alphabet, delta, start, accepting, name=f"random {n} states")


def random_dfas(seed: int, count: int = 8) -> list[DFA]:
    rng = random.Random(seed)
    return [make_dfa(rng, rng.randint(2, 7), rng.randint(2, 3)) for _ in range(count)]


def _describe(dfa: DFA) -> str:
    rows = "; ".join(
        f"{q}: " + " ".join(f"{a}->{dfa.delta[q][i]}" for i, a in enumerate(dfa.alphabet)) for q in range(dfa.n_states)
    )
    return f"the DFA with {dfa.n_states} states, start {dfa.start}, accepting {sorted(dfa.accepting)}, transitions {rows}"


def weights(mod: ModuleType, dfa: DFA) -> dict[str, np.ndarray]:
    """The learner's weights for dfa, as float64 arrays, shapes and size checked."""
    out = mod.dfa_to_rnn(dfa)
    require(isinstance(out, dict), f"dfa_to_rnn returned {type(out).__name__}, not a dict with keys {', '.join(KEYS)}")
    missing = [k for k in KEYS if k not in out]
    require(not missing, f"dfa_to_rnn's dict has no {', '.join(missing)} (it has {', '.join(map(str, out))})")
    w = {}
    for k in KEYS:
        try:
            w[k] = np.asarray(out[k], dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise AssertionError(f"dfa_to_rnn's {k} is not an array of numbers ({e})") from None
        require(bool(np.isfinite(w[k]).all()), f"dfa_to_rnn's {k} holds a NaN or an infinity")
    n, m = dfa.n_states, dfa.n_symbols
    H = w["h0"].shape[0] if w["h0"].ndim == 1 else -1
    want = {"W_ih": (H, m), "W_hh": (H, H), "b": (H,), "h0": (H,), "w_out": (H,)}
    for k in KEYS:
        require(
            w[k].shape == want[k],
            f"for a DFA of {n} states and {m} symbols, {k} has shape {list(w[k].shape)}; "
            f"with h0 of {H} units it must be {list(want[k])}",
        )
    limit = n * m + 1
    require(
        w["h0"].shape[0] <= limit,
        f"for a DFA of {n} states and {m} symbols the RNN has {H} hidden units, more than n·m + 1 = {limit}",
    )
    return w


def _step(w: dict[str, np.ndarray], h: np.ndarray, a: int) -> np.ndarray:
    return np.maximum(h @ w["W_hh"].T + w["W_ih"][:, a] + w["b"], 0.0)


def _word(dfa: DFA, symbols: list[int]) -> str:
    return (
        repr("".join(dfa.alphabet[a] for a in symbols))
        if len(symbols) <= 40
        else f"a string of {len(symbols)} symbols starting {''.join(dfa.alphabet[a] for a in symbols[:20])!r}"
    )


def _fail(dfa: DFA, symbols: list[int], got: float, why: str = "") -> None:
    want = dfa.accepts_indices(symbols)
    raise AssertionError(
        f"on {_word(dfa, symbols)} the RNN {'accepts' if got > 0.5 else 'rejects'} (w_out·h = "
        f"{got:.4g}) but the DFA {'accepts' if want else 'rejects'}{why}; {_describe(dfa)}"
    )


def first_error(w: dict[str, np.ndarray], dfa: DFA, max_len: int) -> tuple[list[int], float, bool] | None:
    """The first string of length 0..max_len (one batch per length, all extensions of the previous batch) the RNN
    gets wrong: (its symbols, w_out·h, whether every string of that length is answered one symbol late, as the
    DFA answers the string without its last symbol); None when all are right."""
    acc = np.zeros(dfa.n_states, dtype=bool)
    acc[list(dfa.accepting)] = True
    delta = np.asarray(dfa.delta, dtype=np.int64)
    h, q = w["h0"][None, :], np.array([dfa.start])
    before = q
    words: np.ndarray = np.zeros((1, 0), dtype=np.int64)
    for t in range(max_len + 1):
        if t:
            m = dfa.n_symbols
            h = np.concatenate([_step(w, h, a) for a in range(m)])
            before = np.concatenate([q] * m)
            q = np.concatenate([delta[q, a] for a in range(m)])
            words = np.concatenate([np.hstack([words, np.full((len(words), 1), a)]) for a in range(m)])
        if not np.isfinite(h).all():
            return words[0].tolist(), float("inf"), False
        y = h @ w["w_out"]
        wrong = np.flatnonzero((y > 0.5) != acc[q])
        if len(wrong):
            i = wrong[0]
            return words[i].tolist(), float(y[i]), bool(t) and bool(((y > 0.5) == acc[before]).all())
    return None


def exhaustive(mod: ModuleType, dfa: DFA, max_len: int) -> None:
    """Every string of length 0..max_len against the DFA; a failure names a transposed W_hh or an answer one
    symbol late when that is what the RNN does."""
    w = weights(mod, dfa)
    error = first_error(w, dfa, max_len)
    if error is None:
        return
    symbols, got, late = error
    require(math.isfinite(got), f"the hidden state overflowed at length {len(symbols)}; {_describe(dfa)}")
    why = ""
    if late:
        why = (
            ": on every string of that length the RNN gives the DFA's answer one symbol late (for the string "
            "without its last symbol)"
        )
    elif first_error({**w, "W_hh": w["W_hh"].T}, dfa, max_len) is None:
        why = (
            ": with W_hh transposed the RNN would be right; W_hh[i, j] is the weight from unit j to unit i, "
            "h_t = ReLU(W_hh h_(t-1) + W_ih x_t + b)"
        )
    _fail(dfa, symbols, got, why)


@_check
def check_interface(mod: ModuleType, seed: int) -> None:
    """The five arrays with matching shapes, at most n·m + 1 hidden units."""
    rng = random.Random(seed)
    for _ in range(3):
        weights(mod, make_dfa(rng, rng.randint(1, 6), rng.randint(1, 3)))


@_check
def check_parity(mod: ModuleType, seed: int) -> None:
    """Parity (an even number of 1s): every string up to length 12."""
    symbol = random.Random(seed).choice("01")
    exhaustive(mod, parity(symbol), 12)


def _max_len(dfa: DFA) -> int:
    return {1: 30, 2: 10, 3: 6}[dfa.n_symbols]


@_check
def check_random_dfas(mod: ModuleType, seed: int) -> None:
    """Random DFAs (2-7 states, 2-3 symbols, random start): every string up to length 6-10."""
    for dfa in random_dfas(seed):
        exhaustive(mod, dfa, _max_len(dfa))


@_check
def check_start_state(mod: ModuleType, seed: int) -> None:
    """Start states other than state 0, accepting or not: the empty string and short strings."""
    rng = random.Random(seed + 1)
    for i in range(6):
        n = rng.randint(3, 6)
        dfa = make_dfa(rng, n, 2, start=rng.randrange(1, n))
        start_accepts = i % 2 == 0  # state 0 answers the other way, so assuming start 0 shows on ''
        accepting = {q for q in dfa.accepting if q not in (0, dfa.start)} | ({dfa.start} if start_accepts else {0})
        exhaustive(mod, DFA(dfa.states, dfa.alphabet, dfa.delta, dfa.start, frozenset(accepting), dfa.name), 5)


@_check
def check_edge_cases(mod: ModuleType, seed: int) -> None:
    """One state (accept all, reject all), one symbol (length mod k), unreachable states."""
    rng = random.Random(seed + 2)
    m = rng.randint(1, 3)
    alphabet = tuple("abc"[:m])
    cases = [DFA(("all",), alphabet, ((0,) * m,), 0, frozenset({0})), DFA(("none",), alphabet, ((0,) * m,), 0, frozenset())]
    k = rng.randint(2, 6)
    r = rng.randrange(k)
    cases.append(
        DFA(
            tuple(f"r{i}" for i in range(k)),
            ("a",),
            tuple(((i + 1) % k,) for i in range(k)),
            0,
            frozenset({r}),
            name=f"length = {r} mod {k}",
        )
    )
    base = make_dfa(rng, 3, 2)
    extra = rng.randint(1, 3)  # states nothing leads to, pointing back into the reachable part
    delta = base.delta + tuple((rng.randrange(3 + extra), rng.randrange(3)) for _ in range(extra))
    delta = tuple(tuple(t if t < 3 else 0 for t in row) if i < 3 else row for i, row in enumerate(delta))
    cases.append(
        DFA(
            tuple(f"q{i}" for i in range(3 + extra)),
            ("a", "b"),
            delta,
            base.start,
            base.accepting | frozenset(range(3, 3 + extra)),
        )
    )
    for dfa in cases:
        exhaustive(mod, dfa, _max_len(dfa))


@_check
def check_long_strings(mod: ModuleType, seed: int) -> None:
    """Random strings of 1000 symbols on random DFAs: every prefix, no drift."""
    rng, nrng = random.Random(seed + 3), np.random.default_rng(seed)
    for _ in range(4):
        dfa = make_dfa(rng, rng.randint(3, 8), rng.randint(2, 3))
        w = weights(mod, dfa)
        x = nrng.integers(0, dfa.n_symbols, size=(16, 1000))
        delta = np.asarray(dfa.delta, dtype=np.int64)
        acc = np.zeros(dfa.n_states, dtype=bool)
        acc[list(dfa.accepting)] = True
        h = np.repeat(w["h0"][None, :], len(x), axis=0)
        q = np.full(len(x), dfa.start)
        for t in range(x.shape[1] + 1):
            if t:
                h = np.maximum(h @ w["W_hh"].T + w["W_ih"][:, x[:, t - 1]].T + w["b"], 0.0)
                q = delta[q, x[:, t - 1]]
            y = h @ w["w_out"]
            wrong = np.flatnonzero(~np.isfinite(y) | ((y > 0.5) != acc[q]))
            if len(wrong):
                i = wrong[0]
                require(bool(np.isfinite(y[i])), f"the hidden state overflowed after {t} symbols; {_describe(dfa)}")
                short = _max_len(dfa)
                drift = t > short and first_error(w, dfa, short) is None
                _fail(
                    dfa,
                    x[i, :t].tolist(),
                    float(y[i]),
                    f" (every string up to length {short} is right: the hidden state drifts as strings grow)" if drift else "",
                )
