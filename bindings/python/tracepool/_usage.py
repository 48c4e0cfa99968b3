"""The command line's one kind of error: a mistake in what the user asked (_cli.py, _run.py, _intercept.py)."""


class UsageError(Exception):
    """A mistake on the command line: one line on stderr, exit status 2."""
