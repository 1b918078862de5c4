"""Baselines for comparisons: plain chunk retrieval, headers on and off, an embedding memo.

Plain chunk retrieval with the same embedding is always a row of an
evaluation; :func:`header_rows` gives a configuration with contextual headers
off and on (two indexes: what is embedded differs); :class:`MemoEmbeddings`
lets the rows share the vectors of the texts they have in common.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever

from langchain_s2b.core.tree import Splitter, split_spans
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.vectors import FaissIndex


def chunk_documents(documents: Sequence[Document], splitter: Splitter) -> list[Document]:
    """Plain chunks with ``source_id``/``start``/``end`` metadata, for a baseline index."""
    chunks = []
    for doc in documents:
        source_id = doc.id or str(doc.metadata.get("id", ""))
        if not source_id:
            msg = "chunk_documents needs documents with an id (Document.id or metadata 'id')."
            raise ValueError(msg)
        text = doc.page_content
        for n, (start, end) in enumerate(split_spans(splitter, text)):
            meta = {**doc.metadata, "source_id": source_id, "start": start, "end": end}
            chunks.append(
                Document(page_content=text[start:end], metadata=meta, id=f"{source_id}#{n}")
            )
    return chunks


def chunk_retriever(
    documents: Sequence[Document], embedding: Embeddings, splitter: Splitter, k: int = 4
) -> BaseRetriever:
    """The plain-chunk baseline: a FAISS vector-store retriever over chunks, same embedding."""
    chunks = chunk_documents(documents, splitter)
    index = FaissIndex(embedding)
    index.add_documents(chunks, ids=[str(c.id) for c in chunks])
    return index.as_retriever(search_kwargs={"k": k})


def header_rows(
    documents: Sequence[Document], embedding: Embeddings, name: str, **fields: Any
) -> dict[str, BaseRetriever]:
    """One configuration with contextual headers off and on: rows ``name`` and ``name, headers``.

    Each row is its own FAISS index (what is embedded differs); ``fields`` are
    the retriever's options (``mode=``, ``window_size=`` ...). Wrap ``embedding``
    in :class:`MemoEmbeddings` so that the rows share the queries' vectors.
    """
    rows: dict[str, BaseRetriever] = {}
    for headers, label in ((False, name), (True, f"{name}, headers")):
        rows[label] = SmallToBigRetriever.from_documents(
            documents, embedding, **{**fields, "contextual_headers": headers}
        )
    return rows


class MemoEmbeddings(Embeddings):
    """An embedding wrapper that remembers vectors in memory (nothing on disk).

    Comparing retrievers that embed the same sentences, or ask the same
    question many times, then embeds each text once.
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self._docs: dict[str, list[float]] = {}
        self._queries: dict[str, list[float]] = {}
        self.max_input_tokens = getattr(inner, "max_input_tokens", None)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed the texts not seen before; return all vectors in order."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._docs))
        if todo:
            self._docs.update(zip(todo, self.inner.embed_documents(todo), strict=True))
        return [self._docs[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query once."""
        if text not in self._queries:
            self._queries[text] = self.inner.embed_query(text)
        return self._queries[text]
