# mutant: the loss pairs each position with its own token (both sides shifted)
# expect: the current token
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""A transformer block with rotary positions, a fused QKV projection and a SwiGLU MLP.

Shapes: B batch, T positions, D d_model, H heads, Dh = D / H head size, V vocabulary.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def rotary(x: torch.Tensor, start: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate the pairs (x[..., i], x[..., i + Dh/2]) of x [B, H, T, Dh] by angles proportional to each
    token's position, start..start+T-1."""
    T, Dh = x.shape[-2], x.shape[-1]
    positions = torch.arange(start, start + T, dtype=torch.float32)  # [T]
    inv_freq = base ** (-torch.arange(0, Dh // 2, dtype=torch.float32) * 2 / Dh)  # [Dh/2]
    angles = positions[:, None] * inv_freq[None, :]  # [T, Dh/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        assert d_model % n_head == 0 and (d_model // n_head) % 2 == 0
        self.n_head, self.d_head, self.dropout = n_head, d_model // n_head, dropout
        hidden = 8 * d_model // 3
        self.ln1 = nn.RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.ln2 = nn.RMSNorm(d_model)
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, H, T, Dh]"""
        B, T, D = x.shape
        return x.view(B, T, self.n_head, self.d_head).transpose(1, 2)

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        """[B, H, T, Dh] -> [B, T, D]"""
        B, H, T, Dh = y.shape
        return y.transpose(1, 2).contiguous().view(B, T, H * Dh)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of each head: q, k, v [B, H, T, Dh] -> [B, H, T, Dh]."""
        T = q.size(-2)
        scale = 1.0 / math.sqrt(q.size(-1))
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # [B, H, T, T]
        future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        weights = F.dropout(weights, self.dropout, training=self.training)
        return torch.matmul(weights, v)

    def attention(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x [B, T, D] at positions start..start+T-1 -> [B, T, D]."""
        q, k, v = (self.split_heads(t) for t in self.qkv(x).split(x.size(-1), dim=-1))
        q, k = rotary(q, start), rotary(k, start)
        return self.proj(self.merge_heads(self.attend(q, k, v)))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """SwiGLU: [B, T, D] -> [B, T, D]"""
        h = F.silu(self.gate(x)) * self.up(x)
        h = F.dropout(h, self.dropout, training=self.training)
        return self.down(h)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """The residual stream [B, T, D] at positions start..start+T-1 -> [B, T, D]."""
        x = x + self.attention(self.ln1(x), start)
        x = x + self.mlp(self.ln2(x))
        return x


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of next-token prediction: logits [B, T, V] at position t predict tokens[:, t + 1]."""
    V = logits.size(-1)
    return F.cross_entropy(logits[:, 1:].reshape(-1, V), tokens[:, 1:].reshape(-1))
