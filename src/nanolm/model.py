"""nanolm's model: a decoder-only transformer in one file.

token embedding (+ learned positions, or rotary inside attention)
  -> n_layer pre-norm blocks: x + attn(rmsnorm(x)), then x + mlp(rmsnorm(x))
  -> final RMSNorm (weight gamma) -> W_U [d_model, vocab] -> logits

Hook points carry TransformerLens's names (``hook_embed``, ``blocks.{l}.hook_resid_pre``,
``blocks.{l}.hook_attn_out``, ``blocks.{l}.hook_resid_mid``, ``blocks.{l}.hook_mlp_out``,
``blocks.{l}.hook_resid_post``, ``blocks.{l}.mlp.hook_post`` (the MLP's hidden units after the
nonlinearity, [B, T, 4D]), ``ln_final.hook_normalized``). A hook point is a plain
Python object, not a module, so with no hook set it costs one empty-list check.

Generation can reuse each layer's keys and values (a ``KVCache`` per layer): the prompt is run once,
then each step runs one new position against the cached ones.

Shapes: B batch, T time (positions), D d_model, H heads, Dh head size, V vocabulary,
S key positions (the cached ones plus the new ones).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .flops import training_flops_per_token

# A hook reads (and may replace) one activation: fn(activation, hook_name) -> new activation or None.
HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]


@dataclass
class GPTConfig:
    vocab_size: int = 512
    block_size: int = 64  # longest context T the model accepts
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_mlp: int | None = None  # None: 4 * d_model
    pos: str = "rope"  # "rope" (rotary, default) or "learned"
    tie_embeddings: bool = False  # W_U = W_E^T when True
    dropout: float = 0.0
    norm_eps: float = 1e-5
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"model config: {name} must be a positive integer, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            raise ValueError(f"model config: d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.pos not in ("rope", "learned"):
            raise ValueError(f"model config: pos must be 'rope' or 'learned', got {self.pos!r}")
        if self.pos == "rope" and self.d_head % 2:
            raise ValueError(f"model config: rotary positions need an even head size, got {self.d_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model config: dropout must be in [0, 1), got {self.dropout}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @property
    def mlp_dim(self) -> int:
        return self.d_mlp or 4 * self.d_model

    def to_dict(self) -> dict:
        return asdict(self)

    def sizes(self) -> str:
        """The fields that set the weights' shapes, in words: 'vocab_size 65, block_size 64, n_layer 2, ...'."""
        names = ("vocab_size", "block_size", "n_layer", "n_head", "d_model", "d_mlp", "pos", "tie_embeddings")
        return ", ".join(f"{name} {getattr(self, name)}" for name in names)


# Shapes only; the vocabulary comes from the tokenizer unless the preset fixes it (GPT-2's padded 50304).
PRESETS: dict[str, dict] = {
    "tiny": dict(n_layer=4, n_head=4, d_model=128, block_size=64),  # the demo: minutes on 2 CPU cores
    "small": dict(n_layer=6, n_head=6, d_model=384, block_size=256),
    # GPT-2 small: W_U tied to W_E, as GPT-2 has it (124M parameters; untied, 162M)
    "gpt2-124m": dict(n_layer=12, n_head=12, d_model=768, block_size=1024, vocab_size=50304, tie_embeddings=True),
}


def preset_config(name: str, **overrides) -> GPTConfig:
    """GPTConfig of a named preset, with field overrides (None values are ignored)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    fields = {**PRESETS[name], **{k: v for k, v in overrides.items() if v is not None}}
    return GPTConfig(**fields)


class HookPoint:
    """A named point in the forward pass; the identity unless hooks are attached."""

    __slots__ = ("name", "fns")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fns: list[HookFn] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for fn in self.fns:
            out = fn(x, self.name)
            if out is not None:
                x = out
        return x

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r}, {len(self.fns)} hooks)"


def rotary_tables(T: int, d_head: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables for rotary positions, each [T, d_head // 2] (float32)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head))
    angles = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., i], x[..., i + Dh/2]) of x [..., Dh] by position-dependent angles: cos and sin
    broadcast against x[..., :Dh/2] (for x [B, H, T, Dh], tables [T, Dh/2])."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


@dataclass
class KVCache:
    """One attention layer's keys and values for the positions seen so far, for incremental decoding.

    The buffers k, v [B, H, max_len, Dh] are allocated on the first write (so they take the shape, dtype and
    device of the keys, also under autocast) and then filled in place: a torch.cat per step would copy the
    whole cache for every new token."""

    max_len: int  # the model's block_size: positions past it need a sliding window, which a cache can't hold
    k: torch.Tensor | None = None  # [B, H, max_len, Dh]; positions [0, length) are filled
    v: torch.Tensor | None = None
    length: int = 0  # the absolute position of the next token written

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B, H, T, Dh] at positions [length, length + T); return all keys and values so far,
        each [B, H, length + T, Dh] (views into the buffers, no copy)."""
        T = k.size(2)
        if self.length + T > self.max_len:
            raise ValueError(f"KV cache of {self.max_len} positions is full ({self.length} + {T} new)")
        if self.k is None or self.v is None:
            B, H, _, Dh = k.shape
            self.k, self.v = k.new_empty(B, H, self.max_len, Dh), v.new_empty(B, H, self.max_len, Dh)
        self.k[:, :, self.length : self.length + T] = k
        self.v[:, :, self.length : self.length + T] = v
        self.length += T
        return self.k[:, :, : self.length], self.v[:, :, : self.length]


def attention_mask(T: int, S: int, device: torch.device) -> torch.Tensor | None:
    """Boolean [T, S] mask (True: may attend) for T new queries at the last T of S key positions, or None
    when every query may see every key. Query i sits at position S - T + i and sees keys 0..S - T + i.

    SDPA's is_causal aligns the triangle to the top-left, which is only right when T == S, so a chunk
    after a cached prefix needs this explicit mask; a single new query sees everything and needs none."""
    if T == 1:
        return None
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d_head, self.dropout = cfg.n_head, cfg.d_head, cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None, kv_cache: KVCache | None = None
    ) -> torch.Tensor:
        """x [B, T, D] -> [B, T, D]. rotary: cos, sin [T, Dh/2] at the new positions' absolute offsets.
        kv_cache: this layer's cached keys and values; the new ones are appended and attended to with them."""
        B, T, D = x.shape
        q, k, v = self.split_heads(self.qkv(x), rotary)  # each [B, H, T, Dh]
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # each [B, H, S, Dh]: cached positions first, then the T new ones
        dropout_p = self.dropout if self.training else 0.0
        S = k.size(2)
        if S == T:  # no cached prefix: the usual causal triangle
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)  # [B, H, T, Dh]
        else:
            mask = attention_mask(T, S, x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        y = y.transpose(1, 2).contiguous().view(B, T, D)
        return self.resid_dropout(self.proj(y))

    def split_heads(
        self, qkv: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The qkv projection's output [B, T, 3D] -> q, k, v, each [B, H, T, Dh]; q and k rotated when rotary
        (cos, sin [T, Dh/2]) is given.

        q and k are rotated together, in the [B, T, 3, H, Dh] layout the matmul wrote, before the transpose: one
        pass over both, whose backward writes the projection's gradient in that same layout. Rotated one at a
        time after the transpose, torch.compile's backward became a transposed copy that took 3.8 ms of a
        35.6 ms training step at gpt2-124m on an H200; this way its two kernels take 0.9 ms (docs/performance.md)."""
        B, T, _ = qkv.shape
        qkv = qkv.view(B, T, 3, self.n_head, self.d_head)
        if rotary is None:
            q, k, v = qkv.unbind(2)  # each [B, T, H, Dh]
        else:
            cos, sin = (t[:, None, None, :] for t in rotary)  # [T, 1, 1, Dh/2]
            q, k = apply_rotary(qkv[:, :, :2], cos, sin).unbind(2)
            v = qkv[:, :, 2]
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_dim, bias=False)
        self.proj = nn.Linear(cfg.mlp_dim, cfg.d_model, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)
        self.hook_post = HookPoint(f"blocks.{layer}.mlp.hook_post")  # the hidden units after GELU (TransformerLens's name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.hook_post(F.gelu(self.fc(x)))))  # [B, T, D] -> [B, T, 4D] -> [B, T, D]


class RMSNorm(nn.RMSNorm):
    """torch's RMSNorm (x / rms(x) * gain, no bias), with its forward written in this file: torch.compile
    does not compile a module of torch.nn's own by itself (it skips torch's files), and compile_kernels
    compiles each norm alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)  # [..., D] -> [..., D]


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg, layer)
        for point in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{point}", HookPoint(f"blocks.{layer}.hook_{point}"))

    def forward(
        self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None, kv_cache: KVCache | None = None
    ) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        attn_out = self.hook_attn_out(self.attn(self.ln1(x), rotary, kv_cache))
        x = self.hook_resid_mid(x + attn_out)
        mlp_out = self.hook_mlp_out(self.mlp(self.ln2(x)))
        return self.hook_resid_post(x + mlp_out)


class FinalNorm(RMSNorm):
    """The final RMSNorm; its output is ``ln_final.hook_normalized``."""

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__(d_model, eps=eps)
        self.hook_normalized = HookPoint("ln_final.hook_normalized")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(super().forward(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)  # W_E [V, D]
        self.pos_embed = nn.Embedding(cfg.block_size, cfg.d_model) if cfg.pos == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layer))
        self.ln_final = FinalNorm(cfg.d_model, cfg.norm_eps)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)  # weight [V, D] = W_U^T
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight
        self.hook_embed = HookPoint("hook_embed")
        self.hook_pos_embed = HookPoint("hook_pos_embed")
        if cfg.pos == "rope":
            cos, sin = rotary_tables(cfg.block_size, cfg.d_head, cfg.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)
        # GPT-2: scale the projections that write into the residual stream by 1/sqrt(2 * n_layer).
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @property
    def W_U(self) -> torch.Tensor:
        """The unembedding, [D, V]."""
        return self.unembed.weight.T

    @property
    def W_E(self) -> torch.Tensor:
        """The token embedding, [V, D]."""
        return self.embed.weight

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count. exclude_embeddings drops the lookup tables (token and learned position
        embeddings), which cost no FLOPs; W_U stays, since it is a matmul (nanoGPT's convention
        for 6N). A tied W_U is counted once."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            if not self.cfg.tie_embeddings:
                n -= self.embed.weight.numel()
            if self.pos_embed is not None:
                n -= self.pos_embed.weight.numel()
        return n

    def flops_per_token(self, T: int | None = None, with_attention: bool = True) -> float:
        """Training FLOPs per token: 6N, plus 12 * n_layer * d_model * T for attention scores and
        values (PaLM appendix B; nanoGPT's estimate_mfu)."""
        n = self.num_params(exclude_embeddings=True)
        if not with_attention:
            return training_flops_per_token(n)
        return training_flops_per_token(n, self.cfg.n_layer, self.cfg.d_model, T or self.cfg.block_size)

    # ---- forward -------------------------------------------------------------------------
    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, kv_cache: list[KVCache] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx [B, T] token ids -> (logits [B, T, V], mean cross-entropy in nats or None).

        kv_cache: one KVCache per layer (see new_kv_cache). idx then holds the tokens that follow the cached
        ones: they sit at absolute positions [start, start + T), start being the number of cached positions,
        and their keys and values are added to the cache. With an empty cache this is the plain forward."""
        B, T = idx.shape
        start = kv_cache[0].length if kv_cache is not None else 0
        if kv_cache is not None and len(kv_cache) != len(self.blocks):
            raise ValueError(f"kv_cache has {len(kv_cache)} layers, the model has {len(self.blocks)}")
        if self.cfg.block_size < start + T:
            raise ValueError(f"sequence of length {start + T} is longer than the context of {self.cfg.block_size} tokens")
        x = self.hook_embed(self.embed(idx))  # [B, T, D]
        rotary = None
        if self.pos_embed is not None:
            x = x + self.hook_pos_embed(self.pos_embed(torch.arange(start, start + T, device=idx.device)))
        else:
            rotary = (self.rope_cos[start : start + T], self.rope_sin[start : start + T])  # each [T, Dh/2]
        x = self.drop(x)
        for layer, block in enumerate(self.blocks):
            x = block(x, rotary, kv_cache[layer] if kv_cache is not None else None)
        logits = self.unembed(self.ln_final(x))  # [B, T, V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    # ---- hooks ---------------------------------------------------------------------------
    def hook_points(self) -> dict[str, HookPoint]:
        """Every hook point by name, in forward order."""
        points = [self.hook_embed] + ([self.hook_pos_embed] if self.pos_embed is not None else [])
        for block in self.blocks:
            points += [
                block.hook_resid_pre,
                block.hook_attn_out,
                block.hook_resid_mid,
                block.mlp.hook_post,
                block.hook_mlp_out,
                block.hook_resid_post,
            ]
        points.append(self.ln_final.hook_normalized)
        return {p.name: p for p in points}

    def check_hook_names(self, names: Iterable[str]) -> list[str]:
        """names as a list, once each is known to be a hook point of this model; KeyError names the first
        unknown one and lists the model's hook points."""
        names = list(names)
        points = self.hook_points()
        unknown = [n for n in names if n not in points]
        if unknown:
            raise KeyError(
                f"unknown hook point {unknown[0]!r}; this model has: hook_embed, "
                f"blocks.{{0..{self.cfg.n_layer - 1}}}.hook_{{resid_pre,attn_out,resid_mid,"
                f"mlp_out,resid_post}}, blocks.{{0..{self.cfg.n_layer - 1}}}.mlp.hook_post, "
                "ln_final.hook_normalized"
            )
        return names

    def _resolve(self, names: Iterable[str]) -> list[HookPoint]:
        points = self.hook_points()
        return [points[n] for n in self.check_hook_names(names)]

    @contextmanager
    def hooks(self, fns: dict[str, HookFn] | Iterable[tuple[str, HookFn]]) -> Iterator[GPT]:
        """Attach hooks for the duration of a with-block; they are removed on exit, also on error.

        >>> with model.hooks({"blocks.1.hook_resid_post": lambda x, name: x + alpha * v}):
        ...     logits, _ = model(idx)
        """
        pairs = list(fns.items()) if isinstance(fns, dict) else list(fns)
        points = self._resolve([name for name, _ in pairs])
        for point, (_, fn) in zip(points, pairs):
            point.fns.append(fn)
        try:
            yield self
        finally:
            for point, (_, fn) in zip(points, pairs):
                point.fns.remove(fn)

    def run_with_cache(
        self,
        idx: torch.Tensor,
        names: Iterable[str] | Callable[[str], bool] | None = None,
        detach: bool = True,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Run the model and return (logits [B, T, V], {hook name: activation}).

        names: hook names, a predicate on names, or None for all of them. The cached tensor is the
        very one the forward pass used next (after any earlier hook on the same point)."""
        all_names = list(self.hook_points())
        if names is None:
            wanted = all_names
        elif callable(names):
            wanted = [n for n in all_names if names(n)]
        else:
            wanted = list(names)
        cache: dict[str, torch.Tensor] = {}

        def save(x: torch.Tensor, name: str) -> None:
            cache[name] = x.detach() if detach else x

        with self.hooks([(n, save) for n in wanted]):
            logits, _ = self(idx)
        return logits, cache

    # ---- sampling ------------------------------------------------------------------------
    def new_kv_cache(self) -> list[KVCache]:
        """An empty key/value cache for incremental decoding: one KVCache per layer, block_size positions."""
        return [KVCache(self.cfg.block_size) for _ in self.blocks]

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        stop_token: int | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Extend idx [B, T] by up to max_new_tokens sampled tokens -> [B, T + new]; temperature 0 is greedy.
        Stops early once every row's newest token is stop_token.

        use_cache: run the prompt once, then one new position per step against each layer's cached keys and
        values (hooks then see [B, T, ...] once and [B, 1, ...] per step). The tokens are the same as without
        the cache, up to float rounding: once the sequence outgrows block_size, the context window slides,
        every token's position changes, and generation recomputes the cropped window each step, as without it.
        That holds for hooks that treat every position alike (a steering vector, an ablation of a direction);
        a hook that edits positions by index (x[:, -1]) edits a different set of positions with the cache, where
        each position's activations are computed once, so pass use_cache=False for those."""
        kv_cache = self.new_kv_cache() if use_cache else None
        for _ in range(max_new_tokens):
            logits = self.next_token_logits(idx, kv_cache)
            nxt = sample_next(logits, temperature, top_k, generator)  # [B, 1]
            idx = torch.cat((idx, nxt), dim=1)
            if stop_token is not None and bool((nxt == stop_token).all()):
                break
        return idx

    def next_token_logits(self, idx: torch.Tensor, kv_cache: list[KVCache] | None) -> torch.Tensor:
        """Logits [B, V] (float32) for the token after idx [B, T], given the whole sequence so far; with a
        cache, only the tokens the cache has not seen yet are run (the prompt, then one token a step)."""
        if kv_cache is None or idx.size(1) > self.cfg.block_size:
            # Past block_size the window slides, so every cached key sits at a stale position (and the token
            # that left the window shaped the hidden states of all later ones): recompute the cropped window.
            logits, _ = self(idx[:, -self.cfg.block_size :])
        else:
            logits, _ = self(idx[:, kv_cache[0].length :], kv_cache=kv_cache)
        return logits[:, -1, :].float()


def compile_kernels(model: GPT) -> GPT:
    """Compile, in place, each block's two RMSNorms and its attention with torch.compile, one module at a time;
    returns the model. Everything else (the hook points, the MLP, the embeddings, the final norm and W_U) stays
    eager code, so hooks fire on the same tensors as before and see eager tensors.

    Why these: a norm is several elementwise passes over [B, T, D] forward and more backward, and attention's
    rotary is several more over q and k; compiled, each becomes a fused loop, while the matmuls and SDPA are the
    same kernels as in eager code. The results equal eager ones up to float rounding (a norm's mean is summed in
    another order).

    For a training loop: shapes are compiled as static ([B, T, D] fixed), so each new sequence length (sampling
    one token at a time, a KV cache) would be compiled again; generate with an uncompiled model. The compiler
    runs at the first call (seconds); on CPU it needs a C++ compiler."""
    for block in model.blocks:
        for module in (block.ln1, block.ln2, block.attn):
            module.compile(dynamic=False)
    return model


def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Next token ids [B, 1] from logits [B, V]: argmax when temperature <= 0, otherwise `draw` with one uniform
    per row from `generator` (on the logits' device)."""
    if temperature <= 0:
        return logits.argmax(dim=-1, keepdim=True)
    u = torch.rand(logits.size(0), generator=generator, device=logits.device)
    return draw(logits, u, temperature, top_k)[:, None]


def draw(logits: torch.Tensor, u: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """Next tokens [B] from logits [B, V] and uniforms u [B] in [0, 1): argmax at temperature <= 0; otherwise
    the first token whose cumulative probability under softmax(logits / temperature), restricted to the top_k
    logits (ties with the k-th kept), exceeds u (inverse-CDF sampling, so equal u give equal draws).

    The one sampling rule of nanolm: GPT.generate draws with it, and so does nanolm.generate, which every
    command that writes text (sample, steer, sycophancy, feedback) samples through."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1)  # [B, V]
    # scaled by the total: rounding can leave cdf[-1] a hair under 1
    token = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1).contiguous(), right=True).squeeze(-1)
    return token.clamp(max=logits.size(-1) - 1)
