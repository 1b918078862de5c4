"""The state every part of ``FaissIndex`` shares: the FAISS index, staging, training, compaction.

:class:`FaissBase` holds the index (an ``IndexIDMap2`` over the factory's
index), the exact staging index an IVF/PQ index fills until it is trained, the
records, the tombstones and the caches, all under one lock.
:mod:`~langchain_s2b.store.vectors.faiss_writes` writes,
:mod:`~langchain_s2b.store.vectors.faiss_files` saves and loads, and
:mod:`~langchain_s2b.store.vectors.faiss_index` searches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

import faiss
import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from langchain_s2b.store.lexical import LexicalIndex
from langchain_s2b.store.vectors.records import Records, RowStore

_STATIC_INDEXES = ("NSG", "NNDESCENT")


def normalise(vectors: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """L2-normalised float32 copy of the rows (zero rows stay zero)."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    if out.ndim != 2:
        msg = f"Expected a 2-D array of vectors; got shape {out.shape}."
        raise ValueError(msg)
    faiss.normalize_L2(out)
    return out


class FaissBase(VectorStore):
    """The shared state of :class:`~langchain_s2b.store.vectors.faiss_index.FaissIndex`."""

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
        self._renumbered = False
        """Whether the rows were numbered again at load (:meth:`Records.read`)."""
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


def _ids_of(index: Any) -> np.ndarray:
    """The row ids an ``IndexIDMap2`` holds, in its order."""
    return faiss.vector_to_array(index.id_map).astype(np.int64)


def _contents(index: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, vectors)`` an ``IndexIDMap2`` over a flat index holds."""
    return _ids_of(index), faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)


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
