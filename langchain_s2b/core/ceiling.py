"""What a budget's cut is made of: bounds, a source's leaves read so far, a cut run.

A budget is a ceiling over a mode's shape (:mod:`~langchain_s2b.core.place`
spends a reached one). A run cut from a result stays inside its
:class:`Bounds` (a window's split ids, a parent's or paragraph's span), is
built from the :class:`Leaves` read so far around its hits (:data:`RING` on
each side, more as it grows), and comes back as a :class:`Cut`
(:func:`cut_document`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from langchain_core.documents import Document

from langchain_s2b.core.hits import Group, Hit, result_metadata
from langchain_s2b.core.merge import Chunk

RING = 8
"""Leaves read on each side of a hit when a result is cut (doubled as needed)."""


@dataclass(frozen=True)
class Bounds:
    """What a cut may not leave: split ids ``[lo, hi]`` and/or characters ``[start, end)``."""

    lo: int = 0
    hi: int | None = None
    start: int | None = None
    end: int | None = None

    def within(self, split: int) -> bool:
        """Whether split id ``split`` is inside ``[lo, hi]``."""
        return self.lo <= split and (self.hi is None or split <= self.hi)

    def holds(self, split: int, leaf: Chunk) -> bool:
        """Whether leaf ``split`` lies inside."""
        if not self.within(split):
            return False
        if self.start is not None and leaf.start < self.start:
            return False
        return self.end is None or leaf.end <= self.end


@dataclass(frozen=True)
class Cut:
    """A run of consecutive leaves cut from a result: its text and where it came from."""

    first: int
    last: int
    """Split ids, inclusive."""
    text: str
    start: int
    end: int
    tokens: int
    hits: list[Hit]


@dataclass
class Leaves:
    """The leaves of one source (one level) read so far, by split id (``None``: missing)."""

    source_key: str
    level: str
    n_splits: int | None
    known: dict[int, Chunk | None] = field(default_factory=dict)

    def unread(self, lo: int, hi: int) -> list[int]:
        """Split ids in ``[lo, hi]`` (inside the source) not read yet, ascending."""
        last = hi if self.n_splits is None else min(hi, self.n_splits - 1)
        return [i for i in range(max(0, lo), last + 1) if i not in self.known]

    def exists(self, split: int) -> bool:
        """Whether the source may have leaf ``split`` (its count known or not)."""
        return split >= 0 and (self.n_splits is None or split < self.n_splits)


def cut_document(
    found: Cut, unit: Group, mode: str, base: Mapping[str, object], cut_from: dict[str, object]
) -> Document:
    """A cut run as a result: the hits inside, where it was cut from, its tokens."""
    part = Group(
        unit.source_key, unit.source_id, [], found.hits, found.hits[0].level, found.start, found.end
    )
    meta = result_metadata(part, mode, base)
    meta.update(
        split_ids=list(range(found.first, found.last + 1)),
        tokens=found.tokens,
        escalation="cut",
        cut_from=cut_from,
    )
    return Document(page_content=found.text, metadata=meta)
