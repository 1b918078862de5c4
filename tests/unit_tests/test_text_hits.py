"""BM25's list with its leaves the dense search missed, scored in one request (issue 34).

``SearchText`` answers hybrid fusion with BM25's list and, for each leaf of it
outside the dense hits, that leaf scored as ``LeafHits`` scores it. A
``FaissIndex`` joins the two on rows (the row column BM25 reads its keys
from), unless a write came between. The reference here is the old way: the list,
then every missing key looked up by key and scored in one ``leaf_hits`` call.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.keys import is_proxy_key
from langchain_s2b.core.requests import TextHits
from langchain_s2b.store.children import HybridChildIndex, child_index
from langchain_s2b.store.vectors import records

from ._embeddings import BagOfWords

WORDS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "peach", "olive", "quince"]


def _sources(n: int) -> list[Document]:
    """``n`` sources of 6 sentences, each naming fruits; every third source is topic ``b``."""
    return [
        Document(
            page_content=" ".join(
                f"{WORDS[(i + j) % 10].title()} {WORDS[(i * 3 + j) % 10]} {WORDS[j % 7]} part {j}."
                for j in range(6)
            ),
            metadata={"topic": "b" if i % 3 == 0 else "a"},
            id=f"s{i:02d}",
        )
        for i in range(n)
    ]


def _index(store: Any, gone: list[int]) -> tuple[SmallToBigRetriever, HybridChildIndex]:
    retriever = SmallToBigRetriever(vectorstore=store, mode="window", hybrid=True)
    retriever.add_documents(_sources(12))  # 72 sentences
    retriever.delete([f"s{i:02d}" for i in gone])
    return retriever, HybridChildIndex(store)


def _by_keys(index: HybridChildIndex, query: str, n: int, flt: Any, known: set[str]) -> TextHits:
    """The old way: BM25's list, then its missing keys scored through their keys."""
    vector = index.embed_query(query)
    found = index.search_text(query, n, flt)
    missing = [key for key, _ in found if key not in known and not is_proxy_key(key)]
    scored = index.leaf_hits(missing, flt, vector)
    return TextHits(found, {key: scored.get(key) for key in missing})


FILTERS = [
    None,
    {"topic": "b"},  # on the sources: selected before BM25 ranks
    {"start": {"$gte": 20}},  # per leaf: BM25's keys read from its stored fields
    lambda meta: meta.get("topic") == "a",
]


class TestTheJoinOnRows:
    @settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        gone=st.lists(st.integers(0, 11), max_size=4, unique=True),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        n=st.integers(1, 30),
        flt=st.sampled_from(range(len(FILTERS))),
        known_every=st.integers(1, 4),
    )
    def test_faiss_scores_bm25s_missing_leaves_as_leaf_hits_does_by_key(
        self, gone: list[int], words: list[str], n: int, flt: int, known_every: int
    ) -> None:
        _, index = _index(FaissIndex(BagOfWords()), gone)
        query = " ".join(words)
        listed = [key for key, _ in index.search_text(query, n, FILTERS[flt])]
        known = set(listed[::known_every])  # as if the dense search had returned these
        vector = index.embed_query(query)
        got = index.text_hits(query, n, FILTERS[flt], vector, frozenset(known))
        assert got == _by_keys(index, query, n, FILTERS[flt], known)

    def test_a_worked_example(self) -> None:
        _, index = _index(FaissIndex(BagOfWords()), [1])
        vector = index.embed_query("quince")
        found = index.search_text("quince", 100, None)
        keys = [key for key, _ in found]
        assert sorted(keys) == sorted(
            f"s{i:02d}/sentence/{j}"
            for i in range(12)
            for j in range(6)
            if i != 1 and "quince" in {WORDS[(i + j) % 10], WORDS[(i * 3 + j) % 10]}
        )
        got = index.text_hits("quince", 100, None, vector, frozenset(keys[:2]))
        assert got.hits == found
        assert list(got.scored) == keys[2:]
        scores = index.faiss.scores_of(vector, index.faiss.rows_of(keys[2:]))  # type: ignore[union-attr]
        assert scores is not None
        for (key, hit), score in zip(got.scored.items(), scores.tolist(), strict=True):
            assert hit is not None
            assert (hit.key, hit.score) == (key, score)

    def test_no_key_is_parsed_back_to_its_row(self, monkeypatch: pytest.MonkeyPatch) -> None:
        _, index = _index(FaissIndex(BagOfWords()), [])
        parsed: list[str] = []
        inner = records.Records.node_rows

        def counted(self: records.Records, keys: Any) -> Any:
            parsed.extend(keys)
            return inner(self, keys)

        monkeypatch.setattr(records.Records, "node_rows", counted)
        got = index.text_hits("apple plum", 40, None, index.embed_query("apple plum"), frozenset())
        assert list(got.scored) == [key for key, _ in got.hits]  # 38 leaves name either
        assert len(got.hits) == 38
        assert all(hit is not None for hit in got.scored.values())
        assert parsed == []

    @settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        gone=st.lists(st.integers(0, 11), max_size=4, unique=True),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
        n=st.integers(1, 30),
        known_every=st.integers(1, 4),
    )
    def test_unfiltered_faiss_scores_in_one_pass(
        self, gone: list[int], words: list[str], n: int, known_every: int
    ) -> None:
        """Without a filter, every leaf BM25 found was located by its search: they are scored
        at those rows in one pass, the general path (each key's row looked up again, the hits
        built from the search's rows) is never taken, and the answer is the by-key reference's."""
        _, index = _index(FaissIndex(BagOfWords()), gone)
        query = " ".join(words)
        listed = [key for key, _ in index.search_text(query, n, None)]
        known = set(listed[::known_every])
        want = _by_keys(index, query, n, None, known)
        vector = index.embed_query(query)
        with pytest.MonkeyPatch.context() as patch:

            def refused(*_: Any) -> Any:
                raise AssertionError("the general path was taken")

            patch.setattr(child_index, "_node_rows", refused)
            patch.setattr(child_index, "_faiss_hits", refused)
            got = index.text_hits(query, n, None, vector, frozenset(known))
        assert got == want
        assert list(got.scored) == [key for key in listed if key not in known]


class TestOtherStores:
    @pytest.mark.parametrize("flt", range(len(FILTERS) - 1))  # a callable: FAISS and memory only
    def test_any_store_answers_as_leaf_hits_does(self, flt: int) -> None:
        _, index = _index(InMemoryVectorStore(BagOfWords()), [2])
        query = "fig lime"
        known = {key for key, _ in index.search_text(query, 8, FILTERS[flt])[::2]}
        got = index.text_hits(query, 8, FILTERS[flt], index.embed_query(query), frozenset(known))
        assert got == _by_keys(index, query, 8, FILTERS[flt], known)
        assert got.scored  # some leaves were missing, and scored

    @pytest.mark.parametrize("store", ["faiss", "memory"])
    async def test_async_answers_as_sync(self, store: str) -> None:
        emb = BagOfWords()
        vs = FaissIndex(emb) if store == "faiss" else InMemoryVectorStore(emb)
        _, index = _index(vs, [3])
        vector = index.embed_query("peach olive")
        want = index.text_hits("peach olive", 12, None, vector, frozenset())
        assert await index.atext_hits("peach olive", 12, None, vector, frozenset()) == want
        assert len(want.scored) == 12

    def test_without_a_vector_nothing_is_scored(self) -> None:
        _, index = _index(FaissIndex(BagOfWords()), [])
        got = index.text_hits("kiwi", 5, None, None, frozenset())
        assert [key for key, _ in got.hits] == [
            key for key, _ in index.search_text("kiwi", 5, None)
        ]
        assert got.scored == dict.fromkeys([key for key, _ in got.hits])


@pytest.mark.parametrize("factory", ["Flat", "HNSW32"])  # rows renumbered; tombstones
def test_a_write_between_bm25_and_the_scores_is_seen(
    monkeypatch: pytest.MonkeyPatch, factory: str
) -> None:
    """A leaf BM25 found is deleted before its score is taken: it is gone (``None``), and the
    others are scored by key after that write, never at a row read before it."""
    emb = BagOfWords()
    retriever, index = _index(FaissIndex(emb, index_factory=factory), [])
    faiss_index = index.faiss
    assert faiss_index is not None
    vector = index.embed_query("date fig")
    listed = index.search_text("date fig", 20, None)
    victim = listed[0][0]
    inner = FaissIndex.search_text

    def then_delete(self: FaissIndex, *args: Any, **kwargs: Any) -> Any:
        found = inner(self, *args, **kwargs)
        self.delete([victim])  # a write that needs no retriever's lock
        return found

    monkeypatch.setattr(FaissIndex, "search_text", then_delete)
    version = faiss_index.version
    got = index.text_hits("date fig", 20, None, vector, frozenset())
    assert faiss_index.version != version
    monkeypatch.undo()
    assert got.hits == listed  # BM25 answered before the write
    keys = [key for key, _ in listed]
    scored = index.leaf_hits(keys, None, vector)  # by key, after the write
    assert victim not in scored
    assert got.scored == {key: scored.get(key) for key in keys}
    assert retriever.vectorstore is faiss_index
