"""One write of several steps, all or nothing: each step's undo is registered before it runs.

A child index writes in steps (FAISS, the lexical index, the records; the
vectors and the text of another store). An error or an interrupt (any
``BaseException``: Ctrl-C, a cancellation, an ``OSError``) may land just before
or just after a step returns, so every undo works whether its step ran or not,
and is registered before the step. On a failure the undos run last first, and
the exception goes on up: the write happened whole or not at all.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager


class Undo:
    """The undo of each step of one write so far."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], object]] = []

    def then(self, undo: Callable[[], object]) -> None:
        """Register the undo of the step about to run."""
        self._undo.append(undo)

    def run(self, err: BaseException) -> None:
        """Run every undo, last first; one that fails too is a warning (``verify`` sees it)."""
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception as undo_err:  # each undo is tried
                warn_undo(err, undo_err)


@contextmanager
def all_or_nothing() -> Iterator[Undo]:
    """A write's steps: on any ``BaseException`` their undos run, then it goes on up."""
    undo = Undo()
    try:
        yield undo
    except BaseException as err:
        undo.run(err)
        raise


async def undone(err: BaseException, *undos: Callable[[], Awaitable[object]]) -> None:
    """Async :meth:`Undo.run`: await each undo, last first (a failure is a warning)."""
    for undo in reversed(undos):
        try:
            await undo()
        except Exception as undo_err:  # each undo is tried
            warn_undo(err, undo_err)


def warn_undo(err: BaseException, undo_err: Exception) -> None:
    """Say that a write failed and undoing it failed too."""
    warnings.warn(
        f"A child index write failed ({err!r}) and undoing it failed too ({undo_err!r}); "
        "run verify(repair=True) to make its parts agree.",
        UserWarning,
        stacklevel=4,
    )
