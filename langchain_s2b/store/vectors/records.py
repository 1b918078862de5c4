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

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from langchain_s2b.store.base import (
    SLOTS_PER_ENTRY,
    SLOTS_SLACK,
    Column,
    Shapes,
    check_slots,
    decode_utf8,
    first_line,
    read_arrays,
    utf8_block,
)

Record = tuple[str, str, dict[str, Any]]
"""``(key, text, metadata)`` of one row."""
ARRAYS_FILE = "records.npz"
TEXT_FILE = "records.utf8"
SHAPES_FILE = "records.shapes.jsonl"
KEYS_FILE = "records.keys.jsonl"
GROUPS_FILE = "records.groups.json"
FILES = (ARRAYS_FILE, TEXT_FILE, SHAPES_FILE, KEYS_FILE, GROUPS_FILE)
_NO_SHAPE = -1
"""A row whose metadata is kept whole (``_objects``), not as a shape."""
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


class Records:
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
        source, _, rest = key.partition("/")
        level, _, split = rest.partition("/")
        slots = self._slots.get((source, level))
        if slots is None or not split.isdigit() or str(int(split)) != split:
            return -1
        number = int(split)
        return int(slots.data[number]) if number < slots.size else -1

    def key(self, row: int) -> str | None:
        """The key of a live row (``None``: not live)."""
        if not self.is_live(row):
            return None
        named = self._names.get(row)
        if named is not None:
            return named
        return self.shapes.node_key(int(self._shape.data[row]), int(self._split.data[row]))

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

    # Files --------------------------------------------------------------------------

    def write(self, directory: Path, rows: np.ndarray | None = None) -> list[str]:
        """Write ``rows`` (default: every live row) into ``directory``; the names written."""
        rows = self.live_rows() if rows is None else rows
        shape = self._shape.data[rows]
        whole = np.flatnonzero(shape == _NO_SHAPE)
        if len(whole):  # metadata kept whole: written as shapes of their own (JSON)
            shapes = Shapes.from_texts(self.shapes.texts)
            for i in whole.tolist():
                shape[i] = _whole_shape(shapes, self._objects[int(rows[i])])
        else:
            shapes = self.shapes
        named = np.asarray([int(r) in self._names for r in rows.tolist()], dtype=np.bool_)
        lengths = self._length.data[rows]
        row_group = np.full(self._shape.size, -1, dtype=np.int64)
        groups: list[list[str]] = []
        for (source, level), slots in self._slots.items():
            live = slots.used[slots.used >= 0]
            if len(live):
                row_group[live] = len(groups)
                groups.append([source, level])
        np.savez(
            directory / ARRAYS_FILE,
            rows=rows,
            shape=shape,
            split=self._split.data[rows],
            start=self._start.data[rows],
            end=self._end.data[rows],
            length=lengths,
            named=named,
            group=row_group[rows],
        )
        (directory / GROUPS_FILE).write_text(json.dumps(groups) + "\n", encoding="utf-8")
        with (directory / TEXT_FILE).open("wb") as out:
            for row in rows.tolist():
                start = int(self._offset.data[row])
                block = self._blocks[int(self._block.data[row])]
                out.write(memoryview(block)[start : start + int(self._length.data[row])])
        with (directory / SHAPES_FILE).open("w", encoding="ascii") as out:
            out.writelines(text + "\n" for text in shapes.texts)
        with (directory / KEYS_FILE).open("w", encoding="ascii") as out:
            for row in rows[named].tolist():
                out.write(json.dumps(self._names[row]) + "\n")
        return list(FILES)

    @classmethod
    def read(cls, directory: Path, limit: int) -> tuple[Records, np.ndarray | None]:
        """Rows written by :meth:`write` and how they were renumbered (``ValueError``: damage).

        ``limit``: row ids in the file must be below it (the index's next id).
        The columns are indexed by row id: when the file's ids would need more
        slots than :func:`check_slots` allows for its rows (ids left sparse by
        many deletes, or a crafted one), the rows are numbered again from 0 and
        the ids they had are returned, ascending (row ``i`` had ``ids[i]``), for
        the caller to number its vectors the same way; else ``None``.
        """
        where = directory / ARRAYS_FILE
        try:
            cols = read_arrays(where)
            text = (directory / TEXT_FILE).read_bytes()
            shape_lines = _lines((directory / SHAPES_FILE).read_text(encoding="ascii"))
            key_lines = _lines((directory / KEYS_FILE).read_text(encoding="ascii"))
            names = [json.loads(line) for line in key_lines]
            groups = json.loads((directory / GROUPS_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise _damaged(Path(err.filename or where), "the file is missing") from None
        except (OSError, ValueError, KeyError, RecursionError) as err:  # zip, JSON, text errors
            raise _damaged(where, f"it can not be read ({first_line(err)})") from None
        records = cls()
        try:  # a shape is checked when first decoded (a crafted one: a ValueError then)
            records.shapes = Shapes.from_texts(shape_lines)
            renumbered = records._fill(cols, text, names, groups, limit)
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as err:
            raise _damaged(where, first_line(err)) from None
        return records, renumbered

    def _fill(
        self,
        cols: dict[str, np.ndarray],
        text: bytes,
        names: list[Any],
        groups: Any,
        limit: int,
    ) -> np.ndarray | None:
        ids = _column(cols, "rows", np.int64)
        n = len(ids)
        arrays = {name: _column(cols, name, np.int64, n) for name in ("shape", "split")}
        arrays |= {name: _column(cols, name, np.int64, n) for name in ("start", "end", "length")}
        named = _column(cols, "named", np.bool_, n)
        group = _column(cols, "group", np.int64, n)
        ok = isinstance(groups, list) and all(
            isinstance(g, list) and len(g) == 2 and all(isinstance(x, str) and x for x in g)
            for g in groups
        )
        if not ok or (n and (group.max() >= len(groups) or group.min() < -1)):
            msg = "the groups file does not match the rows"
            raise ValueError(msg)
        if not np.array_equal(group < 0, named):
            msg = "a row has both a key of its own and a derived one, or neither"
            raise ValueError(msg)
        if n and (ids.min() < 0 or ids.max() >= limit or len(np.unique(ids)) != n):
            msg = f"row ids must be distinct and in [0, {limit})"
            raise ValueError(msg)
        lengths = arrays["length"]
        if (lengths < 0).any() or (lengths > len(text)).any() or int(lengths.sum()) != len(text):
            msg = "the text lengths do not add up to the text file"
            raise ValueError(msg)
        shapes = arrays["shape"]
        if n and (shapes.min() < 0 or shapes.max() >= len(self.shapes)):
            msg = "a row names a shape that is not there"
            raise ValueError(msg)
        if int(named.sum()) != len(names) or not all(isinstance(k, str) and k for k in names):
            msg = "the keys file does not match the rows"
            raise ValueError(msg)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        size = int(ids.max()) + 1 if n else 0
        renumber = size > SLOTS_PER_ENTRY * n + SLOTS_SLACK  # (check_slots' bound)
        rows = ids
        if renumber:  # the file's row i becomes row rows[i], in the same order
            order = np.argsort(ids, kind="stable")
            rows = np.empty(n, dtype=np.int64)
            rows[order] = np.arange(n, dtype=np.int64)
            size = n
        for column in self._columns():
            column.ensure(size)
        self._shape.data[rows] = shapes
        self._split.data[rows] = arrays["split"]
        self._start.data[rows] = arrays["start"]
        self._end.data[rows] = arrays["end"]
        self._block.data[rows] = 0
        self._offset.data[rows] = offsets[:-1]
        self._length.data[rows] = lengths
        self._live.data[rows] = True
        self._blocks = [text]
        self._count = n
        self._index_keys(rows, group, named, names, groups)
        return np.sort(ids) if renumber else None

    def _index_keys(
        self,
        rows: np.ndarray,
        group: np.ndarray,
        named: np.ndarray,
        names: list[str],
        groups: list[list[str]],
    ) -> None:
        """The key maps: named keys one by one, derived ones as arrays per source and level."""
        for row, key in zip(rows[named].tolist(), names, strict=True):
            if key in self._named:
                msg = f"the key {key!r} is given twice"
                raise ValueError(msg)
            tail = self.record_meta_source(row)
            self._name(row, key, {"source_key": tail} if tail is not None else {})
        derived = ~named
        d_rows, d_group, d_split = rows[derived], group[derived], self._split.data[rows[derived]]
        if len(d_split) and d_split.min() < 0:
            msg = "a split id is negative"
            raise ValueError(msg)
        order = np.lexsort((d_split, d_group))
        cuts = np.flatnonzero(np.diff(d_group[order])) + 1
        if len(order):  # one slot per split id up to the largest, per source and level
            tops = d_split[order][np.append(cuts, len(order)) - 1].tolist()
            check_slots(sum(tops) + len(tops), len(rows), "split ids")
        for members in np.split(order, cuts) if len(order) else []:
            source, level = groups[int(d_group[members[0]])]
            if (source, level) in self._slots:
                msg = f"source {source!r}, level {level!r} is listed twice"
                raise ValueError(msg)
            splits, found = d_split[members], d_rows[members]
            template, varying, keyed = self.shapes.template(int(self._shape.data[found[0]]))
            named_by = (template.get("source_key"), template.get("level"))
            if not keyed or "split_id" not in varying or named_by != (source, level):
                msg = f"the rows of source {source!r}, level {level!r} have another shape"
                raise ValueError(msg)
            if (np.diff(splits) == 0).any():
                msg = f"a key of source {source!r}, level {level!r} is given twice"
                raise ValueError(msg)
            slots = self._slots[(source, level)] = Column(np.int64, -1)
            self._levels.setdefault(source, []).append(level)
            slots.ensure(int(splits[-1]) + 1)
            slots.data[splits] = found
        for key in self._named:
            if self.row_derived(key) >= 0:
                msg = f"the key {key!r} is given twice"
                raise ValueError(msg)

    def record_meta_source(self, row: int) -> str | None:
        """The ``source_key`` a row's metadata names, if any (for grouping)."""
        source = self.meta(row).get("source_key")
        return source if isinstance(source, str) else None

    def row_derived(self, key: str) -> int:
        """The row of ``key`` among the derived keys only (``-1``: none)."""
        source, _, rest = key.partition("/")
        level, _, split = rest.partition("/")
        slots = self._slots.get((source, level))
        if slots is None or not split.isdigit() or str(int(split)) != split:
            return -1
        number = int(split)
        return int(slots.data[number]) if number < slots.size else -1


class RowsByKey(Mapping[str, int]):
    """A read-only ``key -> row`` view of :class:`Records` (the live rows)."""

    def __init__(self, records: RowStore) -> None:
        self._records = records

    def __getitem__(self, key: str) -> int:
        row = self._records.row(key)
        if row < 0:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._records.row(key) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._records.keys())

    def __len__(self) -> int:
        return len(self._records)


def _whole_shape(shapes: Shapes, meta: dict[str, Any]) -> int:
    """A shape holding ``meta`` whole (numbers included), for saving; ``ValueError`` if not JSON."""
    try:
        if not all(isinstance(k, str) for k in meta):
            named = next(k for k in meta if not isinstance(k, str))
            msg = f"the key {named!r} is not a string"
            raise TypeError(msg)
        text = json.dumps([[k, v] for k, v in meta.items()], allow_nan=False)
    except (TypeError, ValueError) as err:
        msg = (
            f"Child metadata must be JSON (str, int, finite float, bool, None, lists and dicts "
            f"of them) to be saved; {err}. Metadata keys: {sorted(map(str, meta))}."
        )
        raise ValueError(msg) from None
    shapes.texts.append(text)
    return len(shapes.texts) - 1


def _lines(text: str) -> list[str]:
    """The lines of a file of newline-terminated lines."""
    return text.split("\n")[:-1] if text else []


def _column(cols: dict[str, np.ndarray], name: str, dtype: Any, n: int | None = None) -> np.ndarray:
    value = cols[name]
    if value.ndim != 1 or (n is not None and len(value) != n):
        msg = f"column {name!r} has shape {value.shape}, expected ({n},)"
        raise ValueError(msg)
    if value.dtype.kind not in "biu":
        msg = f"column {name!r} holds {value.dtype}, not integers"
        raise ValueError(msg)
    return value.astype(dtype, copy=False)


def _damaged(file: Path, what: str) -> ValueError:
    return ValueError(f"{file} is not a langchain_s2b child index file: {what}.")
