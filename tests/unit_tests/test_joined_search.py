"""Hybrid search asks BM25 in the same request as the dense search (issue 34).

Under hybrid search the core asks ``Search`` with ``lexical`` (BM25's list
length); ``FaissIndex``, unfiltered, with no proxy's own hit among the dense
hits, answers ``SearchText`` for those hits in the same request
(``Found.joined``) and the core fuses without asking again. The reference is
the two-request path, which every other store and every filtered query take:
``Search``, then ``SearchText`` with the hits' keys as ``known``. The ranking
must be the same in every field, whichever path ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.fusion import TOP_N
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.ranking import Ranked, first_depth, ranked
from langchain_s2b.core.requests import Found, Request, Search, SearchText
from langchain_s2b.retriever import _private
from langchain_s2b.store.children import HybridChildIndex
from langchain_s2b.store.runner import drive

from ._embeddings import BagOfWords
from .test_text_hits import WORDS
from .test_text_hits import _sources as _fruit_sources


def _retriever(factory: str, gone: list[int], proxied: bool = False) -> SmallToBigRetriever:
    retriever = SmallToBigRetriever(
        vectorstore=FaissIndex(BagOfWords(), index_factory=factory), mode="window", hybrid=True
    )
    docs = _fruit_sources(12)  # 72 sentences, many equal scores under both searches
    proxies = [[Proxy("quince olive summary", 0, 40)] if proxied else [] for _ in docs]
    retriever.add_documents(docs, proxies=proxies)
    retriever.delete([f"s{i:02d}" for i in gone])
    return retriever


def _ranked(
    retriever: SmallToBigRetriever, query: str, depth: int, flt: Any, joined: bool
) -> tuple[Ranked, list[type]]:
    """``ranked`` of one query, and the requests it asked; ``joined=False``: the reference
    path (each ``Found.joined`` taken away, so the core asks ``SearchText``)."""
    io = _private(retriever)["_io"]
    params = QueryParams(mode="window", hybrid=True, filter=flt)
    vector = io.index.embed_query(query)
    asked: list[type] = []

    def run(request: Request[Any]) -> Any:
        asked.append(type(request))
        answer = io.run(request)
        if not joined and isinstance(answer, Found):
            return answer._replace(joined=None)
        return answer

    return drive(ranked(query, vector, params, depth, params.fetch_k), run), asked


def _fields(ranking: Ranked) -> tuple[Any, ...]:
    """Every field of a ranking that a mode reads, relevance made."""
    return (
        ranking.hits,
        ranking.fused,
        ranking.relevance,
        ranking.scale,
        ranking.exhausted,
        ranking.last,
        ranking.bound,
    )


FILTERS: list[Any] = [None, {"topic": "b"}, lambda meta: meta.get("topic") == "a"]


class TestTheJoinedSearch:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        factory=st.sampled_from(["Flat", "HNSW32"]),  # rows renumbered on delete; tombstones
        gone=st.lists(st.integers(0, 11), max_size=4, unique=True),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        depth=st.integers(1, 80),
        flt=st.sampled_from(range(len(FILTERS))),
        proxied=st.booleans(),
    )
    def test_the_ranking_is_the_two_requests_ranking(
        self,
        factory: str,
        gone: list[int],
        words: list[str],
        depth: int,
        flt: int,
        proxied: bool,
    ) -> None:
        retriever = _retriever(factory, gone, proxied)
        query = " ".join(words)
        got, asked = _ranked(retriever, query, depth, FILTERS[flt], joined=True)
        want, reference = _ranked(retriever, query, depth, FILTERS[flt], joined=False)
        assert _fields(got) == _fields(want)
        assert reference[:2] == [Search, SearchText]
        if asked[:2] == [Search, SearchText]:  # the join was not possible: asked as before
            assert asked == reference
        else:  # joined: SearchText is never asked, nothing else changes
            assert SearchText not in asked
            assert asked == [t for t in reference if t is not SearchText]

    def test_unfiltered_faiss_asks_one_request(self) -> None:
        retriever = _retriever("Flat", [])
        depth = first_depth(QueryParams(hybrid=True))
        got, asked = _ranked(retriever, "plum fig", depth, None, True)
        want, _ = _ranked(retriever, "plum fig", depth, None, False)
        assert asked == [Search]
        assert _fields(got) == _fields(want)
        assert len(got.hits) == 72  # every sentence: the dense search reaches them all

    @pytest.mark.parametrize("flt", [{"topic": "b"}, lambda meta: True])
    def test_a_filter_asks_bm25_on_its_own(self, flt: Any) -> None:
        _, asked = _ranked(_retriever("Flat", []), "plum fig", 40, flt, True)
        assert asked == [Search, SearchText]

    def test_a_proxys_hit_among_the_dense_hits_is_not_joined(self) -> None:
        """Its covers are the core's: BM25 is asked for them, with ``known`` its leaves."""
        retriever = _retriever("Flat", [], proxied=True)
        index = _private(retriever)["_io"].index
        assert isinstance(index, HybridChildIndex)
        vector = index.embed_query("quince olive summary")
        found = index.joined_search(vector, "quince olive summary", 40, None, TOP_N)
        assert any(hit.key.split("/")[1] == "proxy" for hit in found.hits)
        assert found.joined is None

    def test_joined_is_text_hits_for_the_hits_found(self) -> None:
        retriever = _retriever("HNSW32", [2, 5])
        index = _private(retriever)["_io"].index
        assert isinstance(index, HybridChildIndex)
        vector = index.embed_query("lime date")
        found = index.joined_search(vector, "lime date", 5, None, 25)
        known = frozenset(hit.key for hit in found.hits)
        assert found._replace(joined=None) == index.search(vector, "lime date", 5, None)
        assert found.joined == index.text_hits("lime date", 25, None, vector, known)
        assert found.joined is not None
        assert found.joined.scored  # BM25 found leaves the dense search did not return

    async def test_async_answers_as_sync(self) -> None:
        retriever = _retriever("Flat", [1])
        index = _private(retriever)["_io"].index
        assert isinstance(index, HybridChildIndex)
        vector = index.embed_query("peach kiwi")
        want = index.joined_search(vector, "peach kiwi", 20, None, TOP_N)
        assert want.joined is not None
        assert await index.ajoined_search(vector, "peach kiwi", 20, None, TOP_N) == want
        filtered = await index.ajoined_search(vector, "peach kiwi", 20, {"topic": "a"}, TOP_N)
        assert filtered == index.search(vector, "peach kiwi", 20, {"topic": "a"})


@pytest.mark.parametrize("factory", ["Flat", "HNSW32"])
def test_a_write_between_the_dense_search_and_bm25_is_answered_as_two_requests(
    monkeypatch: pytest.MonkeyPatch, factory: str
) -> None:
    """A source is deleted after the dense search, before BM25 reads its list: the joined
    answer is what the two requests give with the same write between them (the dense hits
    as searched, BM25's list and scores after the write), and the retriever still answers."""
    query = "fig olive"

    def with_a_write(joined: bool) -> tuple[Ranked, list[type]]:
        retriever = _retriever(factory, [])
        faiss_index = retriever.vectorstore
        assert isinstance(faiss_index, FaissIndex)
        inner: Callable[..., Any] = FaissIndex.search_text
        done: list[bool] = []

        def search_text(self: FaissIndex, *args: Any, **kwargs: Any) -> Any:
            if not done:
                done.append(True)
                retriever.delete(["s03"])
            return inner(self, *args, **kwargs)

        monkeypatch.setattr(FaissIndex, "search_text", search_text)
        try:
            return _ranked(retriever, query, 60, None, joined)
        finally:
            monkeypatch.setattr(FaissIndex, "search_text", inner)

    got, asked = with_a_write(True)
    want, _ = with_a_write(False)
    assert asked == [Search]
    assert _fields(got) == _fields(want)
    assert got.fused is not None
    assert list(got.fused) == [hit.key for hit in got.hits]
