"""Train a tiny next-token model on a synthetic token stream, nanoGPT style (get_batch, no DataLoader).

python train.py --steps 40
"""

import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT = 64, 64


def make_stream(n: int) -> list[int]:
    """A token stream with structure to learn: each token mostly follows from the one before."""
    rng = random.Random(0)
    out = [0]
    for _ in range(n - 1):
        out.append((out[-1] * 5 + 3) % VOCAB if rng.random() < 0.8 else rng.randrange(VOCAB))
    return out


def get_batch(stream: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    # slices of a tensor made once, instead of Python lists and a one-hot round trip per token
    ix = torch.randint(len(stream) - CONTEXT - 1, (batch_size,))
    x = torch.stack([stream[i : i + CONTEXT] for i in ix.tolist()])
    y = torch.stack([stream[i + 1 : i + CONTEXT + 1] for i in ix.tolist()])
    return x, y


class TinyLM(nn.Module):
    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.out = nn.Linear(d, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx)
        return self.out(h + self.mlp(h))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    random.seed(0)
    torch.manual_seed(0)

    stream = torch.tensor(make_stream(50_000))
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(args.steps):
        x, y = get_batch(stream, args.batch_size)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"done: {args.steps} steps, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
