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


def get_batch(stream: list[int], batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for _ in range(batch_size):
        i = random.randrange(len(stream) - CONTEXT - 1)
        window = [stream[i + j] for j in range(CONTEXT + 1)]
        one_hot = [[1.0 if t == v else 0.0 for v in range(VOCAB)] for t in window[:-1]]
        xs.append(torch.tensor(one_hot).argmax(dim=-1))
        ys.append(torch.tensor(window[1:]))
    return torch.stack(xs), torch.stack(ys)


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

    stream = make_stream(50_000)
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
