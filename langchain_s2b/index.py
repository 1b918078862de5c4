"""The FAISS child index: a LangChain ``VectorStore`` that never pickles.

Vectors are L2-normalised and searched by inner product, so a score is the
cosine similarity (higher is better). Each vector is keyed by its node key;
FAISS row positions are never used as split indices. ``save``/``load`` write
the FAISS index with ``faiss.write_index`` and everything else as JSON.
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

INDEX_FILE = "children.faiss"
RECORDS_FILE = "children.jsonl"
Filter = dict[str, Any] | Callable[[dict[str, Any]], bool]

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
    "$in": lambda value, options: value in options,
    "$nin": lambda value, options: value not in options,
}


def matches_filter(metadata: dict[str, Any], flt: Filter | None) -> bool:
    """Whether ``metadata`` passes a filter: a callable or a Mongo-style dict."""
    if flt is None:
        return True
    if callable(flt):
        return bool(flt(metadata))
    for field, cond in flt.items():
        if field == "$and":
            ok = all(matches_filter(metadata, sub) for sub in cond)
        elif field == "$or":
            ok = any(matches_filter(metadata, sub) for sub in cond)
        elif field == "$not":
            ok = not matches_filter(metadata, cond)
        elif isinstance(cond, dict):
            ok = all(_apply(op, metadata.get(field), arg) for op, arg in cond.items())
        else:
            ok = metadata.get(field) == cond
        if not ok:
            return False
    return True


def _apply(op: str, value: Any, arg: Any) -> bool:
    if op not in _OPS:
        msg = f"Unknown filter operator {op!r}; allowed: {sorted(_OPS)}, $and, $or, $not."
        raise ValueError(msg)
    try:
        return _OPS[op](value, arg)
    except TypeError:
        return False


def normalise(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise rows (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.where(norms > 0, vectors / np.where(norms > 0, norms, 1), 0).astype(np.float32)


class FaissIndex(VectorStore):
    """Child vectors in FAISS, keyed by node key, with text and metadata beside.

    Args:
        embedding: the model that embeds children and queries.
        index_factory: a FAISS ``index_factory`` string (``"Flat"`` exact,
            ``"HNSW32"``, ``"IVF1024,Flat"`` ...); inner-product metric.
    """

    def __init__(self, embedding: Embeddings, index_factory: str = "Flat") -> None:
        self.embedding = embedding
        self.index_factory = index_factory
        self._index: Any = None
        self._dim: int | None = None
        self._next_id = 0
        self._ids: dict[str, int] = {}
        self._keys: dict[int, str] = {}
        self._records: dict[int, tuple[str, dict[str, Any]]] = {}
        self._lock = threading.RLock()

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model."""
        return self.embedding

    @property
    def dim(self) -> int | None:
        """Vector dimension, once the first vector is added."""
        return self._dim

    def __len__(self) -> int:
        return len(self._ids)

    def _ensure_index(self, dim: int) -> None:
        if self._index is None:
            inner = faiss.index_factory(dim, self.index_factory, faiss.METRIC_INNER_PRODUCT)
            self._index = inner if "IDMap" in self.index_factory else faiss.IndexIDMap2(inner)
            self._dim = dim
        elif dim != self._dim:
            msg = (
                f"The embedding returns {dim}-dimensional vectors but this index holds "
                f"{self._dim}-dimensional ones; use the model the index was built with."
            )
            raise ValueError(msg)

    def add_vectors(
        self, vectors: np.ndarray, texts: Sequence[str], metadatas: Sequence[dict[str, Any]],
        ids: Sequence[str],
    ) -> list[str]:
        """Add precomputed vectors; an existing id is replaced."""
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or len(matrix) != len(ids):
            msg = f"Expected {len(ids)} vectors as a 2-D array; got shape {matrix.shape}."
            raise ValueError(msg)
        if not np.isfinite(matrix).all():
            msg = "The embedding returned NaN or infinite values; refusing to index them."
            raise ValueError(msg)
        with self._lock:
            self._ensure_index(matrix.shape[1])
            self.delete([i for i in ids if i in self._ids])
            if not self._index.is_trained:
                self._index.train(normalise(matrix))
            rows = np.arange(self._next_id, self._next_id + len(ids), dtype=np.int64)
            self._next_id += len(ids)
            self._index.add_with_ids(normalise(matrix), rows)
            for row, key, text, meta in zip(rows.tolist(), ids, texts, metadatas):
                self._ids[key] = row
                self._keys[row] = key
                self._records[row] = (text, meta)
        return list(ids)

    def add_texts(
        self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None,
        *, ids: list[str] | None = None, **kwargs: Any,
    ) -> list[str]:
        """Embed and add texts under ``ids`` (required: children have keys)."""
        texts = list(texts)
        if ids is None or len(ids) != len(texts):
            msg = "FaissIndex.add_texts needs one id per text (the child node keys)."
            raise ValueError(msg)
        if not texts:
            return []
        vectors = np.asarray(self.embedding.embed_documents(texts), dtype=np.float32)
        return self.add_vectors(vectors, texts, metadatas or [{} for _ in texts], ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove vectors by key; unknown keys are ignored. Returns whether any went."""
        with self._lock:
            rows = [self._ids.pop(key) for key in ids or [] if key in self._ids]
            if rows:
                self._index.remove_ids(np.asarray(rows, dtype=np.int64))
            for row in rows:
                del self._keys[row]
                del self._records[row]
        return bool(rows)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored children with these keys (unknown keys skipped)."""
        with self._lock:
            rows = [self._ids[key] for key in ids if key in self._ids]
            return [self._document(row) for row in rows]

    def _document(self, row: int) -> Document:
        text, meta = self._records[row]
        return Document(page_content=text, metadata=dict(meta), id=self._keys[row])

    def search_rows(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw batched search: ``(scores, rows)``; ``-1`` rows are empty slots."""
        matrix = np.asarray(queries, dtype=np.float32)
        with self._lock:
            if self._index is None or self._index.ntotal == 0:
                empty = np.empty((len(matrix), 0))
                return empty.astype(np.float32), empty.astype(np.int64)
            self._ensure_index(matrix.shape[1])
            k = min(k, int(self._index.ntotal))
            scores, rows = self._index.search(normalise(matrix), k)
        return scores, rows

    def record(self, row: int) -> tuple[str, str, dict[str, Any]] | None:
        """``(key, text, metadata)`` of a search row, or ``None`` if it is gone."""
        key = self._keys.get(row)
        if key is None:
            return None
        text, meta = self._records[row]
        return key, text, meta

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: Filter | None = None,
        fetch_k: int = 20, **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """Nearest children with cosine scores; a filter post-filters ``fetch_k``."""
        wanted = max(k, fetch_k) if filter is not None else k
        scores, rows = self.search_rows(np.asarray([embedding]), wanted)
        out: list[tuple[Document, float]] = []
        for score, row in zip(scores[0].tolist(), rows[0].tolist()):
            found = self.record(row) if row >= 0 else None
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
        cls, texts: list[str], embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None, *, ids: list[str] | None = None,
        **kwargs: Any,
    ) -> FaissIndex:
        """Build an index from texts with their keys."""
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def save(self, directory: str | Path) -> None:
        """Write the FAISS index and the JSON records into ``directory``."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if self._index is not None:
                faiss.write_index(self._index, str(path / INDEX_FILE))
            with (path / RECORDS_FILE).open("w", encoding="ascii") as out:
                header = {"dim": self._dim, "factory": self.index_factory, "next": self._next_id}
                out.write(json.dumps(header) + "\n")
                for row, (text, meta) in self._records.items():
                    line = {"row": row, "key": self._keys[row], "text": text, "meta": meta}
                    out.write(json.dumps(line, ensure_ascii=True) + "\n")

    @classmethod
    def load(cls, directory: str | Path, embedding: Embeddings) -> FaissIndex:
        """Read an index written by :meth:`save` (no pickle: JSON and FAISS only)."""
        path = Path(directory)
        lines = (path / RECORDS_FILE).read_text(encoding="ascii").splitlines()
        header = json.loads(lines[0])
        store = cls(embedding, index_factory=str(header["factory"]))
        store._next_id = int(header["next"])
        if header["dim"] is not None:
            store._index = faiss.read_index(str(path / INDEX_FILE))
            store._dim = int(header["dim"])
            if store._index.d != store._dim:
                msg = f"Index file dimension {store._index.d} != recorded {store._dim}."
                raise ValueError(msg)
        for line in lines[1:]:
            rec = json.loads(line)
            row, key = int(rec["row"]), str(rec["key"])
            store._ids[key] = row
            store._keys[row] = key
            store._records[row] = (str(rec["text"]), dict(rec["meta"]))
        return store
