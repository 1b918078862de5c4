"""What a user mistake is to the command line: one line on stderr, no traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the command line or its inputs: one line, no traceback."""
