"""Wall time of `nanolm claims kv` on the `small` preset over 64 x 256 tokens, phase by phase, and the spectra
batched per layer (Gram matrix + eigh over all heads at once, float64) against the plain alternative (numpy's
SVD of each head's [N·T, Dh] key and value matrix, one at a time; on layer 0, to keep numpy's side short),
with their ratio.

The model is a run's (--run RUN) or, by default, a randomly initialised `small` model (6 layers, 6 heads of
64, context 256) reading the embedded corpus's validation split: the time does not depend on the weights.
CPU time is printed beside wall time: on a shared machine the difference is the neighbours' share.

    python bench/kv_claims_time.py [--run RUN] [--sequences 64] [--length 256]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from nanolm.data import corpus_data
from nanolm.model import GPT, preset_config
from nanolm.research.kv_attention import recorded_qkv, split_heads
from nanolm.research.kv_claims import check_kv_claim, check_run, windows_of
from nanolm.research.kv_compress import default_groups, default_ranks, gram, spectrum


def random_small() -> tuple[GPT, torch.Tensor]:
    data = corpus_data()
    torch.manual_seed(0)
    model = GPT(preset_config("small", vocab_size=data.tokenizer.vocab_size)).eval()
    return model, data.val


def phases(stamps: list[float], n_layer: int) -> dict[str, float]:
    """Seconds per phase from the progress callback's time stamps (0: start; 1: recorded; +n_layer: errors
    after softmax; the rest: one forward pass per compression)."""
    return {"record K, V and the exact loss (+ splice check)": stamps[1] - stamps[0],
            "errors after softmax (all layers, all compressions)": stamps[1 + n_layer] - stamps[1],
            "loss with each compression spliced in": stamps[-1] - stamps[1 + n_layer]}


def spectra_batched_vs_numpy(model: GPT, windows: torch.Tensor) -> tuple[float, float]:
    with torch.no_grad(), recorded_qkv(model) as kept:
        outs = {layer: [] for layer in range(model.cfg.n_layer)}
        for i in range(0, windows.size(0), 16):
            model(windows[i:i + 16, :-1])
            for layer, out in kept.items():
                outs[layer].append(out)
    _, k, v = split_heads(model, torch.cat(outs[0]))
    mats = [(k.transpose(0, 1).flatten(1, 2), v.transpose(0, 1).flatten(1, 2))]  # layer 0: [H, N·T, Dh] each
    t = time.perf_counter()
    batched = [(spectrum(gram(k))[0], spectrum(gram(v))[0]) for k, v in mats]
    t_batched = time.perf_counter() - t
    t = time.perf_counter()
    plain = [[np.linalg.svd(m[h].double().numpy(), full_matrices=False) for m in pair for h in range(m.size(0))]
             for pair in mats]
    t_numpy = time.perf_counter() - t
    s_b = batched[0][0][0].numpy()
    s_n = plain[0][0][1] ** 2
    assert np.allclose(s_b, s_n, rtol=1e-6, atol=1e-9 * s_n.max()), "the two spectra differ"
    return t_batched, t_numpy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="a nanolm run (default: a random small-preset model)")
    ap.add_argument("--runs-dir", default="runs")
    ap.add_argument("--sequences", type=int, default=64)
    ap.add_argument("--length", type=int, default=256)
    args = ap.parse_args()
    stamps: list[float] = []

    def progress(_done: int, _total: int) -> None:
        stamps.append(time.perf_counter())

    wall, cpu = time.perf_counter(), time.process_time()
    if args.run:
        report = check_run(args.run, args.runs_dir, sequences=args.sequences, length=args.length, progress=progress)
        model = None
    else:
        model, tokens = random_small()
        windows = windows_of(tokens, args.sequences, args.length)
        cfg = model.cfg
        report = check_kv_claim(model, windows, ranks=default_ranks(cfg.d_head), bits=[8, 4],
                                groups=default_groups(cfg.n_head)[:2], progress=progress)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"nanolm claims kv: {report.n_layer} layers x {report.n_head} heads of {report.d_head}, {report.sequences} x "
          f"{report.tokens_per_sequence} tokens, {len(report.compressions)} compressions "
          f"({', '.join(c.method for c in report.compressions)}); torch threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"  total: {wall:.1f} s wall, {cpu:.1f} s CPU (all threads)")
    for name, seconds in phases(stamps, report.n_layer).items():
        print(f"  {name}: {seconds:.1f} s")
    if model is not None:
        t_batched, t_numpy = spectra_batched_vs_numpy(model, windows)
        print(f"spectra of K and V, layer 0: batched Gram + eigh {t_batched:.2f} s, numpy SVD per head "
              f"{t_numpy:.2f} s: {t_numpy / t_batched:.1f}x faster batched")


if __name__ == "__main__":
    main()
