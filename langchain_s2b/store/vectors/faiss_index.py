"""The FAISS child index: a LangChain ``VectorStore`` that never pickles, and its files.

Vectors are L2-normalised and searched by inner product, so a score is the
cosine similarity (higher is better). Each vector is keyed by its node key;
FAISS row positions are never used as split indices. Each row's key, text and
metadata are columns (:mod:`~langchain_s2b.store.vectors.records`), made into a
``Document`` only when asked for. ``save``/``load`` write the FAISS index with
``faiss.write_index``, the columns as numpy arrays and one UTF-8 file, and the
header as JSON; loading reads them as they are (no pickle, nothing per row).

Every write is all or nothing: its steps (FAISS, the lexical index, the
records) each register their undo before they run, the new rows are written
before the rows they replace are removed, and the records are published last;
an error, Ctrl-C or a cancellation just before or just after any step leaves
the index as it was (see ``FaissIndex._writing``). :meth:`FaissIndex.damage`
says where the records and FAISS disagree anyway (an undo that failed too) and
:meth:`FaissIndex.mend` drops what does not agree (``verify``).

Deletion works for every index type. Where FAISS removes vectors and
renumbers the rest, as ``IndexIDMap2`` needs (``Flat``, ``PQ``, ``SQ``: the flat
code indexes), they are removed. Elsewhere the deleted rows become
tombstones: HNSW can not remove at all, and an IVF index inside
``IndexIDMap2`` does not renumber, so after one removal its results name the
wrong rows and a second removal aborts the process (FAISS 1.15). A
tombstone's key and text are gone at once; searches leave the tombstones out
with an ``IDSelector`` (so a search asks for no more rows than it needs); the
index is rebuilt from its
live vectors (a reset clone, so training and search parameters stay) before a
write once the tombstones reach a quarter of it, and before every save, so a
saved file holds live vectors only. NSG can not add after its first build and is refused.

A metadata filter is applied before the search, not after it: the index
keeps the rows of each source (the ``source_key`` of the leaf metadata; the
leaves of one source share its metadata), a filter on source fields is
evaluated once per source, and the matching rows are searched once, on every
index type: scored exactly against the vectors the index holds when they are
few, else through a FAISS ``IDSelector`` with the index's own ``nprobe`` or
``efSearch`` (see :meth:`FaissIndex.search_among`). A filter that matches no
row returns at once. Callable filters, filters on per-leaf fields such as
``start``, and the cases ``search_among`` declines are filtered after the
search by the caller, searching deeper as needed.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from langchain_s2b.core.filters import Filter, check_filter, filter_key, matches_filter
from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.requests import ChildDamage
from langchain_s2b.core.tree import NODE_FIELDS
from langchain_s2b.store.base import Undo, all_or_nothing
from langchain_s2b.store.lexical import LexicalIndex
from langchain_s2b.store.vectors.records import FILES as RECORD_FILES
from langchain_s2b.store.vectors.records import Record, Records, RowsByKey, RowStore

INDEX_FILE = "children.faiss"
HEADER_FILE = "children.json"
HEADER_FORMAT = "langchain_s2b.faiss.v2"
LEGACY_RECORDS_FILE = "children.jsonl"
"""Format version 1 kept every record as a line of JSON; still read."""
LEGACY_FORMAT = "langchain_s2b.faiss.v1"
SAVED_FILES = (INDEX_FILE, HEADER_FILE, *RECORD_FILES)
_STATIC_INDEXES = ("NSG", "NNDESCENT")
_SOURCE_FIELDS = NODE_FIELDS - {"source_id", "source_key"}
"""Leaf fields that differ between the leaves of one source (a filter on them is per row)."""
_EXACT_SUBSET = 4096
"""Up to this many matching rows, a filtered search scores them exactly (one small scan)."""
_FILTER_CACHE = 32
_PARSED_CACHE = 1 << 16
"""Rows whose parsed record `FaissIndex.parsed` keeps (~200 bytes each), then starts over."""


def normalise(vectors: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """L2-normalised float32 copy of the rows (zero rows stay zero)."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    if out.ndim != 2:
        msg = f"Expected a 2-D array of vectors; got shape {out.shape}."
        raise ValueError(msg)
    faiss.normalize_L2(out)
    return out


class FaissIndex(VectorStore):
    """Child vectors in FAISS, keyed by node key, with text and metadata beside.

    Args:
        embedding: the model that embeds children and queries.
        index_factory: a FAISS ``index_factory`` string (``"Flat"`` exact,
            ``"HNSW32"``, ``"IVF1024,Flat"`` ...); inner-product metric.
        search_params: FAISS search-time parameters, e.g. ``"nprobe=16"`` (IVF) or
            ``"efSearch=64"`` (HNSW), as ``faiss.ParameterSpace`` reads them.
        train_size: an index that needs training (IVF, PQ) keeps its first vectors
            in an exact flat index until this many have arrived, then trains on
            them and moves them in (default: FAISS's 39 per IVF list, at least
            10,000). Call :meth:`train` to train on a sample of your own instead.
    """

    def __init__(
        self,
        embedding: Embeddings,
        index_factory: str = "Flat",
        *,
        search_params: str | None = None,
        train_size: int | None = None,
    ) -> None:
        if "IDMAP" in index_factory.upper():
            msg = (
                f"index_factory={index_factory!r}: FaissIndex maps its own ids (every index is "
                "wrapped in an IndexIDMap2, which it saves and loads); leave out 'IDMap', "
                "e.g. 'Flat' or 'HNSW32'."
            )
            raise ValueError(msg)
        if any(name in index_factory.upper() for name in _STATIC_INDEXES):
            msg = (
                f"index_factory={index_factory!r} builds a graph once and can not add to it "
                "later (FAISS NSG/NNDescent); use 'HNSW32' for a graph index that can."
            )
            raise ValueError(msg)
        self.embedding = embedding
        self.index_factory = index_factory
        self.search_params = search_params
        self.train_size = train_size
        self._index: Any = None
        self._staging: Any = None
        self._dim: int | None = None
        self._next_id = 0
        self._rows: RowStore = Records()
        """Each live row's key, text and metadata, as columns (:mod:`.records`)."""
        self._dead: set[int] = set()
        """Rows deleted from the maps whose vectors the index could not remove."""
        self._parsed: dict[int, Any] = {}
        """Per row, what :meth:`parsed` made of its record (filled lazily, dropped on delete)."""
        self._version = 0
        self._dead_selector: tuple[int, Any, Any, np.ndarray] | None = None
        """``(version, selector, its parts)``: the tombstones left out of searches."""
        self._filtered: OrderedDict[Hashable, tuple[int, np.ndarray]] = OrderedDict()
        """Matching rows per filter (:func:`filter_key`), valid while ``_version`` is unchanged."""
        self._lexical: LexicalIndex | None = None
        """The leaves' text for BM25, built on first use and kept with every write after."""
        self._lock = threading.RLock()

    @property
    def _ids(self) -> Mapping[str, int]:
        """``key -> row`` of every live row (a read-only view of the records)."""
        return RowsByKey(self._rows)

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model."""
        return self.embedding

    @property
    def dim(self) -> int | None:
        """Vector dimension, once the first vector is added."""
        return self._dim

    @property
    def is_trained(self) -> bool:
        """False while an IVF/PQ index still holds its vectors in the exact staging index."""
        return self._staging is None and (self._index is None or bool(self._index.is_trained))

    def __len__(self) -> int:
        return len(self._rows)

    def _new_index(self, dim: int) -> Any:
        try:
            inner = faiss.index_factory(dim, self.index_factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as err:
            msg = f"FAISS rejects index_factory={self.index_factory!r}: {str(err).splitlines()[-1]}"
            raise ValueError(msg) from None
        index = faiss.IndexIDMap2(inner)
        if self.search_params:
            try:
                self._apply_search_params(index)
            except RuntimeError:
                msg = (
                    f"FAISS cannot set search_params={self.search_params!r} on a "
                    f"{self.index_factory!r} index (IVF: 'nprobe=16'; HNSW: 'efSearch=64')."
                )
                raise ValueError(msg) from None
        return index

    def _apply_search_params(self, index: Any) -> None:
        space: Any = faiss.ParameterSpace()
        space.set_index_parameters(index, self.search_params)

    def _ensure_index(self, dim: int) -> None:
        if self._index is None:
            self._index = self._new_index(dim)
            self._dim = dim
            if not self._index.is_trained:
                self._staging = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        elif dim != self._dim:
            msg = (
                f"The embedding returns {dim}-dimensional vectors but this index holds "
                f"{self._dim}-dimensional ones; use the model the index was built with."
            )
            raise ValueError(msg)

    def _active(self) -> Any:
        return self._staging if self._staging is not None else self._index

    def _wanted_training(self) -> int:
        if self.train_size is not None:
            return self.train_size
        try:
            return max(10_000, 39 * int(faiss.extract_index_ivf(self._index).nlist))
        except RuntimeError:
            return 10_000

    def train(self, vectors: np.ndarray | Sequence[Sequence[float]]) -> None:
        """Train an IVF/PQ index on a sample now, and move the staged vectors in."""
        matrix = normalise(np.asarray(vectors, dtype=np.float32))
        with self._lock:
            self._ensure_index(matrix.shape[1])
            self._train(matrix)
            self._unstage()

    def _train(self, vectors: np.ndarray) -> None:
        """Train the index if it is not yet (a FAISS failure is a ``ValueError``)."""
        if self._index.is_trained:
            return
        try:
            self._index.train(vectors)
        except RuntimeError as err:
            msg = f"Training {self.index_factory!r} failed: {str(err).splitlines()[-1]}"
            raise ValueError(msg) from None

    def _unstage(self) -> None:
        """Train on the staged vectors if still needed, then move them to the index.

        The staged vectors stay staged until the index holds them all: a
        failure or an interrupt leaves the index empty (trained, if it was).
        """
        staging = self._staging
        if staging is None:
            return
        if staging.ntotal:
            rows, vectors = _contents(staging)
            self._train(vectors)
            try:
                self._index.add_with_ids(vectors, rows)
            except BaseException:
                self._index.reset()  # keeps the training
                raise
        self._staging = None

    def add_vectors(
        self,
        vectors: np.ndarray,
        texts: Sequence[str],
        metadatas: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> list[str]:
        """Add precomputed vectors; an existing id is replaced.

        An id given twice in one call is added once, with its last vector, text
        and metadata (as if the calls were made one after the other). All or
        nothing (see :meth:`_writing`): the new rows are written before the
        rows they replace are removed, and a failure or an interrupt at any
        step leaves the index as it was.
        """
        matrix = np.asarray(vectors, dtype=np.float32)
        n = len(ids)
        if matrix.ndim != 2 or len(matrix) != n or len(texts) != n or len(metadatas) != n:
            msg = (
                f"Expected {n} vectors as a 2-D array, {n} texts and {n} metadata dicts; got "
                f"shape {matrix.shape}, {len(texts)} texts and {len(metadatas)} metadata dicts."
            )
            raise ValueError(msg)
        last = {key: i for i, key in enumerate(ids)}
        if len(last) != len(ids):
            keep = sorted(last.values())
            matrix = matrix[keep]
            texts = [texts[i] for i in keep]
            metadatas = [metadatas[i] for i in keep]
            ids_given, ids = ids, [ids[i] for i in keep]
        else:
            ids_given = ids
        if not np.isfinite(matrix).all():
            msg = "The embedding returned NaN or infinite values; refusing to index them."
            raise ValueError(msg)
        with self._lock:
            self._ensure_index(matrix.shape[1])
            self._check_writable()
            self._tidy()
            old = list(dict.fromkeys(row for row in map(self._rows.row, ids) if row >= 0))
            replaced = self._held_records(old)
            rows = np.arange(self._next_id, self._next_id + len(ids), dtype=np.int64)
            self._next_id += len(ids)  # never given out again, whatever happens below
            entries = list(zip(ids, texts, metadatas, strict=True))
            with self._writing() as steps:
                index, moved = self._add_to_faiss(steps, normalise(matrix), rows)
                self._remove_from_faiss(steps, index, old)
                self._add_text(steps, entries, replaced)
                self._remove_records(steps, old, replaced)
                self._add_records(steps, rows.tolist(), entries)
                if moved:
                    self._staging = None
            self._forget(old)
        return list(ids_given)

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and add texts under ``ids`` (required: children have keys).

        What is embedded is a leaf's text with its header and context
        (:func:`~langchain_s2b.core.headers.embedded_text`); what is kept is its text.
        """
        texts = list(texts)
        if ids is None or len(ids) != len(texts):
            msg = "FaissIndex.add_texts needs one id per text (the child node keys)."
            raise ValueError(msg)
        if not texts:
            return []
        metas = metadatas or [{} for _ in texts]
        embedded = [embedded_text(t, m) for t, m in zip(texts, metas, strict=False)]
        vectors = np.asarray(self.embedding.embed_documents(embedded), dtype=np.float32)
        return self.add_vectors(vectors, texts, metas, ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove vectors by key (``None``: all of them); unknown keys are ignored.

        Returns whether any vector went. All or nothing, like :meth:`add_vectors`.
        """
        with self._lock:
            self._check_writable()
            if ids is None:
                return self._clear()
            rows = list(dict.fromkeys(row for row in map(self._rows.row, ids) if row >= 0))
            if not rows:
                return False
            self._tidy()
            held = self._held_records(rows)
            with self._writing() as steps:
                self._remove_text(steps, rows, held)
                self._remove_from_faiss(steps, self._active(), rows)
                self._remove_records(steps, rows, held)
            self._forget(rows)
        return True

    # One write, step by step ------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[Undo]:
        """One write of several steps: all of them, or none.

        Each step registers its undo before it runs (the undo works whether
        the step ran or not: an interrupt may land just before or just after
        FAISS or tantivy returns). On any ``BaseException`` (an error, Ctrl-C,
        a cancellation) the undos run backwards and the exception goes on up.
        The rows are published last (:meth:`_add_records`): until then no
        search or listing sees the write.
        """
        try:
            with all_or_nothing() as undo:
                yield undo
        finally:
            self._version += 1

    def _add_to_faiss(self, steps: Undo, vectors: np.ndarray, rows: np.ndarray) -> tuple[Any, bool]:
        """Add vectors under new rows: the index now holding them, and whether staging ended.

        While an IVF/PQ index waits for enough vectors to train on, they are
        staged in an exact index; the add that brings enough trains it on all
        of them and moves them in (the staged vectors stay staged until the
        write is done, so its undo only empties the index).
        """
        staging = self._staging
        if staging is not None and staging.ntotal + len(rows) >= self._wanted_training():
            staged_rows, staged = _contents(staging)
            vectors = np.concatenate([staged, vectors]) if len(staged_rows) else vectors
            rows = np.concatenate([staged_rows, rows])
            index = self._index
            steps.then(index.reset)  # keeps the training
            self._train(vectors)
            index.add_with_ids(vectors, rows)
            return index, True
        index = self._active()
        before = int(index.ntotal)
        steps.then(lambda: self._unadd(index, rows, before))
        index.add_with_ids(vectors, rows)
        return index, False

    def _unadd(self, index: Any, rows: np.ndarray, before: int) -> None:
        """Undo :meth:`_add_to_faiss` (FAISS adds all or nothing: its count says which)."""
        if int(index.ntotal) == before:
            return
        if _removable(index):
            index.remove_ids(rows)
        else:
            self._dead.update(rows.tolist())

    def _remove_from_faiss(self, steps: Undo, index: Any, rows: list[int]) -> None:
        """Remove rows' vectors where FAISS can (kept, to be put back), else make tombstones."""
        if not rows or index is None:
            return
        if not _removable(index):
            fresh = [row for row in rows if row not in self._dead]
            steps.then(lambda: self._dead.difference_update(fresh))
            self._dead.update(fresh)
            return
        held, vectors = _held_vectors(index, np.asarray(rows, dtype=np.int64))
        before = int(index.ntotal)

        def put_back() -> None:
            if int(index.ntotal) != before and len(held):
                index.add_with_ids(vectors, held)

        steps.then(put_back)
        index.remove_ids(np.asarray(rows, dtype=np.int64))

    def _add_text(self, steps: Undo, entries: list[Record], replaced: list[Record | None]) -> None:
        """Write the leaves' text into the lexical index, once it is built (replacing)."""
        lexical = self._lexical
        if lexical is None or not entries:
            return

        def undo() -> None:
            lexical.delete([key for key, _, _ in entries])
            back = [found for found in replaced if found is not None]
            if back:
                lexical.add(back)

        steps.then(undo)
        lexical.add(entries)

    def _remove_text(self, steps: Undo, rows: list[int], held: list[Record | None]) -> None:
        """Remove rows' leaves from the lexical index, once it is built (put back on a failure)."""
        lexical = self._lexical
        if lexical is None or not rows:
            return
        back = [found for found in held if found is not None]
        steps.then(lambda: lexical.add(back))
        lexical.delete([key for key in map(self._rows.key, rows) if key is not None])

    def _add_records(self, steps: Undo, rows: list[int], entries: list[Record]) -> None:
        """Publish the new rows: their keys now name them (the last step of a write)."""

        def undo() -> None:
            live = [row for row in rows if self._rows.key(row) is not None]
            if live:
                self._rows.remove(live)

        steps.then(undo)
        keys, texts, metas = zip(*entries, strict=True)
        self._rows.add(rows, keys, texts, metas)

    def _remove_records(self, steps: Undo, rows: list[int], held: list[Record | None]) -> None:
        """Remove rows from the records (added again, from ``held``, on a failure)."""
        if not rows:
            return

        def undo() -> None:
            gone = [
                (row, found)
                for row, found in zip(rows, held, strict=True)
                if found is not None and self._rows.key(row) is None
            ]
            if gone:
                keys, texts, metas = zip(*(found for _, found in gone), strict=True)
                self._rows.add([row for row, _ in gone], keys, texts, metas)

        steps.then(undo)
        self._rows.remove(rows)

    def _held_records(self, rows: list[int]) -> list[Record | None]:
        """``(key, text, metadata)`` of rows, to put back if a write fails.

        ``None`` for a row whose record can not be read whole (a database
        leaf whose node went first, as a repair removes orphans): it can not
        be put back, and its removal is not undone.
        """
        if not rows:
            return []
        try:
            return self._rows.records(rows)
        except LookupError:
            return [self._record_or_none(row) for row in rows]

    def _record_or_none(self, row: int) -> Record | None:
        try:
            return self._rows.record(row)
        except LookupError:
            return None

    def _forget(self, rows: list[int]) -> None:
        """What was read from rows that are gone."""
        for row in rows:
            self._parsed.pop(row, None)

    def _check_writable(self) -> None:
        """Hook for an index opened read-only (memory-mapped): refuse a write in one line."""

    def _tidy(self) -> None:
        """Before a write: rebuild without the tombstones once they are a quarter of the index.

        Searches leave tombstones out meanwhile; the rebuild changes nothing a
        search sees, and comes before the write so that it can not fail one.
        """
        if len(self._dead) >= max(64, len(self._rows) // 4):
            self._compact()

    def _clear(self) -> bool:
        """Remove every row: the lexical index and records first, FAISS (no undo) last."""
        had = bool(len(self._rows))
        rows, lexical = self._rows, self._lexical
        with self._writing() as steps:
            if lexical is not None:
                steps.then(lambda: setattr(self, "_lexical", lexical))
                self._lexical = LexicalIndex.scratch(documents=False)
            if isinstance(rows, Records):
                steps.then(lambda: setattr(self, "_rows", rows))
                self._rows = Records()
            else:  # rows in a database: its transaction undoes them
                rows.clear()
            for index in (self._index, self._staging):
                if index is not None:
                    index.reset()
            self._dead = set()
            self._parsed.clear()
        return had

    def _compact(self) -> None:
        """Rebuild the index from its live vectors (drops the tombstones); switched to at once."""
        if not self._dead:
            return
        old = self._index
        positions = faiss.vector_to_array(old.id_map).astype(np.int64)
        try:
            vectors = faiss.downcast_index(old.index).reconstruct_n(0, old.ntotal)
        except RuntimeError as err:
            msg = (
                f"A {self.index_factory!r} index can neither remove vectors nor "
                f"return them for a rebuild: {str(err).splitlines()[-1]}"
            )
            raise ValueError(msg) from None
        live = ~np.isin(positions, np.fromiter(self._dead, dtype=np.int64))
        inner = faiss.clone_index(old.index)  # keeps the training and the search parameters
        inner.reset()
        fresh = faiss.IndexIDMap2(inner)
        if live.any():
            fresh.add_with_ids(np.ascontiguousarray(vectors[live]), positions[live])
        self._index, self._dead = fresh, set()
        self._version += 1

    # The records and FAISS agree (``verify``) ------------------------------------------

    def damage(self) -> ChildDamage:
        """Where the records and FAISS disagree (an interrupted write whose undo failed).

        The keys whose row FAISS does not hold, and how many vectors FAISS
        holds for no row (tombstones are not vectors of the index).
        """
        with self._lock:
            live, held = self._rows.live_rows(), self._held_rows()
            unindexed = live[~np.isin(live, held)].tolist()
            stray = int((~np.isin(held, live)).sum())
            keys = [key for key in map(self._rows.key, unindexed) if key is not None]
        return ChildDamage(sorted(keys), stray)

    def mend(self) -> None:
        """Make the records and FAISS agree: drop rows without a vector, vectors without a row.

        A dropped row's key leaves the lexical index too; ``verify(repair=True)``
        then indexes its source again.
        """
        with self._lock:
            self._check_writable()
            index = self._active()
            if index is not None:
                self._dead.intersection_update(_ids_of(index).tolist())
            live, held = self._rows.live_rows(), self._held_rows()
            stray = np.unique(held[~np.isin(held, live)]).tolist()
            unindexed = live[~np.isin(live, held)].tolist()
            lost = self._held_records(unindexed)
            with self._writing() as steps:
                self._remove_from_faiss(steps, index, stray)
                self._remove_text(steps, unindexed, lost)
                self._remove_records(steps, unindexed, lost)
            self._forget(unindexed)

    def _held_rows(self) -> np.ndarray:
        """The rows FAISS holds a vector for, tombstones left out."""
        index = self._active()
        if index is None:
            return np.zeros(0, dtype=np.int64)
        held = _ids_of(index)
        if index is self._index and self._dead:
            held = held[~np.isin(held, np.fromiter(self._dead, dtype=np.int64))]
        return held

    def rows_of(self, ids: Sequence[str]) -> list[int]:
        """The row of each key (``-1``: not held)."""
        with self._lock:
            return list(map(self._rows.row, ids))

    def scores_of(self, query: np.ndarray, rows: Sequence[int]) -> np.ndarray | None:
        """The query's score against each row's stored vector (what a search would give it).

        ``None`` when the index can not give its vectors back.
        """
        matrix = normalise(np.asarray(query, dtype=np.float32).reshape(1, -1))
        wanted = np.asarray(rows, dtype=np.int64)
        with self._lock:
            index = self._active()
            if index is None or len(wanted) == 0:
                return np.empty(0, dtype=np.float32)
            self._ensure_index(matrix.shape[1])
            vectors = _stored_vectors(index, wanted)
        if vectors is None:
            return None
        return np.asarray(vectors @ matrix[0], dtype=np.float32)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored children with these keys (unknown keys skipped)."""
        with self._lock:
            found = [self._rows.record(row) for row in map(self._rows.row, ids) if row >= 0]
            return [Document(page_content=t, metadata=m, id=k) for k, t, m in filter(None, found)]

    def _document(self, row: int) -> Document:
        key, text, meta = self._rows.record(row) or ("", "", {})
        return Document(page_content=text, metadata=meta, id=key)

    def search_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw batched search: ``(scores, rows)``, one row per query; ``-1`` is an empty slot."""
        matrix = np.asarray(queries, dtype=np.float32)
        with self._lock:
            index = self._active()
            if index is None or index.ntotal == 0:
                empty = np.empty((len(matrix), 0))
                return empty.astype(np.float32), empty.astype(np.int64)
            self._ensure_index(matrix.shape[1])
            dead = self._dead if index is self._index else set()
            if not dead:
                return index.search(normalise(matrix), min(k, int(index.ntotal)))  # type: ignore[no-any-return]
            want = min(k, int(index.ntotal) - len(dead))
            live = self._live_only(index, want)
            if live is not None:  # tombstones are never candidates: k deep is enough
                if want < 1:
                    empty = np.empty((len(matrix), 0))
                    return empty.astype(np.float32), empty.astype(np.int64)
                return index.search(normalise(matrix), want, params=live)  # type: ignore[no-any-return]
            want = min(k + len(dead), int(index.ntotal))
            scores, rows = index.search(normalise(matrix), want)
            scores, rows = _drop_dead(scores, rows, dead, min(k, int(index.ntotal)))
        return scores, rows

    def _live_only(self, index: Any, k: int) -> Any:
        """Search parameters whose ``IDSelector`` leaves the tombstones out, or ``None``.

        The selector is made once per change of the index (``_version``); the
        parameters are made per search, so they carry the index's current
        ``nprobe``/``efSearch``.
        """
        kept = self._dead_selector
        if kept is None or kept[0] != self._version:
            dead = np.fromiter(self._dead, dtype=np.int64, count=len(self._dead))
            batch = faiss.IDSelectorBatch(len(dead), faiss.swig_ptr(dead))
            kept = self._dead_selector = (self._version, faiss.IDSelectorNot(batch), batch, dead)
        return _search_parameters(index, kept[1], k)

    def parsed(
        self, rows: Sequence[int], parse: Callable[[str, str, dict[str, Any]], Any]
    ) -> list[Any]:
        """``parse(key, text, metadata)`` per search row, made once per row and kept.

        A row's record never changes (a replaced key gets a new row), so the
        caller's reading of it (a hit's fields) is cached until the row is
        deleted (at most ``_PARSED_CACHE`` rows). ``-1`` and deleted rows give ``None``.
        """
        with self._lock:
            cache = self._parsed
            missing = list(dict.fromkeys(row for row in rows if row >= 0 and row not in cache))
            made = {
                row: parse(*got)
                for row, got in zip(missing, self._rows.records(missing), strict=True)
                if got is not None
            }  # one read of the records for all of them
            if len(cache) + len(made) > _PARSED_CACHE:
                cache.clear()
            if len(made) <= _PARSED_CACHE:
                cache.update(made)
            return [made[row] if row in made else cache.get(row) for row in rows]

    def records(self, rows: Sequence[int]) -> list[tuple[str, str, dict[str, Any]] | None]:
        """``(key, text, metadata)`` per search row, under one lock (``-1``, deleted: ``None``)."""
        with self._lock:
            return self._rows.records(rows)

    # The lexical index ------------------------------------------------------------

    def lexical(self) -> LexicalIndex:
        """The BM25 index of the leaves' text; built from the records on first use.

        Kept in step with every add and delete from then on, under this index's
        lock, so every retriever that shares this index shares it too.
        """
        with self._lock:
            if self._lexical is None:
                lexical = LexicalIndex.scratch(documents=False)
                lexical.add(list(self._rows.entries()))
                self._lexical = lexical
            return self._lexical

    def rebuild_lexical(self) -> None:
        """Build the lexical index again from the records (``verify(repair=True)``)."""
        with self._lock:
            self._lexical = None
            self.lexical()

    def built_lexical(self) -> LexicalIndex | None:
        """The lexical index if it was built (for saving), else ``None``."""
        return self._lexical

    def adopt_lexical(self, lexical: LexicalIndex) -> None:
        """Use a lexical index read from a save (with this index: as many leaves, checksummed).

        ``verify`` compares its keys with the leaves one by one.
        """
        with self._lock:
            if len(lexical) == len(self._rows):
                self._lexical = lexical

    def search_text(self, query: str, n: int, flt: Any) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 that pass ``flt`` (selected before ranking)."""
        check_filter(flt)
        lexical = self.lexical()
        if flt is None:
            return lexical.search(query, n)
        sources = self.matching_sources(flt)
        if sources is not None:
            return lexical.search(query, n, sources=sources)
        held = self._rows

        def keep(key: str, _: dict[str, Any]) -> bool:
            row = held.row(key)
            return row >= 0 and matches_filter(held.meta(row), flt)

        return lexical.search(query, n, keep=keep)

    def matching_sources(self, flt: Filter) -> set[str] | None:
        """The source keys whose metadata passes a metadata-dict filter, or ``None``.

        ``None`` where :meth:`matching_rows` is: a callable, a per-leaf field,
        or rows that name no source.
        """
        if not isinstance(flt, dict) or _per_leaf(flt):
            return None
        with self._lock:
            if self._rows.unsourced():
                return None
            return {source for source, meta in self._rows.sources() if matches_filter(meta, flt)}

    def matching_rows(self, flt: Filter) -> np.ndarray | None:
        """The rows whose metadata passes a metadata-dict filter (sorted), or ``None``.

        The filter is evaluated once per source on its first leaf's metadata
        (the leaves of one source share it), and the answer is kept until the
        index changes. ``None`` when that is not sound: a callable filter, or
        one that names a per-leaf field (``start``, ``split_id`` ...).
        """
        if not isinstance(flt, dict) or _per_leaf(flt):
            return None
        name = filter_key(flt)
        if name is None:
            return None
        with self._lock:
            cached = self._filtered.get(name)
            if cached is not None and cached[0] == self._version:
                self._filtered.move_to_end(name)
                return cached[1]
            held = self._rows
            chosen: list[np.ndarray] = [
                held.source_rows(source)
                for source, meta in held.sources()
                if matches_filter(meta, flt)
            ]
            loose = [row for row in held.unsourced() if matches_filter(held.meta(row), flt)]
            chosen.append(np.asarray(loose, dtype=np.int64))
            rows = np.sort(np.concatenate(chosen))
            self._filtered[name] = (self._version, rows)
            while len(self._filtered) > _FILTER_CACHE:
                self._filtered.popitem(last=False)
        return rows

    def search_among(
        self, query: np.ndarray, k: int, allowed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, bool] | None:
        """The ``k`` best of the ``allowed`` rows for one query: ``(scores, rows, all_seen)``.

        One search. Up to ``_EXACT_SUBSET`` allowed rows are scored exactly
        against the vectors the index holds (decoded, for compressed codes such
        as PQ), whatever the index type. More go through FAISS with an
        ``IDSelector`` and the index's own search parameters (``nprobe``,
        ``efSearch``): exact on ``Flat``; on IVF, approximate in the way its
        unfiltered search is (only the probed lists); on HNSW, ``None`` when the
        graph search found fewer than ``k``. ``all_seen``: no more allowed rows
        can be reached. ``None``: the caller filters after the search instead
        (an index type FAISS can not select on, such as PQ, with many rows).
        """
        matrix = normalise(np.asarray(query, dtype=np.float32).reshape(1, -1))
        with self._lock:
            index = self._active()
            if index is None or index.ntotal == 0 or len(allowed) == 0:
                empty = np.empty((1, 0))
                return empty.astype(np.float32), empty.astype(np.int64), True
            self._ensure_index(matrix.shape[1])
            if len(allowed) <= _EXACT_SUBSET:
                vectors = _stored_vectors(index, allowed)
                if vectors is not None:
                    return (*_exact_among(vectors, matrix, k, allowed), True)
            return _selector_search(index, matrix, k, allowed)

    def similarity_search_with_score_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: Filter | None = None,
        fetch_k: int = 20,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """Nearest children with cosine scores; a filter post-filters ``fetch_k``."""
        wanted = max(k, fetch_k) if filter is not None else k
        scores, rows = self.search_rows(np.asarray([embedding]), wanted)
        out: list[tuple[Document, float]] = []
        rows_list = rows[0].tolist()
        for score, row, found in zip(
            scores[0].tolist(), rows_list, self.records(rows_list), strict=True
        ):
            if found and matches_filter(found[2], filter):
                out.append((self._document(row), float(score)))
        return out[:k]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Embed ``query`` and search."""
        vector = self.embedding.embed_query(query)
        return self.similarity_search_with_score_by_vector(vector, k, **kwargs)

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Nearest children to ``query``."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda score: score

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> FaissIndex:
        """Build an index from texts with their keys."""
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def keys(self) -> list[str]:
        """Every child key the index holds (for ``verify``)."""
        with self._lock:
            return self._rows.keys()

    def save(self, directory: str | Path) -> list[str]:
        """Write the FAISS index, its header and the records into ``directory``.

        Returns the names of the files written: ``children.faiss``
        (``faiss.write_index``), ``children.json`` (the header) and the records
        as columns (:meth:`Records.write`). Not atomic on its own:
        :func:`langchain_s2b.store.snapshots.persist.save` writes into a fresh directory and
        switches to it only once everything is on disk.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._compact()
            written = [HEADER_FILE]
            if self._index is not None:
                faiss.write_index(self._active(), str(path / INDEX_FILE))
                written.append(INDEX_FILE)
            written += self._rows.write(path)
            header = {
                "format": HEADER_FORMAT,
                "dim": self._dim,
                "factory": self.index_factory,
                "next": self._next_id,
                "count": len(self._rows),
                "staged": self._staging is not None,
                "search_params": self.search_params,
                "train_size": self.train_size,
            }
            (path / HEADER_FILE).write_text(json.dumps(header) + "\n", encoding="ascii")
        return written

    @staticmethod
    def check_saved(directory: str | Path) -> None:
        """Read back what :meth:`save` wrote: FAISS reads the index, of the size saved.

        Raises ``ValueError`` naming the file and what is wrong. A save calls it
        before it replaces the previous one.
        """
        path = Path(directory)
        header = json.loads((path / HEADER_FILE).read_text(encoding="ascii"))
        if header["dim"] is None:
            return
        index = read_faiss_file(path / INDEX_FILE, mapped=True)  # no second copy in memory
        if index.d != header["dim"] or index.ntotal != header["count"]:
            msg = (
                f"{path / INDEX_FILE} reads back as {index.ntotal} vectors of {index.d} "
                f"dimensions, not the {header['count']} of {header['dim']} written."
            )
            raise ValueError(msg)

    @classmethod
    def load(cls, directory: str | Path, embedding: Embeddings) -> FaissIndex:
        """Read an index written by :meth:`save` (no pickle: JSON, numpy arrays and FAISS).

        Every value is type-checked, and the FAISS file must be an ``IndexIDMap2``
        whose dimension, size and row ids match the records; anything else raises
        ``ValueError`` naming the file and what is wrong. A directory written
        before the records were columns (``children.jsonl``) is read too.
        """
        path = Path(directory)
        if not (path / HEADER_FILE).exists() and (path / LEGACY_RECORDS_FILE).exists():
            header, records = read_legacy_records(path / LEGACY_RECORDS_FILE)
            records.sort(key=lambda r: r[0])
            renumbered: np.ndarray | None = np.asarray([r[0] for r in records], dtype=np.int64)
            rows = Records()
            rows.add(
                list(range(len(records))),
                [r[1] for r in records],
                [r[2] for r in records],
                [r[3] for r in records],
            )
        else:
            header = read_header(path / HEADER_FILE)
            rows, renumbered = Records.read(path, header["next"])
            if len(rows) != header["count"]:
                count = header["count"]
                msg = f"{path / HEADER_FILE} counts {count} records but {len(rows)} are stored."
                raise ValueError(msg)
        store = cls(embedding, header["factory"], **header["options"])
        store._next_id = header["next"] if renumbered is None else len(rows)
        if header["dim"] is not None:
            index = read_faiss(path / INDEX_FILE, header["dim"], rows.live_rows(), renumbered)
            store._ensure_index(header["dim"])
            if header["staged"]:
                store._staging = index
            else:
                store._staging, store._index = None, index
                if store.search_params:
                    store._apply_search_params(index)
        elif len(rows):
            msg = f"{path / HEADER_FILE}: records but no dimension; the file is damaged."
            raise ValueError(msg)
        store._rows = rows
        return store


def _removable(index: Any) -> bool:
    """Whether FAISS removes vectors from ``index`` and renumbers the rest (flat codes)."""
    return isinstance(faiss.downcast_index(index.index), faiss.IndexFlatCodes)


def _ids_of(index: Any) -> np.ndarray:
    """The row ids an ``IndexIDMap2`` holds, in its order."""
    return faiss.vector_to_array(index.id_map).astype(np.int64)


def _contents(index: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, vectors)`` an ``IndexIDMap2`` over a flat index holds."""
    return _ids_of(index), faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)


def _held_vectors(index: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows among ``rows`` that ``index`` holds, and their stored vectors."""
    try:
        return rows, np.asarray(index.reconstruct_batch(rows), dtype=np.float32)
    except RuntimeError:  # a row it does not hold (damage): look them up
        held = rows[np.isin(rows, _ids_of(index))]
        if not len(held):
            return held, np.zeros((0, int(index.d)), dtype=np.float32)
        return held, np.asarray(index.reconstruct_batch(held), dtype=np.float32)


def _drop_dead(
    scores: np.ndarray, rows: np.ndarray, dead: set[int], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's first ``k`` rows that are not tombstones (``-1`` pads a short row)."""
    out_scores = np.full((len(rows), k), -np.inf, dtype=np.float32)
    out_rows = np.full((len(rows), k), -1, dtype=np.int64)
    for i, (row_scores, row_ids) in enumerate(zip(scores, rows, strict=True)):
        keep = [j for j, row in enumerate(row_ids.tolist()) if row >= 0 and row not in dead][:k]
        out_scores[i, : len(keep)] = row_scores[keep]
        out_rows[i, : len(keep)] = row_ids[keep]
    return out_scores, out_rows


def _per_leaf(flt: Any) -> bool:
    """Whether a metadata-dict filter names a field that differs between a source's leaves."""
    if isinstance(flt, dict):
        for field, cond in flt.items():
            if field in ("$and", "$or"):
                if not isinstance(cond, list) or any(_per_leaf(sub) for sub in cond):
                    return True
            elif field == "$not":
                if _per_leaf(cond):
                    return True
            elif field in _SOURCE_FIELDS or field.startswith("$"):
                return True
        return False
    return True


def _stored_vectors(index: Any, rows: np.ndarray) -> np.ndarray | None:
    """The vectors ``index`` holds for ``rows`` (IVF: after making its direct map), or ``None``."""
    try:
        return np.asarray(index.reconstruct_batch(rows), dtype=np.float32)
    except RuntimeError:
        pass
    try:  # an IVF index gives vectors back once it maps ids to their lists
        faiss.extract_index_ivf(index).make_direct_map()
        return np.asarray(index.reconstruct_batch(rows), dtype=np.float32)
    except RuntimeError:
        return None


def _exact_among(
    vectors: np.ndarray, matrix: np.ndarray, k: int, allowed: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Score the allowed rows' vectors exactly (FAISS's own inner product); keep the ``k`` best."""
    scan = faiss.IndexFlatIP(int(matrix.shape[1]))
    scan.add(vectors)
    scores, positions = scan.search(matrix, min(k, len(allowed)))
    rows = np.where(positions >= 0, allowed[np.maximum(positions, 0)], -1)
    return scores, rows.astype(np.int64)


def _selector_search(
    index: Any, matrix: np.ndarray, k: int, allowed: np.ndarray
) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """One FAISS search restricted to ``allowed`` by a bitmap ``IDSelector``, or ``None``.

    The index's own ``nprobe``/``efSearch`` are copied into the search
    parameters (FAISS would otherwise use its defaults, 1 and 16). ``None`` for
    an index type that takes no selector, and for HNSW when the graph search
    found fewer than ``k`` allowed rows (that is not proof that no more exist).
    """
    mask = np.zeros(int(allowed[-1]) + 1, dtype=bool)
    mask[allowed] = True
    bits = np.packbits(mask, bitorder="little")
    selector = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
    want = min(k, len(allowed))
    params = _search_parameters(index, selector, want)
    if params is None:
        return None
    scores, rows = index.search(matrix, want, params=params)
    filled = int((rows[0] >= 0).sum())
    if filled < want and isinstance(faiss.downcast_index(index.index), faiss.IndexHNSW):
        return None
    return scores, rows, filled < want


def _search_parameters(index: Any, selector: Any, k: int) -> Any:
    """FAISS search parameters with ``selector`` and the index's own search settings.

    ``nprobe`` (IVF) and ``efSearch`` (HNSW, at least ``k``) are copied from
    the index: parameters passed to a search replace them, and FAISS's
    defaults are 1 and 16. ``None`` for an index type that takes no selector.
    """
    inner = faiss.downcast_index(index.index)
    params: Any
    if isinstance(inner, faiss.IndexFlat):
        params = faiss.SearchParameters()
    elif isinstance(inner, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # not in its stubs
        params.efSearch = max(int(inner.hnsw.efSearch), k)
    elif isinstance(inner, faiss.IndexIVF):
        params = faiss.SearchParametersIVF()
        params.nprobe = int(inner.nprobe)
    else:
        return None
    params.sel = selector
    return params


# Reading the files back (every value checked) -------------------------------------

_FACTORY = re.compile(r"^[A-Za-z0-9_,.\-]{1,200}$")
LegacyRecord = tuple[int, str, str, dict[str, Any]]


def _damaged(file: Path, what: str) -> ValueError:
    return ValueError(f"{file} is not a langchain_s2b child index file: {what}.")


def _int(value: Any, name: str, file: Path, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _damaged(file, f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def read_header(file: Path) -> dict[str, Any]:
    """Parse and type-check ``children.json``."""
    try:
        header = json.loads(file.read_bytes().decode("ascii"))
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise _damaged(file, f"not JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(header, dict) or header.get("format") != HEADER_FORMAT:
        raise _damaged(file, f"it must be a header with format {HEADER_FORMAT!r}")
    info = _header_info(header, file)
    info["count"] = _int(header.get("count"), "count", file)
    return info


def _header_info(header: dict[str, Any], file: Path) -> dict[str, Any]:
    """The checked fields of a header (both formats)."""
    dim = header.get("dim")
    if dim is not None:
        _int(dim, "dim", file, minimum=1)
    factory = header.get("factory")
    if not isinstance(factory, str) or not _FACTORY.match(factory):
        raise _damaged(file, f"factory must be a FAISS index_factory string, got {factory!r}")
    nxt = _int(header.get("next"), "next", file)
    params, size = header.get("search_params"), header.get("train_size")
    if (params is not None and not isinstance(params, str)) or not isinstance(
        header.get("staged", False), bool
    ):
        raise _damaged(file, "search_params must be a string and staged a boolean")
    options = {
        "search_params": params,
        "train_size": None if size is None else _int(size, "train_size", file, minimum=1),
    }
    staged = bool(header.get("staged", False))
    return {"dim": dim, "factory": factory, "next": nxt, "staged": staged, "options": options}


def read_legacy_records(file: Path) -> tuple[dict[str, Any], list[LegacyRecord]]:
    """Parse and type-check ``children.jsonl`` (saves of format version 1)."""
    try:
        lines = file.read_bytes().decode("ascii").splitlines()
        rows = [json.loads(line) for line in lines]
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise _damaged(file, f"not JSON lines ({str(err).splitlines()[0]})") from None
    if not rows or not isinstance(rows[0], dict) or rows[0].get("format") != LEGACY_FORMAT:
        raise _damaged(file, f"the first line must be a header with format {LEGACY_FORMAT!r}")
    info = _header_info(rows[0], file)
    nxt = info["next"]
    count = _int(rows[0].get("count"), "count", file)
    records: list[LegacyRecord] = []
    seen_keys: set[str] = set()
    seen_rows: set[int] = set()
    for rec in rows[1:]:
        if not isinstance(rec, dict):
            raise _damaged(file, f"a record must be an object, got {type(rec).__name__}")
        row = _int(rec.get("row"), "row", file)
        key, text, meta = rec.get("key"), rec.get("text"), rec.get("meta")
        ok = isinstance(key, str) and key and isinstance(text, str) and isinstance(meta, dict)
        if not ok or row >= nxt or key in seen_keys or row in seen_rows:
            raise _damaged(file, f"bad record for row {row!r} (key {key!r})")
        seen_keys.add(str(key))
        seen_rows.add(row)
        records.append((row, str(key), str(text), dict(meta)))  # type: ignore[arg-type]
    if count != len(records):
        raise _damaged(file, f"the header counts {count} records but {len(records)} follow")
    return info, records


def read_faiss_file(file: Path, *, mapped: bool = False) -> Any:
    """Read a FAISS ``IndexIDMap2`` file; anything else is a ``ValueError`` naming it.

    ``mapped``: a flat index's vectors are memory-mapped from the file instead
    of read (``IO_FLAG_MMAP_IFC``): opening costs no time and no memory, pages
    are read when a search touches them. Such an index can not be added to
    (FAISS aborts the process), so only read-only callers ask for it.

    Nothing FAISS reads may claim more memory than the file has bytes: the
    wrapper's frame (its header and the id map at the end) is checked first,
    and FAISS's own limits on one array and on one loop are set to the file's
    size while it reads (:func:`faiss_envelope`).
    """
    faiss_envelope(file)
    flags = faiss.IO_FLAG_SKIP_PRECOMPUTE_TABLE | (faiss.IO_FLAG_MMAP_IFC if mapped else 0)
    try:
        with _faiss_limits(file.stat().st_size + 1):
            return faiss.read_index(str(file), flags)
    except RuntimeError as err:
        raise _damaged(file, f"FAISS could not read it ({str(err).splitlines()[-1]})") from None
    except MemoryError:
        raise _damaged(file, "FAISS ran out of memory reading it") from None


_ENVELOPE = struct.Struct("<4siqqqBi")
"""An ``IndexIDMap2`` file's start: its magic, d, ntotal, two unused numbers, is_trained, metric."""
_FAISS_LIMITS = threading.Lock()


def faiss_envelope(file: Path) -> tuple[int, int]:
    """``(d, ntotal)`` of an ``IndexIDMap2`` file, after checking its frame against its size.

    The file must start with the wrapper's header and end with its id map:
    ``ntotal`` as a 64-bit count, then ``ntotal`` ids. ``ValueError`` naming
    the file otherwise, before FAISS allocates anything.
    """
    try:
        with file.open("rb") as fh:
            head = fh.read(_ENVELOPE.size)
            size = os.fstat(fh.fileno()).st_size
            magic = head[:4]
            if magic != b"IxM2":
                what = f"expected a FAISS IndexIDMap2 (magic b'IxM2'), found {magic!r}"
                raise _damaged(file, what)
            if len(head) < _ENVELOPE.size:
                raise _damaged(file, f"it is cut short ({size} bytes)")
            _, dim, ntotal, _, _, _, _ = _ENVELOPE.unpack(head)
            tail = 8 * (ntotal + 1)
            if dim < 1 or ntotal < 0 or tail > size - _ENVELOPE.size:
                what = f"its header claims {ntotal} vectors of {dim} dimensions in {size} bytes"
                raise _damaged(file, what)
            fh.seek(size - tail)
            (count,) = struct.unpack("<q", fh.read(8))
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    if count != ntotal:
        raise _damaged(file, f"its id map holds {count} ids for {ntotal} vectors")
    return dim, ntotal


@contextmanager
def _faiss_limits(size: int) -> Iterator[None]:
    """FAISS's limits on one array's bytes and one loop's length, while one file is read.

    They are process-wide settings: reads through here take turns, and the
    previous values come back afterwards. FAISS builds without them (before
    1.15) are read without.
    """
    getters = (
        getattr(faiss, "get_deserialization_vector_byte_limit", None),
        getattr(faiss, "get_deserialization_loop_limit", None),
    )
    setters = (
        getattr(faiss, "set_deserialization_vector_byte_limit", None),
        getattr(faiss, "set_deserialization_loop_limit", None),
    )
    with _FAISS_LIMITS:
        if None in getters or None in setters:
            yield
            return
        before = [get() for get in getters]  # type: ignore[misc]
        for set_limit in setters:
            set_limit(size)  # type: ignore[misc]
        try:
            yield
        finally:
            for set_limit, value in zip(setters, before, strict=True):
                set_limit(value)  # type: ignore[misc]


def read_faiss(file: Path, dim: int, rows: np.ndarray, renumbered: np.ndarray | None) -> Any:
    """Read a FAISS file and check it matches the records' rows exactly.

    ``renumbered``: the ids the rows had in the file, when they were numbered
    again (:meth:`Records.read`): the vector that had ``renumbered[i]`` gets id ``i``.
    """
    ids = rows if renumbered is None else renumbered
    got_dim, ntotal = faiss_envelope(file)
    if got_dim != dim or ntotal != len(ids):
        msg = (
            f"{file} holds {ntotal} vectors of {got_dim} dimensions but the records say "
            f"{len(ids)} of {dim}; the files do not belong together."
        )
        raise ValueError(msg)
    index = read_faiss_file(file)
    saved = faiss.vector_to_array(index.id_map).astype(np.int64)
    if index.d != dim or index.ntotal != len(ids) or not np.array_equal(np.sort(saved), ids):
        msg = (
            f"{file} holds {index.ntotal} vectors whose ids do not match the "
            f"{len(ids)} records; the files do not belong together."
        )
        raise ValueError(msg)
    if renumbered is not None:
        faiss.copy_array_to_vector(np.searchsorted(ids, saved).astype(np.int64), index.id_map)
        index.construct_rev_map()
    return index
