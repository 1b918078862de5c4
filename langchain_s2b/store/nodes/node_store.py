"""NodeStore: the default docstore, nodes kept as spans over their source's text.

Every node of the span tree is a slice of its source's text, and its metadata
repeats its source's and its parent's. Kept as ``Document`` objects that is the
text once per level and ~1 KB of Python objects per node; here a source's text
is held once, as UTF-8 (a Python ``str`` of text with one character past
Latin-1 takes 2 or 4 bytes a character), and a node is a few numbers in numpy
columns per ``(source, level)``: its span in characters and in bytes, and a
shared metadata shape (:class:`~langchain_s2b.store.base.columns.Shapes`). A
``Document`` is made only when :meth:`NodeStore.mget` asks for it, equal to
the one stored.

What does not fit is kept as given: manifests, a node whose ``id`` is not its
key, metadata JSON could not give back equal, a ``Document`` subclass. A node
whose text is not the slice ``[start, end)`` of its source keeps its own text.

:meth:`NodeStore.write` and :meth:`NodeStore.read` save and open the columns
as they are (numpy arrays, one UTF-8 text file, JSON lines): nothing is
parsed or built per node.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.stores import BaseStore

from langchain_s2b.core.keys import is_manifest_key
from langchain_s2b.core.merge import Chunk, SpanText, WholeLeaf
from langchain_s2b.core.tree import DOC_LEVEL
from langchain_s2b.store.base import (
    Column,
    Shapes,
    check_slots,
    first_line,
    read_arrays,
    utf8_block,
)
from langchain_s2b.store.nodes.codec import check_document, decode_document, encode_document
from langchain_s2b.store.nodes.levels import (
    ABSENT,
    COLUMNS,
    DTYPES,
    Level,
    TextBatch,
    decode,
    encode,
)
from langchain_s2b.store.nodes.node_keys import NODE_KEY, KeyReader

ARRAYS_FILE = "nodes.npz"
TEXT_FILE = "nodes.utf8"
SHAPES_FILE = "nodes.shapes.jsonl"
NAMES_FILE = "nodes.names.json"
OTHER_FILE = "nodes.other.jsonl"
FILES = (ARRAYS_FILE, TEXT_FILE, SHAPES_FILE, NAMES_FILE, OTHER_FILE)


class NodeStore(BaseStore[str, Document]):
    """A ``BaseStore[str, Document]`` in memory that keeps nodes as spans (module docstring)."""

    def __init__(self) -> None:
        self.shapes = Shapes()
        self._key = KeyReader()
        self._texts: dict[str, bytes] = {}
        """Source (generation) key -> its text as UTF-8, while any of its nodes is held."""
        self._levels: dict[tuple[str, str], Level] = {}
        self._held: dict[str, int] = {}
        """Source key -> how many of its nodes are held as spans."""
        self._other: dict[str, Document | bytes] = {}
        """Everything kept as given (manifests and what does not fit); read from a file:
        its JSON, decoded when asked for."""

    def __len__(self) -> int:
        return len(self._other) + sum(self._held.values())

    # BaseStore --------------------------------------------------------------------

    def mset(self, key_value_pairs: Sequence[tuple[str, Document]]) -> None:
        """Store documents (the last pair of a key wins)."""
        pairs = list(dict(key_value_pairs).items())
        batch = TextBatch(self._texts)
        for key, doc in pairs:  # the sources' texts first: a batch holds its doc nodes
            match = NODE_KEY.match(key)
            if match and match[2] == DOC_LEVEL and match[3] == "0" and type(doc) is Document:
                self._set_text(match[1], doc.page_content, batch)
        touched: set[str] = set()
        with self.shapes.batch():
            for key, doc in pairs:
                self._drop(key, touched)
                if not self._put_node(key, doc, batch):
                    self._other[key] = doc
        self._sweep(touched)

    def _set_text(self, source: str, text: str, batch: TextBatch) -> None:
        old = self._texts.get(source)
        data = encode(text)
        if old is not None and old != data:  # its spans keep the text they have
            for (held, _), level in self._levels.items():
                if held == source:
                    for split in level.present().tolist():
                        if split not in level.own:
                            level.own[split] = decode(
                                old[level.bstart.data[split] : level.bend.data[split]]
                            )
        self._texts[source] = data
        batch.texts[source] = text
        batch.offsets.pop(source, None)

    def _put_node(self, key: str, doc: Document, batch: TextBatch) -> bool:
        match = NODE_KEY.match(key)
        if match is None or type(doc) is not Document or doc.id != key:
            return False
        coded = self.shapes.encode(doc.metadata)
        if coded is None or coded[1] != int(match[3]):
            return False
        shape, split, start, end = coded
        source, level_name = match[1], match[2]
        text = batch.text(source)
        own = (
            text is None
            or not 0 <= start <= end <= len(text)
            or text[start:end] != doc.page_content
        )
        level = self._levels.get((source, level_name))
        if level is None:
            level = self._levels[(source, level_name)] = Level()
        if split >= level.shape.size:
            level.ensure(max(split + 1, 2 * level.shape.size))
        level.start.data[split] = start
        level.end.data[split] = end
        if own:
            level.own[split] = doc.page_content
        else:
            assert text is not None
            level.bstart.data[split] = batch.offset(source, text, start)
            level.bend.data[split] = batch.offset(source, text, end)
        level.shape.data[split] = shape  # last: a reader sees the node whole or not at all
        self._held[source] = self._held.get(source, 0) + 1
        return True

    def _drop(self, key: str, touched: set[str]) -> None:
        if self._other.pop(key, None) is not None:
            return
        match = NODE_KEY.match(key)
        if match is None:
            return
        source, level_name, split = match[1], match[2], int(match[3])
        level = self._levels.get((source, level_name))
        if level is None or split >= level.shape.size or level.shape.data[split] == ABSENT:
            return
        level.shape.data[split] = ABSENT
        level.own.pop(split, None)
        self._held[source] -= 1
        touched.add(source)

    def _sweep(self, sources: set[str]) -> None:
        """Forget the text and columns of sources none of whose nodes is held any more."""
        for source in sources:
            if self._held.get(source, 0):
                continue
            self._held.pop(source, None)
            self._texts.pop(source, None)
            for name in [name for src, name in self._levels if src == source]:
                del self._levels[(source, name)]

    def mget(self, keys: Sequence[str]) -> list[Document | None]:
        """The documents stored under ``keys`` (``None`` for a missing key)."""
        return [self._get(key) for key in keys]

    def read_leaves(
        self, keys: Sequence[str], whole: Collection[str] = ()
    ) -> list[Document | Chunk | WholeLeaf | None]:
        """:meth:`mget` for assembly: a node as a :class:`~langchain_s2b.core.merge.Chunk`.

        A node whose span and split id are its own numbers, and whose key names
        its metadata's source and level, comes back as its chunk (the one its
        document gives) and no ``Document`` is built: a budget reads ~400 leaves
        a query. Such a node whose key is in ``whole`` comes back with its
        metadata too (a :class:`~langchain_s2b.core.merge.WholeLeaf`: the
        metadata :meth:`mget` gives it, still no ``Document``). Any other value
        comes back as :meth:`mget` gives it.
        """
        out: list[Document | Chunk | WholeLeaf | None] = []
        other, locate, shapes, new = self._other, self._locate, self.shapes, tuple.__new__
        for key in keys:
            if key in other:
                out.append(self._get(key))
                continue
            found = locate(key)
            if found is None:
                out.append(None)
                continue
            level, source, split, shape = found
            place = shapes.spanned_place(shape)
            if place is None or key != f"{place[0]}{split}":  # the node key its metadata names
                out.append(self._get(key))
                continue
            start, end = level.start.data.item(split), level.end.data.item(split)
            chunk = new(Chunk, (start, end, self._text(level, source, split), split))
            if key in whole:  # the metadata _get gives it, without its Document
                meta = shapes.decode(shape, split, start, end)
                out.append(new(WholeLeaf, (chunk, meta)))
            else:
                out.append(chunk)
        return out

    def read_spans(self, spans: Sequence[tuple[str, int, int]]) -> list[SpanText | None]:
        """Each run ``(key prefix, lo, hi)`` as one slice of its source, when it is one.

        A run is answered when every one of its keys is held in the columns
        (none kept as given), as the node key its metadata names, with its
        start and end its own numbers and its text the slice of its source,
        and when the spans, in split order, are none empty, start in order and
        leave no gap: what :meth:`read_leaves` of its keys gives, merged, is
        then the source's slice from the first start to the furthest end.
        Anything else is ``None`` (read it by :meth:`read_leaves`).
        """
        return [self._span(prefix, lo, hi) for prefix, lo, hi in spans]

    def _span(self, prefix: str, lo: int, hi: int) -> SpanText | None:
        pair = self._key.level_of(prefix) if 0 <= lo <= hi else None
        level = None if pair is None else self._levels.get(pair)
        if pair is None or level is None or hi >= level.shape.size:
            return None
        stop = hi + 1
        shapes = level.shape.data[lo:stop].tolist()
        if ABSENT in shapes:
            return None
        place = self.shapes.spanned_place
        for shape in set(shapes):
            named = place(shape)
            if named is None or named[0] != prefix:  # not the node key its metadata names
                return None
        own = level.own  # (a key held in the columns is never also kept as given)
        if own and any(i in own for i in range(lo, stop)):
            return None
        starts, ends = level.start.data[lo:stop].tolist(), level.end.data[lo:stop].tolist()
        if not all(map(int.__lt__, starts, ends)):  # an empty span (the merge skips it)
            return None
        furthest, reach = lo, ends[0]
        for i in range(1, stop - lo):
            if not starts[i - 1] <= starts[i] <= reach:  # out of order, or a gap
                return None
            if ends[i] > reach:
                furthest, reach = lo + i, ends[i]
        data = self._texts[pair[0]]
        text = decode(data[level.bstart.data.item(lo) : level.bend.data.item(furthest)])
        meta = self.shapes.decode(shapes[0], lo, starts[0], ends[0])
        return SpanText(text, starts[0], reach, meta)

    def _get(self, key: str) -> Document | None:
        found = self._other.get(key)
        if found is not None:
            return decode_document(found, key) if isinstance(found, bytes) else found
        located = self._locate(key)
        if located is None:
            return None
        level, source, split, shape = located
        start, end = level.start.data.item(split), level.end.data.item(split)
        meta = self.shapes.decode(shape, split, start, end)
        return Document(page_content=self._text(level, source, split), metadata=meta, id=key)

    def _locate(self, key: str) -> tuple[Level, str, int, int] | None:
        """``(level, source, split id, shape)`` of a node held in the columns, else ``None``."""
        parsed = self._key(key)
        if parsed is None:
            return None
        pair, split = parsed
        level = self._levels.get(pair)
        if level is None or split >= level.shape.size:
            return None
        shape = level.shape.data.item(split)
        return None if shape == ABSENT else (level, pair[0], split, shape)

    def _text(self, level: Level, source: str, split: int) -> str:
        """A located node's text: its own, or the slice of its source's."""
        text = level.own.get(split)
        if text is None:
            data = self._texts[source]
            text = decode(data[level.bstart.data.item(split) : level.bend.data.item(split)])
        return text

    def mdelete(self, keys: Sequence[str]) -> None:
        """Delete keys (unknown keys are ignored)."""
        touched: set[str] = set()
        for key in keys:
            self._drop(key, touched)
        self._sweep(touched)

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """Every key (or those starting with ``prefix``)."""
        keys = list(self._other)
        for (source, name), level in list(self._levels.items()):
            keys.extend(f"{source}/{name}/{split}" for split in level.present().tolist())
        for key in keys:
            if prefix is None or key.startswith(prefix):
                yield key

    # Files --------------------------------------------------------------------------

    def write(self, directory: Path) -> tuple[list[str], int]:
        """Write every node into ``directory``; the names written and the number of documents."""
        sources = sorted({source for source, _ in self._levels} | set(self._texts))
        source_index = {s: i for i, s in enumerate(sources)}
        names = sorted({name for _, name in self._levels})
        name_index = {n: i for i, n in enumerate(names)}
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("source", "level", "split", "own")}
        parts |= {k: [] for k in COLUMNS}
        owns: list[str] = []
        for (source, name), level in sorted(self._levels.items()):
            splits = level.present()
            if not len(splits):
                continue
            parts["source"].append(np.full(len(splits), source_index[source], dtype=np.int32))
            parts["level"].append(np.full(len(splits), name_index[name], dtype=np.int32))
            parts["split"].append(splits)
            for column in COLUMNS:
                parts[column].append(getattr(level, column).data[splits])
            own = np.asarray([s in level.own for s in splits.tolist()], dtype=np.bool_)
            parts["own"].append(own)
            owns.extend(level.own[s] for s in splits[own].tolist())
        arrays = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in parts.items()}
        block, offsets = utf8_block(owns)
        arrays["text_bytes"] = np.asarray(
            [len(self._texts[s]) if s in self._texts else -1 for s in sources], dtype=np.int64
        )
        arrays["own_offsets"] = offsets
        np.savez(directory / ARRAYS_FILE, **arrays)  # type: ignore[arg-type]
        with (directory / TEXT_FILE).open("wb") as out:
            for source in sources:
                out.write(self._texts.get(source, b""))
            out.write(block)
        with (directory / SHAPES_FILE).open("w", encoding="ascii") as out:
            out.writelines(text + "\n" for text in self.shapes.texts)
        names_json = json.dumps({"sources": sources, "levels": names})
        (directory / NAMES_FILE).write_text(names_json + "\n", encoding="ascii")
        with (directory / OTHER_FILE).open("wb") as out:
            for key, doc in self._other.items():
                raw = doc if isinstance(doc, bytes) else encode_document(doc)
                out.write(json.dumps(key).encode("ascii") + b"\t" + raw + b"\n")
        return list(FILES), len(self)

    @classmethod
    def read(cls, directory: Path) -> NodeStore:
        """A store filled from :meth:`write`'s files; ``ValueError`` naming what is wrong."""
        where = directory / ARRAYS_FILE
        try:
            cols = read_arrays(where)
            raw = (directory / TEXT_FILE).read_bytes()
            shapes = (directory / SHAPES_FILE).read_text(encoding="ascii").split("\n")[:-1]
            names = json.loads((directory / NAMES_FILE).read_text(encoding="ascii"))
            other = (directory / OTHER_FILE).read_bytes().splitlines()
        except FileNotFoundError as err:
            raise _damaged(Path(err.filename or where), "the file is missing") from None
        except (OSError, ValueError, KeyError, RecursionError) as err:
            raise _damaged(where, f"it can not be read ({first_line(err)})") from None
        store = cls()
        store.shapes = Shapes.from_texts(shapes)
        try:  # a shape is checked when first decoded (a crafted one: a ValueError then)
            store._fill(cols, raw, names)
            named = sum(store._read_other(number, line) for number, line in enumerate(other, 1))
            check_slots(named, len(store), "the node keys its manifests name")  # made at verify
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as err:
            raise _damaged(where, first_line(err)) from None
        return store

    def _read_other(self, number: int, line: bytes) -> int:
        """Keep one line of :data:`OTHER_FILE`; how many node keys it names, if a manifest."""
        head, tab, raw = line.partition(b"\t")
        key = json.loads(head) if tab else None
        if not isinstance(key, str):
            msg = f"line {number} of {OTHER_FILE}: expected a JSON string key, a tab and a document"
            raise ValueError(msg)
        meta = check_document(raw, key)["metadata"]  # a Document is made when asked for
        if self._locate(key) is not None:  # one home per key (read_spans relies on it)
            msg = f"line {number} of {OTHER_FILE}: {key!r} is also a node in the columns"
            raise ValueError(msg)
        self._other[key] = raw
        counts = meta.get("counts") if is_manifest_key(key) else None
        if not isinstance(counts, dict):
            return 0
        return sum(n for n in counts.values() if type(n) is int and n > 0)

    def _fill(self, cols: dict[str, np.ndarray], raw: bytes, names: Any) -> None:
        sources, levels = names["sources"], names["levels"]
        ok = isinstance(sources, list) and isinstance(levels, list)
        if not ok or not all(isinstance(x, str) and x for x in [*sources, *levels]):
            msg = "source keys and level names must be lists of non-empty strings"
            raise ValueError(msg)
        if len(set(sources)) != len(sources) or len(set(levels)) != len(levels):
            msg = "a source key or a level name is listed twice"
            raise ValueError(msg)
        n = len(cols["split"])
        col = {k: _ints(cols, k, n) for k in ("source", "level", "split", *COLUMNS)}
        own = _ints(cols, "own", n).astype(np.bool_)
        sizes = _ints(cols, "text_bytes", len(sources))
        own_offsets = _ints(cols, "own_offsets", int(own.sum()) + 1)
        lengths = np.maximum(sizes, 0)
        if (sizes < -1).any() or (sizes > len(raw)).any():
            msg = "a text length is outside the text file"
            raise ValueError(msg)
        total = int(lengths.sum())
        if own_offsets[0] != 0 or (np.diff(own_offsets) < 0).any():
            msg = "the own texts' offsets do not run forward from 0"
            raise ValueError(msg)
        if total + int(own_offsets[-1]) != len(raw):
            msg = "the text lengths do not add up to the text file"
            raise ValueError(msg)
        bounds = np.zeros(len(sources) + 1, dtype=np.int64)
        np.cumsum(lengths, out=bounds[1:])
        for i, source in enumerate(sources):
            if sizes[i] >= 0:
                self._texts[source] = raw[bounds[i] : bounds[i + 1]]
        owns = raw[total:]
        for name, top in (("source", len(sources)), ("level", len(levels))):
            if n and (col[name].min() < 0 or col[name].max() >= top):
                msg = f"a node names a {name} that is not there"
                raise ValueError(msg)
        if n and (col["shape"].min() < 0 or col["shape"].max() >= len(self.shapes)):
            msg = "a node names a shape that is not there"
            raise ValueError(msg)
        if n and col["split"].min() < 0:
            msg = "a split id is negative"
            raise ValueError(msg)
        group = col["source"] * len(levels) + col["level"]
        order = np.lexsort((col["split"], group))
        cuts = np.flatnonzero(np.diff(group[order])) + 1
        if n:  # one slot per split id up to the largest, per source and level
            tops = col["split"][order][np.append(cuts, n) - 1].tolist()
            check_slots(sum(tops) + len(tops), n, "split ids")
        _check_levels(col, own, order, cuts, sizes, sources, levels)
        self._fill_levels(col, order, cuts, sources, levels)
        own_at = np.cumsum(own) - 1
        for member in np.flatnonzero(own).tolist():
            j = int(own_at[member])
            source, name = sources[int(col["source"][member])], levels[int(col["level"][member])]
            piece = owns[own_offsets[j] : own_offsets[j + 1]]
            self._levels[(source, name)].own[int(col["split"][member])] = decode(piece)
        held = np.bincount(col["source"], minlength=len(sources)) if n else np.zeros(0, np.int64)
        for i in np.flatnonzero(held).tolist():
            self._held[sources[i]] = int(held[i])
        for source in [s for s in self._texts if s not in self._held]:
            del self._texts[source]

    def _fill_levels(
        self,
        col: dict[str, np.ndarray],
        order: np.ndarray,
        cuts: np.ndarray,
        sources: list[str],
        levels: list[str],
    ) -> None:
        """One :class:`Level` per source and level, its columns cut from the sorted ones.

        One pass of numpy over every node (issue 34: 1M nodes in ~20k levels
        opened 10x slower level by level): a level whose split ids run from 0
        without a gap takes its slice of each sorted column as it is.
        """
        if not len(order):
            return
        splits = col["split"][order]
        typed = {name: np.asarray(col[name][order], dtype=DTYPES[name]) for name in COLUMNS}
        firsts = np.append(0, cuts).tolist()
        lasts = np.append(cuts, len(order)).tolist()
        heads = order[firsts]
        names = zip(col["source"][heads].tolist(), col["level"][heads].tolist(), strict=True)
        for (source, name), a, b in zip(names, firsts, lasts, strict=True):
            size = int(splits[b - 1]) + 1
            level = Level.__new__(Level)
            level.own = {}
            whole = size == b - a  # distinct split ids, sorted: 0 .. size - 1 exactly
            for column in COLUMNS:
                fill = ABSENT if column == "shape" else 0
                if whole:
                    data = typed[column][a:b].copy()
                else:
                    data = np.full(size, fill, dtype=DTYPES[column])
                    data[splits[a:b]] = typed[column][a:b]
                setattr(level, column, Column(DTYPES[column], fill, data))
            self._levels[(sources[source], levels[name])] = level


def _check_levels(
    col: dict[str, np.ndarray],
    own: np.ndarray,
    order: np.ndarray,
    cuts: np.ndarray,
    sizes: np.ndarray,
    sources: list[str],
    levels: list[str],
) -> None:
    """Refuse a node given twice in its level, or a span outside its source's text.

    Levels in the order of ``order``; within one, a node given twice first.
    """
    if not len(order):
        return
    group_of = np.zeros(len(order), dtype=np.int64)  # each sorted node's level, 0, 1, ...
    group_of[cuts] = 1
    group_of = np.cumsum(group_of)
    ordered = col["split"][order]
    twice = np.zeros(len(order), dtype=np.bool_)
    twice[1:] = (np.diff(group_of) == 0) & (np.diff(ordered) == 0)
    text = np.maximum(sizes, 0)[col["source"][order]]
    absent = (sizes < 0)[col["source"][order]]
    bs, be = col["bstart"][order], col["bend"][order]
    cs, ce = col["start"][order], col["end"][order]
    outside = ~own[order] & (absent | (bs < 0) | (be < bs) | (be > text) | (cs < 0) | (ce < cs))
    bad_twice = group_of[twice].min() if twice.any() else len(order)
    bad_span = group_of[outside].min() if outside.any() else len(order)
    if bad_twice == bad_span == len(order):
        return
    first = int(order[np.flatnonzero(group_of == min(bad_twice, bad_span))[0]])
    source, name = sources[int(col["source"][first])], levels[int(col["level"][first])]
    if bad_twice <= bad_span:
        msg = f"a node of {source!r}, level {name!r} is given twice"
    else:
        msg = f"a span of {source!r} is outside its text"
    raise ValueError(msg)


def _ints(cols: dict[str, np.ndarray], name: str, n: int) -> np.ndarray:
    value = cols[name]
    if value.ndim != 1 or len(value) != n or value.dtype.kind not in "biu":
        msg = f"column {name!r} has shape {value.shape} of {value.dtype}, expected ({n},) integers"
        raise ValueError(msg)
    return value.astype(np.int64, copy=False)


def _damaged(file: Path, what: str) -> ValueError:
    return ValueError(f"{file} is not a langchain_s2b nodes file: {what}.")


def copy_into(store: BaseStore[str, Document], batch: int = 1000) -> NodeStore:
    """A :class:`NodeStore` holding every document of ``store`` (to save another store)."""
    nodes = NodeStore()
    keys: list[str] = []
    for key in store.yield_keys():
        keys.append(key)
        if len(keys) == batch:
            _copy(store, keys, nodes)
            keys = []
    _copy(store, keys, nodes)
    return nodes


def _copy(store: BaseStore[str, Document], keys: list[str], nodes: NodeStore) -> None:
    if keys:
        nodes.mset([(k, d) for k, d in zip(keys, store.mget(keys), strict=True) if d is not None])
