"""Retrieval told a budget: seeds, reach per mode, one fetch, documents from runs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.budget import approximate_tokens
from langchain_s2b.core.budgeted import (
    Shape,
    fill,
    leaf_keys,
    neighbourhood,
    reach_distance,
    seed_hits,
)
from langchain_s2b.core.hits import Hit

from ._embeddings import BagOfWords

TEXT = "Aa. Bb. Cc. Dd. Ee. Ff. "  # six 4-char sentences: 1 token each
PARAS = [(0, 12), (12, 24)]  # two paragraphs of three sentences


def leaf(i: int) -> Document:
    start, end = 4 * i, 4 * i + 4
    para = 0 if i < 3 else 1
    meta = {
        "source_id": "doc",
        "source_key": "doc",
        "level": "sentence",
        "split_id": i,
        "start": start,
        "end": end,
        "source_splits": 6,
        "ancestors": [[f"doc/paragraph/{para}", *PARAS[para], 3], ["doc/doc/0", 0, 24, 2]],
        "topic": "t",
    }
    return Document(page_content=TEXT[start:end], metadata=meta, id=f"doc/sentence/{i}")


def hit(i: int, score: float) -> Hit:
    para = 0 if i < 3 else 1
    return Hit(
        f"doc/sentence/{i}",
        "doc",
        "doc",
        "sentence",
        i,
        4 * i,
        4 * i + 4,
        score,
        TEXT[4 * i : 4 * i + 4],
        f"doc/paragraph/{para}",
        ((f"doc/paragraph/{para}", *PARAS[para], 3), ("doc/doc/0", 0, 24, 2)),
        6,
    )


FETCHED = {f"doc/sentence/{i}": leaf(i) for i in range(6)}


def test_seeds_are_taken_until_their_own_text_fills_the_budget() -> None:
    hits = [hit(2, 0.9), hit(4, 0.8), hit(0, 0.7)]
    assert seed_hits(hits, 4, len) == (hits[:1], True)  # 4 chars fill 4
    assert seed_hits(hits, 9, len) == (hits[:3], True)
    assert seed_hits(hits, 13, len) == (hits, False)
    # a hit longer than the whole budget is a seed but fills nothing
    assert seed_hits(hits, 3, len) == (hits, False)


@pytest.mark.parametrize(("n", "d"), [(0, 1), (1, 1), (2, 1), (3, 1), (4, 2), (40, 5), (100, 6)])
def test_reach_distance_is_where_a_neighbour_falls_below_the_weakest_seed(n: int, d: int) -> None:
    assert reach_distance(n) == d


def test_neighbourhood_per_mode() -> None:
    assert neighbourhood(hit(2, 1.0), Shape("multilevel"), 5) == (0, 5)
    assert neighbourhood(hit(2, 1.0), Shape("multilevel"), 1) == (1, 3)
    assert neighbourhood(hit(2, 1.0), Shape("window", 0, 1), 5) == (2, 3)
    assert leaf_keys([hit(0, 1.0), hit(5, 0.5)], Shape("window", 1, 1), 5) == [
        "doc/sentence/0",
        "doc/sentence/1",
        "doc/sentence/4",
        "doc/sentence/5",
    ]


def test_fill_grows_inside_the_parent_and_returns_exact_documents() -> None:
    # parent mode: hit 2 may not leave paragraph 0 (sentences 0-2); budget 3 tokens
    (doc,) = fill([hit(2, 0.9)], Shape("parent", inside_parent=True), 5, FETCHED, 3, _tokens)
    assert doc.page_content == "Aa. Bb. Cc. " == TEXT[0:12]
    meta = doc.metadata
    assert (meta["start"], meta["end"], meta["mode"], meta["escalation"]) == (
        0,
        12,
        "parent",
        "budget",
    )
    assert meta["split_ids"] == [0, 1, 2]
    assert [m["split_id"] for m in meta["matches"]] == [2]
    assert (meta["score"], meta["topic"], meta["tokens"]) == (0.9, "t", 3)


def test_fill_two_hits_best_run_first() -> None:
    # multilevel: values 4 -> 1 + .5/16, 3 -> .5 + .5/8, 0 -> .5 + 1/16, 5 -> .5 + .5/32;
    # budget 3: 4, then 0 and 3 tie at .5625 (0 is a hit: first), then 3: runs [3, 4] and [0]
    docs = fill([hit(4, 0.9), hit(0, 0.8)], Shape("multilevel"), 5, FETCHED, 3, _tokens)
    assert [(d.page_content, d.metadata["split_ids"]) for d in docs] == [
        ("Dd. Ee. ", [3, 4]),
        ("Aa. ", [0]),
    ]


def test_a_missing_neighbour_is_not_returned_and_ends_the_run() -> None:
    fetched = {**FETCHED, "doc/sentence/3": None}
    docs = fill([hit(4, 0.9)], Shape("multilevel"), 5, fetched, 6, _tokens)
    assert [d.metadata["split_ids"] for d in docs] == [[4, 5]]


def _tokens(text: str) -> int:
    return len(text) // 4


# Through the retriever ----------------------------------------------------------------

STORY = (
    "Rollo led the Norse. They sailed up the Seine. The king met them. "
    "A treaty was signed. Normandy was granted. The walrus is unrelated. "
    "Rollo was baptised. His heirs ruled."
)


class CountingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.mgets: list[int] = []

    def mget(self, keys: Sequence[str]) -> list[Any]:
        self.mgets.append(len(keys))
        return super().mget(keys)


def _retriever(**fields: Any) -> SmallToBigRetriever:
    doc = Document(page_content=STORY, id="s")
    fields.setdefault("mode", "window")
    return SmallToBigRetriever.from_documents([doc], BagOfWords(), **fields)


def test_one_batched_mget_of_the_neighbourhoods() -> None:
    store = CountingStore()
    retriever = _retriever(docstore=store, hybrid=False, window_size=2)
    store.mgets.clear()
    docs = retriever.invoke("Rollo", max_tokens=20)
    # seeds: the two Rollo sentences (6 + 5 tokens) and further hits until 20 tokens;
    # all their neighbourhoods in one mget
    assert len(store.mgets) == 1
    assert sum(approximate_tokens(d.page_content) for d in docs) <= 20
    for doc in docs:
        assert STORY[doc.metadata["start"] : doc.metadata["end"]] == doc.page_content


def test_sync_async_and_batch_agree_under_a_budget_with_hybrid_search() -> None:
    retriever = _retriever()
    want = retriever.invoke("walrus Rollo", max_tokens=15)
    assert asyncio.run(retriever.ainvoke("walrus Rollo", max_tokens=15)) == want
    assert retriever.batch(["walrus Rollo", "walrus Rollo"], max_tokens=15) == [want, want]
    # the rare word's sentence is the first result: BM25 ranks it first
    assert want[0].metadata["matches"][0]["split_id"] == 5


@pytest.mark.parametrize("budget", [1, 3, 7, 16, 40, 400])
def test_the_budget_is_never_exceeded_and_no_hit_is_cut(budget: int) -> None:
    retriever = _retriever(mode="multilevel")  # sentences in paragraphs in sections
    for mode in ("parent", "window", "multilevel"):
        docs = retriever.invoke("Rollo Normandy treaty", max_tokens=budget, mode=mode)
        assert sum(approximate_tokens(d.page_content) for d in docs) <= budget
        for doc in docs:
            meta = doc.metadata
            assert STORY[meta["start"] : meta["end"]] == doc.page_content
            for match in meta["matches"]:
                assert meta["start"] <= match["start"] < match["end"] <= meta["end"]
