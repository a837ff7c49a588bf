"""Shared fixtures: configs small enough that a training run takes a second or two on 2 cores."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nanolm.config import make_config

TINY = [
    "n_layer=2",
    "n_head=2",
    "d_model=32",
    "block_size=16",
    "batch_size=8",
    "corpus_lines=3000",
    "eval_batches=2",
    "warmup_steps=2",
    "lr=3e-3",
]


def tiny_config(tmp_path, *extra: str, **fields):
    """A validated TrainConfig for a tiny model on a small corpus, writing runs under tmp_path."""
    return make_config(overrides=[*TINY, f"runs_dir={tmp_path / 'runs'}", *extra], **fields)


@pytest.fixture
def tiny(tmp_path):
    return lambda *extra, **fields: tiny_config(tmp_path, *extra, **fields)


# A model trained long enough to have structure worth interpreting (~30 s on 2 cores), shared by the
# interpretability tests: trained once per test session.
TRAINED = [
    "n_layer=2",
    "n_head=4",
    "d_model=64",
    "block_size=32",
    "batch_size=16",
    "corpus_lines=8000",
    "eval_batches=2",
    "warmup_steps=20",
    "lr=3e-3",
    "steps=2000",
    "eval_every=2000",
    "ckpt_every=2000",
]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """The folder of a finished nanolm run on the embedded corpus."""
    from nanolm.train import train

    runs = tmp_path_factory.mktemp("trained") / "runs"
    result = train(make_config(overrides=[*TRAINED, f"runs_dir={runs}"], name="trained"), progress=False)
    return result.run_dir


@pytest.fixture(scope="session")
def kv_run(tmp_path_factory):
    """A run of 2 layers × 4 heads trained 60 steps, for `nanolm claims kv` (each test writes its claim and reads
    it back at once): trained once per test session."""
    from nanolm.train import train

    runs = tmp_path_factory.mktemp("kv") / "runs"
    cfg = make_config(
        overrides=[
            "n_layer=2",
            "n_head=4",
            "d_model=32",
            "block_size=32",
            "batch_size=8",
            "corpus_lines=3000",
            "eval_batches=1",
            "warmup_steps=5",
            "steps=60",
            "eval_every=60",
            "ckpt_every=60",
            f"runs_dir={runs}",
        ],
        name="kv",
    )
    return train(cfg, progress=False).run_dir


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the CLI in this process, through the same entry point as the `nanolm` script (no interpreter
    start-up per call): cli(*args, cwd=...) -> CompletedProcess with returncode, stdout and stderr.
    Each test file still runs its commands as real subprocesses at least once."""
    from nanolm.cli import main

    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str, cwd) -> subprocess.CompletedProcess:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return run


def word_level_gpt2(words: list[str], n_positions: int = 16, n_embd: int = 32):
    """(a random-init Hugging Face GPT2LMHeadModel, its word-level tokenizer) over `words` ("<unk>" and "<bos>"
    first): a Hugging Face model to test on without downloading one. Skips when the hf extra is missing."""
    transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    core = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<bos>")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(words), n_positions=n_positions, n_embd=n_embd, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=1
    )
    return transformers.GPT2LMHeadModel(cfg), tok


# ---- a tiny trained run of each kind, made once and copied by the tests that need one ---------------


@pytest.fixture(scope="session")
def bad_input_runs(tmp_path_factory) -> Path:
    """A folder with a.txt and runs/<...>-words (embedded corpus, word tokens) and
    runs/<...>-bytes (trained on a.txt, byte tokens)."""
    from bad_input import TEXT_A, TINY_ARGS
    from nanolm.cli import main

    base = tmp_path_factory.mktemp("trained")
    (base / "a.txt").write_text(TEXT_A, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        for name, extra in (("words", []), ("bytes", ["--data", "a.txt"])):
            with pytest.raises(SystemExit) as exc:
                main(["train", *TINY_ARGS, "--name", name, *extra])
            assert exc.value.code == 0
    return base


@pytest.fixture
def workdir(bad_input_runs, tmp_path) -> Path:
    """A private copy of the trained folder (runs and a.txt), safe to damage."""
    work = tmp_path / "work"
    shutil.copytree(bad_input_runs, work)
    return work
