"""A DFA compiled, exactly, into a first-order ReLU-RNN (torch ``nn.RNN(nonlinearity="relu")``).

Why pair units. The usual one-hot picture s_t = T_{x_t} s_{t-1} multiplies the input by the state
(bilinear), which a first-order RNN h_t = ReLU(W_hh h_{t-1} + W_ih x_t + b) cannot do. So the
hidden units are (state, symbol) pairs: unit (q, a) is on at step t when the automaton was in q
before reading x_t and x_t = a. Then the state after step t is δ(q, a), which is linear in h_t.

Construction (n states, m symbols, H = n·m + 1 units, one extra "start" unit):
    h_0           = e_start
    h_t[(q, a)]   = ReLU( Σ_{(p, b): δ(p, b) = q} h_{t-1}[(p, b)] + [q = q0]·h_{t-1}[start] + x_t[a] − 1 )
    h_t[start]    = ReLU(0) = 0                                              (t ≥ 1)
    y_t           = Σ_{(q, a): δ(q, a) ∈ F} h_t[(q, a)] + [q0 ∈ F]·h_t[start]
i.e. W_ih[(q, a), a] = 1, W_hh[(q, a), (p, b)] = [δ(p, b) = q], W_hh[(q0, a), start] = 1,
b_ih[(q, a)] = −1, all else 0; x_t is the one-hot of the symbol.

Claim: for every input x_1..x_T and every t ≥ 1, h_t is the one-hot vector e_{(s_{t-1}, x_t)}, where
s_t = δ*(q0, x_1..x_t), and y_t = [s_t ∈ F]; y_0 = [q0 ∈ F].
Proof, by induction on t. Write c_{t-1}(q) = the recurrent sum into the units (q, ·).
  t = 1: only the start unit is on in h_0, so c_0(q) = [q = q0] = [s_0 = q].
  t > 1: by hypothesis only unit (s_{t-2}, x_{t-1}) is on, with value 1, so
         c_{t-1}(q) = [δ(s_{t-2}, x_{t-1}) = q] = [s_{t-1} = q]; the start unit is 0.
  In both cases the pre-activation of (q, a) is [s_{t-1} = q] + [x_t = a] − 1 ∈ {−1, 0, 1}, which
  ReLU maps to 1 exactly when q = s_{t-1} and a = x_t, else to 0: h_t = e_{(s_{t-1}, x_t)}, so exactly
  one unit is 1. The readout adds the weight of that unit, [δ(s_{t-1}, x_t) ∈ F] = [s_t ∈ F].  ∎

No drift. Every weight, bias, input and (by the claim) hidden value is an integer in {−1, 0, 1}, and
each pre-activation is a sum of at most H + 2 such products: an integer of magnitude ≤ H + 2. float32
represents every integer up to 2^24 exactly, so each multiply-add is exact, the ReLU output is exactly
0 or 1, and step t+1 starts from exactly the ideal h_t. There is no rounding error to accumulate,
whatever the length (10^4 or 10^9 steps): the RNN's state space is the DFA's, not a continuum.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from ..errors import UserError
from .dfa import DFA


class CompiledDFA(nn.Module):
    """The ReLU-RNN of a DFA. forward(symbols [B, T] int64) -> (accept [B, T+1], hidden [B, T+1, H]),
    where accept[:, t] is exactly 1.0 or 0.0: does the DFA accept the prefix of length t?"""

    def __init__(self, dfa: DFA, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        n, m = dfa.n_states, dfa.n_symbols
        H = n * m + 1
        self.n_states, self.n_symbols, self.hidden_size = n, m, H
        start_unit = n * m

        def unit(q: int, a: int) -> int:
            return q * m + a

        w_ih = torch.zeros(H, m, dtype=torch.float64)
        w_hh = torch.zeros(H, H, dtype=torch.float64)
        b_ih = torch.zeros(H, dtype=torch.float64)
        readout = torch.zeros(1, H, dtype=torch.float64)
        for q in range(n):
            for a in range(m):
                w_ih[unit(q, a), a] = 1.0
                b_ih[unit(q, a)] = -1.0
                target = dfa.delta[q][a]
                for b in range(m):  # unit (q, a) feeds every unit (δ(q, a), b)
                    w_hh[unit(target, b), unit(q, a)] = 1.0
                readout[0, unit(q, a)] = float(target in dfa.accepting)
        for b in range(m):
            w_hh[unit(dfa.start, b), start_unit] = 1.0
        readout[0, start_unit] = float(dfa.start in dfa.accepting)

        self.rnn = nn.RNN(m, H, num_layers=1, nonlinearity="relu", bias=True, batch_first=True, dtype=dtype)
        self.readout = nn.Linear(H, 1, bias=False, dtype=dtype)
        with torch.no_grad():
            self.rnn.weight_ih_l0.copy_(w_ih)
            self.rnn.weight_hh_l0.copy_(w_hh)
            self.rnn.bias_ih_l0.copy_(b_ih)
            self.rnn.bias_hh_l0.zero_()
            self.readout.weight.copy_(readout)
        h0 = torch.zeros(H, dtype=dtype)
        h0[start_unit] = 1.0
        self.register_buffer("h0", h0)
        self.requires_grad_(False)

    def forward(self, symbols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T = symbols.shape
        h0 = self.h0.expand(B, -1)  # [B, H]
        if T == 0:
            hidden = h0[:, None, :]
        else:
            x = nn.functional.one_hot(symbols, self.n_symbols).to(self.h0.dtype)  # [B, T, m]
            hs, _ = self.rnn(x, h0[None].contiguous())  # [B, T, H]
            hidden = torch.cat((h0[:, None, :], hs), dim=1)  # [B, T+1, H]
        return self.readout(hidden)[..., 0], hidden

    @torch.no_grad()
    def accepts(self, dfa: DFA, word) -> bool:
        """Does the RNN accept word (symbols named as in dfa's alphabet)?"""
        x = torch.tensor([dfa.encode(word)], dtype=torch.long).reshape(1, -1)
        return bool(self(x)[0][0, -1] == 1.0)


MAX_WEIGHT_BYTES = 2 * 2**30  # the dense W_hh, built in float64: H = 16,384 units at most


def compile_dfa_to_relu_rnn(dfa: DFA, dtype: torch.dtype = torch.float32) -> CompiledDFA:
    """The exact ReLU-RNN of dfa (see the module docstring for the construction and proof)."""
    H = dfa.n_states * dfa.n_symbols + 1
    if H * H * 8 > MAX_WEIGHT_BYTES:
        raise UserError(
            f"the RNN of {dfa.n_states:,} states × {dfa.n_symbols} symbols has H = {H:,} units, and its "
            f"dense W_hh (H × H) would take {H * H * 8 / 2**30:.1f} GiB; use a DFA with n·m ≤ "
            f"{math.isqrt(MAX_WEIGHT_BYTES // 8) - 1:,} (--minimize merges equivalent states)"
        )
    return CompiledDFA(dfa, dtype)


@dataclass
class RNNSizes:
    states: int
    symbols: int
    hidden: int  # n·m + 1
    weight_ih: list[int]  # [H, m]
    weight_hh: list[int]  # [H, H]
    readout: list[int]  # [1, H]
    parameters: int
    nonzero: int
    integer_valued: bool
    dtype: str


def rnn_sizes(rnn: CompiledDFA) -> RNNSizes:
    params = list(rnn.parameters())
    return RNNSizes(
        states=rnn.n_states,
        symbols=rnn.n_symbols,
        hidden=rnn.hidden_size,
        weight_ih=list(rnn.rnn.weight_ih_l0.shape),
        weight_hh=list(rnn.rnn.weight_hh_l0.shape),
        readout=list(rnn.readout.weight.shape),
        parameters=sum(p.numel() for p in params),
        nonzero=sum(int((p != 0).sum()) for p in params),
        integer_valued=all(bool((p == p.round()).all()) for p in params),
        dtype=str(rnn.h0.dtype).replace("torch.", ""),
    )


@dataclass
class VerifyReport:
    states: int
    symbols: int
    hidden: int
    max_len: int
    exhaustive_strings: int  # every string of length 0..max_len (each is a prefix of a checked one)
    random_strings: int
    random_len: int
    random_prefixes: int  # every prefix of every random string is checked
    mismatches: int
    first_mismatch: str | None  # a word (symbols joined by spaces when any has several characters)
    max_abs_error: float  # |RNN output − DFA answer|, over everything checked: 0.0 when exact
    hidden_one_hot: bool  # every hidden state had exactly one unit at 1.0 and the rest at 0.0
    seconds: float
    ok: bool  # no mismatch, zero error, one-hot throughout


MAX_EXHAUSTIVE = 4_000_000  # strings of length max_len; beyond this, --max-len is too large to enumerate
MAX_BATCH_BYTES = 2**30  # the hidden states [B, T+1, H] of one batch of strings; chunks are sized to fit


def _dfa_prefix_answers(dfa: DFA, x: np.ndarray) -> np.ndarray:
    """[B, T] symbol indices -> [B, T+1] accept bits of every prefix (a plain table walk)."""
    delta = np.asarray(dfa.delta, dtype=np.int64)
    acc = np.zeros(dfa.n_states, dtype=bool)
    acc[list(dfa.accepting)] = True
    q = np.full(x.shape[0], dfa.start, dtype=np.int64)
    out = np.empty((x.shape[0], x.shape[1] + 1), dtype=bool)
    out[:, 0] = acc[q]
    for t in range(x.shape[1]):
        q = delta[q, x[:, t]]
        out[:, t + 1] = acc[q]
    return out


def _check_verify_sizes(dfa: DFA, rnn: CompiledDFA, max_len: int, n_random: int, random_len: int, seed: int) -> int:
    """The bytes of one time step of one string's hidden states, once the check is known to fit in memory
    and time; else a UserError naming the option and the largest value that fits."""
    if max_len < 0:
        raise UserError(f"--max-len must be >= 0, got {max_len}")
    if n_random < 0 or random_len < 0:
        raise UserError(f"the number and length of random strings must be >= 0, got {n_random} and {random_len}")
    if seed < 0:
        raise UserError(f"--seed must be >= 0, got {seed}")
    # One time step of one string's hidden states, held twice (the RNN's output and the copy with h0).
    row_bytes = 2 * rnn.h0.element_size() * rnn.hidden_size
    for option, length in (("--max-len", max_len), ("--random-len", random_len if n_random else 0)):
        if (length + 1) * row_bytes > MAX_BATCH_BYTES:
            fits = MAX_BATCH_BYTES // row_bytes - 1
            raise UserError(
                f"{option} {length:,}: one string's hidden states ({rnn.hidden_size:,} units per step) "
                f"would take {(length + 1) * row_bytes / 2**30:.1f} GiB; use {option} {fits:,} or less"
            )
    m = dfa.n_symbols
    # Compare logarithms: m ** max_len itself can have more digits than Python will format.
    if m == 1 and max_len > MAX_EXHAUSTIVE:
        raise UserError(
            f"--max-len {max_len:,} is longer than the {MAX_EXHAUSTIVE:,} symbols checked at most; "
            f"use --max-len {MAX_EXHAUSTIVE} or less"
        )
    if m > 1 and max_len * math.log(m) > math.log(MAX_EXHAUSTIVE):
        fits = int(math.log(MAX_EXHAUSTIVE) / math.log(m))
        raise UserError(
            f"--max-len {max_len} means {m}^{max_len} strings, more than {MAX_EXHAUSTIVE:,}; "
            f"use --max-len {fits} or less for {m} symbols"
        )
    if rnn.n_symbols != dfa.n_symbols:  # states may differ: an RNN of the minimized DFA is checked against the original
        raise UserError(f"the RNN reads {rnn.n_symbols} symbols but the DFA has {dfa.n_symbols}; compile it from this DFA")
    return row_bytes


def verify_rnn(
    dfa: DFA,
    rnn: CompiledDFA,
    max_len: int = 10,
    n_random: int = 4,
    random_len: int = 10_000,
    seed: int = 0,
    chunk: int = 8192,
    on_progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Compare the RNN (compiled from dfa, or from an equivalent DFA over the same alphabet in the same
    order, e.g. dfa.minimize()) with the DFA on every string of length ≤ max_len (all m^max_len strings of
    that length, reading every prefix) and on n_random random strings of random_len (every prefix).
    Equality is exact: the RNN's output must be 0.0 or 1.0 bit for bit, no threshold.
    on_progress(done, total) is called after each batch, counting strings."""
    import time

    row_bytes = _check_verify_sizes(dfa, rnn, max_len, n_random, random_len, seed)
    m = dfa.n_symbols
    t0 = time.perf_counter()
    mismatches, first, max_err, one_hot = 0, None, 0.0, True

    def check(x: np.ndarray) -> None:
        nonlocal mismatches, first, max_err, one_hot
        want = _dfa_prefix_answers(dfa, x)
        with torch.no_grad():
            y, hidden = rnn(torch.from_numpy(x))
        y = y.double().numpy()
        err = np.abs(y - want)
        max_err = max(max_err, float(err.max()))
        bad = err != 0.0
        mismatches += int(bad.sum())
        if first is None and bad.any():
            b, t = np.argwhere(bad)[0]
            first = _word(dfa, x[b, :t])
        # The invariant of the proof: exactly one unit at 1.0, the rest at 0.0 (after the start step).
        one_hot = one_hot and bool(((hidden == 0) | (hidden == 1)).all()) and bool((hidden.sum(-1) == 1).all())

    total = m**max_len
    n_strings = total + (n_random if random_len else 0)
    per_batch = max(1, min(chunk, MAX_BATCH_BYTES // ((max_len + 1) * row_bytes)))
    powers = m ** np.arange(max_len - 1, -1, -1, dtype=np.int64)  # base-m place values, MSB first (≤ total)
    for lo in range(0, total, per_batch):  # strings lo..hi-1 of length max_len, as base-m digits
        codes = np.arange(lo, min(lo + per_batch, total), dtype=np.int64)
        check((codes[:, None] // powers[None, :]) % m)
        if on_progress is not None:
            on_progress(min(lo + per_batch, total), n_strings)
    if n_random and random_len:
        rng = np.random.default_rng(seed)
        per_batch = max(1, MAX_BATCH_BYTES // ((random_len + 1) * row_bytes))
        for lo in range(0, n_random, per_batch):  # the same strings for a seed, whatever the batch size
            check(rng.integers(0, m, size=(min(per_batch, n_random - lo), random_len), dtype=np.int64))
            if on_progress is not None:
                on_progress(total + min(lo + per_batch, n_random), n_strings)
    return VerifyReport(
        states=dfa.n_states,
        symbols=m,
        hidden=rnn.hidden_size,
        max_len=max_len,
        exhaustive_strings=sum(m**i for i in range(max_len + 1)),
        random_strings=n_random if random_len else 0,
        random_len=random_len if n_random else 0,
        random_prefixes=n_random * (random_len + 1) if random_len else 0,
        mismatches=mismatches,
        first_mismatch=first,
        max_abs_error=max_err,
        hidden_one_hot=one_hot,
        seconds=time.perf_counter() - t0,
        ok=mismatches == 0 and max_err == 0.0 and one_hot,
    )


def _word(dfa: DFA, symbols: np.ndarray) -> str:
    names = [dfa.alphabet[int(a)] for a in symbols]
    return ("".join(names) if all(len(a) == 1 for a in dfa.alphabet) else " ".join(names)) or "ε"
