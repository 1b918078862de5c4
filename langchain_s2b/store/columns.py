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
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

ROW_FIELDS = ("split_id", "start", "end")
"""Per-node numbers (``split_idx_start`` is ``start`` again when it equals it)."""
_SPLIT_START = "split_idx_start"
_PARSED_CACHE = 4096
"""Parsed shapes kept (a template dict each); then the cache starts over."""


class Shapes:
    """Distinct metadata shapes; see the module docstring."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        """Every shape as JSON text, by index (what is saved)."""
        self._index: dict[str, int] = {}
        self._parsed: dict[int, tuple[dict[str, Any], tuple[str, ...], bool]] = {}
        self._last: _Sibling | None = None
        self._batch = False

    def __len__(self) -> int:
        return len(self.texts)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> Shapes:
        """Shapes read back from :attr:`texts` (checked when first decoded)."""
        shapes = cls()
        shapes.texts = list(texts)
        shapes._index = {text: i for i, text in enumerate(shapes.texts)}
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
        template, varying, keyed = self.template(shape)
        if not keyed or "split_id" not in varying:
            return None
        return f"{template['source_key']}/{template['level']}/{split_id}"


def _pairs(text: str, shape: int) -> list[list[Any]]:
    """A shape's ``[name, value]`` pairs; ``ValueError`` naming a malformed one (a file read)."""
    try:
        pairs = json.loads(text)
        ok = isinstance(pairs, list) and all(
            isinstance(p, list) and len(p) in (1, 2) and isinstance(p[0], str) for p in pairs
        )
    except (TypeError, ValueError):
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
