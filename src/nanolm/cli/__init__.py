"""The ``nanolm`` command. Each command is a thin layer over a library function that returns
data; the modules here only parse arguments and format results (rich tables, or JSON with --json).

One module per command group (train, runs, profile, repro, interp, sae, steer, sycophancy, feedback, problems,
formal); `output` holds what they share. Nothing in the library imports from it
(scripts/profile_train.py runs `profile` through `run`). Errors a user can fix (UserError) end as one
line on stderr and exit code 2, without a traceback; a run that stopped without finishing
(RunStopped: diverged, interrupted) ends as one line and its own exit code."""

from __future__ import annotations

import importlib
import sys

import click

from ..errors import RunStopped, UserError

# Every command, in the order `nanolm --help` lists them: name -> (module of nanolm.cli, the command in it). A
# command's module is imported when the command runs (or when --help lists it), so `nanolm train` loads the train
# command's module only. A group whose subcommands live in other modules names them itself (output.GroupWithModules).
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("train", "train"),
    "sample": ("train", "sample"),
    "runs": ("runs", "runs"),
    "profile": ("profile", "profile"),
    "mfu": ("profile", "mfu"),
    "peak": ("profile", "peak"),
    "repro": ("repro", "repro"),
    "seeds": ("repro", "seeds"),
    "compare": ("repro", "compare"),
    "experiment": ("repro", "experiment"),
    "bisect": ("repro", "bisect_cmd"),
    "sweep": ("sweep", "sweep"),
    "claims": ("claims", "claims"),
    "demo": ("train", "demo"),
    "lens": ("interp", "lens"),
    "probe": ("interp", "probe"),
    "sae": ("sae", "sae"),
    "steer": ("steer", "steer"),
    "sycophancy": ("sycophancy", "sycophancy"),
    "feedback": ("feedback", "feedback"),
    "dfa": ("formal", "dfa"),
    "dyck": ("formal", "dyck"),
    "problems": ("problems", "problems"),
    "report": ("report", "report"),
}


def _command_in(module: str, attribute: str) -> click.Command:
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)


class _LazyGroup(click.Group):
    """The nanolm group: lists COMMANDS in their order, and loads a command's module when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return _command_in(*COMMANDS[cmd_name])


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def app() -> None:
    """nanolm: a small GPT and the toolkit to profile, reproduce and interpret it."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command; a UserError or RunStopped becomes one line on stderr and its exit code."""
    run(app, argv, "nanolm")


def run(command: click.Command, argv: list[str] | None, prog_name: str) -> None:
    """Run `command` as a program named `prog_name`, errors as `main` shows them ("PROG: error: ..." on one
    line, exit code 2 for bad input). Also the entry point of scripts/profile_train.py, which runs the
    profile command under its own name."""
    try:
        code = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except (UserError, RunStopped) as e:
        click.echo(f"{prog_name}: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo(f"{prog_name}: aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as e:  # a bare group: its help, as asked
        e.show()
        sys.exit(e.exit_code)
    except click.UsageError as e:  # a bad option or value: one line, with where to look
        where = f"{e.ctx.command_path} --help" if e.ctx is not None else f"{prog_name} --help"
        click.echo(f"{prog_name}: error: {e.format_message()} (see {where})", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo(f"{prog_name}: interrupted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
