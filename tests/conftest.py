"""Shared fixtures: configs small enough that a training run takes a second or two on 2 cores."""

from __future__ import annotations

import pytest

from nanolm.config import make_config

TINY = ["n_layer=2", "n_head=2", "d_model=32", "block_size=16", "batch_size=8", "corpus_lines=3000",
        "eval_batches=2", "warmup_steps=2", "lr=3e-3"]


def tiny_config(tmp_path, *extra: str, **fields):
    """A validated TrainConfig for a tiny model on a small corpus, writing runs under tmp_path."""
    return make_config(overrides=[*TINY, f"runs_dir={tmp_path / 'runs'}", *extra], **fields)


@pytest.fixture
def tiny(tmp_path):
    return lambda *extra, **fields: tiny_config(tmp_path, *extra, **fields)
