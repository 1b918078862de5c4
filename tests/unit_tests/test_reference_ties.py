"""Equal scores at the fetch cut: the answer never depends on an engine's tie order."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever

from ._embeddings import BagOfWords
from .test_reference_filters import INDEXES

# Five paragraphs (parents) of one repeated sentence: every child scores the same.
TEXT = "\n\n".join(["Apple pie again."] * 5)


def _retriever(make: Any) -> SmallToBigRetriever:
    retriever = SmallToBigRetriever(
        vectorstore=make(BagOfWords()),
        child_splitter=lambda text: [text],
        parent_splitter=lambda text: text.split("\n\n"),
    )
    retriever.add_documents([Document(page_content=TEXT, id="t")])
    return retriever


@pytest.mark.parametrize("name", INDEXES)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_tied_children_rank_in_document_order_on_every_index(name: str, k: int) -> None:
    """Found by the reference: with fetch_k=1 the engine chose which tied child came back
    (FAISS and InMemoryVectorStore chose differently), and the parent followed it."""
    docs = _retriever(INDEXES[name]).invoke("apple", k=k, fetch_k=1)
    assert [d.id for d in docs] == [f"t/parent/{i}" for i in range(k)]
    assert [[m["key"] for m in d.metadata["matches"]] for d in docs] == [
        [f"t/child/{i}"] for i in range(k)
    ]
    assert [(d.metadata["start"], d.metadata["end"]) for d in docs] == [
        (18 * i, 18 * i + 18) for i in range(k)
    ]
