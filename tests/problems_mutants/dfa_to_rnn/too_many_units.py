# mutant: one hidden unit too many (n·m + 2)
# expect: more than n·m + 1
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""dfa_to_rnn: the weights of a ReLU-RNN that accepts exactly the strings a DFA accepts.

Pair units: unit (q, a) is on at step t when the automaton was in q before reading x_t and x_t = a.
The state after the step is delta[q][a], linear in h_t, so the next step needs no product of input
and state: h_t[(q, a)] = ReLU([state before is q] + [x_t = a] - 1). One extra start unit is on in h0
only. Every value is exactly 0 or 1 (integers in float arithmetic): no drift at any length. The same
construction as nanolm.formal.rnn.compile_dfa_to_relu_rnn, with its proof in that module's docstring."""

import numpy as np


def dfa_to_rnn(dfa) -> dict[str, np.ndarray]:
    n, m = dfa.n_states, dfa.n_symbols
    H = n * m + 2
    start_unit = n * m

    def unit(q: int, a: int) -> int:
        return q * m + a

    W_ih = np.zeros((H, m))
    W_hh = np.zeros((H, H))
    b = np.zeros(H)
    w_out = np.zeros(H)
    for q in range(n):
        for a in range(m):
            W_ih[unit(q, a), a] = 1.0  # [x_t = a]
            b[unit(q, a)] = -1.0  # AND: both terms must be 1
            target = dfa.delta[q][a]
            for c in range(m):  # being in (q, a) means the state is now `target`: feed every (target, c)
                W_hh[unit(target, c), unit(q, a)] = 1.0
            w_out[unit(q, a)] = float(target in dfa.accepting)
    for c in range(m):  # before any symbol the state is the start state
        W_hh[unit(dfa.start, c), start_unit] = 1.0
    w_out[start_unit] = float(dfa.start in dfa.accepting)
    h0 = np.zeros(H)
    h0[start_unit] = 1.0
    return {"W_ih": W_ih, "W_hh": W_hh, "b": b, "h0": h0, "w_out": w_out}
