"""The command line's own error: input it cannot use, printed as one clear line with exit code 2.

Every subcommand raises it (``main.py``, ``compare.py``); ``main`` prints it.
"""


class UsageError(Exception):
    """Bad command-line input: printed as one clear line, exit code 2."""
