"""The files of the child index's records: numpy columns, one UTF-8 text file, JSON lines.

:meth:`RecordFiles.write` saves the live rows as numpy arrays (``np.savez``,
read with ``allow_pickle=False``), a UTF-8 text file, the shapes and the keys not
derived from the metadata as JSON lines, and the ``(source key, level)`` groups
as JSON; :meth:`RecordFiles.read` reads them back, every value checked, the key
maps made as arrays per source and level: nothing is parsed per row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from langchain_s2b.store.base import (
    SLOTS_PER_ENTRY,
    SLOTS_SLACK,
    Column,
    Shapes,
    check_slots,
    first_line,
    read_arrays,
)

ARRAYS_FILE = "records.npz"
TEXT_FILE = "records.utf8"
SHAPES_FILE = "records.shapes.jsonl"
KEYS_FILE = "records.keys.jsonl"
GROUPS_FILE = "records.groups.json"
FILES = (ARRAYS_FILE, TEXT_FILE, SHAPES_FILE, KEYS_FILE, GROUPS_FILE)
_NO_SHAPE = -1
"""A row whose metadata is kept whole (``_objects``), not as a shape."""

_Read = TypeVar("_Read", bound="RecordFiles")


class RecordFiles:
    """The file half of :class:`~langchain_s2b.store.vectors.records.Records` (a mixin)."""

    if TYPE_CHECKING:  # what the files read and fill of the records (see ``Records``)
        shapes: Shapes
        _shape: Column
        _split: Column
        _start: Column
        _end: Column
        _block: Column
        _offset: Column
        _length: Column
        _live: Column
        _blocks: list[bytes]
        _slots: dict[tuple[str, str], Column]
        _levels: dict[str, list[str]]
        _named: dict[str, int]
        _names: dict[int, str]
        _objects: dict[int, dict[str, Any]]
        _count: int

        def live_rows(self) -> np.ndarray: ...  # noqa: D102
        def meta(self, row: int) -> dict[str, Any]: ...  # noqa: D102
        def _columns(self) -> tuple[Column, ...]: ...
        def _name(self, row: int, key: str, meta: Mapping[str, Any]) -> None: ...

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
    def read(cls: type[_Read], directory: Path, limit: int) -> tuple[_Read, np.ndarray | None]:
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
        ordered = np.sort(ids, kind="stable")  # a radix sort: O(n), and mostly sorted already
        if n and (ordered[0] < 0 or ordered[-1] >= limit or (ordered[1:] == ordered[:-1]).any()):
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
        return ordered if renumber else None

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
