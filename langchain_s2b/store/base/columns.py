"""Metadata as columns: one shared *shape* per group of nodes, and a few numbers per node.

A node's metadata repeats its source's fields and its parent's (``ancestors``,
``parent_id``) in every sibling; only ``split_id``, ``start``, ``end`` and
``split_idx_start`` differ from one sibling to the next. :class:`Shapes` keeps
each distinct remainder once, as JSON (a list of ``[name, value]`` pairs in the
dict's own order, a per-node number written as ``[name]``), and a node as
``(shape, split_id, start, end)``: a few integers in numpy columns instead of a
dict and its values per node. Decoding gives back an equal dict with its keys
in the same order; a dict that JSON can not give back equal (a tuple, a
non-string key, a value JSON can not write) is not encoded (``encode`` returns
``None``) and the caller keeps it whole. Inside :meth:`Shapes.batch` (one write
call), a sibling of the last dict encoded is recognised by identity, without
writing its JSON again; between two calls a list may have changed in place, so
the next call starts over.

:class:`Column` is a growable numpy array; :func:`utf8_block` and
:class:`TextBlocks` keep many strings as UTF-8 in a few ``bytes`` objects.

Reading them back (the records' and the nodes' files): :func:`read_arrays`
reads an ``np.savez`` file, each array checked to fit in the file before it is
allocated, and :func:`check_slots` refuses columns indexed by an id (a split
id) that a file claims far beyond the entries it holds: a crafted file can not
make a load allocate what its bytes do not justify.
"""

from __future__ import annotations

import json
import math
import operator
import struct
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROW_FIELDS = ("split_id", "start", "end")
"""Per-node numbers (``split_idx_start`` is ``start`` again when it equals it)."""
_SPLIT_START = "split_idx_start"
_VARYING = (*ROW_FIELDS, _SPLIT_START)
"""The names a shape may leave to each node's numbers."""
_PARSED_CACHE = 4096
"""Parsed shapes kept (a template dict each); then the cache starts over."""


class Shapes:
    """Distinct metadata shapes; see the module docstring."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        """Every shape as JSON text, by index (what is saved)."""
        self._index: dict[str, int] | None = {}
        """Each shape's index by its text; read back from a file, made at the first write."""
        self._parsed: dict[int, tuple[dict[str, Any], tuple[str, ...], bool]] = {}
        self.places: dict[int, tuple[str, str] | None] = {}
        """:meth:`node_place` of each shape asked for (read it directly on a hot path)."""
        self._spans: dict[int, tuple[str, str] | None] = {}
        self._last: _Sibling | None = None
        self._batch = False

    def __len__(self) -> int:
        return len(self.texts)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> Shapes:
        """Shapes read back from :attr:`texts` (checked when first decoded)."""
        shapes = cls()
        shapes.texts = list(texts)
        shapes._index = None  # a store opened to be read never needs it (issue 34)
        return shapes

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One write call: siblings are recognised by identity until it ends.

        The objects of one call's metadata do not change during it; between
        two calls a caller may change a list in place, so nothing is kept.
        """
        self._last, self._batch = None, True
        try:
            yield
        finally:
            self._last, self._batch = None, False

    def encode(self, meta: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
        """``(shape, split_id, start, end)`` of ``meta``, or ``None`` if JSON can not hold it."""
        last = self._last
        if last is not None:
            found = last.match(meta)
            if found is not None:
                return found
        if not all(isinstance(name, str) for name in meta):  # JSON writes 2020 as "2020"
            return None
        pairs: list[list[Any]] = []
        varying: list[str] = []
        numbers = _numbers(meta)
        start = numbers[1] if type(meta.get("start")) is int else None
        for name, value in meta.items():
            if (name in ROW_FIELDS and type(value) is int) or (
                name == _SPLIT_START and start is not None and type(value) is int and value == start
            ):
                pairs.append([name])
                varying.append(name)
            else:
                pairs.append([name, value])
        try:
            text = json.dumps(pairs, separators=(",", ":"), allow_nan=False)  # ASCII: one line
        except (TypeError, ValueError):
            return None
        if json.loads(text) != pairs:  # a tuple, a nested non-string key ... would change
            return None
        if self._index is None:
            self._index = {shape: i for i, shape in enumerate(self.texts)}
        found_shape = self._index.get(text)
        if found_shape is None:
            found_shape = self._index[text] = len(self.texts)
            self.texts.append(text)
        if self._batch:
            self._last = _Sibling(meta, varying, found_shape)
        return (found_shape, *numbers)

    def decode(self, shape: int, split_id: int, start: int, end: int) -> dict[str, Any]:
        """The metadata dict of a node (a new dict; nested values are shared between calls)."""
        template, varying, _ = self.template(shape)
        meta = dict(template)
        for name in varying:
            meta[name] = start if name == _SPLIT_START else _pick(name, split_id, start, end)
        return meta

    def template(self, shape: int) -> tuple[dict[str, Any], tuple[str, ...], bool]:
        """``(dict with placeholders, per-node names, whether the key is derived)`` of a shape."""
        found = self._parsed.get(shape)
        if found is None:
            pairs = _pairs(self.texts[shape], shape)
            template: dict[str, Any] = {}
            varying: list[str] = []
            for pair in pairs:
                if len(pair) == 1:
                    template[pair[0]] = 0
                    varying.append(pair[0])
                else:
                    template[pair[0]] = pair[1]
            keyed = isinstance(template.get("source_key"), str) and isinstance(
                template.get("level"), str
            )
            if len(self._parsed) >= _PARSED_CACHE:
                self._parsed.clear()
            found = self._parsed[shape] = (template, tuple(varying), keyed)
        return found

    def node_key(self, shape: int, split_id: int) -> str | None:
        """``<source_key>/<level>/<split_id>`` when the shape names both, else ``None``."""
        place = self.node_place(shape)
        return None if place is None else f"{place[0]}{split_id}"

    def node_place(self, shape: int) -> tuple[str, str] | None:
        """``(<source_key>/<level>/, source_key)`` when the shape names both, else ``None``.

        Kept per shape apart from the templates' bounded cache: a query reads
        ~100 keys of as many shapes (issue 34).
        """
        if shape in self.places:
            return self.places[shape]
        template, varying, keyed = self.template(shape)
        source = template.get("source_key")
        place = self.places[shape] = (
            (f"{source}/{template['level']}/", str(source))
            if keyed and "split_id" in varying
            else None
        )
        return place

    def spanned_place(self, shape: int) -> tuple[str, str] | None:
        """:meth:`node_place` of a shape whose ``start`` and ``end`` are per-node numbers too.

        A node of such a shape is read as a chunk from its numbers alone, the
        one its metadata gives (``None``: the metadata must be read).
        """
        if shape in self._spans:
            return self._spans[shape]
        place = self.node_place(shape)
        _, varying, _ = self.template(shape)
        spanned = place is not None and "start" in varying and "end" in varying
        found = self._spans[shape] = place if spanned else None
        return found


def _pairs(text: str, shape: int) -> list[list[Any]]:
    """A shape's ``[name, value]`` pairs; ``ValueError`` naming a malformed one (a file read)."""
    try:
        pairs = json.loads(text)
        ok = isinstance(pairs, list) and all(
            isinstance(p, list)
            and ((len(p) == 2 and isinstance(p[0], str)) or (len(p) == 1 and p[0] in _VARYING))
            for p in pairs
        )
    except (TypeError, ValueError, RecursionError):  # nested too deep for the parser
        ok = False
    if not ok:
        msg = f"shape {shape} is not a list of [name, value] pairs: {text[:80]!r}"
        raise ValueError(msg)
    return pairs  # type: ignore[no-any-return]


def _numbers(meta: Mapping[str, Any]) -> tuple[int, int, int]:
    out = []
    for name in ROW_FIELDS:
        value = meta.get(name)
        out.append(value if type(value) is int else 0)
    return out[0], out[1], out[2]


def _pick(name: str, split_id: int, start: int, end: int) -> int:
    return split_id if name == "split_id" else start if name == "start" else end


class _Sibling:
    """The last shape encoded, to recognise its siblings quickly (:meth:`Shapes.encode`).

    A sibling has the same keys in the same order and, for every fixed key,
    the very same value object (ingestion shares them between the nodes of a
    source and of a parent); anything else takes the slow path, which compares
    JSON texts.
    """

    __slots__ = ("fixed", "keys", "shape", "split_start", "values", "varying")

    def __init__(self, meta: Mapping[str, Any], varying: list[str], shape: int) -> None:
        self.keys = tuple(meta)
        fixed = [name for name in self.keys if name not in varying]
        self.fixed = _getter(fixed)
        self.values = self.fixed(meta)
        self.varying = _getter(varying)
        self.split_start = _SPLIT_START in varying
        self.shape = shape

    def match(self, meta: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
        if tuple(meta) != self.keys or not all(map(operator.is_, self.fixed(meta), self.values)):
            return None
        if not all(type(value) is int for value in self.varying(meta)):
            return None
        numbers = _numbers(meta)
        if self.split_start and meta[_SPLIT_START] != numbers[1]:
            return None
        return (self.shape, *numbers)


def _getter(names: list[str]) -> Any:
    """``meta -> tuple`` of the values of ``names`` (a C-level ``itemgetter``)."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        name = names[0]
        return lambda meta: (meta[name],)
    return lambda meta: ()


class Column:
    """A growable one-dimensional numpy array (amortised appends, view of the used part)."""

    def __init__(self, dtype: Any, fill: int = 0, data: np.ndarray | None = None) -> None:
        self.fill = fill
        self.data = np.asarray(data if data is not None else np.empty(0), dtype=dtype)
        self.size = len(self.data)

    def ensure(self, size: int) -> None:
        """Room for ``size`` values (new slots hold the fill value)."""
        if size <= self.size:
            return
        if size > len(self.data):  # untouched room costs no memory until written
            grown = np.empty(max(size, 2 * len(self.data), 64), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : size] = self.fill
        self.size = size

    @property
    def used(self) -> np.ndarray:
        """The used part (a view)."""
        return self.data[: self.size]


def utf8_block(texts: Sequence[str]) -> tuple[bytes, np.ndarray]:
    """``texts`` as one UTF-8 block and the start offset of each (plus the end, last)."""
    encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return b"".join(encoded), offsets


def decode_utf8(block: bytes, start: int, end: int) -> str:
    """The string stored at ``block[start:end]``."""
    return block[start:end].decode("utf-8", "surrogatepass")


# Reading files back (every size checked before anything is allocated) ----------------

SLOTS_PER_ENTRY = 64
"""Slots an id-indexed column may hold per entry read, beyond :data:`SLOTS_SLACK`."""
SLOTS_SLACK = 1 << 20
"""Slots any file may claim beyond :data:`SLOTS_PER_ENTRY` per entry (8 MiB of ``int64``)."""
_ARRAY_KINDS = "biu"
"""Booleans and integers: all the columns hold."""


def first_line(err: BaseException) -> str:
    """An error's message on one line (a message of many lines is cut at its first)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def check_slots(slots: int, entries: int, what: str) -> None:
    """Refuse ``slots`` id-indexed slots for ``entries`` entries read (a crafted id).

    Split ids of one source and level run from 0 with few gaps (leaves without
    a letter are not embedded), so a file whose ids need many more slots than
    it holds entries names ids that no save wrote.
    """
    if slots > SLOTS_PER_ENTRY * entries + SLOTS_SLACK:
        msg = (
            f"{what} run up to {slots - 1:,} for {entries:,} entries; a save holds at most "
            f"{SLOTS_PER_ENTRY} slots per entry plus {SLOTS_SLACK:,}"
        )
        raise ValueError(msg)


def read_arrays(file: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``np.savez`` file; ``ValueError`` naming what is wrong.

    Only uncompressed members of booleans and integers are read (what the
    stores write), and each array's header must claim exactly the bytes its
    member holds before the array is allocated: no array is larger than the
    file. ``FileNotFoundError`` when the file is missing.
    """
    size = file.stat().st_size
    try:
        with zipfile.ZipFile(file) as archive:
            return {
                info.filename.removesuffix(".npy"): _read_member(archive, info, size)
                for info in archive.infolist()
            }
    except (zipfile.BadZipFile, EOFError, RuntimeError, NotImplementedError, struct.error) as err:
        msg = f"not a zip of arrays ({first_line(err)})"
        raise ValueError(msg) from None


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> np.ndarray:
    name = info.filename
    stored = info.compress_type == zipfile.ZIP_STORED and info.compress_size == info.file_size
    if not name.endswith(".npy") or not stored or info.file_size > size:
        msg = f"member {name!r} is not an uncompressed array of at most {size} bytes"
        raise ValueError(msg)
    with archive.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            msg = f"member {name!r} has .npy format version {version}; expected 1.0 or 2.0"
            raise ValueError(msg)
        count = math.prod(shape)
        if dtype.kind not in _ARRAY_KINDS or dtype.hasobject or dtype.shape:
            msg = f"member {name!r} holds {dtype}, not booleans or integers"
            raise ValueError(msg)
        if count * dtype.itemsize != info.file_size - fh.tell():
            msg = (
                f"member {name!r} claims {count:,} values of {dtype}, but holds "
                f"{info.file_size - fh.tell():,} bytes"
            )
            raise ValueError(msg)
        data = fh.read(count * dtype.itemsize)
        if len(data) != count * dtype.itemsize or fh.read(1):  # at the end the CRC is checked
            msg = f"member {name!r} does not hold the {count:,} values it claims"
            raise ValueError(msg)
    array = np.frombuffer(data, dtype=dtype)  # read-only: the columns are copied from it
    return array.reshape(shape, order="F" if fortran else "C")
