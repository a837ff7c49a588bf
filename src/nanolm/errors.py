"""The two ways a command ends early without a traceback.

UserError: a mistake the user can fix; the CLI prints its message on one line of stderr and exits
with code 2. RunStopped: a run that ended without finishing through no mistake of the user's (its
loss diverged, or it was interrupted); one line, and the subclass's own exit code."""


class UserError(Exception):
    """Bad input: the message names the problem and the fix."""

    exit_code = 2


class RunStopped(Exception):
    """A run that stopped before its last step; the message says what was kept and what to do next."""

    exit_code = 1
