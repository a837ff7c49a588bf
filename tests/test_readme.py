"""The README as a user reads it: every code block runs as written, every option it shows exists,
the config-key table is the config, and every measured figure comes back from the command beside it.

The quick checks run in `make test`; running the blocks and re-measuring the figures takes minutes and
is `make readme-check` (part of `make test-slow`)."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import click
import pytest

from nanolm.cli import app
from nanolm.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def command_lines() -> list[list[str]]:
    """Each `nanolm ...` command in the README's bash blocks, as argv (comments and `&& ...` split off)."""
    out = []
    for block in code_blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            for part in line.split("&&"):
                words = shlex.split(part.strip())
                if words and words[0] == "nanolm":
                    out.append(words[1:])
    return out


def resolve(argv: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command argv names and the rest of its words."""
    command: click.Command = app
    words = list(argv)
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        command = command.commands[words.pop(0)]
    if isinstance(command, click.Group) and getattr(command, "default_command", None) and words:
        command = command.commands[command.default_command]
    if command.name == "profile" and words[:1] == ["compare"]:  # `profile` hands `compare ...` to its own command
        from nanolm.cli.profile import profile_compare

        command, words = profile_compare, words[1:]
    return command, words


def test_every_readme_command_and_option_exists():
    lines = command_lines()
    assert len(lines) > 30
    for argv in lines:
        command, words = resolve(argv)
        if "--" in words:  # what follows is someone else's command line
            words = words[:words.index("--")]
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}
        for word in words:
            if word.startswith("-") and not re.fullmatch(r"-\d.*", word):
                assert word.split("=", 1)[0] in known, f"nanolm {' '.join(argv)}: {word} is not an option of " \
                                                       f"{command.name}"


def test_the_config_key_table_is_the_config():
    table = README[README.index("### Config keys"):]
    table = table[:table.index("\n\n", table.index("| --- |"))]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    documented: dict[str, str] = {}
    for row in rows:
        keys_cell, default_cell = [c.strip() for c in row.strip("|").split("|")[:2]]
        keys = re.findall(r"`([a-z_0-9]+)`", keys_cell)
        defaults = [d.strip().strip("`") for d in default_cell.split(",")] if "," in default_cell else [default_cell]
        for i, key in enumerate(keys):
            documented[key] = defaults[min(i, len(defaults) - 1)].strip("`")
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert set(documented) == set(fields), set(documented) ^ set(fields)
    for key, default in fields.items():
        shown = documented[key]
        if default is None:
            assert shown == "none", (key, shown)
        elif isinstance(default, bool):
            assert shown == str(default).lower(), (key, shown)
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            assert float(shown) == float(default), (key, shown, default)
        else:
            assert shown == default, (key, shown, default)


def test_example_files_the_readme_names_exist_and_load():
    from nanolm.config import make_config
    from nanolm.repro.experiment import load_experiment

    for name in re.findall(r"examples/[\w./-]+\.(?:toml|py)", README):
        assert (ROOT / name).is_file(), name
    assert make_config(ROOT / "examples" / "config.toml").n_layer == 2
    assert load_experiment(ROOT / "examples" / "experiment.toml").idea == "a higher learning rate"


@pytest.mark.slow
def test_the_python_blocks_run_as_written(tmp_path):
    import subprocess
    import sys

    for i, block in enumerate(code_blocks("python")):
        script = tmp_path / f"block{i}.py"
        script.write_text(block)
        out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, f"README python block {i}:\n{block}\n{out.stderr[-2000:]}"
