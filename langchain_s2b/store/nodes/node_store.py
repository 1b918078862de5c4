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
as they are (:mod:`~langchain_s2b.store.nodes.node_files`: numpy arrays, one
UTF-8 text file, JSON lines): nothing is parsed or built per node.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.stores import BaseStore

from langchain_s2b.core.merge import Chunk, SpanText, WholeLeaf
from langchain_s2b.core.tree import DOC_LEVEL
from langchain_s2b.store.base import Shapes, check_slots, first_line
from langchain_s2b.store.nodes.codec import decode_document
from langchain_s2b.store.nodes.levels import ABSENT, Level, TextBatch, decode, encode
from langchain_s2b.store.nodes.node_files import (
    ARRAYS_FILE,
    FILES,
    NodeColumns,
    damaged,
    read_nodes,
    write_nodes,
)
from langchain_s2b.store.nodes.node_keys import NODE_KEY, KeyReader


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

    def read_runs(
        self, runs: Sequence[tuple[str, int, int]]
    ) -> list[list[Document | Chunk | WholeLeaf | None]]:
        """:meth:`read_leaves` of each run ``(key prefix, lo, hi)``'s keys, one list per run.

        A run's nodes are read from slices of its level's columns: no key is
        made or parsed for a node held there (a key is never both held there
        and kept as given); a split with no node there is read by its key.
        """
        return [self._run(prefix, lo, hi) for prefix, lo, hi in runs]

    def _run(self, prefix: str, lo: int, hi: int) -> list[Document | Chunk | WholeLeaf | None]:
        pair = self._key.level_of(prefix) if lo >= 0 else None
        level = None if pair is None else self._levels.get(pair)
        if pair is None or level is None:
            return self.read_leaves([f"{prefix}{i}" for i in range(lo, hi + 1)])
        stop = max(lo, min(hi + 1, level.shape.size))  # (no negative index reaches the slices)
        shapes = level.shape.data[lo:stop].tolist()
        starts, ends = level.start.data[lo:stop].tolist(), level.end.data[lo:stop].tolist()
        place, new, source = self.shapes.spanned_place, tuple.__new__, pair[0]
        out: list[Document | Chunk | WholeLeaf | None] = []
        for i, shape in enumerate(shapes):
            split = lo + i
            named = None if shape == ABSENT else place(shape)
            if named is None or named[0] != prefix:  # not held here, or not as its key names
                out.append(self._get(f"{prefix}{split}"))
                continue
            text = self._text(level, source, split)
            out.append(new(Chunk, (starts[i], ends[i], text, split)))
        out.extend(self._get(f"{prefix}{i}") for i in range(stop, hi + 1))
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
        write_nodes(directory, NodeColumns(self.shapes, self._texts, self._levels, self._other))
        return list(FILES), len(self)

    @classmethod
    def read(cls, directory: Path) -> NodeStore:
        """A store filled from :meth:`write`'s files; ``ValueError`` naming what is wrong."""
        columns, named = read_nodes(directory)
        store = cls()
        store.shapes, store._texts, store._levels = columns.shapes, columns.texts, columns.levels
        store._held = columns.held
        for key in columns.other:  # one home per key (read_spans relies on it)
            if store._locate(key) is not None:
                what = f"{key!r}, kept as given, is also a node in the columns"
                raise damaged(directory / ARRAYS_FILE, what)
        store._other = columns.other
        try:
            check_slots(named, len(store), "the node keys its manifests name")  # made at verify
        except ValueError as err:
            raise damaged(directory / ARRAYS_FILE, first_line(err)) from None
        return store


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
