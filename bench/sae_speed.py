"""SAE training throughput: nanolm's trainer against SAELens 6.x's on the same activations, in one run.

The activations: N = steps × batch rows of width D, made once and shared by both sides, from a planted
sparse dictionary (each row a mean offset + 8 of 4·D random unit atoms with exponential magnitudes +
1% noise), served by the same ActivationStore (a new permutation each epoch, rows gathered per batch).

Each side trains the same SAE: D → M latents → D, f = ReLU(W_enc·(x - b_dec) + b_enc), x̂ = W_dec·f + b_dec,
loss MSE + λ·Σ_i f_i·‖W_dec,i‖ ("standard" in SAELens, given λ·D since its MSE sums over D where nanolm's
averages: the same objective up to a constant factor; `--arch topk`: the K largest, AuxK on dead latents),
Adam (lr 4e-4, betas 0.9/0.999), lr warm-up over the first 5% of the steps and linear decay over the last
20%, λ warm-up over the first 5%, gradients clipped at norm 1, activations scaled to a fixed norm (the
factor estimated from ~32k rows) and folded into the weights at the end, the same number of steps of the
same batch size, float32, all threads torch has. Timed: the whole training call, set-up included
(tokens/s = steps × batch / wall seconds):

- nanolm: `fit_sae(store, TrainSettings(...))`, its own loop as `nanolm sae train` runs it: scale from
  32,768 rows, b_dec at their geometric median, per step the loss and its gradient (written out by hand for
  relu, autograd for topk), clip, fused Adam, firing counts for the dead-latent window, dead-latent
  resampling at 25/50/75% of the steps (relu), the loss logged every 50 steps.
- SAELens: `SAETrainer(SAETrainerConfig(...), StandardTrainingSAE(...), data_provider).fit()`, its own loop
  as its LanguageModelSAETrainingRunner calls it, fed by the same store instead of a model: norm estimate
  (`normalize_activations="expected_average_only_in"`), per step `training_forward_pass` (autograd), clip,
  Adam, lr and λ schedulers, firing counts; no wandb (`log_to_wandb=False`, so no evaluation either), no
  checkpoint, its progress bar off. TopK: `TopKTrainingSAE` with `rescale_acts_by_decoder_norm=False`
  (nanolm's TopK does not rescale), dense activations.

Rounds alternate (nanolm first in even rounds, SAELens first in odd ones), after one short untimed run of
each; the medians of each side and their ratio are printed (and written with --json).

`--check-compat` instead trains a small nanolm SAE (relu and topk), saves it with SparseAutoencoder.save,
loads it with SAELens's `SAE.load_from_disk`, and compares the two reconstructions (and latents) on the
same raw activations; then the reverse: an SAE SAELens trained and saved (`save_inference_model`) loaded
with nanolm's `load_sae`.

SAELens 6 needs TransformerLens 3 and transformers 5 (the lens bench's venv pins TransformerLens 2), so it
lives in its own venv:
    make bench-sae       (or: .venv-bench-sae/bin/python bench/sae_speed.py --d 256 --m 2048 --batch 4096)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # SAELens's progress bars
os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402

WARMUP, DECAY = 0.05, 0.2  # nanolm's defaults, given to SAELens as step counts
NORM_ROWS = 32_768  # rows for the activation scale (nanolm's sample size)


def planted_activations(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """[n, d]: mean + 8 of 4·d unit atoms with exponential magnitudes + 1% noise (made in chunks)."""
    g = torch.Generator().manual_seed(seed)
    atoms = torch.randn(4 * d, d, generator=g)
    atoms /= atoms.norm(dim=1, keepdim=True)
    mean = torch.randn(d, generator=g) * 0.5
    out = torch.empty(n, d)
    for start in range(0, n, 16_384):
        rows = min(16_384, n - start)
        idx = torch.randint(0, 4 * d, (rows, 8), generator=g)
        mag = torch.empty(rows, 8).exponential_(generator=g)
        out[start:start + rows] = torch.einsum("rk,rkd->rd", mag, atoms[idx]) + mean
        out[start:start + rows] += 0.01 * torch.randn(rows, d, generator=g)
    return out


def run_nanolm(store, args, seed: int, steps: int) -> dict:
    from nanolm.interp.sae import TrainSettings, fit_sae

    settings = TrainSettings(arch=args.arch, d_sae=args.m, l1=args.l1, k=args.k if args.arch == "topk" else None,
                             lr=args.lr, batch_size=args.batch, steps=steps, warmup_fraction=WARMUP,
                             decay_fraction=DECAY, seed=seed)
    t0 = time.perf_counter()
    result = fit_sae(store, settings)
    wall = time.perf_counter() - t0
    last = result.history[-1]
    return {"tokens_per_s": steps * args.batch / wall, "loop_tokens_per_s": result.tokens_per_s, "seconds": wall,
            "l0": last["l0"]}


def run_saelens(store, args, seed: int, steps: int) -> dict:
    from sae_lens import LoggingConfig, StandardTrainingSAE, StandardTrainingSAEConfig, TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.config import SAETrainerConfig
    from sae_lens.training.sae_trainer import SAETrainer

    warm, decay = max(1, round(WARMUP * steps)), max(1, round(DECAY * steps))
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    common = {"d_in": store.d, "d_sae": args.m, "normalize_activations": "expected_average_only_in"}
    if args.arch == "relu":
        # SAELens sums the squared error over D where nanolm averages it: λ·D is the same objective up to a
        # factor D, which Adam does not see
        sae = StandardTrainingSAE(StandardTrainingSAEConfig(**common, l1_coefficient=args.l1 * store.d,
                                                            l1_warm_up_steps=warm))
    else:
        sae = TopKTrainingSAE(TopKTrainingSAEConfig(**common, k=args.k, rescale_acts_by_decoder_norm=False))
    cfg = SAETrainerConfig(total_training_samples=steps * args.batch, train_batch_size_samples=args.batch,
                           lr=args.lr, lr_end=args.lr, lr_scheduler_name="constant", lr_warm_up_steps=warm,
                           lr_decay_steps=decay, adam_beta1=0.9, adam_beta2=0.999, device="cpu",
                           dead_feature_window=max(1, steps // 4), feature_sampling_window=10 ** 9,
                           n_checkpoints=0, save_final_checkpoint=False, logger=LoggingConfig(log_to_wandb=False),
                           n_batches_for_norm_estimate=math.ceil(NORM_ROWS / args.batch))
    batches = (x for _, x in store.batches(args.batch, torch.Generator().manual_seed(seed)))
    trainer = SAETrainer(cfg=cfg, sae=sae, data_provider=batches)
    trainer.fit()
    wall = time.perf_counter() - t0
    return {"tokens_per_s": steps * args.batch / wall, "seconds": wall,
            "l0": float(trainer.feature_sparsity.sum()) if trainer.n_frac_active_samples else float("nan")}


def speed(args) -> dict:
    from nanolm.interp.sae import store_from_tensor

    store = store_from_tensor(planted_activations(args.steps * args.batch, args.d))
    print(f"SAE training, {args.arch}: D={args.d}, M={args.m}, batch {args.batch}, {args.steps} steps "
          f"({args.steps * args.batch:,} tokens), Adam lr {args.lr}, "
          + (f"λ={args.l1}" if args.arch == "relu" else f"K={args.k}") + f"; {torch.get_num_threads()} threads")
    run_nanolm(store, args, 0, 4), run_saelens(store, args, 0, 4)  # untimed: first-call costs
    sides = {"nanolm": run_nanolm, "saelens": run_saelens}
    rounds: list[dict] = []
    for r in range(args.rounds):
        order = ["nanolm", "saelens"] if r % 2 == 0 else ["saelens", "nanolm"]
        got = {name: sides[name](store, args, r, args.steps) for name in order}
        rounds.append(got)
        print(f"round {r + 1}: nanolm {got['nanolm']['tokens_per_s']:8,.0f} tokens/s "
              f"({got['nanolm']['seconds']:.1f} s, final L0 {got['nanolm']['l0']:.0f})   "
              f"SAELens {got['saelens']['tokens_per_s']:8,.0f} tokens/s ({got['saelens']['seconds']:.1f} s, "
              f"L0 {got['saelens']['l0']:.0f})   ratio {got['nanolm']['tokens_per_s'] / got['saelens']['tokens_per_s']:.2f}x",
              flush=True)
    med = {name: statistics.median(g[name]["tokens_per_s"] for g in rounds) for name in sides}
    paired = statistics.median(g["nanolm"]["tokens_per_s"] / g["saelens"]["tokens_per_s"] for g in rounds)
    ratio = med["nanolm"] / med["saelens"]
    print(f"median tokens/s: nanolm {med['nanolm']:,.0f}, SAELens {med['saelens']:,.0f}: "
          f"nanolm / SAELens = {ratio:.2f}x (paired median {paired:.2f}x; target >= 1.5x)")
    return {"arch": args.arch, "d": args.d, "m": args.m, "batch": args.batch, "steps": args.steps, "lr": args.lr,
            "l1": args.l1 if args.arch == "relu" else None, "k": args.k if args.arch == "topk" else None,
            "threads": torch.get_num_threads(), "rounds": rounds, "nanolm_tokens_per_s": med["nanolm"],
            "saelens_tokens_per_s": med["saelens"], "ratio": ratio, "paired_ratio": paired}


def check_compat(args) -> dict:
    """nanolm → SAELens and SAELens → nanolm: the same SAE folder, the same outputs on the same inputs."""
    from sae_lens import SAE

    from nanolm.interp.sae import TrainSettings, fit_sae, load_sae, store_from_tensor

    d, m, k = 64, 256, 16
    x = planted_activations(8192 + 2048, d, seed=1) * 7.0  # raw, norm far from √D: the folded scale matters
    x, test = x[:8192], x[8192:]
    store = store_from_tensor(x)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("relu", "topk"):
            result = fit_sae(store, TrainSettings(arch=arch, d_sae=m, k=k if arch == "topk" else None,
                                                  batch_size=512, steps=150))
            folder = result.sae.save(Path(tmp) / f"nanolm-{arch}", result.densities)
            out[f"nanolm_to_saelens_{arch}"] = _compare(f"nanolm {arch} SAE -> SAELens", result.sae,
                                                        SAE.load_from_disk(str(folder)), test)
        for arch in ("relu", "topk"):
            folder = Path(tmp) / f"saelens-{arch}"
            _saelens_trained(store, arch, m, k, steps=150).save_inference_model(str(folder))
            out[f"saelens_to_nanolm_{arch}"] = _compare(f"SAELens {arch} SAE -> nanolm", load_sae(folder),
                                                        SAE.load_from_disk(str(folder)), test)
    return out


@torch.no_grad()
def _compare(what: str, ours, theirs, x: torch.Tensor) -> dict:
    """Max |difference| of the reconstructions and of the latents, with the SAE's own FVU and L0 on x."""
    x_hat, f = ours(x), ours.encode(x)
    d_out = float((x_hat - theirs(x)).abs().max())
    d_f = float((f - theirs.encode(x)).abs().max())
    fvu = float(((x - x_hat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())
    l0 = float((f > 0).float().sum(-1).mean())
    print(f"{what} ({type(theirs).__name__}): max |Δx̂| = {d_out:.2e} (|x̂| up to {float(x_hat.abs().max()):.1f}), "
          f"max |Δf| = {d_f:.2e}; the SAE: FVU {fvu:.3f}, L0 {l0:.1f}")
    return {"saelens_class": type(theirs).__name__, "max_abs_diff_recon": d_out, "max_abs_diff_latents": d_f,
            "fvu": fvu, "l0": l0}


def _saelens_trained(store, arch: str, m: int, k: int, steps: int):
    """An SAE trained by SAELens with its defaults (but for the sizes and the activation-norm scaling)."""
    from sae_lens import LoggingConfig, StandardTrainingSAE, StandardTrainingSAEConfig, TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.config import SAETrainerConfig
    from sae_lens.training.sae_trainer import SAETrainer

    common = {"d_in": store.d, "d_sae": m, "normalize_activations": "expected_average_only_in"}
    sae = (StandardTrainingSAE(StandardTrainingSAEConfig(**common, l1_coefficient=1.0)) if arch == "relu"
           else TopKTrainingSAE(TopKTrainingSAEConfig(**common, k=k)))
    cfg = SAETrainerConfig(total_training_samples=steps * 512, train_batch_size_samples=512, lr_end=3e-4,
                           logger=LoggingConfig(log_to_wandb=False), n_batches_for_norm_estimate=16)
    batches = (x for _, x in store.batches(512, torch.Generator().manual_seed(0)))
    SAETrainer(cfg=cfg, sae=sae, data_provider=batches).fit()
    return sae


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=("relu", "topk"), default="relu")
    ap.add_argument("--d", type=int, default=256, help="activation width D")
    ap.add_argument("--m", type=int, default=2048, help="dictionary size M")
    ap.add_argument("--batch", type=int, default=4096, help="tokens per step")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5, help="timed runs of each side, alternating")
    ap.add_argument("--lr", type=float, default=4e-4)
    ap.add_argument("--l1", type=float, default=0.03, help="λ (relu)")
    ap.add_argument("--k", type=int, default=32, help="K (topk)")
    ap.add_argument("--check-compat", action="store_true", help="save/load between nanolm and SAELens instead")
    ap.add_argument("--json", type=Path, help="write the numbers here")
    args = ap.parse_args()
    result = check_compat(args) if args.check_compat else speed(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
