"""C9: one meaning of ``filter=`` (a Mongo-style metadata dict) on every child index."""

from __future__ import annotations

import warnings
from typing import Any

import faiss
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import size_splitter

from ._embeddings import BagOfWords

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS


def community_faiss(emb: Embeddings) -> FAISS:
    return FAISS(emb, faiss.IndexFlatL2(emb.size), InMemoryDocstore(), {}, normalize_L2=True)  # type: ignore[attr-defined]


INDEXES = {
    "FaissIndex": lambda emb: FaissIndex(emb),
    "InMemoryVectorStore": InMemoryVectorStore,
    "langchain_community FAISS": community_faiss,
}

# 30 sources; the 6 of kind "x" match the query worst (cosine 0.58 against 0.71 and more for
# the 24 others' 90 children), so an index that filters only among its first few dozen
# children finds none of them.
SOURCES = [
    Document(
        page_content=f"Apple pie with cream {i}."
        if i < 6
        else f"Apple apple {i}. Apple {i} apple. Apple apple {i}.",
        metadata={"kind": "x" if i < 6 else "y", "n": i},
        id=f"s{i:02d}",
    )
    for i in range(30)
]
X_IDS = [f"s{i:02d}" for i in range(6)]


def _retriever(make: Any) -> SmallToBigRetriever:
    retriever = SmallToBigRetriever(
        vectorstore=make(BagOfWords()),
        child_splitter=size_splitter(4),
        parent_splitter=size_splitter(50),
    )
    retriever.add_documents(SOURCES)
    return retriever


@pytest.mark.parametrize("name", INDEXES)
def test_a_filter_matching_six_sources_returns_all_six(name: str) -> None:
    """Before: langchain_community FAISS filtered inside its own fetch_k and returned 0."""
    docs = _retriever(INDEXES[name]).invoke("apple", k=10, fetch_k=4, filter={"kind": "x"})
    assert sorted(d.metadata["source_id"] for d in docs) == X_IDS
    # Every index gives the same answer as the exact FAISS index.
    flat = _retriever(INDEXES["FaissIndex"]).invoke("apple", k=10, fetch_k=4, filter={"kind": "x"})
    assert [(d.id, d.metadata["start"], d.metadata["end"]) for d in docs] == [
        (d.id, d.metadata["start"], d.metadata["end"]) for d in flat
    ]


@pytest.mark.parametrize("name", INDEXES)
def test_operators_mean_the_same_everywhere(name: str) -> None:
    """Before: InMemoryVectorStore raised TypeError for a dict filter."""
    flt = {"$or": [{"n": {"$gte": 28}}, {"n": {"$in": [3]}}], "kind": {"$ne": "z"}}
    docs = _retriever(INDEXES[name]).invoke("apple orchard", k=10, filter=flt)
    assert sorted(d.metadata["source_id"] for d in docs) == ["s03", "s28", "s29"]


@pytest.mark.parametrize("name", INDEXES)
def test_a_callable_on_metadata_works_on_the_in_memory_indexes(name: str) -> None:
    docs = _retriever(INDEXES[name]).invoke("apple", k=10, filter=lambda m: m["n"] in (4, 9))
    assert sorted(d.metadata["source_id"] for d in docs) == ["s04", "s09"]


class ServerLike(VectorStore):
    """A store that filters by its own (dict) filter language, as server stores do."""

    def __init__(self) -> None:
        self.filters: list[Any] = []

    def add_texts(self, texts: Any, metadatas: Any = None, **kwargs: Any) -> list[str]:
        return list(kwargs.get("ids") or [])

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return []

    def similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        self.filters.append(kwargs.get("filter"))
        return []

    @classmethod
    def from_texts(cls, texts: Any, embedding: Any, metadatas: Any = None, **kwargs: Any) -> Any:
        return cls()


def test_other_stores_get_the_dict_and_refuse_a_callable() -> None:
    store = ServerLike()
    retriever = SmallToBigRetriever(vectorstore=store)
    assert retriever.invoke("apple", filter={"kind": "x"}) == []
    assert store.filters == [{"kind": "x"}]
    with pytest.raises(ValueError, match="A callable filter works only with FaissIndex"):
        retriever.invoke("apple", filter=lambda m: True)


@pytest.mark.parametrize("name", INDEXES)
def test_a_filter_that_is_neither_dict_nor_callable_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match=r"filter must be a metadata dict .* got str"):
        _retriever(INDEXES[name]).invoke("apple", filter="kind=x")
