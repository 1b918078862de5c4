"""The adapter over any child ``VectorStore``: embed, search for hits, add, delete, list.

``FaissIndex`` takes a fast path (raw FAISS rows, no ``Document`` objects).
Any other store is searched by vector when it offers
``similarity_search_with_score_by_vector`` (scores turned into relevance,
higher is better, by the store's own rule), else by
``similarity_search_with_relevance_scores``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore

from langchain_s2b.core.filters import matches_filter
from langchain_s2b.core.hits import Hit, hit_from_child, hit_from_metadata
from langchain_s2b.core.requests import Found, Vector
from langchain_s2b.store.faiss_index import FaissIndex


class ChildIndex:
    """Searches, adds to, deletes from and lists one child index.

    A batch of queries is embedded by the model's ``embed_queries`` method
    when it has one (a model may prefix queries, as E5 does with ``query: ``,
    so ``embed_documents`` is never used for queries), else one by one.
    """

    def __init__(self, vectorstore: VectorStore) -> None:
        self.vectorstore = vectorstore
        self.faiss = vectorstore if isinstance(vectorstore, FaissIndex) else None

    @property
    def embeddings(self) -> Embeddings | None:
        """The store's embedding model, when it exposes one."""
        try:
            return self.vectorstore.embeddings
        except (AttributeError, NotImplementedError):
            return None

    def embed_query(self, query: str) -> Vector:
        """The query vector (``None`` if the store embeds queries itself)."""
        emb = self.embeddings
        return None if emb is None else list(emb.embed_query(query))

    async def aembed_query(self, query: str) -> Vector:
        """Async :meth:`embed_query`."""
        emb = self.embeddings
        return None if emb is None else list(await emb.aembed_query(query))

    def search(self, vector: Vector, query: str, fetch: int, flt: Any) -> Found:
        """The ``fetch`` best children as hits, and whether the index is exhausted."""
        if self.faiss is not None and vector is not None:
            return self._search_faiss(self.faiss, vector, fetch, flt)
        pairs = self._search_generic(vector, query, fetch, flt)
        return [hit_from_child(doc, score) for doc, score in pairs], len(pairs) < fetch

    async def asearch(self, vector: Vector, query: str, fetch: int, flt: Any) -> Found:
        """Async :meth:`search` (FAISS runs in a worker thread)."""
        if self.faiss is not None and vector is not None:
            return await run_in_executor(None, self._search_faiss, self.faiss, vector, fetch, flt)
        pairs = await self._asearch_generic(vector, query, fetch, flt)
        return [hit_from_child(doc, score) for doc, score in pairs], len(pairs) < fetch

    @staticmethod
    def _search_faiss(index: FaissIndex, vector: list[float], fetch: int, flt: Any) -> Found:
        scores, rows = index.search_rows(np.asarray([vector], dtype=np.float32), fetch)
        return _faiss_hits(index, scores[0], rows[0], flt), fetch >= len(index)

    # Many queries at once (``SmallToBigRetriever.batch``) ---------------------------

    def embed_queries(self, queries: list[str]) -> list[Vector]:
        """Query vectors for many queries, in one model call when the model allows it."""
        emb = self.embeddings
        if emb is None:
            return [None] * len(queries)
        batched = getattr(emb, "embed_queries", None)
        if callable(batched):
            return [list(v) for v in batched(queries)]
        return [list(emb.embed_query(q)) for q in queries]

    async def aembed_queries(self, queries: list[str]) -> list[Vector]:
        """Async :meth:`embed_queries` (queries embedded concurrently without a batch API)."""
        emb = self.embeddings
        if emb is None:
            return [None] * len(queries)
        batched = getattr(emb, "aembed_queries", None)
        if callable(batched):
            return [list(v) for v in await batched(queries)]
        if callable(getattr(emb, "embed_queries", None)):
            return await run_in_executor(None, self.embed_queries, queries)
        found = await asyncio.gather(*(emb.aembed_query(q) for q in queries))
        return [list(v) for v in found]

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

    @staticmethod
    def _search_faiss_many(
        index: FaissIndex, matrix: np.ndarray, fetch: int, flt: Any
    ) -> list[Found]:
        scores, rows = index.search_rows(matrix, fetch)
        exhausted = fetch >= len(index)
        return [
            (_faiss_hits(index, s, r, flt), exhausted) for s, r in zip(scores, rows, strict=True)
        ]

    def _relevance(self) -> Callable[[float], float]:
        try:
            return self.vectorstore._select_relevance_score_fn()
        except NotImplementedError:
            return lambda score: score

    def _kwargs(self, fetch: int, flt: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"k": fetch}
        if flt is not None:
            kwargs.update(filter=flt, fetch_k=fetch * 4)
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

    def _takes_vectors(self) -> bool:
        """Whether leaves can be added with vectors embedded beforehand."""
        return self.faiss is not None or callable(getattr(self.vectorstore, "add_embeddings", None))

    def embed_leaves(self, texts: list[str]) -> list[list[float]] | None:
        """Leaf vectors, embedded ahead of the write (``None``: the store embeds on add)."""
        emb = self.embeddings
        if emb is None or not self._takes_vectors():
            return None
        return [list(v) for v in emb.embed_documents(texts)]

    async def aembed_leaves(self, texts: list[str]) -> list[list[float]] | None:
        """Async :meth:`embed_leaves`."""
        emb = self.embeddings
        if emb is None or not self._takes_vectors():
            return None
        return [list(v) for v in await emb.aembed_documents(texts)]

    def add(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Index leaves under their ids (the node keys), with their vectors when given."""
        if not leaves:
            return
        ids = [str(d.id) for d in leaves]
        if vectors is None:
            self.vectorstore.add_documents(leaves, ids=ids)
        elif self.faiss is not None:
            texts = [d.page_content for d in leaves]
            self.faiss.add_vectors(np.asarray(vectors), texts, [d.metadata for d in leaves], ids)
        else:
            store: Any = self.vectorstore
            pairs = [(d.page_content, v) for d, v in zip(leaves, vectors, strict=True)]
            store.add_embeddings(pairs, [d.metadata for d in leaves], ids=ids)

    async def aadd(self, leaves: list[Document], vectors: list[list[float]] | None = None) -> None:
        """Async :meth:`add` (vectors already embedded are added in a worker thread)."""
        if not leaves:
            return
        if vectors is None:
            await self.vectorstore.aadd_documents(leaves, ids=[str(d.id) for d in leaves])
        else:
            await run_in_executor(None, self.add, leaves, vectors)

    def delete(self, keys: list[str]) -> None:
        """Delete leaves; keys the store does not hold are ignored."""
        if not keys:
            return
        try:
            self.vectorstore.delete(keys)
        except (ValueError, KeyError):
            for key in keys:
                try:
                    self.vectorstore.delete([key])
                except (ValueError, KeyError):
                    continue

    async def adelete(self, keys: list[str]) -> None:
        """Async :meth:`delete` (through the store's ``adelete``: async-only stores work)."""
        if not keys:
            return
        try:
            await self.vectorstore.adelete(keys)
        except (ValueError, KeyError):
            for key in keys:
                try:
                    await self.vectorstore.adelete([key])
                except (ValueError, KeyError):
                    continue

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


def _listable(store: Any) -> set[str] | None:
    """Every key of a store that can be listed in memory, else ``None``."""
    if isinstance(store, FaissIndex):
        return set(store.keys())
    mapping = getattr(store, "index_to_docstore_id", None)
    if isinstance(mapping, dict):
        return set(mapping.values())
    docs = getattr(store, "store", None)
    if isinstance(docs, dict):
        return set(docs)
    return None


def _faiss_hits(index: FaissIndex, scores: np.ndarray, rows: np.ndarray, flt: Any) -> list[Hit]:
    """One query's FAISS result row as hits (rows deleted since, or filtered out, skipped)."""
    hits = []
    for score, found in zip(scores.tolist(), index.records(rows.tolist()), strict=True):
        if found is not None and (flt is None or matches_filter(found[2], flt)):
            hits.append(hit_from_metadata(found[2], found[1], score, found[0]))
    return hits
