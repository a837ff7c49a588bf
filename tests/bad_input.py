"""What every bad-input test checks: the real command in a subprocess or ``nanolm.cli.main`` in this process
(file-descriptor capture sees whatever reaches fd 2), exit code 2 with exactly one line on stderr, and the disk
as it was (a snapshot of every file's hash)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from nanolm.cli import main

TINY = [
    "n_layer=1",
    "d_model=32",
    "n_head=2",
    "block_size=16",
    "batch_size=4",
    "steps=4",
    "eval_every=2",
    "eval_batches=1",
    "log_every=1",
    "ckpt_every=2",
    "corpus_lines=2000",
]
TINY_ARGS = [a for kv in TINY for a in ("--set", kv)] + ["-q"]
TEXT_A = "the quick brown fox jumps over the lazy dog.\n" * 40
TEXT_B = "pack my box with five dozen liquor jugs!\n" * 40


def nanolm(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nanolm", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def in_process(argv: list[str], capfd) -> tuple[int, str]:
    """(exit code, stderr) of nanolm.cli.main(argv), run in the current directory."""
    capfd.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capfd.readouterr().err


def assert_user_error(code: int, stderr: str, *names: str) -> str:
    """Exit code 2, exactly one non-empty line on stderr, no traceback, naming each of names."""
    assert code == 2, stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), stderr
    assert lines[0].startswith("nanolm: error: "), stderr
    for name in names:
        assert name in lines[0], (name, stderr)
    return lines[0]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under folder: relative path -> sha256 of its contents."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def run_of(workdir: Path, name: str) -> Path:
    [run] = [p for p in (workdir / "runs").iterdir() if p.name.endswith(f"-{name}")]
    return run
