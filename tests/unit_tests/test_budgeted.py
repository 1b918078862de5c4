"""Retrieval told a budget: a ceiling over each mode's shape, ``k=None`` as many as fit.

Every test asserts what comes back, worked out by hand with an exact
bag-of-words embedding (:class:`ExactWords`): a sentence sharing no word with
the query scores exactly 0, and one sharing ``s`` of its ``n`` words with a
query of ``m`` words scores ``s / sqrt(n m)``. A retriever that returned
nothing would fail every one of them.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.budget import approximate_tokens
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.splitters import SentenceSplitter, paragraph_splitter
from langchain_s2b.core.tree import Level

from ._embeddings import ExactWords

# Through the retriever: the findings of the budget issue, each with its exact answer ------

DOC_A = (
    "Intro one here. Alpha sits first. Beta comes next. Gamma ends it. Outro two here.\n\n"
    "Other para text. More filler words. Last filler line."
)
PARA_A = DOC_A[: DOC_A.index("Other")]  # sentences 0-4 of A
STRAY = "Zeta sits alone among many other long words here near the end."  # 12 words
FILLER = [
    "Boats float on water. Ropes hold them. " * 3 + STRAY,
    "Stones lie in rivers. Fish swim past. " * 4,
    "Clouds drift over hills. Rain falls later. " * 4,
]


class CountingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.mgets: list[int] = []

    def mget(self, keys: Sequence[str]) -> list[Any]:
        self.mgets.append(len(keys))
        return super().mget(keys)


SENTENCES_IN_PARAGRAPHS = [
    Level("sentence", SentenceSplitter()),
    Level("paragraph", paragraph_splitter()),
]


def corpus_retriever(mode: str, **fields: Any) -> SmallToBigRetriever:
    """Document ``a`` and three documents that share no word with the queries below."""
    docs = [Document(page_content=DOC_A, id="a")]
    docs += [Document(page_content=text, id=f"f{i}") for i, text in enumerate(FILLER)]
    fields.setdefault("hybrid", False)
    if mode == "parent":
        fields.setdefault("levels", SENTENCES_IN_PARAGRAPHS)
    return SmallToBigRetriever.from_documents(docs, ExactWords(), mode=mode, **fields)


MODES = ["parent", "window", "multilevel"]
WINDOWS = [DOC_A[: DOC_A.index("Gamma")], DOC_A[DOC_A.index("Gamma") : DOC_A.index("Other")]]
"""Window mode (one sentence each side) on hits 1 and 3 (or 1, 2 and 3): the second hit's
window stops where the first one's ends."""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("budget", [2_000, 100_000])
def test_three_hits_of_one_paragraph_return_that_paragraph_only(mode: str, budget: int) -> None:
    # each hit sentence scores 1/3 (one of 3 words), every other sentence 0: the paragraph
    # (parent and multilevel) or the windows of the hits, whole, and nothing else
    docs = corpus_retriever(mode).invoke("alpha beta gamma", k=None, max_tokens=budget)
    want = WINDOWS if mode == "window" else [PARA_A]
    assert [d.page_content for d in docs] == want
    assert [d.metadata["tokens"] for d in docs] == [math.ceil(len(t) / 4) for t in want]
    assert [d.metadata["level"] for d in docs] == [
        "window" if mode == "window" else "paragraph"
    ] * len(want)
    meta = docs[0].metadata
    assert (meta["source_id"], meta["start"], meta["end"]) == ("a", 0, len(want[0]))
    assert [m["split_id"] for m in meta["matches"]] == ([1, 2] if mode == "window" else [1, 2, 3])
    assert meta["score"] == pytest.approx(1 / 3)
    assert "cut_from" not in meta
    if mode == "multilevel":
        assert (meta["escalation"], meta["context"]) == ("single-parent", 0)


@pytest.mark.parametrize("mode", ["window", "multilevel"])
def test_two_hits_in_one_paragraph_never_bring_the_whole_document(mode: str) -> None:
    docs = corpus_retriever(mode).invoke("alpha gamma", k=None, max_tokens=100_000)
    assert [d.page_content for d in docs] == (WINDOWS if mode == "window" else [PARA_A])
    assert docs[0].metadata["score"] == pytest.approx(1 / math.sqrt(6))


def test_a_weak_stray_hit_seeds_nothing() -> None:
    # "alpha sits first" matches sentence 1 of a exactly (1.0) and the stray sentence of f0 by
    # one word of 12 (1/6): on the query's scale (31 sentences, the rest 0) that is z 5.4
    # against 0.7, outside the default margin (1 standard deviation): f0 sends nothing back
    docs = corpus_retriever("window").invoke("alpha sits first", k=None, max_tokens=100_000)
    assert [d.page_content for d in docs] == [WINDOWS[0]]
    assert [m["score"] for m in docs[0].metadata["matches"]] == [pytest.approx(1.0)]
    # with a margin wide enough the stray is evidence too, its window after the best one
    wide = corpus_retriever("window").invoke(
        "alpha sits first", k=None, max_tokens=100_000, margin=5
    )
    assert [d.metadata["source_id"] for d in wide] == ["a", "f0"]
    assert wide[1].page_content == "Ropes hold them. " + STRAY


def test_a_budget_below_every_hit_returns_nothing_after_one_search() -> None:
    # sentence i is "Alpha" and i words of its own: it scores 1/sqrt(i + 1) for "alpha"
    text = " ".join(" ".join(["Alpha", *(f"w{i}x{j}" for j in range(i))]) + "." for i in range(300))
    store = CountingStore()
    retriever = SmallToBigRetriever.from_documents(
        [Document(page_content=text, id="big")],
        ExactWords(size=50_000),
        mode="window",
        docstore=store,
        hybrid=False,
    )
    index = retriever._io.index
    searches: list[int] = []
    search = index.search

    def counting(vector: Any, query: str, fetch: int, flt: Any) -> Any:
        searches.append(fetch)
        return search(vector, query, fetch, flt)

    index.search = counting  # type: ignore[method-assign]
    store.mgets.clear()
    # "Alpha. " alone costs 2 tokens; k=None reads the query's scale: 100 deep
    assert retriever.invoke("alpha", k=None, max_tokens=1) == []
    assert (searches, store.mgets) == ([100], [])
    # one more token: the best window (sentences 0-1) is cut to its hit
    docs = retriever.invoke("alpha", k=1, max_tokens=2)
    assert [d.page_content for d in docs] == ["Alpha. "]
    assert docs[0].metadata["escalation"] == "cut"
    assert (searches, store.mgets) == ([100, 16], [2])  # the window's two sentences


def test_under_hybrid_search_the_score_stays_the_cosine() -> None:
    retriever = corpus_retriever("multilevel", hybrid=True)
    (doc,) = retriever.invoke("alpha beta gamma", max_tokens=100_000)
    meta = doc.metadata
    assert meta["score"] == pytest.approx(1 / 3)
    assert [m["score"] for m in meta["matches"]] == [pytest.approx(1 / 3)] * 3
    # the fused rank score has its own name, on the result and on each match
    fused = [m["fused_score"] for m in meta["matches"]]
    assert meta["fused_score"] == max(fused)
    assert all(abs(f - 1 / 3) > 0.01 for f in fused)


def test_multilevel_contexts_of_the_automatic_budget() -> None:
    # two hits in sections far apart: their common node is the whole document (~1,580
    # tokens), over the 1,024 a call without max_tokens may return, so each hit gets the
    # smallest node that covers it and fits: its own paragraph
    part = "Filler words fill this paragraph well enough today. " * 10
    text = (
        "# One\n\nNeedle here first.\n\n"
        + (part + "\n\n") * 6
        + "# Two\n\nNeedle there too.\n\n"
        + (part + "\n\n") * 6
    )
    retriever = SmallToBigRetriever.from_documents(
        [Document(page_content=text, id="long")], ExactWords(), mode="multilevel", hybrid=False
    )
    docs = retriever.invoke("needle")
    assert [d.page_content for d in docs] == ["Needle here first.\n\n", "Needle there too.\n\n"]
    assert [(d.metadata["context"], d.metadata["escalation"]) for d in docs] == [
        (0, "single-parent"),
        (0, "single-parent"),
    ]
    # told more than the document, the document comes back whole
    (whole,) = retriever.invoke("needle", max_tokens=100_000)
    assert (whole.page_content, whole.metadata["level"]) == (text, "doc")
    assert whole.metadata["tokens"] == approximate_tokens(text) > 1_024


def test_on_missing_holds_under_a_budget(caplog: pytest.LogCaptureFixture) -> None:
    retriever = corpus_retriever("window")
    retriever.docstore.mdelete(["a/sentence/2"])  # the hit "Beta comes next."
    with pytest.raises(MissingNodeError, match=r"'a/sentence/2' is in the child index but not"):
        retriever.invoke("alpha beta gamma", k=None, max_tokens=2_000)
    skipping = retriever.model_copy(update={"on_missing": "skip"})
    with caplog.at_level(logging.WARNING, logger="langchain_s2b"):
        docs = skipping.invoke("alpha beta gamma", k=None, max_tokens=2_000)
    # the first window holds the missing hit: skipped; the second comes back whole
    assert [d.page_content for d in docs] == [WINDOWS[1]]
    assert "Skipped 1 result(s) whose nodes are missing" in caplog.text
    # a whole parent or paragraph needs no leaf: the docstore's node is what comes back
    for mode in ("parent", "multilevel"):
        other = corpus_retriever(mode)
        other.docstore.mdelete(["a/sentence/2"])
        assert [
            d.page_content for d in other.invoke("alpha beta gamma", k=None, max_tokens=2_000)
        ] == [PARA_A]


def test_sync_async_and_batch_agree_under_a_budget_with_hybrid_search() -> None:
    retriever = corpus_retriever("window", hybrid=True)
    want = retriever.invoke("alpha gamma", k=None, max_tokens=15)
    assert want, "the budget fits both hits"
    assert asyncio.run(retriever.ainvoke("alpha gamma", k=None, max_tokens=15)) == want
    assert retriever.batch(["alpha gamma", "alpha gamma"], k=None, max_tokens=15) == [want, want]


@pytest.mark.parametrize("budget", [1, 3, 4, 7, 16, 40, 400])
def test_the_budget_is_never_exceeded_and_every_result_holds_a_hit(budget: int) -> None:
    retriever = corpus_retriever("multilevel")
    for mode in [*MODES, "pack"]:
        docs = retriever.invoke("alpha beta gamma", k=None, max_tokens=budget, mode=mode)
        assert sum(d.metadata["tokens"] for d in docs) <= budget
        for doc in docs:
            meta = doc.metadata
            assert DOC_A[meta["start"] : meta["end"]] == doc.page_content
            assert meta["tokens"] == approximate_tokens(doc.page_content)
            assert meta["matches"]
            for match in meta["matches"]:
                assert meta["start"] <= match["start"] < match["end"] <= meta["end"]
        # the three hits cost 5, 5 and 4 tokens: below 4 nothing fits
        assert bool(docs) == (budget >= 4)
