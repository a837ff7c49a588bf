"""The one exception type for mistakes a user can fix: the CLI prints its message on one line
of stderr and exits with code 2, without a traceback."""


class UserError(Exception):
    """Bad input: the message names the problem and the fix."""

    exit_code = 2
