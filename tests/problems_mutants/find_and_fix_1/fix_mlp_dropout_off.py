# mutant: the MLP's dropout turned off in training too (training=False)
# expect: the MLP gives the same output on two calls
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""A GPT-2-style transformer block: pre-norm attention and MLP, each added to the residual stream.

Shapes: B batch, T positions, D d_model, H heads, Dh = D / H head size, V vocabulary.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / rms(x) * gain, over the last axis."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        assert d_model % n_head == 0
        self.n_head, self.d_head, self.dropout = n_head, d_model // n_head, dropout
        self.ln1 = RMSNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.ln2 = RMSNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, H, T, Dh]"""
        B, T, D = x.shape
        return x.view(B, T, self.n_head, self.d_head).transpose(1, 2)

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        """[B, H, T, Dh] -> [B, T, D]"""
        B, H, T, Dh = y.shape
        return y.transpose(1, 2).reshape(B, T, H * Dh)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of each head: q, k, v [B, H, T, Dh] -> [B, H, T, Dh]."""
        T = q.size(-2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, H, T, T]
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        weights = F.dropout(weights, self.dropout, training=self.training)
        return weights @ v

    def attention(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """[B, T, D] -> [B, T, D] (this block has no rotary positions: start is unused)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        y = self.attend(self.split_heads(q), self.split_heads(k), self.split_heads(v))
        return self.proj(self.merge_heads(y))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, T, D]"""
        h = F.gelu(self.fc(x))
        h = F.dropout(h, self.dropout, training=False)
        return self.fc_out(h)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """The residual stream [B, T, D] at positions start..start+T-1 -> [B, T, D]."""
        x = x + self.attention(self.ln1(x), start)
        x = x + self.mlp(self.ln2(x))
        return x


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of next-token prediction: logits [B, T, V] at position t predict tokens[:, t + 1]."""
    V = logits.size(-1)
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
