"""The child-index edge: search any LangChain ``VectorStore`` for hits.

``FaissIndex`` takes a fast path (raw FAISS rows, no ``Document`` objects).
Any other store is searched by vector when it offers
``similarity_search_with_score_by_vector`` (scores turned into relevance,
higher is better, by the store's own rule), else by
``similarity_search_with_relevance_scores``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore

from langchain_s2b.index import FaissIndex, matches_filter
from langchain_s2b.resolve import Hit, hit_from_child, hit_from_metadata

Found = tuple[list[Hit], bool]


class Searcher:
    """Searches, adds to and deletes from one child index."""

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

    def embed_query(self, query: str) -> list[float] | None:
        """The query vector (``None`` if the store embeds queries itself)."""
        emb = self.embeddings
        return None if emb is None else list(emb.embed_query(query))

    async def aembed_query(self, query: str) -> list[float] | None:
        """Async :meth:`embed_query`."""
        emb = self.embeddings
        return None if emb is None else list(await emb.aembed_query(query))

    def search(self, vector: list[float] | None, query: str, fetch: int, flt: Any) -> Found:
        """The ``fetch`` best children as hits, and whether the index is exhausted."""
        if self.faiss is not None and vector is not None:
            return self._search_faiss(self.faiss, vector, fetch, flt)
        pairs = self._search_generic(vector, query, fetch, flt)
        return [hit_from_child(doc, score) for doc, score in pairs], len(pairs) < fetch

    async def asearch(self, vector: list[float] | None, query: str, fetch: int, flt: Any) -> Found:
        """Async :meth:`search` (FAISS runs in a worker thread)."""
        if self.faiss is not None and vector is not None:
            return await run_in_executor(None, self._search_faiss, self.faiss, vector, fetch, flt)
        pairs = await self._asearch_generic(vector, query, fetch, flt)
        return [hit_from_child(doc, score) for doc, score in pairs], len(pairs) < fetch

    @staticmethod
    def _search_faiss(index: FaissIndex, vector: list[float], fetch: int, flt: Any) -> Found:
        scores, rows = index.search_rows(np.asarray([vector], dtype=np.float32), fetch)
        hits = []
        for score, row in zip(scores[0].tolist(), rows[0].tolist(), strict=False):
            found = index.record(row) if row >= 0 else None
            if found is not None and matches_filter(found[2], flt):
                hits.append(hit_from_metadata(found[2], found[1], score, found[0]))
        return hits, fetch >= len(index)

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
        self, vector: list[float] | None, query: str, fetch: int, flt: Any
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
        self, vector: list[float] | None, query: str, fetch: int, flt: Any
    ) -> list[tuple[Document, float]]:
        store: Any = self.vectorstore
        if vector is not None and hasattr(store, "asimilarity_search_with_score_by_vector"):
            kwargs = self._kwargs(fetch, flt)
            pairs = await store.asimilarity_search_with_score_by_vector(vector, **kwargs)
            fn = self._relevance()
            return [(doc, fn(score)) for doc, score in pairs]
        return await run_in_executor(None, self._search_generic, vector, query, fetch, flt)

    def add(self, leaves: list[Document]) -> None:
        """Embed and index leaves under their ids (the node keys)."""
        if leaves:
            self.vectorstore.add_documents(leaves, ids=[str(d.id) for d in leaves])

    async def aadd(self, leaves: list[Document]) -> None:
        """Async :meth:`add`."""
        if leaves:
            await self.vectorstore.aadd_documents(leaves, ids=[str(d.id) for d in leaves])

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
        """Async :meth:`delete`."""
        await run_in_executor(None, self.delete, keys)
