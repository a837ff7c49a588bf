"""dfa_to_rnn: the weights of a ReLU-RNN that accepts exactly the strings a DFA accepts.

Read instructions.md, then fill in the function. Check with: nanolm problems check dfa_to_rnn
"""

import numpy as np


def dfa_to_rnn(dfa) -> dict[str, np.ndarray]:
    """{"W_ih" [H, m], "W_hh" [H, H], "b" [H], "h0" [H], "w_out" [H]}: h_t = ReLU(W_hh h_{t-1} + W_ih x_t + b),
    the prefix of length t accepted when w_out @ h_t > 0.5; H <= n_states * n_symbols + 1."""
    raise NotImplementedError("dfa_to_rnn")
