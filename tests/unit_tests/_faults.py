"""Faults at one step of a child index's write: an error or an interrupt, before or after it.

A step is one call that changes a part of the child index: the records
(``Records.add``/``remove``), FAISS (``IndexIDMap2.add_with_ids``/``remove_ids``)
or the lexical index (``LexicalIndex.add``/``delete``). The fault is raised at
the step's call number ``at``, either ``before`` the real call (nothing of it
happened) or ``after`` it (it happened, and the interrupt landed as it
returned, as Ctrl-C does after a long FAISS call).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Iterator
from typing import Any

import faiss
import pytest

from langchain_s2b.store.lexical.lexical_index import LexicalIndex
from langchain_s2b.store.vectors.records import Records


class DiskFullError(OSError):
    """A write that found no room (an ``OSError``)."""

    def __init__(self) -> None:
        super().__init__(errno.ENOSPC, "injected: no space left on device")


WRITE_STEPS: dict[str, tuple[Any, str]] = {
    "records.add": (Records, "add"),
    "records.remove": (Records, "remove"),
    "faiss.add": (faiss.IndexIDMap2, "add_with_ids"),
    "faiss.remove": (faiss.IndexIDMap2, "remove_ids"),
    "lexical.add": (LexicalIndex, "add"),
    "lexical.delete": (LexicalIndex, "delete"),
}
"""Every step of a ``FaissIndex`` write, by name: the class and the method it calls."""

KINDS: dict[str, type[BaseException]] = {
    "interrupt": KeyboardInterrupt,
    "cancel": asyncio.CancelledError,
    "error": DiskFullError,
}
"""What lands at the step: Ctrl-C, a cancellation, an I/O error."""


@contextlib.contextmanager
def fault_at(step: str, kind: str, when: str = "before", at: int = 0) -> Iterator[list[bool]]:
    """Raise ``KINDS[kind]`` at call number ``at`` of ``step``; yields ``[fired]``."""
    owner, name = WRITE_STEPS[step]
    real = getattr(owner, name)
    calls = [0]
    fired = [False]

    def faulty(*args: Any, **kwargs: Any) -> Any:
        number = calls[0]
        calls[0] += 1
        due = number == at and not fired[0]
        if due and when == "before":
            fired[0] = True
            raise KINDS[kind]()
        result = real(*args, **kwargs)
        if due:
            fired[0] = True
            raise KINDS[kind]()
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(owner, name, faulty)
        yield fired
