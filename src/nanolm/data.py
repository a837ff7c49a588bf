"""Token data for training: the embedded corpus or a user's UTF-8 file, split into train and
val without leaks, and served as random windows whose order is a pure function of (seed, index),
so a run resumes at the exact sample where it stopped, with any number of DataLoader workers. Under
data-parallel training each rank reads its own disjoint slice of every global batch (rank_samples)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from .config import TrainConfig
from .corpus import corpus_words, generate_corpus, is_val_line
from .errors import UserError
from .tokenizers import ByteTokenizer, Tokenizer, WordTokenizer

_MASK64 = (1 << 64) - 1


@dataclass
class TokenData:
    tokenizer: Tokenizer
    train: torch.Tensor  # [N_train] token ids, int64
    val: torch.Tensor  # [N_val] token ids, int64
    source: str  # "corpus" or the file's path
    version: str  # names the generator and its settings, or the file
    sha256: str  # of the text before tokenization

    def unigram_entropy(self) -> float:
        """Entropy of the train tokens' unigram distribution, nats/token: the loss of a model that
        ignores context entirely."""
        counts = torch.bincount(self.train, minlength=self.tokenizer.vocab_size).double()
        p = counts[counts > 0] / counts.sum()
        return float(-(p * p.log()).sum())

    def describe(self) -> dict:
        return {
            "source": self.source,
            "version": self.version,
            "sha256": self.sha256,
            "tokenizer": self.tokenizer.kind,
            "vocab_size": self.tokenizer.vocab_size,
            "train_tokens": int(self.train.numel()),
            "val_tokens": int(self.val.numel()),
        }


def corpus_data(n_lines: int = 40_000, seed: int = 0, val_fraction: float = 0.1, version: int = 1) -> TokenData:
    """The embedded corpus (version 1 or 2), word-tokenized with that version's vocabulary; split by
    line content, so no val sentence is in train."""
    corpus = generate_corpus(n_lines, seed, version=version)
    tok = WordTokenizer(corpus_words(version))
    train_lines = [line for line in corpus.lines if not is_val_line(line, val_fraction)]
    val_lines = [line for line in corpus.lines if is_val_line(line, val_fraction)]

    def ids(lines: list[str]) -> torch.Tensor:
        return torch.tensor(tok.encode("\n".join(lines) + "\n"), dtype=torch.long)

    # corpus.version names the generator: version 1's string is what existing runs recorded, unchanged
    name = f"{corpus.version}:seed={seed}:lines={n_lines}:val={val_fraction}"
    return TokenData(tok, ids(train_lines), ids(val_lines), "corpus", name, corpus.sha256)


def file_data(path: str | Path, val_fraction: float = 0.1) -> TokenData:
    """A UTF-8 text file, byte-tokenized; the last val_fraction of the bytes is val (contiguous,
    so no window straddles the two)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"--data {path}: is a folder; give the path of a UTF-8 text file")
    if not path.is_file():
        raise UserError(f"--data {path}: no such file; give the path of a UTF-8 text file")
    raw = path.read_bytes()
    if not raw.strip():
        raise UserError(f"--data {path}: the file is empty; give a text file with some content")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"--data {path}: not UTF-8 text (bad byte at offset {e.start}); convert it, e.g. iconv -f latin1 -t utf-8"
        ) from None
    tokens = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
    n_val = max(1, int(len(tokens) * val_fraction))
    sha = hashlib.sha256(raw).hexdigest()
    return TokenData(ByteTokenizer(), tokens[:-n_val], tokens[-n_val:], str(path), f"file:{path.name}:val={val_fraction}", sha)


def load_data(cfg: TrainConfig) -> TokenData:
    """The token data a training config names: its --data file, else the embedded corpus."""
    if cfg.data:
        return file_data(cfg.data, cfg.val_fraction)
    return corpus_data(cfg.corpus_lines, cfg.corpus_seed, cfg.val_fraction, cfg.corpus_version)


def _mix64(x: int) -> int:
    """splitmix64's finalizer: a fast, well-spread hash of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class RandomWindows(Dataset):
    """Item i: (x, y), each [block_size], y = x shifted by one token; the start offset is a hash
    of (seed, i), so item i is the same in every process and after every resume."""

    def __init__(self, tokens: torch.Tensor, block_size: int, seed: int) -> None:
        if tokens.numel() < block_size + 1:
            raise UserError(
                f"only {tokens.numel()} tokens in a split, fewer than the context of "
                f"{block_size} + 1; use more text or a smaller block_size (--set block_size=...)"
            )
        self.tokens, self.block_size, self.key = tokens, block_size, _mix64(seed & _MASK64)
        self.n_starts = tokens.numel() - block_size

    def __len__(self) -> int:
        return 2**62  # unbounded: the sampler decides how many

    def offset(self, i: int) -> int:
        return _mix64(self.key ^ i) % self.n_starts

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        o = self.offset(i)
        chunk = self.tokens[o : o + self.block_size + 1]
        return chunk[:-1], chunk[1:]


def rank_samples(start: int, n_batches: int, batch_size: int, rank: int = 0, world_size: int = 1) -> Iterator[int]:
    """The sample indices rank `rank` of `world_size` reads for the n_batches global batches from sample `start`.

    Global batch m holds samples start + m*batch_size .. start + (m+1)*batch_size - 1, whatever the number of
    ranks; rank r reads the r-th slice of batch_size // world_size of them. The ranks' slices are disjoint, and
    together they are the one-process stream: the global batch, and the data position a checkpoint records
    (start), do not depend on the world size."""
    share = batch_size // world_size
    for m in range(n_batches):
        first = start + m * batch_size + rank * share
        yield from range(first, first + share)


class RankShard(Sampler[int]):
    """rank_samples as a sampler: the data position is just the global index the next batch starts at."""

    def __init__(self, start: int, n_batches: int, batch_size: int, rank: int = 0, world_size: int = 1) -> None:
        if world_size <= 0 or batch_size % world_size or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of {world_size} cannot take an equal share of batches of {batch_size}")
        self.start, self.n_batches, self.batch_size, self.rank, self.world_size = (start, n_batches, batch_size, rank, world_size)

    def __iter__(self) -> Iterator[int]:
        return rank_samples(self.start, self.n_batches, self.batch_size, self.rank, self.world_size)

    def __len__(self) -> int:
        return self.n_batches * (self.batch_size // self.world_size)


def window_loader(
    tokens: torch.Tensor,
    block_size: int,
    batch_size: int,
    seed: int,
    start: int,
    n_batches: int,
    num_workers: int = 0,
    pin_memory: bool = False,
    rank: int = 0,
    world_size: int = 1,
) -> DataLoader:
    """Batches (x, y) [batch_size // world_size, block_size]: this rank's share of the global batches of
    batch_size samples from sample `start` on (n_batches of them; see rank_samples)."""
    return DataLoader(
        RandomWindows(tokens, block_size, seed),
        batch_size=batch_size // world_size,
        sampler=RankShard(start, n_batches, batch_size, rank, world_size),
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=True,
        persistent_workers=False,
        # Its own generator: creating the iterator draws a worker base seed, which must not move the
        # global RNG (dropout's), or a resumed run would drift from the uninterrupted one.
        generator=torch.Generator().manual_seed(seed),
    )


def sample_digest(window: torch.Tensor) -> int:
    """A 64-bit hash of one sample's token ids ([block_size] integers)."""
    data = window.to(torch.int64).contiguous().numpy().tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class ReadReceipt:
    """What one rank trained on, in a form that adds up over ranks: the number of samples and the sum, mod
    2**64, of each sample's digest. Ranks that read disjoint parts of one stream have receipts that add up
    to the receipt of that stream read by one process; two ranks that read the same samples do not."""

    def __init__(self) -> None:
        self.samples, self.digest = 0, 0

    def add(self, x: torch.Tensor) -> None:
        """A batch of inputs [batch, block_size] (on the CPU, before it moves to the device)."""
        for row in x:
            self.digest = (self.digest + sample_digest(row)) & _MASK64
        self.samples += len(x)

    def to_dict(self) -> dict:
        return {"samples": self.samples, "digest": f"{self.digest:016x}"}


def eval_batches(
    tokens: torch.Tensor, block_size: int, batch_size: int, n_batches: int, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed set of batches, the same at every evaluation of a run."""
    ds = RandomWindows(tokens, block_size, seed)
    items = [ds[i] for i in range(n_batches * batch_size)]
    return [
        (torch.stack([x for x, _ in items[b : b + batch_size]]), torch.stack([y for _, y in items[b : b + batch_size]]))
        for b in range(0, len(items), batch_size)
    ]


def bits_per_token(nats: float) -> float:
    return nats / math.log(2)
