"""The child index's records (each FAISS row's key, text and metadata) as columns.

A row of :class:`~langchain_s2b.store.vectors.faiss_index.FaissIndex` is a leaf: its key,
its text and its metadata. Held as Python objects that is ~1.5 KB a row beyond
the text (a dict, its values, a ``Document``, the key maps); here a row is a
few numbers in numpy arrays:

- the text: UTF-8 in a few ``bytes`` blocks (one per add), a row's block and span;
- the metadata: a shared shape and three numbers
  (:class:`~langchain_s2b.store.base.columns.Shapes`);
- the key: derived as ``<source_key>/<level>/<split_id>`` from the metadata when
  it is exactly that (every leaf the retriever writes), found through one small
  array per ``(source key, level)``; any other key is kept in a dict.

:meth:`Records.add` and :meth:`Records.remove` are all or nothing: a key names
its row only once the row is written, and is mapped last (live and counted with
it); an interrupt on the way unmaps what was mapped.

A row's text, metadata and key are made again only when asked for
(:meth:`Records.record`). :meth:`Records.write` and :meth:`Records.read` save
them as numpy arrays (``np.savez``, read with ``allow_pickle=False``), a UTF-8
text file and the shapes as JSON lines: no pickle, nothing parsed per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from langchain_s2b.core.keys import is_split_id
from langchain_s2b.store.base import (
    Column,
    Shapes,
    decode_utf8,
    utf8_block,
)
from langchain_s2b.store.vectors.record_files import _NO_SHAPE, RecordFiles

Record = tuple[str, str, dict[str, Any]]
"""``(key, text, metadata)`` of one row."""
Place = tuple[str, str, int]
"""``(node key, source key, split id)`` of a row kept under its node key (``node_places``)."""
_PLACE_KEY = itemgetter(0)
"""A place's node key."""
_GARBAGE = 0.5
"""Share of dead text bytes at which the text blocks are rewritten with the live rows only."""


class RowStore(Protocol):
    """What ``FaissIndex`` needs of the place its rows live (here, or a database)."""

    def __len__(self) -> int: ...

    def add(
        self,
        rows: Sequence[int],
        keys: Sequence[str],
        texts: Sequence[str],
        metas: Sequence[Mapping[str, Any]],
    ) -> None:
        """Add new rows."""

    def remove(self, rows: Sequence[int]) -> None:
        """Remove live rows."""

    def clear(self) -> None:
        """Remove every row."""

    def row(self, key: str) -> int:
        """The row of ``key`` (``-1``: not held)."""

    def key(self, row: int) -> str | None:
        """The key of a live row."""

    def record(self, row: int) -> Record | None:
        """``(key, text, metadata)`` of a row."""

    def records(self, rows: Sequence[int]) -> list[Record | None]:
        """``(key, text, metadata)`` of each row."""

    def meta(self, row: int) -> dict[str, Any]:
        """The metadata of a live row."""

    def keys(self) -> list[str]:
        """Every key held."""

    def entries(self) -> Iterator[Record]:
        """Every live row's record."""

    def live_rows(self) -> np.ndarray:
        """The live row ids, ascending."""

    def sources(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(source key, metadata of one of its rows)`` per source."""

    def source_rows(self, source: str) -> np.ndarray:
        """The live rows of one source."""

    def unsourced(self) -> list[int]:
        """Live rows whose metadata names no source."""

    def write(self, directory: Path, rows: np.ndarray | None = None) -> list[str]:
        """Write the rows into ``directory``; the names written."""


class Records(RecordFiles):
    """Rows by id: key, text and metadata as columns; see the module docstring."""

    def __init__(self) -> None:
        self.shapes = Shapes()
        self._shape = Column(np.int32, _NO_SHAPE)
        self._split = Column(np.int64)
        self._start = Column(np.int64)
        self._end = Column(np.int64)
        self._block = Column(np.int32, -1)
        self._offset = Column(np.int64)
        self._length = Column(np.int64)
        self._live = Column(np.bool_, 0)
        self._blocks: list[bytes] = []
        self._dead_bytes = 0
        self._slots: dict[tuple[str, str], Column] = {}
        """``(source key, level)`` -> row by split id (``-1``: none), for derived keys."""
        self._levels: dict[str, list[str]] = {}
        """Source key -> the levels it has slots for."""
        self._named: dict[str, int] = {}
        """Key -> row, for keys not derived from the metadata."""
        self._names: dict[int, str] = {}
        self._objects: dict[int, dict[str, Any]] = {}
        """Metadata JSON can not hold exactly, kept whole."""
        self._unsourced: set[int] = set()
        """Live rows whose key is not derived and whose metadata names no ``source_key``."""
        self._sourced: dict[str, set[int]] = {}
        """Other live rows with a ``source_key`` whose key is not derived, by source key."""
        self._count = 0

    def __len__(self) -> int:
        return self._count

    # Writing ------------------------------------------------------------------------

    def add(
        self,
        rows: Sequence[int],
        keys: Sequence[str],
        texts: Sequence[str],
        metas: Sequence[Mapping[str, Any]],
    ) -> None:
        """Add rows that are not live, under keys not held: all of them, or none.

        The rows' numbers and text are written first, where nothing reads them;
        then each key is mapped to its row, and only then are the rows live and
        counted. An error or an interrupt (any ``BaseException``) on the way
        unmaps what was mapped: the records are as they were.
        """
        if not rows:
            return
        index = np.asarray(rows, dtype=np.int64)
        if len(np.unique(index)) != len(index) or index.min() < 0:
            msg = f"Rows to add must be distinct ids >= 0; got {list(rows)[:8]}."
            raise ValueError(msg)
        with self.shapes.batch():  # shapes only grow: an unused one costs nothing
            coded = [self.shapes.encode(meta) for meta in metas]
        top = int(index.max()) + 1
        for column in self._columns():
            column.ensure(top)
        if self._live.data[index].any():
            msg = f"Rows {index[self._live.data[index]][:8].tolist()} are live already."
            raise ValueError(msg)
        block, offsets = utf8_block(texts)
        shape, split, start, end = (
            self._shape.data,
            self._split.data,
            self._start.data,
            self._end.data,
        )
        for row, found in zip(rows, coded, strict=True):
            if found is None:
                shape[row] = _NO_SHAPE
            else:
                shape[row], split[row], start[row], end[row] = found
        self._block.data[index] = len(self._blocks)
        self._offset.data[index] = offsets[:-1]
        self._length.data[index] = np.diff(offsets)
        self._blocks.append(block)
        mapped: list[tuple[int, str | None]] = []
        try:
            for row, key, meta, found in zip(rows, keys, metas, coded, strict=True):
                if found is None:
                    self._objects[row] = dict(meta)
                mapped.append((row, self._map(row, key, meta, found)))
            self._live.data[index] = True
            self._count += len(rows)
        except BaseException:
            for row, _ in reversed(mapped):
                self._unmap(row)
            for row in rows:
                self._objects.pop(row, None)
            self._live.data[index] = False
            if self._blocks and self._blocks[-1] is block:
                self._blocks.pop()
            raise

    def _columns(self) -> tuple[Column, ...]:
        return (
            self._shape,
            self._split,
            self._start,
            self._end,
            self._block,
            self._offset,
            self._length,
            self._live,
        )

    def _map(
        self, row: int, key: str, meta: Mapping[str, Any], coded: tuple[int, ...] | None
    ) -> str | None:
        """Map ``key`` to ``row``: its own name (returned), or a slot derived from its metadata."""
        if coded is None or self.shapes.node_key(coded[0], coded[1]) != key:
            self._name(row, key, meta)
            return key
        self._slot(str(meta["source_key"]), str(meta["level"]), coded[1], row)
        return None

    def _name(self, row: int, key: str, meta: Mapping[str, Any]) -> None:
        self._named[key] = row
        self._names[row] = key
        source = meta.get("source_key")
        if isinstance(source, str):
            self._sourced.setdefault(source, set()).add(row)
        else:
            self._unsourced.add(row)

    def _slot(self, source: str, level: str, split: int, row: int) -> None:
        slots = self._slots.get((source, level))
        if slots is None:
            slots = self._slots[(source, level)] = Column(np.int64, -1)
            self._levels.setdefault(source, []).append(level)
        slots.ensure(split + 1)
        slots.data[split] = row

    def _unmap(self, row: int) -> str | None:
        """Forget the key of ``row``; its own name if it had one (``None``: a derived key)."""
        key = self._names.pop(row, None)
        if key is None:
            source, level = self._source_level(int(self._shape.data[row]))
            slots = self._slots[(source, level)]
            slots.data[int(self._split.data[row])] = -1
            if not (slots.used >= 0).any():
                del self._slots[(source, level)]
                self._levels[source].remove(level)
                if not self._levels[source]:
                    del self._levels[source]
        else:
            del self._named[key]
            self._forget_named(row)
        return key

    def _remap(self, row: int, key: str | None) -> None:
        """Map a row's key again (the undo of :meth:`_unmap`; its columns are intact)."""
        if key is not None:
            self._name(row, key, self.meta(row))
            return
        source, level = self._source_level(int(self._shape.data[row]))
        self._slot(source, level, int(self._split.data[row]), row)

    def remove(self, rows: Sequence[int]) -> None:
        """Remove live rows: all of them, or none (an error or interrupt maps them again)."""
        if not rows:
            return
        index = np.asarray(rows, dtype=np.int64)
        live = (index >= 0) & (index < self._live.size)
        if (
            not live.all()
            or not self._live.data[index].all()
            or len(np.unique(index)) != len(index)
        ):
            msg = f"Rows to remove must be distinct live rows; got {list(rows)[:8]}."
            raise ValueError(msg)
        unmapped: list[tuple[int, str | None]] = []
        try:
            for row in rows:
                unmapped.append((row, self._unmap(row)))
        except BaseException:
            for row, key in reversed(unmapped):
                self._remap(row, key)
            raise
        for row in rows:
            self._objects.pop(row, None)
        self._live.data[index] = False
        self._dead_bytes += int(self._length.data[index].sum())
        self._count -= len(rows)
        if self._dead_bytes > _GARBAGE * sum(len(b) for b in self._blocks):
            self._repack()

    def _forget_named(self, row: int) -> None:
        self._unsourced.discard(row)
        for source, members in list(self._sourced.items()):
            if row in members:
                members.discard(row)
                if not members:
                    del self._sourced[source]
                return

    def _source_level(self, shape: int) -> tuple[str, str]:
        template = self.shapes.template(shape)[0]
        return str(template["source_key"]), str(template["level"])

    def _repack(self) -> None:
        """Rewrite the text blocks with the live rows only (switched to at once, at the end)."""
        live = self.live_rows()
        block, offsets = utf8_block([self.text(int(row)) for row in live])
        blocks, starts = self._block.data.copy(), self._offset.data.copy()
        blocks[live] = 0
        starts[live] = offsets[:-1]
        self._blocks, self._block.data, self._offset.data, self._dead_bytes = (
            [block],
            blocks,
            starts,
            0,
        )

    def clear(self) -> None:
        """Remove every row (at once: the new empty state replaces the old whole)."""
        self.__dict__ = Records().__dict__

    # Reading ------------------------------------------------------------------------

    def live_rows(self) -> np.ndarray:
        """The live row ids, ascending."""
        return np.flatnonzero(self._live.used).astype(np.int64)

    def is_live(self, row: int) -> bool:
        """Whether ``row`` is a live row."""
        return 0 <= row < self._live.size and bool(self._live.data[row])

    def row(self, key: str) -> int:
        """The row of ``key`` (``-1``: not held)."""
        found = self._named.get(key)
        if found is not None:
            return found
        return self._slotted(key)[0]

    def _slotted(self, key: str) -> tuple[int, str, int]:
        """``(row, source key, split id)`` of a node key kept in a slot (row ``-1``: none)."""
        parts = key.split("/")
        if len(parts) != 3:  # ``<source>/<level>/<split>``; more slashes: no digits after the 2nd
            return -1, parts[0], -1
        source, level, split = parts
        slots = self._slots.get((source, level))
        if slots is None or not is_split_id(split):
            return -1, source, -1
        number = int(split)
        return (slots.data.item(number) if number < slots.size else -1), source, number

    def keys_of(
        self, rows: np.ndarray, places: Sequence[Place | None] | None = None
    ) -> list[str | None]:
        """:meth:`key` of each row, in one pass (``-1``, not live: ``None``); ``places``: theirs."""
        named = self._names
        found = self.node_places(rows) if places is None else places
        if None not in found:  # every row a node's: its key is its place's (one pass in C)
            return list(map(_PLACE_KEY, found))  # type: ignore[arg-type]
        out: list[str | None] = []
        for row, place in zip(rows.tolist(), found, strict=True):
            out.append(
                place[0] if place is not None else named.get(row) if self.is_live(row) else None
            )
        return out

    def node_rows(self, keys: Sequence[str]) -> list[tuple[int, tuple[str, str, int] | None]]:
        """Per key, its row (``-1``: not held) and, as :meth:`node_places` gives it, its place.

        One pass for the ~100 keys BM25 finds (issue 34): a key held under a
        name of its own has no place (it is read at once).
        """
        named, slotted = self._named, self._slotted
        out: list[tuple[int, tuple[str, str, int] | None]] = []
        for key in keys:
            found = named.get(key)
            if found is not None:
                out.append((found, None))
                continue
            row, source, split = slotted(key)
            out.append((row, None if row < 0 else (key, source, split)))
        return out

    def key(self, row: int) -> str | None:
        """The key of a live row (``None``: not live)."""
        if not self.is_live(row):
            return None
        named = self._names.get(row)
        if named is not None:
            return named
        return self.shapes.node_key(int(self._shape.data[row]), int(self._split.data[row]))

    def node_key(self, row: int) -> str | None:
        """The key of a live row when it is the node key its metadata names, else ``None``."""
        if not self.is_live(row) or row in self._names:
            return None
        return self.shapes.node_key(int(self._shape.data[row]), int(self._split.data[row]))

    def node_places(self, rows: np.ndarray) -> list[tuple[str, str, int] | None]:
        """Per row, ``(node key, source key, split id)`` when :meth:`node_key` gives one.

        One pass over the columns for a search's rows (issue 34: a query reads
        ~200 of them); ``None`` where :meth:`node_key` is ``None`` (``-1`` too).
        """
        rows = np.asarray(rows, dtype=np.int64)
        listed = rows.tolist()
        size = self._live.size
        if not listed or not size:
            return [None] * len(listed)
        at = rows
        inside = min(listed) >= 0 and max(listed) < size  # not: -1, an empty slot
        if not inside:
            at = np.where((rows >= 0) & (rows < size), rows, -1)
            listed = at.tolist()
        live = self._live.data[at].tolist()
        shapes, splits = self._shape.data[at].tolist(), self._split.data[at].tolist()
        named, places, place = self._names, self.shapes.places, self.shapes.node_place
        if inside and not named and all(live) and _NO_SHAPE not in shapes:  # every row a node's
            for shape in set(shapes).difference(places):
                place(shape)
            return [
                None
                if (found := places[shape]) is None
                else (f"{found[0]}{split}", found[1], split)
                for shape, split in zip(shapes, splits, strict=True)
            ]
        out: list[tuple[str, str, int] | None] = []
        for row, alive, shape, split in zip(listed, live, shapes, splits, strict=True):
            if row < 0 or not alive or shape == _NO_SHAPE or row in named:
                out.append(None)
                continue
            found = places[shape] if shape in places else place(shape)
            out.append(None if found is None else (f"{found[0]}{split}", found[1], split))
        return out

    def text(self, row: int) -> str:
        """The text of a live row."""
        start = int(self._offset.data[row])
        return decode_utf8(
            self._blocks[int(self._block.data[row])], start, start + int(self._length.data[row])
        )

    def meta(self, row: int) -> dict[str, Any]:
        """The metadata of a live row (a new dict)."""
        shape = int(self._shape.data[row])
        if shape == _NO_SHAPE:
            return dict(self._objects[row])
        return self.shapes.decode(
            shape, int(self._split.data[row]), int(self._start.data[row]), int(self._end.data[row])
        )

    def record(self, row: int) -> Record | None:
        """``(key, text, metadata)`` of a row, ``None`` when it is not live."""
        key = self.key(row)
        if key is None:
            return None
        return key, self.text(row), self.meta(row)

    def keys(self) -> list[str]:
        """Every key held."""
        return [k for k in (self.key(int(r)) for r in self.live_rows()) if k is not None]

    def entries(self) -> Iterator[Record]:
        """Every live row's record, by row."""
        for row in self.live_rows().tolist():
            found = self.record(row)
            if found is not None:
                yield found

    def records(self, rows: Sequence[int]) -> list[Record | None]:
        """:meth:`record` of each row (``-1`` gives ``None``)."""
        return [None if row < 0 else self.record(row) for row in rows]

    def sources(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(source key, the metadata of one of its rows)`` per source key the rows name.

        The leaves of one source share its metadata (a filter on it is
        evaluated once per source, see ``FaissIndex.matching_rows``).
        """
        for source in [*self._levels, *(s for s in self._sourced if s not in self._levels)]:
            rows = self.source_rows(source)
            if len(rows):
                yield source, self.meta(int(rows[0]))

    def source_rows(self, source: str) -> np.ndarray:
        """The live rows whose metadata names ``source`` as its ``source_key``."""
        rows = [self._slots[(source, lv)].used for lv in self._levels.get(source, ())]
        extra = self._sourced.get(source)
        if extra:
            rows.append(np.fromiter(extra, dtype=np.int64))
        if not rows:
            return np.zeros(0, dtype=np.int64)
        joined = np.concatenate(rows)
        return joined[joined >= 0]

    def unsourced(self) -> list[int]:
        """Live rows whose metadata names no ``source_key``."""
        return sorted(self._unsourced)
