"""The find-and-fix checks: one per planted bug, each measuring the symptom that bug causes and
nothing else, so that a block with only bug k left fails check k alone among the bugs' checks. Every
find-and-fix problem runs them all (nanolm.problems.registry.FIND_AND_FIX_CHECKS) on the whole block,
so that a "fix" that breaks something else fails: train-mode dropout, the loss against the mean
cross-entropy, and the block's outputs and gradients against the original block's with its weights.

Each check isolates its part of the block: the attention checks call ``attend`` on chosen
queries, keys and values (values one-hot per position, so the output *is* the attention weights);
the residual and norm checks replace the sublayers by recorders that write zeros.
"""

from __future__ import annotations

import importlib.util
import math
import random
from types import ModuleType

import torch
import torch.nn.functional as F

from . import CONTEXT, Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)


def _shape(seed: int) -> tuple[int, int, int, int]:
    """(B, H, T, Dh), with T ≤ Dh so one-hot values per position fit in a head."""
    rng = random.Random(seed)
    return rng.randint(1, 3), rng.choice([2, 4]), rng.randint(5, 12), rng.choice([16, 24])


def _block(mod: ModuleType, seed: int, dropout: float = 0.0):
    B, H, T, Dh = _shape(seed)
    torch.manual_seed(seed)
    return mod.Block(H * Dh, H, dropout=dropout).eval()


def _weights(mod: ModuleType, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the learner's attention weights [B, H, T, T], q, k): attend with one-hot values."""
    B, H, T, Dh = _shape(seed)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, H, T, Dh, generator=g), torch.randn(B, H, T, Dh, generator=g)
    v = torch.zeros(B, H, T, Dh)
    v[..., torch.arange(T), torch.arange(T)] = 1.0  # value t is e_t: output row i = the weights of query i
    with torch.no_grad():
        out = _block(mod, seed).attend(q, k, v)
    require(tuple(out.shape) == (B, H, T, Dh), f"attend returned shape {list(out.shape)} for q, k, v of shape {[B, H, T, Dh]}")
    return out[..., :T], q, k


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference; equal NaNs count as equal, a NaN against a number as infinite."""
    same_nan = a.isnan() & b.isnan()
    d = (a - b).abs().masked_fill(same_nan, 0.0).nan_to_num(nan=float("inf"))
    return float(d.max()) if d.numel() else 0.0


@_check
def check_causal(mod: ModuleType, seed: int) -> None:
    """No position's output depends on a later position."""
    w, _, _ = _weights(mod, seed)
    T = w.shape[-1]
    for i in range(T):
        row = w[..., i, :]
        require(not bool(row.isnan().any()), f"position {i}'s attention output is NaN")
        later = row[..., i + 1 :].abs().amax(dim=tuple(range(row.dim() - 1))) if i + 1 < T else torch.zeros(0)
        if later.numel() and float(later.max()) > 1e-6:
            j = i + 1 + int(later.argmax())
            raise AssertionError(
                f"position {i}'s output depends on position {j}, which comes after it (weight {float(later.max()):.2f})"
            )


@_check
def check_weights_sum(mod: ModuleType, seed: int) -> None:
    """Each query's attention weights add up to 1 (its output is an average of values)."""
    w, _, _ = _weights(mod, seed)
    sums = w.sum(-1)  # [B, H, T]
    bad = (sums - 1).abs().nan_to_num(nan=float("inf")) > 1e-4
    if bool(bad.any()):
        b, h, i = (int(x) for x in bad.nonzero()[0])
        raise AssertionError(
            f"query {i}'s attention weights (head {h}) add up to {float(sums[b, h, i]):.3f}: "
            "its output is not an average of the value vectors"
        )


@_check
def check_scale(mod: ModuleType, seed: int) -> None:
    """Attention weights are softmax(q·k / sqrt(d_head)), checked at the last position (it sees every key)."""
    w, q, k = _weights(mod, seed)
    Dh = q.shape[-1]
    want = torch.softmax(q[..., -1:, :] @ k.transpose(-2, -1) / Dh**0.5, dim=-1)[..., 0, :]  # [B, H, T]
    got = w[..., -1, :]
    if _max_diff(got, want) > 1e-4:
        g, e = float(got.max(-1).values.mean()), float(want.max(-1).values.mean())
        shape = "sharper" if g > e else "flatter"
        raise AssertionError(
            f"at the last position, which sees every key, attention is {shape} than it should be: "
            f"its largest weight averages {g:.2f} where softmax of the scores gives {e:.2f} "
            f"(d_head = {Dh})"
        )


def _describe(values: torch.Tensor, d_model: int) -> str:
    """Where the values of a [Dh] slice came from, values being 1000·position + feature."""
    pos = sorted({int(v) // 1000 for v in values.tolist()})
    feats = [int(v) % 1000 for v in values.tolist()]
    if feats == list(range(feats[0], feats[0] + len(feats))):
        what = f"features {feats[0]}..{feats[-1]}"
    else:
        what = f"features {', '.join(map(str, feats[:4]))}, ..."
    return f"{what} of position{'s' if len(pos) > 1 else ''} {', '.join(map(str, pos))}"


def _labelled(seed: int) -> tuple[torch.Tensor, int, int, int, int]:
    """x [B, T, D] with x[b, t, d] = 1000·t + d, and its shape."""
    B, H, T, Dh = _shape(seed)
    D = H * Dh
    x = (1000.0 * torch.arange(T, dtype=torch.float64)[:, None] + torch.arange(D, dtype=torch.float64)).expand(B, T, D)
    return x.contiguous(), B, H, T, Dh


@_check
def check_split(mod: ModuleType, seed: int) -> None:
    """split_heads gives head h, at position t, that position's h-th slice of features."""
    x, B, H, T, Dh = _labelled(seed)
    got = _block(mod, seed).split_heads(x)
    require(tuple(got.shape) == (B, H, T, Dh), f"split_heads gave shape {list(got.shape)}, expected {[B, H, T, Dh]}")
    want = x.view(B, T, H, Dh).transpose(1, 2)
    for h in range(H):
        for t in range(T):
            if not torch.equal(got[0, h, t], want[0, h, t]):
                raise AssertionError(
                    f"after split_heads, head {h} at position {t} holds {_describe(got[0, h, t], H * Dh)}, "
                    f"not features {h * Dh}..{(h + 1) * Dh - 1} of position {t}: heads mix positions"
                )


@_check
def check_merge(mod: ModuleType, seed: int) -> None:
    """merge_heads puts every head back at its own position, in order."""
    x, B, H, T, Dh = _labelled(seed)
    got = _block(mod, seed).merge_heads(x.view(B, T, H, Dh).transpose(1, 2))
    require(tuple(got.shape) == (B, T, H * Dh), f"merge_heads gave shape {list(got.shape)}, expected {[B, T, H * Dh]}")
    for t in range(T):
        if not torch.equal(got[0, t], x[0, t]):
            raise AssertionError(
                f"after merge_heads, position {t} holds {_describe(got[0, t], H * Dh)}: "
                "the heads' outputs land at other positions"
            )


@_check
def check_relative(mod: ModuleType, seed: int) -> None:
    """Attention with rotary positions depends only on distances: the same tokens later give the same output."""
    B, H, T, Dh = _shape(seed)
    block = _block(mod, seed)
    x = torch.randn(B, T, H * Dh, generator=torch.Generator().manual_seed(seed))
    s = random.Random(seed).randint(3, 40)
    with torch.no_grad():
        a, b = block.attention(x, 0), block.attention(x, s)
    d = _max_diff(a, b)
    if d > 1e-4 * (1 + float(a.nan_to_num().abs().max())):
        raise AssertionError(
            f"the same inputs at positions {s}..{s + T - 1} instead of 0..{T - 1} give a different "
            f"attention output (largest change {d:.3g}): it depends on where the sequence starts, "
            "not only on the distances between tokens"
        )


@_check
def check_rotary_positions(mod: ModuleType, seed: int) -> None:
    """rotary leaves position 0 as it is and rotates position t by t steps."""
    B, H, T, Dh = _shape(seed)
    x = torch.randn(B, H, T, Dh, generator=torch.Generator().manual_seed(seed))
    r = mod.rotary(x, 0)
    d0 = _max_diff(r[..., 0, :], x[..., 0, :])
    require(d0 < 1e-5, f"rotary(x, start=0) changes the vector at position 0 (largest change {d0:.3g}), which sits at angle 0")
    s = random.Random(seed).randint(1, T - 1)
    d = _max_diff(mod.rotary(x[..., s:, :], s), r[..., s:, :])
    require(
        d < 1e-4,
        f"rotary(x[..., {s}:, :], start={s}) differs from rotary(x)[..., {s}:, :] "
        f"(largest difference {d:.3g}): the same position gets two angles",
    )


def _silenced(block, record: dict[str, torch.Tensor]):
    """Replace the block's attention and MLP by functions that record their input and write zeros."""

    def recorder(name: str):
        def sublayer(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            record[name] = x.detach().clone()
            return torch.zeros_like(x)

        return sublayer

    block.attention, block.mlp = recorder("attention"), recorder("mlp")
    return block


@_check
def check_residual(mod: ModuleType, seed: int) -> None:
    """With both sublayers writing zeros, the block passes the residual stream through unchanged."""
    B, H, T, Dh = _shape(seed)
    x = torch.randn(B, T, H * Dh, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = _silenced(_block(mod, seed), {})(x)
    d = (out - x).abs().amax(-1)  # [B, T]
    if float(d.max()) > 1e-5:
        t = int(d.max(0).values.argmax())
        raise AssertionError(
            f"with the attention and the MLP both writing zeros, the block still changes its input "
            f"(position {t} moved by {float(d.max(0).values[t]):.3g}): the residual stream does not "
            "pass through"
        )


@_check
def check_norm(mod: ModuleType, seed: int) -> None:
    """Each sublayer reads a normalized copy of the residual stream (RMS 1 whatever its scale)."""
    B, H, T, Dh = _shape(seed)
    x = 3.0 * torch.randn(B, T, H * Dh, generator=torch.Generator().manual_seed(seed))
    record: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        _silenced(_block(mod, seed), record)(x)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    for name in ("attention", "mlp"):
        require(name in record, f"the block never called its {name} sublayer")
        seen = record[name]
        if _max_diff(seen, want) > 1e-3:
            rms = float(seen.pow(2).mean(-1).sqrt().mean())
            stream = float(x.pow(2).mean(-1).sqrt().mean())
            raise AssertionError(
                f"the {name} sublayer reads inputs of RMS {rms:.2f} from a residual stream of RMS "
                f"{stream:.2f}: what it sees grows with the stream"
            )


@_check
def check_eval_deterministic(mod: ModuleType, seed: int) -> None:
    """In eval mode the block is deterministic (dropout only acts in training)."""
    B, H, T, Dh = _shape(seed)
    block = _block(mod, seed, dropout=0.5)
    x = torch.randn(B, T, H * Dh, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        a, b = block(x), block(x)
    d = _max_diff(a, b)
    require(d < 1e-6, f"in eval mode, two calls on the same input gave different outputs (largest difference {d:.3g})")


@_check
def check_loss(mod: ModuleType, seed: int) -> None:
    """lm_loss is the mean cross-entropy of each position's next-token prediction (≈ 0 when certain)."""
    rng = random.Random(seed)
    B, T, V = rng.randint(1, 4), rng.randint(4, 12), rng.randint(8, 50)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (B, T), generator=g)
    while bool((tokens[:, 1:] == tokens[:, :-1]).any()):  # no repeats, so next, current and previous differ
        tokens = torch.randint(0, V, (B, T), generator=g)

    def certain(targets: torch.Tensor) -> torch.Tensor:
        logits = torch.full((B, T, V), -20.0)
        return logits.scatter(-1, targets[..., None], 20.0)

    nxt = torch.cat((tokens[:, 1:], tokens[:, :1]), dim=1)
    prev = torch.cat((tokens[:, :1], tokens[:, :-1]), dim=1)
    scores = {
        what: float(mod.lm_loss(certain(t), tokens))
        for what, t in (("the next token", nxt), ("the current token", tokens), ("the previous token", prev))
    }
    if scores["the next token"] > 1e-3:
        best = min(scores, key=scores.get)
        raise AssertionError(
            f"logits that predict each next token with certainty score a loss of "
            f"{scores['the next token']:.2f}, while logits that predict {best} score {scores[best]:.2f}"
        )
    logits = (2.0 * torch.randn(B, T, V, generator=g)).requires_grad_(True)
    got = mod.lm_loss(logits, tokens)
    require(
        isinstance(got, torch.Tensor) and got.numel() == 1,
        f"lm_loss returned {type(got).__name__} "
        f"{list(got.shape) if isinstance(got, torch.Tensor) else ''}, not a one-number tensor",
    )
    n = B * (T - 1)
    want = F.cross_entropy(logits.detach()[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
    value, expected = float(got.detach()), float(want)
    if not math.isclose(value, expected, rel_tol=1e-4, abs_tol=1e-5):
        what = (
            f" ({value / expected:.0f}× the mean: a sum over the {n} predictions, not their mean)"
            if math.isclose(value, expected * n, rel_tol=1e-4)
            else ""
        )
        raise AssertionError(
            f"on random logits ({B} sequences of {T} tokens), lm_loss gives {value:.4f}; the mean "
            f"cross-entropy of the {n} next-token predictions is {expected:.4f}{what}"
        )
    require(got.requires_grad, "lm_loss's value carries no gradient back to the logits: nothing would train")
    got.backward()
    leaf = logits.detach().requires_grad_(True)
    F.cross_entropy(leaf[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1)).backward()
    d = _max_diff(logits.grad, leaf.grad)
    require(
        d < 1e-5,
        f"lm_loss has the right value but its gradient with respect to the logits differs from the "
        f"mean cross-entropy's (largest difference {d:.3g})",
    )


N_DROPOUT = 300  # train-mode draws (copies along the batch) averaged to compare with the output without dropout


@_check
def check_train_dropout(mod: ModuleType, seed: int) -> None:
    """In train mode dropout acts on the attention weights and on the MLP, what it keeps scaled by 1/(1-p)."""
    B, H, T, Dh = _shape(seed)
    block, plain = _block(mod, seed, dropout=0.5), _block(mod, seed, dropout=0.0)  # the same weights
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, Dh, generator=g) for _ in range(3))
    x = torch.randn(B, T, H * Dh, generator=g)
    torch.manual_seed(seed)

    def many(t: torch.Tensor) -> torch.Tensor:  # N_DROPOUT copies along the batch: independent dropout draws
        return t.repeat(N_DROPOUT, *([1] * (t.dim() - 1)))

    for what, call, shape in (
        ("attend (the attention weights)", lambda b, n: b.attend(n(q), n(k), n(v)), q.shape),
        ("the MLP", lambda b, n: b.mlp(n(x)), x.shape),
    ):
        with torch.no_grad():
            block.train()
            runs = call(block, many).reshape(N_DROPOUT, *shape)
            want = call(plain, lambda t: t)
        require(
            _max_diff(runs[0], runs[1]) > 1e-6,
            f"in train mode with dropout 0.5, {what} gives the same output on two calls: no dropout acts there in training",
        )
        ratio = float((runs.mean(0) * want).sum() / (want * want).sum().clamp_min(1e-12))
        require(
            0.85 < ratio < 1.15,
            f"averaged over {N_DROPOUT} calls in train mode with dropout 0.5, {what} gives "
            f"{ratio:.2f}× its output without dropout: what dropout keeps is not rescaled by "
            "1/(1-p)",
        )


_REFERENCES: dict[str, ModuleType] = {}


def _reference(name: str) -> ModuleType:
    """The problem's reference block, loaded once (not registered in sys.modules)."""
    if name not in _REFERENCES:
        from ..registry import PROBLEMS

        spec = importlib.util.spec_from_file_location(f"_nanolm_reference_{name}", PROBLEMS[name].reference_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _REFERENCES[name] = module
    return _REFERENCES[name]


def prepare(problem) -> None:
    """Load the reference block before the learner's code runs: the grading process refuses to open a
    reference solution once it does (nanolm.problems.sandbox)."""
    if problem.bugs:
        _reference(problem.name)


def _same_parameters(mine: torch.nn.Module, theirs: torch.nn.Module) -> None:
    a, b = mine.state_dict(), theirs.state_dict()
    missing, extra = sorted(set(b) - set(a)), sorted(set(a) - set(b))
    shapes = [
        f"{n} {list(a[n].shape)} where the original has {list(b[n].shape)}"
        for n in sorted(set(a) & set(b))
        if a[n].shape != b[n].shape
    ]
    parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"extra {', '.join(extra)}"] if extra else []) + shapes
    require(not parts, f"the block's parameters are not the original block's: {'; '.join(parts)}")
    mine.load_state_dict(b)


@_check
def check_matches_reference(mod: ModuleType, seed: int) -> None:
    """With the original block's weights, the same outputs and gradients, in eval and in train mode."""
    if CONTEXT.problem not in ("find_and_fix_1", "find_and_fix_2", "find_and_fix_3"):
        raise RuntimeError(f"no reference block for problem {CONTEXT.problem!r}")  # a bug of the grading
    ref = _reference(CONTEXT.problem)
    B, H, T, Dh = _shape(seed)
    D = H * Dh
    torch.manual_seed(seed)
    theirs = ref.Block(D, H, dropout=0.0)
    with torch.no_grad():  # gains and biases away from 1 and 0, so that a missing one shows
        for p in theirs.parameters():
            if p.dim() == 1:
                p.copy_(torch.exp(0.5 * torch.randn_like(p)) * torch.sign(torch.randn_like(p) + 1.5))
    mine = mod.Block(D, H, dropout=0.0)
    _same_parameters(mine, theirs)
    g = torch.Generator().manual_seed(seed)
    start = random.Random(seed).randint(0, 20)
    for mode in ("eval", "train"):
        x, w = torch.randn(B, T, D, generator=g), torch.randn(B, T, D, generator=g)
        outs, grads = [], []
        for block in (theirs, mine):
            block.train(mode == "train")
            block.zero_grad(set_to_none=True)
            xi = x.clone().requires_grad_(True)
            out = block(xi, start)
            require(
                isinstance(out, torch.Tensor) and tuple(out.shape) == (B, T, D),
                f"the block returned {list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__} "
                f"for an input of shape {[B, T, D]}",
            )
            outs.append(out.detach())
            if out.requires_grad:
                (out * w).sum().backward()
            grads.append({"the input": xi.grad, **{n: p.grad for n, p in block.named_parameters()}})
        d = _max_diff(outs[1], outs[0])
        if d > 2e-5 * (1 + float(outs[0].abs().max())):
            t = int((outs[1] - outs[0]).abs().nan_to_num(nan=float("inf")).amax(dim=(0, 2)).argmax())
            raise AssertionError(
                f"in {mode} mode, with the original block's weights, the block's forward output differs "
                f"from the original block's (largest difference {d:.3g}, first at position {t})"
            )
        for name, want in grads[0].items():
            got = grads[1].get(name)
            if want is None:
                continue
            if got is None:
                raise AssertionError(f"in {mode} mode the forward outputs agree, but no gradient reaches {name}")
            d = _max_diff(got, want)
            if d > 1e-4 * (1 + float(want.abs().max())):
                raise AssertionError(
                    f"in {mode} mode the forward outputs agree, but the gradient with respect to {name} "
                    f"differs from the original block's (largest difference {d:.3g})"
                )
