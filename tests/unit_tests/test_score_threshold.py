"""``score_threshold``: a floor on the cosine, so that "nothing here" can be the answer.

An exact bag-of-words embedding (:class:`ExactWords`) gives cosines worked out by
hand. For the query "beta gamma delta more" (4 words): a holds 3 of its 4 words,
3 / sqrt(4 * 4) = .75; c 2 of its 2, 2 / sqrt(2 * 4) = .7071; b 1 of its 7,
1 / sqrt(7 * 4) = .189.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_s2b import SmallToBigRetriever

from ._embeddings import ExactWords
from .test_rerank import DOCS, QUERY, Reverse, sources

MODES = ["parent", "window", "multilevel", "pack"]


def retriever(mode: str = "window", **fields: Any) -> SmallToBigRetriever:
    docs = [Document(page_content=text, id=key) for key, text in DOCS.items()]
    fields.setdefault("hybrid", False)
    return SmallToBigRetriever.from_documents(docs, ExactWords(), mode=mode, **fields)


def scored(docs: list[Document]) -> list[tuple[str, float]]:
    return [(d.metadata["source_id"], round(d.metadata["score"], 4)) for d in docs]


class TestFloor:
    @pytest.mark.parametrize("hybrid", [False, True], ids=["dense", "hybrid"])
    @pytest.mark.parametrize("mode", MODES)
    def test_results_below_the_floor_are_dropped(self, mode: str, hybrid: bool) -> None:
        r = retriever(mode, hybrid=hybrid)
        assert scored(r.invoke(QUERY, k=3)) == [("a", 0.75), ("c", 0.7071), ("b", 0.189)]
        assert scored(r.invoke(QUERY, k=3, score_threshold=0.7)) == [("a", 0.75), ("c", 0.7071)]
        assert scored(r.invoke(QUERY, k=3, score_threshold=0.72)) == [("a", 0.75)]
        assert r.invoke(QUERY, k=3, score_threshold=0.76) == []
        assert scored(r.invoke(QUERY, k=None, max_tokens=1_000, score_threshold=0.72)) == [
            ("a", 0.75)
        ]

    @pytest.mark.parametrize("mode", MODES)
    def test_field_per_call_sync_async_batch(self, mode: str) -> None:
        r = retriever(mode, score_threshold=0.72)
        want = [("a", 0.75)]
        assert scored(r.invoke(QUERY, k=3)) == want
        assert scored(asyncio.run(r.ainvoke(QUERY, k=3))) == want
        assert [scored(d) for d in r.batch([QUERY, "gamma"], k=3)] == [want, []]
        assert [scored(d) for d in asyncio.run(r.abatch([QUERY], k=3))] == [want]
        assert len(r.invoke(QUERY, k=3, score_threshold=None)) == 3  # per call: off

    def test_the_scale_is_the_querys_own_all_scores(self) -> None:
        r = retriever("window", hybrid=True)
        every = {d.metadata["source_id"]: d.metadata["fused_score"] for d in r.invoke(QUERY, k=3)}
        kept = r.invoke(QUERY, k=3, score_threshold=0.7)
        assert {d.metadata["source_id"]: d.metadata["fused_score"] for d in kept} == {
            "a": every["a"],
            "c": every["c"],
        }

    def test_no_match_below_the_floor(self) -> None:
        # one source: a's and c's sentences are one paragraph (.75 and .7071), b's another
        text = f"{DOCS['a']} {DOCS['c']}\n\n{DOCS['b']}"
        r = SmallToBigRetriever.from_documents(
            [Document(page_content=text, id="s")], ExactWords(), mode="multilevel", hybrid=False
        )
        (doc,) = r.invoke(QUERY, k=1, score_threshold=0.72)
        assert [round(m["score"], 4) for m in doc.metadata["matches"]] == [0.75]
        assert doc.page_content == f"{DOCS['a']} {DOCS['c']}\n\n"  # the paragraph

    def test_nothing_deeper_is_searched_once_the_floor_is_passed(self) -> None:
        # 200 sources share no word with the query (cosine 0): a, c, b and then zeros
        docs = [Document(page_content=t, id=k) for k, t in DOCS.items()]
        docs += [Document(page_content=f"Other{i} words{i}.", id=f"o{i}") for i in range(200)]
        r = SmallToBigRetriever.from_documents(docs, ExactWords(), mode="parent", hybrid=False)
        index = r._io.index
        depths: list[int] = []
        search = index.search

        def counted(vector: Any, query: str, fetch: int, flt: Any) -> Any:
            depths.append(fetch)
            return search(vector, query, fetch, flt)

        index.search = counted  # type: ignore[method-assign]
        assert scored(r.invoke(QUERY, k=4, score_threshold=0.5)) == [("a", 0.75), ("c", 0.7071)]
        assert depths == [16]  # the 16th best scores 0, below the floor: one search

    def test_dropped_before_the_reranker_and_the_budget(self) -> None:
        # Reverse puts b (.189) first; b's 10 tokens would fill a budget of 10 on their own
        r = retriever("window", reranker=Reverse())
        assert sources(r.invoke(QUERY, k=1)) == ["b"]
        assert sources(r.invoke(QUERY, k=1, score_threshold=0.7)) == ["c"]
        budget = r.invoke(QUERY, k=None, max_tokens=10)
        assert [(d.metadata["source_id"], d.metadata["tokens"]) for d in budget] == [("b", 10)]
        floored = r.invoke(QUERY, k=None, max_tokens=10, score_threshold=0.7)
        assert [(d.metadata["source_id"], d.metadata["tokens"]) for d in floored] == [
            ("c", 3),
            ("a", 6),
        ]

    def test_saved_and_loaded(self, tmp_path: Any) -> None:
        r = retriever("window", score_threshold=0.72)
        r.save(tmp_path / "s")
        embedding = r.vectorstore.embeddings
        assert embedding is not None
        loaded = SmallToBigRetriever.load(tmp_path / "s", embedding)
        assert loaded.score_threshold == 0.72


class TestValidation:
    @pytest.mark.parametrize("bad", [1.5, -2, float("nan"), float("inf"), True, "0.5"])
    def test_refused_in_one_line(self, bad: Any) -> None:
        message = (
            r"^score_threshold must be a cosine from -1 to 1, or None \(off\); "
            f"got {re.escape(repr(bad))}\\.$"
        )
        r = retriever()
        with pytest.raises(ValueError, match=message):
            r.invoke(QUERY, score_threshold=bad)

    @pytest.mark.parametrize("bad", [1.5, float("nan")])
    def test_the_field_too(self, bad: float) -> None:
        with pytest.raises(ValueError, match=r"^SmallToBigRetriever: score_threshold must be"):
            retriever(score_threshold=bad)

    @pytest.mark.parametrize("good", [-1, 0, 1, 0.5])
    def test_the_range(self, good: float) -> None:
        assert isinstance(retriever().invoke(QUERY, score_threshold=good), list)
