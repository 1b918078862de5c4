"""Exact merging by char offsets: overlapping chunks -> one source slice."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any, NamedTuple

from langchain_core.documents import Document


class Chunk(NamedTuple):
    """A piece of source text with its offsets: ``source[start:end] == text``."""

    start: int
    end: int
    text: str
    split_id: int = 0


class WholeLeaf(NamedTuple):
    """A leaf read whole without a ``Document``: its chunk and its stored metadata.

    How a node store that keeps nodes as spans answers a key
    :class:`~langchain_s2b.core.requests.ReadLeaves` asks for whole (a window's
    first leaf, whose metadata is the result's): the metadata is the document's
    own, and no pydantic ``Document`` is built for it.
    """

    chunk: Chunk
    metadata: dict[str, Any]


class SpanText(NamedTuple):
    """Leaves ``lo..hi`` of one level read as one unbroken slice of their source.

    How a node store that keeps nodes as spans answers
    :class:`~langchain_s2b.core.requests.ReadSpans` when the leaves'
    spans, in split order, start in order, are none empty, and leave no gap:
    their merge (:func:`merge_chunks`) is then the source's slice
    ``[start, end)``, read once, with no chunk built. ``metadata``: the first
    leaf's stored metadata (a window's own).
    """

    text: str
    start: int
    end: int
    metadata: dict[str, Any]


class Merged(NamedTuple):
    """Chunks merged by offsets; ``gaps`` are char ranges no chunk covered."""

    text: str
    start: int
    end: int
    gaps: tuple[tuple[int, int], ...] = ()


def merge_chunks(chunks: Sequence[Chunk], gap_fill: str = " ") -> Merged:
    """Merge chunks into one text with no duplicated or lost characters.

    Chunks may overlap, contain one another, repeat, or come unsorted. When
    they cover ``[start, end)`` without holes the result is exactly that source
    slice; a hole (a splitter that dropped whitespace) is filled with
    ``gap_fill`` and reported in ``gaps``. Empty chunks cover nothing and are
    ignored (unless every chunk is empty).
    """
    if not chunks:
        msg = "merge_chunks needs at least one chunk."
        raise ValueError(msg)
    ordered = [c for c in chunks if c.end > c.start] or list(chunks[:1])
    if any(a.start > b.start for a, b in pairwise(ordered)):  # neighbours come in order
        ordered.sort(key=lambda c: (c.start, -c.end))
    cursor = ordered[0].start
    parts: list[str] = []
    gaps: list[tuple[int, int]] = []
    for chunk in ordered:
        if chunk.end <= cursor:
            continue
        if chunk.start > cursor:
            gaps.append((cursor, chunk.start))
            parts.append(gap_fill)
            cursor = chunk.start
        parts.append(chunk.text[cursor - chunk.start :])
        cursor = chunk.end
    return Merged("".join(parts), ordered[0].start, cursor, tuple(gaps))


def chunk_of(doc: Document, split_field: str = "split_id") -> Chunk:
    """A stored node as a :class:`Chunk`."""
    meta = doc.metadata  # no default computed unless needed: the budget reads ~400 a query
    text = doc.page_content
    try:
        start = int(meta["start"] if "start" in meta else meta.get("split_idx_start", 0))
        end = int(meta["end"] if "end" in meta else start + len(text))
        split = int(meta.get(split_field, 0))
    except (TypeError, ValueError):  # a crafted store's values
        msg = f"Node {doc.id!r} has malformed offsets (start, end, {split_field}) in its metadata."
        raise ValueError(msg) from None
    return tuple.__new__(Chunk, (start, end, text, split))


def leaf_chunk(leaf: Document | Chunk | WholeLeaf, split: int) -> Chunk:
    """A leaf read for assembly (its chunk, or the stored node) as leaf ``split``'s chunk."""
    if isinstance(leaf, WholeLeaf):
        leaf = leaf.chunk
    chunk = leaf if isinstance(leaf, Chunk) else chunk_of(leaf)
    return chunk if chunk.split_id == split else chunk._replace(split_id=split)
