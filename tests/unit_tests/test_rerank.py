"""A reranker before the evidence and the budget: its order counts, its failures are one line.

A deterministic reranker (:class:`WordOverlap`: the query words a child holds)
reorders what an exact bag-of-words embedding ranked. Every expected answer is
worked out from the text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.core.ranking import RerankerError

from ._embeddings import ExactWords
from ._rerankers import DropsAll, Failing, Stranger, WordOverlap

# One sentence each. For "beta gamma delta more" (QUERY) the cosines are a 3/sqrt(16) = .75,
# c 2/sqrt(8) = .707, b 1/sqrt(28) = .189: the search ranks a, c, b. WordOverlap counts the
# query words held: a 3, c 2, b 1 (the same order); Reverse turns the search's order round.
DOCS = {
    "a": "Alpha beta gamma delta.",
    "b": "Alpha alone here now then more words.",
    "c": "Beta gamma.",
}


class Reverse(WordOverlap):
    """The search's order backwards, with no scores: only the order speaks."""

    def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> Any:
        self.calls += 1
        return list(reversed(list(documents)))


class NumpyScores(WordOverlap):
    """The search's order backwards, scored 0.3, 0.2, 0.1 as ``numpy.float32`` (as FlashRank)."""

    given: tuple[Any, ...] = (np.float32(0.3), np.float32(0.2), np.float32(0.1))

    def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> Any:
        self.calls += 1
        return [
            Document(
                page_content=d.page_content,
                metadata={**d.metadata, "relevance_score": score},
                id=d.id,
            )
            for d, score in zip(reversed(list(documents)), self.given, strict=False)
        ]


def retriever(mode: str = "window", **fields: Any) -> SmallToBigRetriever:
    docs = [Document(page_content=text, id=key) for key, text in DOCS.items()]
    fields.setdefault("hybrid", False)
    return SmallToBigRetriever.from_documents(docs, ExactWords(), mode=mode, **fields)


def sources(docs: list[Document]) -> list[str]:
    return [d.metadata["source_id"] for d in docs]


QUERY = "beta gamma delta more"


class TestOrder:
    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel", "pack"])
    def test_the_rerankers_order_is_the_order(self, mode: str) -> None:
        plain = retriever(mode).invoke(QUERY, k=3)
        assert sources(plain)[:2] == ["a", "c"]
        reranked = retriever(mode, reranker=Reverse()).invoke(QUERY, k=3)
        if mode in ("parent", "window"):  # one result per child: b, c, a
            assert sources(reranked) == ["b", "c", "a"]
        else:  # contexts and runs: the best one first
            assert sources(reranked)[0] == "b"

    def test_scores_stay_cosines_and_the_rerank_score_is_its_own(self) -> None:
        docs = retriever(reranker=Reverse()).invoke(QUERY, k=3)
        # no relevance_score given: the place, (n - p) / n over the 3 it kept
        assert [d.metadata["rerank_score"] for d in docs] == [1.0, 2 / 3, 1 / 3]
        assert [m["rerank_score"] for d in docs for m in d.metadata["matches"]] == [
            1.0,
            2 / 3,
            1 / 3,
        ]
        assert [round(d.metadata["score"], 3) for d in docs] == [0.189, 0.707, 0.75]

    def test_a_relevance_score_given_is_the_rerank_score(self) -> None:
        docs = retriever(reranker=WordOverlap()).invoke(QUERY, k=3)
        # a holds beta, gamma, delta (3 of its 4 words); c beta, gamma (2 of 2); b more (1 of 7)
        assert sources(docs) == ["a", "c", "b"]
        assert [d.metadata["rerank_score"] for d in docs] == [
            pytest.approx(3 - 4 / 1000),
            pytest.approx(2 - 2 / 1000),
            pytest.approx(1 - 7 / 1000),
        ]

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel", "pack"])
    def test_numpy_scores_are_scores(self, mode: str) -> None:
        # b, c, a scored 0.3, 0.2, 0.1: the scores given, not the places (1, 2/3, 1/3)
        docs = retriever(mode, reranker=NumpyScores()).invoke(QUERY, k=3)
        want = [float(np.float32(x)) for x in (0.3, 0.2, 0.1)]
        assert [m["rerank_score"] for d in docs for m in d.metadata["matches"]] == want
        assert sources(docs)[0] == "b"

    @pytest.mark.parametrize(
        "given", [np.int64(3), 3, np.float64(0.5), 0.5], ids=["np.int64", "int", "np.f64", "f"]
    )
    def test_every_real_number_is_a_score(self, given: Any) -> None:
        r = retriever(reranker=NumpyScores(given=(given, given, given)))
        assert [d.metadata["rerank_score"] for d in r.invoke(QUERY, k=3)] == [float(given)] * 3

    def test_a_bool_is_no_score(self) -> None:
        r = retriever(reranker=NumpyScores(given=(True, False, True)))
        assert [d.metadata["rerank_score"] for d in r.invoke(QUERY, k=3)] == [1.0, 2 / 3, 1 / 3]

    @pytest.mark.parametrize("bad", [np.float32("nan"), float("inf"), np.float64("-inf")])
    def test_nan_and_infinities_are_refused_in_one_line(self, bad: Any) -> None:
        r = retriever(reranker=NumpyScores(given=(np.float32(0.3), bad, np.float32(0.1))))
        message = (
            rf"^The reranker NumpyScores gave relevance_score {float(bad)!r} "
            r"to child 'c/sentence/0'; it must be a finite number: "
            r"scores are compared on their z-scores\.$"
        )
        with pytest.raises(RerankerError, match=message):
            r.invoke(QUERY, k=3)
        with pytest.raises(RerankerError, match=message):
            asyncio.run(r.ainvoke(QUERY, k=3))

    def test_what_it_drops_is_gone(self) -> None:
        docs = retriever(reranker=WordOverlap(top_n=2)).invoke(QUERY, k=3)
        assert sources(docs) == ["a", "c"]  # b was dropped; nothing deeper is searched

    def test_under_a_budget_the_evidence_is_what_it_ranks(self) -> None:
        docs = retriever(reranker=Reverse()).invoke(QUERY, k=None, max_tokens=1_000)
        assert sources(docs) == ["b", "c", "a"]

    def test_sync_async_batch_hybrid_and_a_filter(self) -> None:
        r = retriever(reranker=Reverse(), hybrid=True)
        want = r.invoke(QUERY, k=3)
        assert sources(want) == ["b", "c", "a"]
        assert asyncio.run(r.ainvoke(QUERY, k=3)) == want
        assert r.batch([QUERY, QUERY], k=3) == [want, want]
        assert sources(r.invoke(QUERY, k=3, filter={"source_id": {"$in": ["a", "c"]}})) == [
            "c",
            "a",
        ]

    def test_a_per_call_reranker_and_none(self) -> None:
        r = retriever(reranker=Reverse())
        assert sources(r.invoke(QUERY, k=3, reranker=None)) == ["a", "c", "b"]
        assert sources(retriever().invoke(QUERY, k=3, reranker=Reverse())) == ["b", "c", "a"]


class TestFailures:
    @pytest.mark.parametrize(
        ("reranker", "message"),
        [
            (
                Failing(),
                r"^The reranker Failing failed on 3 children: "
                r"ConnectionError: 503 Service Unavailable$",
            ),
            (
                Stranger(),
                r"^The reranker Stranger returned a document it was not given \(id 'nowhere', "
                r"text 'made up'\); it must return some of the 3 children it got, reordered\.$",
            ),
            (DropsAll(), r"^The reranker DropsAll dropped all 3 children it was given\.$"),
        ],
    )
    def test_one_line_and_the_retriever_goes_on(self, reranker: Any, message: str) -> None:
        r = retriever(reranker=reranker)
        with pytest.raises(RerankerError, match=message):
            r.invoke(QUERY, k=3)
        with pytest.raises(RerankerError, match=message):
            asyncio.run(r.ainvoke(QUERY, k=3))
        assert sources(r.invoke(QUERY, k=3, reranker=None)) == ["a", "c", "b"]

    def test_not_a_compressor_is_refused_in_one_line(self) -> None:
        with pytest.raises(ValueError, match=r"^SmallToBigRetriever: reranker: .*BaseDocument"):
            retriever(reranker="cross-encoder")
        with pytest.raises(ValueError, match=r"^reranker must be a LangChain BaseDocument"):
            retriever().invoke(QUERY, reranker="cross-encoder")
