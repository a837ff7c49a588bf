"""Research craft: checking a paper's claim by measurement instead of by argument, and sweeps that take
seed noise into account.

- ``kv_claims``: the reference's "LowKV" example (compress the KV cache 8 times "losslessly, as guaranteed by
  the Eckart–Young theorem"): the spectral energy of each layer's keys and values, what a rank-r key matrix
  does after softmax and to the model's loss, and the honest baselines (cache quantization, grouped-query
  sharing) at equal memory, with "lossless" judged against the noise of the evaluation itself.
  Its parts: ``kv_compress`` (the compressions and their bytes), ``kv_attention`` (keys and values read and
  spliced back through hooks, attention errors).
- ``sweep``: a hyper-parameter sweep whose seed noise is the Gaussian process's observation noise.
  Its parts: ``sweep_analysis`` (the GP and what is read off it), ``sweep_plots`` (the figure).

Modules load on use; importing the package costs no torch.
"""
