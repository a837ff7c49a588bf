"""logit_lens: compared with nanolm's own lens (nanolm.interp.lens) on random nanolm models."""

from __future__ import annotations

import random
from types import ModuleType

import torch

from . import Check, check, require

CHECKS: list[Check] = []
_check = check(CHECKS)


def random_model(seed: int, norm_gain: bool = False):
    """A random nanolm GPT (eval mode) with weights large enough that every layer moves the residual
    stream; norm_gain: the final norm's gain is far from uniform, so skipping it changes the top-1."""
    from ...model import GPT, GPTConfig

    rng = random.Random(seed)
    n_head = rng.choice([1, 2, 4])
    cfg = GPTConfig(
        vocab_size=rng.randint(20, 80),
        block_size=32,
        n_layer=rng.randint(1, 4),
        n_head=n_head,
        d_model=n_head * rng.choice([8, 16]),
        pos=rng.choice(["rope", "learned"]),
    )
    torch.manual_seed(seed)
    model = GPT(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 if "embed" in name else 1.0 / p.shape[1] ** 0.5)
        if norm_gain:
            model.ln_final.weight.copy_(torch.exp(1.5 * torch.randn(cfg.d_model)))
    tokens = torch.randint(0, cfg.vocab_size, (rng.randint(3, 12),))
    return model, tokens


def lens_top1(model, tokens: torch.Tensor, final_norm: bool = True) -> torch.Tensor:
    """nanolm's lens: top-1 token [L+1, T] (embedding output, then each block's output)."""
    from ...interp.lens import lens_summary
    from ...interp.view import view_of_nanolm

    return lens_summary(view_of_nanolm(model), tokens[None], final_norm=final_norm).top1[:, 0]


def _answer(mod: ModuleType, model, tokens: torch.Tensor) -> torch.Tensor:
    got = mod.logit_lens(model, tokens.clone())
    got = torch.as_tensor(got)
    L, T = model.cfg.n_layer, tokens.shape[0]
    require(
        tuple(got.shape) == (L + 1, T),
        f"for a model of {L} layers and {T} tokens you returned shape "
        f"{list(got.shape)}, expected [{L + 1}, {T}] (the embedding, then each layer)",
    )
    require(not got.is_floating_point(), f"you returned {got.dtype} values; the answer is token ids")
    return got.long()


@torch.no_grad()
def wrong_lenses(model, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """The classic wrong lenses' top-1 [L + 1, T], by what each one reads, to name the mistake in a message."""
    import torch.nn.functional as F

    L = model.cfg.n_layer
    post = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(L)]
    mid = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_mid" for l in range(L)]
    _, cache = model.run_with_cache(tokens[None], names=list(dict.fromkeys(post + mid + ["hook_embed"])))
    resid = torch.stack([cache[n][0] for n in post])  # [L + 1, T, D]
    norm = model.ln_final
    eps = norm.eps if norm.eps is not None else torch.finfo(resid.dtype).eps
    top = {
        "W_U times the raw residual stream or its copy divided by its RMS (the same top-1): without the final norm's "
        "gain (ln_final.weight)": model.unembed(resid),
        "LayerNorm statistics (the mean subtracted, divided by the standard deviation) where the final norm is an "
        "RMSNorm": model.unembed(F.layer_norm(resid, (resid.shape[-1],), norm.weight, None, eps)),
        "the residual stream between each block's attention and its MLP (hook_resid_mid), not what leaves the block "
        "(hook_resid_post)": model.unembed(norm(torch.stack([cache[n][0] for n in mid]))),
    }
    out = {what: logits.argmax(-1) for what, logits in top.items()}
    if not torch.equal(cache["hook_embed"][0], resid[0]):
        first = model.unembed(norm(cache["hook_embed"][0])).argmax(-1)
        right = model.unembed(norm(resid)).argmax(-1)
        out["row 0 from hook_embed, the token embedding without the position embedding (blocks.0.hook_resid_pre holds both)"] = (
            torch.cat((first[None], right[1:]))
        )
    return out


def _named(model, tokens: torch.Tensor, got: torch.Tensor, want: torch.Tensor) -> str:
    """' : your rows read WHAT' when `got` is one of the wrong lenses exactly, else ''."""
    if got.shape[0] > 1 and torch.equal(got[:-1], want[1:]):
        return (
            ": your rows are one layer late (your row l is the lens's row l + 1; row 0 reads the embedding output, "
            "before block 0)"
        )
    if got.shape[0] > 1 and torch.equal(got[1:], want[:-1]):
        return ": your rows are one layer early (your row l + 1 is the lens's row l; the last row is the model's output)"
    for what, top in wrong_lenses(model, tokens).items():
        if torch.equal(got, top) and not torch.equal(top, want):
            return f": your rows read {what}"
    return ""


def _first_mismatch(got: torch.Tensor, want: torch.Tensor) -> tuple[int, int]:
    l, t = (got != want).nonzero()[0].tolist()
    return l, t


def _label(l: int) -> str:
    return "the embedding output" if l == 0 else f"layer {l - 1}"


@_check
def check_shape(mod: ModuleType, seed: int) -> None:
    """One row per layer (the embedding output first), one column per token, token ids."""
    for s in range(3):
        model, tokens = random_model(seed * 10 + s)
        _answer(mod, model, tokens)


@_check
def check_last_layer(mod: ModuleType, seed: int) -> None:
    """The last row is the model's own top-1 prediction."""
    for s in range(3):
        model, tokens = random_model(seed * 10 + s)
        got = _answer(mod, model, tokens)
        with torch.no_grad():
            want = model(tokens[None])[0][0].argmax(-1)
        if not torch.equal(got[-1], want):
            t = int((got[-1] != want).nonzero()[0])
            raise AssertionError(
                f"your last row says token {int(got[-1, t])} at position {t}; the model's own output "
                f"predicts {int(want[t])} there"
            )


@_check
def check_matches_lens(mod: ModuleType, seed: int) -> None:
    """Every layer's top-1 agrees with nanolm's lens, on random models of random sizes."""
    for s in range(4):
        model, tokens = random_model(seed * 10 + s)
        got, want = _answer(mod, model, tokens), lens_top1(model, tokens)
        if torch.equal(got, want):
            continue
        l, t = _first_mismatch(got, want)
        raise AssertionError(
            f"at {_label(l)}, position {t}: your top-1 is token {int(got[l, t])}, the lens reads "
            f"{int(want[l, t])} ({int((got != want).sum())} of {got.numel()} cells differ)"
            f"{_named(model, tokens, got, want)}"
        )


@_check
def check_final_norm(mod: ModuleType, seed: int) -> None:
    """On a model whose final norm has an uneven gain, the answer is still the lens's."""
    for s in range(50):
        model, tokens = random_model(seed * 100 + s, norm_gain=True)
        want, raw = lens_top1(model, tokens), lens_top1(model, tokens, final_norm=False)
        if not torch.equal(want[:-1], raw[:-1]):
            break
    got = _answer(mod, model, tokens)
    if torch.equal(got, want):
        return
    l, t = _first_mismatch(got, want)
    named = _named(model, tokens, got, want)
    if named:
        raise AssertionError(
            f"on a model whose final norm has an uneven gain, your top-1 at {_label(l)}, position {t} "
            f"is token {int(got[l, t])}; the lens (final norm, then W_U) reads {int(want[l, t])}{named}"
        )
    if int(got[l, t]) == int(raw[l, t]):
        raise AssertionError(
            f"on a model whose final norm has an uneven gain, your top-1 at {_label(l)}, position {t} "
            f"is token {int(got[l, t])}, the argmax of W_U times the raw residual stream; "
            f"the lens (final norm, then W_U) reads {int(want[l, t])}"
        )
    raise AssertionError(
        f"on a model whose final norm has an uneven gain, your top-1 at {_label(l)}, position {t} is "
        f"token {int(got[l, t])}; the lens reads {int(want[l, t])}"
    )
