"""The ``nanolm`` command. Each command is a thin layer over a library function that returns
data; the modules here only parse arguments and format results (rich tables, or JSON with --json).

One module per command group (train, runs, profile, repro, interp, sae, steer, sycophancy, feedback, problems,
formal); `output` holds what they share. Nothing in the library imports from it
(scripts/profile_train.py runs `profile` through `run`). Errors a user can fix (UserError) end as one
line on stderr and exit code 2, without a traceback; a run that stopped without finishing
(RunStopped: diverged, interrupted) ends as one line and its own exit code."""

from __future__ import annotations

import sys

import click

from ..errors import RunStopped, UserError
from . import claims as _claims
from . import feedback as _feedback
from . import feedback_bias as _feedback_bias
from . import feedback_reward as _feedback_reward
from . import formal as _formal
from . import interp as _interp
from . import problems as _problems
from . import profile as _profile
from . import report as _report
from . import repro as _repro
from . import runs as _runs
from . import sae as _sae
from . import sae_grid as _sae_grid
from . import steer as _steer
from . import sweep as _sweep
from . import sycophancy as _sycophancy
from . import train as _train


class _Group(click.Group):
    """Lists commands in the order they were added."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def app() -> None:
    """nanolm: a small GPT and the toolkit to profile, reproduce and interpret it."""


# The feedback group's reward-model, best-of-n and bias commands live in their own modules.
_feedback.feedback.add_command(_feedback_reward.reward_model)
_feedback.feedback.add_command(_feedback_reward.best_of_n)
_feedback.feedback.add_command(_feedback_bias.bias)
# So do the sae group's grid commands (sweep, mono).
_sae.sae.add_command(_sae_grid.sae_sweep)
_sae.sae.add_command(_sae_grid.sae_mono)

for _command in (_train.train, _train.sample, _runs.runs, _profile.profile, _profile.mfu, _profile.peak, _repro.repro,
                 _repro.seeds, _repro.compare, _repro.experiment, _repro.bisect_cmd, _sweep.sweep, _claims.claims, _train.demo,
                 _interp.lens, _interp.probe, _sae.sae, _steer.steer, _sycophancy.sycophancy, _feedback.feedback,
                 _formal.dfa, _formal.dyck, _problems.problems, _report.report):
    app.add_command(_command)


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
