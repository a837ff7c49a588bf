"""The nanolm group loads a command's module only when the command runs (nanolm.cli.COMMANDS), and lists every
command under its own name."""

from __future__ import annotations

import ast
import subprocess
import sys

import click

from nanolm.cli import COMMANDS, app


def test_every_listed_command_loads_under_its_own_name_with_its_subcommands():
    ctx = click.Context(app)
    assert app.list_commands(ctx) == list(COMMANDS)
    for name in COMMANDS:
        command = app.get_command(ctx, name)
        assert command is not None and command.name == name
    assert app.get_command(ctx, "no-such-command") is None
    feedback = app.get_command(ctx, "feedback")
    assert {"reward-model", "best-of-n", "bias", "label"} <= set(feedback.list_commands(ctx))
    assert {"sweep", "mono", "train", "eval"} <= set(app.get_command(ctx, "sae").list_commands(ctx))


def test_a_command_loads_its_own_module_and_no_other_commands():
    code = (
        "import sys; from nanolm.cli import app\n"
        "try:\n    app.main(['train', '--help'], prog_name='nanolm', standalone_mode=False)\n"
        "finally:\n    print(sorted(m for m in sys.modules if m.startswith('nanolm.cli.')), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = ast.literal_eval(done.stderr.strip().splitlines()[-1])  # the module names the child printed
    assert "nanolm.cli.train" in loaded
    assert not {"nanolm.cli.sae", "nanolm.cli.feedback", "nanolm.cli.profile", "nanolm.cli.report"} & set(loaded)


def test_a_group_imported_on_its_own_holds_the_subcommands_other_modules_define():
    code = (
        "import click\nfrom nanolm.cli.sae import sae\nfrom nanolm.cli.feedback import feedback\n"
        "ctx = click.Context(sae)\n"
        "print(sorted(sae.list_commands(ctx)), sae.get_command(ctx, 'mono').name,"
        " sorted(feedback.list_commands(click.Context(feedback))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "'mono', 'sweep'" in done.stdout and " mono " in done.stdout, done.stdout
    assert all(f"'{name}'" in done.stdout for name in ("bias", "best-of-n", "reward-model", "label")), done.stdout
