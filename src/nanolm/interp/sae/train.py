"""Training a sparse autoencoder on stored activations, with the details the reference tools found
necessary, each with its default:

- activation scale: rows are multiplied by s = sqrt(D / E‖x‖²) (measured on a sample), so that the
  loss and λ mean the same at every layer and model; s is folded into the weights on save (the saved
  SAE reads raw activations);
- b_dec starts at the geometric median of a sample (Weiszfeld's iterations; the mean when they do not
  settle), the decoder rows at random directions of norm 0.1 and W_enc = W_decᵀ;
- Adam (lr 4e-4, betas 0.9/0.999), lr warm-up over the first 5% of the steps and a linear decay to 0
  over the last 20%, gradients clipped at norm 1;
- relu: loss = mean over tokens of [ mean_d (x - x̂)² + λ · Σ_i f_i · ‖W_dec,i‖ ]: the L1 term weighted by
  the decoder row norms (Anthropic, April 2024; SAELens "standard"), so shrinking f while growing a row
  does not dodge it; λ warms up linearly over the first 5% of the steps. Dead latents (no activation in
  the last `dead_window` tokens) are resampled at 25%, 50% and 75% of training: each gets the direction
  of an input it reconstructs badly (drawn with probability ∝ its squared error), its encoder row that
  direction at 0.2 × the mean live encoder norm, b_enc = 0, and fresh Adam moments;
- topk: loss = mean_d (x - x̂)² + (1/32) · AuxK, where AuxK reconstructs the residual e = x - x̂ from the
  k_aux = D/2 largest pre-activations of the dead latents, normalised by e's variance (Gao et al. 2024;
  OpenAI's and dictionary_learning's coefficient).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ...errors import UserError
from .model import SAEConfig, SparseAutoencoder
from .store import ActivationStore


@dataclass
class TrainSettings:
    """How to train; defaults as in the module docstring."""

    arch: str = "relu"
    d_sae: int | None = None  # M; default expansion · D
    expansion: int = 8
    l1: float = 0.03  # λ (relu), for activations scaled to E‖x‖² = D and the per-element MSE
    k: int | None = None  # K (topk); default 32, at most M - 1
    lr: float = 4e-4
    batch_size: int = 1024  # tokens per step
    steps: int | None = None  # default: one pass over the stored tokens
    warmup_fraction: float = 0.05  # lr and λ warm-up
    decay_fraction: float = 0.2  # lr decay to 0 over the last part
    grad_clip: float = 1.0
    dead_window: int | None = None  # tokens; default min(1,000,000, stored tokens / 4)
    resample_at: tuple[float, ...] = (0.25, 0.5, 0.75)  # relu: fractions of training
    aux_coef: float = 1 / 32  # topk
    seed: int = 0
    log_every: int = 50

    def check(self, d_in: int, n_tokens: int) -> None:
        """A UserError for a setting that cannot train: non-positive sizes, λ < 0, K >= M, too few tokens."""
        if not isinstance(self.expansion, int) or isinstance(self.expansion, bool) or self.expansion < 1:
            raise UserError(f"--expansion must be a positive integer, got {self.expansion!r}")
        if self.d_sae is not None and (not isinstance(self.d_sae, int) or self.d_sae < 1):
            raise UserError(f"--d-sae must be a positive integer, got {self.d_sae!r}")
        if not (isinstance(self.l1, (int, float)) and math.isfinite(self.l1) and self.l1 >= 0):
            raise UserError(f"--l1 must be a number >= 0, got {self.l1!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"--lr must be a number > 0, got {self.lr!r}")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be >= 1, got {self.batch_size}")
        self.sae_config(d_in)  # the dictionary's size and K
        if n_tokens < self.batch_size:
            raise UserError(
                f"only {n_tokens:,} activation tokens, fewer than one batch of {self.batch_size:,}; "
                "give more --tokens (or texts) or a smaller --batch-size"
            )
        if self.steps is not None and self.steps < 1:
            raise UserError(f"--steps must be >= 1, got {self.steps}")

    def sae_config(self, d_in: int, **where) -> SAEConfig:
        m = self.d_sae or self.expansion * d_in
        k = (self.k if self.k is not None else min(32, m - 1)) if self.arch == "topk" else None
        return SAEConfig(d_in, m, self.arch, k, **where)


@dataclass
class TrainResult:
    """A trained SAE (weights for raw activations) and how training went."""

    sae: SparseAutoencoder
    steps: int
    tokens: int  # tokens seen (steps × batch size)
    scale: float  # s: training saw x · s (folded into the weights now)
    seconds: float
    tokens_per_s: float
    history: list[dict] = field(default_factory=list)  # {step, loss, mse, l1 or aux, l0, dead}
    resampled: list[tuple[int, int]] = field(default_factory=list)  # (step, latents resampled)
    densities: torch.Tensor | None = None  # [M] firing density over the last dead_window tokens
    dead: int = 0  # latents not active in the last dead_window tokens at the end
    tokens_asked: int | None = None  # activation tokens asked to collect (train_sae's `tokens`)
    tokens_collected: int | None = None  # what the texts gave: fewer than asked when they ran out


def geometric_median(x: torch.Tensor, iters: int = 100, tol: float = 1e-6) -> torch.Tensor:
    """[D]: the point minimising the summed distances to the rows of x [N, D] (Weiszfeld); the mean
    when the iterations do not settle."""
    x = x.double()
    point = x.mean(0)
    for _ in range(iters):
        dist = (x - point).norm(dim=1).clamp_min(1e-12)
        w = 1 / dist
        new = (w[:, None] * x).sum(0) / w.sum()
        if (new - point).norm() <= tol * max(1.0, float(point.norm())):
            return new.float()
        point = new
    return x.mean(0).float()


def lr_factor(step: int, steps: int, warmup: float, decay: float) -> float:
    """Linear warm-up over the first `warmup` of the steps, constant, linear decay to 0 over the last `decay`."""
    w, d = max(1, round(warmup * steps)), max(1, round(decay * steps))
    if step < w:
        return (step + 1) / w
    return min(1.0, (steps - step) / d)


class _Trainer:
    def __init__(self, store: ActivationStore, settings: TrainSettings, cfg: SAEConfig, device: torch.device) -> None:
        self.store, self.s, self.device = store, settings, device
        self.gen = torch.Generator().manual_seed(settings.seed)
        self.sae = SparseAutoencoder(cfg)
        self.sae.reset_parameters(self.gen)
        sample = store.sample(min(store.n, 32_768), self.gen)
        mean_sq = float((sample.double() ** 2).sum(1).mean())
        self.scale = math.sqrt(cfg.d_in / mean_sq) if mean_sq > 0 else 1.0
        with torch.no_grad():
            self.sae.b_dec.copy_(geometric_median(sample[:4096] * self.scale))
        self.sae.to(device)
        # fused: one kernel per step for all four parameters instead of a dozen passes each
        self.opt = torch.optim.Adam(
            self.sae.parameters(), lr=settings.lr, betas=(0.9, 0.999), fused=device.type in ("cpu", "cuda")
        )
        self.steps = settings.steps or max(1, store.n // settings.batch_size)
        self.window = settings.dead_window or max(settings.batch_size, min(1_000_000, store.n // 4))
        self.since_fired = torch.zeros(cfg.d_sae, dtype=torch.long, device=device)  # tokens since each fired
        self.fired = torch.zeros(cfg.d_sae, device=device)  # activations counted in the current window
        self.counted = 0
        self._buffers: tuple[torch.Tensor, ...] | None = None  # relu_grads's [B, M] work space

    def l1_now(self, step: int) -> float:
        """λ at this step: warmed up linearly over the first warmup_fraction of the steps."""
        return self.s.l1 * min(1.0, (step + 1) / max(1, round(self.s.warmup_fraction * self.steps)))

    def loss(self, x: torch.Tensor, step: int) -> tuple[torch.Tensor, dict, torch.Tensor]:
        sae, s = self.sae, self.s
        pre = sae.pre_acts(x)
        f = sae.activate(pre)
        x_hat = sae.decode(f)
        mse = ((x - x_hat) ** 2).mean(-1).mean()
        parts = {"mse": float(mse.detach())}
        if sae.arch == "relu":
            l1_now = self.l1_now(step)
            sparsity = (f * sae.decoder_norms()).sum(-1).mean()
            parts["l1"] = float(sparsity.detach())
            total = mse + l1_now * sparsity
        else:
            aux = self._aux_loss(x - x_hat, pre)
            parts["aux"] = float(aux.detach())
            total = mse + s.aux_coef * aux
        return total, parts, f

    @torch.no_grad()
    def relu_grads(self, x: torch.Tensor, step: int) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """The relu loss of `loss` with its gradient written out and set as the parameters' .grad (the
        same numbers autograd gives, tests/test_sae_grads.py checks); the loss, its parts, and [M] how many
        of the batch's tokens each latent fired on. 5 matmuls where autograd runs 6 (its sixth carries
        b_dec's gradient back through x - b_dec as a [B, M]·[M, D] product; here it is W_enc·Σ_b ∂pre, one
        vector), a third of autograd's passes over the [B, M] latents, and no new [B, M] tensor per step
        (two buffers kept: a fresh one costs as much as a pass, in page faults).
        With e = x̂ - x, g = 2e/(B·D) = ∂mse/∂x̂, n_i = ‖W_dec,i‖:
        ∂pre = (g·W_decᵀ + λn/B) where f > 0, else 0;  ∂W_enc = (x - b_dec)ᵀ·∂pre;  ∂b_enc = Σ_b ∂pre;
        ∂W_dec = fᵀ·g + (λ/B)·(Σ_b f_i)·W_dec,i/n_i;  ∂b_dec = Σ_b g - W_enc·∂b_enc."""
        sae = self.sae
        W_enc, W_dec, b_enc, b_dec = sae.W_enc, sae.W_dec, sae.b_enc, sae.b_dec
        l1, n = self.l1_now(step), x.shape[0]
        if self._buffers is None or self._buffers[0].shape[0] != n or self._buffers[0].dtype != W_enc.dtype:
            self._buffers = tuple(torch.empty(n, sae.cfg.d_sae, dtype=W_enc.dtype, device=x.device) for _ in range(2))
        f, d_pre = self._buffers
        xc = x - b_dec
        torch.addmm(b_enc, xc, W_enc, out=f).relu_()  # [B, M]
        e = torch.addmm(b_dec, f, W_dec).sub_(x)  # x̂ - x, [B, D]
        norms = W_dec.norm(dim=1)
        f_sum = f.sum(0)
        mse, sparsity = e.square().mean(), f_sum @ norms / n
        g = e.mul_(2 / e.numel())
        W_dec.grad = torch.addmm(W_dec * ((l1 / n) * f_sum / norms.clamp_min(1e-12))[:, None], f.T, g)
        fired = f.sign_()  # f >= 0: now 1 where the latent fired, 0 elsewhere (f itself is not needed again)
        torch.addmm((l1 / n) * norms, g, W_dec.T, out=d_pre).mul_(fired)
        b_enc.grad = d_pre.sum(0)
        W_enc.grad = xc.T @ d_pre
        b_dec.grad = g.sum(0) - W_enc @ b_enc.grad
        return mse + l1 * sparsity, {"mse": float(mse), "l1": float(sparsity)}, fired.sum(0)

    def _aux_loss(self, e: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
        """AuxK: the residual reconstructed from the dead latents' k_aux largest pre-activations, / Var(e)."""
        dead = self.since_fired >= self.window
        n_dead = int(dead.sum())
        if n_dead == 0:
            return torch.zeros((), device=e.device)
        k_aux = min(self.sae.cfg.d_in // 2, n_dead)
        masked = pre.masked_fill(~dead, float("-inf"))
        top = masked.topk(k_aux, dim=-1)
        f_aux = torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))
        e_hat = f_aux @ self.sae.W_dec
        e = e.detach()
        return ((e - e_hat) ** 2).sum() / ((e - e.mean(0)) ** 2).sum().clamp_min(1e-12)

    @torch.no_grad()
    def track(self, counts: torch.Tensor, tokens: int) -> None:
        """Record a batch of `tokens` tokens in which latent i fired on counts[i] of them."""
        self.since_fired += tokens
        self.since_fired[counts > 0] = 0
        self.fired += counts
        self.counted += tokens

    @torch.no_grad()
    def resample(self, x: torch.Tensor) -> int:
        """Give each dead latent the direction of an input the SAE reconstructs badly; how many."""
        sae = self.sae
        dead = (self.since_fired >= self.window).nonzero().flatten()
        if len(dead) == 0:
            return 0
        err = ((x - sae(x)) ** 2).sum(-1)
        if float(err.sum()) <= 0:
            return 0
        pick = torch.multinomial(err.cpu() ** 2 / (err.cpu() ** 2).sum(), len(dead), replacement=True, generator=self.gen).to(
            x.device
        )
        directions = x[pick] - sae.b_dec
        directions = directions / directions.norm(dim=1, keepdim=True).clamp_min(1e-12)
        alive = self.since_fired < self.window
        enc_norm = sae.W_enc[:, alive].norm(dim=0).mean() if alive.any() else torch.tensor(1.0)
        sae.W_dec[dead] = directions * sae.W_dec[alive].norm(dim=1).mean() if alive.any() else directions * 0.1
        sae.W_enc[:, dead] = directions.T * 0.2 * enc_norm
        sae.b_enc[dead] = 0.0
        for p in (sae.W_enc, sae.W_dec, sae.b_enc):
            state = self.opt.state.get(p)
            if state:
                for key in ("exp_avg", "exp_avg_sq"):
                    if p is sae.W_enc:
                        state[key][:, dead] = 0
                    else:
                        state[key][dead] = 0
        self.since_fired[dead] = 0
        return len(dead)


def fit_sae(
    store: ActivationStore,
    settings: TrainSettings | None = None,
    device: str | torch.device = "cpu",
    progress: Callable[[int, int, dict], None] | None = None,
    **where,
) -> TrainResult:
    """Train an SAE on the store's rows ([N, D]); `where` (hook_name, hook_layer, model_name,
    model_fingerprint) is recorded in its config. progress(step, steps, last logged numbers)."""
    s = settings or TrainSettings()
    s.check(store.d, store.n)
    cfg = s.sae_config(store.d, **where)
    device = torch.device(device)
    t = _Trainer(store, s, cfg, device)
    resample_steps = {round(f * t.steps) for f in s.resample_at} if cfg.arch == "relu" else set()
    history, resampled = [], []
    start = time.perf_counter()
    batches = store.batches(s.batch_size, t.gen)
    for step in range(t.steps):
        _, x = next(batches)
        x = x.to(device) * t.scale
        for group in t.opt.param_groups:
            group["lr"] = s.lr * lr_factor(step, t.steps, s.warmup_fraction, s.decay_fraction)
        if cfg.arch == "relu":  # loss and gradient written out (relu_grads: ~1.8x faster on CPU)
            loss, parts, counts = t.relu_grads(x, step)
        else:
            loss, parts, f = t.loss(x, step)
            counts = (f.detach() > 0).sum(0)
        if not torch.isfinite(loss):
            raise UserError(f"the SAE loss became {float(loss)} at step {step}; lower --lr or --l1")
        if cfg.arch != "relu":
            t.opt.zero_grad(set_to_none=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(t.sae.parameters(), s.grad_clip)
        t.opt.step()
        t.track(counts, len(x))
        if step in resample_steps:
            resampled.append((step, t.resample(x)))
        if step % s.log_every == 0 or step == t.steps - 1:
            l0 = float(counts.sum()) / len(x)
            dead = int((t.since_fired >= t.window).sum())
            history.append({"step": step, "loss": float(loss.detach()), **parts, "l0": l0, "dead": dead})
            if progress is not None:
                progress(step + 1, t.steps, history[-1])
    seconds = time.perf_counter() - start
    densities = (t.fired / max(1, t.counted)).cpu()
    dead = int((t.since_fired >= t.window).sum())
    t.sae.fold_scale(t.scale)
    t.sae.cfg.extra.update(
        {
            "l1": s.l1 if cfg.arch == "relu" else None,
            "lr": s.lr,
            "steps": t.steps,
            "batch_size": s.batch_size,
            "tokens": t.steps * s.batch_size,
            "scale": t.scale,
            "dead_window": t.window,
            "seed": s.seed,
        }
    )
    tokens = t.steps * s.batch_size
    return TrainResult(
        t.sae.eval(), t.steps, tokens, t.scale, seconds, tokens / max(seconds, 1e-9), history, resampled, densities, dead
    )
