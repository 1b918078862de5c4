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

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

import faiss
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_s2b.core.filters import Filter, check_filter, filter_key, matches_filter
from langchain_s2b.core.tree import NODE_FIELDS
from langchain_s2b.store.vectors.faiss_base import normalise
from langchain_s2b.store.vectors.faiss_files import FaissSaves
from langchain_s2b.store.vectors.faiss_lexical import FaissLexical, Located
from langchain_s2b.store.vectors.faiss_writes import FaissWrites
from langchain_s2b.store.vectors.records import Records

_SOURCE_FIELDS = NODE_FIELDS - {"source_id", "source_key"}
"""Leaf fields that differ between the leaves of one source (a filter on them is per row)."""
_EXACT_SUBSET = 4096
"""Up to this many matching rows, a filtered search scores them exactly (one small scan)."""
_FILTER_CACHE = 32
_PARSED_CACHE = 1 << 16
"""Rows whose parsed record `FaissIndex.parsed` keeps (~200 bytes each), then starts over."""


class FaissIndex(FaissLexical, FaissWrites, FaissSaves):
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

    def hold(self) -> AbstractContextManager[Any]:
        """Hold the index still across several reads: no write comes between them.

        Its own reentrant lock (every method takes it too), for a caller that
        joins what one read gave with the next (rows found by BM25, scored).
        """
        return self._lock

    @property
    def version(self) -> int:
        """A number every write changes: rows read at one version are valid while it holds."""
        return self._version

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

    def node_places(self, rows: np.ndarray) -> list[tuple[str, str, int] | None]:
        """Per search row, ``(node key, source key, split id)`` when the row is read from it alone.

        ``None`` for ``-1``, a deleted row, a row stored under a key of its own
        (not the node key its metadata names), and every row of a database's
        rows (their hits are read at once).
        """
        with self._lock:
            held = self._rows
            if not isinstance(held, Records):
                return [None] * len(rows)
            return held.node_places(rows)

    def node_rows(self, keys: Sequence[str]) -> list[tuple[int, tuple[str, str, int] | None]]:
        """Per key, its row (``-1``: not held) and its place as :meth:`node_places` gives it."""
        with self._lock:
            held = self._rows
            if not isinstance(held, Records):
                return [(row, None) for row in map(held.row, keys)]
            return held.node_rows(keys)

    def records(self, rows: Sequence[int]) -> list[tuple[str, str, dict[str, Any]] | None]:
        """``(key, text, metadata)`` per search row, under one lock (``-1``, deleted: ``None``)."""
        with self._lock:
            return self._rows.records(rows)

    def search_text(
        self, query: str, n: int, flt: Any, located: Located | None = None
    ) -> list[tuple[str, float]]:
        """The ``n`` best leaves by BM25 that pass ``flt`` (selected before ranking).

        ``located``: filled with the row and place of each key read from the
        row column (see :meth:`keys_of_rows`), valid while :attr:`version` is
        unchanged.
        """
        check_filter(flt)
        lexical = self.lexical()
        key_of = partial(self.keys_of_rows, located=located)
        if flt is None:
            return lexical.search(query, n, key_of=key_of)
        sources = self.matching_sources(flt)
        if sources is not None:
            return lexical.search(query, n, sources=sources, key_of=key_of)
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
