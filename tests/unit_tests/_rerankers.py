"""Deterministic rerankers (``BaseDocumentCompressor``) for tests: no model, no network."""

from __future__ import annotations

import re
from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document


class WordOverlap(BaseDocumentCompressor):
    """Orders documents by the query words they hold (distinct), fewer words first on ties.

    Unrelated to any embedding's cosine, so it reorders what a search ranked.
    ``scores``: put ``relevance_score`` on each document (a cross-encoder's habit);
    without it only the order speaks (LangChain's ``CrossEncoderReranker``).
    ``top_n``: keep only that many (``None``: all).
    """

    top_n: int | None = None
    scores: bool = True
    calls: int = 0

    def score(self, doc: Document, query: str) -> float:
        words = set(re.findall(r"\w+", doc.page_content.lower()))
        wanted = set(re.findall(r"\w+", query.lower()))
        return len(words & wanted) - len(words) / 1000

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        self.calls += 1
        ranked = sorted(documents, key=lambda d: (-self.score(d, query), str(d.id)))
        kept = ranked if self.top_n is None else ranked[: self.top_n]
        if not self.scores:
            return kept
        return [
            Document(
                page_content=d.page_content,
                metadata={**d.metadata, "relevance_score": self.score(d, query)},
                id=d.id,
            )
            for d in kept
        ]


class Failing(BaseDocumentCompressor):
    """A reranker whose service is down."""

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        msg = "503 Service Unavailable\nretry later"
        raise ConnectionError(msg)


class Stranger(BaseDocumentCompressor):
    """Returns a document it was not given."""

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return [Document(page_content="made up", id="nowhere"), *documents]


class DropsAll(BaseDocumentCompressor):
    """Keeps nothing."""

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return []
