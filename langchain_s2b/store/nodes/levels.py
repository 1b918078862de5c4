"""A node store's parts: a source's text as UTF-8, and the columns of one level of its nodes.

:class:`~langchain_s2b.store.nodes.node_store.NodeStore` keeps each source's
text once, as UTF-8 bytes, and each level's nodes as numpy columns by split
id (:class:`Level`); one write reads its sources' texts back as ``str`` and
their byte offsets once (:class:`TextBatch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from langchain_s2b.store.base import Column

ABSENT = -1
"""A split id with no node (the ``shape`` column)."""
COLUMNS = ("shape", "start", "end", "bstart", "bend")
DTYPES: dict[str, Any] = {"shape": np.int32} | dict.fromkeys(COLUMNS[1:], np.int64)


def encode(text: str) -> bytes:
    """UTF-8 bytes of any Python string (lone surrogates kept)."""
    return text.encode("utf-8", "surrogatepass")


def decode(data: bytes | memoryview) -> str:
    """The string :func:`encode` made."""
    return str(data, "utf-8", "surrogatepass")


def byte_offsets(text: str) -> np.ndarray | None:
    """The UTF-8 byte offset of every character position of ``text`` (``None``: ASCII, equal)."""
    if text.isascii():
        return None
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    sizes = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
    offsets = np.zeros(len(points) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return offsets


class Level:
    """The nodes of one level of one source, by split id."""

    __slots__ = ("bend", "bstart", "end", "own", "shape", "start")

    def __init__(self) -> None:
        self.shape = Column(np.int32, ABSENT)
        self.start = Column(np.int64)
        self.end = Column(np.int64)
        self.bstart = Column(np.int64)
        self.bend = Column(np.int64)
        self.own: dict[int, str] = {}
        """Split id -> the node's own text, when it is not the slice of its source."""

    def ensure(self, size: int) -> None:
        """Room for split ids below ``size`` in every column."""
        if size > self.shape.size:
            for name in COLUMNS:
                getattr(self, name).ensure(size)

    def present(self) -> np.ndarray:
        """The split ids that hold a node."""
        return np.flatnonzero(self.shape.used != ABSENT)


class TextBatch:
    """One ``mset``'s view of its sources' texts: as ``str`` and their byte offsets."""

    def __init__(self, held: Mapping[str, bytes]) -> None:
        self.held = held
        """The store's texts, as UTF-8."""
        self.texts: dict[str, str | None] = {}
        self.offsets: dict[str, np.ndarray | None] = {}

    def text(self, source: str) -> str | None:
        """The source's text (``None``: the store holds none), decoded once per write."""
        if source not in self.texts:
            data = self.held.get(source)
            self.texts[source] = None if data is None else decode(data)
        return self.texts[source]

    def offset(self, source: str, text: str, position: int) -> int:
        """The byte offset of character ``position`` of the source's ``text``."""
        if source not in self.offsets:
            self.offsets[source] = byte_offsets(text)
        found = self.offsets[source]
        return position if found is None else int(found[position])
