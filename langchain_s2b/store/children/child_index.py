"""The adapter over any child ``VectorStore``: embed, search for hits, add, delete, list.

``FaissIndex`` takes a fast path (raw FAISS rows, no ``Document`` objects):
each row's hit fields are read from its metadata once and kept, and a
metadata filter selects the rows before the one search (see
:meth:`FaissIndex.matching_rows`).
Any other store is searched by vector when it offers
``similarity_search_with_score_by_vector`` (scores turned into relevance,
higher is better, by the store's own rule), else by
``similarity_search_with_relevance_scores``.

Writes are all or nothing: ``FaissIndex`` undoes its own steps; another store
has the new keys of a failed add removed again, and the leaves a failed delete
took added again (read with ``get_by_ids`` before, embedded again by the
store), before the error or interrupt goes on up.
"""

from __future__ import annotations

import asyncio
import math
import operator
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, cast

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor

from langchain_s2b.core.filters import check_filter, matches_filter
from langchain_s2b.core.hits import (
    SCORE,
    C,
    Candidate,
    Hit,
    Scored,
    hit_from_child,
    hit_from_metadata,
)
from langchain_s2b.core.keys import PROXY_MARK, parse_node_key
from langchain_s2b.core.requests import Found, Vector
from langchain_s2b.store.children.child_base import _float_lists, _listable, native_filter
from langchain_s2b.store.children.child_writes import ChildWrites
from langchain_s2b.store.vectors import FaissIndex, Located, Place

_BY_SCORE = operator.attrgetter("score")
_FIRST, _SECOND, _THIRD = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)
"""A place's node key, source key and split id (and a located pair's row and place)."""


def _finite(emb: Embeddings, query: str, vector: Sequence[float]) -> list[float]:
    """A query vector as a list; a NaN or an infinity in it is a one-line ``ValueError``.

    Searched, it would score every child NaN (ranked anyhow, or none kept).
    """
    out = list(vector)
    if out and type(out[0]) is float and _finite_sum(out):
        return out
    if not np.isfinite(np.asarray(out, dtype=np.float64)).all():
        msg = (
            f"The embedding {_name(emb)} returned NaN or infinite values for the query "
            f"{query[:60]!r}; a query vector must be finite numbers."
        )
        raise ValueError(msg)
    return out


def _finite_sum(values: list[float]) -> bool:
    """Whether the sum of ``values`` is finite: then each is (an inf or a NaN makes it not).

    ~5x faster than numpy reads a list; a sum that overflows, or a value that
    is no float, leaves the answer to the exact check.
    """
    try:
        return math.isfinite(sum(values))
    except (TypeError, ValueError):
        return False


def _name(emb: Embeddings) -> str:
    """An embedding model's class, and the model it names when it names one."""
    for attr in ("model_name", "model"):
        value = getattr(emb, attr, None)
        if isinstance(value, str) and value:
            return f"{type(emb).__name__} ({value})"
    return type(emb).__name__


class ChildIndex(ChildWrites):
    """Searches, adds to, deletes from and lists one child index.

    A batch of queries is embedded by the model's ``embed_queries`` method
    when it has one (a model may prefix queries, as E5 does with ``query: ``,
    so ``embed_documents`` is never used for queries), else one by one.
    """

    def embed_query(self, query: str) -> Vector:
        """The query vector (``None`` if the store embeds queries itself); finite, or an error."""
        emb = self.embeddings
        return None if emb is None else _finite(emb, query, emb.embed_query(query))

    async def aembed_query(self, query: str) -> Vector:
        """Async :meth:`embed_query`."""
        emb = self.embeddings
        return None if emb is None else _finite(emb, query, await emb.aembed_query(query))

    def search(self, vector: Vector, query: str, fetch: int, flt: Any) -> Found:
        """The ``fetch`` best children that pass ``flt``, and whether there are no more.

        Every index answers the same question (see :func:`settle`): the
        ``fetch`` best matching children, less a group of equal scores that the
        cut would split, and ``exhausted`` when no more children match.
        """
        if self.faiss is not None and vector is not None:
            return self._search_faiss(self.faiss, vector, fetch, flt)
        pairs = self._search_generic(vector, query, fetch + 1, flt)
        return settle([hit_from_child(doc, score) for doc, score in pairs], fetch)

    async def asearch(self, vector: Vector, query: str, fetch: int, flt: Any) -> Found:
        """Async :meth:`search` (FAISS runs in a worker thread)."""
        if self.faiss is not None and vector is not None:
            return await run_in_executor(None, self._search_faiss, self.faiss, vector, fetch, flt)
        pairs = await self._asearch_generic(vector, query, fetch + 1, flt)
        return settle([hit_from_child(doc, score) for doc, score in pairs], fetch)

    @staticmethod
    def _search_faiss(
        index: FaissIndex, vector: Sequence[float] | np.ndarray, fetch: int, flt: Any
    ) -> Found:
        """Pre-filter the rows and search once; else post-filter, searching deeper as needed."""
        check_filter(flt)
        query = _query_row(vector)
        if flt is not None:
            allowed = index.matching_rows(flt)
            found = None if allowed is None else index.search_among(query, fetch + 1, allowed)
            if found is not None:
                scores, rows, _ = found  # fewer than fetch + 1 back: no more can be reached
                hits, _ = _faiss_hits(index, scores[0], rows[0], None, fetch + 1)
                return settle(hits, fetch)
        depth = fetch + 1
        while True:
            scores, rows = index.search_rows(query, depth)
            hits, reached_all = _faiss_hits(index, scores[0], rows[0], flt, depth)
            if len(hits) > fetch or reached_all:
                return settle(hits, fetch)
            depth *= 2

    def read_hits(self, keys: list[str]) -> dict[str, Hit]:
        """See :class:`ReadHits`: these children as hits (score 0), by key; gone ones left out.

        Only ``FaissIndex`` answers a search with unread hits; any other
        store's hits come read, and it is asked only for the leaves a proxy's hit
        stands for (read by ``get_by_ids``, where the store has it).
        """
        index = self.faiss
        if not keys:
            return {}
        if index is None:
            try:
                found = self.vectorstore.get_by_ids(keys)
            except NotImplementedError:
                return {}
            return _wanted(keys, [hit_from_child(doc, 0.0) for doc in found])
        rows = [row for row in index.rows_of(keys) if row >= 0]
        new = tuple.__new__
        hits = [
            new(Hit, (*t[0], 0.0, *t[1]))
            for t in index.parsed(rows, _hit_template)
            if t is not None
        ]
        return _wanted(keys, hits)

    def leaf_hits(
        self, keys: list[str], flt: Any, vector: Vector, located: Located | None = None
    ) -> dict[str, Candidate]:
        """These leaves scored against ``vector`` as a search would score them.

        See :class:`LeafHits`. ``FaissIndex`` scores its stored vectors directly
        (``located``: keys whose rows a read at the current version found, see
        :meth:`FaissIndex.search_text`; unfiltered, such leaves are scored in
        one pass, :func:`_located_hits`); any other store is
        searched for exactly these leaves (a metadata filter on their source,
        level and split id, with ``flt``).
        """
        check_filter(flt)
        if vector is None or not keys:
            return {}
        index = self.faiss
        if index is None:
            pairs = self._search_generic(vector, "", len(keys), _only(keys, flt))
            return _wanted(keys, [hit_from_child(doc, score) for doc, score in pairs])
        if flt is None and located:  # BM25's leaves, unfiltered: usually one pass
            fast = _located_hits(index, keys, vector, located)
            if fast is not None:
                return fast
        held = [(row, place) for row, place in _node_rows(index, keys, located) if row >= 0]
        rows = [row for row, _ in held]
        scores = index.scores_of(_query_row(vector), rows)
        if scores is None:
            return {}
        at = np.asarray(rows, dtype=np.int64)
        hits, _ = _faiss_hits(index, scores, at, flt, 0, [place for _, place in held])
        return _wanted(keys, hits)

    async def aleaf_hits(self, keys: list[str], flt: Any, vector: Vector) -> dict[str, Candidate]:
        """Async :meth:`leaf_hits`."""
        if self.faiss is not None or vector is None or not keys:
            return await run_in_executor(None, self.leaf_hits, keys, flt, vector)
        check_filter(flt)
        pairs = await self._asearch_generic(vector, "", len(keys), _only(keys, flt))
        return _wanted(keys, [hit_from_child(doc, score) for doc, score in pairs])

    # Many queries at once (``SmallToBigRetriever.batch``) ---------------------------

    def embed_queries(self, queries: list[str]) -> list[Vector]:
        """Query vectors for many queries, in one model call when the model allows it."""
        emb = self.embeddings
        if emb is None:
            return [None] * len(queries)
        batched = getattr(emb, "embed_queries", None)
        found = batched(queries) if callable(batched) else [emb.embed_query(q) for q in queries]
        return [_finite(emb, q, v) for q, v in zip(queries, found, strict=True)]

    async def aembed_queries(self, queries: list[str]) -> list[Vector]:
        """Async :meth:`embed_queries` (queries embedded concurrently without a batch API)."""
        emb = self.embeddings
        if emb is None:
            return [None] * len(queries)
        batched = getattr(emb, "aembed_queries", None)
        if callable(batched):
            found = await batched(queries)
        elif callable(getattr(emb, "embed_queries", None)):
            return await run_in_executor(None, self.embed_queries, queries)
        else:
            found = await asyncio.gather(*(emb.aembed_query(q) for q in queries))
        return [_finite(emb, q, v) for q, v in zip(queries, found, strict=True)]

    def search_many(
        self, vectors: Sequence[Vector], queries: Sequence[str], fetch: int, flt: Any
    ) -> list[Found]:
        """:meth:`search` for many queries; FAISS searches them as one matrix."""
        matrix = self._faiss_matrix(vectors)
        if self.faiss is not None and matrix is not None:
            return self._search_faiss_many(self.faiss, matrix, fetch, flt)
        return [self.search(v, q, fetch, flt) for v, q in zip(vectors, queries, strict=True)]

    async def asearch_many(
        self, vectors: Sequence[Vector], queries: Sequence[str], fetch: int, flt: Any
    ) -> list[Found]:
        """Async :meth:`search_many` (other stores are searched concurrently)."""
        matrix = self._faiss_matrix(vectors)
        if self.faiss is not None and matrix is not None:
            return await run_in_executor(
                None, self._search_faiss_many, self.faiss, matrix, fetch, flt
            )
        pairs = zip(vectors, queries, strict=True)
        return list(await asyncio.gather(*(self.asearch(v, q, fetch, flt) for v, q in pairs)))

    def _faiss_matrix(self, vectors: Sequence[Vector]) -> np.ndarray | None:
        if self.faiss is None or any(v is None for v in vectors):
            return None
        return np.asarray(vectors, dtype=np.float32)

    @classmethod
    def _search_faiss_many(
        cls, index: FaissIndex, matrix: np.ndarray, fetch: int, flt: Any
    ) -> list[Found]:
        """One matrix search; a query whose filter needs a deeper search gets its own."""
        check_filter(flt)
        if flt is not None and index.matching_rows(flt) is not None:
            return [cls._search_faiss(index, vector, fetch, flt) for vector in matrix]
        scores, rows = index.search_rows(matrix, fetch + 1)
        found = []
        for vector, row_scores, row_ids in zip(matrix, scores, rows, strict=True):
            hits, reached_all = _faiss_hits(index, row_scores, row_ids, flt, fetch + 1)
            if len(hits) > fetch or reached_all:
                found.append(settle(hits, fetch))
            else:
                found.append(cls._search_faiss(index, vector, fetch, flt))
        return found

    def _relevance(self) -> Callable[[float], float]:
        try:
            return self.vectorstore._select_relevance_score_fn()
        except NotImplementedError:
            return lambda score: score

    def _kwargs(self, fetch: int, flt: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"k": fetch}
        if flt is not None:
            kwargs.update(native_filter(self.vectorstore, flt))
        return kwargs

    def _search_generic(
        self, vector: Vector, query: str, fetch: int, flt: Any
    ) -> list[tuple[Document, float]]:
        store: Any = self.vectorstore
        if vector is not None and hasattr(store, "similarity_search_with_score_by_vector"):
            pairs = store.similarity_search_with_score_by_vector(vector, **self._kwargs(fetch, flt))
            fn = self._relevance()
            return [(doc, fn(score)) for doc, score in pairs]
        found: list[tuple[Document, float]] = store.similarity_search_with_relevance_scores(
            query, **self._kwargs(fetch, flt)
        )
        return found

    async def _asearch_generic(
        self, vector: Vector, query: str, fetch: int, flt: Any
    ) -> list[tuple[Document, float]]:
        store: Any = self.vectorstore
        if vector is not None and hasattr(store, "asimilarity_search_with_score_by_vector"):
            kwargs = self._kwargs(fetch, flt)
            pairs = await store.asimilarity_search_with_score_by_vector(vector, **kwargs)
            fn = self._relevance()
            return [(doc, fn(score)) for doc, score in pairs]
        return await run_in_executor(None, self._search_generic, vector, query, fetch, flt)

    def list_children(self, candidates: list[str]) -> tuple[set[str] | None, bool]:
        """The child index's keys and whether that is all of them.

        ``FaissIndex``, LangChain's ``FAISS`` and ``InMemoryVectorStore`` can be
        listed; any other store is asked which ``candidates`` it holds
        (``get_by_ids``), and if it can not say, ``(None, False)``.
        """
        store: Any = self.vectorstore
        listed = _listable(store)
        if listed is not None:
            return listed, True
        try:
            found = store.get_by_ids(candidates)
        except NotImplementedError:
            return None, False
        return {str(doc.id) for doc in found}, False

    async def alist_children(self, candidates: list[str]) -> tuple[set[str] | None, bool]:
        """Async :meth:`list_children` (an async-only store is asked through ``aget_by_ids``)."""
        store: Any = self.vectorstore
        listed = _listable(store)
        if listed is not None:
            return listed, True
        try:
            found = await store.aget_by_ids(candidates)
        except NotImplementedError:
            return None, False
        return {str(doc.id) for doc in found}, False


def _only(keys: Sequence[str], flt: Any) -> dict[str, Any]:
    """A metadata filter that lets exactly these leaves through (and ``flt``, if any)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for key in keys:
        source_key, level, split_id = parse_node_key(key)
        groups.setdefault((source_key, level), []).append(split_id)
    wanted: dict[str, Any] = {
        "$or": [
            {
                "$and": [
                    {"source_key": {"$eq": source_key}},
                    {"level": {"$eq": level}},
                    {"split_id": {"$in": splits}},
                ]
            }
            for (source_key, level), splits in groups.items()
        ]
    }
    return wanted if flt is None else {"$and": [flt, wanted]}


def _node_rows(
    index: FaissIndex, keys: Sequence[str], located: Located | None
) -> list[tuple[int, Place | None]]:
    """:meth:`FaissIndex.node_rows` of ``keys``; those in ``located`` are not looked up again."""
    if not located:
        return index.node_rows(keys)
    unknown = [key for key in keys if key not in located]
    found = dict(zip(unknown, index.node_rows(unknown), strict=True)) if unknown else {}
    return [located[key] if key in located else found[key] for key in keys]


def _located_hits(
    index: FaissIndex, keys: list[str], vector: Sequence[float], located: Located
) -> dict[str, Candidate] | None:
    """:meth:`ChildIndex.leaf_hits`, unfiltered, of leaves a BM25 search located: one pass.

    ``None`` (the general path answers) unless each key is in ``located`` with its
    place, none a proxy's. The caller holds the lock at ``located``'s version.
    """
    found = list(map(located.get, keys))
    if None in found or PROXY_MARK in "\0".join(keys):
        return None
    places = list(map(_SECOND, found))  # type: ignore[arg-type]
    if None in places:
        return None
    rows = list(map(_FIRST, found))  # type: ignore[arg-type]
    scores = index.scores_of(_query_row(vector), rows)
    if scores is None or len(scores) != len(rows):
        return None
    named = list(map(_FIRST, places))
    return dict(zip(named, _unread(named, scores.tolist(), places), strict=True))


def _unread(keys: list[str], scores: list[float], places: Sequence[Place]) -> list[Candidate]:
    """The unread hits of these node places (``keys``: their node keys), built in C."""
    sources, splits = map(_SECOND, places), map(_THIRD, places)
    fields = zip(keys, scores, sources, splits, [None] * len(keys), strict=True)
    return list(map(tuple.__new__, repeat(Scored), fields))


def _wanted(keys: Sequence[str], hits: Sequence[C]) -> dict[str, C]:
    """The hits whose keys were asked for, by key."""
    asked = set(keys)
    return {hit.key: hit for hit in hits if hit.key in asked}


def _query_row(vector: Sequence[float] | np.ndarray) -> np.ndarray:
    """A query vector as a ``(1, dim)`` float32 matrix."""
    if isinstance(vector, list) and vector:
        return _float_lists([vector], 1, len(vector))
    return np.asarray([vector], dtype=np.float32)


def _faiss_hits(
    index: FaissIndex,
    scores: np.ndarray,
    rows: np.ndarray,
    flt: Any,
    depth: int,
    places: Sequence[tuple[str, str, int] | None] | None = None,
) -> tuple[list[Candidate], bool]:
    """One query's FAISS result row as hits (rows deleted since, or filtered out, skipped).

    Also says whether the search reached every child it can: FAISS filled
    fewer than ``depth`` slots (an IVF index probes only some lists, so going
    deeper would find nothing new). ``places``: the rows' node places, when
    known (:meth:`FaissIndex.node_rows`).
    """
    rows_list = rows.tolist()
    filled = len(rows_list) - rows_list.count(-1)
    if flt is None:  # unread, by node key (issue 34); a row under a key of its own is read now
        # and so is a proxy's (its covers are read from it: issue 35)
        if places is None:
            places = index.node_places(rows)
        new = tuple.__new__
        if None not in places:  # every row a node's (the usual answer): built in C
            keys = list(map(_FIRST, cast("list[Place]", places)))
            if PROXY_MARK not in "\0".join(keys):  # no proxy's (is_proxy_key, one scan)
                unread = _unread(keys, scores.tolist(), cast("list[Place]", places))
                return unread, filled < depth
        hits: list[Candidate | None] = []
        own: list[tuple[int, int, float]] = []  # (place in ``hits``, row, score): read now
        for score, row, p in zip(scores.tolist(), rows_list, places, strict=True):
            if p is not None and PROXY_MARK not in p[0]:  # not is_proxy_key: inlined
                hits.append(new(Scored, (p[0], score, p[1], p[2], None)))
            elif row >= 0:
                own.append((len(hits), row, score))
                hits.append(None)
        if not own:
            return cast("list[Candidate]", hits), filled < depth  # no None in it
        templates = index.parsed([row for _, row, _ in own], _hit_template)
        for (i, _, score), t in zip(own, templates, strict=True):
            if t is not None:
                hits[i] = new(Hit, (*t[0], score, *t[1]))
        return [hit for hit in hits if hit is not None], filled < depth
    read: list[Candidate] = []
    for score, found in zip(scores.tolist(), index.records(rows_list), strict=True):
        if found is not None and matches_filter(found[2], flt):
            read.append(hit_from_metadata(found[2], found[1], score, found[0]))
    return read, filled < depth


def _hit_template(
    key: str, text: str, meta: dict[str, Any]
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """A row's hit without its score: the fields before and after it (read once per row)."""
    hit = hit_from_metadata(meta, text, 0.0, key)
    return hit[:SCORE], hit[SCORE + 1 :]


def settle(hits: Sequence[Candidate], fetch: int) -> Found:
    """The ``fetch`` best of ``hits`` (searched ``fetch + 1`` deep) and whether that is all.

    When the ``fetch``-th and the next hit score the same, the index chose
    which of several equal children to return; that whole group of equal
    scores is left out (its score is ``tied``), so the answer never depends on
    an engine's tie order (the retriever searches deeper if it needs them).
    """
    hits = sorted(hits, key=_BY_SCORE, reverse=True)  # stable: equal scores keep their order
    if len(hits) <= fetch:
        return Found(hits, True)
    cut = hits[fetch - 1].score
    if hits[fetch].score < cut:
        return Found(hits[:fetch], False)
    return Found([hit for hit in hits[:fetch] if hit.score > cut], False, cut)
