"""Errors that are the user's to fix: the CLI reports them in one line (and run.json), without a traceback."""


class UserError(ValueError):
    """A problem with the user's setting, file or function; the message names it and says what to do."""
