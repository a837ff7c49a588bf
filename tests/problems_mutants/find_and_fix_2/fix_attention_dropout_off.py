# mutant: attention dropout turned off in training too (training=False)
# expect: attend (the attention weights) gives the same output
# ruff: noqa  (a deliberately wrong solution, kept as a learner would write it)
"""A transformer block with rotary positions and separate query, key and value projections.

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
    inv_freq = 1.0 / base ** (torch.arange(0, Dh, 2, dtype=torch.float32) / Dh)  # [Dh/2]
    angles = torch.outer(torch.arange(start, start + T, dtype=torch.float32), inv_freq)  # [T, Dh/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        assert d_model % n_head == 0 and (d_model // n_head) % 2 == 0
        self.n_head, self.d_head, self.dropout = n_head, d_model // n_head, dropout
        self.ln1 = nn.RMSNorm(d_model)
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.ln2 = nn.RMSNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, H, T, Dh]"""
        B, T, _ = x.shape
        return x.reshape(B, T, self.n_head, self.d_head).permute(0, 2, 1, 3)

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        """[B, H, T, Dh] -> [B, T, D]"""
        B, H, T, Dh = y.shape
        return y.transpose(1, 2).reshape(B, T, H * Dh)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of each head: q, k, v [B, H, T, Dh] -> [B, H, T, Dh]."""
        T, Dh = q.shape[-2], q.shape[-1]
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(Dh)  # [B, H, T, S]
        allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
        weights = torch.softmax(scores, dim=-1)
        weights = F.dropout(weights, self.dropout, training=False)
        return torch.einsum("bhts,bhsd->bhtd", weights, v)

    def attention(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x [B, T, D] at positions start..start+T-1 -> [B, T, D]."""
        q, k, v = self.split_heads(self.q(x)), self.split_heads(self.k(x)), self.split_heads(self.v(x))
        q, k = rotary(q, start), rotary(k, start)
        return self.proj(self.merge_heads(self.attend(q, k, v)))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, T, D]"""
        h = F.gelu(self.fc(x), approximate="tanh")
        return self.fc_out(F.dropout(h, self.dropout, training=self.training))

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """The residual stream [B, T, D] at positions start..start+T-1 -> [B, T, D]."""
        x = x + self.attention(self.ln1(x), start)
        x = x + self.mlp(self.ln2(x))
        return x


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of next-token prediction: logits [B, T, V] at position t predict tokens[:, t + 1]."""
    predictions, targets = logits[:, :-1], tokens[:, 1:]
    return F.cross_entropy(predictions.flatten(0, 1), targets.flatten())
