#!/usr/bin/env python3
"""scripts/profile_train.py: nanolm's own training steps under torch.profiler, where the week-22
reference document tells a learner to look.

It is `nanolm profile` for nanolm's training and nothing else: the same library function
(nanolm.profiling.record.training.profile_training), the same options, the same report and the same exit
codes (bad input: one line on stderr, exit 2). It hands its arguments to that command rather than
repeating its option list, so an option added to `nanolm profile` is an option here too.

    .venv/bin/python scripts/profile_train.py --set preset=tiny
    .venv/bin/python scripts/profile_train.py --set preset=small --json before.json
    .venv/bin/python scripts/profile_train.py --set preset=small --set batch_size=32 --json after.json
    .venv/bin/nanolm profile compare before.json after.json --why "batch 32"

Someone else's script is `nanolm profile -- python other.py`, which this script refuses.
"""

from __future__ import annotations

import copy
import sys

PROG = "scripts/profile_train.py"

HELP = """Profile nanolm's own training steps: phases (data, forward, backward, optimizer), the top
operators by self time grouped by category, host-device syncs, MFU and a plain-words verdict on where
the bottleneck is. On a CPU (or MPS) only the CPU is profiled, and the report says so.

This is `nanolm profile` for nanolm's training (the same report and options); to profile another
script use `nanolm profile -- python other.py`, to compare two reports `nanolm profile compare`.

\b
scripts/profile_train.py --set preset=tiny
scripts/profile_train.py --set preset=small --json before.json
"""

# `nanolm profile`'s options that only act on someone else's script: hidden here, where they would do nothing.
# Names that are not (or no longer) options of the command are simply not found.
SCRIPT_ONLY = ("run_to_end", "tokens_per_step", "wall_seconds")


def script_command(profile):
    """A copy of the `nanolm profile` command under this script's help, refusing a command to profile."""
    import click

    from nanolm.errors import UserError

    class ScriptCommand(type(profile)):  # keeps the command's own argument parsing
        def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
            ctx.meta["dashes"] = "--" in args  # click drops the `--` itself
            return super().parse_args(ctx, args)

        def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
            return [self.options_metavar]  # the COMMAND argument exists only to be refused

    command = copy.copy(profile)
    command.__class__ = ScriptCommand
    command.help = HELP
    command.short_help = None
    command.params = [_hidden(p) if p.name in SCRIPT_ONLY else p for p in profile.params]
    run_profile = profile.callback

    def callback(**kwargs):
        given = list(kwargs.get("command") or ())
        ctx = click.get_current_context()
        if ctx.meta.get("dashes"):
            raise UserError(f"this script profiles nanolm's own training only; `{' '.join(['--', *given])}` is for "
                            "`nanolm profile -- python other.py ARGS`, which profiles someone else's script")
        if given and given[0].startswith("-"):  # the command takes unknown options as the start of a command line
            raise click.NoSuchOption(given[0], ctx=ctx)
        if given:
            raise UserError(f"this script takes only options (see {PROG} --help), not {' '.join(given)!r}; to profile "
                            "another script use `nanolm profile -- python other.py ARGS`, to compare two reports "
                            "`nanolm profile compare BEFORE.json AFTER.json`")
        return run_profile(**kwargs)

    command.callback = callback
    return command


def _hidden(param):
    hidden = copy.copy(param)  # a copy: `nanolm profile` itself keeps showing the option
    hidden.hidden = True
    return hidden


def main(argv: list[str] | None = None) -> None:
    try:
        from nanolm.cli import run
        from nanolm.cli.profile import profile
    except ImportError as e:  # a fresh clone before `make`, or the wrong interpreter: say so in one line
        print(f"{PROG}: error: nanolm is not importable with {sys.executable} ({e}); install it first "
              "(`make .venv/.installed-stamp`, or `pip install -e .`) and run this with .venv/bin/python",
              file=sys.stderr)
        sys.exit(2)
    run(script_command(profile), sys.argv[1:] if argv is None else argv, PROG)


if __name__ == "__main__":
    main()
