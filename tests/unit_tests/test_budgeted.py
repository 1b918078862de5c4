"""Retrieval told a budget: a ceiling seeded by the evidence, hits first, one search, one fetch.

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
from langchain_s2b.core.budgeted import Shape, evidence, fill, leaf_keys, neighbourhood
from langchain_s2b.core.hits import Hit, MissingNodeError
from langchain_s2b.core.splitters import SentenceSplitter, paragraph_splitter
from langchain_s2b.core.tree import Level

from ._embeddings import ExactWords

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


class TestEvidence:
    def test_only_hits_above_zero_and_within_the_margin_of_the_best(self) -> None:
        hits = [hit(2, 0.9), hit(4, 0.85), hit(0, 0.5), hit(1, 0.0)]
        assert evidence(hits, fetch_k=20, margin=0.1) == hits[:2]
        assert evidence(hits, fetch_k=20, margin=1.0) == hits[:3]  # never a zero score
        assert evidence(hits, fetch_k=1, margin=1.0) == hits[:1]  # among the fetch_k best
        assert evidence([hit(1, 0.0)], fetch_k=20, margin=1.0) == []
        assert evidence([], fetch_k=20, margin=1.0) == []

    def test_the_best_score_of_all_sets_the_margin_whatever_the_rank_order(self) -> None:
        # under hybrid search the rank order is the fused one: a lexical first place with a
        # lower cosine does not lower the bar
        hits = [hit(0, 0.5), hit(2, 0.9), hit(4, 0.82)]
        assert evidence(hits, fetch_k=20, margin=0.1) == [hit(2, 0.9), hit(4, 0.82)]


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
    # parent mode: hit 2 may not leave paragraph 0 (sentences 0-2); a lone hit brings the
    # neighbours worth half of it: sentence 1 (sentence 0 is worth a quarter)
    (doc,) = fill([hit(2, 0.9)], [1.0], Shape("parent", inside_parent=True), FETCHED, 3, _tokens)
    assert doc.page_content == "Bb. Cc. " == TEXT[4:12]
    meta = doc.metadata
    assert (meta["start"], meta["end"], meta["mode"], meta["escalation"]) == (
        4,
        12,
        "parent",
        "budget",
    )
    assert meta["split_ids"] == [1, 2]
    assert [m["split_id"] for m in meta["matches"]] == [2]
    assert (meta["score"], meta["topic"], meta["tokens"]) == (0.9, "t", 2)
    assert "fused_score" not in meta


def test_fill_places_both_hits_first_best_run_first() -> None:
    # budget 2: the two hits and nothing else (neighbour 3 or 5 of the best hit is worth
    # 1/2, as much as hit 0, but a hit comes first); multilevel results name their context
    docs = fill([hit(4, 0.9), hit(0, 0.8)], [1.0, 0.5], Shape("multilevel"), FETCHED, 2, _tokens)
    assert [(d.page_content, d.metadata["split_ids"], d.metadata["context"]) for d in docs] == [
        ("Ee. ", [4], 0),
        ("Aa. ", [0], 0),
    ]


def test_a_missing_neighbour_is_not_returned_and_ends_the_run() -> None:
    fetched = {**FETCHED, "doc/sentence/3": None}
    docs = fill([hit(4, 0.9)], [1.0], Shape("multilevel"), fetched, 6, _tokens)
    assert [d.metadata["split_ids"] for d in docs] == [[4, 5]]


def _tokens(text: str) -> int:
    return len(text) // 4


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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("budget", [2_000, 100_000])
def test_three_hits_of_one_paragraph_return_that_paragraph_only(mode: str, budget: int) -> None:
    # each hit sentence scores 1/3 (one of 3 words); seeds weigh 1, 1/2, 1/3 (ties in text
    # order), so the floor is 1/3: sentence 0 is worth 1/2 + 1/8 + 1/24, sentence 4
    # 1/8 + 1/8 + 1/6, both above it; sentence 5 is worth 1/16 + 1/16 + 1/12, below it.
    # In window mode each hit reaches only its own window (one sentence each side):
    # sentence 4 gets 1/6 from the third hit alone, below the floor.
    docs = corpus_retriever(mode, window_size=1).invoke("alpha beta gamma", max_tokens=budget)
    last = 3 if mode == "window" else 4
    text = PARA_A if mode != "window" else DOC_A[: DOC_A.index("Outro")]
    assert [d.page_content for d in docs] == [text]
    meta = docs[0].metadata
    assert (meta["source_id"], meta["start"], meta["end"]) == ("a", 0, len(text))
    assert meta["split_ids"] == list(range(last + 1))
    assert [m["split_id"] for m in meta["matches"]] == [1, 2, 3]
    assert meta["score"] == pytest.approx(1 / 3)
    assert meta["tokens"] == math.ceil(len(text) / 4)
    assert meta["escalation"] == "budget"
    if mode == "multilevel":
        assert meta["context"] == 0


@pytest.mark.parametrize("mode", ["window", "multilevel"])
def test_two_hits_in_one_paragraph_never_bring_the_whole_document(mode: str) -> None:
    # seeds: sentence 1 (weight 1) and 3 (1/2); floor 1/2: sentence 0 (1/2 + 1/16) and 2
    # (1/2 + 1/4) join, sentence 4 (1/8 + 1/4) does not
    docs = corpus_retriever(mode, window_size=1).invoke("alpha gamma", max_tokens=100_000)
    assert [d.page_content for d in docs] == [DOC_A[: DOC_A.index("Outro")]]
    assert docs[0].metadata["score"] == pytest.approx(1 / math.sqrt(6))


def test_a_weak_stray_hit_seeds_nothing() -> None:
    # "alpha sits first" matches sentence 1 of a exactly (1.0) and the stray sentence of f0 by
    # one word of 12 (1/6 of the best): outside the margin, so f0 sends nothing back. A lone
    # seed brings its next-door neighbours.
    docs = corpus_retriever("multilevel").invoke("alpha sits first", max_tokens=100_000)
    assert [d.page_content for d in docs] == [DOC_A[: DOC_A.index("Gamma")]]
    assert [m["score"] for m in docs[0].metadata["matches"]] == [pytest.approx(1.0)]
    # with a margin wide enough the stray is evidence too, placed after the best hit
    wide = corpus_retriever("multilevel").invoke("alpha sits first", max_tokens=100_000, margin=1)
    assert [d.metadata["source_id"] for d in wide] == ["a", "f0"]
    assert wide[1].page_content == STRAY


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
    assert retriever.invoke("alpha", max_tokens=1) == []  # "Alpha. " alone costs 2 tokens
    assert (searches, store.mgets) == ([16], [])
    # one more token, and the one hit within the margin comes back (the next scores .71)
    (doc,) = retriever.invoke("alpha", max_tokens=2)
    assert doc.page_content == "Alpha. "
    assert (searches, store.mgets) == ([16, 16], [2])  # the hit and its next-door neighbour


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
    # two hits in sections far apart: their common node is the whole document (~1,500
    # tokens), over the 1,024 a call without max_tokens may return, so that budget applies
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
    # both needle sentences score 1/sqrt(3) (one word of three), so the first ranks first
    # (text order) and weighs 1, the second 1/2: the floor is 1/2, the first brings its
    # neighbours (worth 1/2), the second none (1/4)
    assert [d.page_content for d in docs] == [
        "# One\n\nNeedle here first.\n\n" + part[: part.index("today.") + 7],
        "Needle there too.\n\n",
    ]
    assert [(d.metadata["context"], d.metadata["escalation"]) for d in docs] == [
        (0, "budget"),
        (0, "budget"),
    ]
    assert retriever.invoke("needle", max_tokens=100_000) == docs


@pytest.mark.parametrize("mode", MODES)
def test_on_missing_holds_under_a_budget(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    retriever = corpus_retriever(mode, window_size=1)
    retriever.docstore.mdelete(["a/sentence/2"])  # the hit "Beta comes next."
    with pytest.raises(MissingNodeError, match=r"'a/sentence/2' is in the child index but not"):
        retriever.invoke("alpha beta gamma", max_tokens=2_000)
    skipping = retriever.model_copy(update={"on_missing": "skip"})
    with caplog.at_level(logging.WARNING, logger="langchain_s2b"):
        docs = skipping.invoke("alpha beta gamma", max_tokens=2_000)
    # the remaining seeds keep their ranks' weights (sentence 1: 1, sentence 3: 1/3; floor
    # 1/3): sentence 0 (1/2 + 1/24) joins the first, sentence 4 (1/8 + 1/6) does not join
    # the second; the hole ends both runs
    assert [d.page_content for d in docs] == [
        DOC_A[: DOC_A.index("Beta")],
        "Gamma ends it. ",
    ]
    assert "Skipped 1 hit(s) whose nodes are missing" in caplog.text


def test_sync_async_and_batch_agree_under_a_budget_with_hybrid_search() -> None:
    retriever = corpus_retriever("window", hybrid=True)
    want = retriever.invoke("alpha gamma", max_tokens=15)
    assert want, "the budget fits both hits"
    assert asyncio.run(retriever.ainvoke("alpha gamma", max_tokens=15)) == want
    assert retriever.batch(["alpha gamma", "alpha gamma"], max_tokens=15) == [want, want]


@pytest.mark.parametrize("budget", [1, 3, 7, 16, 40, 400])
def test_the_budget_is_never_exceeded_and_no_hit_is_cut(budget: int) -> None:
    retriever = corpus_retriever("multilevel")
    for mode in MODES:
        docs = retriever.invoke("alpha beta gamma", max_tokens=budget, mode=mode)
        assert sum(approximate_tokens(d.page_content) for d in docs) <= budget
        for doc in docs:
            meta = doc.metadata
            assert DOC_A[meta["start"] : meta["end"]] == doc.page_content
            assert meta["tokens"] == approximate_tokens(doc.page_content)
            for match in meta["matches"]:
                assert meta["start"] <= match["start"] < match["end"] <= meta["end"]
        # the three hits cost 5, 5 and 4 tokens: below 5 nothing fits, from 5 the best one
        assert bool(docs) == (budget >= 5)
