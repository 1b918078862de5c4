"""retriever.batch / abatch: one embedding call, one search, one fetch; same results as invoke."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.hits import RESOLUTION_EVENT
from langchain_s2b.core.splitters import size_splitter

from ._embeddings import BagOfWords

TOPICS = ["apples", "rivers", "engines", "music", "castles", "storms", "glaciers", "bees"]


def _docs() -> list[Document]:
    docs = []
    for n, topic in enumerate(TOPICS):
        paragraphs = []
        for p in range(4):
            sentences = [
                f"Sentence {s} of part {p} says {topic} matter to {TOPICS[(n + s + p) % 8]}."
                for s in range(5)
            ]
            paragraphs.append(" ".join(sentences))
        docs.append(Document(page_content="\n\n".join(paragraphs), id=f"doc-{topic}"))
    return docs


QUERIES = [f"{a} and {b}" for a in TOPICS for b in TOPICS][:64]


def _retriever(
    mode: str, embedding: Embeddings | None = None, **fields: Any
) -> SmallToBigRetriever:
    if mode == "parent":
        fields.setdefault("child_splitter", size_splitter(12))
        fields.setdefault("parent_splitter", size_splitter(60))
    fields.setdefault("k", 3)
    fields.setdefault("fetch_k", 6)
    return SmallToBigRetriever.from_documents(
        _docs(), embedding or BagOfWords(), mode=mode, **fields
    )


def _same(batched: list[list[Document]], looped: list[list[Document]]) -> None:
    assert len(batched) == len(looped)
    for got, want in zip(batched, looped, strict=True):
        assert [d.page_content for d in got] == [d.page_content for d in want]
        assert [d.id for d in got] == [d.id for d in want]
        for a, b in zip(got, want, strict=True):
            assert a.metadata["score"] == pytest.approx(b.metadata["score"], abs=1e-6)
            rest_a = {k: v for k, v in a.metadata.items() if k not in ("score", "matches")}
            rest_b = {k: v for k, v in b.metadata.items() if k not in ("score", "matches")}
            assert rest_a == rest_b
            spans_a = [(m["start"], m["end"]) for m in a.metadata["matches"]]
            assert spans_a == [(m["start"], m["end"]) for m in b.metadata["matches"]]


class Counting(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[str] = []
        self.ends: list[int] = []
        self.errors: list[BaseException] = []
        self.events: list[str] = []
        self.tags: list[list[str]] = []

    def on_retriever_start(
        self, serialized: Any, query: str, *, tags: list[str] | None = None, **kwargs: Any
    ) -> None:
        self.starts.append(query)
        self.tags.append(sorted(tags or []))

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.ends.append(len(documents))

    def on_retriever_error(self, error: BaseException, **kwargs: Any) -> None:
        self.errors.append(error)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append(name)


class TestBatchResults:
    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
    def test_batch_equals_a_loop_of_invoke(self, mode: str) -> None:
        retriever = _retriever(mode)
        _same(retriever.batch(QUERIES), [retriever.invoke(q) for q in QUERIES])

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel", "pack"])
    def test_batch_under_a_budget_equals_a_loop_of_invoke(self, mode: str) -> None:
        # a reached ceiling reads leaves (ReadLeaves): the batch reads them for every query
        retriever = _retriever(mode)
        got = retriever.batch(QUERIES[:16], max_tokens=60)
        assert all(got)
        _same(got, [retriever.invoke(q, max_tokens=60) for q in QUERIES[:16]])

    @pytest.mark.parametrize("mode", ["parent", "window"])
    def test_per_call_overrides_apply_to_every_query(self, mode: str) -> None:
        retriever = _retriever(mode)
        got = retriever.batch(QUERIES[:10], k=1, window_size=0)
        assert all(len(docs) == 1 for docs in got)
        _same(got, [retriever.invoke(q, k=1, window_size=0) for q in QUERIES[:10]])

    async def test_abatch_equals_a_loop_of_ainvoke(self) -> None:
        retriever = _retriever("window")
        looped = [await retriever.ainvoke(q) for q in QUERIES[:20]]
        _same(await retriever.abatch(QUERIES[:20]), looped)

    def test_any_vectorstore_as_child_index(self) -> None:
        built = _retriever("window")
        generic = InMemoryVectorStore(BagOfWords())
        generic.add_documents(built.vectorstore.get_by_ids(built.vectorstore.keys()))  # type: ignore[attr-defined]
        retriever = SmallToBigRetriever(
            vectorstore=generic, docstore=built.docstore, mode="window", k=3, fetch_k=6
        )
        _same(retriever.batch(QUERIES[:12]), [retriever.invoke(q) for q in QUERIES[:12]])

    def test_overfetch_rounds_match_invoke(self) -> None:
        retriever = _retriever("parent", fetch_k=1)
        _same(retriever.batch(QUERIES[:16], k=4), [retriever.invoke(q, k=4) for q in QUERIES[:16]])

    def test_empty_batch(self) -> None:
        assert _retriever("window").batch([]) == []


class CountingFake(DeterministicFakeEmbedding):
    """embed_documents == embed_query semantics: a batch of queries is one call.

    The model says so itself, by offering ``embed_queries``; the library no
    longer special-cases test doubles.
    """

    calls: list[str] = []  # noqa: RUF012 - reset per test

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(f"documents:{len(texts)}")
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.calls.append("query")
        return super().embed_query(text)


class Prefixed(BagOfWords):
    """A model whose queries differ from passages (like E5's ``query: `` prefix)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    def embed_query(self, text: str) -> list[float]:
        self.log.append("query")
        return super().embed_query("query " + text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.log.append(f"documents:{len(texts)}")
        return super().embed_documents(texts)


class PrefixedBatched(Prefixed):
    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.log.append(f"queries:{len(texts)}")
        return [BagOfWords.embed_query(self, "query " + t) for t in texts]


class TestBatchIO:
    def test_symmetric_model_embeds_all_queries_in_one_call(self) -> None:
        embedding = CountingFake(size=32)
        retriever = _retriever("window", embedding)
        embedding.calls.clear()
        retriever.batch(QUERIES)
        assert embedding.calls == [f"documents:{len(QUERIES)}"]

    def test_prefixed_model_without_batch_method_embeds_each_query_as_a_query(self) -> None:
        embedding = Prefixed()
        retriever = _retriever("window", embedding)
        embedding.log.clear()
        got = retriever.batch(QUERIES[:8])
        assert embedding.log == ["query"] * 8
        _same(got, [retriever.invoke(q) for q in QUERIES[:8]])

    def test_embed_queries_is_used_when_the_model_has_it(self) -> None:
        embedding = PrefixedBatched()
        retriever = _retriever("window", embedding)
        embedding.log.clear()
        got = retriever.batch(QUERIES[:8])
        assert embedding.log == ["queries:8"]
        _same(got, [retriever.invoke(q) for q in QUERIES[:8]])

    @pytest.mark.parametrize("fetch_k", [6, 40])
    def test_one_faiss_search_per_round_and_one_fetch(
        self, monkeypatch: pytest.MonkeyPatch, fetch_k: int
    ) -> None:
        docstore = InMemoryStore()
        retriever = _retriever("window", docstore=docstore, fetch_k=fetch_k)
        index = retriever.vectorstore
        assert isinstance(index, FaissIndex)
        searches: list[tuple[int, int]] = []
        fetches: list[int] = []
        search_rows, mget = index.search_rows, docstore.mget

        def counted_search(queries: Any, k: int) -> Any:
            searches.append((len(queries), k))
            return search_rows(queries, k)

        def counted_mget(keys: Any) -> Any:
            fetches.append(len(keys))
            return mget(keys)

        monkeypatch.setattr(index, "search_rows", counted_search)
        monkeypatch.setattr(docstore, "mget", counted_mget)
        retriever.batch(QUERIES)
        # Round one searches every query as one matrix; an over-fetch round searches
        # only the queries that still lack k windows, again as one matrix. A search is
        # one deeper than the fetch, to see whether the fetch cuts a group of equal scores;
        # under hybrid search (the default) the first is 100 deep: the query's scale.
        assert searches[0] == (len(QUERIES), 101)
        fetch_sizes = [k for _, k in searches]
        assert fetch_sizes == sorted(set(fetch_sizes))
        assert searches == [(len(QUERIES), 101)]
        plain = _retriever("window", docstore=InMemoryStore(), fetch_k=fetch_k, hybrid=False)
        index = plain.vectorstore
        assert isinstance(index, FaissIndex)
        searches.clear()
        search_rows = index.search_rows
        monkeypatch.setattr(index, "search_rows", counted_search)
        plain.batch(QUERIES)
        assert searches[0] == (len(QUERIES), fetch_k + 1)
        if fetch_k == 40:
            assert searches == [(len(QUERIES), 41)]
        assert len(fetches) == 1


class TestBatchCallbacks:
    def test_one_run_per_query_with_its_own_config(self) -> None:
        retriever = _retriever("window")
        handler = Counting()
        configs: list[Any] = [{"callbacks": [handler], "tags": [f"q{i}"]} for i in range(5)]
        got = retriever.batch(QUERIES[:5], config=configs)
        assert handler.starts == QUERIES[:5]
        assert handler.tags == [[f"q{i}"] for i in range(5)]
        assert handler.ends == [len(docs) for docs in got]
        assert handler.events == [RESOLUTION_EVENT] * 5
        assert handler.errors == []

    async def test_async_runs_fire_too(self) -> None:
        retriever = _retriever("parent")
        handler = Counting()
        await retriever.abatch(QUERIES[:4], config={"callbacks": [handler]})
        assert handler.starts == QUERIES[:4]
        assert len(handler.ends) == 4
        assert handler.events == [RESOLUTION_EVENT] * 4

    def test_bad_option_fails_every_query_and_reports_it(self) -> None:
        retriever = _retriever("window")
        handler = Counting()
        with pytest.raises(ValueError, match="k must be at least 1"):
            retriever.batch(QUERIES[:3], config={"callbacks": [handler]}, k=0)
        assert len(handler.errors) == 3
        got = retriever.batch(QUERIES[:3], return_exceptions=True, k=0)
        assert all(isinstance(e, ValueError) for e in got)

    def test_a_failing_query_fails_alone(self) -> None:
        retriever = _retriever("parent")
        victim = retriever.invoke(QUERIES[0], k=1)[0]
        retriever.docstore.mdelete([str(victim.id)])
        handler = Counting()
        queries = [QUERIES[0], "zzz unrelated words"]
        got = retriever.batch(queries, config={"callbacks": [handler]}, return_exceptions=True, k=1)
        assert isinstance(got[0], LookupError)
        assert len(handler.errors) == 1
        assert isinstance(got[1], list)
        assert got[1] == retriever.invoke(queries[1], k=1)
