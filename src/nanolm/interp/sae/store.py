"""Activations for SAE training: collected once from a model, kept in RAM or on disk, served shuffled.

Collection writes float32 rows as they come (a file when the whole would exceed ``ram_bytes``, else a
list of tensors), so memory holds one model batch at a time, not the million tokens; training then reads
random batches from that array (a memory map when on disk: the operating system pages rows in and out).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...errors import UserError

RAM_BYTES = 2 * 2**30  # activations larger than this are collected to a file, not held in memory


@dataclass
class ActivationStore:
    """N activation rows of width D: a [N, D] float32 tensor in memory, or a memory-mapped file."""

    rows: torch.Tensor | np.ndarray  # [N, D] float32
    path: Path | None = None  # the file behind a memory map

    @property
    def n(self) -> int:
        return int(self.rows.shape[0])

    @property
    def d(self) -> int:
        return int(self.rows.shape[1])

    def take(self, index: torch.Tensor) -> torch.Tensor:
        """[len(index), D] float32 rows (read in index order: sorted reads are faster from a file)."""
        if isinstance(self.rows, torch.Tensor):
            return self.rows[index]
        order = index.sort()
        out = torch.from_numpy(np.ascontiguousarray(self.rows[order.values.numpy()]))
        return out[order.indices.argsort()]

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n rows drawn without replacement (all rows when n >= N)."""
        if n >= self.n:
            return self.take(torch.arange(self.n))
        return self.take(torch.randperm(self.n, generator=generator)[:n])

    def batches(self, batch_size: int, generator: torch.Generator) -> Iterator[tuple[int, torch.Tensor]]:
        """Endless (epoch, [batch_size, D]) batches: each epoch a new permutation of the rows."""
        epoch = 0
        while True:
            perm = torch.randperm(self.n, generator=generator)
            for start in range(0, self.n - batch_size + 1, batch_size):
                yield epoch, self.take(perm[start : start + batch_size])
            epoch += 1

    def close(self) -> None:
        """Drop the memory map and its file (a store made in a temporary folder)."""
        if self.path is not None:
            self.rows = np.empty((0, self.d), dtype=np.float32)
            self.path.unlink(missing_ok=True)


def store_from_tensor(x: torch.Tensor) -> ActivationStore:
    """A store over activations already in memory ([N, D], any float dtype); NaN is refused."""
    if x.ndim != 2:
        raise UserError(f"activations must be [N, D], got shape {tuple(x.shape)}")
    x = x.detach().float().cpu()
    _check_finite(x, "the activations given")
    return ActivationStore(x)


def _check_finite(x: torch.Tensor, where: str) -> None:
    if not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).any(dim=-1).nonzero()[0, 0])
        raise UserError(
            f"NaN or infinite values in {where} (row {bad}); the model's activations are not finite "
            "there: check the model (a diverged run?) before training an SAE on it"
        )


def collect_store(
    batches: Iterator[torch.Tensor],
    max_tokens: int,
    d: int,
    folder: Path | None = None,
    ram_bytes: int = RAM_BYTES,
    progress: Callable[[int], None] | None = None,
) -> ActivationStore:
    """Up to max_tokens rows from batches of [n, D] activations; written to a file in `folder` (or a temporary
    folder) when max_tokens · D · 4 bytes exceed ram_bytes. progress(rows so far) after each batch."""
    on_disk = max_tokens * d * 4 > ram_bytes
    # in memory: one [max_tokens, D] block filled in place (a list + torch.cat held it twice at the end;
    # rows never written are never touched, so they take no memory)
    rows = None if on_disk else torch.empty(max_tokens, d)
    n = 0
    handle, path = None, None
    if on_disk:
        fd, name = tempfile.mkstemp(prefix="sae-acts-", suffix=".f32", dir=folder)
        handle, path = os.fdopen(fd, "wb"), Path(name)
    try:
        for batch in batches:
            batch = batch[: max_tokens - n].detach().float().cpu()
            _check_finite(batch, f"the activations at token {n}–{n + len(batch)}")
            if handle is not None:
                handle.write(batch.numpy().tobytes())
            else:
                rows[n : n + len(batch)] = batch
            n += len(batch)
            if progress is not None:
                progress(n)
            if n >= max_tokens:
                break
    except BaseException:
        if handle is not None:
            handle.close()
            path.unlink(missing_ok=True)
        raise
    if handle is None:
        return ActivationStore(rows[:n])
    handle.close()
    if n == 0:
        path.unlink(missing_ok=True)
        return ActivationStore(torch.empty(0, d))
    return ActivationStore(np.memmap(path, dtype=np.float32, mode="r", shape=(n, d)), path)


def token_batches(
    view, texts: Sequence[str] | Sequence[Sequence[int]], hook: str, batch_size: int = 32
) -> Iterator[torch.Tensor]:
    """Every valid token's activation at `hook`, [n, D] per batch of texts, in text order."""
    from ..activations import iter_token_activations

    for batch in iter_token_activations(view, texts, hook, batch_size):
        yield batch.acts
