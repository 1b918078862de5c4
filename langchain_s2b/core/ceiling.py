"""A budget is a ceiling over a mode's shape: each result whole when it fits, else cut.

The mode says what a result is (a parent, a window, a node of the ladder);
``max_tokens`` caps how much of it comes back, best result first. Results are
taken in rank order, each **whole** when its tokens fit what is left; one that
does not fit is **cut**: a run of consecutive leaves inside it, grown from
its best hit whose own leaf fits, one leaf at a time towards the neighbour
worth more (a leaf is worth ``0.5 ** distance`` summed over the result's hits,
so a run grows towards its other hits; ties go to the leaf before), while the
run's text fits. A result none of whose hits fits is passed over. A ceiling
the answer does not reach changes nothing.

Cutting reads the leaves around a hit from the docstore, a few at a time
(:data:`RING` on each side, doubled while the run reaches the edge of what was
read); a leaf the docstore lacks ends the run there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.documents import Document

from langchain_s2b.core.budget import TokenCounter
from langchain_s2b.core.hits import Group, Hit, result_metadata
from langchain_s2b.core.keys import level_prefix
from langchain_s2b.core.merge import Chunk, chunk_of, merge_chunks
from langchain_s2b.core.requests import Fetch, Op, ask

RING = 8
"""Leaves read on each side of a hit when a result is cut (doubled as needed)."""
DECAY = 0.5
"""A leaf's worth per step away from a hit."""


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

    def read(self, fetched: Mapping[str, Document | None]) -> None:
        """Take what a fetch returned for this source's leaves."""
        prefix = level_prefix(self.source_key, self.level)
        for key, doc in fetched.items():
            if key.startswith(prefix) and key[len(prefix) :].isdigit():
                split = int(key[len(prefix) :])
                self.known[split] = None if doc is None else chunk_of(doc)._replace(split_id=split)

    def wanted(self, lo: int, hi: int) -> list[str]:
        """Keys in ``[lo, hi]`` (inside the source) not read yet."""
        last = hi if self.n_splits is None else min(hi, self.n_splits - 1)
        prefix = level_prefix(self.source_key, self.level)
        return [f"{prefix}{i}" for i in range(max(0, lo), last + 1) if i not in self.known]

    def exists(self, split: int) -> bool:
        """Whether the source may have leaf ``split`` (its count known or not)."""
        return split >= 0 and (self.n_splits is None or split < self.n_splits)


def cut(
    hits: Sequence[Hit],
    bounds: Bounds,
    left: int,
    counter: TokenCounter,
    leaves: Leaves,
) -> Op[Cut | None]:
    """The run cut from a result around its ``hits`` (rank order) within ``left`` tokens.

    ``None`` when no hit's own leaf fits. Reads leaves as the run needs them.
    """
    radius = RING
    while True:
        wanted = [
            key
            for h in hits
            for key in leaves.wanted(
                max(h.split_id - radius, bounds.lo),
                h.split_id + radius if bounds.hi is None else min(h.split_id + radius, bounds.hi),
            )
        ]
        if wanted:
            keys = list(dict.fromkeys(wanted))
            values = yield from ask(Fetch(keys))
            leaves.read(dict(zip(keys, values, strict=True)))
        grown, short = _grow(hits, bounds, left, counter, leaves)
        if not short:
            return grown
        radius *= 2


def _grow(
    hits: Sequence[Hit], bounds: Bounds, left: int, counter: TokenCounter, leaves: Leaves
) -> tuple[Cut | None, bool]:
    """The run (or ``None``), and whether it reached the edge of what was read (read more)."""
    inside = [h for h in hits if _present(leaves, bounds, h.split_id)]
    for seed in inside:
        leaf = leaves.known[seed.split_id]
        if leaf is None or counter(leaf.text) > left:
            continue
        run, lo, hi = leaf, seed.split_id, seed.split_id
        blocked = {-1: False, 1: False}
        while True:
            options = []
            for side, split in ((-1, lo - 1), (1, hi + 1)):
                if blocked[side]:
                    continue
                if bounds.within(split) and split not in leaves.known and leaves.exists(split):
                    return None, True
                if not _present(leaves, bounds, split):
                    blocked[side] = True
                    continue
                options.append((_worth(split, inside), -side, split, side))
            if not options:
                break
            _, _, split, side = max(options)
            nxt = leaves.known[split]
            assert nxt is not None
            merged = merge_chunks([run, nxt])
            if counter(merged.text) > left:
                blocked[side] = True
                continue
            run = Chunk(merged.start, merged.end, merged.text)
            lo, hi = (split, hi) if side < 0 else (lo, split)
        covered = [h for h in hits if lo <= h.split_id <= hi]
        return Cut(lo, hi, run.text, run.start, run.end, counter(run.text), covered), False
    return None, False


def _present(leaves: Leaves, bounds: Bounds, split: int) -> bool:
    leaf = leaves.known.get(split)
    return leaf is not None and bounds.holds(split, leaf)


def _worth(split: int, hits: Sequence[Hit]) -> float:
    return sum(DECAY ** abs(split - hit.split_id) for hit in hits)


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
