"""A query reads only the hits a mode places (issue 34).

A query searches ~100 children deep to read its scale from their scores, and
under hybrid search BM25 adds up to 100 more. A window-mode query reads (builds
a hit for) exactly the children that come back as some result's matches: the
windows' seeds and the hits inside them. Counted through a wrapper around the
one function that turns a stored child into a hit, on a fresh index (no hit
cached).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.store.children import child_index

from ._embeddings import BagOfWords

WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "peach", "olive", "quince"]


def _sources(n: int) -> list[Document]:
    """``n`` sources of 10 sentences, each naming three fruits, a number and a part."""
    return [
        Document(
            page_content=" ".join(
                f"{WORDS[(i + j) % 10].title()} {WORDS[(i * 3 + j) % 10]} {WORDS[j % 10]} "
                f"number {i} part {j}."
                for j in range(10)
            ),
            id=f"s{i:03d}",
        )
        for i in range(n)
    ]


class _Reads:
    """Counts the children turned into hits (their keys)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.keys: list[str] = []
        inner = child_index.hit_from_metadata

        def counted(meta: Any, text: str, score: float, name: str | None = None) -> Any:
            hit = inner(meta, text, score, name)
            self.keys.append(hit.key)
            return hit

        monkeypatch.setattr(child_index, "hit_from_metadata", counted)


def _retriever(hybrid: bool) -> SmallToBigRetriever:
    index = FaissIndex(BagOfWords())
    retriever = SmallToBigRetriever(vectorstore=index, mode="window", hybrid=hybrid)
    retriever.add_documents(_sources(30))  # 300 sentences
    return retriever


@pytest.mark.parametrize("hybrid", [True, False])
@pytest.mark.parametrize(("k", "window_size"), [(1, 0), (2, 1), (4, 1), (3, 3)])
def test_a_window_query_reads_exactly_the_hits_it_returns_as_matches(
    monkeypatch: pytest.MonkeyPatch, hybrid: bool, k: int, window_size: int
) -> None:
    retriever = _retriever(hybrid)
    reads = _Reads(monkeypatch)
    docs = retriever.invoke("apple pear number 7 part 3", k=k, window_size=window_size)
    matched = [m["key"] for doc in docs for m in doc.metadata["matches"]]
    assert len(docs) == k
    assert sorted(reads.keys) == sorted(matched)  # each read once, and only these


def test_what_a_query_reads_is_kept_for_the_next_one(monkeypatch: pytest.MonkeyPatch) -> None:
    retriever = _retriever(True)
    reads = _Reads(monkeypatch)
    first = retriever.invoke("plum fig number 12", k=2)
    n = len(reads.keys)
    assert retriever.invoke("plum fig number 12", k=2) == first
    assert len(reads.keys) == n  # the hit cache answered every read


@pytest.mark.parametrize("hybrid", [False, True])
def test_a_child_deleted_between_the_search_and_its_read_drops_out(
    monkeypatch: pytest.MonkeyPatch, hybrid: bool
) -> None:
    """The best hit's child is deleted after the search found it, before it is read: the
    answer is the one a query gets after that delete (the next hit seeds instead).

    Under hybrid search the fused scores were standardised with the deleted child in the
    lists (it was there when they were searched), so only they may differ.
    """
    query = "apple pear number 7 part 3"
    gone = _retriever(hybrid).invoke(query, k=2)[0].metadata["matches"][0]["key"]
    after = _retriever(hybrid)
    after.vectorstore.delete([gone])
    expected = after.invoke(query, k=2)
    racing = _retriever(hybrid)
    inner = child_index.ChildIndex.read_hits

    def read_late(self: child_index.ChildIndex, keys: list[str]) -> Any:
        if gone in keys:
            racing.vectorstore.delete([gone])
        return inner(self, keys)

    monkeypatch.setattr(child_index.ChildIndex, "read_hits", read_late)
    got = racing.invoke(query, k=2)
    assert gone not in [m["key"] for doc in got for m in doc.metadata["matches"]]
    assert [_unfused(doc) for doc in got] == [_unfused(doc) for doc in expected]


def _unfused(doc: Document) -> Document:
    """The document without its fused scores (its own and its matches')."""
    meta = {k: v for k, v in doc.metadata.items() if k != "fused_score"}
    meta["matches"] = [
        {k: v for k, v in m.items() if k != "fused_score"} for m in doc.metadata["matches"]
    ]
    return Document(page_content=doc.page_content, metadata=meta, id=doc.id)
